//! Address vectors (map and table): raw addresses stored by index, a reverse
//! map for FI_SOURCE, and a generation number endpoints use to validate their
//! per-peer caches.
//!
//! Duplicates: `man fi_av` leaves inserting an address twice to the
//! provider. ofi gives each insert its own fi_addr (a table keeps its
//! indices in insertion order) and every one of them works: the fi_addrs
//! holding one address are *aliases* of one peer. The first of them still
//! in the AV is the peer's *primary* fi_addr ([`AvCore::primary`]): the
//! one FI_SOURCE reports and the one endpoints key per-peer state by
//! (connections, directed receives, dead peers), so that a send or a
//! directed receive through any alias reaches the same peer state.

use crate::consts::{av_type, FI_ADDR_NOTAVAIL};
use crate::error::{errno, Error, Result};
use crate::provider::AddrOps;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Address vector attributes (`struct fi_av_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvAttr {
    /// `av_type::FI_AV_MAP` or `FI_AV_TABLE` (unspecified: table).
    pub av_type: u32,
    /// Expected number of addresses.
    pub count: usize,
}

/// The fi_addrs holding one address: the primary and how many in all.
#[derive(Clone, Copy)]
struct Holders {
    primary: u64,
    count: usize,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Arc<[u8]>>>,
    /// Unused slots, the lowest first.
    free: std::collections::BinaryHeap<std::cmp::Reverse<usize>>,
    reverse: HashMap<Arc<[u8]>, Holders>,
}

/// The address vector shared by the core and providers.
pub struct AvCore {
    kind: u32,
    table: RwLock<Table>,
    generation: AtomicU64,
    insertions: AtomicU64,
    ops: Arc<dyn AddrOps>,
    pub(crate) bound: AtomicUsize,
    /// Most addresses [`reverse_or_learn`](Self::reverse_or_learn) may
    /// still insert (0: the AV never learns; see
    /// [`set_learning`](Self::set_learning)).
    learn_left: AtomicUsize,
}

impl std::fmt::Debug for AvCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvCore").field("kind", &self.kind).finish()
    }
}

impl AvCore {
    /// Creates an address vector using the domain's address handling.
    pub fn new(attr: &AvAttr, ops: Arc<dyn AddrOps>) -> Result<Arc<Self>> {
        let kind = match attr.av_type {
            av_type::FI_AV_UNSPEC => av_type::FI_AV_TABLE,
            av_type::FI_AV_MAP | av_type::FI_AV_TABLE => attr.av_type,
            v => {
                return Err(Error::inval(format!(
                    "av_attr.type = {v} is not an AV type"
                )))
            }
        };
        let t = Table {
            slots: Vec::with_capacity(attr.count),
            ..Default::default()
        };
        Ok(Arc::new(AvCore {
            kind,
            table: RwLock::new(t),
            generation: AtomicU64::new(0),
            insertions: AtomicU64::new(0),
            ops,
            bound: AtomicUsize::new(0),
            learn_left: AtomicUsize::new(0),
        }))
    }

    /// The AV type in force.
    pub fn kind(&self) -> u32 {
        self.kind
    }

    /// Changes whenever an address is removed; endpoints drop cached peers then.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Changes whenever addresses are inserted; endpoints look up again
    /// the peers they met before their address was in the AV.
    #[inline]
    pub fn insertions(&self) -> u64 {
        self.insertions.load(Ordering::Acquire)
    }

    /// Inserts addresses. `out[i]` receives each fi_addr, or
    /// `FI_ADDR_NOTAVAIL` for a rejected address. Returns how many succeeded;
    /// the first rejection's reason is logged.
    pub fn insert(&self, addrs: &[&[u8]], out: &mut [u64]) -> Result<usize> {
        if out.len() < addrs.len() {
            return Err(Error::inval(
                "av insert: output array shorter than the address list",
            ));
        }
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        let mut ok = 0;
        for (i, a) in addrs.iter().enumerate() {
            match self.ops.canonical(a) {
                Ok(c) => {
                    let c: Arc<[u8]> = c.into();
                    // The lowest unused index (fi_av(3), FI_AV_TABLE).
                    let idx = match t.free.pop() {
                        Some(std::cmp::Reverse(i)) => {
                            t.slots[i] = Some(c.clone());
                            i
                        }
                        None => {
                            t.slots.push(Some(c.clone()));
                            t.slots.len() - 1
                        }
                    };
                    t.reverse
                        .entry(c)
                        .and_modify(|h| h.count += 1)
                        .or_insert(Holders {
                            primary: idx as u64,
                            count: 1,
                        });
                    out[i] = idx as u64;
                    ok += 1;
                    self.insertions.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "av insert: address rejected");
                    out[i] = FI_ADDR_NOTAVAIL;
                }
            }
        }
        Ok(ok)
    }

    /// `fi_av_insertsvc`: resolves node + service and inserts the result.
    pub fn insertsvc(&self, node: &str, service: &str) -> Result<u64> {
        let a = self.ops.resolve(node, service)?;
        let mut out = [0u64];
        if self.insert(&[&a], &mut out)? != 1 {
            return Err(Error::inval(format!(
                "address for {node}:{service} was rejected"
            )));
        }
        Ok(out[0])
    }

    /// Removes addresses; an unknown fi_addr is `FI_EINVAL` and nothing is removed.
    pub fn remove(&self, fi_addrs: &[u64]) -> Result<()> {
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        for &a in fi_addrs {
            if t.slots.get(a as usize).and_then(|s| s.as_ref()).is_none() {
                return Err(Error::inval(format!(
                    "av remove: fi_addr {a} is not in the AV"
                )));
            }
        }
        for &a in fi_addrs {
            if let Some(old) = t.slots[a as usize].take() {
                t.free.push(std::cmp::Reverse(a as usize));
                let Some(h) = t.reverse.get(&old).copied() else {
                    continue;
                };
                if h.count <= 1 {
                    t.reverse.remove(&old);
                    continue;
                }
                // An alias remains: the first one left becomes the primary
                // (a scan, only when a duplicated primary goes).
                let primary = if h.primary == a {
                    t.slots
                        .iter()
                        .position(|s| s.as_deref() == Some(&old[..]))
                        .map_or(h.primary, |i| i as u64)
                } else {
                    h.primary
                };
                t.reverse.insert(
                    old,
                    Holders {
                        primary,
                        count: h.count - 1,
                    },
                );
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// `fi_av_lookup`: the raw address of an fi_addr.
    pub fn lookup(&self, fi_addr: u64) -> Result<Arc<[u8]>> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.slots
            .get(fi_addr as usize)
            .and_then(|s| s.clone())
            .ok_or_else(|| {
                Error::new(
                    errno::FI_ENOENT,
                    format!("fi_addr {fi_addr} is not in the AV"),
                )
            })
    }

    /// Every live entry as (fi_addr, raw address), in fi_addr order: lets
    /// a composing provider mirror the AV into the AVs of the providers it
    /// is built on.
    pub fn entries(&self) -> Vec<(u64, Arc<[u8]>)> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.clone().map(|a| (i as u64, a)))
            .collect()
    }

    /// The primary fi_addr of a raw address (what FI_SOURCE reports), if
    /// inserted.
    pub fn reverse(&self, addr: &[u8]) -> Option<u64> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.reverse.get(addr).map(|h| h.primary)
    }

    /// [`reverse`](Self::reverse) of an address in any form the AV accepts
    /// (it is made canonical first).
    pub fn find(&self, addr: &[u8]) -> Option<u64> {
        let c = self.ops.canonical(addr).ok()?;
        self.reverse(&c)
    }

    /// Lets [`reverse_or_learn`](Self::reverse_or_learn) insert up to
    /// `limit` more addresses. For a composing provider's private inner
    /// AV: a peer whose message arrives before the outer AV holds it then
    /// still has an inner fi_addr, and its messages can be attributed once
    /// the application inserts it. An application's AV never learns.
    pub fn set_learning(&self, limit: usize) {
        self.learn_left.store(limit, Ordering::Release);
    }

    /// The source a provider reports for a peer named `addr` (canonical):
    /// its primary fi_addr; or, if it is not in the AV and the AV learns
    /// (see [`set_learning`](Self::set_learning)), a new entry for it;
    /// otherwise `None`.
    pub fn reverse_or_learn(&self, addr: &[u8]) -> Option<u64> {
        if let Some(f) = self.reverse(addr) {
            return Some(f);
        }
        let left = self.learn_left.load(Ordering::Acquire);
        if left == 0
            || self
                .learn_left
                .compare_exchange(left, left - 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return None;
        }
        // Inserted by another thread meanwhile: that entry (no duplicate).
        if let Some(f) = self.reverse(addr) {
            return Some(f);
        }
        let mut out = [FI_ADDR_NOTAVAIL];
        match self.insert(&[addr], &mut out) {
            Ok(1) => Some(out[0]),
            _ => None,
        }
    }

    /// The primary fi_addr of the peer `fi_addr` names: `fi_addr` itself
    /// unless an earlier insert of the same address is still in the AV
    /// (see the module's note on duplicates); `None` when `fi_addr` is
    /// not in the AV.
    pub fn primary(&self, fi_addr: u64) -> Option<u64> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        let a = t.slots.get(fi_addr as usize)?.as_ref()?;
        t.reverse.get(a).map(|h| h.primary)
    }

    /// `fi_av_straddr`.
    pub fn straddr(&self, addr: &[u8]) -> String {
        self.ops.to_string(addr)
    }

    /// Number of live entries.
    pub fn count(&self) -> usize {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.slots.iter().filter(|s| s.is_some()).count()
    }
}
