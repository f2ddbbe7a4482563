//! The tcp handshake with an auth key fed a hostile byte stream, on
//! either side (`auth_stream`).

use super::Rng;
use ofi_proto::tcp::{Config, Conn, Event, Rx, RxConfig, Target, TxSlice};
use ofi_wire::tcp;

/// What one [`auth_stream`] run reached (for tests of the harness).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthReached {
    /// Connection requests reported (acceptor).
    pub conn_requests: usize,
    /// Connected events.
    pub connected: usize,
    /// Authentication failures.
    pub auth_failed: usize,
    /// Protocol errors.
    pub protocol_error: usize,
    /// Frames written, by opcode (index = op).
    pub written_ops: [usize; 16],
}

/// The key every [`auth_stream`] connection holds.
pub const AUTH_KEY: &[u8] = b"fuzz-job-key";
/// The address the connector claims.
pub const AUTH_ADDR: &[u8] = b"fuzzer:9";

fn handshake_frame(op: u8, data: u64, id: u64, payload: &[u8]) -> Vec<u8> {
    let r = tcp::Repr {
        op,
        len: payload.len() as u64,
        data,
        id,
        ..Default::default()
    };
    let mut v = r.to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// Feeds arbitrary bytes to a connection that holds an auth key, on either
/// side of the handshake (HELLO with a nonce, CHALLENGE, PROOF; see
/// `ofi_wire::tcp`). Must never panic; a connector must never report
/// Connected, nor an acceptor a connection request, unless the peer proved
/// the key (only the harness's own valid handshake can: the fuzzer cannot
/// forge an HMAC it never sees).
///
/// Input: `[ctl, seed, body...]`. `ctl` bit 0: acceptor (else connector);
/// bit 1: the harness first plays its half of a valid handshake, so
/// `body` then reaches the connected states; bit 2: the harness's side of
/// that handshake uses another key (a refused handshake).
pub fn auth_stream(data: &[u8]) -> AuthReached {
    use ofi_core::util::auth::AuthKey;
    let [ctl, seed, body @ ..] = data else {
        return AuthReached::default();
    };
    let (acceptor, valid, other_key) = (ctl & 1 != 0, ctl & 2 != 0, ctl & 4 != 0);
    let cfg = Config {
        eager_max: 64,
        data_chunk: 48,
        max_frame: 4096,
        max_cm_data: 16,
        max_addr_len: 16,
        max_msg_size: 1 << 16,
        ..Config::default()
    };
    let key = AuthKey::new(AUTH_KEY).unwrap().unwrap();
    let peer_key = if other_key {
        AuthKey::new(b"another-key").unwrap().unwrap()
    } else {
        key.clone()
    };
    let mine = [*seed; tcp::NONCE_LEN];
    let theirs = [seed.wrapping_add(1); tcp::NONCE_LEN];
    let mut conn = if acceptor {
        Conn::incoming(7, 3, cfg).with_auth(key, mine)
    } else {
        Conn::connect(7, 3, cfg, AUTH_ADDR, b"pd")
            .expect("connect")
            .with_auth(key, mine)
    };
    let mut rx = Rx::new(RxConfig {
        max_unexpected_bytes: 4096,
        min_multi_recv: 0,
        depth: 4,
    });
    // The harness's half of a valid handshake, built from the transcript
    // the wire module documents (an independent check of the core's MACs).
    let mut stream = Vec::new();
    let acceptor_label: &[u8] = b"ofi-tcp-v1 acceptor";
    let connector_label: &[u8] = b"ofi-tcp-v1 connector";
    if valid && acceptor {
        let mut p = AUTH_ADDR.to_vec();
        p.extend_from_slice(&theirs);
        p.extend_from_slice(b"pd");
        stream.extend(handshake_frame(
            tcp::op::HELLO,
            AUTH_ADDR.len() as u64,
            tcp::NONCE_LEN as u64,
            &p,
        ));
        let proof = peer_key.mac(&[connector_label, AUTH_ADDR, &theirs, &mine]);
        stream.extend(handshake_frame(tcp::op::PROOF, 0, 0, &proof));
    } else if valid {
        let proof = peer_key.mac(&[acceptor_label, AUTH_ADDR, &mine, &theirs]);
        stream.extend(handshake_frame(
            tcp::op::CHALLENGE,
            0,
            0,
            &tcp::challenge_payload(&theirs, &proof),
        ));
        stream.extend(handshake_frame(tcp::op::ACCEPT, 0, 0, b""));
    }
    stream.extend_from_slice(body);
    let mut seen = AuthReached::default();
    let mut written = Vec::new();
    let mut rng = Rng::new(u64::from(*seed));
    let mut at = 0;
    let mut steps = 0;
    loop {
        while let Some(e) = conn.poll_event() {
            match e {
                Event::ConnRequest { ref peer_addr, .. } => {
                    seen.conn_requests += 1;
                    assert_eq!(peer_addr, AUTH_ADDR, "a request for an unproven address");
                    let _ = conn.accept(b"");
                }
                Event::Connected { .. } => seen.connected += 1,
                Event::AuthFailed { .. } => seen.auth_failed += 1,
                Event::ProtocolError(_) => seen.protocol_error += 1,
                _ => {}
            }
        }
        while rx.poll_event().is_some() {}
        while rx.next_wakeup().is_some() {}
        let limit = rng.split();
        let mut n = 0;
        {
            let t = conn.poll_transmit(&mut rx);
            for s in t.iter() {
                if n >= limit {
                    break;
                }
                let k = s.len().min(limit - n);
                if let TxSlice::Bytes(b) = s {
                    written.extend_from_slice(&b[..k]);
                }
                n += k;
            }
        }
        if n > 0 {
            conn.on_written(n);
            continue;
        }
        if at >= stream.len() {
            break;
        }
        steps += 1;
        assert!(steps < 8 * stream.len() + 1000, "no progress");
        let avail = (stream.len() - at).min(rng.split());
        let got = match conn.recv_target(&mut rx) {
            Target::Header(b) | Target::Buffer(b) => {
                let k = avail.min(b.len());
                b[..k].copy_from_slice(&stream[at..at + k]);
                k
            }
            // No receive is ever posted: payloads go to core buffers or
            // are discarded; a payload target would be a bug.
            Target::Payload(_) => panic!("a payload target without a posted receive"),
            Target::Discard(left) => avail.min(left),
            Target::Blocked | Target::Closed => break,
        };
        at += got;
        conn.on_read(got, &mut rx);
    }
    // The ops written (headers are whole in `written`: user ranges never
    // appear, nothing is sent but control frames).
    let mut w = &written[..];
    while w.len() >= tcp::HDR_LEN {
        let Ok(r) = tcp::Repr::parse(&tcp::Header::new_unchecked(w), 1 << 20) else {
            break;
        };
        seen.written_ops[usize::from(r.op).min(15)] += 1;
        let end = (tcp::HDR_LEN + r.len as usize).min(w.len());
        w = &w[end..];
    }
    if !valid || other_key {
        assert_eq!(
            seen.conn_requests, 0,
            "an acceptor authenticated a peer without the key"
        );
        assert_eq!(
            seen.connected, 0,
            "a connector connected to a peer without the key"
        );
    }
    conn.on_eof(&mut rx);
    while conn.poll_event().is_some() {}
    rx.close(ofi_core::error::errno::FI_ECANCELED);
    seen
}
