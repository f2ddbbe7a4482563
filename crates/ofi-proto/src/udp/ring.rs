//! A byte ring over a buffer initialized once: bytes appended at its end
//! are written in place (a user range is read straight into the ring,
//! with no staging copy and no zero-fill per append), and read from the
//! front as at most two slices.

/// A growable ring of bytes (see the module documentation).
#[derive(Debug)]
pub(super) struct ByteRing {
    buf: Vec<u8>,
    head: usize,
    len: usize,
}

impl ByteRing {
    /// A ring that holds `cap` bytes before it grows.
    pub(super) fn with_capacity(cap: usize) -> ByteRing {
        ByteRing {
            buf: vec![0; cap.max(1)],
            head: 0,
            len: 0,
        }
    }

    /// Bytes held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Forgets every byte.
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The bytes, oldest first: the run up to the buffer's end, then the
    /// rest from its start.
    #[inline]
    pub(super) fn as_slices(&self) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        let end = self.head + self.len;
        if end <= cap {
            (&self.buf[self.head..end], &[])
        } else {
            (&self.buf[self.head..], &self.buf[..end - cap])
        }
    }

    /// Forgets the `n` oldest bytes.
    #[inline]
    pub(super) fn drain_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.len -= n;
        self.head = if self.len == 0 {
            0
        } else {
            (self.head + n) % self.buf.len()
        };
    }

    /// Appends `n` bytes that `fill` writes into the free space at the
    /// end (one slice, or two when it wraps; the second may be empty).
    #[inline]
    pub(super) fn append_with(&mut self, n: usize, fill: impl FnOnce(&mut [u8], &mut [u8])) {
        if self.len + n > self.buf.len() {
            self.grow(self.len + n);
        }
        let cap = self.buf.len();
        let tail = self.head + self.len;
        if tail >= cap {
            // The free space is one run before the head.
            let at = tail - cap;
            fill(&mut self.buf[at..at + n], &mut []);
        } else if tail + n <= cap {
            fill(&mut self.buf[tail..tail + n], &mut []);
        } else {
            let (front, back) = self.buf.split_at_mut(tail);
            let first = cap - tail;
            fill(back, &mut front[..n - first]);
        }
        self.len += n;
    }

    /// Appends `bytes`.
    #[inline]
    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.append_with(bytes.len(), |a, b| {
            let (x, y) = bytes.split_at(a.len());
            a.copy_from_slice(x);
            b.copy_from_slice(y);
        });
    }

    /// Makes room for `need` bytes (at least twice the old size), the
    /// bytes held moved to the start.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, need: usize) {
        let mut buf = vec![0; need.max(2 * self.buf.len())];
        let (a, b) = self.as_slices();
        buf[..a.len()].copy_from_slice(a);
        buf[a.len()..a.len() + b.len()].copy_from_slice(b);
        self.buf = buf;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// The ring against a VecDeque under appends, drains and wraps.
    #[test]
    fn behaves_as_a_deque_of_bytes() {
        let mut r = ByteRing::with_capacity(7);
        let mut d: VecDeque<u8> = VecDeque::new();
        let mut x = 1u32;
        for step in 0..2000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let n = (x >> 16) as usize % 11;
            if step % 3 == 0 {
                r.drain_front(n);
                d.drain(..n.min(d.len()));
            } else {
                let bytes: Vec<u8> = (0..n).map(|i| (step as usize + i) as u8).collect();
                if step % 2 == 0 {
                    r.extend(&bytes);
                } else {
                    r.append_with(n, |a, b| {
                        a.copy_from_slice(&bytes[..a.len()]);
                        b.copy_from_slice(&bytes[a.len()..]);
                    });
                }
                d.extend(&bytes);
            }
            let (a, b) = r.as_slices();
            let got: Vec<u8> = a.iter().chain(b).copied().collect();
            let want: Vec<u8> = d.iter().copied().collect();
            assert_eq!(got, want, "step {step}");
            assert_eq!(r.len(), d.len());
            if step % 97 == 0 {
                r.clear();
                d.clear();
            }
        }
    }
}
