//! The header a hybrid endpoint puts before each message it sends through
//! an inner endpoint's message queue, so that the receiving hybrid endpoint
//! matches every message (from either path) in one engine.
//!
//! ```text
//! 0       kind     0: eager (payload follows), 1: rendezvous (payload
//!                  follows as an inner tagged message whose tag is cookie)
//! 1       flags    bit 0: tagged queue, bit 1: carries remote CQ data
//! 2..8    zero
//! 8..16   tag      (u64 LE)
//! 16..24  data     remote CQ data (u64 LE)
//! 24..32  len      message length (u64 LE)
//! 32..40  cookie   rendezvous id, unique per sender (u64 LE); 0 when eager
//! ```
//!
//! An untagged eager message without CQ data may instead go bare: no
//! header, marked by the inner message's remote CQ data [`BARE`].

use ofi_core::error::{Error, Result};

/// Header length.
pub const LEN: usize = 40;
/// Inner remote CQ data that marks a bare message: no header, all
/// payload; an untagged eager message without CQ data. The inner
/// provider's own header carries the word, so the smallest messages keep
/// the size (and the ring slots' cache lines) they have on the inner
/// provider alone.
pub const BARE: u64 = 0x6879_6272_6964_0001;
const KIND_EAGER: u8 = 0;
const KIND_RTS: u8 = 1;
const F_TAGGED: u8 = 1;
const F_DATA: u8 = 2;

/// A decoded header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Rendezvous (payload sent apart) rather than eager.
    pub rts: bool,
    /// Tagged queue.
    pub tagged: bool,
    /// Carries remote CQ data.
    pub has_data: bool,
    /// Tag.
    pub tag: u64,
    /// Remote CQ data.
    pub data: u64,
    /// Message length.
    pub len: u64,
    /// Rendezvous id.
    pub cookie: u64,
}

impl Header {
    /// The header of a bare message of `len` bytes (see [`BARE`]).
    pub fn bare(len: usize) -> Header {
        Header {
            len: len as u64,
            ..Header::default()
        }
    }

    /// Writes the header into `out`.
    pub fn emit(&self, out: &mut [u8; LEN]) {
        out[0] = if self.rts { KIND_RTS } else { KIND_EAGER };
        out[1] = (u8::from(self.tagged) * F_TAGGED) | (u8::from(self.has_data) * F_DATA);
        out[2..8].fill(0);
        out[8..16].copy_from_slice(&self.tag.to_le_bytes());
        out[16..24].copy_from_slice(&self.data.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
        out[32..40].copy_from_slice(&self.cookie.to_le_bytes());
    }

    /// Parses a header from the front of `b`; short or unknown input is an
    /// error (the message is dropped and logged by the caller).
    pub fn parse(b: &[u8]) -> Result<Header> {
        if b.len() < LEN {
            return Err(Error::inval(format!(
                "hybrid: message of {} bytes is shorter than its header",
                b.len()
            )));
        }
        let u = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let rts = match b[0] {
            KIND_EAGER => false,
            KIND_RTS => true,
            k => return Err(Error::inval(format!("hybrid: unknown message kind {k}"))),
        };
        if b[1] & !(F_TAGGED | F_DATA) != 0 {
            return Err(Error::inval(format!(
                "hybrid: unknown header flags {:#x}",
                b[1]
            )));
        }
        Ok(Header {
            rts,
            tagged: b[1] & F_TAGGED != 0,
            has_data: b[1] & F_DATA != 0,
            tag: u(8),
            data: u(16),
            len: u(24),
            cookie: u(32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes() {
        let h = Header {
            rts: true,
            tagged: true,
            has_data: true,
            tag: 0x1122,
            data: 7,
            len: 1 << 20,
            cookie: 3,
        };
        let mut b = [0u8; LEN];
        h.emit(&mut b);
        let want: [u8; LEN] = [
            1, 3, 0, 0, 0, 0, 0, 0, 0x22, 0x11, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0x10, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(b, want);
        assert_eq!(Header::parse(&b).unwrap(), h);
    }

    #[test]
    fn bare_marker_and_header() {
        // The marker is part of the wire format: it must not drift.
        assert_eq!(
            BARE.to_le_bytes(),
            [1, 0, 0x64, 0x69, 0x72, 0x62, 0x79, 0x68]
        );
        let h = Header::bare(8);
        assert_eq!(
            (h.rts, h.tagged, h.has_data, h.len),
            (false, false, false, 8)
        );
    }

    #[test]
    fn truncated_and_unknown_are_refused() {
        let mut b = [0u8; LEN];
        Header::default().emit(&mut b);
        assert!(Header::parse(&b[..LEN - 1]).is_err());
        let mut k = b;
        k[0] = 9;
        assert!(Header::parse(&k).is_err());
        let mut f = b;
        f[1] = 0x80;
        assert!(Header::parse(&f).is_err());
        assert_eq!(Header::parse(&b).unwrap(), Header::default());
    }
}
