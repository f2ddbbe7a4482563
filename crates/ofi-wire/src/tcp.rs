//! The tcp frame header: 40 bytes preceding every frame on a TCP stream,
//! followed by `len` payload bytes. All fields little-endian.
//!
//! ```text
//!  0  magic u8 (0x6f) | 1 version u8 (1) | 2 op u8 | 3 flags u8
//!  4  reserved u32     must be 0
//!  8  len u64          payload bytes that follow this header in this frame
//! 16  tag u64
//! 24  data u64
//! 32  id u64
//! 40  payload
//! ```
//!
//! What each opcode carries:
//!
//! | op       | payload                              | tag            | data                  | id               |
//! |----------|--------------------------------------|----------------|-----------------------|------------------|
//! | HELLO    | connector's address, then CM data    | protocol flags | length of the address | 0 (reserved)     |
//! | ACCEPT   | CM data                              | protocol flags | 0                     | 0                |
//! | REJECT   | CM data                              | 0              | reason ([`reject`])   | 0                |
//! | MSG      | the whole message                    | tag            | remote CQ data        | message length   |
//! | RTS      | 8 bytes: the message length (u64 LE) | tag            | remote CQ data        | rendezvous id    |
//! | CTS      | none                                 | 0              | bytes wanted          | rendezvous id    |
//! | DATA     | the next bytes of a rendezvous       | 0              | 0                     | rendezvous id    |
//! | SHUTDOWN | none                                 | 0              | 0                     | 0                |
//!
//! `len` is always the number of payload bytes after this header, so a
//! reader can stay in sync without understanding a frame. A rendezvous
//! message's length rides in the RTS payload for that reason. The CTS `data`
//! field is how many bytes the receiver wants (at most the message length:
//! less when its buffer is smaller, 0 when it discards the message); the
//! sender then sends exactly that many bytes in one or more DATA frames.
//! Only MSG and RTS may carry flags.

use crate::WireError;

/// Header length.
pub const HDR_LEN: usize = 40;
/// First byte of every header.
pub const MAGIC: u8 = 0x6f;
/// Protocol version this module speaks.
pub const VERSION: u8 = 1;
/// Payload length of an RTS frame (the message length).
pub const RTS_PAYLOAD_LEN: usize = 8;

/// Opcodes.
pub mod op {
    /// Connection request: the connector's address and CM private data.
    pub const HELLO: u8 = 1;
    /// Connection accepted: CM private data.
    pub const ACCEPT: u8 = 2;
    /// Connection rejected: CM private data; `data` holds the reason.
    pub const REJECT: u8 = 3;
    /// An eager message, payload inline.
    pub const MSG: u8 = 4;
    /// Request to send a large message (rendezvous).
    pub const RTS: u8 = 5;
    /// Clear to send: the receiver matched an RTS.
    pub const CTS: u8 = 6;
    /// Payload bytes of a rendezvous message.
    pub const DATA: u8 = 7;
    /// Orderly end of the connection.
    pub const SHUTDOWN: u8 = 8;
    /// Highest known opcode.
    pub const MAX: u8 = 8;
}

/// Flag bits (MSG and RTS only).
pub mod flag {
    /// Tagged message.
    pub const TAGGED: u8 = 1;
    /// `data` carries remote CQ data.
    pub const CQ_DATA: u8 = 2;
    /// Every known flag.
    pub const ALL: u8 = TAGGED | CQ_DATA;
}

/// REJECT reasons (the `data` field).
pub mod reject {
    /// The application rejected the request.
    pub const USER: u64 = 0;
    /// Two connections crossed (both sides connected at once) and this one
    /// lost; the peer's own connection carries the traffic.
    pub const SIMULTANEOUS: u64 = 1;
}

mod field {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const OP: usize = 2;
    pub const FLAGS: usize = 3;
    pub const RESERVED: usize = 4;
    pub const LEN: usize = 8;
    pub const TAG: usize = 16;
    pub const DATA: usize = 24;
    pub const ID: usize = 32;
}

/// A checked view of a frame header (and whatever payload bytes follow it
/// in the buffer).
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checks (setters on a fresh buffer).
    pub const fn new_unchecked(buf: T) -> Self {
        Header { buf }
    }
    /// Wraps a buffer after checking it holds a whole header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let h = Header { buf };
        h.check_len()?;
        Ok(h)
    }
    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buf.as_ref().len() < HDR_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }
    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buf
    }
    fn u64_at(&self, at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.buf.as_ref()[at..at + 8]);
        u64::from_le_bytes(a)
    }
    /// Magic byte.
    #[inline]
    pub fn magic(&self) -> u8 {
        self.buf.as_ref()[field::MAGIC]
    }
    /// Protocol version.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VERSION]
    }
    /// Opcode.
    #[inline]
    pub fn op(&self) -> u8 {
        self.buf.as_ref()[field::OP]
    }
    /// Flags.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    /// Reserved word (0 on the wire).
    #[inline]
    pub fn reserved(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_le_bytes([
            b[field::RESERVED],
            b[field::RESERVED + 1],
            b[field::RESERVED + 2],
            b[field::RESERVED + 3],
        ])
    }
    /// Payload bytes that follow the header in this frame.
    #[inline]
    pub fn len(&self) -> u64 {
        self.u64_at(field::LEN)
    }
    /// True when the frame has no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Tag (MSG, RTS) or protocol flags (HELLO, ACCEPT).
    #[inline]
    pub fn tag(&self) -> u64 {
        self.u64_at(field::TAG)
    }
    /// Remote CQ data, address length (HELLO), reason (REJECT) or bytes wanted (CTS).
    #[inline]
    pub fn data(&self) -> u64 {
        self.u64_at(field::DATA)
    }
    /// Message length (MSG) or rendezvous id (RTS, CTS, DATA).
    #[inline]
    pub fn id(&self) -> u64 {
        self.u64_at(field::ID)
    }
    /// Bytes after the header in the buffer (the payload, or part of it).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HDR_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn set_u64(&mut self, at: usize, v: u64) {
        self.buf.as_mut()[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets the magic byte.
    pub fn set_magic(&mut self, v: u8) {
        self.buf.as_mut()[field::MAGIC] = v;
    }
    /// Sets the version.
    pub fn set_version(&mut self, v: u8) {
        self.buf.as_mut()[field::VERSION] = v;
    }
    /// Sets the opcode.
    pub fn set_op(&mut self, v: u8) {
        self.buf.as_mut()[field::OP] = v;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::FLAGS] = v;
    }
    /// Sets the reserved word.
    pub fn set_reserved(&mut self, v: u32) {
        self.buf.as_mut()[field::RESERVED..field::RESERVED + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets the payload length.
    pub fn set_len(&mut self, v: u64) {
        self.set_u64(field::LEN, v)
    }
    /// Sets the tag.
    pub fn set_tag(&mut self, v: u64) {
        self.set_u64(field::TAG, v)
    }
    /// Sets the data word.
    pub fn set_data(&mut self, v: u64) {
        self.set_u64(field::DATA, v)
    }
    /// Sets the id.
    pub fn set_id(&mut self, v: u64) {
        self.set_u64(field::ID, v)
    }
    /// Mutable bytes after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HDR_LEN..]
    }
}

/// A parsed, validated frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repr {
    /// Opcode.
    pub op: u8,
    /// Flags.
    pub flags: u8,
    /// Payload bytes following the header.
    pub len: u64,
    /// Tag or protocol flags.
    pub tag: u64,
    /// Data word (meaning depends on the opcode).
    pub data: u64,
    /// Id word (meaning depends on the opcode).
    pub id: u64,
}

impl Repr {
    /// Parses and validates a header. `max_payload` is the largest `len`
    /// the reader accepts in any frame.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>, max_payload: u64) -> Result<Repr, WireError> {
        h.check_len()?;
        if h.magic() != MAGIC {
            return Err(WireError::Malformed("bad magic"));
        }
        if h.version() != VERSION {
            return Err(WireError::Malformed("unsupported version"));
        }
        let r = Repr {
            op: h.op(),
            flags: h.flags(),
            len: h.len(),
            tag: h.tag(),
            data: h.data(),
            id: h.id(),
        };
        if r.op == 0 || r.op > op::MAX {
            return Err(WireError::UnknownOp(r.op));
        }
        if r.flags & !flag::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        if r.flags != 0 && r.op != op::MSG && r.op != op::RTS {
            return Err(WireError::Malformed("flags on a frame that takes none"));
        }
        if h.reserved() != 0 {
            return Err(WireError::Malformed("nonzero reserved field"));
        }
        if r.len > max_payload {
            return Err(WireError::Malformed("payload longer than the maximum"));
        }
        match r.op {
            op::HELLO if r.data > r.len => {
                return Err(WireError::Malformed(
                    "HELLO address longer than its payload",
                ))
            }
            op::MSG if r.id != r.len => {
                return Err(WireError::Malformed("MSG length differs from its payload"))
            }
            op::RTS if r.len != RTS_PAYLOAD_LEN as u64 => {
                return Err(WireError::Malformed("RTS payload is not 8 bytes"))
            }
            op::CTS | op::SHUTDOWN if r.len != 0 => {
                return Err(WireError::Malformed("payload on a frame that takes none"))
            }
            op::DATA if r.len == 0 => return Err(WireError::Malformed("empty DATA frame")),
            _ => {}
        }
        Ok(r)
    }
    /// Writes the header (magic, version and a zero reserved word included).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        h.set_magic(MAGIC);
        h.set_version(VERSION);
        h.set_op(self.op);
        h.set_flags(self.flags);
        h.set_reserved(0);
        h.set_len(self.len);
        h.set_tag(self.tag);
        h.set_data(self.data);
        h.set_id(self.id);
    }
    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        self.emit(&mut Header::new_unchecked(&mut b[..]));
        b
    }
}

/// Encodes an RTS payload (the message length).
pub fn rts_payload(size: u64) -> [u8; RTS_PAYLOAD_LEN] {
    size.to_le_bytes()
}

/// Decodes an RTS payload; `None` unless exactly 8 bytes.
pub fn parse_rts_payload(p: &[u8]) -> Option<u64> {
    let a: [u8; RTS_PAYLOAD_LEN] = p.try_into().ok()?;
    Some(u64::from_le_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 20;

    static GOLDEN_MSG: [u8; 48] = [
        0x6f, 0x01, 0x04, 0x03, 0x00, 0x00, 0x00,
        0x00, // magic, v1, MSG, TAGGED|CQ_DATA, reserved
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 8
        0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, // tag 0xdeadbeef
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 42
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id = total 8
        b'p', b'i', b'n', b'g', b'p', b'o', b'n', b'g',
    ];

    fn golden_msg() -> Repr {
        Repr {
            op: op::MSG,
            flags: flag::TAGGED | flag::CQ_DATA,
            len: 8,
            tag: 0xdead_beef,
            data: 42,
            id: 8,
        }
    }

    static GOLDEN_RTS: [u8; 48] = [
        0x6f, 0x01, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00, // magic, v1, RTS, TAGGED
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 8 (the size word)
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 7
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // rendezvous id 3
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // message size 1 MiB
    ];

    fn golden_rts() -> Repr {
        Repr {
            op: op::RTS,
            flags: flag::TAGGED,
            len: 8,
            tag: 7,
            data: 0,
            id: 3,
        }
    }

    static GOLDEN_HELLO: [u8; 49] = [
        0x6f, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, HELLO
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 9
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // protocol flags 1
        0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // address: 6 bytes
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
        0x0a, 0x00, 0x00, 0x01, 0x1f, 0x90, // 10.0.0.1:8080
        b'h', b'i', b'!', // private data
    ];

    fn golden_hello() -> Repr {
        Repr {
            op: op::HELLO,
            flags: 0,
            len: 9,
            tag: 1,
            data: 6,
            id: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let h = Header::new_checked(&GOLDEN_MSG[..]).unwrap();
        assert_eq!(h.magic(), MAGIC);
        assert_eq!(h.version(), VERSION);
        assert_eq!(Repr::parse(&h, MAX).unwrap(), golden_msg());
        assert_eq!(h.payload(), b"pingpong");

        let h = Header::new_checked(&GOLDEN_RTS[..]).unwrap();
        assert_eq!(Repr::parse(&h, MAX).unwrap(), golden_rts());
        assert_eq!(parse_rts_payload(h.payload()), Some(1 << 20));

        let h = Header::new_checked(&GOLDEN_HELLO[..]).unwrap();
        let r = Repr::parse(&h, MAX).unwrap();
        assert_eq!(r, golden_hello());
        let (addr, pd) = h.payload().split_at(r.data as usize);
        assert_eq!(addr, &[10, 0, 0, 1, 0x1f, 0x90]);
        assert_eq!(pd, b"hi!");
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xffu8; 48];
        let mut h = Header::new_unchecked(&mut buf[..]);
        golden_msg().emit(&mut h);
        h.payload_mut().copy_from_slice(b"pingpong");
        assert_eq!(buf, GOLDEN_MSG);

        let mut buf = [0xffu8; 48];
        let mut h = Header::new_unchecked(&mut buf[..]);
        golden_rts().emit(&mut h);
        h.payload_mut().copy_from_slice(&rts_payload(1 << 20));
        assert_eq!(buf, GOLDEN_RTS);

        let mut buf = [0xffu8; 49];
        buf[..HDR_LEN].copy_from_slice(&golden_hello().to_bytes());
        buf[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[10, 0, 0, 1, 0x1f, 0x90]);
        buf[HDR_LEN + 6..].copy_from_slice(b"hi!");
        assert_eq!(buf, GOLDEN_HELLO);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Header::new_checked(&GOLDEN_MSG[..HDR_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            Repr::parse(&Header::new_unchecked(&GOLDEN_MSG[..10]), MAX),
            Err(WireError::Truncated)
        );
        // A header alone is enough: the payload follows on the stream.
        assert!(Repr::parse(&Header::new_unchecked(&GOLDEN_MSG[..HDR_LEN]), MAX).is_ok());
        assert_eq!(parse_rts_payload(&[0; 7]), None);
    }

    fn parse_with(r: Repr, patch: impl FnOnce(&mut [u8; HDR_LEN])) -> Result<Repr, WireError> {
        let mut b = r.to_bytes();
        patch(&mut b);
        Repr::parse(&Header::new_unchecked(&b[..]), MAX)
    }

    fn malformed(res: Result<Repr, WireError>) -> bool {
        matches!(res, Err(WireError::Malformed(_)))
    }

    #[test]
    fn test_rejects_bad_magic_version_reserved() {
        assert!(malformed(parse_with(golden_msg(), |b| b[0] = 0x6e)));
        assert!(malformed(parse_with(golden_msg(), |b| b[1] = 2)));
        assert!(malformed(parse_with(golden_msg(), |b| b[1] = 0)));
        for i in 4..8 {
            assert!(malformed(parse_with(golden_msg(), |b| b[i] = 1)));
        }
    }

    #[test]
    fn test_rejects_unknown_op_and_flags() {
        assert_eq!(
            parse_with(golden_msg(), |b| b[2] = 0),
            Err(WireError::UnknownOp(0))
        );
        assert_eq!(
            parse_with(golden_msg(), |b| b[2] = 9),
            Err(WireError::UnknownOp(9))
        );
        assert!(malformed(parse_with(golden_msg(), |b| b[3] = 4)));
        assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x80)));
        // Flags only on MSG and RTS.
        let cts = Repr {
            op: op::CTS,
            flags: flag::TAGGED,
            ..Default::default()
        };
        assert!(malformed(Repr::parse(
            &Header::new_unchecked(&cts.to_bytes()[..]),
            MAX
        )));
    }

    #[test]
    fn test_rejects_impossible_lengths() {
        let check =
            |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
        // MSG whose total differs from its payload.
        assert!(check(Repr {
            op: op::MSG,
            len: 8,
            id: 9,
            ..Default::default()
        }));
        // RTS must carry exactly the 8-byte size.
        for len in [0, 7, 9, 16] {
            assert!(check(Repr {
                op: op::RTS,
                len,
                ..Default::default()
            }));
        }
        // CTS and SHUTDOWN carry nothing.
        assert!(check(Repr {
            op: op::CTS,
            len: 1,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::SHUTDOWN,
            len: 4,
            ..Default::default()
        }));
        // DATA carries something.
        assert!(check(Repr {
            op: op::DATA,
            len: 0,
            ..Default::default()
        }));
        // HELLO address longer than its payload.
        assert!(check(Repr {
            op: op::HELLO,
            len: 4,
            data: 5,
            ..Default::default()
        }));
        // Anything above the reader's maximum.
        assert!(check(Repr {
            op: op::MSG,
            len: MAX + 1,
            id: MAX + 1,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::ACCEPT,
            len: u64::MAX,
            ..Default::default()
        }));
        // The maximum itself is fine.
        assert!(!check(Repr {
            op: op::DATA,
            len: MAX,
            ..Default::default()
        }));
    }

    #[test]
    fn test_every_op_roundtrips() {
        for o in 1..=op::MAX {
            let r = Repr {
                op: o,
                flags: if o == op::MSG || o == op::RTS { 3 } else { 0 },
                len: match o {
                    op::RTS => 8,
                    op::CTS | op::SHUTDOWN => 0,
                    _ => 5,
                },
                tag: 11,
                data: if o == op::HELLO { 2 } else { 13 },
                id: if o == op::MSG { 5 } else { 17 },
            };
            let b = r.to_bytes();
            assert_eq!(Repr::parse(&Header::new_unchecked(&b[..]), MAX), Ok(r));
        }
    }
}
