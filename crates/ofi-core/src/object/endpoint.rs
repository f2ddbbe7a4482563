//! The endpoint (`fi_endpoint`): its bindings to queues, counters, the AV
//! and the EQ, enabling, connection management and options. Its data
//! calls live in `msg`, `rma`, `atomic` and `triggered`.

use super::domain::DefaultEq;
use super::{AddressVector, CloseResult, CompletionQueue, Counter, DepGuard, EventQueue};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::info::Info;
use crate::info::TxAttr;
use crate::provider::{EndpointOps, EpBindings, Progress};
use crate::util::cntr::CntrCore;
use crate::util::cq::CqCore;
use crate::util::mr::MrMap;
use crate::util::srx::SrxBinding;
use crate::util::stx::StxCore;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// An endpoint's bindings, and whether it is enabled.
#[derive(Default)]
pub(super) struct EpState {
    pub(super) b: EpBindings,
    pub(super) enabled: bool,
    /// The shared transmit context it is bound to (the core's alone:
    /// providers see nothing of it, see [`crate::util::stx`]).
    pub(super) stx: Option<Arc<StxCore>>,
}

/// A shared transmit context (`fi_stx_context`): endpoints bound to it
/// ([`Endpoint::bind_stx`]) keep within its transmit attributes; see
/// [`crate::util::stx`].
#[derive(Debug)]
pub struct SharedTxContext {
    pub(super) core: Arc<StxCore>,
    pub(super) _parent: DepGuard,
}

impl SharedTxContext {
    /// Its transmit attributes.
    pub fn attr(&self) -> &TxAttr {
        self.core.attr()
    }
    /// Closes it; refused (`FI_EBUSY`) while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        match self.core.bound.load(Ordering::Acquire) {
            0 => Ok(()),
            n => super::refuse(self, "shared transmit context", n),
        }
    }
}

/// An endpoint.
pub struct Endpoint {
    pub(super) ops: Arc<dyn EndpointOps>,
    pub(super) info: Info,
    pub(super) mr_map: Arc<MrMap>,
    pub(super) state: Mutex<EpState>,
    /// The domain's event queue, taken at enable when none is bound.
    pub(super) default_eq: DefaultEq,
    /// Opened with FI_COLLECTIVE: the collective side (`ops` is then the
    /// provider's endpoint behind the tag guard, [`crate::coll`]).
    pub(super) coll: Option<Box<crate::coll::relay::CollSide>>,
    pub(super) _parent: DepGuard,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.info.provider())
            .finish()
    }
}

impl Endpoint {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, EpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn not_enabled(&self, what: &str) -> Result<std::sync::MutexGuard<'_, EpState>> {
        let s = self.state();
        if s.enabled {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("{what}: the endpoint is already enabled"),
            ));
        }
        Ok(s)
    }

    /// Binds a completion queue (`fi_ep_bind`) with FI_TRANSMIT and/or
    /// FI_RECV, optionally FI_SELECTIVE_COMPLETION.
    pub fn bind_cq(&self, cq: &CompletionQueue, flags: u64) -> Result<()> {
        let known = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION;
        if flags & !known != 0 || flags & (FI_TRANSMIT | FI_RECV) == 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("bind cq: flags {flags:#x} must be FI_TRANSMIT and/or FI_RECV"),
            ));
        }
        let mut s = self.not_enabled("bind cq")?;
        let already = [&s.b.tx_cq, &s.b.rx_cq]
            .into_iter()
            .flatten()
            .any(|c| Arc::ptr_eq(c, &cq.core));
        let sel = flags & FI_SELECTIVE_COMPLETION != 0;
        if flags & FI_TRANSMIT != 0 {
            if s.b.tx_cq.is_some() {
                return Err(Error::inval("bind cq: a transmit CQ is already bound"));
            }
            s.b.tx_cq = Some(cq.core.clone());
            s.b.tx_selective = sel;
        }
        if flags & FI_RECV != 0 {
            if s.b.rx_cq.is_some() {
                return Err(Error::inval("bind cq: a receive CQ is already bound"));
            }
            s.b.rx_cq = Some(cq.core.clone());
            s.b.rx_selective = sel;
        }
        if !already {
            cq.core.bound.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Binds an address vector.
    pub fn bind_av(&self, av: &AddressVector) -> Result<()> {
        let mut s = self.not_enabled("bind av")?;
        if s.b.av.is_some() {
            return Err(Error::inval("bind av: an address vector is already bound"));
        }
        s.b.av = Some(av.core.clone());
        av.core.bound.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Binds a counter for FI_SEND / FI_RECV / FI_READ / FI_WRITE events.
    pub fn bind_cntr(&self, cntr: &Counter, flags: u64) -> Result<()> {
        let known = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        if flags & !known != 0 || flags == 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!("bind cntr: flags {flags:#x} name no counted event"),
            ));
        }
        let mut s = self.not_enabled("bind cntr")?;
        let already =
            s.b.cntrs()
                .into_iter()
                .flatten()
                .any(|c| Arc::ptr_eq(c, &cntr.core));
        let c = Some(cntr.core.clone());
        let b = &mut s.b;
        for (bit, slot) in [
            (FI_SEND, &mut b.send_cntr),
            (FI_RECV, &mut b.recv_cntr),
            (FI_READ, &mut b.read_cntr),
            (FI_WRITE, &mut b.write_cntr),
            (FI_REMOTE_READ, &mut b.rem_read_cntr),
            (FI_REMOTE_WRITE, &mut b.rem_write_cntr),
        ] {
            if flags & bit != 0 {
                *slot = c.clone();
            }
        }
        if !already {
            cntr.core.bound.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Binds an event queue for connection events (`fi_ep_bind` with an EQ).
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut s = self.not_enabled("bind eq")?;
        if s.b.eq.is_some() {
            return Err(Error::inval("bind eq: an event queue is already bound"));
        }
        s.b.eq = Some(eq.core.clone());
        eq.core.bound.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Binds a shared receive context (`fi_ep_bind` with the handle
    /// [`Domain::srx_context`](super::Domain::srx_context) opened): its
    /// receives serve messages none of this endpoint's own takes, and
    /// complete on this endpoint's receive CQ and counter. `FI_EINVAL`
    /// for a handle that is no shared receive context, or a second one;
    /// `FI_ENOSYS` where the provider offers none.
    pub fn bind_srx(&self, srx: &Endpoint) -> Result<()> {
        let Some(core) = srx.ops.as_srx() else {
            return Err(Error::inval("bind srx: not a shared receive context"));
        };
        if self.ops.as_srx().is_some() {
            return Err(Error::inval(
                "bind srx: a shared receive context binds to no other",
            ));
        }
        if self.info.domain_attr.max_ep_srx_ctx == 0 {
            return Err(Error::nosys(format!(
                "bind srx: {} endpoints take no shared receive context",
                self.info.provider()
            )));
        }
        let mut s = self.not_enabled("bind srx")?;
        if s.b.srx.is_some() {
            return Err(Error::inval(
                "bind srx: a shared receive context is already bound",
            ));
        }
        core.bound.fetch_add(1, Ordering::AcqRel);
        // The member number comes at enable, when the endpoint joins.
        s.b.srx = Some(SrxBinding {
            srx: core.clone(),
            member: 0,
            seen: 0,
            held: 0,
        });
        Ok(())
    }

    /// Binds a shared transmit context (`fi_ep_bind` with an stx): the
    /// endpoint's transmit attributes must be within the context's
    /// (`FI_EINVAL` otherwise, or for a second context); `FI_ENOSYS`
    /// where the provider offers none.
    pub fn bind_stx(&self, stx: &SharedTxContext) -> Result<()> {
        if self.info.domain_attr.max_ep_stx_ctx == 0 {
            return Err(Error::nosys(format!(
                "bind stx: {} endpoints take no shared transmit context",
                self.info.provider()
            )));
        }
        let mut s = self.not_enabled("bind stx")?;
        if s.stx.is_some() {
            return Err(Error::inval(
                "bind stx: a shared transmit context is already bound",
            ));
        }
        stx.core.admits(&self.info.tx_attr)?;
        stx.core.bound.fetch_add(1, Ordering::AcqRel);
        s.stx = Some(stx.core.clone());
        Ok(())
    }

    pub(super) fn enabled_for(&self, what: &str) -> Result<()> {
        if !self.state().enabled {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("{what}: enable the endpoint first"),
            ));
        }
        Ok(())
    }

    /// Whether connection events have a queue: the endpoint's own, or the
    /// domain's it takes when enabled.
    fn has_eq(&self) -> bool {
        let s = self.state();
        s.b.eq.is_some()
            || (!s.enabled
                && self
                    .default_eq
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some())
    }

    /// Enables the endpoint if it is not yet (`fi_connect` and `fi_accept`
    /// do, fi_endpoint(3)); an endpoint another thread enabled meanwhile
    /// is fine.
    fn enable_implicitly(&self) -> Result<()> {
        if self.state().enabled {
            return Ok(());
        }
        match self.enable() {
            Err(_) if self.state().enabled => Ok(()),
            r => r,
        }
    }

    /// Connects to a listening peer with private data (`fi_connect`); the
    /// outcome arrives on the bound EQ as FI_CONNECTED or an error entry.
    /// An endpoint not yet enabled is enabled first.
    pub fn connect(&self, addr: &[u8], param: &[u8]) -> Result<()> {
        if !self.has_eq() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "connect: no event queue is bound",
            ));
        }
        self.enable_implicitly()?;
        self.ops.connect(addr, param)
    }

    /// Accepts the connection request this endpoint was opened for
    /// (`fi_accept`), enabling the endpoint first if it is not yet.
    pub fn accept(&self, param: &[u8]) -> Result<()> {
        if !self.has_eq() {
            return Err(Error::new(
                errno::FI_ENOEQ,
                "accept: no event queue is bound",
            ));
        }
        self.enable_implicitly()?;
        self.ops.accept(param)
    }

    /// Shuts the connection down (`fi_shutdown`).
    pub fn shutdown(&self, flags: u64) -> Result<()> {
        self.ops.shutdown(flags)
    }

    /// The connected peer's address (`fi_getpeer`).
    pub fn getpeer(&self) -> Result<Vec<u8>> {
        self.ops.getpeer()
    }

    /// Enables the endpoint (`fi_enable`). An RDM endpoint needs an AV
    /// (`FI_ENOAV`); transfers need a CQ or counter (`FI_ENOCQ`).
    pub fn enable(&self) -> Result<()> {
        let mut s = self.not_enabled("enable")?;
        if self.info.ep_attr.ep_type == ep_type::FI_EP_RDM && s.b.av.is_none() {
            return Err(Error::new(
                errno::FI_ENOAV,
                "enable: an RDM endpoint needs a bound address vector",
            ));
        }
        if s.b.tx_cq.is_none()
            && s.b.send_cntr.is_none()
            && s.b.rx_cq.is_none()
            && s.b.recv_cntr.is_none()
            && s.b.read_cntr.is_none()
            && s.b.write_cntr.is_none()
            && s.b.rem_read_cntr.is_none()
            && s.b.rem_write_cntr.is_none()
        {
            return Err(Error::new(
                errno::FI_ENOCQ,
                "enable: no completion queue or counter is bound",
            ));
        }
        s.b.mr_map = Some(self.mr_map.clone());
        s.b.info = self.info.clone();
        let b = &mut s.b;
        if let Some(x) = b.srx.as_mut() {
            if self.info.ep_attr.ep_type != ep_type::FI_EP_MSG {
                if let Some(av) = &b.av {
                    x.srx.check_av(av)?;
                }
            }
            x.member = x.srx.join(Arc::downgrade(&self.ops), b.rx_cq.clone());
        }
        // No queue of its own: the domain's, if it has one.
        let defaulted = s.b.eq.is_none();
        if defaulted {
            let d = self.default_eq.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((q, _)) = d.as_ref() {
                q.bound.fetch_add(1, Ordering::AcqRel);
                s.b.eq = Some(q.clone());
            }
        }
        // Opened for collectives: the provider completes into relays.
        let pb = match &self.coll {
            Some(c) => c.bindings(&s.b),
            None => Ok(s.b.clone()),
        };
        if let Err(e) = pb.and_then(|pb| self.ops.enable(pb)) {
            if let Some(x) = &s.b.srx {
                x.srx.leave(x.member);
            }
            if defaulted {
                if let Some(q) = s.b.eq.take() {
                    q.bound.fetch_sub(1, Ordering::AcqRel);
                }
            }
            return Err(e);
        }
        let prog: Arc<dyn Progress> = self.ops.clone();
        for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
            cq.attach(prog.clone())?;
        }
        for c in s.b.cntrs().into_iter().flatten() {
            c.attach(prog.clone())?;
        }
        if let Some(eq) = &s.b.eq {
            eq.attach(prog.clone())?;
        }
        if let Some(c) = &self.coll {
            c.attach(s.b.eq.as_ref())?;
        }
        s.enabled = true;
        Ok(())
    }

    /// The endpoint's address (`fi_getname`).
    pub fn getname(&self) -> Result<Vec<u8>> {
        self.ops.getname()
    }

    /// Sets the endpoint's own address (`fi_setname`), in the offer's
    /// address format; `getname` then returns it. Only before `enable`
    /// (`FI_EOPBADSTATE` after).
    pub fn setname(&self, addr: &[u8]) -> Result<()> {
        let _s = self.not_enabled("setname")?;
        self.ops.setname(addr)
    }

    /// The offer this endpoint was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// Sets an option (`fi_setopt`, level FI_OPT_ENDPOINT).
    pub fn setopt(&self, name: i32, value: usize) -> Result<()> {
        self.ops.setopt(name, value)
    }

    /// Reads an option (`fi_getopt`).
    pub fn getopt(&self, name: i32) -> Result<usize> {
        self.ops.getopt(name)
    }

    /// Cancels a posted receive (`fi_cancel`); it completes with FI_ECANCELED.
    pub fn cancel(&self, context: usize) -> Result<()> {
        self.ops.cancel(context)
    }

    /// Drives progress directly (what CQ reads do).
    pub fn progress(&self) {
        self.ops.progress()
    }

    /// Refuses (`FI_EOPNOTSUPP`) a call that needs caps the endpoint was
    /// not opened with.
    pub(super) fn require_caps(&self, caps: u64, what: &str) -> Result<()> {
        if self.info.caps & caps != caps {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                format!(
                    "{what}: the endpoint was not opened with {}",
                    bits_to_string(CAP_NAMES, caps)
                ),
            ));
        }
        Ok(())
    }

    /// FI_COMMIT_COMPLETE (data durable at the target) is honoured by
    /// endpoints whose caps hold FI_RMA_PMEM (the application asked for it,
    /// or named no caps); the target still refuses regions whose memory it
    /// cannot make durable (an error completion, memory untouched).
    pub(super) fn check_commit(&self, flags: u64) -> Result<()> {
        if flags & FI_COMMIT_COMPLETE != 0 && self.info.caps & FI_RMA_PMEM == 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "FI_COMMIT_COMPLETE: this endpoint has no FI_RMA_PMEM (not offered, or not asked for in the hints' caps)",
            ));
        }
        Ok(())
    }

    /// The provider's endpoint (without the collectives' tag guard).
    pub(crate) fn ops_arc(&self) -> &Arc<dyn EndpointOps> {
        self.coll.as_ref().map_or(&self.ops, |c| &c.raw)
    }

    /// Closes the endpoint, releasing its bindings. A shared receive
    /// context is refused (`FI_EBUSY`) while endpoints are bound to it.
    pub fn close(self) -> CloseResult<Self> {
        if let Some(n) = self
            .ops
            .as_srx()
            .map(|c| c.bound.load(Ordering::Acquire))
            .filter(|&n| n > 0)
        {
            return super::refuse(self, "shared receive context", n);
        }
        Ok(())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The collective layer leaves the queues and cancels its receives
        // before the provider's endpoint closes.
        self.close_collectives();
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let prog: Arc<dyn Progress> = self.ops.clone();
        if s.enabled {
            for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
                cq.detach(&prog);
            }
            for c in s.b.cntrs().into_iter().flatten() {
                c.detach(&prog);
            }
            if let Some(eq) = &s.b.eq {
                eq.detach(&prog);
            }
        }
        self.ops.close();
        if let Some(c) = &self.coll {
            c.detach();
        }
        if let Some(t) = &s.stx {
            t.bound.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(x) = &s.b.srx {
            if s.enabled {
                x.srx.leave(x.member);
            }
            x.srx.bound.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(eq) = &s.b.eq {
            // Events naming the closed endpoint go with it (a context of 0
            // names nothing apart: others may share it).
            if s.b.fid != 0 {
                eq.forget(s.b.fid);
            }
            eq.bound.fetch_sub(1, Ordering::AcqRel);
        }
        // Release the bound counts taken at bind time (a CQ bound for both
        // directions was counted once).
        let mut seen: Vec<*const CqCore> = Vec::new();
        for cq in [&s.b.tx_cq, &s.b.rx_cq].into_iter().flatten() {
            let p = Arc::as_ptr(cq);
            if !seen.contains(&p) {
                seen.push(p);
                cq.bound.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if let Some(av) = &s.b.av {
            av.bound.fetch_sub(1, Ordering::AcqRel);
        }
        let mut seen_c: Vec<*const CntrCore> = Vec::new();
        for c in s.b.cntrs().into_iter().flatten() {
            let p = Arc::as_ptr(c);
            if !seen_c.contains(&p) {
                seen_c.push(p);
                c.bound.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
