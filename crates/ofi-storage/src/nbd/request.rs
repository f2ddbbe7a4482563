//! Transmission-phase requests, checked against the export: each header
//! becomes a command to forward or an error to answer at once (the
//! connection stays in sync: a refused WRITE's payload is still read and
//! dropped). A READ or WRITE above the export's advertised maximum is
//! taken up to [`MAX_REQUEST`] (the gateway splits it); above, EOVERFLOW.
//! Only a broken magic ends the connection.

use super::handshake::Export;
use super::split::MAX_REQUEST;
use super::wire::{cflag, cmd, err, NbdError, RequestHeader};

/// A request to forward to the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Read `len` bytes at `offset`.
    Read {
        /// Offset.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Write the `len` payload bytes that follow at `offset`.
    Write {
        /// Offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Flush.
    Flush,
    /// Trim.
    Trim {
        /// Offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Write zeroes.
    Zero {
        /// Offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// Must not punch holes.
        no_hole: bool,
    },
}

/// What a request header asks of the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Forward it; reply with its cookie.
    Forward {
        /// The client's cookie.
        cookie: u64,
        /// The command.
        fwd: Forward,
    },
    /// Reply at once with success (a zero-length request).
    Ok {
        /// The client's cookie.
        cookie: u64,
        /// Payload bytes to read and drop first.
        skip: u32,
    },
    /// Reply at once with `error`, after reading and dropping `skip`
    /// payload bytes (a refused WRITE).
    Error {
        /// The client's cookie.
        cookie: u64,
        /// NBD error number.
        error: u32,
        /// Payload bytes to drop.
        skip: u32,
    },
    /// The client disconnects (NBD_CMD_DISC).
    Disconnect,
}

/// Decodes and checks one request header. `Err` only for a broken stream.
pub fn decode(b: &[u8], e: &Export) -> Result<Decoded, NbdError> {
    let h = RequestHeader::parse(b)?;
    Ok(check(&h, e))
}

/// Checks a request against the export.
pub fn check(h: &RequestHeader, e: &Export) -> Decoded {
    let cookie = h.cookie;
    let payload = if h.kind == cmd::WRITE { h.len } else { 0 };
    let fail = |error| Decoded::Error {
        cookie,
        error,
        skip: payload,
    };
    let known = cflag::FUA | cflag::NO_HOLE | cflag::DF | cflag::FAST_ZERO;
    if h.flags & !known != 0 || h.flags & cflag::DF != 0 {
        return fail(err::EINVAL);
    }
    let fua = h.flags & cflag::FUA != 0;
    if fua && !e.flush {
        return fail(err::EINVAL);
    }
    if h.flags & cflag::NO_HOLE != 0 && h.kind != cmd::WRITE_ZEROES {
        return fail(err::EINVAL);
    }
    if h.flags & cflag::FAST_ZERO != 0 {
        // Not announced (SEND_FAST_ZERO): a client may not use it.
        return fail(err::EINVAL);
    }
    let in_range = h
        .offset
        .checked_add(h.len as u64)
        .is_some_and(|end| end <= e.size);
    let writes = matches!(h.kind, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
    match h.kind {
        cmd::DISC => return Decoded::Disconnect,
        cmd::FLUSH => {
            if !e.flush {
                return fail(err::EINVAL);
            }
            return Decoded::Forward {
                cookie,
                fwd: Forward::Flush,
            };
        }
        cmd::READ | cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES => {}
        _ => return fail(err::EINVAL),
    }
    if writes && e.read_only {
        return fail(err::EPERM);
    }
    if (h.kind == cmd::TRIM && !e.trim) || (h.kind == cmd::WRITE_ZEROES && !e.zeroes) {
        return fail(err::EINVAL);
    }
    if !in_range {
        let error = if matches!(h.kind, cmd::WRITE | cmd::WRITE_ZEROES) {
            err::ENOSPC
        } else {
            err::EINVAL
        };
        return fail(error);
    }
    // Above the advertised maximum and up to MAX_REQUEST, the gateway
    // splits the request.
    if matches!(h.kind, cmd::READ | cmd::WRITE) && h.len > MAX_REQUEST {
        return fail(err::EOVERFLOW);
    }
    if h.len == 0 {
        return Decoded::Ok { cookie, skip: 0 };
    }
    let (offset, len) = (h.offset, h.len);
    let fwd = match h.kind {
        cmd::READ => Forward::Read { offset, len },
        cmd::WRITE => Forward::Write { offset, len, fua },
        cmd::TRIM => Forward::Trim { offset, len, fua },
        _ => Forward::Zero {
            offset,
            len,
            fua,
            no_hole: h.flags & cflag::NO_HOLE != 0,
        },
    };
    Decoded::Forward { cookie, fwd }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(read_only: bool) -> Export {
        Export {
            size: 1 << 20,
            read_only,
            flush: true,
            trim: true,
            zeroes: true,
            min_block: 1,
            preferred_block: 4096,
            max_payload: 64 << 10,
        }
    }

    fn h(kind: u16, flags: u16, offset: u64, len: u32) -> RequestHeader {
        RequestHeader {
            flags,
            kind,
            cookie: 9,
            offset,
            len,
        }
    }

    #[test]
    fn forwards_what_is_valid() {
        let e = export(false);
        assert_eq!(
            check(&h(cmd::WRITE, cflag::FUA, 4096, 512), &e),
            Decoded::Forward {
                cookie: 9,
                fwd: Forward::Write {
                    offset: 4096,
                    len: 512,
                    fua: true
                }
            }
        );
        assert_eq!(
            check(&h(cmd::WRITE_ZEROES, cflag::NO_HOLE, 0, 1 << 20), &e),
            Decoded::Forward {
                cookie: 9,
                fwd: Forward::Zero {
                    offset: 0,
                    len: 1 << 20,
                    fua: false,
                    no_hole: true
                }
            }
        );
        assert_eq!(
            check(&h(cmd::FLUSH, 0, 0, 0), &e),
            Decoded::Forward {
                cookie: 9,
                fwd: Forward::Flush
            }
        );
        assert_eq!(check(&h(cmd::DISC, 0, 0, 0), &e), Decoded::Disconnect);
    }

    #[test]
    fn refuses_with_the_right_error_and_skips_write_payloads() {
        let e = export(false);
        let f = |d: Decoded| match d {
            Decoded::Error { error, skip, .. } => (error, skip),
            d => panic!("{d:?}"),
        };
        assert_eq!(
            f(check(&h(cmd::READ, 0, (1 << 20) - 1, 2), &e)),
            (err::EINVAL, 0)
        );
        assert_eq!(
            f(check(&h(cmd::WRITE, 0, 1 << 20, 8), &e)),
            (err::ENOSPC, 8)
        );
        assert_eq!(
            f(check(&h(cmd::READ, 0, u64::MAX, 1), &e)),
            (err::EINVAL, 0)
        );
        let big = Export { size: 1 << 30, ..e };
        assert_eq!(
            f(check(&h(cmd::WRITE, 0, 0, MAX_REQUEST + 1), &big)),
            (err::EOVERFLOW, MAX_REQUEST + 1)
        );
        assert_eq!(
            f(check(&h(cmd::READ, 0, 0, MAX_REQUEST + 1), &big)),
            (err::EOVERFLOW, 0)
        );
        // Above the advertised maximum, up to the bound: forwarded whole
        // (the gateway splits it).
        assert_eq!(
            check(&h(cmd::READ, 0, 0, MAX_REQUEST), &big),
            Decoded::Forward {
                cookie: 9,
                fwd: Forward::Read {
                    offset: 0,
                    len: MAX_REQUEST
                }
            }
        );
        assert_eq!(f(check(&h(99, 0, 0, 0), &e)), (err::EINVAL, 0));
        assert_eq!(f(check(&h(cmd::READ, 0x100, 0, 8), &e)), (err::EINVAL, 0));
        assert_eq!(
            f(check(&h(cmd::WRITE, cflag::DF, 0, 8), &e)),
            (err::EINVAL, 8)
        );
        assert_eq!(
            f(check(&h(cmd::BLOCK_STATUS, 0, 0, 8), &e)),
            (err::EINVAL, 0)
        );
        let ro = export(true);
        assert_eq!(f(check(&h(cmd::WRITE, 0, 0, 8), &ro)), (err::EPERM, 8));
        assert_eq!(f(check(&h(cmd::TRIM, 0, 0, 8), &ro)), (err::EPERM, 0));
        assert!(matches!(
            check(&h(cmd::READ, 0, 0, 8), &ro),
            Decoded::Forward { .. }
        ));
        assert_eq!(
            check(&h(cmd::READ, 0, 0, 0), &e),
            Decoded::Ok { cookie: 9, skip: 0 }
        );
    }
}
