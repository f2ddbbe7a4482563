//! Messages on the safe layer between two shm channels in one process:
//! plain sends and receives, tagged ones matched out of order, buffers of
//! three kinds (`Vec<u8>`, `Box<[u8]>`, a pooled buffer reused without
//! allocating), a truncated receive reported with its buffer, and `?`
//! on every call.
//!
//! Run with `cargo run --release -p ofi --example safe_msg`.

use ofi::safe::{BufPool, Channel};
use ofi::{Caps, EpType, ErrorKind, Hints, Result};
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn main() -> Result<()> {
    let info = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()?;
    print!("{}", info.summary());
    let (client, server) = (Channel::open(&info)?, Channel::open(&info)?);
    let to_server = client.insert(&server.address()?)?;

    // Untagged: a Vec in, the same Vec out with the message in it.
    let mut rx = server.recv(vec![0u8; 64])?;
    client.send(b"plain hello".to_vec(), to_server)?.wait(T)?;
    let got = rx.wait(T)?;
    println!(
        "server got {:?} ({} bytes)",
        String::from_utf8_lossy(got.bytes()),
        got.len
    );

    // Tagged: two receives, matched by tag whatever the order of arrival.
    let mut by_tag2 = server.trecv(vec![0u8; 32].into_boxed_slice(), 2, 0)?;
    let mut by_tag1 = server.trecv(vec![0u8; 32].into_boxed_slice(), 1, 0)?;
    let mut s1 = client.tsend(b"tag one".to_vec(), to_server, 1)?;
    let mut s2 = client.tsend(b"tag two".to_vec(), to_server, 2)?;
    for (name, op) in [("tag 1", &mut by_tag1), ("tag 2", &mut by_tag2)] {
        let d = op.wait(T)?;
        println!(
            "{name}: {:?} (tag {})",
            String::from_utf8_lossy(d.bytes()),
            d.tag
        );
    }
    s1.wait(T)?;
    s2.wait(T)?;

    // Pooled buffers: taken and given back, no allocation per message.
    let pool = BufPool::new(4, 256);
    for i in 0..8u8 {
        let rbuf = pool.take().expect("a free buffer");
        let mut sbuf = pool.take().expect("a free buffer");
        sbuf.as_mut()[..3].copy_from_slice(&[b'#', b'0' + i, b'!']);
        sbuf.set_len(3);
        let mut rx = server.recv(rbuf)?;
        client.send(sbuf, to_server)?.wait(T)?;
        let d = rx.wait(T)?;
        assert_eq!(d.bytes(), &[b'#', b'0' + i, b'!']);
    }
    assert_eq!(pool.available(), 4, "every pooled buffer came back");
    println!("8 messages through 4 pooled buffers");

    // A message longer than the receive buffer: the error hands it back.
    let mut small = server.recv(vec![0u8; 4])?;
    client.send(vec![7u8; 100], to_server)?.wait(T)?;
    let e = small.wait(T).expect_err("truncated");
    assert_eq!(e.kind(), ErrorKind::Truncated);
    println!(
        "truncated receive: {} ({} bytes did not fit, buffer of {} back)",
        e.error,
        e.overflow,
        e.buf.map_or(0, |b| b.len())
    );
    assert_eq!(client.in_flight() + server.in_flight(), 0);
    Ok(())
}
