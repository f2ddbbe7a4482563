//! Peers of the endpoint: the application's AV mirrored into the inner AVs
//! (each peer's path and inner fi_addr, and back from an inner sender to
//! its outer fi_addr), by every endpoint of a domain before any one drives
//! its inner endpoints ([`Siblings`]).

use super::{pending_parts, pending_src, HybridEp, State, NET, PATH_NAMES, SHM};
use crate::addr::HybridAddr;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::util::wait::ReadyWatch;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A peer's path and its inner fi_addr.
#[derive(Clone, Copy, Debug)]
pub(super) struct Route {
    pub(super) path: usize,
    pub(super) inner: u64,
}

/// What the endpoints of one hybrid domain share. The inner network
/// endpoints of a domain progress together (tcp's progress accepts
/// connections for all of them, udp's drives all of them), so before a
/// hybrid endpoint drives its inner endpoints, every endpoint of the
/// domain mirrors the AV entries added since: a peer's connection or first
/// message then finds the peer's address in the inner AV, and its messages
/// carry their source.
pub(crate) struct Siblings {
    /// Addresses the domain's AVs accepted (counted by the address ops).
    inserts: Arc<AtomicU64>,
    /// `inserts` as of the last time every endpoint mirrored its AV.
    mirrored: AtomicU64,
    eps: Mutex<Vec<Weak<HybridEp>>>,
    /// Readiness watches of the inner endpoints' wait fds, one per fd (the
    /// inner endpoints of a domain share theirs), alive while an endpoint
    /// holds one.
    watches: Mutex<Vec<(RawFd, Weak<ReadyWatch>)>>,
}

impl Siblings {
    /// The endpoints' shared state, counting the inserts `inserts` counts.
    pub(crate) fn new(inserts: Arc<AtomicU64>) -> Arc<Siblings> {
        Arc::new(Siblings {
            inserts,
            mirrored: AtomicU64::new(0),
            eps: Mutex::new(Vec::new()),
            watches: Mutex::new(Vec::new()),
        })
    }

    /// The watch of wait fd `fd`: the one an endpoint of the domain holds,
    /// or a new one.
    pub(super) fn watch(&self, fd: RawFd) -> Result<Arc<ReadyWatch>> {
        let mut v = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = v
            .iter()
            .find(|(f, _)| *f == fd)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(w);
        }
        let w = Arc::new(ReadyWatch::new(fd, "ofi-hybrid-watch")?);
        v.push((fd, Arc::downgrade(&w)));
        Ok(w)
    }

    pub(super) fn join(&self, ep: &Arc<HybridEp>) {
        let mut v = self.eps.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(ep));
    }

    /// Every endpoint mirrors its AV, when an address was added since the
    /// last time. Takes one endpoint's lock at a time: call it holding none.
    #[inline(always)]
    pub(super) fn mirror(&self) {
        let n = self.inserts.load(Ordering::Acquire);
        if n != self.mirrored.load(Ordering::Acquire) {
            self.mirror_all(n);
        }
    }

    /// [`mirror`](Self::mirror)'s work, `n` inserts counted.
    #[cold]
    #[inline(never)]
    fn mirror_all(&self, n: u64) {
        let eps: Vec<Arc<HybridEp>> = self
            .eps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for ep in eps {
            let mut st = ep.lock();
            ep.sync_av(&mut st);
        }
        self.mirrored.store(n, Ordering::Release);
    }
}

impl HybridEp {
    /// Mirrors new outer AV entries into the inner AVs (when the AV
    /// changed since last time).
    pub(super) fn sync_av(&self, st: &mut State) {
        // Two loads when nothing changed (every posted receive asks): the
        // AV is cloned only for a sync.
        let Some(gen) = st.b.av.as_ref().map(|av| av.generation()) else {
            return;
        };
        let now = (self.siblings.inserts.load(Ordering::Acquire), gen);
        if now == st.seen {
            return;
        }
        let Some(av) = st.b.av.clone() else { return };
        if now.1 != st.seen.1 {
            // Something was removed: routes, and the names inner senders
            // go by, are rebuilt from what remains (a removed peer's index
            // may name another peer now).
            st.routes.clear();
            self.shm_routes.clear();
            for rev in st.rev.iter_mut() {
                rev.fill(FI_ADDR_NOTAVAIL);
            }
            st.dead
                .retain(|(fi, raw, _)| av.lookup(*fi).is_ok_and(|a| a[..] == raw[..]));
        }
        st.seen = now;
        for (fi, raw) in av.entries() {
            let i = fi as usize;
            if st.routes.get(i).is_some_and(|r| r.is_some()) {
                continue;
            }
            let a = match HybridAddr::decode(&raw) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(fi_addr = fi, error = %e, "hybrid: AV entry skipped");
                    continue;
                }
            };
            let path = if HybridAddr::same_node(a.node, self.node) {
                SHM
            } else {
                NET
            };
            let inner_raw = if path == SHM { a.shm } else { a.net };
            let inner = match st.inner_addrs[path].get(&inner_raw) {
                Some(&x) => x,
                None => {
                    // Learned already (its messages came first), or new.
                    let x = match self.paths[path].av.find(&inner_raw) {
                        Some(x) => x,
                        None => {
                            let mut out = [FI_ADDR_NOTAVAIL];
                            match self.paths[path].av.insert(&[&inner_raw], &mut out) {
                                Ok(1) => {}
                                _ => {
                                    tracing::warn!(
                                        fi_addr = fi,
                                        path = PATH_NAMES[path],
                                        "hybrid: the inner AV refused the peer's address"
                                    );
                                    continue;
                                }
                            }
                            out[0]
                        }
                    };
                    st.inner_addrs[path].insert(inner_raw, x);
                    x
                }
            };
            if st.routes.len() <= i {
                st.routes.resize(i + 1, None);
            }
            st.routes[i] = Some(Route { path, inner });
            if path == SHM {
                self.shm_routes.set(fi, inner);
            }
            let rev = &mut st.rev[path];
            if let Ok(k) = usize::try_from(inner) {
                if rev.len() <= k {
                    rev.resize(k + 1, FI_ADDR_NOTAVAIL);
                }
                // An address inserted more than once goes by its primary
                // entry, as FI_SOURCE reports it.
                rev[k] = av.primary(fi).unwrap_or(fi);
            }
        }
        self.shm_routes.publish(now.1);
        if st.held_pending {
            Self::resolve_pending(st);
        }
    }

    /// Gives held messages whose sender the AV now names that sender's
    /// fi_addr (see [`pending_src`]).
    fn resolve_pending(st: &mut State) {
        let mut left = false;
        let State { mq, rev, .. } = st;
        for tagged in [false, true] {
            for u in mq.unexpected_iter_mut(tagged) {
                if let Some((path, inner)) = pending_parts(u.src) {
                    match rev.get(path).and_then(|r| r.get(inner as usize)) {
                        Some(&o) if o != FI_ADDR_NOTAVAIL => u.src = o,
                        _ => left = true,
                    }
                }
            }
        }
        st.held_pending = left;
    }

    pub(super) fn route(&self, st: &mut State, dest: u64) -> Result<Route> {
        if let Some(Some(r)) = st.routes.get(dest as usize) {
            if st
                .b
                .av
                .as_ref()
                .is_some_and(|av| av.generation() == st.seen.1)
            {
                return Ok(*r);
            }
        }
        self.sync_av(st);
        match st.routes.get(dest as usize) {
            Some(Some(r)) => Ok(*r),
            _ => Err(Error::inval(format!(
                "hybrid: fi_addr {dest} is not in the AV"
            ))),
        }
    }

    /// The outer fi_addr of a message's inner source; for a sender the
    /// inner AV learned but the application's AV does not name yet, a
    /// pending source ([`pending_src`]); FI_ADDR_NOTAVAIL when unknown.
    pub(super) fn outer_src(&self, st: &mut State, path: usize, inner: u64) -> u64 {
        if inner == FI_ADDR_NOTAVAIL || inner == FI_ADDR_UNSPEC {
            return FI_ADDR_NOTAVAIL;
        }
        let k = inner as usize;
        match st.rev[path].get(k) {
            Some(&o) if o != FI_ADDR_NOTAVAIL => o,
            _ => {
                self.sync_av(st);
                match st.rev[path].get(k) {
                    Some(&o) if o != FI_ADDR_NOTAVAIL => o,
                    _ if inner <= 0xFFFF_FFFF => pending_src(path, inner),
                    _ => FI_ADDR_NOTAVAIL,
                }
            }
        }
    }
}
