//! Scatter-gather copies for the raw layer: the caller's promise (made when
//! it posted the operation with `unsafe`) is what makes these sound.
#![allow(unsafe_code)]

pub use ofi_base::iov::{iov_len, IoVec};

/// Copies `src` into the iov list starting at byte `offset`; returns the
/// bytes copied (less than `src.len()` when the list is too short).
///
/// # Safety
/// Every range in `iov` must be valid for writes and not alias `src`.
#[inline(always)]
pub unsafe fn copy_to_iov(iov: &[IoVec], offset: usize, src: &[u8]) -> usize {
    // One entry (a message into one buffer): one copy.
    if let [v] = iov {
        if offset <= v.len {
            let n = (v.len - offset).min(src.len());
            // SAFETY: the caller guarantees the range is writable; offset + n
            // stays inside the entry and n inside src.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), (v.base as *mut u8).add(offset), n)
            };
            return n;
        }
    }
    // SAFETY: every range of `iov` is writable and apart from `src` (this
    // function's contract), all `copy_to_iovs` asks.
    unsafe { copy_to_iovs(iov, offset, src) }
}

/// [`copy_to_iov`] over several entries or from an offset.
///
/// # Safety
/// As [`copy_to_iov`].
#[inline(never)]
unsafe fn copy_to_iovs(iov: &[IoVec], mut offset: usize, src: &[u8]) -> usize {
    let mut done = 0;
    for v in iov {
        if done == src.len() {
            break;
        }
        if offset >= v.len {
            offset -= v.len;
            continue;
        }
        let n = (v.len - offset).min(src.len() - done);
        // SAFETY: the caller guarantees the range is writable; n stays inside
        // both the iov entry and src.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr().add(done),
                (v.base as *mut u8).add(offset),
                n,
            );
        }
        done += n;
        offset = 0;
    }
    done
}

/// Copies from the iov list, starting at byte `offset`, into `dst`; returns
/// the bytes copied.
///
/// # Safety
/// Every range in `iov` must be valid for reads and not alias `dst`.
#[inline(always)]
pub unsafe fn copy_from_iov(iov: &[IoVec], offset: usize, dst: &mut [u8]) -> usize {
    // One entry: one copy.
    if let [v] = iov {
        if offset <= v.len {
            let n = (v.len - offset).min(dst.len());
            // SAFETY: the caller guarantees the range is readable; offset + n
            // stays inside the entry and n inside dst.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (v.base as *const u8).add(offset),
                    dst.as_mut_ptr(),
                    n,
                )
            };
            return n;
        }
    }
    // SAFETY: every range of `iov` is readable and apart from `dst` (this
    // function's contract), all `copy_from_iovs` asks.
    unsafe { copy_from_iovs(iov, offset, dst) }
}

/// [`copy_from_iov`] over several entries or from an offset.
///
/// # Safety
/// As [`copy_from_iov`].
#[inline(never)]
unsafe fn copy_from_iovs(iov: &[IoVec], mut offset: usize, dst: &mut [u8]) -> usize {
    let mut done = 0;
    for v in iov {
        if done == dst.len() {
            break;
        }
        if offset >= v.len {
            offset -= v.len;
            continue;
        }
        let n = (v.len - offset).min(dst.len() - done);
        // SAFETY: the caller guarantees the range is readable; n stays inside
        // both the iov entry and dst.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (v.base as *const u8).add(offset),
                dst.as_mut_ptr().add(done),
                n,
            );
        }
        done += n;
        offset = 0;
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn scatter_and_gather_cross_entries() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 5];
        let iov = [IoVec::from_mut(&mut a), IoVec::from_mut(&mut b)];
        // SAFETY: a and b are live and distinct from the source.
        let n = unsafe { copy_to_iov(&iov, 1, b"abcdefgh") };
        assert_eq!(n, 7);
        assert_eq!(&a, b"\0ab");
        assert_eq!(&b, b"cdefg");
        let mut out = [0u8; 4];
        // SAFETY: a and b are live and readable.
        let n = unsafe { copy_from_iov(&iov, 2, &mut out) };
        assert_eq!(n, 4);
        assert_eq!(&out, b"bcde");
    }
}
