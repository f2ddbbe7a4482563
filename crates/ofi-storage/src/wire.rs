//! The storage capsule: every message between initiator and target is a
//! 40-byte capsule; a fabric message carries one, or up to [`MAX_BATCH`]
//! back to back (a sender with several queued for the same peer sends them
//! in one message; receivers post buffers of [`BATCH_BYTES`]). Data never
//! rides in capsules: the target moves it with RMA against the buffer a
//! command names. All fields little-endian.
//!
//! ```text
//!  0  version u8 (1) | 1 opcode u8 | 2 flags u8 | 3 reserved u8 (0)
//!  4  cid u32            command id (commands and their completions; else 0)
//!  8  a u64              offset / token / volume size / status (u16, rest 0)
//! 16  b u32              length / queue depth
//! 20  session u32        session id (commands, completions, DISCONNECT, ACCEPT)
//! 24  c u64              buffer address / ACCEPT: max_io u32, block size u32
//! 32  d u64              buffer key / ACCEPT: features u32, reserved u32
//! ```
//!
//! | opcode       | a            | b           | session | c                     | d                  |
//! |--------------|--------------|-------------|---------|-----------------------|--------------------|
//! | CONNECT      | token        | queue depth | 0       | max_io (u32), 0       | 0                  |
//! | ACCEPT       | volume size  | queue depth | session | max_io, block size    | features, 0        |
//! | REFUSE       | status       | 0           | 0       | 0                     | 0                  |
//! | DISCONNECT   | 0            | 0           | session | 0                     | 0                  |
//! | READ, WRITE  | offset       | length      | session | buffer address        | buffer key         |
//! | FLUSH        | 0            | 0           | session | 0                     | 0                  |
//! | TRIM, WRITE_ZEROES | offset | length      | session | 0                     | 0                  |
//! | COMPLETION   | status       | 0           | session | 0                     | 0                  |
//!
//! Flags: FUA on WRITE and WRITE_ZEROES, NO_HOLE on WRITE_ZEROES; none
//! elsewhere. Reserved bytes and unused fields must be zero: a capsule that
//! breaks any rule is malformed, and a malformed capsule ends the session.

use std::fmt;

/// Bytes of every capsule.
pub const CAPSULE_LEN: usize = 40;
/// Protocol version this module speaks.
pub const VERSION: u8 = 1;
/// Most capsules in one fabric message.
pub const MAX_BATCH: usize = 32;
/// Bytes of a receive buffer: a full batch.
pub const BATCH_BYTES: usize = MAX_BATCH * CAPSULE_LEN;

/// The capsules of a fabric message, in order; a trailing piece shorter
/// than a capsule, or an empty message, comes out as it is (its decoding
/// fails: the message was malformed).
pub fn capsules(msg: &[u8]) -> impl Iterator<Item = &[u8]> {
    msg.chunks(CAPSULE_LEN).chain(msg.is_empty().then_some(msg))
}

/// Packs capsules for one peer into batches: `push` appends a capsule and
/// says when the batch is full.
#[derive(Clone, Debug)]
pub struct Batch {
    buf: [u8; BATCH_BYTES],
    len: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            buf: [0; BATCH_BYTES],
            len: 0,
        }
    }
}

impl Batch {
    /// Appends a capsule; false (and nothing appended) when full.
    pub fn push(&mut self, c: &[u8; CAPSULE_LEN]) -> bool {
        if self.len + CAPSULE_LEN > BATCH_BYTES {
            return false;
        }
        self.buf[self.len..self.len + CAPSULE_LEN].copy_from_slice(c);
        self.len += CAPSULE_LEN;
        true
    }
    /// Capsules in the batch.
    pub fn count(&self) -> usize {
        self.len / CAPSULE_LEN
    }
    /// The message to send.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// Empties the batch.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// Opcodes.
pub mod op {
    /// Initiator → target: open a session.
    pub const CONNECT: u8 = 0x01;
    /// Either way: orderly end of a session.
    pub const DISCONNECT: u8 = 0x02;
    /// Read `length` bytes at `offset` into the initiator's buffer.
    pub const READ: u8 = 0x10;
    /// Write `length` bytes at `offset` from the initiator's buffer.
    pub const WRITE: u8 = 0x11;
    /// Make every completed write durable.
    pub const FLUSH: u8 = 0x12;
    /// Discard a range (advisory).
    pub const TRIM: u8 = 0x13;
    /// Write zeroes over a range.
    pub const WRITE_ZEROES: u8 = 0x14;
    /// Target → initiator: the session is open.
    pub const ACCEPT: u8 = 0x81;
    /// Target → initiator: the session was refused.
    pub const REFUSE: u8 = 0x82;
    /// Target → initiator: a command finished.
    pub const COMPLETION: u8 = 0x90;
}

/// Command flags.
pub mod flag {
    /// Force unit access: durable before the completion.
    pub const FUA: u8 = 1;
    /// WRITE_ZEROES must not deallocate the range.
    pub const NO_HOLE: u8 = 2;
}

/// Volume features announced in ACCEPT.
pub mod feature {
    /// Writes, trims and write-zeroes are refused.
    pub const READ_ONLY: u32 = 1;
    /// FLUSH makes writes durable.
    pub const FLUSH: u32 = 2;
    /// FUA is honoured.
    pub const FUA: u32 = 4;
    /// TRIM deallocates.
    pub const TRIM: u32 = 8;
    /// WRITE_ZEROES is efficient (no data moves).
    pub const ZEROES: u32 = 16;
    /// Every known feature bit.
    pub const ALL: u32 = READ_ONLY | FLUSH | FUA | TRIM | ZEROES;
}

/// Why a capsule could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than [`CAPSULE_LEN`].
    Truncated,
    /// Longer than [`CAPSULE_LEN`].
    Trailing,
    /// A version this module does not speak.
    Version(u8),
    /// An unknown opcode.
    UnknownOp(u8),
    /// Flags the opcode may not carry.
    Flags(u8),
    /// A reserved or unused field is not zero.
    Reserved,
    /// An unknown status number.
    Status(u16),
    /// A field out of its range (queue depth 0, unknown feature bits …).
    Field(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(f, "capsule shorter than {CAPSULE_LEN} bytes"),
            WireError::Trailing => write!(f, "capsule longer than {CAPSULE_LEN} bytes"),
            WireError::Version(v) => write!(f, "unknown capsule version {v}"),
            WireError::UnknownOp(o) => write!(f, "unknown opcode {o:#04x}"),
            WireError::Flags(x) => write!(f, "flags {x:#04x} not allowed on this opcode"),
            WireError::Reserved => write!(f, "reserved field not zero"),
            WireError::Status(s) => write!(f, "unknown status {s}"),
            WireError::Field(w) => write!(f, "bad field: {w}"),
        }
    }
}

impl std::error::Error for WireError {}

/// How a command ended (completion status; REFUSE reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// A field the target cannot honour.
    Invalid = 1,
    /// The range lies (partly) outside the volume.
    OutOfRange = 2,
    /// The volume is read-only.
    ReadOnly = 3,
    /// The backing store failed.
    Io = 4,
    /// The backing store is full.
    NoSpace = 5,
    /// The data transfer (RMA) with the initiator's buffer failed.
    Transfer = 6,
    /// No credits left for another session.
    Busy = 7,
    /// The target does not do this.
    Unsupported = 8,
    /// The target is shutting down.
    ShuttingDown = 9,
    /// The session ended before the command finished (never sent by a
    /// target: the initiator's own verdict when the peer is gone).
    Disconnected = 10,
    /// No answer within the command timeout (initiator's verdict).
    TimedOut = 11,
}

impl Status {
    const ALL: [Status; 12] = [
        Status::Ok,
        Status::Invalid,
        Status::OutOfRange,
        Status::ReadOnly,
        Status::Io,
        Status::NoSpace,
        Status::Transfer,
        Status::Busy,
        Status::Unsupported,
        Status::ShuttingDown,
        Status::Disconnected,
        Status::TimedOut,
    ];
    /// The status of a number, if known.
    pub fn from_u16(v: u16) -> Option<Status> {
        Status::ALL.get(v as usize).copied()
    }
    /// The errno an NBD reply or a POSIX caller reports for it.
    pub fn errno(self) -> u32 {
        match self {
            Status::Ok => 0,
            Status::Invalid => 22,                              // EINVAL
            Status::OutOfRange => 22,                           // EINVAL (NBD: out of range)
            Status::ReadOnly => 1,                              // EPERM
            Status::Io | Status::Transfer => 5,                 // EIO
            Status::NoSpace => 28,                              // ENOSPC
            Status::Busy => 16,                                 // EBUSY
            Status::Unsupported => 95,                          // ENOTSUP
            Status::ShuttingDown | Status::Disconnected => 108, // ESHUTDOWN
            Status::TimedOut => 110,                            // ETIMEDOUT
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Status::Ok => "ok",
            Status::Invalid => "invalid request",
            Status::OutOfRange => "range outside the volume",
            Status::ReadOnly => "read-only volume",
            Status::Io => "backing store I/O error",
            Status::NoSpace => "no space left on the backing store",
            Status::Transfer => "data transfer with the initiator failed",
            Status::Busy => "target busy (no credits or connections left)",
            Status::Unsupported => "not supported",
            Status::ShuttingDown => "target shutting down",
            Status::Disconnected => "session ended",
            Status::TimedOut => "timed out",
        };
        f.write_str(s)
    }
}

/// The kinds of command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// READ.
    Read,
    /// WRITE.
    Write,
    /// FLUSH.
    Flush,
    /// TRIM.
    Trim,
    /// WRITE_ZEROES.
    WriteZeroes,
}

impl Op {
    /// The opcode.
    pub fn code(self) -> u8 {
        match self {
            Op::Read => op::READ,
            Op::Write => op::WRITE,
            Op::Flush => op::FLUSH,
            Op::Trim => op::TRIM,
            Op::WriteZeroes => op::WRITE_ZEROES,
        }
    }
    /// True when data moves between the initiator's buffer and the volume.
    pub fn moves_data(self) -> bool {
        matches!(self, Op::Read | Op::Write)
    }
    /// True when the command changes the volume.
    pub fn modifies(self) -> bool {
        matches!(self, Op::Write | Op::Trim | Op::WriteZeroes)
    }
    fn allowed_flags(self) -> u8 {
        match self {
            Op::Write => flag::FUA,
            Op::WriteZeroes => flag::FUA | flag::NO_HOLE,
            _ => 0,
        }
    }
}

/// A read-only or mutable view of a capsule with checked accessors.
#[derive(Debug, Clone)]
pub struct Capsule<T: AsRef<[u8]>> {
    buf: T,
}

mod field {
    pub const VERSION: usize = 0;
    pub const OP: usize = 1;
    pub const FLAGS: usize = 2;
    pub const RSVD: usize = 3;
    pub const CID: usize = 4;
    pub const A: usize = 8;
    pub const B: usize = 16;
    pub const SESSION: usize = 20;
    pub const C: usize = 24;
    pub const D: usize = 32;
}

impl<T: AsRef<[u8]>> Capsule<T> {
    /// A view without checks (accessors may panic on a short buffer).
    pub fn new_unchecked(buf: T) -> Self {
        Capsule { buf }
    }
    /// A view over exactly [`CAPSULE_LEN`] bytes.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let c = Capsule { buf };
        c.check_len()?;
        Ok(c)
    }
    /// Checks the length (so that no accessor can panic).
    pub fn check_len(&self) -> Result<(), WireError> {
        match self.buf.as_ref().len() {
            n if n < CAPSULE_LEN => Err(WireError::Truncated),
            n if n > CAPSULE_LEN => Err(WireError::Trailing),
            _ => Ok(()),
        }
    }
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    fn u32_at(&self, at: usize) -> u32 {
        let mut x = [0u8; 4];
        x.copy_from_slice(&self.b()[at..at + 4]);
        u32::from_le_bytes(x)
    }
    fn u64_at(&self, at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&self.b()[at..at + 8]);
        u64::from_le_bytes(x)
    }
    /// Protocol version.
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.b()[field::OP]
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    /// Reserved byte.
    pub fn reserved(&self) -> u8 {
        self.b()[field::RSVD]
    }
    /// Command id.
    pub fn cid(&self) -> u32 {
        self.u32_at(field::CID)
    }
    /// Field `a` (offset, token, size, status).
    pub fn a(&self) -> u64 {
        self.u64_at(field::A)
    }
    /// Field `b` (length, queue depth).
    pub fn b_field(&self) -> u32 {
        self.u32_at(field::B)
    }
    /// Session id.
    pub fn session(&self) -> u32 {
        self.u32_at(field::SESSION)
    }
    /// Field `c` (buffer address; ACCEPT: max_io, block size).
    pub fn c(&self) -> u64 {
        self.u64_at(field::C)
    }
    /// Field `d` (buffer key; ACCEPT: features).
    pub fn d(&self) -> u64 {
        self.u64_at(field::D)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Capsule<T> {
    fn put_u32(&mut self, at: usize, v: u32) {
        self.buf.as_mut()[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, at: usize, v: u64) {
        self.buf.as_mut()[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Writes the fixed header bytes and clears the rest.
    fn start(&mut self, opcode: u8, flags: u8, cid: u32, session: u32) {
        let b = self.buf.as_mut();
        b[..CAPSULE_LEN].fill(0);
        b[field::VERSION] = VERSION;
        b[field::OP] = opcode;
        b[field::FLAGS] = flags;
        self.put_u32(field::CID, cid);
        self.put_u32(field::SESSION, session);
    }
}

/// A command as the target executes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Command {
    /// Command id (the initiator's; echoed in the completion).
    pub cid: u32,
    /// Session id.
    pub session: u32,
    /// What to do.
    pub op: Op,
    /// FUA and NO_HOLE bits.
    pub flags: u8,
    /// Byte offset into the volume.
    pub offset: u64,
    /// Byte length.
    pub len: u32,
    /// The initiator's buffer as the target addresses it in RMA (READ, WRITE).
    pub addr: u64,
    /// The key of the initiator's buffer (READ, WRITE).
    pub key: u64,
}

impl Command {
    /// True with FUA.
    pub fn fua(&self) -> bool {
        self.flags & flag::FUA != 0
    }
}

/// What ACCEPT tells the initiator about the volume and its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Accept {
    /// Session id to put in every command.
    pub session: u32,
    /// Volume size in bytes.
    pub size: u64,
    /// Commands the initiator may have outstanding (its credits).
    pub queue_depth: u32,
    /// Largest READ or WRITE length.
    pub max_io: u32,
    /// Logical block size (offsets and lengths should be multiples).
    pub block_size: u32,
    /// [`feature`] bits.
    pub features: u32,
}

/// A decoded capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Open a session with the token the control channel handed out.
    Connect {
        /// The token.
        token: u64,
        /// Credits asked for.
        queue_depth: u32,
        /// Largest transfer the initiator's buffers hold.
        max_io: u32,
    },
    /// The session is open.
    Accept(Accept),
    /// The session was refused.
    Refuse(Status),
    /// Orderly end of a session.
    Disconnect {
        /// Session id.
        session: u32,
    },
    /// A command.
    Command(Command),
    /// A command finished.
    Completion {
        /// Its id.
        cid: u32,
        /// Session id.
        session: u32,
        /// How it ended.
        status: Status,
    },
}

fn status_of(a: u64) -> Result<Status, WireError> {
    if a > u16::MAX as u64 {
        return Err(WireError::Reserved);
    }
    Status::from_u16(a as u16).ok_or(WireError::Status(a as u16))
}

impl Repr {
    /// Decodes a checked capsule, enforcing every rule of the format.
    pub fn parse<T: AsRef<[u8]>>(c: &Capsule<T>) -> Result<Repr, WireError> {
        c.check_len()?;
        if c.version() != VERSION {
            return Err(WireError::Version(c.version()));
        }
        if c.reserved() != 0 {
            return Err(WireError::Reserved);
        }
        let zero = |ok: bool| if ok { Ok(()) } else { Err(WireError::Reserved) };
        let no_flags = || {
            if c.flags() != 0 {
                Err(WireError::Flags(c.flags()))
            } else {
                Ok(())
            }
        };
        let cmd = |op: Op| -> Result<Repr, WireError> {
            if c.flags() & !op.allowed_flags() != 0 {
                return Err(WireError::Flags(c.flags()));
            }
            let (addr, key) = match op {
                Op::Read | Op::Write => (c.c(), c.d()),
                Op::Flush => {
                    zero(c.a() == 0 && c.b_field() == 0 && c.c() == 0 && c.d() == 0)?;
                    (0, 0)
                }
                Op::Trim | Op::WriteZeroes => {
                    zero(c.c() == 0 && c.d() == 0)?;
                    (0, 0)
                }
            };
            Ok(Repr::Command(Command {
                cid: c.cid(),
                session: c.session(),
                op,
                flags: c.flags(),
                offset: c.a(),
                len: c.b_field(),
                addr,
                key,
            }))
        };
        match c.opcode() {
            op::CONNECT => {
                no_flags()?;
                zero(c.cid() == 0 && c.session() == 0 && c.c() >> 32 == 0 && c.d() == 0)?;
                if c.b_field() == 0 {
                    return Err(WireError::Field("queue depth 0"));
                }
                if c.c() == 0 {
                    return Err(WireError::Field("max_io 0"));
                }
                Ok(Repr::Connect {
                    token: c.a(),
                    queue_depth: c.b_field(),
                    max_io: c.c() as u32,
                })
            }
            op::ACCEPT => {
                no_flags()?;
                zero(c.cid() == 0 && c.d() >> 32 == 0)?;
                let features = c.d() as u32;
                if features & !feature::ALL != 0 {
                    return Err(WireError::Field("unknown feature bits"));
                }
                let (max_io, block_size) = (c.c() as u32, (c.c() >> 32) as u32);
                if c.b_field() == 0 || max_io == 0 {
                    return Err(WireError::Field("queue depth or max_io 0"));
                }
                if !block_size.is_power_of_two() || block_size > max_io {
                    return Err(WireError::Field("block size"));
                }
                Ok(Repr::Accept(Accept {
                    session: c.session(),
                    size: c.a(),
                    queue_depth: c.b_field(),
                    max_io,
                    block_size,
                    features,
                }))
            }
            op::REFUSE => {
                no_flags()?;
                zero(
                    c.cid() == 0
                        && c.b_field() == 0
                        && c.session() == 0
                        && c.c() == 0
                        && c.d() == 0,
                )?;
                Ok(Repr::Refuse(status_of(c.a())?))
            }
            op::DISCONNECT => {
                no_flags()?;
                zero(c.cid() == 0 && c.a() == 0 && c.b_field() == 0 && c.c() == 0 && c.d() == 0)?;
                Ok(Repr::Disconnect {
                    session: c.session(),
                })
            }
            op::COMPLETION => {
                no_flags()?;
                zero(c.b_field() == 0 && c.c() == 0 && c.d() == 0)?;
                Ok(Repr::Completion {
                    cid: c.cid(),
                    session: c.session(),
                    status: status_of(c.a())?,
                })
            }
            op::READ => cmd(Op::Read),
            op::WRITE => cmd(Op::Write),
            op::FLUSH => cmd(Op::Flush),
            op::TRIM => cmd(Op::Trim),
            op::WRITE_ZEROES => cmd(Op::WriteZeroes),
            o => Err(WireError::UnknownOp(o)),
        }
    }

    /// Decodes bytes (length, then every rule).
    pub fn from_bytes(b: &[u8]) -> Result<Repr, WireError> {
        Repr::parse(&Capsule::new_checked(b)?)
    }

    /// Encodes into a view of at least [`CAPSULE_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, c: &mut Capsule<T>) {
        match *self {
            Repr::Connect {
                token,
                queue_depth,
                max_io,
            } => {
                c.start(op::CONNECT, 0, 0, 0);
                c.put_u64(field::A, token);
                c.put_u32(field::B, queue_depth);
                c.put_u64(field::C, max_io as u64);
            }
            Repr::Accept(a) => {
                c.start(op::ACCEPT, 0, 0, a.session);
                c.put_u64(field::A, a.size);
                c.put_u32(field::B, a.queue_depth);
                c.put_u64(field::C, a.max_io as u64 | (a.block_size as u64) << 32);
                c.put_u64(field::D, a.features as u64);
            }
            Repr::Refuse(s) => {
                c.start(op::REFUSE, 0, 0, 0);
                c.put_u64(field::A, s as u16 as u64);
            }
            Repr::Disconnect { session } => c.start(op::DISCONNECT, 0, 0, session),
            Repr::Command(m) => {
                c.start(m.op.code(), m.flags, m.cid, m.session);
                c.put_u64(field::A, m.offset);
                c.put_u32(field::B, m.len);
                c.put_u64(field::C, m.addr);
                c.put_u64(field::D, m.key);
            }
            Repr::Completion {
                cid,
                session,
                status,
            } => {
                c.start(op::COMPLETION, 0, cid, session);
                c.put_u64(field::A, status as u16 as u64);
            }
        }
    }

    /// The capsule's bytes.
    pub fn to_bytes(&self) -> [u8; CAPSULE_LEN] {
        let mut b = [0u8; CAPSULE_LEN];
        self.emit(&mut Capsule::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_pack_up_to_max_batch_and_split_back_in_order() {
        let mut b = Batch::default();
        let caps: Vec<[u8; CAPSULE_LEN]> =
            (0..MAX_BATCH as u8 + 1).map(|i| [i; CAPSULE_LEN]).collect();
        for c in &caps[..MAX_BATCH] {
            assert!(b.push(c));
        }
        assert!(!b.push(&caps[MAX_BATCH]), "a full batch takes no more");
        assert_eq!(b.count(), MAX_BATCH);
        assert_eq!(b.bytes().len(), BATCH_BYTES);
        let back: Vec<&[u8]> = capsules(b.bytes()).collect();
        assert_eq!(back.len(), MAX_BATCH);
        for (i, c) in back.iter().enumerate() {
            assert_eq!(*c, &caps[i][..]);
        }
        b.clear();
        assert_eq!(b.count(), 0);
        // A message that is not whole capsules keeps its malformed tail,
        // and an empty one comes out empty: both fail to decode.
        let odd = [GOLDEN_WRITE.as_slice(), &[1, 2, 3]].concat();
        let pieces: Vec<&[u8]> = capsules(&odd).collect();
        assert_eq!(pieces.len(), 2);
        assert_eq!(Repr::from_bytes(pieces[1]), Err(WireError::Truncated));
        let none: Vec<&[u8]> = capsules(&[]).collect();
        assert_eq!(none, vec![&[] as &[u8]]);
        assert_eq!(Repr::from_bytes(none[0]), Err(WireError::Truncated));
    }

    /// WRITE with FUA, cid 7, session 3, 4 KiB at 1 MiB, buffer 0x7f00_1000 key 0xabcd.
    const GOLDEN_WRITE: [u8; CAPSULE_LEN] = [
        0x01, 0x11, 0x01, 0x00, 0x07, 0x00, 0x00, 0x00, // version, op, FUA, rsvd, cid
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 1 MiB
        0x00, 0x10, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, // len 4096, session 3
        0x00, 0x10, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x00, // addr
        0xcd, 0xab, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // key
    ];
    /// ACCEPT: session 3, 64 MiB, qd 16, max_io 1 MiB, block 512, FLUSH|FUA|TRIM.
    const GOLDEN_ACCEPT: [u8; CAPSULE_LEN] = [
        0x01, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, // 64 MiB
        0x10, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, // qd 16, session 3
        0x00, 0x00, 0x10, 0x00, 0x00, 0x02, 0x00, 0x00, // max_io, block size
        0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // features
    ];
    /// COMPLETION of cid 7 in session 3: out of range.
    const GOLDEN_COMPLETION: [u8; CAPSULE_LEN] = [
        0x01, 0x90, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
    ];

    fn write() -> Repr {
        Repr::Command(Command {
            cid: 7,
            session: 3,
            op: Op::Write,
            flags: flag::FUA,
            offset: 1 << 20,
            len: 4096,
            addr: 0x7f00_1000,
            key: 0xabcd,
        })
    }
    fn accept() -> Repr {
        Repr::Accept(Accept {
            session: 3,
            size: 64 << 20,
            queue_depth: 16,
            max_io: 1 << 20,
            block_size: 512,
            features: feature::FLUSH | feature::FUA | feature::TRIM,
        })
    }
    fn completion() -> Repr {
        Repr::Completion {
            cid: 7,
            session: 3,
            status: Status::OutOfRange,
        }
    }

    #[test]
    fn test_deconstruct() {
        let c = Capsule::new_checked(&GOLDEN_WRITE[..]).unwrap();
        assert_eq!(c.opcode(), op::WRITE);
        assert_eq!(c.cid(), 7);
        assert_eq!(Repr::parse(&c).unwrap(), write());
        assert_eq!(Repr::from_bytes(&GOLDEN_ACCEPT).unwrap(), accept());
        assert_eq!(Repr::from_bytes(&GOLDEN_COMPLETION).unwrap(), completion());
    }

    #[test]
    fn test_construct() {
        assert_eq!(write().to_bytes(), GOLDEN_WRITE);
        assert_eq!(accept().to_bytes(), GOLDEN_ACCEPT);
        assert_eq!(completion().to_bytes(), GOLDEN_COMPLETION);
        // emit clears what was there.
        let mut b = [0xffu8; CAPSULE_LEN];
        write().emit(&mut Capsule::new_unchecked(&mut b[..]));
        assert_eq!(b, GOLDEN_WRITE);
    }

    #[test]
    fn test_truncated_and_trailing() {
        assert_eq!(
            Capsule::new_checked(&GOLDEN_WRITE[..39]).unwrap_err(),
            WireError::Truncated
        );
        let mut long = GOLDEN_WRITE.to_vec();
        long.push(0);
        assert_eq!(Repr::from_bytes(&long), Err(WireError::Trailing));
        assert_eq!(Repr::from_bytes(&[]), Err(WireError::Truncated));
    }

    fn with(
        golden: [u8; CAPSULE_LEN],
        f: impl FnOnce(&mut [u8; CAPSULE_LEN]),
    ) -> Result<Repr, WireError> {
        let mut b = golden;
        f(&mut b);
        Repr::from_bytes(&b)
    }

    #[test]
    fn test_rejects() {
        assert_eq!(with(GOLDEN_WRITE, |b| b[0] = 2), Err(WireError::Version(2)));
        assert_eq!(
            with(GOLDEN_WRITE, |b| b[1] = 0x55),
            Err(WireError::UnknownOp(0x55))
        );
        assert_eq!(with(GOLDEN_WRITE, |b| b[2] = 4), Err(WireError::Flags(4)));
        assert_eq!(with(GOLDEN_WRITE, |b| b[3] = 1), Err(WireError::Reserved));
        // FUA on a READ, a status beyond the known ones, junk in a completion.
        assert_eq!(
            with(GOLDEN_WRITE, |b| b[1] = op::READ),
            Err(WireError::Flags(1))
        );
        assert_eq!(
            with(GOLDEN_COMPLETION, |b| b[8] = 99),
            Err(WireError::Status(99))
        );
        assert_eq!(
            with(GOLDEN_COMPLETION, |b| b[30] = 1),
            Err(WireError::Reserved)
        );
        assert!(with(GOLDEN_ACCEPT, |b| b[34] = 0x80).is_err());
        assert!(with(GOLDEN_ACCEPT, |b| b[16] = 0).is_err());
        assert!(with(GOLDEN_ACCEPT, |b| b[29] = 3).is_err());
        // A FLUSH naming a range, a TRIM naming a buffer.
        let flush = Repr::Command(Command {
            op: Op::Flush,
            flags: 0,
            offset: 0,
            len: 0,
            addr: 0,
            key: 0,
            ..match write() {
                Repr::Command(c) => c,
                _ => unreachable!(),
            }
        });
        assert_eq!(Repr::from_bytes(&flush.to_bytes()), Ok(flush));
        let mut b = flush.to_bytes();
        b[16] = 1;
        assert_eq!(Repr::from_bytes(&b), Err(WireError::Reserved));
        assert_eq!(
            with(GOLDEN_WRITE, |b| b[1] = op::TRIM),
            Err(WireError::Flags(1))
        );
    }

    #[test]
    fn every_repr_round_trips() {
        let reprs = [
            write(),
            accept(),
            completion(),
            Repr::Connect {
                token: u64::MAX,
                queue_depth: 64,
                max_io: 1 << 20,
            },
            Repr::Refuse(Status::Busy),
            Repr::Disconnect { session: 9 },
        ];
        for r in reprs {
            assert_eq!(Repr::from_bytes(&r.to_bytes()), Ok(r), "{r:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics_and_reencodes(b in proptest::collection::vec(proptest::num::u8::ANY, 0..48)) {
            if let Ok(r) = Repr::from_bytes(&b) {
                proptest::prop_assert_eq!(&r.to_bytes()[..], &b[..]);
            }
        }
    }
}
