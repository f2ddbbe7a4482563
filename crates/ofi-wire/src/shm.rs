//! The shm ring entry: a 48-byte header followed by inline data or an iov
//! list. All fields little-endian.
//!
//! ```text
//!  0  op u8 | 1 flags u8 | 2 iov_cnt u8 | 3 reserved u8 | 4 len u32
//!  8  src u64      sender endpoint id (pid << 32 | index)
//! 16  tag u64      tag (tagged) / descriptor index (CTS)
//! 24  data u64     remote CQ data / ACK status / descriptor generation (CTS)
//! 32  total u64    message length / DATA offset
//! 40  cookie u64   sender's operation id (RTS, ACK, NACK, DATA, CTS) / bounce index (BOUNCE)
//! 48  payload      inline bytes, or iov_cnt × (addr u64, len u64) for RTS
//! ```
//!
//! One-sided requests (RMA_WRITE, RMA_PULL, RMA_READ, ATOMIC) carry their
//! remote ranges first: `ranges` (low nibble of `iov_cnt`) × (addr u64,
//! len-or-count u64, key u64); RMA_PULL and RMA_READ follow them with
//! `locals` (high nibble) × (addr u64, len u64) of the initiator's memory;
//! RMA_WRITE and ATOMIC follow them with their inline data. `tag` holds the
//! operation's total length (ATOMIC: op | datatype << 8 | kind << 16),
//! `total` the byte offset of a chunk (ATOMIC: the element count), `cookie`
//! the initiator's operation id. The target answers with RMA_RESP: `data`
//! is 0 or an FI_E* number, `total` the offset of any returned bytes, flag
//! LAST on the final answer, PUSH when it cannot copy across processes.
//!
//! Endpoints with an auth key prove it to each other before any other
//! entry is accepted (`ofi_proto::shm::auth` has the exchange): HELLO
//! carries the initiator's nonce (32 bytes); CHALLENGE the echoed
//! initiator nonce, the acceptor's nonce and the acceptor's proof (32
//! bytes each); PROOF the echoed acceptor nonce and the initiator's proof;
//! REJECT (no payload) says the sender refused the other side's proof or
//! entries. `len` is the payload's exact length, checked.

use crate::WireError;

/// Header length.
pub const HDR_LEN: usize = 48;
/// Most iov entries an RTS carries.
pub const MAX_RTS_IOV: usize = 4;

/// Opcodes.
pub mod op {
    /// A whole message inline in the entry.
    pub const INLINE: u8 = 1;
    /// A message in a bounce buffer of the receiver's segment (`cookie`: index).
    pub const BOUNCE: u8 = 2;
    /// Request to send: the receiver copies from the sender's iov list.
    pub const RTS: u8 = 3;
    /// The receiver finished with an RTS (`data`: 0 or an FI_E* number).
    pub const ACK: u8 = 4;
    /// The receiver cannot copy across processes: push the data as DATA entries.
    pub const NACK: u8 = 5;
    /// A chunk of an RTS message pushed inline (`total`: offset).
    pub const DATA: u8 = 6;
    /// Clear to send: help copy an RTS message through transfer descriptor
    /// `tag` of generation `data` in the receiver's segment.
    pub const CTS: u8 = 7;
    /// One-sided write with the data inline (a whole write or one chunk).
    pub const RMA_WRITE: u8 = 8;
    /// One-sided write the target pulls from the initiator's memory.
    pub const RMA_PULL: u8 = 9;
    /// One-sided read.
    pub const RMA_READ: u8 = 10;
    /// Atomic with operands (and compare values) inline.
    pub const ATOMIC: u8 = 11;
    /// The target's answer to a one-sided request.
    pub const RMA_RESP: u8 = 12;
    /// Auth: the initiator's nonce.
    pub const HELLO: u8 = 13;
    /// Auth: the acceptor's nonce and proof.
    pub const CHALLENGE: u8 = 14;
    /// Auth: the initiator's proof.
    pub const PROOF: u8 = 15;
    /// Auth: the sender refused the other side (its proof or its entries).
    pub const REJECT: u8 = 16;
    /// Highest known opcode.
    pub const MAX: u8 = 16;
}

/// Bytes of an auth nonce.
pub const AUTH_NONCE: usize = 32;
/// Bytes of an auth proof (HMAC-SHA256).
pub const AUTH_TAG: usize = 32;
/// HELLO payload: the initiator's nonce.
pub const HELLO_LEN: usize = AUTH_NONCE;
/// CHALLENGE payload: initiator nonce, acceptor nonce, acceptor proof.
pub const CHALLENGE_LEN: usize = 2 * AUTH_NONCE + AUTH_TAG;
/// PROOF payload: acceptor nonce, initiator proof.
pub const PROOF_LEN: usize = AUTH_NONCE + AUTH_TAG;

/// Flag bits.
pub mod flag {
    /// Tagged message.
    pub const TAGGED: u8 = 1;
    /// `data` carries remote CQ data.
    pub const CQ_DATA: u8 = 2;
    /// The last chunk of a one-sided write, or the final answer.
    pub const LAST: u8 = 4;
    /// Answer: the target cannot copy across processes; push the data.
    pub const PUSH: u8 = 8;
    /// FI_COMMIT_COMPLETE (RMA_WRITE, RMA_PULL, ATOMIC): the target refuses
    /// memory it cannot make durable and answers once the bytes are on
    /// stable storage.
    pub const COMMIT: u8 = 16;
    /// Every known flag.
    pub const ALL: u8 = TAGGED | CQ_DATA | LAST | PUSH | COMMIT;
}

/// Bytes of one remote range in a one-sided request.
pub const RANGE_LEN: usize = 24;
/// Bytes of one initiator range in RMA_PULL / RMA_READ.
pub const LOCAL_LEN: usize = 16;
/// Most remote ranges (and initiator ranges) one request names.
pub const MAX_RANGES: usize = 4;

/// A remote range as carried by a one-sided request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireRange {
    /// Remote address (virtual or offset).
    pub addr: u64,
    /// Length in bytes (ATOMIC: element count).
    pub len: u64,
    /// Remote key.
    pub key: u64,
}

/// The little-endian `u64` at `at` of `b` (0 past its end: callers read
/// inside lists whose size they checked).
#[inline]
fn le64(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()) {
        Some(a) => u64::from_le_bytes(a),
        None => 0,
    }
}

/// Writes one remote range at the start of `p` (at least [`RANGE_LEN`]
/// bytes).
#[inline]
pub fn put_range(p: &mut [u8], r: WireRange) {
    p[..8].copy_from_slice(&r.addr.to_le_bytes());
    p[8..16].copy_from_slice(&r.len.to_le_bytes());
    p[16..24].copy_from_slice(&r.key.to_le_bytes());
}

/// Writes `ranges` then `locals` at the start of a payload; returns bytes used.
pub fn put_ranges(p: &mut [u8], ranges: &[WireRange], locals: &[(u64, u64)]) -> usize {
    let mut at = 0;
    for r in ranges {
        put_range(&mut p[at..at + RANGE_LEN], *r);
        at += RANGE_LEN;
    }
    for &(a, l) in locals {
        p[at..at + 8].copy_from_slice(&a.to_le_bytes());
        p[at + 8..at + 16].copy_from_slice(&l.to_le_bytes());
        at += LOCAL_LEN;
    }
    at
}

/// The ranges of a validated one-sided request: remote ranges, initiator
/// ranges, and where the inline data starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    /// Remote ranges (first `n_remote` valid).
    pub remote: [WireRange; MAX_RANGES],
    /// Number of remote ranges.
    pub n_remote: usize,
    /// Initiator ranges (first `n_local` valid).
    pub local: [(u64, u64); MAX_RANGES],
    /// Number of initiator ranges.
    pub n_local: usize,
    /// Payload offset of the inline data.
    pub data_at: usize,
}

impl Ranges {
    /// The remote ranges.
    pub fn remote(&self) -> &[WireRange] {
        &self.remote[..self.n_remote]
    }
    /// The initiator ranges.
    pub fn local(&self) -> &[(u64, u64)] {
        &self.local[..self.n_local]
    }
    /// Sum of the remote lengths (saturating).
    pub fn remote_len(&self) -> u64 {
        self.remote()
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.len))
    }
}

/// The range lists of a one-sided request read in place from its payload
/// (no copy): counts and sizes checked against the entry by
/// [`Repr::range_list`], so that every range it names lies in the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeList<'a> {
    /// The payload, from the first remote range on.
    p: &'a [u8],
    /// Number of remote ranges (1..=[`MAX_RANGES`]).
    pub n_remote: usize,
    /// Number of initiator ranges (0..=[`MAX_RANGES`]).
    pub n_local: usize,
    /// Payload offset of the inline data.
    pub data_at: usize,
}

impl<'a> RangeList<'a> {
    /// Remote range `i` (`i < n_remote`; a default range past them).
    #[inline]
    pub fn remote(&self, i: usize) -> WireRange {
        let b = match self.p.get(i * RANGE_LEN..) {
            Some(b) if i < self.n_remote => b.first_chunk::<RANGE_LEN>(),
            _ => None,
        };
        let Some(b) = b else {
            return WireRange::default();
        };
        // Fixed offsets in a fixed-size array: no check is left.
        let at =
            |o: usize| u64::from_le_bytes(<[u8; 8]>::try_from(&b[o..o + 8]).unwrap_or_default());
        WireRange {
            addr: at(0),
            len: at(8),
            key: at(16),
        }
    }
    /// Initiator range `i` as (address, length) (`i < n_local`; (0, 0)
    /// past them).
    #[inline]
    pub fn local(&self, i: usize) -> (u64, u64) {
        if i >= self.n_local {
            return (0, 0);
        }
        let at = self.n_remote * RANGE_LEN + i * LOCAL_LEN;
        (le64(self.p, at), le64(self.p, at + 8))
    }
    /// The remote ranges, in order.
    pub fn remotes(&self) -> impl Iterator<Item = WireRange> + '_ {
        (0..self.n_remote).map(|i| self.remote(i))
    }
    /// The initiator ranges, in order.
    pub fn locals(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.n_local).map(|i| self.local(i))
    }
    /// Sum of the remote lengths (saturating).
    pub fn remote_len(&self) -> u64 {
        self.remotes().fold(0u64, |a, r| a.saturating_add(r.len))
    }
    /// Sum of the initiator lengths (saturating).
    pub fn local_len(&self) -> u64 {
        self.locals().fold(0u64, |a, l| a.saturating_add(l.1))
    }
    /// `len` bytes of inline data (`None` past the payload).
    #[inline]
    pub fn data(&self, len: usize) -> Option<&'a [u8]> {
        self.p.get(self.data_at..self.data_at.checked_add(len)?)
    }
    /// The payload the lists were read from (lists, then inline data).
    pub fn payload(&self) -> &'a [u8] {
        self.p
    }
    /// The lists copied out.
    pub fn to_ranges(&self) -> Ranges {
        let mut out = Ranges {
            n_remote: self.n_remote,
            n_local: self.n_local,
            data_at: self.data_at,
            ..Default::default()
        };
        for (o, r) in out.remote.iter_mut().zip(self.remotes()) {
            *o = r;
        }
        for (o, l) in out.local.iter_mut().zip(self.locals()) {
            *o = l;
        }
        out
    }
}

mod field {
    pub const OP: usize = 0;
    pub const FLAGS: usize = 1;
    pub const IOV_CNT: usize = 2;
    pub const LEN: usize = 4;
    pub const SRC: usize = 8;
    pub const TAG: usize = 16;
    pub const DATA: usize = 24;
    pub const TOTAL: usize = 32;
    pub const COOKIE: usize = 40;
}

/// A checked view of an entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Entry<T> {
    /// Wraps a buffer without checks (setters on a fresh buffer).
    pub const fn new_unchecked(buf: T) -> Self {
        Entry { buf }
    }
    /// Wraps a buffer after checking it holds a header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let e = Entry { buf };
        e.check_len()?;
        Ok(e)
    }
    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buf.as_ref().len() < HDR_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }
    /// The header bytes as one array: the fields below read it at fixed
    /// offsets with no check each (panics on a buffer shorter than the
    /// header, as every accessor would; `new_checked` refuses those).
    #[inline]
    fn header(&self) -> &[u8; HDR_LEN] {
        match self.buf.as_ref().first_chunk::<HDR_LEN>() {
            Some(h) => h,
            None => panic!("shm entry shorter than its header"),
        }
    }
    #[inline]
    fn u64_at(&self, at: usize) -> u64 {
        let h = self.header();
        u64::from_le_bytes([
            h[at],
            h[at + 1],
            h[at + 2],
            h[at + 3],
            h[at + 4],
            h[at + 5],
            h[at + 6],
            h[at + 7],
        ])
    }
    /// Opcode.
    #[inline]
    pub fn op(&self) -> u8 {
        self.header()[field::OP]
    }
    /// Flags.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.header()[field::FLAGS]
    }
    /// RTS iov count.
    #[inline]
    pub fn iov_cnt(&self) -> u8 {
        self.header()[field::IOV_CNT]
    }
    /// Inline length.
    #[inline]
    pub fn len(&self) -> u32 {
        let h = self.header();
        u32::from_le_bytes([
            h[field::LEN],
            h[field::LEN + 1],
            h[field::LEN + 2],
            h[field::LEN + 3],
        ])
    }
    /// True when the inline length is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Sender id.
    #[inline]
    pub fn src(&self) -> u64 {
        self.u64_at(field::SRC)
    }
    /// Tag.
    #[inline]
    pub fn tag(&self) -> u64 {
        self.u64_at(field::TAG)
    }
    /// Data.
    #[inline]
    pub fn data(&self) -> u64 {
        self.u64_at(field::DATA)
    }
    /// Total / offset.
    #[inline]
    pub fn total(&self) -> u64 {
        self.u64_at(field::TOTAL)
    }
    /// Cookie.
    #[inline]
    pub fn cookie(&self) -> u64 {
        self.u64_at(field::COOKIE)
    }
    /// Bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HDR_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Entry<T> {
    /// The header bytes as one mutable array (see `header`).
    #[inline]
    fn header_mut(&mut self) -> &mut [u8; HDR_LEN] {
        match self.buf.as_mut().first_chunk_mut::<HDR_LEN>() {
            Some(h) => h,
            None => panic!("shm entry shorter than its header"),
        }
    }
    /// Mutable bytes after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HDR_LEN..]
    }
}

/// A parsed, validated entry header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repr {
    /// Opcode.
    pub op: u8,
    /// Flags.
    pub flags: u8,
    /// RTS iov count.
    pub iov_cnt: u8,
    /// Inline length.
    pub len: u32,
    /// Sender id.
    pub src: u64,
    /// Tag or bounce index.
    pub tag: u64,
    /// Data or status.
    pub data: u64,
    /// Total or offset.
    pub total: u64,
    /// Cookie.
    pub cookie: u64,
}

impl Repr {
    /// The header's fields as they are (no check).
    #[inline]
    fn read<T: AsRef<[u8]>>(e: &Entry<T>) -> Repr {
        Repr {
            op: e.op(),
            flags: e.flags(),
            iov_cnt: e.iov_cnt(),
            len: e.len(),
            src: e.src(),
            tag: e.tag(),
            data: e.data(),
            total: e.total(),
            cookie: e.cookie(),
        }
    }

    /// Parses and validates a header against the entry's capacity.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(e: &Entry<T>) -> Result<Repr, WireError> {
        e.check_len()?;
        let r = Repr::read(e);
        if r.op == 0 || r.op > op::MAX {
            return Err(WireError::UnknownOp(r.op));
        }
        if r.flags & !flag::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        let cap = e.payload().len();
        match r.op {
            op::INLINE | op::DATA if r.len as usize > cap => {
                return Err(WireError::Malformed("inline length exceeds the entry"))
            }
            op::INLINE if u64::from(r.len) != r.total => {
                return Err(WireError::Malformed("inline length differs from total"))
            }
            op::RTS
                if r.iov_cnt == 0
                    || r.iov_cnt as usize > MAX_RTS_IOV
                    || r.iov_cnt as usize * 16 > cap =>
            {
                return Err(WireError::Malformed("RTS iov count out of range"));
            }
            op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC => {
                r.check_request(&r.range_list(e.payload())?)?;
            }
            op::RMA_RESP if r.len as usize > cap => {
                return Err(WireError::Malformed("answer length exceeds the entry"))
            }
            op::HELLO | op::CHALLENGE | op::PROOF | op::REJECT => {
                let want = match r.op {
                    op::HELLO => HELLO_LEN,
                    op::CHALLENGE => CHALLENGE_LEN,
                    op::PROOF => PROOF_LEN,
                    _ => 0,
                };
                if r.len as usize != want || want > cap {
                    return Err(WireError::Malformed("auth entry of the wrong length"));
                }
            }
            _ => {}
        }
        Ok(r)
    }
    /// A one-sided request (RMA_WRITE, RMA_PULL, RMA_READ, ATOMIC) parsed
    /// from an entry's bytes `b` with the checks of [`parse`](Self::parse),
    /// and its range lists read in place (what a target executes).
    #[inline]
    pub fn parse_request(b: &[u8]) -> Result<(Repr, RangeList<'_>), WireError> {
        let e = Entry::new_checked(b)?;
        let r = Repr::read(&e);
        if !matches!(
            r.op,
            op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC
        ) {
            return Err(WireError::Malformed("not a one-sided request"));
        }
        if r.flags & !flag::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        let list = r.range_list(b.get(HDR_LEN..).unwrap_or(&[]))?;
        r.check_request(&list)?;
        Ok((r, list))
    }

    /// The checks of a one-sided request against its range lists: the
    /// lengths add up to the operation's, a chunk lies inside its write.
    #[inline]
    fn check_request(&self, rg: &RangeList<'_>) -> Result<(), WireError> {
        let r = self;
        if r.op != op::ATOMIC && rg.remote_len() != r.tag {
            return Err(WireError::Malformed("remote ranges differ from the length"));
        }
        if r.op == op::ATOMIC && rg.remote_len() != r.total {
            return Err(WireError::Malformed("remote counts differ from the count"));
        }
        if (r.op == op::RMA_PULL || r.op == op::RMA_READ) && rg.local_len() != r.tag {
            return Err(WireError::Malformed(
                "initiator ranges differ from the length",
            ));
        }
        if r.op == op::RMA_WRITE
            && r.total
                .checked_add(u64::from(r.len))
                .is_none_or(|end| end > r.tag)
        {
            return Err(WireError::Malformed(
                "write chunk beyond the write's length",
            ));
        }
        Ok(())
    }

    /// The ranges of a one-sided request, checked against the entry:
    /// counts within [`MAX_RANGES`], lists and inline data inside the payload.
    pub fn ranges<T: AsRef<[u8]>>(&self, e: &Entry<T>) -> Result<Ranges, WireError> {
        self.range_list(e.payload()).map(|l| l.to_ranges())
    }
    /// [`ranges`](Self::ranges) read in place from the entry's `payload`,
    /// with the same checks and no copy.
    #[inline]
    pub fn range_list<'a>(&self, payload: &'a [u8]) -> Result<RangeList<'a>, WireError> {
        let n_remote = (self.iov_cnt & 0xf) as usize;
        let n_local = (self.iov_cnt >> 4) as usize;
        let wants_local = self.op == op::RMA_PULL || self.op == op::RMA_READ;
        if n_remote == 0 || n_remote > MAX_RANGES || n_local > MAX_RANGES {
            return Err(WireError::Malformed("one-sided range count out of range"));
        }
        if wants_local != (n_local > 0) && !(wants_local && self.tag == 0) {
            return Err(WireError::Malformed("initiator ranges where none belong"));
        }
        let data_at = n_remote * RANGE_LEN + n_local * LOCAL_LEN;
        let data_len = if wants_local { 0 } else { self.len as usize };
        if data_at
            .checked_add(data_len)
            .is_none_or(|end| end > payload.len())
        {
            return Err(WireError::Malformed("one-sided request exceeds the entry"));
        }
        Ok(RangeList {
            p: payload,
            n_remote,
            n_local,
            data_at,
        })
    }
    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, e: &mut Entry<T>) {
        let h = e.header_mut();
        h[field::OP] = self.op;
        h[field::FLAGS] = self.flags;
        h[field::IOV_CNT] = self.iov_cnt;
        h[3] = 0;
        h[field::LEN..field::LEN + 4].copy_from_slice(&self.len.to_le_bytes());
        for (at, v) in [
            (field::SRC, self.src),
            (field::TAG, self.tag),
            (field::DATA, self.data),
            (field::TOTAL, self.total),
            (field::COOKIE, self.cookie),
        ] {
            h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    /// The RTS iov list as (address, length) pairs.
    pub fn rts_iov<T: AsRef<[u8]>>(&self, e: &Entry<T>) -> [(u64, u64); MAX_RTS_IOV] {
        let mut out = [(0, 0); MAX_RTS_IOV];
        let p = e.payload();
        for (i, o) in out
            .iter_mut()
            .enumerate()
            .take((self.iov_cnt as usize).min(MAX_RTS_IOV))
        {
            let at = i * 16;
            if at + 16 <= p.len() {
                let mut a = [0u8; 8];
                a.copy_from_slice(&p[at..at + 8]);
                let mut l = [0u8; 8];
                l.copy_from_slice(&p[at + 8..at + 16]);
                *o = (u64::from_le_bytes(a), u64::from_le_bytes(l));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static GOLDEN: [u8; 56] = [
        0x01, 0x03, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, // op INLINE, TAGGED|CQ_DATA, len 8
        0x07, 0x00, 0x00, 0x00, 0xd2, 0x04, 0x00, 0x00, // src = 1234 << 32 | 7
        0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, // tag 0xdeadbeef
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 42
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // total 8
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cookie 0
        b'p', b'i', b'n', b'g', b'p', b'o', b'n', b'g',
    ];

    fn golden_repr() -> Repr {
        Repr {
            op: op::INLINE,
            flags: flag::TAGGED | flag::CQ_DATA,
            iov_cnt: 0,
            len: 8,
            src: (1234 << 32) | 7,
            tag: 0xdead_beef,
            data: 42,
            total: 8,
            cookie: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let e = Entry::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(Repr::parse(&e).unwrap(), golden_repr());
        assert_eq!(e.payload(), b"pingpong");
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xffu8; 56];
        let mut e = Entry::new_unchecked(&mut buf[..]);
        golden_repr().emit(&mut e);
        e.payload_mut().copy_from_slice(b"pingpong");
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Entry::new_checked(&GOLDEN[..47]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn test_rejects_impossible_values() {
        let mut buf = GOLDEN;
        buf[0] = 17;
        assert_eq!(
            Repr::parse(&Entry::new_unchecked(&buf[..])),
            Err(WireError::UnknownOp(17))
        );
        let mut buf = GOLDEN;
        buf[4] = 9; // len 9 > 8 bytes of payload
        assert!(matches!(
            Repr::parse(&Entry::new_unchecked(&buf[..])),
            Err(WireError::Malformed(_))
        ));
        let mut buf = GOLDEN;
        buf[1] = 0x80;
        assert!(matches!(
            Repr::parse(&Entry::new_unchecked(&buf[..])),
            Err(WireError::Malformed(_))
        ));
        let mut buf = [0u8; 48 + 64];
        let mut e = Entry::new_unchecked(&mut buf[..]);
        Repr {
            op: op::RTS,
            iov_cnt: 5,
            ..Default::default()
        }
        .emit(&mut e);
        assert!(matches!(
            Repr::parse(&Entry::new_unchecked(&buf[..])),
            Err(WireError::Malformed(_))
        ));
    }

    static GOLDEN_HELLO: [u8; 80] = {
        let mut b = [0u8; 80];
        b[0] = 13; // HELLO
        b[4] = 32; // len 32
        b[8] = 3; // src = 9 << 32 | 3
        b[12] = 9;
        let mut i = 0;
        while i < 32 {
            b[48 + i] = i as u8; // the nonce
            i += 1;
        }
        b
    };

    #[test]
    fn auth_entries_have_exact_lengths() {
        let e = Entry::new_checked(&GOLDEN_HELLO[..]).unwrap();
        let r = Repr::parse(&e).unwrap();
        assert_eq!((r.op, r.len, r.src), (op::HELLO, 32, (9 << 32) | 3));
        assert_eq!(
            e.payload()[..32],
            core::array::from_fn::<u8, 32, _>(|i| i as u8)
        );
        let mut buf = [0u8; 80];
        Repr {
            op: op::HELLO,
            len: HELLO_LEN as u32,
            src: (9 << 32) | 3,
            ..Default::default()
        }
        .emit(&mut Entry::new_unchecked(&mut buf[..]));
        buf[48..].copy_from_slice(&GOLDEN_HELLO[48..]);
        assert_eq!(buf, GOLDEN_HELLO);
        for (o, good) in [
            (op::HELLO, HELLO_LEN),
            (op::CHALLENGE, CHALLENGE_LEN),
            (op::PROOF, PROOF_LEN),
            (op::REJECT, 0),
        ] {
            let mut buf = [0u8; HDR_LEN + 128];
            for len in [0, 1, 31, 32, 64, 96, 97, 1 << 20] {
                Repr {
                    op: o,
                    len,
                    ..Default::default()
                }
                .emit(&mut Entry::new_unchecked(&mut buf[..]));
                let ok = Repr::parse(&Entry::new_unchecked(&buf[..])).is_ok();
                assert_eq!(ok, len as usize == good, "op {o} len {len}");
            }
        }
        // An entry too small for its payload.
        let mut small = [0u8; HDR_LEN + 64];
        Repr {
            op: op::CHALLENGE,
            len: CHALLENGE_LEN as u32,
            ..Default::default()
        }
        .emit(&mut Entry::new_unchecked(&mut small[..]));
        assert!(Repr::parse(&Entry::new_unchecked(&small[..])).is_err());
    }

    fn one_sided(op: u8, ranges: &[WireRange], locals: &[(u64, u64)], data: usize) -> Vec<u8> {
        let mut buf = vec![0u8; HDR_LEN + 256];
        let mut e = Entry::new_unchecked(&mut buf[..]);
        let used = put_ranges(e.payload_mut(), ranges, locals);
        assert_eq!(used, ranges.len() * RANGE_LEN + locals.len() * LOCAL_LEN);
        let total = ranges.iter().fold(0u64, |a, r| a.wrapping_add(r.len));
        Repr {
            op,
            flags: flag::LAST,
            iov_cnt: ranges.len() as u8 | (locals.len() as u8) << 4,
            len: data as u32,
            tag: if op == op::ATOMIC { 0x0002_0607 } else { total },
            total: if op == op::ATOMIC { total } else { 0 },
            cookie: 77,
            ..Default::default()
        }
        .emit(&mut e);
        buf
    }

    #[test]
    fn one_sided_requests_roundtrip_and_reject_bad_ranges() {
        let rg = [
            WireRange {
                addr: 0x1000,
                len: 16,
                key: 0xabcd,
            },
            WireRange {
                addr: 0x2000,
                len: 8,
                key: 0xabcd,
            },
        ];
        let w = one_sided(op::RMA_WRITE, &rg, &[], 24);
        let e = Entry::new_unchecked(&w[..]);
        let r = Repr::parse(&e).unwrap();
        let got = r.ranges(&e).unwrap();
        assert_eq!(got.remote(), &rg);
        assert_eq!(got.data_at, 48);
        let rd = one_sided(op::RMA_READ, &rg, &[(0x9000, 20), (0xa000, 4)], 0);
        let e = Entry::new_unchecked(&rd[..]);
        let r = Repr::parse(&e).unwrap();
        assert_eq!(r.ranges(&e).unwrap().local(), &[(0x9000, 20), (0xa000, 4)]);
        // Initiator ranges that do not add up to the length.
        let bad = one_sided(op::RMA_READ, &rg, &[(0x9000, 20)], 0);
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
        // Inline data running past the entry.
        let bad = one_sided(op::RMA_WRITE, &rg, &[], 4000);
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
        // No ranges, too many ranges.
        let mut bad = one_sided(op::RMA_WRITE, &rg, &[], 24);
        bad[2] = 0;
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
        bad[2] = 5;
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
        // A range length that overflows when summed.
        let huge = [
            WireRange {
                addr: 0,
                len: u64::MAX,
                key: 1,
            },
            WireRange {
                addr: 0,
                len: 2,
                key: 1,
            },
        ];
        let bad = one_sided(op::RMA_WRITE, &huge, &[], 0);
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
        // Atomic counts must match the element count.
        let a = one_sided(op::ATOMIC, &rg[..1], &[], 16);
        assert!(Repr::parse(&Entry::new_unchecked(&a[..])).is_ok());
        let mut bad = a.clone();
        bad[32] = 3; // total (count) 3 != 16
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
    }

    #[test]
    fn a_range_list_reads_what_put_ranges_wrote() {
        let rg = [
            WireRange {
                addr: 0x1000,
                len: 16,
                key: 0xabcd,
            },
            WireRange {
                addr: 0x2000,
                len: 8,
                key: 0x1234,
            },
        ];
        let locals = [(0x9000, 20), (0xa000, 4)];
        let b = one_sided(op::RMA_READ, &rg, &locals, 0);
        let (r, list) = Repr::parse_request(&b).expect("a read");
        assert_eq!(r, Repr::parse(&Entry::new_unchecked(&b[..])).unwrap());
        assert_eq!((list.n_remote, list.n_local, list.data_at), (2, 2, 80));
        assert_eq!(list.remotes().collect::<Vec<_>>(), rg);
        assert_eq!(list.locals().collect::<Vec<_>>(), locals);
        assert_eq!(list.remote(2), WireRange::default(), "past the list");
        assert_eq!(list.local(2), (0, 0), "past the list");
        assert_eq!((list.remote_len(), list.local_len()), (24, 24));
        let w = one_sided(op::RMA_WRITE, &rg, &[], 24);
        let (_, list) = Repr::parse_request(&w).expect("a write");
        assert_eq!(list.data(24), Some(&w[HDR_LEN + 48..HDR_LEN + 72]));
        assert_eq!(list.data(4000), None);
        // Not a request; a request that parse refuses.
        assert!(Repr::parse_request(&GOLDEN).is_err());
        let mut bad = w.clone();
        bad[16] = 25; // tag (length) 25 != 24
        assert!(Repr::parse_request(&bad).is_err());
        assert!(Repr::parse(&Entry::new_unchecked(&bad[..])).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parse_request_agrees_with_parse(
            mut b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            o in op::RMA_WRITE..=op::RMA_RESP,
        ) {
            // Most inputs start as requests with few ranges.
            if b.len() > 2 {
                b[0] = o;
                b[2] &= 0x33;
            }
            let whole = Entry::new_checked(&b[..])
                .ok()
                .and_then(|e| Repr::parse(&e).ok().map(|r| (r, r.ranges(&e))));
            match Repr::parse_request(&b) {
                Ok((r, list)) => {
                    let (pr, rg) = whole.expect("parse takes what parse_request takes");
                    proptest::prop_assert_eq!(r, pr);
                    proptest::prop_assert_eq!(Ok(list.to_ranges()), rg);
                }
                Err(_) => proptest::prop_assert!(whole.is_none() || o == op::RMA_RESP),
            }
        }
    }

    #[test]
    fn rts_iov_roundtrip() {
        let mut buf = [0u8; 48 + 64];
        let mut e = Entry::new_unchecked(&mut buf[..]);
        let r = Repr {
            op: op::RTS,
            iov_cnt: 2,
            total: 30,
            ..Default::default()
        };
        r.emit(&mut e);
        let p = e.payload_mut();
        p[0..8].copy_from_slice(&0x1000u64.to_le_bytes());
        p[8..16].copy_from_slice(&10u64.to_le_bytes());
        p[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
        p[24..32].copy_from_slice(&20u64.to_le_bytes());
        let e = Entry::new_checked(&buf[..]).unwrap();
        let r = Repr::parse(&e).unwrap();
        let iov = r.rts_iov(&e);
        assert_eq!(&iov[..2], &[(0x1000, 10), (0x2000, 20)]);
    }
}
