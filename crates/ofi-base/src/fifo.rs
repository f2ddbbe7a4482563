//! A first-in first-out ring of plain values for the data path: pushing
//! writes in place (no call, no move through a temporary once inlined),
//! the front is read by reference and dropped without a copy, and the
//! capacity doubles when full (nothing is refused or lost).

/// A FIFO of `Copy` values in a power-of-two ring.
#[derive(Clone, Debug)]
pub struct Fifo<T> {
    ring: Vec<T>,
    head: usize,
    len: usize,
}

impl<T: Copy + Default> Fifo<T> {
    /// A ring with room for `n` values before it first grows.
    pub fn with_capacity(n: usize) -> Self {
        Fifo {
            ring: vec![T::default(); n.next_power_of_two().max(2)],
            head: 0,
            len: 0,
        }
    }

    /// Values queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.ring.len() - 1
    }

    /// Queues `v` at the back.
    #[inline(always)]
    pub fn push_back(&mut self, v: T) {
        if self.len == self.ring.len() {
            self.grow();
        }
        let at = (self.head + self.len) & self.mask();
        self.ring[at] = v;
        self.len += 1;
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = self.ring.len();
        let mut ring = vec![T::default(); n * 2];
        for (i, slot) in ring.iter_mut().take(self.len).enumerate() {
            *slot = self.ring[(self.head + i) & (n - 1)];
        }
        self.ring = ring;
        self.head = 0;
    }

    /// The oldest value.
    #[inline]
    pub fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.ring.get(self.head)
    }

    /// The value at position `i` (0: the oldest).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.ring.get((self.head + i) & self.mask())
    }

    /// The value at position `i`, to change in place.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let at = (self.head + i) & self.mask();
        self.ring.get_mut(at)
    }

    /// Drops the oldest value (nothing when empty).
    #[inline]
    pub fn skip_front(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) & self.mask();
            self.len -= 1;
        }
    }

    /// Removes and returns the value at position `i`; the values behind it
    /// move up one place.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = *self.get(i)?;
        if i == 0 {
            self.skip_front();
            return Some(v);
        }
        let mask = self.mask();
        for k in i..self.len - 1 {
            self.ring[(self.head + k) & mask] = self.ring[(self.head + k + 1) & mask];
        }
        self.len -= 1;
        Some(v)
    }

    /// The values, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).map(move |i| &self.ring[(self.head + i) & self.mask()])
    }

    /// Position of the first value for which `f` holds.
    #[inline]
    pub fn position(&self, mut f: impl FnMut(&T) -> bool) -> Option<usize> {
        (0..self.len).find(|&i| f(&self.ring[(self.head + i) & self.mask()]))
    }

    /// Takes every value out, oldest first.
    pub fn drain(&mut self) -> Vec<T> {
        let v: Vec<T> = self.iter().copied().collect();
        self.head = 0;
        self.len = 0;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Fifo;
    use std::collections::VecDeque;

    /// Every operation, in any order, agrees with `VecDeque`.
    #[test]
    fn behaves_as_a_deque() {
        let mut f = Fifo::with_capacity(2);
        let mut d = VecDeque::new();
        let mut x: u64 = 0x9e37_79b9;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 6 {
                0 | 1 => {
                    f.push_back(step);
                    d.push_back(step);
                }
                2 => {
                    let a = f.front().copied();
                    f.skip_front();
                    assert_eq!(a, d.pop_front());
                }
                3 => {
                    let i = (x >> 8) as usize % (d.len() + 1);
                    assert_eq!(f.remove(i), d.remove(i));
                }
                4 => {
                    let i = (x >> 8) as usize % (d.len() + 1);
                    if let (Some(a), Some(b)) = (f.get_mut(i), d.get_mut(i)) {
                        *a += 1;
                        *b += 1;
                    }
                    assert_eq!(f.get(i), d.get(i));
                }
                _ => {
                    let k = step % 7;
                    assert_eq!(
                        f.position(|v| v % 7 == k),
                        d.iter().position(|v| v % 7 == k)
                    );
                }
            }
            assert_eq!(f.len(), d.len());
            assert_eq!(f.front(), d.front());
        }
        assert!(f.iter().eq(d.iter()));
        assert_eq!(f.drain(), d.drain(..).collect::<Vec<_>>());
        assert!(f.is_empty());
    }
}
