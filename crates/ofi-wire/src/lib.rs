//! ofi wire formats: checked views over byte buffers, a validated `Repr`
//! for each, and golden-byte tests. No unsafe, no I/O.

#![forbid(unsafe_code)]

pub mod coll;
pub mod shm;
pub mod tcp;
pub mod udp;

/// Why a buffer does not hold a valid message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the header (or than the length it claims).
    Truncated,
    /// An opcode this version does not know.
    UnknownOp(u8),
    /// A field holds an impossible value.
    Malformed(&'static str),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Truncated => write!(f, "truncated message"),
            WireError::UnknownOp(o) => write!(f, "unknown opcode {o}"),
            WireError::Malformed(m) => write!(f, "malformed message: {m}"),
        }
    }
}

impl std::error::Error for WireError {}
