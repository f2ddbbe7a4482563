//! Endpoints (`fi_endpoint`, `struct fid_ep`): binding, enabling, default
//! operation flags, options, cancel, and connection management (shared
//! with passive endpoints). The data-transfer tables live in [`msg`]
//! (messages and tagged messages), [`rma`], [`atomic`] and [`coll`]
//! (collectives); `args` holds the argument forms they share.

mod args;
pub mod atomic;
pub mod coll;
pub mod msg;
pub mod rma;

use super::pep::{connreq, free_connreq, pep, ConnReqObj};
use super::{
    ffi, get, give_addr, publish, unpublish, CObj, EINVAL, EINVAL_S, ENOSYS, ENOSYS_S, PANIC,
    PANIC_S,
};
use crate::abi::*;
use crate::guard;
use ofi_core::consts::{FI_ADDR_UNSPEC, FI_DIRECTED_RECV, FI_RECV, FI_TRANSMIT};
use ofi_core::error::errno::*;
use ofi_core::Endpoint;
use std::sync::atomic::{AtomicU64, Ordering};

/// An endpoint as C sees it: `struct fid_ep`, then the raw-layer endpoint.
#[repr(C)]
pub struct EpObj {
    c: fid_ep,
    pub(crate) core: Option<Endpoint>,
    /// Default flags of transmit calls without a flags argument.
    tx_flags: AtomicU64,
    /// Default flags of receive calls without a flags argument.
    rx_flags: AtomicU64,
    /// The connection request this endpoint was opened for, freed with it.
    connreq: *mut ConnReqObj,
    /// Opened with FI_DIRECTED_RECV: receives honour their source address
    /// (without it, fi_endpoint(3) says the source is ignored).
    directed: bool,
}

// SAFETY: repr(C), first field fid_ep whose first field is fid.
unsafe impl CObj for EpObj {
    const CLASS: usize = class::FI_CLASS_EP;
    fn base_ops() -> *const fi_ops {
        &EP_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        super::shut_core(&mut self.core, Endpoint::close)?;
        if !self.connreq.is_null() {
            // SAFETY: the request was made by connreq_info and is owned here.
            unsafe { free_connreq(self.connreq) };
            self.connreq = std::ptr::null_mut();
        }
        Ok(())
    }
}

impl EpObj {
    /// Default transmit flags.
    #[inline]
    pub(crate) fn tx_flags(&self) -> u64 {
        self.tx_flags.load(Ordering::Relaxed)
    }
    /// Default receive flags.
    #[inline]
    pub(crate) fn rx_flags(&self) -> u64 {
        self.rx_flags.load(Ordering::Relaxed)
    }
    /// The source a receive accepts: as given with FI_DIRECTED_RECV, any
    /// (`FI_ADDR_UNSPEC`) without it.
    #[inline]
    pub(crate) fn recv_src(&self, src: fi_addr_t) -> fi_addr_t {
        if self.directed {
            src
        } else {
            FI_ADDR_UNSPEC
        }
    }
}

/// The endpoint behind a `struct fid_ep *`, with its raw-layer endpoint.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline]
pub(crate) unsafe fn ep<'a>(p: *mut fid_ep) -> Option<(&'a EpObj, &'a Endpoint)> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract), all that `get` asks.
    let o = unsafe { get::<EpObj>(p.cast::<fid>()) }?;
    Some((o, o.core.as_ref()?))
}

/// [`ep`] for a shared receive context (its own tables' receive and
/// cancel slots call this): its endpoint part and raw-layer handle.
///
/// # Safety
/// `p` is NULL or a readable fid.
pub(crate) unsafe fn srx_ep<'a>(p: *mut fid_ep) -> Option<(&'a EpObj, &'a Endpoint)> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract).
    let o = unsafe { srx_obj(p.cast::<fid>()) }?;
    Some((o, o.core.as_ref()?))
}

/// A shared receive context as C sees it (`fi_srx_context`): a
/// `struct fid_ep` of class FI_CLASS_SRX_CTX whose receive calls post to
/// the context and whose `fi_cancel` cancels there (its own tables: the
/// endpoints' with those slots resolving the context; every other call
/// finds no endpoint, -FI_EINVAL).
#[repr(C)]
pub struct SrxObj {
    ep: EpObj,
}

// SAFETY: repr(C), first field EpObj whose first field is fid_ep, whose
// first field is fid.
unsafe impl CObj for SrxObj {
    const CLASS: usize = class::FI_CLASS_SRX_CTX;
    fn base_ops() -> *const fi_ops {
        &SRX_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        super::shut_core(&mut self.ep.core, Endpoint::close)
    }
}

static SRX_FI_OPS: fi_ops = super::fid_ops::<SrxObj>(super::bind_nosys, super::control_nosys);

/// The endpoint part of a shared receive context's fid.
///
/// # Safety
/// `p` is NULL or a readable fid.
#[inline(never)]
unsafe fn srx_obj<'a>(p: *const fid) -> Option<&'a EpObj> {
    // SAFETY: `p` is NULL or a readable fid (this function's contract).
    unsafe { get::<SrxObj>(p) }.map(|o| &o.ep)
}

/// A shared transmit context as C sees it (`fi_stx_context`): a
/// `struct fid_stx`, then the raw-layer context. Endpoints bind it; it
/// takes no calls of its own.
#[repr(C)]
pub struct StxObj {
    c: fid_stx,
    core: Option<ofi_core::object::SharedTxContext>,
}

// SAFETY: repr(C), first field fid_stx whose first field is fid.
unsafe impl CObj for StxObj {
    const CLASS: usize = class::FI_CLASS_STX_CTX;
    fn base_ops() -> *const fi_ops {
        &STX_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        super::shut_core(&mut self.core, ofi_core::object::SharedTxContext::close)
    }
}

static STX_FI_OPS: fi_ops = super::fid_ops::<StxObj>(super::bind_nosys, super::control_nosys);

/// `fi_stx_context`: opens a shared transmit context of a domain.
///
/// # Safety
/// Arguments as `fi_stx_context(3)`: `attr` NULL or a valid `fi_tx_attr`,
/// `out` writable.
pub(crate) unsafe fn open_stx(
    d: *mut fid_domain,
    attr: *mut fi_tx_attr,
    out: *mut *mut fid_stx,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dom) = (unsafe { super::domain::domain(d) }) else {
        return EINVAL;
    };
    let Some(dcore) = dom.core() else {
        return EINVAL;
    };
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is NULL or a valid fi_tx_attr (this function's contract).
    let a = (!attr.is_null()).then(|| unsafe { crate::info::tx_attr_from_c(attr) });
    let core = match dcore.stx_context(a.as_ref()) {
        Ok(c) => c,
        Err(e) => return guard::err(&e),
    };
    let p = publish(StxObj {
        c: fid_stx {
            fid: fid {
                fclass: class::FI_CLASS_STX_CTX,
                context,
                ops: &STX_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: ep_ops_table(),
        },
        core: Some(core),
    });
    // SAFETY: out is non-null and writable (checked above, and the contract).
    unsafe { *out = p.cast::<fid_stx>() };
    0
}

/// `fi_srx_context`: opens a shared receive context of a domain.
///
/// # Safety
/// Arguments as `fi_srx_context(3)`: `attr` NULL or a valid `fi_rx_attr`,
/// `out` writable.
pub(crate) unsafe fn open_srx(
    d: *mut fid_domain,
    attr: *mut fi_rx_attr,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dom) = (unsafe { super::domain::domain(d) }) else {
        return EINVAL;
    };
    let Some(dcore) = dom.core() else {
        return EINVAL;
    };
    if out.is_null() {
        return EINVAL;
    }
    // SAFETY: attr is NULL or a valid fi_rx_attr (this function's contract).
    let a = (!attr.is_null()).then(|| unsafe { crate::info::rx_attr_from_c(attr) });
    let core = match dcore.srx_context(a.as_ref()) {
        Ok(c) => c,
        Err(e) => return guard::err(&e),
    };
    let caps = core.info().rx_attr.caps | core.info().caps;
    let flags = core.info().rx_attr.op_flags;
    let p = publish(SrxObj {
        ep: EpObj {
            c: fid_ep {
                fid: fid {
                    fclass: class::FI_CLASS_SRX_CTX,
                    context,
                    ops: &SRX_FI_OPS as *const fi_ops as *mut fi_ops,
                },
                ops: &SRX_EP_OPS as *const fi_ops_ep as *mut fi_ops_ep,
                cm: cm_ops_table(),
                msg: msg::srx_msg_ops_table(),
                rma: rma::rma_ops_table(),
                tagged: msg::srx_tagged_ops_table(),
                atomic: atomic::atomic_ops_table(),
                collective: coll::coll_ops_table(),
            },
            core: Some(core),
            tx_flags: AtomicU64::new(0),
            rx_flags: AtomicU64::new(flags),
            connreq: std::ptr::null_mut(),
            directed: caps & FI_DIRECTED_RECV != 0,
        },
    });
    // SAFETY: out is non-null and writable (checked above, and the contract).
    unsafe { *out = p.cast::<fid_ep>() };
    0
}

static EP_FI_OPS: fi_ops = super::fid_ops::<EpObj>(ep_bind, ep_control);

static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(ep_tx_ctx),
    rx_ctx: Some(ep_rx_ctx),
    rx_size_left: Some(ep_size_left),
    tx_size_left: Some(ep_size_left),
};

static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(cm_setname),
    getname: Some(cm_getname),
    getpeer: Some(cm_getpeer),
    connect: Some(cm_connect),
    listen: Some(cm_listen),
    accept: Some(cm_accept),
    reject: Some(cm_reject),
    shutdown: Some(cm_shutdown),
    join: Some(cm_join),
};

/// The `fi_ops_ep` table (endpoints and passive endpoints share it).
pub(crate) fn ep_ops_table() -> *mut fi_ops_ep {
    &EP_OPS as *const fi_ops_ep as *mut fi_ops_ep
}

/// The `fi_ops_cm` table (endpoints and passive endpoints share it).
pub(crate) fn cm_ops_table() -> *mut fi_ops_cm {
    &CM_OPS as *const fi_ops_cm as *mut fi_ops_cm
}

/// `fi_endpoint`: opens an endpoint of a domain; an `info->handle` naming
/// a connection request opens the accepting side of that request; one
/// naming a passive endpoint gives the new endpoint that passive
/// endpoint's address (fi_endpoint(3): it acquires its properties, and the
/// passive endpoint is bound to nothing afterwards).
///
/// # Safety
/// Arguments as `fi_endpoint(3)`.
pub(crate) unsafe fn open(
    d: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: d is NULL or a fid of the application.
    let Some(dom) = (unsafe { super::domain::domain(d) }) else {
        return EINVAL;
    };
    let Some(dcore) = dom.core() else {
        return EINVAL;
    };
    if info.is_null() || out.is_null() {
        return EINVAL;
    }
    // SAFETY: info is a valid fi_info.
    let mut i = match unsafe { crate::info::info_from_c(info) } {
        Ok(i) => i,
        Err(e) => return e,
    };
    // SAFETY: info is valid; its handle is NULL or a fid.
    let req = unsafe { connreq((*info).handle) };
    if let Some(r) = req {
        i.handle = Some(r.handle.clone());
    }
    let from_pep = if req.is_none() {
        // SAFETY: info is valid; its handle is NULL or a fid.
        unsafe { super::pep::pep((*info).handle) }
    } else {
        None
    };
    if let Some(pe) = from_pep {
        match pe.getname() {
            Ok(name) => i.src_addr = Some(name),
            Err(e) => return guard::err(&e),
        }
    }
    let p = publish(EpObj {
        c: fid_ep {
            fid: fid {
                fclass: class::FI_CLASS_EP,
                context,
                ops: &EP_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            ops: ep_ops_table(),
            cm: cm_ops_table(),
            msg: msg::msg_ops_table(),
            rma: rma::rma_ops_table(),
            tagged: msg::tagged_ops_table(),
            atomic: atomic::atomic_ops_table(),
            collective: coll::coll_ops_table(),
        },
        core: None,
        tx_flags: AtomicU64::new(i.tx_attr.op_flags),
        rx_flags: AtomicU64::new(i.rx_attr.op_flags),
        connreq: std::ptr::null_mut(),
        directed: i.caps & FI_DIRECTED_RECV != 0,
    });
    // Events about this endpoint name it by its C fid.
    match dcore.endpoint_with_context(&i, p as usize) {
        Ok(core) => {
            // The passive endpoint's address is the new endpoint's now.
            if let Some(pe) = from_pep {
                let _ = pe.release();
            }
            // The first endpoint opened for a request owns its fid.
            let owned = req.filter(|r| r.take());
            // SAFETY: p came from publish and is not yet shared.
            unsafe {
                (*p).core = Some(core);
                if let Some(r) = owned {
                    (*p).connreq = r as *const ConnReqObj as *mut ConnReqObj;
                }
                *out = p.cast::<fid_ep>();
            }
            0
        }
        Err(e) => {
            // SAFETY: p came from publish and was never shared.
            unsafe { unpublish(p) };
            guard::err(&e)
        }
    }
}

/// `fi_ep_bind`: a CQ (FI_TRANSMIT / FI_RECV / FI_SELECTIVE_COMPLETION),
/// counter (FI_SEND / FI_RECV / FI_READ / FI_WRITE / FI_REMOTE_*), AV, EQ,
/// or a shared receive or transmit context.
unsafe extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(f.cast::<fid_ep>()) }) else {
            return EINVAL;
        };
        // SAFETY: bfid is NULL or a fid of the application; each probe
        // checks class and table before use.
        unsafe {
            if let Some(q) = get::<super::cq::CqObj>(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_cq(q, flags));
            }
            if let Some(c) = get::<super::cntr::CntrObj>(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_cntr(c, flags));
            }
            if let Some(v) = get::<super::av::AvObj>(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_av(v));
            }
            if let Some(q) = get::<super::eq::EqObj>(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_eq(q));
            }
            if let Some(x) = srx_obj(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_srx(x));
            }
            if let Some(x) = get::<StxObj>(bfid).and_then(|o| o.core.as_ref()) {
                return super::ret(e.bind_stx(x));
            }
        }
        EINVAL
    })
}

/// `fi_control` of endpoints: FI_ENABLE, and FI_GETOPSFLAG / FI_SETOPSFLAG
/// (or the FIDFLAG forms) on the default flags that FI_TRANSMIT or FI_RECV
/// in `*arg` selects.
unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some((o, e)) = (unsafe { ep(f.cast::<fid_ep>()) }) else {
            return EINVAL;
        };
        match command {
            control::FI_ENABLE => super::ret(e.enable()),
            control::FI_GETOPSFLAG
            | control::FI_SETOPSFLAG
            | control::FI_GETFIDFLAG
            | control::FI_SETFIDFLAG => {
                if arg.is_null() {
                    return EINVAL;
                }
                let a = arg.cast::<u64>();
                // SAFETY: these commands take a uint64_t *.
                let v = unsafe { *a };
                let slot = match v & (FI_TRANSMIT | FI_RECV) {
                    FI_TRANSMIT => &o.tx_flags,
                    FI_RECV => &o.rx_flags,
                    _ => return EINVAL,
                };
                if command == control::FI_SETOPSFLAG || command == control::FI_SETFIDFLAG {
                    slot.store(v & !(FI_TRANSMIT | FI_RECV), Ordering::Relaxed);
                } else {
                    // SAFETY: `a` is the non-NULL `uint64_t *` these commands take (checked above).
                    unsafe { *a = slot.load(Ordering::Relaxed) };
                }
                0
            }
            _ => ENOSYS,
        }
    })
}

/// `fi_cancel`: a posted receive by its context completes with FI_ECANCELED.
unsafe extern "C" fn ep_cancel(f: fid_t, context: *mut c_void) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(f.cast::<fid_ep>()) }) else {
            return EINVAL_S;
        };
        super::sret(e.cancel(context as usize))
    })
}

static SRX_EP_OPS: fi_ops_ep = fi_ops_ep {
    cancel: Some(srx_cancel),
    ..EP_OPS
};

/// `fi_cancel` on a shared receive context: a receive posted there by its
/// context completes with FI_ECANCELED (see `ofi_core::util::srx`).
unsafe extern "C" fn srx_cancel(f: fid_t, context: *mut c_void) -> ssize_t {
    ffi(PANIC_S, || {
        // SAFETY: f is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { srx_ep(f.cast::<fid_ep>()) }) else {
            return EINVAL_S;
        };
        super::sret(e.cancel(context as usize))
    })
}

/// Options whose value is a `size_t`.
fn size_opt(name: c_int) -> bool {
    matches!(
        name,
        ep_opt::FI_OPT_MIN_MULTI_RECV
            | ep_opt::FI_OPT_CM_DATA_SIZE
            | ep_opt::FI_OPT_BUFFERED_MIN
            | ep_opt::FI_OPT_BUFFERED_LIMIT
            | ep_opt::FI_OPT_SEND_BUF_SIZE
            | ep_opt::FI_OPT_RECV_BUF_SIZE
            | ep_opt::FI_OPT_TX_SIZE
            | ep_opt::FI_OPT_RX_SIZE
    )
}

/// `fi_getopt` (level FI_OPT_ENDPOINT; `size_t` options and the `int`
/// FI_OPT_FI_HMEM_P2P).
unsafe extern "C" fn ep_getopt(
    f: fid_t,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut size_t,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let e = unsafe { ep(f.cast::<fid_ep>()) };
        // SAFETY: f is NULL or a fid of the application; `pep` checks its class.
        if e.is_none() && unsafe { pep(f) }.is_none() {
            return EINVAL;
        }
        if optval.is_null() || optlen.is_null() {
            return EINVAL;
        }
        let noproto = guard::neg(FI_ENOPROTOOPT);
        if level != ep_opt::FI_OPT_ENDPOINT {
            return noproto;
        }
        let got = match e {
            Some((_, e)) => e.getopt(optname),
            // SAFETY: f is NULL or a fid of the application; `pep` checks its class.
            None => match unsafe { pep(f) } {
                Some(p) => p.getopt(optname),
                None => return EINVAL,
            },
        };
        let v = match got {
            Ok(v) => v,
            Err(err) => return guard::err(&err),
        };
        // SAFETY: optlen is valid; optval has *optlen writable bytes. Too
        // small a buffer gets -FI_ETOOSMALL and the length it needs.
        unsafe {
            if size_opt(optname) {
                if *optlen < std::mem::size_of::<size_t>() {
                    *optlen = std::mem::size_of::<size_t>();
                    return guard::neg(FI_ETOOSMALL);
                }
                optval.cast::<size_t>().write_unaligned(v);
                *optlen = std::mem::size_of::<size_t>();
            } else {
                if *optlen < std::mem::size_of::<c_int>() {
                    *optlen = std::mem::size_of::<c_int>();
                    return guard::neg(FI_ETOOSMALL);
                }
                optval.cast::<c_int>().write_unaligned(v as c_int);
                *optlen = std::mem::size_of::<c_int>();
            }
        }
        0
    })
}

/// `fi_setopt` (level FI_OPT_ENDPOINT).
unsafe extern "C" fn ep_setopt(
    f: fid_t,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: size_t,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let e = unsafe { ep(f.cast::<fid_ep>()) };
        // SAFETY: f is NULL or a fid of the application; `pep` checks its class.
        if e.is_none() && unsafe { pep(f) }.is_none() {
            return EINVAL;
        }
        if optval.is_null() {
            return EINVAL;
        }
        let noproto = guard::neg(FI_ENOPROTOOPT);
        if level != ep_opt::FI_OPT_ENDPOINT {
            return noproto;
        }
        let Some((_, e)) = e else {
            return noproto;
        };
        let v = if size_opt(optname) {
            if optlen < std::mem::size_of::<size_t>() {
                return EINVAL;
            }
            // SAFETY: optval holds a size_t.
            unsafe { optval.cast::<size_t>().read_unaligned() }
        } else {
            if optlen < std::mem::size_of::<c_int>() {
                return EINVAL;
            }
            // SAFETY: optval holds an int.
            let i = unsafe { optval.cast::<c_int>().read_unaligned() };
            i as usize
        };
        super::ret(e.setopt(optname, v))
    })
}

unsafe extern "C" fn ep_tx_ctx(
    _sep: *mut fid_ep,
    _index: c_int,
    _attr: *mut fi_tx_attr,
    _tx_ep: *mut *mut fid_ep,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

unsafe extern "C" fn ep_rx_ctx(
    _sep: *mut fid_ep,
    _index: c_int,
    _attr: *mut fi_rx_attr,
    _rx_ep: *mut *mut fid_ep,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || ENOSYS)
}

/// `fi_rx_size_left` / `fi_tx_size_left` (deprecated): not tracked.
unsafe extern "C" fn ep_size_left(_ep: *mut fid_ep) -> ssize_t {
    ffi(PANIC_S, || ENOSYS_S)
}

/// `fi_setname` of an endpoint (before `fi_enable`) or passive endpoint
/// (before `fi_listen`): an address in the offer's format.
unsafe extern "C" fn cm_setname(f: fid_t, addr: *mut c_void, addrlen: size_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: addr has addrlen readable bytes (caller's contract).
        let Some(a) = (unsafe { super::bytes(addr, addrlen) }).filter(|a| !a.is_empty()) else {
            return EINVAL;
        };
        // SAFETY: f is NULL or a fid of the application.
        if let Some((_, e)) = unsafe { ep(f.cast::<fid_ep>()) } {
            return super::ret(e.setname(a));
        }
        // SAFETY: f is NULL or a fid of the application; `pep` checks its class.
        match unsafe { pep(f) } {
            Some(p) => super::ret(p.setname(a)),
            None => EINVAL,
        }
    })
}

/// `fi_getname` of an endpoint or passive endpoint.
unsafe extern "C" fn cm_getname(f: fid_t, addr: *mut c_void, addrlen: *mut size_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: f is NULL or a fid of the application.
        let name = if let Some((_, e)) = unsafe { ep(f.cast::<fid_ep>()) } {
            e.getname()
        } else if let Some(p) = unsafe { pep(f) } {
            p.getname()
        } else {
            return EINVAL;
        };
        match name {
            // SAFETY: addr / addrlen as fi_getname(3).
            Ok(a) => unsafe { give_addr(&a, addr, addrlen) },
            Err(e) => guard::err(&e),
        }
    })
}

unsafe extern "C" fn cm_getpeer(p: *mut fid_ep, addr: *mut c_void, addrlen: *mut size_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(p) }) else {
            return EINVAL;
        };
        match e.getpeer() {
            // SAFETY: addr / addrlen as fi_getpeer(3).
            Ok(a) => unsafe { give_addr(&a, addr, addrlen) },
            Err(err) => guard::err(&err),
        }
    })
}

unsafe extern "C" fn cm_connect(
    p: *mut fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: size_t,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(p) }) else {
            return EINVAL;
        };
        // SAFETY: param holds paramlen bytes.
        let Some(prm) = (unsafe { super::bytes(param, paramlen) }) else {
            return EINVAL;
        };
        let dest: Vec<u8> = if addr.is_null() {
            match &e.info().dest_addr {
                Some(d) => d.clone(),
                None => return EINVAL,
            }
        } else {
            // SAFETY: addr is an address of the endpoint's format.
            let Some(n) = (unsafe { super::addr_len(e.info().addr_format, addr) }) else {
                return EINVAL;
            };
            // SAFETY: the address is n readable bytes.
            unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), n) }.to_vec()
        };
        super::ret(e.connect(&dest, prm))
    })
}

unsafe extern "C" fn cm_listen(p: *mut fid_pep) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        match unsafe { pep(p.cast::<fid>()) } {
            Some(l) => super::ret(l.listen()),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn cm_accept(p: *mut fid_ep, param: *const c_void, paramlen: size_t) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(p) }) else {
            return EINVAL;
        };
        // SAFETY: param holds paramlen bytes.
        let Some(prm) = (unsafe { super::bytes(param, paramlen) }) else {
            return EINVAL;
        };
        super::ret(e.accept(prm))
    })
}

/// `fi_reject`: refuses the request and frees its handle (a refused
/// reject keeps both).
unsafe extern "C" fn cm_reject(
    p: *mut fid_pep,
    handle: fid_t,
    param: *const c_void,
    paramlen: size_t,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p and handle are NULL or fids of the application.
        let (Some(l), Some(r)) = (unsafe { pep(p.cast::<fid>()) }, unsafe { connreq(handle) })
        else {
            return EINVAL;
        };
        // SAFETY: param holds paramlen bytes.
        let Some(prm) = (unsafe { super::bytes(param, paramlen) }) else {
            return EINVAL;
        };
        let rc = super::ret(l.reject(&r.handle, prm));
        // A refused reject leaves the request (and its handle) as it was.
        if rc == 0 && !r.taken() {
            // SAFETY: the request is answered and no endpoint owns it; the
            // application gives up the handle.
            unsafe { free_connreq(r as *const ConnReqObj as *mut ConnReqObj) };
        }
        rc
    })
}

unsafe extern "C" fn cm_shutdown(p: *mut fid_ep, flags: u64) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        match unsafe { ep(p) } {
            Some((_, e)) => super::ret(e.shutdown(flags)),
            None => EINVAL,
        }
    })
}

/// `fi_join`: a multicast group (see `obj::mc`).
unsafe extern "C" fn cm_join(
    p: *mut fid_ep,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut fid_mc,
    context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: p is NULL or a fid of the application.
        let Some((_, e)) = (unsafe { ep(p) }) else {
            return EINVAL;
        };
        // SAFETY: the application's fi_join(3) arguments, passed on unchanged: `addr` is an address
        // of the endpoint's format and `mc` writable, as `mc::join` requires.
        unsafe { super::mc::join(e, addr, flags, mc, context) }
    })
}

/// Defers an operation posted with FI_TRIGGER until the counter of its
/// `struct fi_triggered_context` (the operation's context) reaches the
/// threshold.
///
/// # Safety
/// `context` is NULL or an `fi_triggered_context`; the operation's memory
/// stays valid until it completes.
pub(crate) unsafe fn trigger(
    e: &Endpoint,
    context: *mut c_void,
    op: ofi_core::Deferred,
) -> ssize_t {
    if context.is_null() {
        return EINVAL_S;
    }
    // SAFETY: a triggered operation's context is an fi_triggered_context.
    let tc = unsafe { &*context.cast::<fi_triggered_context>() };
    if tc.event_type != trigger_event::FI_TRIGGER_THRESHOLD {
        return ENOSYS_S;
    }
    // SAFETY: the threshold arm is the one FI_TRIGGER_THRESHOLD selects.
    let th = unsafe { tc.trigger.threshold };
    // SAFETY: th.cntr is NULL or a counter of the application.
    let Some(c) = (unsafe { get::<super::cntr::CntrObj>(th.cntr.cast::<fid>()) })
        .and_then(|o| o.core.as_ref())
    else {
        return EINVAL_S;
    };
    // SAFETY: the operation's memory stays valid until it completes (this function's contract),
    // after the counter reaches the threshold, as `Endpoint::trigger` requires.
    super::sret(unsafe { e.trigger(c, th.threshold as u64, op) })
}
