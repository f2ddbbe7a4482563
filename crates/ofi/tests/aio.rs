//! The async layer: operations as futures over shm and tcp, shared by many
//! tasks, progress through the completion queue's fd (and busy polling),
//! MSG connection management, and dropping a future at every point of its
//! life without a use-after-free or a leak.
// The only unsafe code here is the IoBuf promise of the tracking buffer.
#![allow(unsafe_code)]

use ofi::aio::{Channel, Listener};
use ofi::safe::Addr;
use ofi::{Caps, EpType, ErrorKind, Hints, Info, IoBuf, IoBufMut};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime")
}

fn shm() -> Info {
    Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()
        .expect("shm offer")
}

/// A buffer that counts its drops (and so when its memory is freed).
#[derive(Debug)]
struct Tracked {
    v: Vec<u8>,
    drops: Arc<AtomicUsize>,
}

impl Tracked {
    fn new(v: Vec<u8>) -> (Tracked, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        (
            Tracked {
                v,
                drops: drops.clone(),
            },
            drops,
        )
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.v
    }
}

impl AsMut<[u8]> for Tracked {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v
    }
}

// SAFETY: the bytes are the Vec's heap memory, which does not move with it.
unsafe impl IoBuf for Tracked {}
// SAFETY: the bytes are the Vec's heap memory, which does not move with
// it, and `as_mut` returns the same slice as `as_ref`.
unsafe impl IoBufMut for Tracked {}

/// Polls a future once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    std::pin::Pin::new(f).poll(&mut cx)
}

/// Drives `ch` until `cond`.
fn drive_until(ch: &Channel, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        ch.progress();
        assert!(Instant::now() < deadline, "condition not reached");
    }
}

async fn exchange(a: &Channel, b: &Channel) {
    let to_b = a.insert(&b.address().unwrap()).unwrap();
    let rx = b.trecv(vec![0u8; 64], 9, 0);
    let sent = a.tsend(b"over the fd".to_vec(), to_b, 9).await;
    assert_eq!(sent.expect("sent").buf, b"over the fd");
    let got = rx.await.expect("received");
    assert_eq!((got.bytes(), got.tag), (&b"over the fd"[..], 9));
}

#[test]
fn tagged_exchange_sleeping_on_the_fd_and_busy_polling() {
    let info = shm();
    rt().block_on(async {
        let (a, b) = (Channel::open(&info).unwrap(), Channel::open(&info).unwrap());
        exchange(&a, &b).await;
        let (a, b) = (
            Channel::open_busy(&info).unwrap(),
            Channel::open_busy(&info).unwrap(),
        );
        exchange(&a, &b).await;
    });
}

#[test]
fn a_sleeping_receiver_is_woken_by_its_fd() {
    let info = shm();
    rt().block_on(async {
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        // The receiver runs first and sleeps (current-thread runtime: the
        // sender cannot run until it does).
        let rx = tokio::spawn({
            let b = b.clone();
            async move { b.recv(vec![0u8; 16]).await }
        });
        tokio::task::yield_now().await;
        a.send(b"wake up".to_vec(), to_b).await.unwrap();
        let got = rx.await.unwrap().unwrap();
        assert_eq!(got.bytes(), b"wake up");
    });
}

#[test]
fn many_tasks_share_one_channel() {
    let info = shm();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let (a, b) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..20u64 {
                    let tag = t << 32 | i;
                    let rx = b.trecv(vec![0u8; 8], tag, 0);
                    a.tsend(tag.to_ne_bytes().to_vec(), to_b, tag)
                        .await
                        .unwrap();
                    let got = rx.await.unwrap();
                    assert_eq!(got.tag, tag);
                    assert_eq!(got.buf, tag.to_ne_bytes());
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    });
}

#[test]
fn dropping_a_receive_at_every_point_frees_its_buffer_once_the_provider_is_done() {
    let info = shm();
    rt().block_on(async {
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();

        // Before the first poll: the receive is cancelled; the buffer goes
        // once the cancellation completes.
        let (buf, drops) = Tracked::new(vec![0; 16]);
        drop(b.recv(buf));
        assert_eq!(drops.load(Ordering::SeqCst), 0, "still posted");
        drive_until(&b, || drops.load(Ordering::SeqCst) == 1);

        // After a poll that found nothing.
        let (buf, drops) = Tracked::new(vec![0; 16]);
        let mut rx = b.recv(buf);
        assert!(poll_once(&mut rx).is_pending());
        drop(rx);
        drive_until(&b, || drops.load(Ordering::SeqCst) == 1);

        // After its completion was collected (by another operation's
        // progress) but before the future saw it: freed at once.
        let (buf, drops) = Tracked::new(vec![0; 16]);
        let rx = b.recv(buf);
        a.send(b"done".to_vec(), to_b).await.unwrap();
        let mut collected = 0;
        drive_until(&b, || {
            collected += b.progress();
            collected > 0
        });
        assert_eq!(b.in_flight(), 1, "collected, not yet taken");
        drop(rx);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert_eq!(b.in_flight(), 0);

        // After it resolved: polled again, it stays pending (no buffer left).
        let mut rx = b.recv(vec![0u8; 4]);
        a.send(b"once".to_vec(), to_b).await.unwrap();
        let got = (&mut rx).await.unwrap();
        assert_eq!((got.len, got.buf.len()), (4, 4));
        assert!(poll_once(&mut rx).is_pending());
        drop(rx);
        assert_eq!(a.in_flight() + b.in_flight(), 0);
    });
}

#[test]
fn a_dropped_send_keeps_its_buffer_until_the_peer_has_read_it() {
    let info = shm();
    rt().block_on(async {
        let a = Channel::open(&info).unwrap();
        let b = Channel::open(&info).unwrap();
        let to_b = a.insert(&b.address().unwrap()).unwrap();
        // Large enough for the provider to copy from the sender's memory
        // when the receiver asks (rendezvous), not at the post.
        let (buf, drops) = Tracked::new((0..200_000u32).map(|i| i as u8).collect());
        let mut tx = a.send(buf, to_b);
        assert!(poll_once(&mut tx).is_pending());
        drop(tx);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the provider may still read it"
        );
        assert_eq!(a.in_flight(), 1);
        // The receiver gets every byte intact, then the sender's
        // completion frees the abandoned buffer.
        let mut rx = pin!(b.recv(vec![0u8; 200_000]));
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Poll::Ready(v) = poll_once(&mut rx) {
                break v.unwrap();
            }
            drive_until(&a, || true);
            assert!(Instant::now() < deadline, "receive did not finish");
        };
        assert_eq!(got.len, 200_000);
        assert!(got.buf.iter().enumerate().all(|(i, &x)| x == i as u8));
        drive_until(&a, || drops.load(Ordering::SeqCst) == 1);
        assert_eq!(a.in_flight(), 0);
    });
}

#[test]
fn closing_or_dropping_the_channel_ends_operations_with_their_buffers() {
    let info = shm();
    rt().block_on(async {
        let b = Channel::open(&info).unwrap();
        let (buf, drops) = Tracked::new(vec![0; 16]);
        let rx = b.recv(buf);
        // The last handle goes: the future still resolves, with its buffer.
        drop(b);
        let e = rx.await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Canceled);
        let buf = e.buf.expect("a cancelled receive hands its buffer back");
        assert_eq!(buf.v.len(), 16);
        drop(buf);
        assert_eq!(drops.load(Ordering::SeqCst), 1);

        // An operation on a closed channel is an error value too.
        let c = Channel::open(&info).unwrap();
        c.close();
        assert!(c.is_closed());
        let e = c.send(vec![1u8; 3], Addr(0)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Disconnected);
        assert_eq!(e.buf, Some(vec![1u8; 3]));
        assert!(c.address().is_err());
    });
}

#[test]
fn refused_posts_resolve_at_once_with_the_buffer() {
    let info = shm();
    rt().block_on(async {
        let a = Channel::open(&info).unwrap();
        let e = a.send(vec![5u8; 10], Addr(4242)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.buf, Some(vec![5u8; 10]));
        let e = a.write(vec![1u8; 8], Addr(0), 0, 1).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(e.buf, Some(vec![1u8; 8]));
        assert_eq!(a.in_flight(), 0);
    });
}

#[test]
fn opening_outside_a_runtime_is_an_error_not_a_panic() {
    let info = shm();
    let e = Channel::open(&info).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadState, "{e}");
    // A runtime without its I/O driver.
    let no_io = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = no_io.block_on(async { Channel::open(&info).unwrap_err() });
    assert_eq!(e.kind(), ErrorKind::BadState, "{e}");
    // Busy polling needs no runtime at all.
    assert!(Channel::open_busy(&info).is_ok());
}

#[test]
fn msg_connections_are_accepted_and_made_asynchronously() {
    let info = Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Msg)
        .provider("tcp")
        .node("127.0.0.1")
        .service("0")
        .source(true)
        .first()
        .expect("tcp MSG offer");
    rt().block_on(async {
        let listener = Listener::bind(&info).unwrap();
        let addr = listener.address().unwrap();
        let server = tokio::spawn(async move {
            let ch = listener.accept().await.unwrap();
            let mut n = 0;
            loop {
                let Ok(got) = ch.recv(vec![0u8; 64]).await else {
                    break;
                };
                ch.send(got.bytes().to_vec(), Addr::PEER).await.unwrap();
                n += 1;
            }
            n
        });
        let client = Channel::connect(&info, &addr).await.unwrap();
        for i in 0..5u8 {
            let rx = client.recv(vec![0u8; 64]);
            client.send(vec![i; 10], Addr::PEER).await.unwrap();
            assert_eq!(rx.await.unwrap().bytes(), &[i; 10]);
        }
        drop(client);
        assert_eq!(server.await.unwrap(), 5);
    });
}

/// A receive buffer that owns a handle on a channel.
struct Holding {
    v: Vec<u8>,
    _ch: Channel,
}

impl AsRef<[u8]> for Holding {
    fn as_ref(&self) -> &[u8] {
        &self.v
    }
}

impl AsMut<[u8]> for Holding {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v
    }
}

// SAFETY: the bytes are the Vec's heap memory, which does not move with it.
unsafe impl IoBuf for Holding {}
// SAFETY: the bytes are the Vec's heap memory, which does not move with
// it, and `as_mut` returns the same slice as `as_ref`.
unsafe impl IoBufMut for Holding {}

#[test]
fn a_buffer_that_drops_the_last_handle_does_not_deadlock_the_channel() {
    let info = shm();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let a = Channel::open_busy(&info).unwrap();
        let mut other = a.recv(vec![0u8; 8]);
        // The abandoned receive's buffer holds the channel's last handle
        // once `a` goes; its cancellation is collected by `other`'s
        // progress, and dropping the buffer closes the channel.
        let rx = a.recv(Holding {
            v: vec![0; 16],
            _ch: a.clone(),
        });
        drop(rx);
        drop(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Poll::Ready(r) = poll_once(&mut other) {
                break r;
            }
            assert!(Instant::now() < deadline, "the channel never closed");
        };
        done.send(got.map(|d| d.len).map_err(|e| e.kind())).unwrap();
    });
    let got = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("the progress pass that dropped the buffer deadlocked");
    assert_eq!(got, Err(ErrorKind::Canceled), "closed with the last handle");
}
