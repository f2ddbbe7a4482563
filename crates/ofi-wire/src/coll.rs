//! The frames of the core's collectives (`fi_collective(3)`): what one
//! member of a collective group sends another over the endpoint's tagged
//! messages (in the tag space the core reserves for them). A frame is a
//! [`HDR_LEN`]-byte header and a piece of one step's message; a message
//! longer than a frame is cut into pieces at increasing offsets. All
//! fields are little-endian.
//!
//! ```text
//!  0  magic u8 (0xc0) | 1 version u8 (1) | 2 kind u8 | 3 flags u8 (0)
//!  4  from u32      the sender's rank in the group
//!  8  group u64     the group's name (the same at every member)
//! 16  seq u32       the operation's number within the group (0: the join)
//! 20  step u32      the algorithm's step the message belongs to
//! 24  total u32     bytes of the whole message of this step
//! 28  offset u32    where this frame's payload starts in it
//! 32  payload       offset + payload length <= total
//! ```
//!
//! `kind` names the collective the sender runs (a receiver running another
//! one at that `seq` knows the members disagree); a message of `total` 0
//! is one frame with no payload. An [`kind::ABORT`] frame (`seq` and
//! `step` 0) carries an [`Abort`] as its whole message.

use crate::WireError;

/// Bytes of a frame header.
pub const HDR_LEN: usize = 32;
/// First byte of every frame.
pub const MAGIC: u8 = 0xc0;
/// Protocol version this module speaks.
pub const VERSION: u8 = 1;

/// The collectives (`kind`), numbered as `enum fi_collective_op` plus one,
/// with the join after them.
pub mod kind {
    /// `fi_barrier`.
    pub const BARRIER: u8 = 1;
    /// `fi_broadcast`.
    pub const BROADCAST: u8 = 2;
    /// `fi_alltoall`.
    pub const ALLTOALL: u8 = 3;
    /// `fi_allreduce`.
    pub const ALLREDUCE: u8 = 4;
    /// `fi_allgather`.
    pub const ALLGATHER: u8 = 5;
    /// `fi_reduce_scatter`.
    pub const REDUCE_SCATTER: u8 = 6;
    /// `fi_reduce`.
    pub const REDUCE: u8 = 7;
    /// `fi_scatter`.
    pub const SCATTER: u8 = 8;
    /// `fi_gather`.
    pub const GATHER: u8 = 9;
    /// `fi_join_collective`'s own exchange.
    pub const JOIN: u8 = 10;
    /// The sender's group failed: a member is lost or misbehaved
    /// ([`super::Abort`]); the receiver's group fails too.
    pub const ABORT: u8 = 11;
    /// Highest kind.
    pub const MAX: u8 = ABORT;
}

mod field {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const KIND: usize = 2;
    pub const FLAGS: usize = 3;
    pub const FROM: usize = 4;
    pub const GROUP: usize = 8;
    pub const SEQ: usize = 16;
    pub const STEP: usize = 20;
    pub const TOTAL: usize = 24;
    pub const OFFSET: usize = 28;
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A checked view of a frame (header and payload).
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checks (setters on a fresh buffer).
    pub const fn new_unchecked(buf: T) -> Self {
        Frame { buf }
    }
    /// Wraps a buffer after checking it holds a whole header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let f = Frame { buf };
        f.check_len()?;
        Ok(f)
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
    /// Magic byte.
    pub fn magic(&self) -> u8 {
        self.buf.as_ref()[field::MAGIC]
    }
    /// Version.
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VERSION]
    }
    /// Kind ([`kind`]).
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[field::KIND]
    }
    /// Flags (none defined: 0).
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    /// The sender's rank.
    pub fn from(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::FROM)
    }
    /// The group's name.
    pub fn group(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::GROUP)
    }
    /// The operation's number in the group.
    pub fn seq(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::SEQ)
    }
    /// The algorithm's step.
    pub fn step(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::STEP)
    }
    /// Bytes of the whole message of the step.
    pub fn total(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::TOTAL)
    }
    /// Where the payload starts in the message.
    pub fn offset(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::OFFSET)
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HDR_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn put_u32(&mut self, at: usize, v: u32) {
        self.buf.as_mut()[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, at: usize, v: u64) {
        self.buf.as_mut()[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets magic and version.
    pub fn set_prefix(&mut self) {
        self.buf.as_mut()[field::MAGIC] = MAGIC;
        self.buf.as_mut()[field::VERSION] = VERSION;
    }
    /// Sets the kind.
    pub fn set_kind(&mut self, v: u8) {
        self.buf.as_mut()[field::KIND] = v;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::FLAGS] = v;
    }
    /// Sets the sender's rank.
    pub fn set_from(&mut self, v: u32) {
        self.put_u32(field::FROM, v)
    }
    /// Sets the group's name.
    pub fn set_group(&mut self, v: u64) {
        self.put_u64(field::GROUP, v)
    }
    /// Sets the operation's number.
    pub fn set_seq(&mut self, v: u32) {
        self.put_u32(field::SEQ, v)
    }
    /// Sets the step.
    pub fn set_step(&mut self, v: u32) {
        self.put_u32(field::STEP, v)
    }
    /// Sets the message's length.
    pub fn set_total(&mut self, v: u32) {
        self.put_u32(field::TOTAL, v)
    }
    /// Sets the payload's offset.
    pub fn set_offset(&mut self, v: u32) {
        self.put_u32(field::OFFSET, v)
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HDR_LEN..]
    }
}

/// A parsed, validated frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repr {
    /// Kind ([`kind`]).
    pub kind: u8,
    /// The sender's rank.
    pub from: u32,
    /// The group's name.
    pub group: u64,
    /// The operation's number in the group.
    pub seq: u32,
    /// The algorithm's step.
    pub step: u32,
    /// Bytes of the whole message.
    pub total: u32,
    /// Where this frame's payload starts.
    pub offset: u32,
}

impl Repr {
    /// Parses and validates a frame: magic, version, a known kind, no
    /// flags, and a payload that lies within the message it belongs to
    /// (a message of length 0 comes as one empty frame).
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<Repr, WireError> {
        f.check_len()?;
        if f.magic() != MAGIC {
            return Err(WireError::Malformed("bad magic"));
        }
        if f.version() != VERSION {
            return Err(WireError::Malformed("unsupported version"));
        }
        let r = Repr {
            kind: f.kind(),
            from: f.from(),
            group: f.group(),
            seq: f.seq(),
            step: f.step(),
            total: f.total(),
            offset: f.offset(),
        };
        if r.kind == 0 || r.kind > kind::MAX {
            return Err(WireError::UnknownOp(r.kind));
        }
        if f.flags() != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        let len = f.payload().len() as u64;
        let end = u64::from(r.offset) + len;
        if end > u64::from(r.total) {
            return Err(WireError::Malformed("payload beyond the message's end"));
        }
        if len == 0 && (r.total != 0 || r.offset != 0) {
            return Err(WireError::Malformed(
                "an empty frame of a non-empty message",
            ));
        }
        Ok(r)
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_prefix();
        f.set_kind(self.kind);
        f.set_flags(0);
        f.set_from(self.from);
        f.set_group(self.group);
        f.set_seq(self.seq);
        f.set_step(self.step);
        f.set_total(self.total);
        f.set_offset(self.offset);
    }
    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        self.emit(&mut Frame::new_unchecked(&mut b[..]));
        b
    }
    /// A whole frame: this header, then `payload`.
    pub fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HDR_LEN + payload.len());
        v.extend_from_slice(&self.to_bytes());
        v.extend_from_slice(payload);
        v
    }
}

/// The message of an [`kind::ABORT`] frame: which member made the
/// sender's group fail, and why.
///
/// ```text
///  0  rank u32      the member lost (or the one that misbehaved)
///  4  errno u32     the positive FI_E* number the group failed with
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The member's rank.
    pub rank: u32,
    /// The error number (positive).
    pub errno: u32,
}

impl Abort {
    /// Bytes of the message.
    pub const LEN: usize = 8;

    /// Parses the message of an ABORT frame.
    pub fn parse(b: &[u8]) -> Result<Abort, WireError> {
        if b.len() != Self::LEN {
            return Err(WireError::Malformed("an abort is 8 bytes"));
        }
        let a = Abort {
            rank: u32_at(b, 0),
            errno: u32_at(b, 4),
        };
        if a.errno == 0 || a.errno > i32::MAX as u32 {
            return Err(WireError::Malformed("an abort without an error number"));
        }
        Ok(a)
    }

    /// The message's bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&self.rank.to_le_bytes());
        b[4..].copy_from_slice(&self.errno.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    static GOLDEN: [u8; 37] = [
        0xc0, 0x01, 0x04, 0x00, // magic, v1, ALLREDUCE, no flags
        0x03, 0x00, 0x00, 0x00, // from rank 3
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // group
        0x2a, 0x00, 0x00, 0x00, // seq 42
        0x02, 0x00, 0x00, 0x00, // step 2
        0x0d, 0x00, 0x00, 0x00, // total 13
        0x08, 0x00, 0x00, 0x00, // offset 8
        b'h', b'e', b'l', b'l', b'o',
    ];

    fn golden() -> Repr {
        Repr {
            kind: kind::ALLREDUCE,
            from: 3,
            group: 0x0102_0304_0506_0708,
            seq: 42,
            step: 2,
            total: 13,
            offset: 8,
        }
    }

    #[test]
    fn test_deconstruct() {
        let f = Frame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(f.magic(), MAGIC);
        assert_eq!(f.version(), VERSION);
        assert_eq!(Repr::parse(&f).unwrap(), golden());
        assert_eq!(f.payload(), b"hello");
    }

    #[test]
    fn test_construct() {
        assert_eq!(golden().frame(b"hello"), GOLDEN.to_vec());
    }

    #[test]
    fn test_truncated() {
        for n in 0..HDR_LEN {
            assert_eq!(
                Frame::new_checked(&GOLDEN[..n]).unwrap_err(),
                WireError::Truncated
            );
        }
        // A header whose payload is cut short: it then ends before its
        // offset + length claims, which is fine (the rest is another
        // frame's), but a payload past `total` is not.
        let f = Frame::new_checked(&GOLDEN[..HDR_LEN + 2]).unwrap();
        assert_eq!(Repr::parse(&f).unwrap(), golden());
    }

    #[test]
    fn test_malformed() {
        let bad = |edit: &dyn Fn(&mut [u8])| {
            let mut b = GOLDEN;
            edit(&mut b);
            Repr::parse(&Frame::new_checked(&b[..]).unwrap()).unwrap_err()
        };
        assert_eq!(bad(&|b| b[0] = 0x75), WireError::Malformed("bad magic"));
        assert_eq!(
            bad(&|b| b[1] = 2),
            WireError::Malformed("unsupported version")
        );
        assert_eq!(bad(&|b| b[2] = 0), WireError::UnknownOp(0));
        assert_eq!(bad(&|b| b[2] = kind::MAX + 1), WireError::UnknownOp(12));
        assert_eq!(
            bad(&|b| b[3] = 1),
            WireError::Malformed("unknown flag bits")
        );
        // total 12 < offset 8 + 5.
        assert_eq!(
            bad(&|b| b[24] = 12),
            WireError::Malformed("payload beyond the message's end")
        );
        // An offset near u32::MAX does not wrap.
        assert_eq!(
            bad(&|b| b[28..32].copy_from_slice(&u32::MAX.to_le_bytes())),
            WireError::Malformed("payload beyond the message's end")
        );
        let empty = Repr {
            total: 0,
            offset: 0,
            ..golden()
        };
        let f = empty.frame(&[]);
        assert_eq!(
            Repr::parse(&Frame::new_checked(&f[..]).unwrap()).unwrap(),
            empty
        );
        let f = Repr { total: 4, ..empty }.frame(&[]);
        assert_eq!(
            Repr::parse(&Frame::new_checked(&f[..]).unwrap()).unwrap_err(),
            WireError::Malformed("an empty frame of a non-empty message")
        );
    }

    #[test]
    fn abort_golden_bytes() {
        let a = Abort {
            rank: 2,
            errno: 104,
        };
        let b = [0x02, 0, 0, 0, 0x68, 0, 0, 0];
        assert_eq!(a.to_bytes(), b);
        assert_eq!(Abort::parse(&b).unwrap(), a);
        assert!(Abort::parse(&b[..7]).is_err());
        assert!(Abort::parse(&[2, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(Abort::parse(&[2, 0, 0, 0, 0, 0, 0, 0x80]).is_err());
    }

    #[test]
    fn emit_then_parse_is_identity() {
        use proptest::prelude::*;
        proptest!(|(kind in 1u8..=kind::MAX, from: u32, group: u64, seq: u32, step: u32,
                    total in 1u32..100_000, off_frac in 0.0f64..1.0, len in 0usize..64)| {
            let offset = ((f64::from(total) * off_frac) as u32).min(total - 1);
            let len = len.min((total - offset) as usize).max(1);
            let r = Repr { kind, from, group, seq, step, total, offset };
            let f = r.frame(&vec![7u8; len]);
            prop_assert_eq!(Repr::parse(&Frame::new_checked(&f[..]).unwrap()).unwrap(), r);
        });
    }
}
