//! The safe layer's MSG channels over tcp: one listening channel accepts
//! several connections on one completion queue, each named by its address;
//! messages and RMA go per connection, private data travels with connect
//! and accept, a refused connect and a peer's shutdown are events, and a
//! closed connection's address is refused afterwards.

use ofi::safe::{Addr, Channel, CmEvent};
use ofi::{Caps, EpType, ErrorKind, Hints, Info, MrAccess};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn offer(service: &str, source: bool) -> Info {
    Hints::new()
        .caps(Caps::MSG | Caps::RMA)
        .ep_type(EpType::Msg)
        .provider("tcp")
        .node("127.0.0.1")
        .service(service)
        .source(source)
        .first()
        .expect("tcp MSG offer with FI_RMA")
}

/// The next connection event of `ch`, driving its completion queue too.
fn event(ch: &Channel) -> CmEvent {
    let deadline = Instant::now() + T;
    loop {
        let _ = ch.poll();
        if let Some(ev) = ch.cm_wait(Duration::from_millis(10)).unwrap() {
            return ev;
        }
        assert!(Instant::now() < deadline, "no connection event");
    }
}

/// Connects a new client channel to `server`, which accepts with `token`.
fn connect(server: &Channel, addr: &[u8], token: u8) -> (Channel, Addr, Addr) {
    let client = Channel::open(&offer("0", false)).unwrap();
    let c = client.connect(addr, b"hello").unwrap();
    let req = match event(server) {
        CmEvent::Request(r) => r,
        e => panic!("expected a request, got {e:?}"),
    };
    assert_eq!(req.data, b"hello");
    let s = server.accept(req, &[token]).unwrap();
    match event(&client) {
        CmEvent::Connected { conn, data } => {
            assert_eq!(conn, c);
            assert_eq!(data, [token]);
        }
        e => panic!("expected the connection, got {e:?}"),
    }
    // The accepting side hears of it too, naming the accepted connection.
    match event(server) {
        CmEvent::Connected { conn, .. } => assert_eq!(conn, s),
        e => panic!("expected the accepted connection, got {e:?}"),
    }
    (client, c, s)
}

#[test]
fn connections_share_one_channel_and_are_told_apart() {
    let server = Channel::open(&offer("0", true)).unwrap();
    server.listen().unwrap();
    let addr = server.address().unwrap();
    let (a, a_conn, sa) = connect(&server, &addr, 1);
    let (b, b_conn, sb) = connect(&server, &addr, 2);
    assert_ne!(sa, sb);
    // A message on each connection lands in the receive posted on it.
    let mut ra = server.recv_on(vec![0u8; 64], sa).unwrap();
    let mut rb = server.recv_on(vec![0u8; 64], sb).unwrap();
    b.inject(b"from b", b_conn).unwrap();
    a.inject(b"from a", a_conn).unwrap();
    assert_eq!(ra.wait(T).unwrap().bytes(), b"from a");
    assert_eq!(rb.wait(T).unwrap().bytes(), b"from b");
    // The server writes into and reads from each client's region.
    let region = a.register(
        vec![7u8; 32],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    );
    let region = region.unwrap();
    let mut w = server
        .write(vec![9u8; 8], sa, region.remote_addr(4), region.key())
        .unwrap();
    // The client's endpoint carries the access out while it is driven.
    let deadline = Instant::now() + T;
    let done = loop {
        let _ = a.poll();
        let _ = server.poll();
        if let Some(r) = w.check() {
            break r;
        }
        assert!(Instant::now() < deadline, "write never completed");
    };
    done.unwrap();
    let mut r = server
        .read(vec![0u8; 16], sa, region.remote_addr(0), region.key())
        .unwrap();
    let deadline = Instant::now() + T;
    let got = loop {
        let _ = a.poll();
        let _ = server.poll();
        if let Some(r) = r.check() {
            break r.unwrap();
        }
        assert!(Instant::now() < deadline, "read never completed");
    };
    assert_eq!(got.buf, [7, 7, 7, 7, 9, 9, 9, 9, 9, 9, 9, 9, 7, 7, 7, 7]);
    // b goes away: the server hears of it on b's connection only.
    drop(b);
    match event(&server) {
        CmEvent::Shutdown { conn } => assert_eq!(conn, sb),
        e => panic!("expected b's shutdown, got {e:?}"),
    }
    server.disconnect(sb).unwrap();
    let e = server.inject(b"late", sb).unwrap_err();
    assert_eq!(e.code(), ofi::errno::FI_ENOTCONN, "{e}");
    assert!(server.disconnect(sb).is_err());
    // a still works.
    let mut ra = server.recv_on(vec![0u8; 64], sa).unwrap();
    a.inject(b"still here", a_conn).unwrap();
    assert_eq!(ra.wait(T).unwrap().bytes(), b"still here");
    drop(region);
}

#[test]
fn a_rejected_or_refused_connect_is_a_failed_event() {
    let server = Channel::open(&offer("0", true)).unwrap();
    server.listen().unwrap();
    let client = Channel::open(&offer("0", false)).unwrap();
    let c = client.connect(&server.address().unwrap(), &[]).unwrap();
    match event(&server) {
        CmEvent::Request(r) => server.reject(r, b"busy").unwrap(),
        e => panic!("expected a request, got {e:?}"),
    }
    match event(&client) {
        CmEvent::Failed { conn, error, .. } => {
            assert_eq!(conn, Some(c));
            assert_eq!(error.code(), ofi::errno::FI_ECONNREFUSED, "{error}");
        }
        e => panic!("expected a refusal, got {e:?}"),
    }
    // Nobody listens at a closed listener's address.
    let gone = server.address().unwrap();
    drop(server);
    client.connect(&gone, &[]).unwrap();
    assert!(matches!(event(&client), CmEvent::Failed { .. }));
}

#[test]
fn connection_calls_belong_to_msg_channels() {
    let rdm = Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Rdm)
        .provider("tcp")
        .first()
        .unwrap();
    let ch = Channel::open(&rdm).unwrap();
    assert_eq!(ch.listen().unwrap_err().code(), ofi::errno::FI_EINVAL);
    assert!(ch.cm_event().is_err());
    let msg = Channel::open(&offer("0", false)).unwrap();
    assert!(msg.insert(b"x").is_err());
    // Without a connection there is nobody to send to or receive from.
    assert!(msg.inject(b"x", Addr(1)).is_err());
    assert!(msg.recv(vec![0u8; 8]).is_err());
    assert!(msg.address().is_err());
}

#[test]
fn a_cancel_reaches_the_receive_on_its_own_connection() {
    let server = Channel::open(&offer("0", true)).unwrap();
    server.listen().unwrap();
    let addr = server.address().unwrap();
    let (a, a_conn, sa) = connect(&server, &addr, 1);
    let (_b, _b_conn, sb) = connect(&server, &addr, 2);
    // Receives on both connections; the one on b's is cancelled, and
    // dropping one on a's cancels it too: a's next message lands in the
    // receive posted after them.
    let mut rb = server.recv_on(vec![3u8; 16], sb).unwrap();
    let dropped = server.recv_on(vec![0u8; 16], sa).unwrap();
    drop(dropped);
    rb.cancel().unwrap();
    let e = rb.wait(T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Canceled);
    assert_eq!(e.buf, Some(vec![3u8; 16]));
    let mut ra = server.recv_on(vec![0u8; 16], sa).unwrap();
    a.inject(b"after", a_conn).unwrap();
    assert_eq!(ra.wait(T).unwrap().bytes(), b"after");
    let deadline = Instant::now() + T;
    while server.in_flight() > 0 {
        let _ = server.poll();
        assert!(
            Instant::now() < deadline,
            "the dropped receive stays in flight"
        );
    }
}
