//! The address vector (`fi_av_open`): inserts, lookups and the event
//! queue that reports asynchronous inserts, over the core's shared table
//! ([`AvCore`]).

use super::{refuse, CloseResult, DepGuard, EventQueue};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::util::av::AvCore;
use crate::util::eq::{EqCore, EqError, EqEvent};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// An address vector.
pub struct AddressVector {
    pub(super) core: Arc<AvCore>,
    /// The event queue bound for asynchronous inserts (`fi_av_bind`).
    pub(super) eq: Mutex<Option<Arc<EqCore>>>,
    /// The `fid` insert reports named it by (0: none yet).
    pub(super) reported_as: AtomicUsize,
    pub(super) _parent: DepGuard,
}

impl std::fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressVector")
            .field("kind", &self.core.kind())
            .finish_non_exhaustive()
    }
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        let eq = self.eq.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = eq.take() {
            // Insert reports still queued name the closed AV: they go too.
            let fid = self.reported_as.load(Ordering::Acquire);
            if fid != 0 {
                q.forget(fid);
            }
            q.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl AddressVector {
    /// The AV type in force (an FI_AV_UNSPEC request gets the domain's).
    pub fn kind(&self) -> u32 {
        self.core.kind()
    }
    /// Binds the event queue that reports asynchronous inserts
    /// (`fi_av_bind`, for an AV opened with FI_EVENT); the queue cannot
    /// close while bound.
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("av bind: an event queue is already bound"));
        }
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some(eq.core.clone());
        Ok(())
    }
    /// Whether an event queue is bound.
    pub fn has_eq(&self) -> bool {
        self.eq.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
    /// Reports an insert as an AV opened with FI_EVENT does (fi_av(3)):
    /// an error entry (`FI_EINVAL`, `data` the address's index) for each
    /// address `out` holds as `FI_ADDR_NOTAVAIL`, then FI_AV_COMPLETE
    /// with the number inserted. `fid` names the AV and `context` is the
    /// insert's, in every entry. `FI_ENOEQ` when no queue is bound.
    pub fn report_insert(&self, fid: usize, context: usize, out: &[u64]) -> Result<()> {
        let g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        let Some(q) = g.as_ref() else {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "av insert: an AV opened with FI_EVENT needs a bound event queue",
            ));
        };
        self.reported_as.store(fid, Ordering::Release);
        let mut inserted = 0u64;
        for (i, a) in out.iter().enumerate() {
            if *a == FI_ADDR_NOTAVAIL {
                q.push_err(EqError {
                    fid,
                    context,
                    data: i as u64,
                    err: errno::FI_EINVAL,
                    ..Default::default()
                });
            } else {
                inserted += 1;
            }
        }
        q.push(EqEvent {
            event: eq_event::FI_AV_COMPLETE,
            fid,
            context,
            data: inserted,
            ..Default::default()
        });
        Ok(())
    }
    /// Inserts raw addresses (`fi_av_insert`); see [`AvCore::insert`].
    pub fn insert(&self, addrs: &[&[u8]], out: &mut [u64]) -> Result<usize> {
        self.core.insert(addrs, out)
    }
    /// Inserts one address, returning its fi_addr or the reason it was rejected.
    pub fn insert_one(&self, addr: &[u8]) -> Result<u64> {
        let mut out = [0u64];
        self.core.insert(&[addr], &mut out)?;
        if out[0] == FI_ADDR_NOTAVAIL {
            // Re-run the check to report why.
            return Err(self.core_reason(addr));
        }
        Ok(out[0])
    }
    fn core_reason(&self, addr: &[u8]) -> Error {
        Error::inval(format!(
            "address '{}' was rejected",
            self.core.straddr(addr)
        ))
    }
    /// `fi_av_insertsvc`.
    pub fn insertsvc(&self, node: &str, service: &str) -> Result<u64> {
        self.core.insertsvc(node, service)
    }
    /// `fi_av_remove`.
    pub fn remove(&self, fi_addrs: &[u64]) -> Result<()> {
        self.core.remove(fi_addrs)
    }
    /// `fi_av_lookup`.
    pub fn lookup(&self, fi_addr: u64) -> Result<Vec<u8>> {
        self.core.lookup(fi_addr).map(|a| a.to_vec())
    }
    /// `fi_av_straddr`.
    pub fn straddr(&self, addr: &[u8]) -> String {
        self.core.straddr(addr)
    }
    pub(crate) fn core_arc(&self) -> &Arc<AvCore> {
        &self.core
    }
    /// Closes the AV; refused while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "address vector", n),
        }
    }
}
