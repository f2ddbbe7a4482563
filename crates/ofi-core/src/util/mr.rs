//! Memory regions: registration with access flags, keys (provider-chosen and
//! random, or requested by the user), and bounds checks.
//!
//! A remote access holds its region (`Arc<MrCore>`, through
//! [`Resolved`](super::rma::Resolved)) for as long as it touches the memory.
//! Closing a region first revokes it ([`MrCore::revoke`]: its key leaves the
//! map, so no new access can start) and then waits until no access holds it
//! any more ([`wait_idle`]), so that the memory is not freed under a copy a
//! provider's thread is still making.

use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::util::hash::IdMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Registration attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MrAttr {
    /// Memory ranges as (address, length).
    pub iov: Vec<(usize, usize)>,
    /// Access flags (FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE).
    pub access: u64,
    /// Requested key (ignored when the provider chooses keys).
    pub requested_key: u64,
    /// Offset added to addresses for offset-based addressing.
    pub offset: u64,
}

/// A registered region.
#[derive(Debug)]
pub struct MrCore {
    /// The remote key.
    pub key: u64,
    /// Access flags.
    pub access: u64,
    /// The ranges.
    pub iov: Vec<(usize, usize)>,
    /// Requested offset.
    pub offset: u64,
    map: Weak<MrMap>,
    events: Mutex<Option<super::rma::MrEvents>>,
    /// The accesses the bound counter counts (`events`' flags, 0 without
    /// one): an access that counts nothing skips the lock.
    counted: AtomicU64,
    revoked: AtomicBool,
    /// Whether FI_COMMIT_COMPLETE can make this region's memory durable
    /// (`Err`: why not), found at the first commit request.
    durable: OnceLock<std::result::Result<(), Error>>,
}

const ACCESS_ALL: u64 = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

impl MrCore {
    /// The local descriptor (`fi_mr_desc`): the key.
    pub fn desc(&self) -> u64 {
        self.key
    }
    /// Total registered length.
    pub fn len(&self) -> usize {
        self.iov.iter().map(|(_, l)| *l).sum()
    }
    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checks that `[addr, addr+len)` lies inside one range and that `access`
    /// is granted. Virtual addresses (FI_MR_VIRT_ADDR) or offsets from the
    /// region start are both accepted per `virt`.
    pub fn check(&self, addr: u64, len: usize, access: u64, virt: bool) -> Result<usize> {
        self.locate(addr, len, access, virt)
            .map_err(|code| self.refusal(code, addr, len, access))
    }

    /// [`check`](Self::check) without the message: the local address, or
    /// `FI_EACCES` alone (a target answers a peer with the number only, so
    /// a bad request costs no formatting).
    #[inline]
    pub fn locate(
        &self,
        addr: u64,
        len: usize,
        access: u64,
        virt: bool,
    ) -> std::result::Result<usize, i32> {
        if access & !self.access != 0 {
            return Err(errno::FI_EACCES);
        }
        let mut base_off = 0u64;
        for &(base, l) in &self.iov {
            let start = if virt {
                base as u64
            } else {
                self.offset.wrapping_add(base_off)
            };
            let end = start.wrapping_add(l as u64);
            if addr >= start && addr.checked_add(len as u64).is_some_and(|e| e <= end) {
                return Ok(base + (addr - start) as usize);
            }
            base_off += l as u64;
        }
        Err(errno::FI_EACCES)
    }

    /// The error [`check`](Self::check) gives for a refusal `code` of
    /// [`locate`](Self::locate).
    #[cold]
    #[inline(never)]
    fn refusal(&self, code: i32, addr: u64, len: usize, access: u64) -> Error {
        if access & !self.access != 0 {
            return Error::new(
                code,
                format!("region {:#x} does not grant {:#x}", self.key, access),
            );
        }
        Error::new(
            code,
            format!("[{addr:#x}, +{len}) is outside region {:#x}", self.key),
        )
    }
}

impl MrCore {
    /// Binds a counter that counts remote accesses to this region
    /// (`fi_mr_bind` with FI_REMOTE_READ / FI_REMOTE_WRITE; FI_RMA_EVENT).
    pub fn bind_cntr(&self, cntr: Arc<crate::util::cntr::CntrCore>, flags: u64) -> Result<()> {
        let known = FI_REMOTE_READ | FI_REMOTE_WRITE;
        if flags & !known != 0 || flags == 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("mr bind: flags {flags:#x} are not FI_REMOTE_READ / FI_REMOTE_WRITE"),
            ));
        }
        // The counter cannot close while a region counts into it.
        cntr.bound.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let old = ev.replace(super::rma::MrEvents { cntr, flags });
        self.counted.store(flags, Ordering::Relaxed);
        drop(ev);
        if let Some(o) = old {
            o.cntr
                .bound
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(())
    }
    /// Unbinds the counter (the region is closing): it counts no more
    /// accesses and may close.
    pub fn unbind_cntr(&self) {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        self.counted.store(0, Ordering::Relaxed);
        let old = ev.take();
        drop(ev);
        if let Some(o) = old {
            o.cntr
                .bound
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
    /// Counts one remote access (FI_REMOTE_READ or FI_REMOTE_WRITE) into
    /// the bound counter, if any.
    #[inline]
    pub fn count_remote(&self, access: u64) {
        // An access the counter does not count (or no counter) takes no
        // lock; one racing with the binding may go uncounted, as it may
        // have run just before it.
        if self.counted.load(Ordering::Relaxed) & access != 0 {
            self.count_bound(access);
        }
    }

    #[inline(never)]
    fn count_bound(&self, access: u64) {
        let g = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ev) = g.as_ref() {
            if ev.flags & access != 0 {
                ev.cntr.add(1);
            }
        }
    }
}

impl MrCore {
    /// `Ok` when FI_COMMIT_COMPLETE can make this region's memory durable
    /// (every range in a shared mapping of a file on a file system that
    /// keeps data: see [`durable`](super::durable)); else `FI_EOPNOTSUPP`
    /// naming why. Decided once, at the first call.
    pub fn durable(&self) -> Result<()> {
        self.durable
            .get_or_init(|| super::durable::check(&self.iov))
            .clone()
    }

    /// Makes `[addr, addr + len)` of this region durable (after
    /// [`durable`](Self::durable) accepted the region): written back to
    /// its file and on stable storage when this returns.
    pub fn persist(&self, addr: usize, len: usize) -> Result<()> {
        self.durable()?;
        super::durable::persist(addr, len)
    }
}

impl MrCore {
    /// Takes the key out of the domain's map if it still names this region
    /// (a revoked user key may have been registered again since).
    fn unmap(&self) {
        if let Some(m) = self.map.upgrade() {
            let mut keys = m.keys.lock().unwrap_or_else(|e| e.into_inner());
            if keys
                .get(&self.key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), self))
            {
                keys.remove(&self.key);
            }
        }
    }

    /// Stops new remote accesses: the key leaves the domain's map at once
    /// (a request naming it now fails with `FI_EKEYREJECTED`), and
    /// providers that hold the region across several steps of one access
    /// (a WRITE whose data is still arriving) see [`is_revoked`](Self::is_revoked)
    /// and stop. Accesses already running keep their hold until they end.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
        self.unmap();
    }

    /// True once the region is being closed: a provider must not start
    /// another step of an access on it.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }
}

impl Drop for MrCore {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// Waits until nothing but the `own` holds of the caller keeps `mr` (no
/// remote access runs on it any more), for at most `limit` (`None`:
/// forever). True when idle; every access's last touch of the memory then
/// happens before the return. Call after [`MrCore::revoke`], so that no new
/// access can start meanwhile.
pub fn wait_idle(mr: &Arc<MrCore>, own: usize, limit: Option<Duration>) -> bool {
    let start = Instant::now();
    let mut nap = Duration::from_micros(10);
    loop {
        if Arc::strong_count(mr) <= own {
            // SYNC POINT: pairs with the release decrement of the last
            // access's `Arc<MrCore>`, dropped after its last copy.
            fence(Ordering::Acquire);
            return true;
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            return false;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(1));
    }
}

/// A domain's key → region map.
#[derive(Debug)]
pub struct MrMap {
    /// Keys are chosen by the local application (or randomly for it); a
    /// peer only looks them up, so the map cannot be flooded with
    /// colliding keys and takes the one-multiply hash.
    keys: Mutex<IdMap<u64, Weak<MrCore>>>,
    atomic: Mutex<()>,
    random: KeySource,
}

/// Where provider-chosen keys come from: fills the buffer from the OS random
/// source or says why it could not.
type KeySource = fn(&mut [u8]) -> std::result::Result<(), getrandom::Error>;

impl Default for MrMap {
    fn default() -> Self {
        MrMap {
            keys: Mutex::default(),
            atomic: Mutex::default(),
            random: getrandom::fill,
        }
    }
}

/// A key from the OS random source; when that fails, registration fails:
/// a key an attacker could guess would expose the region to any peer.
fn random_key(source: KeySource) -> Result<u64> {
    let mut b = [0u8; 8];
    source(&mut b).map_err(|e| {
        Error::new(
            errno::FI_EOTHER,
            format!("mr: the OS random source failed ({e}); no unguessable key can be chosen"),
        )
    })?;
    Ok(u64::from_ne_bytes(b))
}

impl MrMap {
    /// A new, empty map.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// Registers a region. `prov_key`: the provider picks a random,
    /// non-sequential key; otherwise the requested key must be unused
    /// (`FI_ENOKEY`).
    ///
    /// # Safety
    /// The ranges of `attr.iov` stay valid, for the accesses `attr.access`
    /// grants (peers write into them with FI_REMOTE_WRITE), until the
    /// region is revoked and idle (see [`wait_idle`]); nothing else may
    /// rely on their contents meanwhile in a way a remote write breaks.
    // The contract is unsafe; the body does no unsafe operation.
    #[allow(unsafe_code)]
    pub unsafe fn register(self: &Arc<Self>, attr: &MrAttr, prov_key: bool) -> Result<Arc<MrCore>> {
        if attr.iov.is_empty() {
            return Err(Error::inval("mr: no memory ranges given"));
        }
        if attr.access & !ACCESS_ALL != 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("mr: unknown access bits {:#x}", attr.access & !ACCESS_ALL),
            ));
        }
        for &(base, len) in &attr.iov {
            if base.checked_add(len).is_none() {
                return Err(Error::inval("mr: range wraps around the address space"));
            }
            if base == 0 && len > 0 {
                return Err(Error::inval("mr: null base address"));
            }
        }
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let key = if prov_key {
            loop {
                let k = random_key(self.random)?;
                if k != 0 && k != u64::MAX && !keys.contains_key(&k) {
                    break k;
                }
            }
        } else {
            if keys
                .get(&attr.requested_key)
                .is_some_and(|w| w.strong_count() > 0)
            {
                return Err(Error::new(
                    errno::FI_ENOKEY,
                    format!("mr: key {:#x} is already in use", attr.requested_key),
                ));
            }
            attr.requested_key
        };
        // The access asked for, and no more: a region registered with none
        // (local use) takes no remote access (fi_mr(3)).
        let mr = Arc::new(MrCore {
            key,
            access: attr.access,
            iov: attr.iov.clone(),
            offset: attr.offset,
            map: Arc::downgrade(self),
            events: Mutex::new(None),
            counted: AtomicU64::new(0),
            revoked: AtomicBool::new(false),
            durable: OnceLock::new(),
        });
        keys.insert(key, Arc::downgrade(&mr));
        Ok(mr)
    }
    /// Serialises fabric atomics on this domain's memory.
    pub fn atomic_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.atomic.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The region of a key, if registered.
    #[inline]
    pub fn lookup(&self, key: u64) -> Option<Arc<MrCore>> {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .and_then(Weak::upgrade)
    }
}

/// The region a target resolved last, so that the next access under the
/// same key (a stream of requests into one region) skips the map's lock
/// and hash. It holds no region alive (a `Weak`), and serves no region
/// that has been revoked: a key closed, or closed and registered again,
/// is looked up in the map afresh.
#[derive(Debug, Default)]
pub struct MrCache {
    key: u64,
    mr: Weak<MrCore>,
}

impl MrCache {
    /// The region of `key` in `map`, if registered.
    #[inline]
    pub fn lookup(&mut self, map: &MrMap, key: u64) -> Option<Arc<MrCore>> {
        if self.key == key {
            if let Some(mr) = self.mr.upgrade().filter(|m| !m.is_revoked()) {
                return Some(mr);
            }
        }
        let mr = map.lookup(key)?;
        self.key = key;
        self.mr = Arc::downgrade(&mr);
        Some(mr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers for a test: nothing ever accesses the ranges (no
    /// endpoint reads or writes through this map).
    #[allow(unsafe_code)]
    fn reg(map: &Arc<MrMap>, a: &MrAttr, prov_key: bool) -> Result<Arc<MrCore>> {
        // SAFETY: no access ever reaches the ranges (see above).
        unsafe { map.register(a, prov_key) }
    }

    fn attr() -> MrAttr {
        MrAttr {
            iov: vec![(0x1000, 64)],
            access: FI_REMOTE_WRITE,
            ..Default::default()
        }
    }

    #[test]
    fn provider_keys_need_the_os_random_source() {
        fn broken(_: &mut [u8]) -> std::result::Result<(), getrandom::Error> {
            Err(getrandom::Error::UNSUPPORTED)
        }
        let map = Arc::new(MrMap {
            random: broken,
            ..MrMap::default()
        });
        let e = reg(&map, &attr(), true).expect_err("a key without randomness");
        assert_eq!(e.code(), errno::FI_EOTHER);
        assert!(e.message().contains("random source"), "{e}");
        // A requested key needs no randomness.
        let a = MrAttr {
            requested_key: 7,
            ..attr()
        };
        assert_eq!(reg(&map, &a, false).expect("requested key").key, 7);
    }

    #[test]
    fn a_revoked_region_takes_no_new_access_and_waits_for_running_ones() {
        let map = MrMap::new();
        let a = MrAttr {
            requested_key: 9,
            ..attr()
        };
        let mr = reg(&map, &a, false).expect("register");
        let access = crate::util::rma::resolve(&map, 9, 0, 8, FI_REMOTE_WRITE, false)
            .expect("a running access");
        mr.revoke();
        assert!(mr.is_revoked());
        let e = crate::util::rma::resolve(&map, 9, 0, 8, FI_REMOTE_WRITE, false)
            .expect_err("a new access after revoke");
        assert_eq!(e.code(), errno::FI_EKEYREJECTED);
        assert!(!wait_idle(&mr, 1, Some(Duration::from_millis(5))));
        // The key may be registered again; the old region's end leaves it.
        let again = reg(&map, &a, false).expect("the key again");
        drop(access);
        assert!(wait_idle(&mr, 1, Some(Duration::ZERO)));
        drop(mr);
        assert!(map.lookup(9).is_some_and(|m| Arc::ptr_eq(&m, &again)));
    }

    #[test]
    fn the_cache_serves_no_revoked_region_and_keeps_none_alive() {
        let map = MrMap::new();
        let a = MrAttr {
            requested_key: 5,
            ..attr()
        };
        let first = reg(&map, &a, false).expect("register");
        let mut cache = MrCache::default();
        assert!(cache.lookup(&map, 6).is_none(), "an unknown key");
        let got = cache.lookup(&map, 5).expect("the region");
        assert!(Arc::ptr_eq(&got, &first));
        drop(got);
        assert!(
            wait_idle(&first, 1, Some(Duration::ZERO)),
            "the cache holds no access"
        );
        // Closed and registered again under the same key: the new region.
        first.revoke();
        assert!(cache.lookup(&map, 5).is_none(), "a revoked region");
        let second = reg(&map, &a, false).expect("the key again");
        let got = cache.lookup(&map, 5).expect("the new region");
        assert!(Arc::ptr_eq(&got, &second));
        drop((got, first, second));
        assert!(cache.lookup(&map, 5).is_none(), "a dropped region");
    }

    #[test]
    fn provider_keys_are_distinct_and_not_sequential() {
        let map = MrMap::new();
        let regs: Vec<_> = (0..64)
            .map(|_| reg(&map, &attr(), true).expect("register"))
            .collect();
        let mut keys: Vec<u64> = regs.iter().map(|m| m.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 64, "duplicate provider keys");
        let close = keys.windows(2).filter(|w| w[1] - w[0] < 1 << 20).count();
        assert!(close < 4, "keys are clustered: {keys:x?}");
    }
}
