//! The shm provider: reliable-datagram endpoints between processes of one
//! node, over lock-free rings in a shared-memory segment per endpoint.
//!
//! Small messages travel inline in ring entries, medium ones through bounce
//! buffers in the receiver's segment, large ones by a single cross-process
//! copy (process_vm_readv) that falls back to pushing the data through the
//! ring when the kernel refuses it.

#![deny(unsafe_code)]

pub mod addr;
mod board;
mod domain;
mod ep;
mod fabric;
mod peer;

use ofi_core::config::Tunable;
use ofi_core::consts::*;
use ofi_core::error::Result;
use ofi_core::info::*;
use ofi_core::provider::{FabricOps, GetinfoRequest, Provider};
use std::sync::Arc;

/// Provider name.
pub const NAME: &str = "shm";
/// Provider version.
pub const VERSION: u32 = fi_version(1, 0);
/// Largest FI_INJECT send.
pub const INJECT_SIZE: usize = 4096;
/// Most iov entries per operation.
pub const IOV_LIMIT: usize = 4;

/// Settings read from the FI_SHM_* tunables.
#[derive(Clone, Debug)]
pub struct Config {
    /// Message ring slots.
    pub ring_slots: usize,
    /// Bounce buffers per endpoint.
    pub bounce_bufs: usize,
    /// Bytes per bounce buffer; messages up to this size use one.
    pub bounce_size: usize,
    /// Never use cross-process copies (always push data through the ring).
    pub disable_cma: bool,
    /// Unexpected messages held before the ring is left to fill.
    pub max_unexpected: usize,
    /// Messages at least this large are copied by both processes at once.
    pub coop_threshold: usize,
    /// Chunk size of a cooperative copy.
    pub coop_chunk: usize,
    /// Default transmit and receive context sizes the offer advertises
    /// (FI_SHM_TX_SIZE, FI_SHM_RX_SIZE, as fi_shm(7) names them).
    pub tx_size: usize,
    /// See `tx_size`.
    pub rx_size: usize,
    /// How long a peer this endpoint waits on may stay silent before it is
    /// declared dead (FI_SHM_PEER_TIMEOUT_MS; `ofi_core::util::peer`).
    /// `None` (the default, 0): a peer whose process lives and whose
    /// endpoint is open is waited for however long it computes between
    /// progress calls; its exit or close is still seen at once.
    pub peer_timeout: Option<std::time::Duration>,
}

/// Why a context size of 0 is refused.
const CONTEXT_SIZE: &str = "a context holds at least one operation";

fn tunables() -> Vec<Tunable> {
    vec![
        Tunable::size(NAME, "ring_slots", 256, "Inbound ring entries per endpoint (power of two); each holds up to 4 KiB inline"),
        Tunable::size(NAME, "bounce_bufs", 64, "Bounce buffers per endpoint for medium messages (power of two)"),
        Tunable::size(NAME, "bounce_size", 32768, "Bytes per bounce buffer; larger messages use a single cross-process copy"),
        Tunable::boolean(NAME, "disable_cma", false, "Do not use process_vm_readv; push large messages through the ring"),
        Tunable::size(NAME, "max_unexpected", 4096, "Unexpected messages buffered before senders see backpressure"),
        Tunable::size(NAME, "coop_threshold", 65536, "Messages at least this large are copied by sender and receiver together, in chunks (0: never)"),
        Tunable::size(NAME, "coop_chunk", 131072, "Chunk size of a cooperative copy"),
        Tunable::size(NAME, "tx_size", 1024, "Default transmit context size the offer advertises"),
        Tunable::size(NAME, "rx_size", 1024, "Default receive context size the offer advertises"),
        Tunable::size(
            NAME,
            ofi_core::util::peer::TIMEOUT_NAME,
            0,
            "Milliseconds a peer this endpoint waits on (for an answer, or the rest of a message it pushes) may stay silent before it is declared dead with FI_ETIMEDOUT; 0: never for silence alone, since a peer's process exit and endpoint close are seen at once and a live peer may compute between progress calls (FI_PROGRESS_MANUAL)",
        ),
    ]
}

impl Config {
    /// Reads the tunables; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<Config> {
        let t = tunables();
        let get = |n: &str| t.iter().find(|x| x.name == n).expect("declared tunable");
        let c = Config {
            ring_slots: get("ring_slots").get_size()?,
            bounce_bufs: get("bounce_bufs").get_size()?,
            bounce_size: get("bounce_size").get_size()?,
            disable_cma: get("disable_cma").get_bool()?,
            max_unexpected: get("max_unexpected").get_size()?.max(1),
            coop_threshold: get("coop_threshold").get_size()?,
            coop_chunk: get("coop_chunk").get_size()?,
            tx_size: get("tx_size").get_nonzero_size(CONTEXT_SIZE)?,
            rx_size: get("rx_size").get_nonzero_size(CONTEXT_SIZE)?,
            peer_timeout: match get(ofi_core::util::peer::TIMEOUT_NAME).get_size()? {
                0 => None,
                ms => Some(std::time::Duration::from_millis(ms as u64)),
            },
        };
        let bad = |m: String| Err(ofi_core::Error::inval(m));
        if c.coop_chunk < 4096 {
            return bad(format!(
                "FI_SHM_COOP_CHUNK={} must be at least 4096",
                c.coop_chunk
            ));
        }
        if !c.ring_slots.is_power_of_two() || !(2..=65536).contains(&c.ring_slots) {
            return bad(format!(
                "FI_SHM_RING_SLOTS={} must be a power of two in 2..=65536",
                c.ring_slots
            ));
        }
        if !c.bounce_bufs.is_power_of_two() || c.bounce_bufs > 65536 {
            return bad(format!(
                "FI_SHM_BOUNCE_BUFS={} must be a power of two up to 65536",
                c.bounce_bufs
            ));
        }
        if c.bounce_size < INJECT_SIZE
            || !c.bounce_size.is_multiple_of(4096)
            || c.bounce_size > 16 << 20
        {
            return bad(format!(
                "FI_SHM_BOUNCE_SIZE={} must be a multiple of 4096 in 4096..=16MiB",
                c.bounce_size
            ));
        }
        Ok(c)
    }
}

/// The shm provider.
#[derive(Debug, Default)]
pub struct ShmProvider;

impl ShmProvider {
    /// A new provider instance.
    pub fn new() -> Self {
        ShmProvider
    }
}

/// The offer shm makes.
pub fn offer() -> Info {
    let caps = FI_MSG
        | FI_TAGGED
        | FI_SEND
        | FI_RECV
        | FI_MULTI_RECV
        | FI_SOURCE
        | FI_DIRECTED_RECV
        | FI_RMA
        | FI_ATOMIC
        | FI_READ
        | FI_WRITE
        | FI_REMOTE_READ
        | FI_REMOTE_WRITE
        | FI_RMA_EVENT
        | FI_RMA_PMEM
        | FI_TRIGGER
        | FI_FENCE
        | FI_LOCAL_COMM;
    // Requests of one initiator execute at the target in ring order.
    let ordering = order::FI_ORDER_RAR
        | order::FI_ORDER_RAW
        | order::FI_ORDER_WAR
        | order::FI_ORDER_WAW
        | order::FI_ORDER_SAR
        | order::FI_ORDER_SAW
        | order::FI_ORDER_SAS;
    let o = Info::offer(NAME, VERSION).with_caps(caps);
    Info {
        addr_format: addr_format::FI_ADDR_STR,
        tx_attr: TxAttr {
            msg_order: ordering,
            inject_size: INJECT_SIZE,
            size: 1024,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: IOV_LIMIT,
            ..o.tx_attr
        },
        rx_attr: RxAttr {
            msg_order: ordering,
            size: 1024,
            iov_limit: IOV_LIMIT,
            ..o.rx_attr
        },
        ep_attr: EpAttr {
            ep_type: ep_type::FI_EP_RDM,
            protocol: protocol::FI_PROTO_SHM,
            max_msg_size: usize::MAX,
            max_order_raw_size: usize::MAX,
            max_order_war_size: usize::MAX,
            max_order_waw_size: usize::MAX,
            mem_tag_format: 0xaaaa_aaaa_aaaa_aaaa,
            ..o.ep_attr
        },
        domain_attr: DomainAttr {
            control_progress: progress::FI_PROGRESS_AUTO,
            data_progress: progress::FI_PROGRESS_MANUAL,
            mr_mode: mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED,
            mr_key_size: 8,
            cq_cnt: 1024,
            ep_cnt: 256,
            tx_ctx_cnt: 1024,
            rx_ctx_cnt: 1024,
            cntr_cnt: 1024,
            mr_iov_limit: IOV_LIMIT,
            caps: FI_LOCAL_COMM,
            mr_cnt: 65536,
            // Shared receive and transmit contexts (ofi_core::util::srx
            // and stx), as many as endpoints.
            max_ep_srx_ctx: 256,
            max_ep_stx_ctx: 256,
            ..o.domain_attr
        },
        ..o
    }
}

impl Provider for ShmProvider {
    fn name(&self) -> &str {
        NAME
    }
    fn version(&self) -> u32 {
        VERSION
    }
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        let cfg = Config::from_env()?;
        let mut o = offer();
        o.fabric_attr.api_version = req.version;
        o.tx_attr.size = cfg.tx_size;
        o.rx_attr.size = cfg.rx_size;
        // Every progress shm makes happens inside the application's calls
        // (no thread): control progress is manual when asked for
        // (fi_domain(3)); auto otherwise, as no control operation waits.
        if req
            .hints
            .is_some_and(|h| h.domain_attr.control_progress == progress::FI_PROGRESS_MANUAL)
        {
            o.domain_attr.control_progress = progress::FI_PROGRESS_MANUAL;
        }
        // Addresses as fi_shm(7) derives them from node and service (this
        // process's fi_shm://PID without either): the source under
        // FI_SOURCE, else the destination, the source being fi_shm://PID.
        let named = addr::from_node(req.node, req.service)
            .map(|s| addr::str_bytes(&s))
            .unwrap_or_else(addr::default_src);
        if req.flags & FI_SOURCE != 0 {
            o.src_addr = Some(named);
        } else {
            o.src_addr = Some(addr::default_src());
            o.dest_addr = Some(named);
        }
        Ok(vec![o])
    }
    fn fabric(&self, _attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(fabric::ShmFabric::new(Config::from_env()?)))
    }
    fn tunables(&self) -> Vec<Tunable> {
        tunables()
    }
    /// A peer reads and writes this process's memory itself (cross-process
    /// copies): a peer declared dead by silence may still be copying.
    fn late_writes(&self) -> bool {
        true
    }
}

/// Registers shm with the core, at its place in the built-in order
/// (idempotent).
pub fn register() -> Result<()> {
    ofi_core::registry::register_builtin(Arc::new(ShmProvider))
}
