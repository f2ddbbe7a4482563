//! The control channel: a TCP connection from the initiator to the
//! target's port, on which the two swap fabric addresses (the target learns
//! whom to expect and hands out the token CONNECT must carry) and which
//! stays open for the session's life, so either side learns at once when
//! the other dies (the socket closes, or, for a host that went silent,
//! [`keepalive`] gives up on it) and the target frees what the session
//! held.
//!
//! ```text
//! HELLO   (initiator → target): magic "OFISTOR2" | addr_len u16 BE | fabric address
//! WELCOME (target → initiator): magic "OFISTOR2" | status u16 BE | token u64 BE
//!                               | addr_len u16 BE | fabric address
//! ```

use crate::wire::Status;
use std::net::TcpStream;
use std::time::Duration;

/// How long either side waits for a silent peer of a control connection
/// (by default): TCP keepalive probes and `TCP_USER_TIMEOUT` end the
/// connection after it, and with it the session.
pub const LIVENESS: Duration = Duration::from_secs(10);

/// Makes `s` fail once its peer has answered nothing for about `within`
/// (whole seconds, 2 s to a day): keepalive probes after `within / 2` of
/// silence (at most 32767 s), then spread over the rest (at most 127:
/// Linux's limits), and the same bound on unacknowledged data
/// (`TCP_USER_TIMEOUT`, which also ends a probed connection once
/// `within` has passed without an answer).
pub fn keepalive(s: &TcpStream, within: Duration) -> std::io::Result<()> {
    use rustix::net::sockopt;
    let total = within.as_secs().clamp(2, 86_400);
    let idle = (total / 2).min(32_767);
    let probes = (total - idle).min(127);
    let every = (total - idle) / probes;
    sockopt::set_socket_keepalive(s, true)?;
    sockopt::set_tcp_keepidle(s, Duration::from_secs(idle))?;
    sockopt::set_tcp_keepintvl(s, Duration::from_secs(every))?;
    sockopt::set_tcp_keepcnt(s, probes as u32)?;
    sockopt::set_tcp_user_timeout(s, (total * 1000) as u32)?;
    Ok(())
}

/// First bytes of both messages (also the protocol version: 2 since a
/// fabric message may carry up to 32 capsules, which a version-1 peer
/// would misread; such a peer is refused here, at session setup).
pub const MAGIC: [u8; 8] = *b"OFISTOR2";
/// Longest fabric address accepted.
pub const MAX_ADDR: usize = 512;

/// Why control bytes were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// Not this protocol (or another version).
    Magic,
    /// An address longer than [`MAX_ADDR`] or empty.
    AddrLen(usize),
    /// An unknown status.
    Status(u16),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Magic => f.write_str("not an ofi storage control message (bad magic)"),
            ControlError::AddrLen(n) => write!(f, "fabric address of {n} bytes (1..={MAX_ADDR})"),
            ControlError::Status(s) => write!(f, "unknown status {s}"),
        }
    }
}

impl std::error::Error for ControlError {}

/// HELLO's bytes.
pub fn hello(addr: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&(addr.len() as u16).to_be_bytes());
    v.extend_from_slice(addr);
    v
}

/// WELCOME's bytes.
pub fn welcome(status: Status, token: u64, addr: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&(status as u16).to_be_bytes());
    v.extend_from_slice(&token.to_be_bytes());
    v.extend_from_slice(&(addr.len() as u16).to_be_bytes());
    v.extend_from_slice(addr);
    v
}

fn addr_at(b: &[u8], at: usize) -> Result<Option<(Vec<u8>, usize)>, ControlError> {
    let Some(l) = b.get(at..at + 2) else {
        return Ok(None);
    };
    let n = u16::from_be_bytes([l[0], l[1]]) as usize;
    if n == 0 || n > MAX_ADDR {
        return Err(ControlError::AddrLen(n));
    }
    Ok(b.get(at + 2..at + 2 + n).map(|a| (a.to_vec(), at + 2 + n)))
}

fn magic(b: &[u8]) -> Result<bool, ControlError> {
    let n = b.len().min(8);
    if b[..n] != MAGIC[..n] {
        return Err(ControlError::Magic);
    }
    Ok(n == 8)
}

/// Parses a HELLO from the start of `b`: `Ok(None)` until it is whole,
/// then the address and the bytes it took.
pub fn parse_hello(b: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ControlError> {
    if !magic(b)? {
        return Ok(None);
    }
    addr_at(b, 8)
}

/// A parsed WELCOME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// Ok, or why the target refuses (busy, shutting down).
    pub status: Status,
    /// The token CONNECT must carry.
    pub token: u64,
    /// The target's fabric address.
    pub addr: Vec<u8>,
}

/// The private data of an MSG connection the target rejects: why, as a
/// status (u16 BE). (An accepted one carries the session's token.)
pub fn refusal(status: Status) -> [u8; 2] {
    (status as u16).to_be_bytes()
}

/// The status in a rejection's private data, if it is one.
pub fn parse_refusal(b: &[u8]) -> Option<Status> {
    let b: [u8; 2] = b.try_into().ok()?;
    Status::from_u16(u16::from_be_bytes(b))
}

/// Parses a WELCOME from the start of `b`, as [`parse_hello`].
pub fn parse_welcome(b: &[u8]) -> Result<Option<(Welcome, usize)>, ControlError> {
    if !magic(b)? || b.len() < 18 {
        return Ok(None);
    }
    let s = u16::from_be_bytes([b[8], b[9]]);
    let status = Status::from_u16(s).ok_or(ControlError::Status(s))?;
    let mut t = [0u8; 8];
    t.copy_from_slice(&b[10..18]);
    Ok(addr_at(b, 18)?.map(|(addr, n)| {
        (
            Welcome {
                status,
                token: u64::from_be_bytes(t),
                addr,
            },
            n,
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_HELLO: &[u8] = b"OFISTOR2\x00\x03abc";
    const GOLDEN_WELCOME: &[u8] = b"OFISTOR2\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x00\x02xy";

    #[test]
    fn keepalive_takes_every_bound_it_is_given() {
        use rustix::net::sockopt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        for (within, idle, every, probes, user_ms) in [
            (Duration::ZERO, 1, 1, 1, 2_000),
            (Duration::from_millis(2500), 1, 1, 1, 2_000),
            (Duration::from_secs(10), 5, 1, 5, 10_000),
            (Duration::from_secs(86_400), 32_767, 422, 127, 86_400_000),
            (Duration::MAX, 32_767, 422, 127, 86_400_000),
        ] {
            keepalive(&s, within).unwrap_or_else(|e| panic!("{within:?}: {e}"));
            assert!(sockopt::socket_keepalive(&s).unwrap());
            let got = (
                sockopt::tcp_keepidle(&s).unwrap().as_secs(),
                sockopt::tcp_keepintvl(&s).unwrap().as_secs(),
                sockopt::tcp_keepcnt(&s).unwrap(),
                sockopt::tcp_user_timeout(&s).unwrap(),
            );
            assert_eq!(got, (idle, every, probes, user_ms), "{within:?}");
        }
    }

    #[test]
    fn a_version_one_peer_is_refused_at_setup() {
        assert_eq!(
            parse_hello(b"OFISTOR1\x00\x03abc"),
            Err(ControlError::Magic)
        );
    }

    #[test]
    fn golden_bytes() {
        assert_eq!(hello(b"abc"), GOLDEN_HELLO);
        assert_eq!(parse_hello(GOLDEN_HELLO), Ok(Some((b"abc".to_vec(), 13))));
        assert_eq!(
            welcome(Status::Ok, 0x0102030405060708, b"xy"),
            GOLDEN_WELCOME
        );
        let w = parse_welcome(GOLDEN_WELCOME).unwrap().unwrap();
        assert_eq!(
            (w.0.token, w.0.addr.as_slice(), w.1),
            (0x0102030405060708, &b"xy"[..], 22)
        );
    }

    #[test]
    fn partial_and_bad_input() {
        for n in 0..GOLDEN_HELLO.len() {
            assert_eq!(parse_hello(&GOLDEN_HELLO[..n]), Ok(None), "{n}");
        }
        for n in 0..GOLDEN_WELCOME.len() {
            assert_eq!(parse_welcome(&GOLDEN_WELCOME[..n]), Ok(None), "{n}");
        }
        assert_eq!(parse_hello(b"GET / HTTP/1.1"), Err(ControlError::Magic));
        assert_eq!(
            parse_hello(b"OFISTOR2\x00\x00"),
            Err(ControlError::AddrLen(0))
        );
        assert_eq!(
            parse_hello(b"OFISTOR2\xff\xff"),
            Err(ControlError::AddrLen(65535))
        );
        assert_eq!(parse_refusal(&refusal(Status::Busy)), Some(Status::Busy));
        assert_eq!(parse_refusal(b"\x00"), None);
        assert_eq!(parse_refusal(b"\x00\xc8"), None);
        let mut w = GOLDEN_WELCOME.to_vec();
        w[9] = 200;
        assert_eq!(parse_welcome(&w), Err(ControlError::Status(200)));
    }
}
