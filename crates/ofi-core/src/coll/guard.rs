//! The line between an application's tags and the collectives' on an
//! endpoint opened with FI_COLLECTIVE (see the [module](super) docs):
//! bit 63 is the collectives'.

use crate::error::{Error, Result};

/// The tag of every collective frame: bit 63 (the rest is 0).
pub const COLL_TAG: u64 = 1 << 63;

/// The ignore mask of the collectives' receives: every bit but 63, so
/// they take every tag with bit 63 set and no other.
pub const COLL_IGNORE: u64 = !COLL_TAG;

/// An application's tagged send: refused when its tag sets bit 63.
#[inline]
pub fn send(tag: u64) -> Result<()> {
    if tag & COLL_TAG != 0 {
        return Err(reserved(tag));
    }
    Ok(())
}

/// An application's tagged receive: the `(tag, ignore)` it posts with.
/// An ignore mask covering bit 63 loses it (and the tag's bit 63 goes
/// too): the receive matches the application's tags only. A tag with bit
/// 63 set that is not ignored is refused.
#[inline]
pub fn recv(tag: u64, ignore: u64) -> Result<(u64, u64)> {
    if ignore & COLL_TAG != 0 {
        return Ok((tag & !COLL_TAG, ignore & !COLL_TAG));
    }
    if tag & COLL_TAG != 0 {
        return Err(reserved(tag));
    }
    Ok((tag, ignore))
}

#[cold]
fn reserved(tag: u64) -> Error {
    Error::inval(format!(
        "tag {tag:#x}: bit 63 is reserved for collectives on an endpoint opened with FI_COLLECTIVE"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a posted receive (tag, ignore) takes a message with `tag`.
    fn takes((t, i): (u64, u64), msg: u64) -> bool {
        (msg | i) == (t | i)
    }

    #[test]
    fn wildcards_keep_to_the_application_side() {
        let all = recv(0, u64::MAX).unwrap();
        assert!(takes(all, 0x1234) && takes(all, COLL_TAG - 1));
        assert!(!takes(all, COLL_TAG) && !takes(all, COLL_TAG | 7));
        let all = recv(u64::MAX, u64::MAX).unwrap();
        assert!(takes(all, 0) && !takes(all, COLL_TAG));
        // A collective receive takes frames only.
        let coll = (COLL_TAG, COLL_IGNORE);
        assert!(takes(coll, COLL_TAG) && !takes(coll, 0) && !takes(coll, 0x1234));
        assert_eq!(recv(5, 1).unwrap(), (5, 1));
        assert!(recv(COLL_TAG | 5, 0).is_err());
        assert!(send(COLL_TAG).is_err() && send(!COLL_TAG).is_ok());
    }
}
