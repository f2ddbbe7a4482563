//! Owned buffers the safe and async layers accept: anything whose bytes stay
//! put while the value moves ([`IoBuf`] for sends and writes, [`IoBufMut`]
//! for receives and reads), and a [`BufPool`] of reusable buffers so a
//! zero-copy application allocates nothing per message.
//!
//! An operation takes the buffer's address when it is posted and then moves
//! the value into its handle (or future); the provider reads or writes the
//! bytes until the operation completes. That is sound only for buffers
//! whose bytes live on the heap (or in static memory) rather than inside
//! the value: hence the traits are `unsafe` to implement.

use crate::{Error, MrAccess, MrAttr, Result};
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// A buffer an operation may read (sends, RMA writes).
///
/// # Safety
/// `as_ref()` must return the same memory (address and length) every time
/// while the value is not mutated through its own API, and that memory
/// must not move or be freed when the value is moved: it belongs to the
/// heap (or is static), not to the value's own bytes. `Vec<u8>`,
/// `Box<[u8]>`, `bytes::BytesMut` qualify; `[u8; N]` does not.
pub unsafe trait IoBuf: AsRef<[u8]> + Send + 'static {
    /// The local descriptor of a registered buffer (`fi_mr_desc`), if any.
    fn desc(&self) -> Option<u64> {
        None
    }
}

/// A buffer an operation may write (receives, RMA reads): the provider
/// fills up to `as_mut().len()` bytes.
///
/// # Safety
/// As [`IoBuf`], and `as_mut()` returns the same memory as `as_ref()`.
pub unsafe trait IoBufMut: IoBuf + AsMut<[u8]> {}

// SAFETY: a Vec's bytes live on the heap and do not move with the Vec;
// the safe layer never grows or shrinks it while an operation holds it.
unsafe impl IoBuf for Vec<u8> {}
// SAFETY: the IoBuf reasons hold (heap bytes, never resized while an
// operation holds it), and a Vec's `as_mut` is the slice `as_ref` gives.
unsafe impl IoBufMut for Vec<u8> {}
// SAFETY: a boxed slice's bytes live on the heap and do not move with the box.
unsafe impl IoBuf for Box<[u8]> {}
// SAFETY: the bytes live on the heap and do not move with the box (as
// for its IoBuf), and its `as_mut` is the slice `as_ref` gives.
unsafe impl IoBufMut for Box<[u8]> {}
// SAFETY: static bytes never move or go away.
unsafe impl IoBuf for &'static [u8] {}

#[cfg(feature = "bytes")]
// SAFETY: a BytesMut's bytes live in a heap allocation it owns (or shares
// read-only), which does not move with the handle.
unsafe impl IoBuf for bytes::BytesMut {}
#[cfg(feature = "bytes")]
// SAFETY: a BytesMut's bytes live in a heap allocation that does not
// move with the handle (as for its IoBuf), and its `as_mut` is the range
// `as_ref` gives.
unsafe impl IoBufMut for bytes::BytesMut {}
#[cfg(feature = "bytes")]
// SAFETY: a Bytes points at heap or static memory that does not move with
// the handle and is never written while shared.
unsafe impl IoBuf for bytes::Bytes {}

/// An operation's buffer while the provider may use it (in a handle, a
/// future or the table). Moving a `Box` as a value reasserts that it is
/// the only way to its memory, which invalidates the address the provider
/// writes through (Miri's Stacked Borrows reports it); a `MaybeUninit`
/// (a union) hides the value from that, so every kind of buffer, boxes
/// and buffers holding boxes included, may move while in flight. The
/// value comes out with [`into_inner`](Self::into_inner) once the
/// operation is over.
pub(crate) struct Held<B>(MaybeUninit<B>);

impl<B> Held<B> {
    #[inline(always)]
    pub(crate) fn new(b: B) -> Held<B> {
        Held(MaybeUninit::new(b))
    }

    /// The buffer back, once the provider is done with it.
    #[inline(always)]
    pub(crate) fn into_inner(self) -> B {
        let me = ManuallyDrop::new(self);
        // SAFETY: `new` is the only constructor, so the value is
        // initialised; `me` is never dropped, so it is read out once.
        unsafe { me.0.assume_init_read() }
    }
}

impl<B> Deref for Held<B> {
    type Target = B;
    #[inline(always)]
    fn deref(&self) -> &B {
        // SAFETY: initialised by `new`, the only constructor.
        unsafe { self.0.assume_init_ref() }
    }
}

impl<B> DerefMut for Held<B> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut B {
        // SAFETY: initialised by `new`, the only constructor.
        unsafe { self.0.assume_init_mut() }
    }
}

impl<B> Drop for Held<B> {
    fn drop(&mut self) {
        // SAFETY: initialised by `new`; `into_inner` skips this drop.
        unsafe { self.0.assume_init_drop() }
    }
}

/// A pool of equal-sized buffers, allocated once and reused: [`take`]
/// hands out a [`PoolBuf`], which goes back to the pool when dropped.
/// A pool made with [`registered`](Self::registered) also registers each
/// buffer with a channel's domain, and operations pass its descriptor (for
/// providers that require registered local memory, FI_MR_LOCAL).
///
/// [`take`]: BufPool::take
#[derive(Clone)]
pub struct BufPool {
    inner: Arc<Pool>,
}

struct Pool {
    // Field order is drop order: registrations before the memory.
    regs: Vec<crate::MemoryRegion>,
    free: Mutex<Vec<(Box<[u8]>, u64)>>,
    size: usize,
    count: usize,
}

impl fmt::Debug for BufPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufPool")
            .field("size", &self.inner.size)
            .field("count", &self.inner.count)
            .field("free", &self.available())
            .finish()
    }
}

impl BufPool {
    /// `count` buffers of `size` bytes each, zeroed.
    pub fn new(count: usize, size: usize) -> BufPool {
        let free = (0..count)
            .map(|_| (vec![0u8; size].into_boxed_slice(), 0))
            .collect();
        BufPool {
            inner: Arc::new(Pool {
                regs: Vec::new(),
                free: Mutex::new(free),
                size,
                count,
            }),
        }
    }

    /// As [`new`](Self::new), each buffer registered with `domain` for
    /// local sends, receives, reads and writes.
    pub fn registered(domain: &crate::Domain, count: usize, size: usize) -> Result<BufPool> {
        if size == 0 {
            return Err(Error::inval(
                "pool: buffers of 0 bytes cannot be registered",
            ));
        }
        let mut regs = Vec::with_capacity(count);
        let mut free = Vec::with_capacity(count);
        for _ in 0..count {
            let mut b = vec![0u8; size].into_boxed_slice();
            let access = MrAccess::SEND | MrAccess::RECV | MrAccess::READ | MrAccess::WRITE;
            let attr = MrAttr {
                iov: vec![(b.as_mut_ptr() as usize, b.len())],
                access: access.bits(),
                requested_key: 0,
                offset: 0,
            };
            // SAFETY: the pool keeps every buffer allocated (in its free list
            // or in a PoolBuf that holds the pool) until after the
            // registrations drop (field order of `Pool`); the regions grant
            // local access only, so no peer reaches the memory.
            let mr = unsafe { domain.mr_reg(&attr) }?;
            free.push((b, mr.desc()));
            regs.push(mr);
        }
        Ok(BufPool {
            inner: Arc::new(Pool {
                regs,
                free: Mutex::new(free),
                size,
                count,
            }),
        })
    }

    /// A free buffer, or `None` while all are in use.
    pub fn take(&self) -> Option<PoolBuf> {
        let (buf, desc) = self.lock().pop()?;
        Some(PoolBuf {
            buf: Some(buf),
            desc,
            len: self.inner.size,
            pool: self.inner.clone(),
        })
    }

    /// Buffers free now.
    pub fn available(&self) -> usize {
        self.lock().len()
    }

    /// Size of each buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Box<[u8]>, u64)>> {
        self.inner.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A buffer from a [`BufPool`]; back to the pool when dropped. Its length
/// starts at the pool's buffer size and may be cut with
/// [`set_len`](Self::set_len) (a send of fewer bytes).
pub struct PoolBuf {
    buf: Option<Box<[u8]>>,
    desc: u64,
    len: usize,
    pool: Arc<Pool>,
}

impl PoolBuf {
    /// Uses the first `len` bytes (at most the buffer's size).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.pool.size);
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf").field("len", &self.len).finish()
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[..self.len],
            None => &[],
        }
    }
}

impl AsMut<[u8]> for PoolBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => &mut b[..self.len],
            None => &mut [],
        }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((b, self.desc));
        }
    }
}

// SAFETY: the bytes live in a boxed slice that does not move with the
// PoolBuf, and stay allocated (and registered) while it exists.
unsafe impl IoBuf for PoolBuf {
    fn desc(&self) -> Option<u64> {
        (!self.pool.regs.is_empty()).then_some(self.desc)
    }
}
// SAFETY: the bytes live in a boxed slice that does not move with the
// PoolBuf and stays allocated while it exists (as for its IoBuf), and
// `as_mut` gives the same `..len` range of it as `as_ref`.
unsafe impl IoBufMut for PoolBuf {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_buffers_come_back_and_are_reused_without_allocating() {
        let pool = BufPool::new(2, 64);
        let a = pool.take().expect("first");
        let mut b = pool.take().expect("second");
        assert!(pool.take().is_none(), "only two");
        assert_eq!(pool.available(), 0);
        let addr = b.as_ref().as_ptr();
        b.set_len(5);
        assert_eq!(b.as_ref().len(), 5);
        b.set_len(1000);
        assert_eq!(b.as_ref().len(), 64, "never past the buffer");
        drop(b);
        assert_eq!(pool.available(), 1);
        let again = pool.take().expect("returned buffer");
        assert_eq!(again.as_ref().as_ptr(), addr, "the same memory");
        assert_eq!(again.desc(), None, "unregistered pool");
        drop((a, again));
        assert_eq!(pool.available(), 2);
    }

    /// What a post does with a buffer: take its address, move it into the
    /// operation's handle (through calls, as `post` and `Op` do), let the
    /// provider write through the address, then hand it back. Under Miri
    /// this checks the `IoBuf` contract of each buffer kind, moves included.
    fn provider_writes_after_moves<B: IoBufMut>(buf: B) -> B {
        #[inline(never)]
        fn hold<B>(b: B) -> Option<B> {
            Some(b)
        }
        let mut buf = Held::new(buf);
        let m = buf.as_mut();
        let (p, n) = (m.as_mut_ptr(), m.len());
        let mut held = hold(buf);
        // SAFETY: `p..p+n` is the buffer's memory (IoBufMut's contract:
        // it stays put while the value moves), owned by `held`, which
        // nothing touches until the write is done.
        unsafe { std::ptr::write_bytes(p, 9, n) };
        let b = held.take().expect("held").into_inner();
        assert!(b.as_ref().iter().all(|&x| x == 9));
        assert_eq!(b.as_ref().as_ptr(), p.cast_const(), "did not move");
        b
    }

    #[test]
    fn every_buffer_kind_keeps_its_bytes_in_place_across_moves() {
        provider_writes_after_moves(vec![0u8; 16]);
        provider_writes_after_moves(vec![0u8; 16].into_boxed_slice());
        let pool = BufPool::new(1, 16);
        let b = provider_writes_after_moves(pool.take().expect("buffer"));
        drop(b);
        let again = pool.take().expect("back in the pool");
        assert!(again.as_ref().iter().all(|&x| x == 9), "same memory");
        #[cfg(feature = "bytes")]
        {
            let b = provider_writes_after_moves(bytes::BytesMut::zeroed(16));
            // A frozen BytesMut (shared, read-only) keeps the same bytes.
            let frozen = b.freeze();
            assert_eq!(&frozen[..], &[9u8; 16][..]);
        }
    }
}
