//! The memory region (`fi_mr_reg`): its key and descriptor, and closing it
//! safely while remote accesses may still run on its memory.

use super::{CloseResult, Counter, DepGuard};
use crate::error::{Error, Result};
use crate::util::mr::MrCore;
use std::sync::Arc;
use std::time::Duration;

/// A registered memory region.
///
/// Closing it ([`close`](Self::close) or dropping it) revokes its key at
/// once and then waits for remote accesses already running on its memory
/// (a provider thread copying a peer's WRITE into it, a READ answer being
/// sent from it): `close` up to `FI_MR_CLOSE_MS` (then `FI_EBUSY`, the
/// region handed back, still revoked: retry), drop up to the same bound,
/// after which it logs an error and returns: use `close` for a guarantee.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(super) core: Arc<MrCore>,
    /// Drop waits for running accesses (not after `release`).
    pub(super) wait_on_drop: bool,
    pub(super) _parent: DepGuard,
}

/// How long closing a region waits for running accesses (`FI_MR_CLOSE_MS`).
fn mr_close_wait() -> Duration {
    let t = crate::config::core_tunable("mr_close_ms");
    Duration::from_millis(t.get_size().unwrap_or(5000) as u64)
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.core.revoke();
        if self.wait_on_drop {
            let limit = mr_close_wait();
            if !crate::util::mr::wait_idle(&self.core, 1, Some(limit)) {
                tracing::error!(
                    key = self.core.key,
                    "memory region dropped while {} remote access(es) still run on it after {} ms; \
                     they may still touch its memory (close it to get FI_EBUSY instead)",
                    Arc::strong_count(&self.core) - 1,
                    limit.as_millis()
                );
            }
        }
        // Accesses that ran until now were counted; the counter may close.
        self.core.unbind_cntr();
    }
}

impl MemoryRegion {
    /// Closes the region (`fi_close`): revokes its key, then waits up to
    /// `FI_MR_CLOSE_MS` for the remote accesses still running on it. On
    /// `FI_EBUSY` the (revoked) region comes back: drive progress and retry.
    /// After `Ok` no provider touches the memory any more.
    pub fn close(self) -> CloseResult<Self> {
        self.core.revoke();
        let limit = mr_close_wait();
        if crate::util::mr::wait_idle(&self.core, 1, Some(limit)) {
            return Ok(());
        }
        let n = Arc::strong_count(&self.core) - 1;
        let e = Error::busy(format!(
            "memory region {:#x}: {n} remote access(es) still running after {} ms \
             (the key is revoked; retry the close)",
            self.core.key,
            limit.as_millis()
        ));
        Err(Box::new((self, e)))
    }
    /// Revokes the region without waiting: no new remote access starts;
    /// those already running hold the returned region core until they end
    /// (idle once it has no strong count). The memory must stay valid until
    /// then (the registration's promise).
    pub fn release(mut self) -> std::sync::Weak<MrCore> {
        self.core.revoke();
        self.wait_on_drop = false;
        Arc::downgrade(&self.core)
    }
    /// The remote key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.core.key
    }
    /// The local descriptor (`fi_mr_desc`).
    pub fn desc(&self) -> u64 {
        self.core.desc()
    }
    pub(crate) fn core_arc(&self) -> &Arc<MrCore> {
        &self.core
    }
    /// Binds a counter that counts remote reads and/or writes of this region
    /// (`fi_mr_bind` with FI_REMOTE_READ / FI_REMOTE_WRITE; needs FI_RMA_EVENT).
    pub fn bind_cntr(&self, cntr: &Counter, flags: u64) -> Result<()> {
        self.core.bind_cntr(cntr.core.clone(), flags)
    }
}
