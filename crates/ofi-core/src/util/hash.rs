//! A hasher for maps keyed by locally assigned integers (connection ids,
//! fi_addrs, request ids): one multiply instead of SipHash. Not for keys an
//! adversary chooses.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-fold hasher for integer keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The high bits of the product mix every input bit; hashbrown takes
        // its control byte from the top and its index from the bottom.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 ^= u64::from(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
}

/// A `HashMap` keyed by local integer ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..4096u64 {
            let mut h = IdHasher::default();
            h.write_u64(i);
            seen.insert(h.finish() & 0xfff);
        }
        // A good spread fills most of 4096 buckets with 4096 keys.
        assert!(seen.len() > 2000, "only {} buckets used", seen.len());
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..1000 {
            m.insert(i, i * 2);
        }
        assert!((0..1000).all(|i| m[&i] == i * 2));
    }
}
