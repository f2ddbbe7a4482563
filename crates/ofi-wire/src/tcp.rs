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
//! | op        | payload                                     | tag                 | data                  | id               |
//! |-----------|---------------------------------------------|---------------------|-----------------------|------------------|
//! | HELLO     | connector's address, its nonce, then CM data | protocol flags     | length of the address | nonce length: 0 or [`NONCE_LEN`] |
//! | CHALLENGE | acceptor's nonce, then its proof ([`CHALLENGE_LEN`] bytes) | 0    | 0                     | 0                |
//! | PROOF     | connector's proof ([`PROOF_LEN`] bytes)      | 0                   | 0                     | 0                |
//! | ACCEPT    | CM data                                     | protocol flags      | 0                     | 0                |
//! | REJECT    | CM data                                     | 0                   | reason ([`reject`])   | 0                |
//! | MSG       | the whole message                           | tag                 | remote CQ data        | message length (with an ACK flag: request id) |
//! | RTS       | 8 bytes: the message length (u64 LE)        | tag                 | remote CQ data        | rendezvous id    |
//! | CTS       | none                                        | 0                   | bytes wanted          | rendezvous id    |
//! | DATA      | the next bytes of a rendezvous or a WRITE   | 0                   | 0                     | rendezvous or request id |
//! | SHUTDOWN  | none                                        | 0                   | 0                     | 0                |
//! | WRITE     | [`RmaDesc`], then the first data bytes      | bytes after the descriptor | remote CQ data | request id       |
//! | READ      | [`RmaDesc`]                                 | 0                   | 0                     | request id       |
//! | ATOMIC    | [`RmaDesc`], operands, then compare values  | bytes after the descriptor | remote CQ data | request id       |
//! | RESP      | the first bytes of the answer               | answer length       | status (0 or FI_E*)   | request id       |
//! | RESP_DATA | the next bytes of an answer                 | 0                   | 0                     | request id       |
//!
//! `len` is always the number of payload bytes after this header, so a
//! reader can stay in sync without understanding a frame. A rendezvous
//! message's length rides in the RTS payload for that reason. The CTS `data`
//! field is how many bytes the receiver wants (at most the message length:
//! less when its buffer is smaller, 0 when it discards the message); the
//! sender then sends exactly that many bytes in one or more DATA frames.
//!
//! One-sided requests (WRITE, READ, ATOMIC) name their remote ranges in an
//! [`RmaDesc`] at the start of the payload; `tag` counts the bytes after
//! it, so `len - tag` is the descriptor's length. A WRITE's length is the
//! sum of its ranges; what does not fit in the WRITE frame follows in DATA
//! frames with its request id, sent back to back (only control frames and
//! answers come between), so the target executes requests in stream order.
//! The target answers every request, and every message sent with an ACK
//! flag, with RESP: `data` is 0 or the FI_E* number of the failure, `tag`
//! the length of the answer (read data, original values of a fetching
//! atomic; 0 on failure), continued in RESP_DATA frames when longer than
//! one frame. Request ids and rendezvous ids come from one counter per
//! connection and direction, so an id names one operation.
//!
//! Flags: TAGGED on MSG and RTS; CQ_DATA on MSG, RTS, WRITE and ATOMIC;
//! ACK or ACK_PLACED (not both) on MSG and RTS.
//!
//! Authentication (endpoints with an auth key): the connector's HELLO
//! carries a fresh nonce `Nc` after its address (`id` = [`NONCE_LEN`]); the
//! acceptor answers CHALLENGE with its nonce `Ns` and its proof
//! `HMAC-SHA256(key, "ofi-tcp-v1 acceptor" | address | Nc | Ns)`; the
//! connector checks it and answers PROOF with
//! `HMAC-SHA256(key, "ofi-tcp-v1 connector" | address | Nc | Ns)` (each
//! part preceded by its length as u64 LE; `address` is the one the HELLO
//! claims); the acceptor checks it and only then answers ACCEPT. Both sides
//! prove the key, the key never travels, the claimed address is bound to
//! the connection, and a proof is good for one pair of nonces. A HELLO
//! without a nonce to an endpoint with a key, or with one to an endpoint
//! without, and a wrong proof, are answered with REJECT [`reject::AUTH`];
//! a connector that meets a wrong or missing proof closes the connection.

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
    /// One-sided write: descriptor, then data.
    pub const WRITE: u8 = 9;
    /// One-sided read: descriptor.
    pub const READ: u8 = 10;
    /// Atomic: descriptor, operands, compare values.
    pub const ATOMIC: u8 = 11;
    /// Answer to a request or an acknowledged message.
    pub const RESP: u8 = 12;
    /// The next bytes of an answer.
    pub const RESP_DATA: u8 = 13;
    /// The acceptor's nonce and proof of the auth key.
    pub const CHALLENGE: u8 = 14;
    /// The connector's proof of the auth key.
    pub const PROOF: u8 = 15;
    /// Highest known opcode.
    pub const MAX: u8 = 15;
}

/// Bytes of a handshake nonce (HELLO's `id` when authenticating).
pub const NONCE_LEN: usize = 32;
/// Bytes of a proof (HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// Payload of CHALLENGE: the acceptor's nonce, then its proof.
pub const CHALLENGE_LEN: usize = NONCE_LEN + PROOF_LEN;

/// The parts of a HELLO payload: (address, nonce, CM data), from the
/// header's `data` (address length) and `id` (nonce length); `None` if
/// they do not fit the payload.
pub fn split_hello(payload: &[u8], addr_len: u64, nonce_len: u64) -> Option<(&[u8], &[u8], &[u8])> {
    let a = usize::try_from(addr_len).ok()?;
    let n = usize::try_from(nonce_len).ok()?;
    let rest = payload.get(a..)?;
    Some((&payload[..a], rest.get(..n)?, rest.get(n..)?))
}

/// Encodes a CHALLENGE payload.
pub fn challenge_payload(nonce: &[u8; NONCE_LEN], proof: &[u8; PROOF_LEN]) -> [u8; CHALLENGE_LEN] {
    let mut b = [0u8; CHALLENGE_LEN];
    b[..NONCE_LEN].copy_from_slice(nonce);
    b[NONCE_LEN..].copy_from_slice(proof);
    b
}

/// Decodes a CHALLENGE payload into (nonce, proof); `None` unless exactly
/// [`CHALLENGE_LEN`] bytes.
pub fn parse_challenge(p: &[u8]) -> Option<([u8; NONCE_LEN], [u8; PROOF_LEN])> {
    if p.len() != CHALLENGE_LEN {
        return None;
    }
    let mut n = [0u8; NONCE_LEN];
    let mut m = [0u8; PROOF_LEN];
    n.copy_from_slice(&p[..NONCE_LEN]);
    m.copy_from_slice(&p[NONCE_LEN..]);
    Some((n, m))
}

/// Flag bits.
pub mod flag {
    /// Tagged message (MSG, RTS).
    pub const TAGGED: u8 = 1;
    /// `data` carries remote CQ data (MSG, RTS, WRITE, ATOMIC).
    pub const CQ_DATA: u8 = 2;
    /// Answer with RESP once the whole message has been received (MSG, RTS).
    pub const ACK: u8 = 4;
    /// Answer with RESP once the message is in the receive buffer (MSG, RTS).
    pub const ACK_PLACED: u8 = 8;
    /// FI_COMMIT_COMPLETE: the target answers only once the written bytes
    /// are on stable storage, and refuses regions it cannot make durable
    /// (WRITE, ATOMIC).
    pub const COMMIT: u8 = 16;
    /// Every known flag.
    pub const ALL: u8 = TAGGED | CQ_DATA | ACK | ACK_PLACED | COMMIT;

    /// The flags an opcode may carry.
    pub fn allowed(op: u8) -> u8 {
        match op {
            super::op::MSG | super::op::RTS => TAGGED | CQ_DATA | ACK | ACK_PLACED,
            super::op::WRITE | super::op::ATOMIC => CQ_DATA | COMMIT,
            _ => 0,
        }
    }
}

/// Largest status number a RESP carries (FI_E* numbers are small).
pub const MAX_STATUS: u64 = 0xffff;

/// REJECT reasons (the `data` field).
pub mod reject {
    /// The application rejected the request.
    pub const USER: u64 = 0;
    /// Two connections crossed (both sides connected at once) and this one
    /// lost; the peer's own connection carries the traffic.
    pub const SIMULTANEOUS: u64 = 1;
    /// The connector did not prove the acceptor's auth key (a wrong or
    /// missing proof, or only one side has a key).
    pub const AUTH: u64 = 2;
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
        if r.flags & !flag::allowed(r.op) != 0 {
            return Err(WireError::Malformed("flags this frame does not take"));
        }
        if r.flags & (flag::ACK | flag::ACK_PLACED) == flag::ACK | flag::ACK_PLACED {
            return Err(WireError::Malformed("both acknowledgement flags"));
        }
        if h.reserved() != 0 {
            return Err(WireError::Malformed("nonzero reserved field"));
        }
        if r.len > max_payload {
            return Err(WireError::Malformed("payload longer than the maximum"));
        }
        let acked = r.flags & (flag::ACK | flag::ACK_PLACED) != 0;
        match r.op {
            op::HELLO if r.id != 0 && r.id != NONCE_LEN as u64 => {
                return Err(WireError::Malformed("HELLO nonce of an unknown length"))
            }
            op::HELLO if r.data.saturating_add(r.id) > r.len => {
                return Err(WireError::Malformed(
                    "HELLO address and nonce longer than its payload",
                ))
            }
            op::CHALLENGE if r.len != CHALLENGE_LEN as u64 => {
                return Err(WireError::Malformed("CHALLENGE is not a nonce and a proof"))
            }
            op::PROOF if r.len != PROOF_LEN as u64 => {
                return Err(WireError::Malformed("PROOF is not one proof"))
            }
            op::MSG if !acked && r.id != r.len => {
                return Err(WireError::Malformed("MSG length differs from its payload"))
            }
            op::RTS if r.len != RTS_PAYLOAD_LEN as u64 => {
                return Err(WireError::Malformed("RTS payload is not 8 bytes"))
            }
            op::CTS | op::SHUTDOWN if r.len != 0 => {
                return Err(WireError::Malformed("payload on a frame that takes none"))
            }
            op::DATA | op::RESP_DATA if r.len == 0 => {
                return Err(WireError::Malformed("empty DATA frame"))
            }
            op::WRITE | op::ATOMIC if r.len < r.tag || desc_ranges(r.len - r.tag).is_none() => {
                return Err(WireError::Malformed(
                    "request without a whole range descriptor",
                ))
            }
            op::READ if r.tag != 0 || desc_ranges(r.len).is_none() => {
                return Err(WireError::Malformed("READ is not a range descriptor"))
            }
            op::RESP if r.data > MAX_STATUS => {
                return Err(WireError::Malformed("RESP status out of range"))
            }
            op::RESP if r.data != 0 && (r.len != 0 || r.tag != 0) => {
                return Err(WireError::Malformed("failed RESP carrying data"))
            }
            op::RESP if r.len > r.tag => {
                return Err(WireError::Malformed("RESP longer than its answer"))
            }
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

/// Most remote ranges one request names.
pub const MAX_RANGES: usize = 4;
/// Bytes of a descriptor before its ranges.
pub const DESC_HDR_LEN: usize = 8;
/// Bytes per remote range in a descriptor.
pub const RANGE_LEN: usize = 24;

/// The length of a descriptor naming `ranges` ranges.
pub const fn desc_len(ranges: usize) -> usize {
    DESC_HDR_LEN + ranges * RANGE_LEN
}

/// How many ranges a descriptor of `len` bytes names, if `len` is a
/// possible descriptor length (1 to [`MAX_RANGES`] ranges).
pub fn desc_ranges(len: u64) -> Option<usize> {
    let body = len.checked_sub(DESC_HDR_LEN as u64)?;
    if body % RANGE_LEN as u64 != 0 {
        return None;
    }
    let n = (body / RANGE_LEN as u64) as usize;
    (1..=MAX_RANGES).contains(&n).then_some(n)
}

/// Descriptor kinds: a plain RMA request or one of the atomic call forms.
pub mod kind {
    /// WRITE or READ.
    pub const RMA: u8 = 0;
    /// `fi_atomic`.
    pub const ATOMIC: u8 = 1;
    /// `fi_fetch_atomic`.
    pub const FETCH: u8 = 2;
    /// `fi_compare_atomic`.
    pub const COMPARE: u8 = 3;
}

mod desc_field {
    pub const COUNT: usize = 0;
    pub const KIND: usize = 1;
    pub const OP: usize = 2;
    pub const DATATYPE: usize = 3;
    pub const RESERVED: usize = 4;
    pub const RANGES: usize = 8;
}

/// A checked view of a one-sided request's range descriptor:
///
/// ```text
///  0  count u8 (1..=4) | 1 kind u8 ([`kind`]) | 2 op u8 | 3 datatype u8
///  4  reserved u32     must be 0
///  8  count × { addr u64 | len u64 | key u64 }
/// ```
///
/// `op` and `datatype` are `enum fi_op` and `enum fi_datatype` values for
/// atomics, 0 for RMA. A range's `len` is in bytes for RMA and in datatype
/// elements for atomics; `addr` is a virtual address or an offset, as the
/// target's memory registration mode says.
#[derive(Debug, Clone, Copy)]
pub struct RmaDesc<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> RmaDesc<T> {
    /// Wraps a buffer without checks (setters on a fresh buffer).
    pub const fn new_unchecked(buf: T) -> Self {
        RmaDesc { buf }
    }
    /// Wraps a buffer after checking it holds the fixed part and every
    /// range it counts.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = RmaDesc { buf };
        d.check_len()?;
        Ok(d)
    }
    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buf.as_ref();
        if b.len() < DESC_HDR_LEN || b.len() < desc_len(b[desc_field::COUNT] as usize) {
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
    /// Number of ranges.
    pub fn count(&self) -> usize {
        self.buf.as_ref()[desc_field::COUNT] as usize
    }
    /// Request kind.
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[desc_field::KIND]
    }
    /// Atomic operation.
    pub fn op(&self) -> u8 {
        self.buf.as_ref()[desc_field::OP]
    }
    /// Atomic datatype.
    pub fn datatype(&self) -> u8 {
        self.buf.as_ref()[desc_field::DATATYPE]
    }
    /// Reserved word (0 on the wire).
    pub fn reserved(&self) -> u32 {
        let b = self.buf.as_ref();
        let r = desc_field::RESERVED;
        u32::from_le_bytes([b[r], b[r + 1], b[r + 2], b[r + 3]])
    }
    /// Range `i` (`i < count()`).
    pub fn range(&self, i: usize) -> Range {
        let at = desc_field::RANGES + i * RANGE_LEN;
        Range {
            addr: self.u64_at(at),
            len: self.u64_at(at + 8),
            key: self.u64_at(at + 16),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RmaDesc<T> {
    /// Sets the range count.
    pub fn set_count(&mut self, n: u8) {
        self.buf.as_mut()[desc_field::COUNT] = n;
    }
    /// Sets the kind.
    pub fn set_kind(&mut self, v: u8) {
        self.buf.as_mut()[desc_field::KIND] = v;
    }
    /// Sets the atomic operation.
    pub fn set_op(&mut self, v: u8) {
        self.buf.as_mut()[desc_field::OP] = v;
    }
    /// Sets the atomic datatype.
    pub fn set_datatype(&mut self, v: u8) {
        self.buf.as_mut()[desc_field::DATATYPE] = v;
    }
    /// Sets the reserved word.
    pub fn set_reserved(&mut self, v: u32) {
        let r = desc_field::RESERVED;
        self.buf.as_mut()[r..r + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets range `i`.
    pub fn set_range(&mut self, i: usize, r: &Range) {
        let at = desc_field::RANGES + i * RANGE_LEN;
        let b = self.buf.as_mut();
        b[at..at + 8].copy_from_slice(&r.addr.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&r.len.to_le_bytes());
        b[at + 16..at + 24].copy_from_slice(&r.key.to_le_bytes());
    }
}

/// One remote range as it travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// Virtual address or offset.
    pub addr: u64,
    /// Bytes (RMA) or elements (atomics).
    pub len: u64,
    /// The region's key.
    pub key: u64,
}

/// A parsed, validated range descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DescRepr {
    /// [`kind`] value.
    pub kind: u8,
    /// Atomic operation (0 for RMA).
    pub op: u8,
    /// Atomic datatype (0 for RMA).
    pub datatype: u8,
    /// Ranges in use.
    pub count: usize,
    /// The ranges (`count` of them).
    pub ranges: [Range; MAX_RANGES],
}

impl DescRepr {
    /// Parses the descriptor of a frame with opcode `frame_op` (WRITE, READ
    /// or ATOMIC). The buffer must be exactly the descriptor.
    pub fn parse<T: AsRef<[u8]>>(d: &RmaDesc<T>, frame_op: u8) -> Result<DescRepr, WireError> {
        d.check_len()?;
        let count = d.count();
        if !(1..=MAX_RANGES).contains(&count) {
            return Err(WireError::Malformed("descriptor range count out of range"));
        }
        if d.buf.as_ref().len() != desc_len(count) {
            return Err(WireError::Malformed(
                "descriptor length disagrees with its range count",
            ));
        }
        if d.reserved() != 0 {
            return Err(WireError::Malformed(
                "nonzero reserved field in a descriptor",
            ));
        }
        let k = d.kind();
        match frame_op {
            op::WRITE | op::READ => {
                if k != kind::RMA || d.op() != 0 || d.datatype() != 0 {
                    return Err(WireError::Malformed("atomic fields in an RMA descriptor"));
                }
            }
            op::ATOMIC => {
                if !(kind::ATOMIC..=kind::COMPARE).contains(&k) {
                    return Err(WireError::Malformed("unknown atomic kind"));
                }
            }
            _ => {
                return Err(WireError::Malformed(
                    "descriptor on a frame that takes none",
                ))
            }
        }
        let mut ranges = [Range::default(); MAX_RANGES];
        for (i, r) in ranges.iter_mut().enumerate().take(count) {
            *r = d.range(i);
        }
        Ok(DescRepr {
            kind: k,
            op: d.op(),
            datatype: d.datatype(),
            count,
            ranges,
        })
    }
    /// The ranges in use.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges[..self.count.min(MAX_RANGES)]
    }
    /// Encoded length.
    pub fn len(&self) -> usize {
        desc_len(self.count.min(MAX_RANGES))
    }
    /// True when no range is named (never valid on the wire).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Writes the descriptor (a zero reserved word included) into the
    /// first [`len`](Self::len) bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, d: &mut RmaDesc<T>) {
        let n = self.count.min(MAX_RANGES);
        d.set_count(n as u8);
        d.set_kind(self.kind);
        d.set_op(self.op);
        d.set_datatype(self.datatype);
        d.set_reserved(0);
        for (i, r) in self.ranges[..n].iter().enumerate() {
            d.set_range(i, r);
        }
    }
    /// Appends the encoded descriptor to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + self.len(), 0);
        self.emit(&mut RmaDesc::new_unchecked(&mut out[at..]));
    }
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
            parse_with(golden_msg(), |b| b[2] = 16),
            Err(WireError::UnknownOp(16))
        );
        assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x10)));
        assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x80)));
        // Both acknowledgement levels at once.
        assert!(malformed(parse_with(golden_msg(), |b| b[3] = 0x0c)));
        // Flags only where they mean something.
        for (o, f) in [
            (op::WRITE, flag::TAGGED),
            (op::ATOMIC, flag::ACK),
            (op::READ, flag::CQ_DATA),
            (op::RESP, flag::CQ_DATA),
            (op::DATA, flag::ACK),
        ] {
            let r = Repr {
                op: o,
                flags: f,
                len: desc_len(1) as u64,
                ..Default::default()
            };
            assert!(malformed(Repr::parse(
                &Header::new_unchecked(&r.to_bytes()[..]),
                MAX
            )));
        }
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
                flags: flag::allowed(o) & !flag::ACK_PLACED,
                len: match o {
                    op::RTS => 8,
                    op::CHALLENGE => CHALLENGE_LEN as u64,
                    op::PROOF => PROOF_LEN as u64,
                    op::CTS | op::SHUTDOWN => 0,
                    op::READ => desc_len(2) as u64,
                    op::WRITE | op::ATOMIC => desc_len(1) as u64 + 5,
                    _ => 5,
                },
                tag: match o {
                    op::READ => 0,
                    op::WRITE | op::ATOMIC => 5,
                    op::RESP => 11,
                    _ => 11,
                },
                data: match o {
                    op::HELLO => 2,
                    op::RESP => 0,
                    _ => 13,
                },
                id: match o {
                    op::MSG => 5,
                    op::HELLO => 0,
                    _ => 17,
                },
            };
            let b = r.to_bytes();
            assert_eq!(Repr::parse(&Header::new_unchecked(&b[..]), MAX), Ok(r));
        }
    }

    // An authenticating HELLO: address 10.0.0.1:8080, nonce 0x11 * 32,
    // private data "hi".
    fn golden_auth_hello() -> Vec<u8> {
        let mut b = vec![
            0x6f, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, HELLO
            0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 40 = 6 + 32 + 2
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // protocol flags 0
            0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // address: 6 bytes
            0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // nonce: 32 bytes
            0x0a, 0x00, 0x00, 0x01, 0x1f, 0x90, // 10.0.0.1:8080
        ];
        b.extend_from_slice(&[0x11; 32]);
        b.extend_from_slice(b"hi");
        b
    }

    static GOLDEN_PROOF_HDR: [u8; 40] = [
        0x6f, 0x01, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, PROOF
        0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 32
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
    ];

    static GOLDEN_CHALLENGE_HDR: [u8; 40] = [
        0x6f, 0x01, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, CHALLENGE
        0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 64
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id 0
    ];

    #[test]
    fn test_auth_frames_golden() {
        let g = golden_auth_hello();
        let h = Header::new_checked(&g[..]).unwrap();
        let r = Repr::parse(&h, MAX).unwrap();
        let want = Repr {
            op: op::HELLO,
            flags: 0,
            len: 40,
            tag: 0,
            data: 6,
            id: NONCE_LEN as u64,
        };
        assert_eq!(r, want);
        let (addr, nonce, pd) = split_hello(h.payload(), r.data, r.id).unwrap();
        assert_eq!(addr, &[10, 0, 0, 1, 0x1f, 0x90]);
        assert_eq!(nonce, &[0x11; 32]);
        assert_eq!(pd, b"hi");
        let mut built = want.to_bytes().to_vec();
        built.extend_from_slice(&[10, 0, 0, 1, 0x1f, 0x90]);
        built.extend_from_slice(&[0x11; 32]);
        built.extend_from_slice(b"hi");
        assert_eq!(built, g);

        let ch = Repr {
            op: op::CHALLENGE,
            len: CHALLENGE_LEN as u64,
            ..Default::default()
        };
        assert_eq!(ch.to_bytes(), GOLDEN_CHALLENGE_HDR);
        assert_eq!(
            Repr::parse(&Header::new_unchecked(&GOLDEN_CHALLENGE_HDR[..]), MAX),
            Ok(ch)
        );
        let body = challenge_payload(&[0x22; 32], &[0x33; 32]);
        assert_eq!(&body[..32], &[0x22; 32]);
        assert_eq!(&body[32..], &[0x33; 32]);
        assert_eq!(parse_challenge(&body), Some(([0x22; 32], [0x33; 32])));
        assert_eq!(parse_challenge(&body[..63]), None);

        let pr = Repr {
            op: op::PROOF,
            len: PROOF_LEN as u64,
            ..Default::default()
        };
        assert_eq!(pr.to_bytes(), GOLDEN_PROOF_HDR);
        assert_eq!(
            Repr::parse(&Header::new_unchecked(&GOLDEN_PROOF_HDR[..]), MAX),
            Ok(pr)
        );
    }

    #[test]
    fn test_rejects_bad_auth_frames() {
        let check =
            |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
        // A nonce of another length, and address + nonce beyond the payload.
        for (len, data, id) in [(40, 6, 16), (40, 6, 33), (37, 6, 32), (40, u64::MAX, 32)] {
            assert!(
                check(Repr {
                    op: op::HELLO,
                    len,
                    data,
                    id,
                    ..Default::default()
                }),
                "HELLO len {len} data {data} id {id}"
            );
        }
        for len in [0, 32, 63, 65] {
            assert!(check(Repr {
                op: op::CHALLENGE,
                len,
                ..Default::default()
            }));
        }
        for len in [0, 31, 33, 64] {
            assert!(check(Repr {
                op: op::PROOF,
                len,
                ..Default::default()
            }));
        }
        assert!(check(Repr {
            op: op::PROOF,
            flags: flag::TAGGED,
            len: 32,
            ..Default::default()
        }));
        assert_eq!(split_hello(&[0; 10], 6, 32), None);
        assert_eq!(split_hello(&[0; 10], u64::MAX, 0), None);
    }

    // A WRITE of 6 bytes to one range, with remote CQ data 9, request id 5.
    static GOLDEN_WRITE: [u8; 78] = [
        0x6f, 0x01, 0x09, 0x02, 0x00, 0x00, 0x00, 0x00, // magic, v1, WRITE, CQ_DATA
        0x26, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 38 = 32 + 6
        0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // tag: 6 data bytes follow the descriptor
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // remote CQ data 9
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 5
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 range, RMA, op 0, datatype 0
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // addr 0x1000
        0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 6
        0xbb, 0xaa, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 0xaabb
        b'r', b'e', b'm', b'o', b't', b'e',
    ];

    fn golden_write() -> (Repr, DescRepr) {
        let mut d = DescRepr {
            kind: kind::RMA,
            count: 1,
            ..Default::default()
        };
        d.ranges[0] = Range {
            addr: 0x1000,
            len: 6,
            key: 0xaabb,
        };
        (
            Repr {
                op: op::WRITE,
                flags: flag::CQ_DATA,
                len: 38,
                tag: 6,
                data: 9,
                id: 5,
            },
            d,
        )
    }

    // A fetching FI_SUM (op 2) on FI_UINT64 (datatype 7) of 2 elements in
    // two ranges, 16 operand bytes, request id 3.
    static GOLDEN_ATOMIC: [u8; 120] = [
        0x6f, 0x01, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, ATOMIC
        0x48, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 72 = 56 + 16
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag: 16 operand bytes
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 0
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 3
        0x02, 0x02, 0x02, 0x07, 0x00, 0x00, 0x00, 0x00, // 2 ranges, FETCH, FI_SUM, FI_UINT64
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 8
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 element
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 7
        0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 32
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1 element
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key 7
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // operand 1
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // operand 2
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // (not part of the frame)
    ];

    static GOLDEN_RESP: [u8; 40] = [
        0x6f, 0x01, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, // magic, v1, RESP
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // answer length 0
        0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // status 13 (FI_EACCES)
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // request id 5
    ];

    #[test]
    fn test_one_sided_golden() {
        let (wr, wd) = golden_write();
        let h = Header::new_checked(&GOLDEN_WRITE[..]).unwrap();
        assert_eq!(Repr::parse(&h, MAX).unwrap(), wr);
        let dlen = (wr.len - wr.tag) as usize;
        assert_eq!(desc_ranges(dlen as u64), Some(1));
        let d = RmaDesc::new_checked(&h.payload()[..dlen]).unwrap();
        assert_eq!(DescRepr::parse(&d, op::WRITE).unwrap(), wd);
        assert_eq!(&h.payload()[dlen..], b"remote");
        let mut out = wr.to_bytes().to_vec();
        wd.append_to(&mut out);
        out.extend_from_slice(b"remote");
        assert_eq!(out, GOLDEN_WRITE);

        let frame = &GOLDEN_ATOMIC[..HDR_LEN + 72];
        let h = Header::new_checked(frame).unwrap();
        let r = Repr::parse(&h, MAX).unwrap();
        assert_eq!((r.op, r.len, r.tag, r.id), (op::ATOMIC, 72, 16, 3));
        let d = RmaDesc::new_checked(&h.payload()[..56]).unwrap();
        let a = DescRepr::parse(&d, op::ATOMIC).unwrap();
        assert_eq!((a.kind, a.op, a.datatype, a.count), (kind::FETCH, 2, 7, 2));
        assert_eq!(
            a.ranges(),
            &[
                Range {
                    addr: 8,
                    len: 1,
                    key: 7
                },
                Range {
                    addr: 32,
                    len: 1,
                    key: 7
                }
            ]
        );
        let mut out = r.to_bytes().to_vec();
        a.append_to(&mut out);
        out.extend_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&2u64.to_le_bytes());
        assert_eq!(out, frame);

        let h = Header::new_checked(&GOLDEN_RESP[..]).unwrap();
        let r = Repr::parse(&h, MAX).unwrap();
        assert_eq!((r.op, r.data, r.id), (op::RESP, 13, 5));
        assert_eq!(r.to_bytes(), GOLDEN_RESP);
    }

    #[test]
    fn test_rejects_impossible_requests() {
        let check =
            |r: Repr| malformed(Repr::parse(&Header::new_unchecked(&r.to_bytes()[..]), MAX));
        // Descriptor lengths: 8 + 24n for n in 1..=4 only.
        for dl in [0u64, 7, 8, 31, 33, 8 + 24 * 5] {
            assert!(check(Repr {
                op: op::READ,
                len: dl,
                ..Default::default()
            }));
            assert!(check(Repr {
                op: op::WRITE,
                len: dl + 3,
                tag: 3,
                ..Default::default()
            }));
        }
        // More bytes after the descriptor than the frame holds.
        assert!(check(Repr {
            op: op::ATOMIC,
            len: 32,
            tag: 33,
            ..Default::default()
        }));
        // READ carries nothing after its descriptor.
        assert!(check(Repr {
            op: op::READ,
            len: 32,
            tag: 1,
            ..Default::default()
        }));
        // A failed RESP carries nothing; status in range; no more than its answer.
        assert!(check(Repr {
            op: op::RESP,
            len: 1,
            tag: 1,
            data: 13,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::RESP,
            data: MAX_STATUS + 1,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::RESP,
            len: 2,
            tag: 1,
            ..Default::default()
        }));
        assert!(check(Repr {
            op: op::RESP_DATA,
            ..Default::default()
        }));
        // An acknowledged MSG's id is its request id, not its length.
        assert!(!check(Repr {
            op: op::MSG,
            flags: flag::ACK,
            len: 3,
            id: 99,
            ..Default::default()
        }));
    }

    #[test]
    fn test_rejects_bad_descriptors() {
        let (_, wd) = golden_write();
        let mut good = Vec::new();
        wd.append_to(&mut good);
        let parse = |b: &[u8], o: u8| DescRepr::parse(&RmaDesc::new_unchecked(b), o);
        assert!(parse(&good, op::WRITE).is_ok());
        assert!(parse(&good, op::READ).is_ok());
        // An RMA descriptor on an ATOMIC frame, and atomic fields on RMA.
        assert!(parse(&good, op::ATOMIC).is_err());
        let mut b = good.clone();
        b[2] = 1;
        assert!(parse(&b, op::WRITE).is_err());
        // Counts: 0, more than the maximum, more than the buffer holds.
        for c in [0u8, 5, 2] {
            let mut b = good.clone();
            b[0] = c;
            assert!(parse(&b, op::WRITE).is_err());
        }
        assert_eq!(parse(&good[..31], op::WRITE), Err(WireError::Truncated));
        assert_eq!(parse(&good[..4], op::WRITE), Err(WireError::Truncated));
        // Trailing bytes, reserved bits, unknown atomic kinds.
        let mut b = good.clone();
        b.push(0);
        assert!(parse(&b, op::WRITE).is_err());
        let mut b = good.clone();
        b[6] = 1;
        assert!(parse(&b, op::WRITE).is_err());
        let mut b = good.clone();
        b[1] = 4;
        assert!(parse(&b, op::ATOMIC).is_err());
        b[1] = kind::COMPARE;
        assert!(parse(&b, op::ATOMIC).is_ok());
        assert!(parse(&good, op::MSG).is_err());
    }
}
