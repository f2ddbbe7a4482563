//! What an endpoint running the core offers, whichever transport carries
//! the core's bytes: its capabilities, transmit and receive attributes,
//! ordering, message sizes and memory registration fields.

use super::{INJECT_SIZE, IOV_LIMIT, RMA_IOV_LIMIT};
use ofi_core::consts::*;
use ofi_core::info::{Info, RxAttr, TxAttr, RX_CAPS, TX_CAPS};

/// The ordering that holds between two operations to one peer (one
/// ordered stream per peer). The target executes requests in stream
/// order: a WRITE's data is placed, an atomic applied and a READ's data
/// captured before the next frame is read, and a message is matched when
/// it arrives; so reads and writes are ordered among themselves (RAR, RAW,
/// WAR, WAW) and sends after them (SAR, SAW), and sends among themselves
/// (SAS). Writes and reads after a send are not ordered (no WAS, RAS): a
/// send that waits for a receive as unexpected, or whose data follows its
/// rendezvous, lands after them.
pub const MSG_ORDER: u64 = order::FI_ORDER_RAR
    | order::FI_ORDER_RAW
    | order::FI_ORDER_WAR
    | order::FI_ORDER_WAW
    | order::FI_ORDER_SAR
    | order::FI_ORDER_SAW
    | order::FI_ORDER_SAS;

/// The one-sided capabilities: RMA and atomics both ways, executed by the
/// target against its registered regions (persistent memory included),
/// triggered operations and fences.
pub const ONE_SIDED_CAPS: u64 = FI_RMA
    | FI_ATOMIC
    | FI_READ
    | FI_WRITE
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_RMA_EVENT
    | FI_RMA_PMEM
    | FI_TRIGGER
    | FI_FENCE;

/// The capabilities of a connected (MSG) endpoint running the core.
pub const MSG_CAPS: u64 =
    FI_MSG | FI_SEND | FI_RECV | FI_MULTI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM | ONE_SIDED_CAPS;

/// The capabilities of an RDM endpoint running the core: an MSG
/// endpoint's, with tagged messages, source addresses and directed
/// receives.
pub const RDM_CAPS: u64 = MSG_CAPS | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV;

/// Fills in offer `o` for an endpoint running the core with capabilities
/// `caps`: the capabilities, the transmit and receive attributes, the
/// endpoint's message and ordering sizes and the domain's memory
/// registration fields. The endpoint's type, protocol and tag format, and
/// the rest of the domain, are the provider's.
pub fn fill(o: &mut Info, caps: u64) {
    o.caps = caps;
    o.tx_attr = TxAttr {
        caps: caps & TX_CAPS,
        op_flags: FI_INJECT_COMPLETE,
        msg_order: MSG_ORDER,
        comp_order: order::FI_ORDER_NONE,
        inject_size: INJECT_SIZE,
        size: 1024,
        iov_limit: IOV_LIMIT,
        rma_iov_limit: RMA_IOV_LIMIT,
        ..Default::default()
    };
    o.rx_attr = RxAttr {
        caps: caps & RX_CAPS,
        msg_order: MSG_ORDER,
        comp_order: order::FI_ORDER_NONE,
        size: 1024,
        iov_limit: IOV_LIMIT,
        ..Default::default()
    };
    let e = &mut o.ep_attr;
    e.max_msg_size = usize::MAX >> 1;
    e.max_order_raw_size = usize::MAX >> 1;
    e.max_order_war_size = usize::MAX >> 1;
    e.max_order_waw_size = usize::MAX >> 1;
    let d = &mut o.domain_attr;
    d.mr_mode = mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED;
    d.mr_key_size = 8;
    d.mr_iov_limit = IOV_LIMIT;
    d.mr_cnt = 65536;
}
