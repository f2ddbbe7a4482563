//! The passive endpoint (`fi_passive_ep`): listens and reports connection
//! requests as FI_CONNREQ events on its event queue.

use super::{CloseResult, DepGuard, EventQueue};
use crate::error::{errno, Error, Result};
use crate::info::ConnHandle;
use crate::provider::{PassiveEndpointOps, Progress};
use crate::util::eq::EqCore;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A passive endpoint: listens for connection requests.
pub struct PassiveEndpoint {
    pub(super) ops: Arc<dyn PassiveEndpointOps>,
    pub(super) context: usize,
    /// `listen` succeeded (the address can no longer change).
    pub(super) listening: std::sync::atomic::AtomicBool,
    /// An active endpoint took its address ([`release`](Self::release)).
    pub(super) released: std::sync::atomic::AtomicBool,
    pub(super) eq: Mutex<Option<Arc<EqCore>>>,
    pub(super) _parent: DepGuard,
}

impl std::fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassiveEndpoint")
            .field("context", &self.context)
            .finish()
    }
}

impl PassiveEndpoint {
    /// Binds the event queue that receives FI_CONNREQ events.
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("bind eq: an event queue is already bound"));
        }
        self.ops.bind_eq(eq.core.clone(), self.context)?;
        eq.core.attach(self.ops.clone())?;
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some(eq.core.clone());
        Ok(())
    }
    /// Starts listening (`fi_listen`); needs a bound event queue.
    pub fn listen(&self) -> Result<()> {
        if self.eq.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "listen: no event queue is bound",
            ));
        }
        self.check_bound("listen")?;
        self.ops.listen()?;
        self.listening.store(true, Ordering::Release);
        Ok(())
    }
    /// The listening address (`fi_getname`).
    pub fn getname(&self) -> Result<Vec<u8>> {
        self.check_bound("getname")?;
        self.ops.getname()
    }
    /// Gives the address up to an active endpoint opened with this passive
    /// endpoint as its info's `handle` (fi_endpoint(3): the active endpoint
    /// acquires the passive endpoint's properties; the passive endpoint is
    /// then bound to nothing and must no longer be used). Returns the
    /// address, the one `getname` gave; the provider stops listening.
    /// `getname`, `setname` and `listen` are `FI_EOPBADSTATE` afterwards.
    pub fn release(&self) -> Result<Vec<u8>> {
        self.check_bound("release")?;
        let name = self.ops.getname()?;
        self.released.store(true, Ordering::Release);
        self.ops.release();
        Ok(name)
    }
    fn check_bound(&self, what: &str) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("{what}: an active endpoint took this passive endpoint's address"),
            ));
        }
        Ok(())
    }
    /// Sets the address to listen on (`fi_setname`), in the offer's
    /// address format; `getname` then returns it. Only before `listen`
    /// (`FI_EOPBADSTATE` after).
    pub fn setname(&self, addr: &[u8]) -> Result<()> {
        self.check_bound("setname")?;
        if self.listening.load(Ordering::Acquire) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "setname: the passive endpoint is already listening",
            ));
        }
        self.ops.setname(addr)
    }
    /// Reads an option (`fi_getopt`, level FI_OPT_ENDPOINT):
    /// FI_OPT_CM_DATA_SIZE is the largest private data a connection
    /// request to this endpoint may carry.
    pub fn getopt(&self, name: i32) -> Result<usize> {
        self.ops.getopt(name)
    }
    /// Rejects a connection request with private data (`fi_reject`).
    pub fn reject(&self, handle: &ConnHandle, param: &[u8]) -> Result<()> {
        self.ops.reject(handle, param)
    }
    /// Closes the passive endpoint.
    pub fn close(self) -> CloseResult<Self> {
        Ok(())
    }
}

impl Drop for PassiveEndpoint {
    fn drop(&mut self) {
        let eq = self.eq.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(eq) = &eq {
            let p: Arc<dyn Progress> = self.ops.clone();
            eq.detach(&p);
        }
        self.ops.close();
        if let Some(eq) = eq {
            // Its unread connection requests go with it (unless its
            // context, 0, names nothing apart).
            if self.context != 0 {
                eq.forget(self.context);
            }
            eq.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
