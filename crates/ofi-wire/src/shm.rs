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
    /// Highest known opcode.
    pub const MAX: u8 = 7;
}

/// Flag bits.
pub mod flag {
    /// Tagged message.
    pub const TAGGED: u8 = 1;
    /// `data` carries remote CQ data.
    pub const CQ_DATA: u8 = 2;
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
    fn u64_at(&self, at: usize) -> u64 {
        let b = self.buf.as_ref();
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
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
    /// RTS iov count.
    pub fn iov_cnt(&self) -> u8 {
        self.buf.as_ref()[field::IOV_CNT]
    }
    /// Inline length.
    #[inline]
    pub fn len(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_le_bytes([
            b[field::LEN],
            b[field::LEN + 1],
            b[field::LEN + 2],
            b[field::LEN + 3],
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
    fn set_u64(&mut self, at: usize, v: u64) {
        self.buf.as_mut()[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets the opcode.
    pub fn set_op(&mut self, v: u8) {
        self.buf.as_mut()[field::OP] = v;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::FLAGS] = v;
    }
    /// Sets the iov count.
    pub fn set_iov_cnt(&mut self, v: u8) {
        self.buf.as_mut()[field::IOV_CNT] = v;
        self.buf.as_mut()[3] = 0;
    }
    /// Sets the inline length.
    pub fn set_len(&mut self, v: u32) {
        self.buf.as_mut()[field::LEN..field::LEN + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets the sender id.
    pub fn set_src(&mut self, v: u64) {
        self.set_u64(field::SRC, v)
    }
    /// Sets the tag.
    pub fn set_tag(&mut self, v: u64) {
        self.set_u64(field::TAG, v)
    }
    /// Sets the data.
    pub fn set_data(&mut self, v: u64) {
        self.set_u64(field::DATA, v)
    }
    /// Sets total / offset.
    pub fn set_total(&mut self, v: u64) {
        self.set_u64(field::TOTAL, v)
    }
    /// Sets the cookie.
    pub fn set_cookie(&mut self, v: u64) {
        self.set_u64(field::COOKIE, v)
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
    /// Parses and validates a header against the entry's capacity.
    pub fn parse<T: AsRef<[u8]>>(e: &Entry<T>) -> Result<Repr, WireError> {
        e.check_len()?;
        let r = Repr {
            op: e.op(),
            flags: e.flags(),
            iov_cnt: e.iov_cnt(),
            len: e.len(),
            src: e.src(),
            tag: e.tag(),
            data: e.data(),
            total: e.total(),
            cookie: e.cookie(),
        };
        if r.op == 0 || r.op > op::MAX {
            return Err(WireError::UnknownOp(r.op));
        }
        if r.flags & !(flag::TAGGED | flag::CQ_DATA) != 0 {
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
            _ => {}
        }
        Ok(r)
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, e: &mut Entry<T>) {
        e.set_op(self.op);
        e.set_flags(self.flags);
        e.set_iov_cnt(self.iov_cnt);
        e.set_len(self.len);
        e.set_src(self.src);
        e.set_tag(self.tag);
        e.set_data(self.data);
        e.set_total(self.total);
        e.set_cookie(self.cookie);
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
        buf[0] = 9;
        assert_eq!(
            Repr::parse(&Entry::new_unchecked(&buf[..])),
            Err(WireError::UnknownOp(9))
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
