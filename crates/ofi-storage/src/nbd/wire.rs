//! NBD's wire format (the fixed newstyle protocol, structured replies): the
//! magic numbers and constants, the option and request headers as checked
//! views, and encoders for every reply the gateway sends. Big-endian, as
//! NBD is.
//!
//! ```text
//! option:  0 magic u64 (IHAVEOPT) |  8 option u32 | 12 length u32 | 16 data
//! request: 0 magic u32 | 4 flags u16 | 6 type u16 | 8 cookie u64 | 16 offset u64 | 24 length u32
//! simple reply:     0 magic u32 | 4 error u32 | 8 cookie u64 | 16 data
//! structured chunk: 0 magic u32 | 4 flags u16 | 6 type u16 | 8 cookie u64 | 16 length u32 | 20 payload
//! option reply:     0 magic u64 | 8 option u32 | 12 type u32 | 16 length u32 | 20 data
//! ```

use std::fmt;

/// "NBDMAGIC": first bytes of the server's greeting.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": the greeting's second word and every option's magic.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_MAGIC: u32 = 0x668e_33ef;

/// Length of an option header.
pub const OPTION_LEN: usize = 16;
/// Length of a request header.
pub const REQUEST_LEN: usize = 28;
/// Length of a simple reply header.
pub const SIMPLE_LEN: usize = 16;
/// Length of a structured chunk header.
pub const CHUNK_LEN: usize = 20;
/// Length of an option reply header.
pub const OPT_REPLY_LEN: usize = 20;

/// Handshake flags (server) and client flags.
pub mod hs {
    /// Server: fixed newstyle.
    pub const FIXED_NEWSTYLE: u16 = 1;
    /// Server: no 124 zero bytes after NBD_OPT_EXPORT_NAME.
    pub const NO_ZEROES: u16 = 2;
    /// Client: fixed newstyle.
    pub const C_FIXED_NEWSTYLE: u32 = 1;
    /// Client: no zeroes.
    pub const C_NO_ZEROES: u32 = 2;
}

/// Options.
pub mod opt {
    /// Select an export, old style (no reply header).
    pub const EXPORT_NAME: u32 = 1;
    /// End the handshake.
    pub const ABORT: u32 = 2;
    /// List exports.
    pub const LIST: u32 = 3;
    /// TLS.
    pub const STARTTLS: u32 = 5;
    /// Describe an export.
    pub const INFO: u32 = 6;
    /// Describe and select an export.
    pub const GO: u32 = 7;
    /// Structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List metadata contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Select metadata contexts.
    pub const SET_META_CONTEXT: u32 = 10;
}

/// Option reply types.
pub mod rep {
    /// Done.
    pub const ACK: u32 = 1;
    /// An export (NBD_OPT_LIST).
    pub const SERVER: u32 = 2;
    /// Export information (INFO, GO).
    pub const INFO: u32 = 3;
    /// Unsupported option.
    pub const ERR_UNSUP: u32 = 0x8000_0001;
    /// Refused by policy.
    pub const ERR_POLICY: u32 = 0x8000_0002;
    /// Malformed option.
    pub const ERR_INVALID: u32 = 0x8000_0003;
    /// No such export (or it cannot be served now).
    pub const ERR_UNKNOWN: u32 = 0x8000_0006;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = 0x8000_0007;
}

/// Information types of NBD_REP_INFO.
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// Block size constraints.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags.
pub mod tflag {
    /// The flags field is valid.
    pub const HAS_FLAGS: u16 = 1;
    /// Read-only export.
    pub const READ_ONLY: u16 = 1 << 1;
    /// FLUSH supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// FUA supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// TRIM supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// WRITE_ZEROES supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// Several connections see one consistent export (a FLUSH on one covers
    /// writes completed on all).
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Commands.
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write (payload follows).
    pub const WRITE: u16 = 1;
    /// Disconnect.
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim.
    pub const TRIM: u16 = 4;
    /// Cache (not supported).
    pub const CACHE: u16 = 5;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Block status (not supported).
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags.
pub mod cflag {
    /// Force unit access.
    pub const FUA: u16 = 1;
    /// WRITE_ZEROES must not punch holes.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Do not fragment (structured reads).
    pub const DF: u16 = 1 << 2;
    /// Fail WRITE_ZEROES that would be slow.
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply chunk types and flags.
pub mod chunk {
    /// Last chunk of the reply.
    pub const FLAG_DONE: u16 = 1;
    /// No payload (a successful end).
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// An error: u32 error, u16 message length, message.
    pub const ERROR: u16 = 0x8001;
}

/// NBD error numbers.
pub mod err {
    /// Operation not permitted (read-only).
    pub const EPERM: u32 = 1;
    /// I/O error.
    pub const EIO: u32 = 5;
    /// Out of memory.
    pub const ENOMEM: u32 = 12;
    /// Invalid argument.
    pub const EINVAL: u32 = 22;
    /// No space.
    pub const ENOSPC: u32 = 28;
    /// Too large.
    pub const EOVERFLOW: u32 = 75;
    /// Not supported.
    pub const ENOTSUP: u32 = 95;
    /// Shutting down.
    pub const ESHUTDOWN: u32 = 108;
}

/// Why NBD bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NbdError {
    /// Fewer bytes than the header.
    Truncated,
    /// A wrong magic number: the stream cannot be trusted any more.
    Magic(u64),
}

impl fmt::Display for NbdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NbdError::Truncated => f.write_str("truncated header"),
            NbdError::Magic(m) => write!(f, "bad magic {m:#x}"),
        }
    }
}

impl std::error::Error for NbdError {}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(x)
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// An option header (client → server during the handshake).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option.
    pub option: u32,
    /// Bytes of data that follow.
    pub len: u32,
}

impl OptionHeader {
    /// Decodes the first [`OPTION_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Result<OptionHeader, NbdError> {
        if b.len() < OPTION_LEN {
            return Err(NbdError::Truncated);
        }
        let m = be64(b, 0);
        if m != IHAVEOPT {
            return Err(NbdError::Magic(m));
        }
        Ok(OptionHeader {
            option: be32(b, 8),
            len: be32(b, 12),
        })
    }
    /// Encodes (a client's view; tests and tools).
    pub fn to_bytes(&self) -> [u8; OPTION_LEN] {
        let mut b = [0u8; OPTION_LEN];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..16].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// A transmission request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub kind: u16,
    /// The client's cookie (handle), echoed in the reply.
    pub cookie: u64,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub len: u32,
}

impl RequestHeader {
    /// Decodes the first [`REQUEST_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Result<RequestHeader, NbdError> {
        if b.len() < REQUEST_LEN {
            return Err(NbdError::Truncated);
        }
        let m = be32(b, 0);
        if m != REQUEST_MAGIC {
            return Err(NbdError::Magic(m as u64));
        }
        Ok(RequestHeader {
            flags: be16(b, 4),
            kind: be16(b, 6),
            cookie: be64(b, 8),
            offset: be64(b, 16),
            len: be32(b, 24),
        })
    }
    /// Encodes (a client's view; tests and tools).
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// The server's greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn greeting(flags: u16) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// An option reply with its data, appended to `out`.
pub fn option_reply(out: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
    out.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// NBD_INFO_EXPORT's data: type, size, transmission flags.
pub fn info_export(size: u64, flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..2].copy_from_slice(&info::EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// NBD_INFO_BLOCK_SIZE's data: type, minimum, preferred, maximum.
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..2].copy_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&min.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..].copy_from_slice(&max.to_be_bytes());
    b
}

/// A simple reply header (data of a successful read follows it).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_LEN] {
    let mut b = [0u8; SIMPLE_LEN];
    b[..4].copy_from_slice(&SIMPLE_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured chunk header whose payload is `len` bytes.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, len: u32) -> [u8; CHUNK_LEN] {
    let mut b = [0u8; CHUNK_LEN];
    b[..4].copy_from_slice(&STRUCTURED_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// The header of a final OFFSET_DATA chunk carrying `len` bytes read at
/// `offset` (the data follows).
pub fn read_chunk(cookie: u64, offset: u64, len: u32) -> [u8; CHUNK_LEN + 8] {
    let mut b = [0u8; CHUNK_LEN + 8];
    b[..CHUNK_LEN].copy_from_slice(&chunk_header(
        chunk::FLAG_DONE,
        chunk::OFFSET_DATA,
        cookie,
        len.saturating_add(8),
    ));
    b[CHUNK_LEN..].copy_from_slice(&offset.to_be_bytes());
    b
}

/// A final ERROR chunk (no message).
pub fn error_chunk(cookie: u64, error: u32) -> [u8; CHUNK_LEN + 6] {
    let mut b = [0u8; CHUNK_LEN + 6];
    b[..CHUNK_LEN].copy_from_slice(&chunk_header(chunk::FLAG_DONE, chunk::ERROR, cookie, 6));
    b[CHUNK_LEN..CHUNK_LEN + 4].copy_from_slice(&error.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_REQUEST: [u8; REQUEST_LEN] = [
        0x25, 0x60, 0x95, 0x13, // magic
        0x00, 0x01, 0x00, 0x01, // FUA, WRITE
        0x00, 0x00, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, // cookie
        0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, // offset 1 MiB
        0x00, 0x00, 0x10, 0x00, // 4096
    ];
    const GOLDEN_OPTION: [u8; OPTION_LEN] = [
        0x49, 0x48, 0x41, 0x56, 0x45, 0x4f, 0x50, 0x54, // IHAVEOPT
        0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x0a, // GO, 10 bytes
    ];

    fn req() -> RequestHeader {
        RequestHeader {
            flags: cflag::FUA,
            kind: cmd::WRITE,
            cookie: 0xdead_beef,
            offset: 1 << 20,
            len: 4096,
        }
    }

    #[test]
    fn test_deconstruct() {
        assert_eq!(RequestHeader::parse(&GOLDEN_REQUEST), Ok(req()));
        assert_eq!(
            OptionHeader::parse(&GOLDEN_OPTION),
            Ok(OptionHeader {
                option: opt::GO,
                len: 10
            })
        );
    }

    #[test]
    fn test_construct() {
        assert_eq!(req().to_bytes(), GOLDEN_REQUEST);
        assert_eq!(
            OptionHeader {
                option: opt::GO,
                len: 10
            }
            .to_bytes(),
            GOLDEN_OPTION
        );
        assert_eq!(
            greeting(hs::FIXED_NEWSTYLE | hs::NO_ZEROES),
            *b"NBDMAGICIHAVEOPT\x00\x03"
        );
        assert_eq!(
            simple_reply(err::EINVAL, 7),
            [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        let mut v = Vec::new();
        option_reply(&mut v, opt::GO, rep::ACK, &[]);
        assert_eq!(
            v,
            [0, 3, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        assert_eq!(
            info_export(1 << 30, tflag::HAS_FLAGS | tflag::SEND_FLUSH),
            [0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 5]
        );
        assert_eq!(
            read_chunk(1, 512, 4096),
            [
                0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x10, 0x08, 0, 0,
                0, 0, 0, 0, 2, 0
            ]
        );
        assert_eq!(
            error_chunk(2, err::EIO),
            [
                0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0,
                5, 0, 0
            ]
        );
    }

    #[test]
    fn test_truncated_and_magic() {
        assert_eq!(
            RequestHeader::parse(&GOLDEN_REQUEST[..27]),
            Err(NbdError::Truncated)
        );
        let mut b = GOLDEN_REQUEST;
        b[0] = 0;
        assert!(matches!(RequestHeader::parse(&b), Err(NbdError::Magic(_))));
        assert_eq!(
            OptionHeader::parse(&GOLDEN_OPTION[..15]),
            Err(NbdError::Truncated)
        );
        let mut o = GOLDEN_OPTION;
        o[7] = 0;
        assert!(matches!(OptionHeader::parse(&o), Err(NbdError::Magic(_))));
    }
}
