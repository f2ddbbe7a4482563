//! The domain (`fi_domain`): one provider's resource domain, which opens
//! completion queues, counters, address vectors, memory regions and
//! endpoints, and holds the event queue bound to it.
// `mr_reg` is unsafe: the caller's memory promise goes on to the region map.
#![allow(unsafe_code)]

use super::endpoint::EpState;
use super::{
    no_set, refuse, AddressVector, CloseResult, CompletionQueue, Counter, DepGuard, Endpoint,
    EventQueue, MemoryRegion, SharedTxContext,
};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::info::{Info, RxAttr, TxAttr};
use crate::provider::DomainOps;
use crate::util::atomic::AtomicKind;
use crate::util::av::{AvAttr, AvCore};
use crate::util::cntr::{CntrAttr, CntrCore};
use crate::util::cq::{CqAttr, CqCore};
use crate::util::eq::{EqCore, EqEvent};
use crate::util::mr::{MrAttr, MrMap};
use crate::util::srx::{SrxCore, SrxEp};
use crate::util::stx::StxCore;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A domain: one provider's resource domain.
pub struct Domain {
    pub(super) ops: Arc<dyn DomainOps>,
    pub(super) info: Info,
    pub(super) mr_map: Arc<MrMap>,
    pub(super) deps: Arc<AtomicUsize>,
    /// The event queue bound to the domain (`fi_domain_bind`) and its
    /// flags: the default of its endpoints, shared with them.
    pub(super) default_eq: DefaultEq,
    pub(super) _parent: DepGuard,
}

/// A domain's bound event queue and the flags it was bound with.
pub(super) type DefaultEq = Arc<Mutex<Option<(Arc<EqCore>, u64)>>>;

impl Drop for Domain {
    fn drop(&mut self) {
        let g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((q, _)) = g.as_ref() {
            q.bound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("name", &self.info.domain_attr.name)
            .finish()
    }
}

impl Domain {
    /// The offer this domain was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }
    /// Binds the domain's event queue (`fi_domain_bind`): the default
    /// queue of its endpoints (one bound to none gets it when enabled:
    /// connection events, peer deaths), and with `FI_REG_MR` the queue of
    /// registration events, which whoever registers reports with
    /// [`report_reg`](Self::report_reg) (the C ABI does). The queue cannot
    /// close while bound.
    pub fn bind_eq(&self, eq: &EventQueue, flags: u64) -> Result<()> {
        if flags & !FI_REG_MR != 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("domain bind: flags {flags:#x} (only FI_REG_MR)"),
            ));
        }
        let mut g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(Error::inval("domain bind: an event queue is already bound"));
        }
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        *g = Some((eq.core.clone(), flags));
        Ok(())
    }
    /// After a registration: with an event queue bound with `FI_REG_MR`,
    /// reports it (FI_MR_COMPLETE naming the region's `fid` and the
    /// registration's `context`, fi_domain(3)) and returns the queue, on
    /// which the region [`forget`](EqCore::forget)s its `fid` when it
    /// closes. Registrations complete at once; the event is for
    /// applications that wait for it. (The caller reports: `mr_reg` does
    /// not know the fid a C caller names the region by.)
    pub fn report_reg(&self, fid: usize, context: usize) -> Option<Arc<EqCore>> {
        let g = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some((q, flags)) if flags & FI_REG_MR != 0 => {
                q.push(EqEvent {
                    event: eq_event::FI_MR_COMPLETE,
                    fid,
                    context,
                    ..Default::default()
                });
                Some(q.clone())
            }
            _ => None,
        }
    }
    /// `fi_query_atomic`: the largest element count one operation of this
    /// kind, op and datatype may carry on the domain's endpoints, or
    /// `FI_EOPNOTSUPP` (the provider's answer; no endpoint needed).
    pub fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        self.ops.query_atomic(kind, op, datatype)
    }
    /// Opens a completion queue (`fi_cq_open`); one with FI_WAIT_SET
    /// opens through [`cq_in`](Self::cq_in).
    pub fn cq(&self, attr: &CqAttr) -> Result<CompletionQueue> {
        no_set(attr.wait_obj, "cq", "Domain::cq_in")?;
        self.cq_any(attr)
    }
    pub(super) fn cq_any(&self, attr: &CqAttr) -> Result<CompletionQueue> {
        let mut a = *attr;
        if a.size == 0 {
            a.size = self.info.rx_attr.size.max(self.info.tx_attr.size).max(1);
        }
        Ok(CompletionQueue {
            core: CqCore::new(&a)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a counter (`fi_cntr_open`); one with FI_WAIT_SET opens
    /// through [`cntr_in`](Self::cntr_in).
    pub fn cntr(&self, attr: &CntrAttr) -> Result<Counter> {
        no_set(attr.wait_obj, "cntr", "Domain::cntr_in")?;
        self.cntr_any(attr)
    }
    pub(super) fn cntr_any(&self, attr: &CntrAttr) -> Result<Counter> {
        Ok(Counter {
            core: CntrCore::new(attr)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens an address vector (`fi_av_open`).
    pub fn av(&self, attr: &AvAttr) -> Result<AddressVector> {
        let want = self.info.domain_attr.av_type;
        if attr.av_type != av_type::FI_AV_UNSPEC
            && want != av_type::FI_AV_UNSPEC
            && attr.av_type != want
        {
            return Err(Error::inval(format!(
                "av_attr.type {} differs from the domain's av_type {want}",
                attr.av_type
            )));
        }
        Ok(AddressVector {
            core: AvCore::new(attr, self.ops.addr_ops())?,
            eq: Mutex::new(None),
            reported_as: AtomicUsize::new(0),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Registers memory (`fi_mr_reg` / `fi_mr_regv`).
    ///
    /// # Safety
    /// The ranges must stay valid while the region is registered and used.
    pub unsafe fn mr_reg(&self, attr: &MrAttr) -> Result<MemoryRegion> {
        let limit = self.info.domain_attr.mr_iov_limit.max(1);
        if attr.iov.len() > limit {
            return Err(Error::inval(format!(
                "mr: {} ranges exceed mr_iov_limit {limit}",
                attr.iov.len()
            )));
        }
        let prov_key = self.info.domain_attr.mr_mode & mr_mode::FI_MR_PROV_KEY != 0;
        Ok(MemoryRegion {
            // SAFETY: this function's contract (the ranges stay valid while
            // registered and used) is register's.
            core: unsafe { self.mr_map.register(attr, prov_key) }?,
            wait_on_drop: true,
            _parent: DepGuard::new(&self.deps),
        })
    }
    pub(crate) fn mr_map_arc(&self) -> &Arc<MrMap> {
        &self.mr_map
    }
    /// Opens an endpoint (`fi_endpoint`).
    pub fn endpoint(&self, info: &Info) -> Result<Endpoint> {
        self.endpoint_with_context(info, 0)
    }
    /// Opens an endpoint whose `context` is reported as `fid` in its EQ events.
    pub fn endpoint_with_context(&self, info: &Info, context: usize) -> Result<Endpoint> {
        let info = &info.in_force();
        let ops = self.ops.endpoint(info)?;
        let mut state = EpState::default();
        state.b.fid = context;
        // Opened for collectives: the core's collective side goes between
        // the endpoint and its provider (tag guard, completion relays).
        let (ops, coll) = if info.caps & FI_COLLECTIVE != 0 && crate::coll::offer::supports(info) {
            let (guarded, side) = crate::coll::relay::CollSide::new(ops);
            (guarded, Some(Box::new(side)))
        } else {
            (ops, None)
        };
        Ok(Endpoint {
            ops,
            coll,
            info: info.clone(),
            mr_map: self.mr_map.clone(),
            state: Mutex::new(state),
            default_eq: self.default_eq.clone(),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a shared receive context (`fi_srx_context`) with the receive
    /// attributes `attr` (None: the domain's): an endpoint handle that
    /// takes receives (and cancels) for every endpoint bound to it
    /// ([`Endpoint::bind_srx`]); see [`crate::util::srx`]. `FI_ENOSYS`
    /// where the provider offers none (`max_ep_srx_ctx` 0).
    pub fn srx_context(&self, attr: Option<&RxAttr>) -> Result<Endpoint> {
        if self.info.domain_attr.max_ep_srx_ctx == 0 {
            return Err(Error::nosys(format!(
                "{}: shared receive contexts are not supported",
                self.info.provider()
            )));
        }
        let mut info = self.info.in_force();
        if let Some(a) = attr {
            info.rx_attr = a.clone();
        }
        info.ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT;
        let ops = Arc::new(SrxEp {
            core: SrxCore::new(info.rx_attr.size),
        });
        Ok(Endpoint {
            ops,
            coll: None,
            info,
            mr_map: self.mr_map.clone(),
            state: Mutex::new(EpState::default()),
            default_eq: Arc::new(Mutex::new(None)),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a shared transmit context (`fi_stx_context`) with the
    /// transmit attributes `attr` (None: the domain's); see
    /// [`crate::util::stx`]. `FI_ENOSYS` where the provider offers none
    /// (`max_ep_stx_ctx` 0).
    pub fn stx_context(&self, attr: Option<&TxAttr>) -> Result<SharedTxContext> {
        if self.info.domain_attr.max_ep_stx_ctx == 0 {
            return Err(Error::nosys(format!(
                "{}: shared transmit contexts are not supported",
                self.info.provider()
            )));
        }
        let a = attr.cloned().unwrap_or_else(|| self.info.tx_attr.clone());
        Ok(SharedTxContext {
            core: StxCore::new(a),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Closes the domain; refused while endpoints, queues, AVs, counters or regions are open.
    pub fn close(self) -> CloseResult<Self> {
        match self.deps.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "domain", n),
        }
    }
}
