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
mod tests;
