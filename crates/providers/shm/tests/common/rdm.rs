//! One shm RDM endpoint with its own objects, and completions read from
//! its CQ against deadlines.

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cq::{CqAttr, CqErrEntry, CqTaggedEntry};
use ofi_core::Info;
use std::time::{Duration, Instant};

/// The shm RDM offer for `caps` (with `key` as the domain's auth key),
/// remote addresses being virtual addresses (FI_MR_VIRT_ADDR asked for).
pub fn shm_offer(caps: u64, key: Option<&[u8]>) -> Info {
    let mut h = Info::hints();
    h.caps = caps;
    h.domain_attr.mr_mode =
        mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_ALLOCATED | mr_mode::FI_MR_PROV_KEY;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    h.domain_attr.auth_key = key.map(|k| k.to_vec());
    super::ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offer")
        .remove(0)
}

/// True when the offer takes remote addresses as virtual addresses.
pub fn virt_addr(info: &Info) -> bool {
    info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0
}

/// An RDM endpoint with its own fabric, domain, tagged-format CQ, AV and
/// EQ. Fields drop in declaration order: the endpoint first.
pub struct Rdm {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its address vector.
    pub av: AddressVector,
    /// Its completion queue (transmit and receive).
    pub cq: CompletionQueue,
    /// Its event queue (peer deaths are reported there).
    pub eq: EventQueue,
    /// Its domain.
    pub domain: Domain,
    /// Its fabric.
    pub fabric: Fabric,
}

impl Rdm {
    /// Opens and enables an endpoint on `info` whose context is `ctx`.
    pub fn open(info: &Info, ctx: usize) -> Rdm {
        Rdm::open_with(info, ctx, |_| {})
    }

    /// As [`Rdm::open`], running `before` on the endpoint before it is
    /// enabled (to set it up the way only a disabled endpoint can be).
    pub fn open_with(info: &Info, ctx: usize, before: impl FnOnce(&Endpoint)) -> Rdm {
        let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
        let domain = fabric.domain(info).expect("domain");
        let cq = domain
            .cq(&CqAttr {
                format: cq_format::FI_CQ_FORMAT_TAGGED,
                ..Default::default()
            })
            .expect("cq");
        let av = domain.av(&AvAttr::default()).expect("av");
        let eq = fabric.eq(&Default::default()).expect("eq");
        let ep = domain
            .endpoint_with_context(info, ctx)
            .expect("rdm endpoint");
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.bind_eq(&eq).expect("bind eq");
        before(&ep);
        ep.enable().expect("enable");
        Rdm {
            ep,
            av,
            cq,
            eq,
            domain,
            fabric,
        }
    }
}

/// A completion: success or error entry.
#[derive(Clone, Copy, Debug)]
pub enum Done {
    /// A successful completion.
    Ok(CqTaggedEntry),
    /// An error completion.
    Err(CqErrEntry),
}

impl Done {
    /// The operation's context.
    pub fn ctx(&self) -> usize {
        match self {
            Done::Ok(e) => e.op_context,
            Done::Err(e) => e.op_context,
        }
    }
}

/// Reads what the CQ holds now (driving progress) into `out`; the number read.
pub fn poll(cq: &CompletionQueue, out: &mut Vec<Done>) -> usize {
    let mut e = [CqTaggedEntry::default(); 16];
    match cq.read(&mut e) {
        Ok(n) => {
            out.extend(e[..n].iter().map(|x| Done::Ok(*x)));
            n
        }
        Err(er) if er.code() == errno::FI_EAVAIL => {
            out.push(Done::Err(cq.readerr().expect("readerr after FI_EAVAIL")));
            1
        }
        Err(er) if er.is_again() => 0,
        Err(er) => panic!("cq read: {er}"),
    }
}

/// Polls `cq` until `ctx` completes or `timeout` passes; other completions
/// stay in `stash`. Panics on timeout.
pub fn wait_ctx(
    cq: &CompletionQueue,
    stash: &mut Vec<Done>,
    ctx: usize,
    timeout: Duration,
    what: &str,
) -> Done {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = stash.iter().position(|d| d.ctx() == ctx) {
            return stash.remove(i);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no completion for context {ctx:#x} within {timeout:?}"
        );
        poll(cq, stash);
    }
}

/// Unwraps a successful completion, panicking with the error otherwise.
pub fn ok(d: Done, what: &str) -> CqTaggedEntry {
    match d {
        Done::Ok(e) => e,
        Done::Err(e) => panic!(
            "{what}: error completion err {} ctx {:#x}",
            e.err, e.op_context
        ),
    }
}
