//! One error type carrying libfabric's `FI_E*` numbers.

use std::borrow::Cow;
use std::fmt;

/// libfabric error numbers (positive values; the C ABI returns them negated).
pub mod errno {
    #![allow(missing_docs)]
    pub const FI_SUCCESS: i32 = 0;
    pub const FI_EPERM: i32 = 1;
    pub const FI_ENOENT: i32 = 2;
    pub const FI_EINTR: i32 = 4;
    pub const FI_EIO: i32 = 5;
    pub const FI_E2BIG: i32 = 7;
    pub const FI_EBADF: i32 = 9;
    pub const FI_EAGAIN: i32 = 11;
    pub const FI_ENOMEM: i32 = 12;
    pub const FI_EACCES: i32 = 13;
    pub const FI_EFAULT: i32 = 14;
    pub const FI_EBUSY: i32 = 16;
    pub const FI_ENODEV: i32 = 19;
    pub const FI_EINVAL: i32 = 22;
    pub const FI_EMFILE: i32 = 24;
    pub const FI_ENOSPC: i32 = 28;
    pub const FI_ENOSYS: i32 = 38;
    pub const FI_ENOMSG: i32 = 42;
    pub const FI_ENODATA: i32 = 61;
    pub const FI_EOVERFLOW: i32 = 75;
    pub const FI_EMSGSIZE: i32 = 90;
    pub const FI_ENOPROTOOPT: i32 = 92;
    pub const FI_EOPNOTSUPP: i32 = 95;
    pub const FI_EADDRINUSE: i32 = 98;
    pub const FI_EADDRNOTAVAIL: i32 = 99;
    pub const FI_ENETDOWN: i32 = 100;
    pub const FI_ENETUNREACH: i32 = 101;
    pub const FI_ECONNABORTED: i32 = 103;
    pub const FI_ECONNRESET: i32 = 104;
    pub const FI_ENOBUFS: i32 = 105;
    pub const FI_EISCONN: i32 = 106;
    pub const FI_ENOTCONN: i32 = 107;
    pub const FI_ESHUTDOWN: i32 = 108;
    pub const FI_ETIMEDOUT: i32 = 110;
    pub const FI_ECONNREFUSED: i32 = 111;
    pub const FI_EHOSTDOWN: i32 = 112;
    pub const FI_EHOSTUNREACH: i32 = 113;
    pub const FI_EALREADY: i32 = 114;
    pub const FI_EINPROGRESS: i32 = 115;
    pub const FI_EREMOTEIO: i32 = 121;
    pub const FI_ECANCELED: i32 = 125;
    pub const FI_EKEYREJECTED: i32 = 129;
    pub const FI_EOTHER: i32 = 256;
    pub const FI_ETOOSMALL: i32 = 257;
    pub const FI_EOPBADSTATE: i32 = 258;
    pub const FI_EAVAIL: i32 = 259;
    pub const FI_EBADFLAGS: i32 = 260;
    pub const FI_ENOEQ: i32 = 261;
    pub const FI_EDOMAIN: i32 = 262;
    pub const FI_ENOCQ: i32 = 263;
    pub const FI_ECRC: i32 = 264;
    pub const FI_ETRUNC: i32 = 265;
    pub const FI_ENOKEY: i32 = 266;
    pub const FI_ENOAV: i32 = 267;
    pub const FI_EOVERRUN: i32 = 268;
    pub const FI_ENORX: i32 = 269;
}

use errno::*;

/// The text `fi_strerror` gives for an error number.
pub fn strerror(code: i32) -> &'static str {
    match code.abs() {
        FI_SUCCESS => "Success",
        FI_EPERM => "Operation not permitted",
        FI_ENOENT => "No such file or directory",
        FI_EINTR => "Interrupted system call",
        FI_EIO => "Input/output error",
        FI_E2BIG => "Argument list too long",
        FI_EBADF => "Bad file descriptor",
        FI_EAGAIN => "Resource temporarily unavailable",
        FI_ENOMEM => "Cannot allocate memory",
        FI_EACCES => "Permission denied",
        FI_EFAULT => "Bad address",
        FI_EBUSY => "Device or resource busy",
        FI_ENODEV => "No such device",
        FI_EINVAL => "Invalid argument",
        FI_EMFILE => "Too many open files",
        FI_ENOSPC => "No space left on device",
        FI_ENOSYS => "Function not implemented",
        FI_ENOMSG => "No message of desired type",
        FI_ENODATA => "No data available",
        FI_EOVERFLOW => "Value too large for defined data type",
        FI_EMSGSIZE => "Message too long",
        FI_ENOPROTOOPT => "Protocol not available",
        FI_EOPNOTSUPP => "Operation not supported",
        FI_EADDRINUSE => "Address already in use",
        FI_EADDRNOTAVAIL => "Cannot assign requested address",
        FI_ENETDOWN => "Network is down",
        FI_ENETUNREACH => "Network is unreachable",
        FI_ECONNABORTED => "Software caused connection abort",
        FI_ECONNRESET => "Connection reset by peer",
        FI_ENOBUFS => "No buffer space available",
        FI_EISCONN => "Transport endpoint is already connected",
        FI_ENOTCONN => "Transport endpoint is not connected",
        FI_ESHUTDOWN => "Cannot send after transport endpoint shutdown",
        FI_ETIMEDOUT => "Connection timed out",
        FI_ECONNREFUSED => "Connection refused",
        FI_EHOSTDOWN => "Host is down",
        FI_EHOSTUNREACH => "No route to host",
        FI_EALREADY => "Operation already in progress",
        FI_EINPROGRESS => "Operation now in progress",
        FI_EREMOTEIO => "Remote I/O error",
        FI_ECANCELED => "Operation canceled",
        FI_EKEYREJECTED => "Key was rejected by service",
        FI_EOTHER => "Unspecified error",
        FI_ETOOSMALL => "Provided buffer is too small",
        FI_EOPBADSTATE => "Operation not permitted in current state",
        FI_EAVAIL => "Error available",
        FI_EBADFLAGS => "Flags not supported",
        FI_ENOEQ => "Missing or unavailable event queue",
        FI_EDOMAIN => "Invalid resource domain",
        FI_ENOCQ => "Missing or unavailable completion queue",
        FI_ECRC => "CRC error",
        FI_ETRUNC => "Truncation error",
        FI_ENOKEY => "Required key not available",
        FI_ENOAV => "Missing or unavailable address vector",
        FI_EOVERRUN => "Queue has been overrun",
        FI_ENORX => "Receiver not ready, no receive buffers available",
        _ => "Unknown error",
    }
}

/// What kind of failure an [`Error`] is, grouped by what the application
/// does about it (the exact `FI_E*` number stays in [`Error::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Nothing to do now, or a queue is full: try again (`FI_EAGAIN`).
    WouldBlock,
    /// A wait ran out of time (`FI_ETIMEDOUT`).
    TimedOut,
    /// The operation was cancelled (`FI_ECANCELED`).
    Canceled,
    /// A message did not fit its receive buffer (`FI_ETRUNC`, `FI_ETOOSMALL`, `FI_EMSGSIZE`).
    Truncated,
    /// An argument or flag is wrong (`FI_EINVAL`, `FI_EBADFLAGS`, `FI_EFAULT` …).
    InvalidInput,
    /// The provider or object does not support it (`FI_ENOSYS`, `FI_EOPNOTSUPP` …).
    Unsupported,
    /// Nothing matches: no offer, no entry (`FI_ENODATA`, `FI_ENOENT`, `FI_ENOMSG`).
    NotFound,
    /// The object is in the wrong state for the call (`FI_EOPBADSTATE`,
    /// `FI_EALREADY`, `FI_EINPROGRESS`, `FI_EISCONN`), or is still in use (`FI_EBUSY`).
    BadState,
    /// A needed object is missing or not bound (`FI_ENOCQ`, `FI_ENOEQ`, `FI_ENOAV`).
    NotBound,
    /// Access was refused: key, rights, bounds, authorisation (`FI_EACCES`,
    /// `FI_EPERM`, `FI_ENOKEY`, `FI_EKEYREJECTED`).
    PermissionDenied,
    /// The peer or connection is gone or unreachable (`FI_ECONNRESET`,
    /// `FI_ECONNREFUSED`, `FI_ENOTCONN`, `FI_ESHUTDOWN`, `FI_EHOSTUNREACH` …).
    Disconnected,
    /// Out of memory, descriptors, queue or buffer space (`FI_ENOMEM`,
    /// `FI_EMFILE`, `FI_ENOSPC`, `FI_ENOBUFS`, `FI_EOVERRUN`, `FI_ENORX`).
    OutOfResources,
    /// An address cannot be used (`FI_EADDRINUSE`, `FI_EADDRNOTAVAIL`).
    AddressUnavailable,
    /// An I/O or data-integrity failure (`FI_EIO`, `FI_EREMOTEIO`, `FI_ECRC`).
    Io,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The kind of a libfabric error number (either sign).
    pub fn of(code: i32) -> ErrorKind {
        use ErrorKind::*;
        match code.abs() {
            FI_EAGAIN => WouldBlock,
            FI_ETIMEDOUT => TimedOut,
            FI_ECANCELED => Canceled,
            FI_ETRUNC | FI_ETOOSMALL | FI_EMSGSIZE | FI_E2BIG | FI_EOVERFLOW => Truncated,
            FI_EINVAL | FI_EBADFLAGS | FI_EFAULT | FI_EBADF | FI_EDOMAIN => InvalidInput,
            FI_ENOSYS | FI_EOPNOTSUPP | FI_ENOPROTOOPT | FI_ENODEV => Unsupported,
            FI_ENODATA | FI_ENOENT | FI_ENOMSG => NotFound,
            FI_EOPBADSTATE | FI_EALREADY | FI_EINPROGRESS | FI_EISCONN | FI_EBUSY => BadState,
            FI_ENOCQ | FI_ENOEQ | FI_ENOAV => NotBound,
            FI_EACCES | FI_EPERM | FI_ENOKEY | FI_EKEYREJECTED => PermissionDenied,
            FI_ECONNRESET | FI_ECONNREFUSED | FI_ECONNABORTED | FI_ENOTCONN | FI_ESHUTDOWN
            | FI_EHOSTUNREACH | FI_EHOSTDOWN | FI_ENETUNREACH | FI_ENETDOWN => Disconnected,
            FI_ENOMEM | FI_EMFILE | FI_ENOSPC | FI_ENOBUFS | FI_EOVERRUN | FI_ENORX => {
                OutOfResources
            }
            FI_EADDRINUSE | FI_EADDRNOTAVAIL => AddressUnavailable,
            FI_EIO | FI_EREMOTEIO | FI_ECRC => Io,
            _ => Other,
        }
    }
}

/// An ofi error: a libfabric error number and a message saying what went wrong.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: i32,
    msg: Cow<'static, str>,
}

/// The result type of every fallible ofi call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with a number and a message.
    pub fn new(code: i32, msg: impl Into<Cow<'static, str>>) -> Self {
        Error {
            code: code.abs(),
            msg: msg.into(),
        }
    }
    /// The libfabric error number (positive, e.g. [`errno::FI_EAGAIN`]).
    pub fn code(&self) -> i32 {
        self.code
    }
    /// The kind of failure, for matching without `FI_E*` numbers.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(self.code)
    }
    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
    /// Try again later: the queue is full or no progress was possible.
    pub const fn again() -> Self {
        Error {
            code: FI_EAGAIN,
            msg: Cow::Borrowed("resource temporarily unavailable, try again"),
        }
    }
    /// An invalid argument, naming what was wrong.
    pub fn inval(msg: impl Into<Cow<'static, str>>) -> Self {
        Self::new(FI_EINVAL, msg)
    }
    /// The object is still in use by others.
    pub fn busy(msg: impl Into<Cow<'static, str>>) -> Self {
        Self::new(FI_EBUSY, msg)
    }
    /// Nothing matches.
    pub fn nodata(msg: impl Into<Cow<'static, str>>) -> Self {
        Self::new(FI_ENODATA, msg)
    }
    /// Not supported.
    pub fn nosys(msg: impl Into<Cow<'static, str>>) -> Self {
        Self::new(FI_ENOSYS, msg)
    }
    /// An OS error, with context.
    pub fn os(err: std::io::Error, what: &str) -> Self {
        let code = err.raw_os_error().unwrap_or(FI_EOTHER);
        Self::new(code, format!("{what}: {err}"))
    }
    /// True for `FI_EAGAIN`.
    pub fn is_again(&self) -> bool {
        self.code == FI_EAGAIN
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", strerror(self.code), self.code, self.msg)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::os(e, "system call failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_group_the_numbers_and_unknown_numbers_are_other() {
        assert_eq!(Error::again().kind(), ErrorKind::WouldBlock);
        assert_eq!(ErrorKind::of(-FI_ECANCELED), ErrorKind::Canceled);
        assert_eq!(ErrorKind::of(FI_ETRUNC), ErrorKind::Truncated);
        assert_eq!(ErrorKind::of(FI_ECONNRESET), ErrorKind::Disconnected);
        assert_eq!(ErrorKind::of(FI_ENOKEY), ErrorKind::PermissionDenied);
        assert_eq!(ErrorKind::of(FI_ENOCQ), ErrorKind::NotBound);
        assert_eq!(ErrorKind::of(FI_ENODATA), ErrorKind::NotFound);
        assert_eq!(ErrorKind::of(12345), ErrorKind::Other);
        // The code is kept beside the kind.
        let e = Error::new(FI_EKEYREJECTED, "auth");
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::PermissionDenied, FI_EKEYREJECTED)
        );
    }
}
