//! Registered regions owned by safe code: the target side of RMA and atomics.
//!
//! # Soundness of region access
//!
//! Once registered, a region's bytes may be read or written by the provider
//! on behalf of any peer that knows the key, at any moment: inside this
//! channel's calls with manual progress, or on a progress thread of its own
//! (tcp with `FI_PROGRESS_AUTO`). Those accesses are plain, unsynchronised
//! copies, so any local access to the bytes while they are exposed would be a
//! data race — undefined behaviour in Rust's memory model, volatile or not.
//!
//! A [`Region`] therefore never lends its bytes while registered. The bytes
//! come back with [`Region::into_vec`], which first unregisters the region
//! (no new remote access can find its key) and then checks that no access
//! already granted is still running: the provider holds the region's core
//! (`Arc<MrCore>`) for the length of every access, so when nothing but this
//! region ever held it, no one touches the memory any more, and the
//! provider's release of the core (a release decrement) happens before the
//! acquire fence that precedes handing the `Vec` back. If an access is still
//! running, `into_vec` hands the region back to retry after driving the
//! channel (`poll`/`wait`). To expose the bytes again, register them again
//! (the key changes).
//!
//! Dropping a region behaves the same way; if an access is still running its
//! buffer is parked with the channel and freed once the access has finished
//! or the channel's endpoint has shut down. A buffer the provider still
//! holds after that is leaked rather than freed under its feet.

use crate::consts::*;
use crate::{errno, Error, MemoryRegion, MrAccess, MrAttr};
use ofi_core::util::mr::MrCore;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Access rights a region may grant.
const ACCESS: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE | FI_READ | FI_WRITE | FI_SEND | FI_RECV;

/// Keys for domains where the user picks them (no FI_MR_PROV_KEY).
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// True once no one but the retired region ever holds `core` again; the
/// acquire fence orders the provider's last accesses before ours.
fn idle(core: &Weak<MrCore>) -> bool {
    if core.strong_count() == 0 {
        // SYNC POINT: pairs with the release decrement of the provider's
        // last `Arc<MrCore>` (a grant released after its access).
        fence(Ordering::Acquire);
        true
    } else {
        false
    }
}

/// Buffers of dropped regions whose memory a provider was still accessing.
#[derive(Debug, Default)]
pub(crate) struct Parked {
    list: Mutex<Vec<(Weak<MrCore>, Vec<u8>)>>,
    any: AtomicBool,
}

impl Parked {
    fn park(&self, core: Weak<MrCore>, buf: Vec<u8>) {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((core, buf));
        self.any.store(true, Ordering::Relaxed);
    }

    /// Frees the parked buffers no access holds any more.
    #[inline(always)]
    pub(crate) fn sweep(&self) {
        if self.any.load(Ordering::Relaxed) {
            self.sweep_parked();
        }
    }

    #[cold]
    fn sweep_parked(&self) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|(core, _)| !idle(core));
        self.any.store(!l.is_empty(), Ordering::Relaxed);
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // The channel's endpoint is gone (it drops before this), so nothing
        // new can start; buffers still held by a provider are leaked.
        let l = self.list.get_mut().unwrap_or_else(|e| e.into_inner());
        for (core, buf) in l.drain(..) {
            if !idle(&core) {
                std::mem::forget(buf);
            }
        }
    }
}

enum State {
    /// Exposed to peers.
    Registered(MemoryRegion),
    /// Unregistered; accesses granted before may still be running.
    Retiring(Weak<MrCore>),
    /// The buffer has been handed back.
    Done,
}

/// A registered memory region that owns its buffer (see the module docs for
/// why its bytes are only reachable after unregistering).
///
/// Created by [`Channel::register`](super::Channel::register). Peers address
/// it with [`key`](Self::key) and [`remote_addr`](Self::remote_addr).
pub struct Region {
    state: State,
    // Never touched while registered or retiring: the provider may access
    // its heap memory through the address registered.
    buf: Vec<u8>,
    base: u64,
    len: usize,
    key: u64,
    virt: bool,
    parked: Arc<Parked>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("key", &self.key)
            .field("len", &self.len)
            .field("registered", &matches!(self.state, State::Registered(_)))
            .finish()
    }
}

impl Region {
    /// Registers `buf` in `domain` with `access` rights.
    pub(crate) fn register(
        domain: &crate::Domain,
        mut buf: Vec<u8>,
        access: MrAccess,
        parked: Arc<Parked>,
    ) -> std::result::Result<Region, (Vec<u8>, Error)> {
        let access = access.bits();
        if access & !ACCESS != 0 || access == 0 {
            return Err((
                buf,
                Error::new(
                    errno::FI_EBADFLAGS,
                    format!("region: access {access:#x} is not a set of FI_REMOTE_READ, FI_REMOTE_WRITE, FI_READ, FI_WRITE, FI_SEND, FI_RECV"),
                ),
            ));
        }
        if buf.is_empty() {
            return Err((
                buf,
                Error::inval("region: an empty buffer cannot be registered"),
            ));
        }
        let info = domain.info();
        let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
        let base = buf.as_mut_ptr() as usize;
        let attr = MrAttr {
            iov: vec![(base, buf.len())],
            access,
            requested_key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            offset: 0,
        };
        // SAFETY: the region owns `buf` and never reallocates, moves out or
        // touches its heap memory while the registration (or any access
        // granted under it) lives: `into_vec` and `Drop` give the buffer up
        // only once the core is gone, else park or leak it.
        match unsafe { domain.mr_reg(&attr) } {
            Ok(mr) => Ok(Region {
                key: mr.key(),
                state: State::Registered(mr),
                len: buf.len(),
                buf,
                base: base as u64,
                virt,
                parked,
            }),
            Err(e) => Err((buf, e)),
        }
    }

    /// The remote key peers name this region by.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never: empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True while peers may access the region.
    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered(_))
    }

    /// The address a peer passes as `remote_addr` to reach byte `offset`:
    /// the virtual address under FI_MR_VIRT_ADDR, else the offset itself.
    pub fn remote_addr(&self, offset: usize) -> u64 {
        if self.virt {
            self.base + offset as u64
        } else {
            offset as u64
        }
    }

    /// Unregisters (if still registered) and reports whether every access
    /// granted before has finished.
    fn retire(&mut self) -> bool {
        let weak = match std::mem::replace(&mut self.state, State::Done) {
            // Revoked at once (the key leaves the domain's map), without
            // waiting: accesses already granted keep the core alive.
            State::Registered(mr) => mr.release(),
            State::Retiring(w) => w,
            State::Done => return true,
        };
        self.state = State::Retiring(weak);
        match &self.state {
            State::Retiring(w) => idle(w),
            _ => true,
        }
    }

    /// Unregisters the region and hands its bytes back, with whatever peers
    /// wrote. If a remote access is still running, the (now unregistered)
    /// region comes back instead: drive the channel and call again.
    pub fn into_vec(mut self) -> std::result::Result<Vec<u8>, Region> {
        if !self.retire() {
            return Err(self);
        }
        self.state = State::Done;
        Ok(std::mem::take(&mut self.buf))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.retire() {
            return;
        }
        if let State::Retiring(w) = &self.state {
            self.parked.park(w.clone(), std::mem::take(&mut self.buf));
        }
    }
}
