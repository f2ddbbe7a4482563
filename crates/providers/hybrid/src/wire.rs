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
//! A small eager message that shm takes as an inject goes short instead:
//! marked by the inner message's remote CQ data, with no header (untagged
//! without CQ data: [`BARE`]) or a prefix of its tag and/or CQ data
//! ([`SHORT`]):
//!
//! ```text
//! inner CQ data    prefix                    then
//! BARE             none                      payload
//! SHORT | 1        tag (u64 LE)              payload
//! SHORT | 2        data (u64 LE)             payload
//! SHORT | 3        tag, data (u64 LE each)   payload
//! ```

use ofi_core::error::{Error, Result};

/// Header length.
pub const LEN: usize = 40;
/// Inner remote CQ data that marks a bare message: no header, all
/// payload; an untagged eager message without CQ data. The inner
/// provider's own header carries the word, so the smallest messages keep
/// the size (and the ring slots' cache lines) they have on the inner
/// provider alone.
pub const BARE: u64 = 0x6879_6272_6964_0001;
/// Inner remote CQ data of a short message with a prefix: `SHORT | 1`
/// tagged (the tag first), `| 2` with CQ data (after the tag, if any).
pub const SHORT: u64 = 0x6879_6272_6964_0010;
const SHORT_TAGGED: u64 = 1;
const SHORT_DATA: u64 = 2;

/// The inner CQ data that marks a short message of this kind, and the
/// length of its prefix.
#[inline]
pub fn short_marker(tagged: bool, has_data: bool) -> (u64, usize) {
    let kind = (u64::from(tagged) * SHORT_TAGGED) | (u64::from(has_data) * SHORT_DATA);
    let marker = if kind == 0 { BARE } else { SHORT | kind };
    (marker, 8 * (usize::from(tagged) + usize::from(has_data)))
}

/// Writes the prefix of a short message into `out` (at least 16 bytes);
/// returns its inner CQ data and the prefix length.
#[inline]
pub fn short_prefix(tagged: bool, tag: u64, data: Option<u64>, out: &mut [u8; 16]) -> (u64, usize) {
    let (marker, n) = short_marker(tagged, data.is_some());
    let mut at = 0;
    if tagged {
        out[..8].copy_from_slice(&tag.to_le_bytes());
        at = 8;
    }
    if let Some(d) = data {
        out[at..at + 8].copy_from_slice(&d.to_le_bytes());
    }
    (marker, n)
}

/// A short message from its inner CQ data and bytes: its header (eager,
/// `len` the payload's) and payload. None when `marker` marks no short
/// message or the bytes are shorter than its prefix.
#[inline]
pub fn parse_short(marker: u64, bytes: &[u8]) -> Option<(Header, &[u8])> {
    let kind = marker ^ SHORT;
    let (tagged, has_data) = if marker == BARE {
        (false, false)
    } else if kind != 0 && kind <= (SHORT_TAGGED | SHORT_DATA) {
        (kind & SHORT_TAGGED != 0, kind & SHORT_DATA != 0)
    } else {
        return None;
    };
    let n = 8 * (usize::from(tagged) + usize::from(has_data));
    if bytes.len() < n {
        return None;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let tag = if tagged { word(0) } else { 0 };
    let data = if has_data { word(n - 8) } else { 0 };
    let body = &bytes[n..];
    Some((
        Header {
            rts: false,
            tagged,
            has_data,
            tag,
            data,
            len: body.len() as u64,
            cookie: 0,
        },
        body,
    ))
}
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
    fn short_markers_and_prefixes() {
        // Part of the wire format: they must not drift.
        assert_eq!(
            SHORT.to_le_bytes(),
            [0x10, 0, 0x64, 0x69, 0x72, 0x62, 0x79, 0x68]
        );
        let mut b = [0u8; 16];
        let (m, n) = short_prefix(true, 0x0102, Some(0x0304), &mut b);
        assert_eq!((m, n), (SHORT | 3, 16));
        assert_eq!(b, [2, 1, 0, 0, 0, 0, 0, 0, 4, 3, 0, 0, 0, 0, 0, 0]);
        let mut msg = b.to_vec();
        msg.extend_from_slice(b"payload!");
        let (h, body) = parse_short(m, &msg).unwrap();
        assert_eq!(
            (h.tagged, h.has_data, h.tag, h.data, h.len),
            (true, true, 0x0102, 0x0304, 8)
        );
        assert_eq!(body, b"payload!");
        // Tag only, data only, neither.
        let (m, n) = short_prefix(true, 9, None, &mut b);
        assert_eq!((m, n, &b[..8]), (SHORT | 1, 8, &9u64.to_le_bytes()[..]));
        let (m, n) = short_prefix(false, 0, Some(5), &mut b);
        assert_eq!((m, n, &b[..8]), (SHORT | 2, 8, &5u64.to_le_bytes()[..]));
        let (h, body) = parse_short(m, &b[..8]).unwrap();
        assert_eq!(
            (h.tagged, h.has_data, h.data, h.len, body.len()),
            (false, true, 5, 0, 0)
        );
        assert_eq!(short_marker(false, false), (BARE, 0));
        // Too short for its prefix, or no marker: refused.
        assert!(parse_short(SHORT | 3, &[0u8; 15]).is_none());
        assert!(parse_short(SHORT, &[0u8; 16]).is_none());
        assert!(parse_short(SHORT | 4, &[0u8; 16]).is_none());
        assert!(parse_short(0, &[]).is_none());
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
