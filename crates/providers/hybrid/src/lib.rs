//! The hybrid provider: one RDM endpoint for peers on this node and on
//! others. Each peer is reached through shm when it is on this node (see
//! [`node`] for what that means and FI_HYBRID_NODE) and through the
//! network path otherwise (tcp, or udp under FI_HYBRID_NET=udp); the
//! application sees one offer (FI_LOCAL_COMM | FI_REMOTE_COMM), one AV,
//! one CQ, one counter set and one tag-matching engine.
//!
//! Design:
//! - **Composition through the core.** The providers are found by name in
//!   the registry ([`ofi_core::registry::provider`], which FI_PROVIDER does
//!   not filter) and opened through the [`Provider`], [`FabricOps`],
//!   [`DomainOps`] and [`EndpointOps`] traits: this crate imports neither.
//!   A hybrid domain holds a shm and a network (tcp or udp) domain; a
//!   hybrid endpoint one endpoint of each, bound to private CQs and AVs it
//!   owns, the domain's memory regions and the application's remote-access
//!   counters.
//! - **One matching engine.** Every message goes through the inner
//!   endpoints' *message* queue behind a 40-byte header ([`wire`]: queue,
//!   tag, CQ data, length). Each inner endpoint keeps bounce receives
//!   posted; the hybrid endpoint drains both inner CQs in its progress and
//!   matches each arrival, in the order it drains them, against its own
//!   posted receives (the core's [`MatchQueues`](ofi_core::util::matching)),
//!   so FI_ADDR_UNSPEC receives, tag/ignore bits, directed receive and
//!   FI_PEEK / FI_CLAIM / FI_DISCARD behave as on one provider. Messages up
//!   to the eager size are copied out of the bounce buffer; larger ones send
//!   a rendezvous header and the payload as an inner *tagged* message whose
//!   tag is a per-sender cookie, which the receiver posts (directed, into
//!   the application's buffer) only once the header has matched: the inner
//!   provider moves the bulk data with its own zero-copy path.
//! - **The shm fast path.** A send whose header and payload fit shm's
//!   inject size goes as an inner inject and completes at once (shm copies
//!   it into the peer's ring before it returns, as it does for its own
//!   small sends); an untagged one without CQ data goes *bare*, with no
//!   header, marked by the inner CQ data [`wire::BARE`]. On the receiving
//!   side shm offers each such small message to hybrid's receive hook
//!   ([`RxHook`](ofi_core::provider::RxHook)) as it leaves the ring: it is
//!   matched there, with no bounce receive, inner completion or second
//!   copy, unless an earlier arrival still waits in an inner CQ or the
//!   state is busy (then it takes the bounce path, so arrival order holds
//!   across both paths).
//! - **RMA and atomics** go straight to the inner endpoint of the target's
//!   path; targets check keys against the hybrid domain's regions.
//! - **Addresses** ([`addr`]): an FI_ADDR_STR string carrying the node id
//!   and both inner addresses; AV entries are mirrored lazily into the
//!   inner AVs, by every endpoint of the domain before any one drives its
//!   inner endpoints (the inner network endpoints of a domain progress
//!   together, so a peer's connection or first message must find its
//!   address already mirrored).
//! - **Faults** stay per path: a dead local peer fails only the operations
//!   shm had for it, a dead remote peer only the network path's.

#![deny(unsafe_code)]

pub mod addr;
mod ep;
pub mod node;
pub mod wire;

use addr::HybridAddrOps;
use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::{Error, Result};
use ofi_core::info::*;
use ofi_core::provider::{AddrOps, DomainOps, EndpointOps, FabricOps, GetinfoRequest, Provider};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Provider name: outside Open MPI 4.1's default exclude list
/// ("shm,sockets,tcp,udp,rstream,usnic").
pub const NAME: &str = "hybrid";
/// Provider version.
pub const VERSION: u32 = fi_version(0, 1);
/// The provider for peers on this node.
pub const LOCAL: &str = "shm";
/// The provider for the others, unless FI_HYBRID_NET names another.
pub const REMOTE: &str = "tcp";
/// The providers FI_HYBRID_NET may name for the others (both RDM over IP).
pub const NETS: [&str; 2] = ["tcp", "udp"];

fn tunables() -> Vec<Tunable> {
    vec![
        Tunable::text(NAME, node::VAR, "", "Node identity for locality: peers with the same value use shm, others the network path, FI_HYBRID_NET (empty: boot id, IPC and PID namespaces and /dev/shm decide; @endpoint: every endpoint is its own node, so all traffic takes the network path)"),
        Tunable::text(NAME, "net", REMOTE, "Provider for peers on other nodes: tcp (reliable streams) or udp (ofi's reliability protocol over datagrams); every process of a job must name the same"),
        Tunable::size(NAME, "eager_max", 8192, "Messages up to this size are copied through bounce buffers; larger ones use the inner provider's rendezvous; every process of a job must use the same value (a receiver with a smaller one drops the larger eager messages it gets, with a warning)"),
        Tunable::size(NAME, "bounce_bufs", 64, "Bounce receives each inner endpoint keeps posted"),
    ]
}

/// Settings read from the FI_HYBRID_* tunables.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) node: u64,
    /// FI_HYBRID_NODE=@endpoint: each endpoint is a node of its own.
    pub(crate) per_endpoint: bool,
    pub(crate) eager_max: usize,
    pub(crate) bounce_bufs: usize,
    /// The provider for peers on other nodes (one of [`NETS`]).
    pub(crate) net: &'static str,
}

impl Config {
    fn from_env() -> Result<Config> {
        let t = tunables();
        let get = |n: &str| t.iter().find(|x| x.name == n).expect("declared tunable");
        let eager_max = get("eager_max").get_size()?;
        if !(64..=1 << 20).contains(&eager_max) {
            return Err(Error::inval(format!(
                "FI_HYBRID_EAGER_MAX={eager_max} must be in 64..=1MiB"
            )));
        }
        let text = get(node::VAR).get_str();
        let want = get("net").get_str();
        let net = NETS
            .iter()
            .copied()
            .find(|n| *n == want.trim())
            .ok_or_else(|| {
                Error::inval(format!(
                    "FI_HYBRID_NET={want}: the network path is one of {}",
                    NETS.join(", ")
                ))
            })?;
        Ok(Config {
            net,
            per_endpoint: text.trim() == node::PER_ENDPOINT,
            node: node::node_id(&text),
            eager_max,
            bounce_bufs: get("bounce_bufs")
                .get_nonzero_size("an endpoint needs one bounce buffer")?,
        })
    }
}

/// The inner providers and their offers.
#[derive(Clone)]
struct Inners {
    prov: [Arc<dyn Provider>; 2],
    info: [Info; 2],
}

fn inners(version: u32, net: &str) -> Result<Inners> {
    let find = |n: &str| {
        ofi_core::registry::provider(n)
            .ok_or_else(|| Error::nodata(format!("hybrid: provider {n} is not registered")))
    };
    let prov = [find(LOCAL)?, find(net)?];
    let mut hints = Info::hints();
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
    let pick = |p: &Arc<dyn Provider>| -> Result<Info> {
        let req = GetinfoRequest {
            version,
            node: None,
            service: None,
            flags: 0,
            hints: None,
        };
        let offers = p.getinfo(&req)?;
        let rdm = |i: &&Info| i.ep_attr.ep_type == ep_type::FI_EP_RDM;
        offers
            .iter()
            .filter(rdm)
            .find(|i| i.addr_format != addr_format::FI_SOCKADDR_IN6)
            .or_else(|| offers.iter().find(rdm))
            .cloned()
            .ok_or_else(|| Error::nodata(format!("hybrid: {} has no RDM offer", p.name())))
    };
    let info = [pick(&prov[0])?, pick(&prov[1])?];
    Ok(Inners { prov, info })
}

/// The hybrid offer, from the inner offers: what both paths support.
fn offer(inner: &Inners, version: u32) -> Info {
    let [s, t] = &inner.info;
    let caps = FI_MSG
        | FI_TAGGED
        | FI_SEND
        | FI_RECV
        | FI_SOURCE
        | FI_DIRECTED_RECV
        | FI_RMA
        | FI_ATOMIC
        | FI_READ
        | FI_WRITE
        | FI_REMOTE_READ
        | FI_REMOTE_WRITE
        | FI_RMA_EVENT
        | FI_FENCE
        | FI_LOCAL_COMM
        | FI_REMOTE_COMM
        // FI_COMMIT_COMPLETE when both paths make writes durable.
        | (s.caps & t.caps & FI_RMA_PMEM);
    let order = s.tx_attr.msg_order & t.tx_attr.msg_order;
    let inject = s.tx_attr.inject_size.min(t.tx_attr.inject_size) - wire::LEN;
    let o = Info::offer(NAME, VERSION).with_caps(caps);
    Info {
        addr_format: addr_format::FI_ADDR_STR,
        tx_attr: TxAttr {
            msg_order: order,
            inject_size: inject,
            size: s.tx_attr.size.min(t.tx_attr.size),
            // A send whose list leaves no entry for the header is copied
            // behind it (eager) or goes as is (rendezvous payload).
            iov_limit: s
                .tx_attr
                .iov_limit
                .min(t.tx_attr.iov_limit)
                .min(ofi_core::util::matching::MAX_IOV),
            rma_iov_limit: s.tx_attr.rma_iov_limit.min(t.tx_attr.rma_iov_limit),
            ..o.tx_attr
        },
        rx_attr: RxAttr {
            msg_order: s.rx_attr.msg_order & t.rx_attr.msg_order,
            size: s.rx_attr.size.min(t.rx_attr.size),
            iov_limit: s
                .rx_attr
                .iov_limit
                .min(t.rx_attr.iov_limit)
                .min(ofi_core::util::matching::MAX_IOV),
            ..o.rx_attr
        },
        ep_attr: EpAttr {
            ep_type: ep_type::FI_EP_RDM,
            protocol: protocol::FI_PROTO_UNSPEC,
            max_msg_size: s.ep_attr.max_msg_size.min(t.ep_attr.max_msg_size),
            max_order_raw_size: s
                .ep_attr
                .max_order_raw_size
                .min(t.ep_attr.max_order_raw_size),
            max_order_war_size: s
                .ep_attr
                .max_order_war_size
                .min(t.ep_attr.max_order_war_size),
            max_order_waw_size: s
                .ep_attr
                .max_order_waw_size
                .min(t.ep_attr.max_order_waw_size),
            mem_tag_format: s.ep_attr.mem_tag_format,
            ..o.ep_attr
        },
        domain_attr: DomainAttr {
            control_progress: progress::FI_PROGRESS_MANUAL,
            data_progress: progress::FI_PROGRESS_MANUAL,
            mr_mode: s.domain_attr.mr_mode & t.domain_attr.mr_mode,
            mr_key_size: 8,
            cq_cnt: s.domain_attr.cq_cnt.min(t.domain_attr.cq_cnt),
            ep_cnt: s.domain_attr.ep_cnt.min(t.domain_attr.ep_cnt),
            tx_ctx_cnt: s.domain_attr.tx_ctx_cnt.min(t.domain_attr.tx_ctx_cnt),
            rx_ctx_cnt: s.domain_attr.rx_ctx_cnt.min(t.domain_attr.rx_ctx_cnt),
            cntr_cnt: s.domain_attr.cntr_cnt.min(t.domain_attr.cntr_cnt),
            mr_iov_limit: s.domain_attr.mr_iov_limit.min(t.domain_attr.mr_iov_limit),
            caps: FI_LOCAL_COMM | FI_REMOTE_COMM,
            mr_cnt: s.domain_attr.mr_cnt.min(t.domain_attr.mr_cnt),
            ..o.domain_attr
        },
        fabric_attr: FabricAttr {
            api_version: version,
            ..o.fabric_attr
        },
        ..o
    }
}

/// The hybrid provider.
#[derive(Debug, Default)]
pub struct HybridProvider;

impl Provider for HybridProvider {
    fn name(&self) -> &str {
        NAME
    }
    fn version(&self) -> u32 {
        VERSION
    }
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        if let Some(h) = req.hints {
            if !matches!(
                h.ep_attr.ep_type,
                ep_type::FI_EP_UNSPEC | ep_type::FI_EP_RDM
            ) {
                return Err(Error::nodata("hybrid: only FI_EP_RDM endpoints"));
            }
        }
        let cfg = Config::from_env()?;
        let inner = inners(req.version, cfg.net)?;
        let mut info = offer(&inner, req.version);
        // A source address, as every offer carries one: this node with
        // the inner offers' source addresses.
        if let (Some(shm), Some(net)) = (&inner.info[0].src_addr, &inner.info[1].src_addr) {
            let a = addr::HybridAddr {
                node: cfg.node,
                shm: shm.clone(),
                net: net.clone(),
            };
            if let Ok(b) = a.encode() {
                info.src_addr = Some(b);
            }
        }
        Ok(vec![info])
    }
    fn fabric(&self, attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        let cfg = Config::from_env()?;
        let inner = inners(attr.api_version.max(fi_version(1, 5)), cfg.net)?;
        let fab = [
            inner.prov[0].fabric(&inner.info[0].fabric_attr)?,
            inner.prov[1].fabric(&inner.info[1].fabric_attr)?,
        ];
        Ok(Arc::new(HybridFabric { cfg, inner, fab }))
    }
    fn tunables(&self) -> Vec<Tunable> {
        tunables()
    }
    /// Peers on this node reach this process's memory through shm, which
    /// copies across processes.
    fn late_writes(&self) -> bool {
        true
    }
}

struct HybridFabric {
    cfg: Config,
    inner: Inners,
    fab: [Arc<dyn FabricOps>; 2],
}

impl FabricOps for HybridFabric {
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        if info.provider() != NAME {
            return Err(Error::new(
                ofi_core::error::errno::FI_EDOMAIN,
                format!("info is for provider '{}', not hybrid", info.provider()),
            ));
        }
        let mut infos = self.inner.info.clone();
        for i in infos.iter_mut() {
            i.domain_attr.auth_key = info.domain_attr.auth_key.clone();
            *i = i.in_force();
        }
        let dom = [
            self.fab[0].domain(&infos[0])?,
            self.fab[1].domain(&infos[1])?,
        ];
        let addr_ops = Arc::new(HybridAddrOps {
            shm: dom[0].addr_ops(),
            net: dom[1].addr_ops(),
            inserts: Arc::new(AtomicU64::new(0)),
        });
        let siblings = ep::Siblings::new(addr_ops.inserts.clone());
        Ok(Arc::new(HybridDomain {
            cfg: self.cfg.clone(),
            infos,
            dom,
            addr_ops,
            siblings,
        }))
    }
}

struct HybridDomain {
    cfg: Config,
    infos: [Info; 2],
    dom: [Arc<dyn DomainOps>; 2],
    addr_ops: Arc<HybridAddrOps>,
    siblings: Arc<ep::Siblings>,
}

impl DomainOps for HybridDomain {
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        if info.ep_attr.ep_type != ep_type::FI_EP_RDM {
            return Err(Error::nosys("hybrid: only FI_EP_RDM endpoints"));
        }
        let eps = [
            self.dom[0].endpoint(&self.infos[0])?,
            self.dom[1].endpoint(&self.infos[1])?,
        ];
        let addr = [self.dom[0].addr_ops(), self.dom[1].addr_ops()];
        Ok(ep::HybridEp::open(
            &self.cfg,
            info,
            eps,
            addr,
            self.infos.clone(),
            self.siblings.clone(),
        )?)
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        self.addr_ops.clone()
    }
    fn query_atomic(
        &self,
        kind: ofi_core::util::atomic::AtomicKind,
        op: u32,
        datatype: u32,
    ) -> Result<usize> {
        // What both paths carry.
        let a = self.dom[0].query_atomic(kind, op, datatype)?;
        let b = self.dom[1].query_atomic(kind, op, datatype)?;
        Ok(a.min(b))
    }
}

/// Registers hybrid with the core, at its place in the built-in order
/// (idempotent; first, see `ofi_core::registry::BUILTIN_ORDER`). Register
/// shm and the network provider (tcp, or udp for FI_HYBRID_NET=udp) too:
/// the hybrid offer needs both.
pub fn register() -> Result<()> {
    ofi_core::registry::register_builtin(Arc::new(HybridProvider))
}
