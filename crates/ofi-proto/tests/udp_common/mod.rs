//! A deterministic simulated datagram network for the udp core: virtual
//! time, a seeded RNG deciding each datagram's fate (loss, duplication,
//! reordering by extra delay, corruption), and a link that can be cut.
//!
//! Corruption flips one byte in flight; the datagram keeps the checksum it
//! was sent with, and delivery drops it when the checksum no longer
//! matches, as the receiving kernel's UDP checksum does. (Datagrams forged
//! to be well-formed are the hostile tests' business, not the network's.)
//!
//! Streams for the tests: a [`Producer`] writes records (a length byte, a
//! 64-bit number, that many bytes of a pattern of the number) and keeps
//! them until acknowledged; a [`Consumer`] parses them back and checks that
//! each arrives exactly once, in order, intact.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// xorshift64*: small, seeded.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `per_mille` / 1000.
    pub fn per_mille(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

/// What the network does to datagrams, in per mille.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
    pub corrupt: u32,
}

impl Faults {
    /// Every fault at `per_mille`.
    pub fn all(per_mille: u32) -> Faults {
        Faults {
            loss: per_mille,
            dup: per_mille,
            reorder: per_mille,
            corrupt: per_mille,
        }
    }
}

/// Counters of the network.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetStats {
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub delivered: u64,
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    order: u64,
    from: Vec<u8>,
    to: Vec<u8>,
    bytes: Vec<u8>,
    sum: u16,
}

/// The simulated network.
pub struct Net {
    pub now: Instant,
    start: Instant,
    pub rng: Rng,
    pub faults: Faults,
    pub latency: Duration,
    /// Largest extra delay of a reordered datagram.
    pub jitter: Duration,
    /// Link down: everything sent is lost.
    pub cut: bool,
    queue: Vec<InFlight>,
    order: u64,
    pub stats: NetStats,
}

/// The 16-bit ones' complement sum UDP uses.
pub fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        let w = u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
        s += w;
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

impl Net {
    pub fn new(seed: u64, faults: Faults) -> Net {
        let now = Instant::now();
        Net {
            now,
            start: now,
            rng: Rng::new(seed),
            faults,
            latency: Duration::from_micros(50),
            jitter: Duration::from_micros(400),
            cut: false,
            queue: Vec::new(),
            order: 0,
            stats: NetStats::default(),
        }
    }

    /// Sends a datagram from `from` to `to`.
    pub fn send(&mut self, from: &[u8], to: &[u8], bytes: &[u8]) {
        self.stats.sent += 1;
        if std::env::var("NET_TRACE").is_ok_and(|v| v.as_bytes() == from || v.as_bytes() == to) {
            eprintln!(
                "{:?} {} -> {} {:?} len {}",
                self.now - self.start,
                String::from_utf8_lossy(from),
                String::from_utf8_lossy(to),
                &bytes[..bytes.len().min(40)],
                bytes.len()
            );
        }
        if self.cut || self.rng.per_mille(self.faults.loss) {
            if std::env::var("NET_TRACE").is_ok_and(|v| v.as_bytes() == from || v.as_bytes() == to)
            {
                eprintln!("LOST");
            }
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.per_mille(self.faults.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self.latency;
            if self.rng.per_mille(self.faults.reorder) {
                self.stats.reordered += 1;
                delay += Duration::from_nanos(self.rng.below(self.jitter.as_nanos() as u64 + 1));
            }
            let sum = checksum(bytes);
            let mut b = bytes.to_vec();
            if !b.is_empty() && self.rng.per_mille(self.faults.corrupt) {
                self.stats.corrupted += 1;
                let i = self.rng.below(b.len() as u64) as usize;
                b[i] ^= 1 + self.rng.below(255) as u8;
            }
            self.order += 1;
            self.queue.push(InFlight {
                at: self.now + delay,
                order: self.order,
                from: from.to_vec(),
                to: to.to_vec(),
                bytes: b,
                sum,
            });
        }
    }

    /// When the next datagram arrives.
    pub fn next_at(&self) -> Option<Instant> {
        self.queue.iter().map(|d| d.at).min()
    }

    /// The next datagram due by now: (from, to, bytes). Datagrams whose
    /// checksum fails are dropped on the way.
    pub fn deliver(&mut self) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        loop {
            let i = self
                .queue
                .iter()
                .enumerate()
                .filter(|(_, d)| d.at <= self.now)
                .min_by_key(|(_, d)| (d.at, d.order))
                .map(|(i, _)| i)?;
            let d = self.queue.swap_remove(i);
            if checksum(&d.bytes) != d.sum {
                if std::env::var("NET_TRACE")
                    .is_ok_and(|v| v.as_bytes() == d.from || v.as_bytes() == d.to)
                {
                    eprintln!("{:?} corrupted dropped", d.at - self.start);
                }
                continue;
            }
            if std::env::var("NET_TRACE")
                .is_ok_and(|v| v.as_bytes() == d.from || v.as_bytes() == d.to)
            {
                eprintln!(
                    "{:?} deliver {} -> {} {:?}",
                    d.at - self.start,
                    String::from_utf8_lossy(&d.from),
                    String::from_utf8_lossy(&d.to),
                    &d.bytes[..8]
                );
            }
            self.stats.delivered += 1;
            return Some((d.from, d.to, d.bytes));
        }
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Drops everything in flight.
    pub fn flush(&mut self) {
        self.queue.clear();
    }
}

/// Deterministic bytes of record `id`.
pub fn pattern(id: u64, len: usize) -> impl Iterator<Item = u8> {
    (0..len).map(move |i| (id.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 1) as u8)
}

/// Bytes of a record header (length byte, number).
pub const REC_HDR: usize = 9;

/// Writes records and keeps the bytes not yet acknowledged.
#[derive(Debug, Default)]
pub struct Producer {
    bytes: VecDeque<u8>,
    /// Stream offset of `bytes[0]`.
    base: u64,
    /// Records written.
    pub records: u64,
    /// Records to write in all.
    pub total: u64,
}

impl Producer {
    pub fn new(total: u64) -> Producer {
        Producer {
            total,
            ..Default::default()
        }
    }
    /// Stream offset of the end.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }
    /// Writes records while fewer than `max_buffered` bytes are kept.
    pub fn fill(&mut self, rng: &mut Rng, max_len: u64, max_buffered: usize) {
        while self.records < self.total && self.bytes.len() < max_buffered {
            let id = self.records;
            let len = rng.below(max_len + 1) as usize;
            self.bytes.push_back(len as u8);
            self.bytes.extend(id.to_le_bytes());
            self.bytes.extend(pattern(id, len));
            self.records += 1;
        }
    }
    /// Appends raw bytes (a large message).
    pub fn push_raw(&mut self, b: &[u8]) {
        self.bytes.extend(b);
    }
    /// The bytes of a stream range (must be kept).
    pub fn gather(&self, r: std::ops::Range<u64>) -> Vec<u8> {
        assert!(
            r.start >= self.base,
            "range {r:?} below the kept bytes at {}",
            self.base
        );
        let a = (r.start - self.base) as usize;
        let b = (r.end - self.base) as usize;
        assert!(
            b <= self.bytes.len(),
            "range {r:?} beyond the stream end {}",
            self.end()
        );
        self.bytes.range(a..b).copied().collect()
    }
    /// Forgets bytes below `acked`.
    pub fn ack_to(&mut self, acked: u64) {
        assert!(acked <= self.end(), "acknowledged beyond the stream end");
        if acked > self.base {
            let n = (acked - self.base) as usize;
            self.bytes.drain(..n);
            self.base = acked;
        }
    }
    /// Bytes kept (unacknowledged).
    pub fn kept(&self) -> usize {
        self.bytes.len()
    }
}

/// Parses records and checks them.
#[derive(Debug, Default)]
pub struct Consumer {
    partial: Vec<u8>,
    /// Records received whole and checked.
    pub records: u64,
    /// Bytes taken in all.
    pub bytes: u64,
}

impl Consumer {
    /// Takes `b`, checking records as they complete. Panics on a record out
    /// of order, repeated, or with wrong bytes.
    pub fn take(&mut self, b: &[u8]) {
        self.bytes += b.len() as u64;
        self.partial.extend_from_slice(b);
        let mut at = 0;
        loop {
            let rest = &self.partial[at..];
            if rest.len() < REC_HDR {
                break;
            }
            let len = rest[0] as usize;
            if rest.len() < REC_HDR + len {
                break;
            }
            let id = u64::from_le_bytes(rest[1..9].try_into().unwrap());
            assert_eq!(
                id, self.records,
                "record {id} arrived where record {} was due (lost, repeated or reordered)",
                self.records
            );
            assert!(
                rest[REC_HDR..REC_HDR + len]
                    .iter()
                    .copied()
                    .eq(pattern(id, len)),
                "record {id}: bytes damaged"
            );
            self.records += 1;
            at += REC_HDR + len;
        }
        self.partial.drain(..at);
    }
}
