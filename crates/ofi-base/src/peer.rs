//! Why a peer was declared dead: the five causes and the one error number
//! each stands for. The rest of peer death (the dead-peer record, the
//! event-queue report, the timeout tunable) is ofi-core's `util::peer`,
//! which re-exports [`Cause`] and documents the whole protocol.

use crate::error::errno;

/// Why a peer was declared dead. Each cause has one error number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// The connection ended without an orderly close (`FI_ECONNRESET`).
    Reset,
    /// No answer within the bound (`FI_ETIMEDOUT`).
    TimedOut,
    /// Nothing accepts connections at its address (`FI_ECONNREFUSED`).
    Refused,
    /// No route to it (`FI_EHOSTUNREACH`).
    Unreachable,
    /// It broke the protocol and was disconnected (`FI_EIO`).
    Broken,
}

impl Cause {
    /// The positive FI_E* number pending operations fail with.
    pub fn errno(self) -> i32 {
        match self {
            Cause::Reset => errno::FI_ECONNRESET,
            Cause::TimedOut => errno::FI_ETIMEDOUT,
            Cause::Refused => errno::FI_ECONNREFUSED,
            Cause::Unreachable => errno::FI_EHOSTUNREACH,
            Cause::Broken => errno::FI_EIO,
        }
    }

    /// The cause a failure number stands for, `None` for numbers that say
    /// nothing about the peer (a local cancel, for instance). Socket errors
    /// fold into the five causes: a broken pipe or an aborted connection is
    /// a reset, a down network is unreachable.
    pub fn of_errno(err: i32) -> Option<Cause> {
        Some(match err {
            errno::FI_ECONNRESET | errno::FI_ECONNABORTED | errno::FI_ENOTCONN | libc::EPIPE => {
                Cause::Reset
            }
            errno::FI_ETIMEDOUT => Cause::TimedOut,
            errno::FI_ECONNREFUSED => Cause::Refused,
            errno::FI_EHOSTUNREACH
            | errno::FI_ENETUNREACH
            | errno::FI_ENETDOWN
            | errno::FI_EHOSTDOWN => Cause::Unreachable,
            errno::FI_EIO => Cause::Broken,
            _ => return None,
        })
    }

    /// What the cause means, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::Reset => "its connection was reset or closed without an orderly shutdown (the process died or closed its endpoint)",
            Cause::TimedOut => "it did not answer within the peer timeout",
            Cause::Refused => "nothing accepts connections at its address (the process is not running)",
            Cause::Unreachable => "the network has no route to it",
            Cause::Broken => "it broke the protocol and was disconnected",
        }
    }
}
