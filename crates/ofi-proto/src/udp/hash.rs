//! The hasher of the udp core's maps: peer addresses (short byte strings
//! that a remote party may choose, as the source of its datagrams) and
//! local ids. A folded multiply over 8-byte words from a seed drawn once
//! per map, so a set of colliding keys cannot be worked out in advance;
//! a few instructions per key where SipHash takes a few hundred.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Odd constants of the mix (the fractional digits of pi).
const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

/// Builds [`FastHasher`]s from a seed drawn from the system's random
/// source when the map is made.
#[derive(Clone, Copy, Debug)]
pub struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> FastState {
        // std's RandomState holds random keys per thread: hashing one
        // word with it (once, when a map is made) draws a fresh seed.
        let seed = std::hash::RandomState::new().hash_one(K1);
        FastState { seed }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher { h: self.seed }
    }
}

/// The hasher [`FastState`] builds.
#[derive(Clone, Copy, Debug)]
pub struct FastHasher {
    h: u64,
}

impl FastHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        let m = u128::from(self.h ^ w) * u128::from(K0);
        self.h = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let m = u128::from(self.h) * u128::from(K1);
        (m as u64) ^ ((m >> 64) as u64)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.mix(u64::from_le_bytes(a));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(a) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

/// A `HashMap` with the [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, FastState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_spread_and_maps_work() {
        let s = FastState::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..4096u32 {
            let a = [10u8, 0, (i >> 8) as u8, i as u8, 0x12, 0x34, 0, 0, 0, 0];
            seen.insert(s.hash_one(&a[..]) & 0xfff);
        }
        assert!(seen.len() > 2000, "only {} buckets used", seen.len());
        let mut m: FastMap<Vec<u8>, u64> = FastMap::default();
        for i in 0..1000u64 {
            m.insert(i.to_le_bytes()[..3].to_vec(), i);
        }
        assert!((0..1000u64).all(|i| m[&i.to_le_bytes()[..3]] == i));
        let mut ids: FastMap<u64, u64> = FastMap::default();
        ids.insert(7, 1);
        assert_eq!(ids.get(&7), Some(&1));
    }
}
