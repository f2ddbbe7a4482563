//! Bit sets with libfabric's values: [`Caps`], [`Mode`], [`OpFlags`],
//! [`MsgOrder`], [`MrAccess`], [`MrMode`].

use crate::consts::{self, mr_mode, order, NameTable};
use crate::error::Error;
use std::fmt;
use std::str::FromStr;

/// Display as `fi_tostr` prints (`[ FI_MSG, FI_TAGGED ]`, unnamed bits in
/// hex), parse `FI_MSG|FI_TAGGED` or `msg,tagged`, convert to the raw word.
macro_rules! flag_text {
    ($t:ident, $raw:ty, $names:expr, $prefix:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&consts::bits_to_string($names, u64::from(self.bits())))
            }
        }
        impl FromStr for $t {
            type Err = Error;
            /// Names (`FI_MSG`, or without the prefix: `msg`) and hex words, separated by `|`, `,` or spaces.
            fn from_str(s: &str) -> Result<Self, Error> {
                let bits = consts::parse_bits($names, $prefix, s)
                    .map_err(|e| Error::inval(format!("{}: {e}", stringify!($t))))?;
                let raw = <$raw>::try_from(bits).map_err(|_| {
                    Error::inval(format!("{}: {bits:#x} does not fit", stringify!($t)))
                })?;
                Ok($t::from_bits_retain(raw))
            }
        }
        impl From<$t> for $raw {
            fn from(v: $t) -> $raw {
                v.bits()
            }
        }
        impl From<$raw> for $t {
            /// Keeps every bit, named or not (use `from_bits` to refuse unknown ones).
            fn from(v: $raw) -> $t {
                $t::from_bits_retain(v)
            }
        }
    };
}

bitflags::bitflags! {
    /// Capabilities (`fi_info.caps`, `tx_attr.caps`, `rx_attr.caps`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Caps: u64 {
        /// Message send and receive.
        const MSG = consts::FI_MSG;
        /// Remote memory access.
        const RMA = consts::FI_RMA;
        /// Tagged messages.
        const TAGGED = consts::FI_TAGGED;
        /// Remote atomics.
        const ATOMIC = consts::FI_ATOMIC;
        /// Multicast.
        const MULTICAST = consts::FI_MULTICAST;
        /// Collectives.
        const COLLECTIVE = consts::FI_COLLECTIVE;
        /// Initiate RMA reads and atomic fetches.
        const READ = consts::FI_READ;
        /// Initiate RMA writes and atomics.
        const WRITE = consts::FI_WRITE;
        /// Receive messages.
        const RECV = consts::FI_RECV;
        /// Send messages.
        const SEND = consts::FI_SEND;
        /// Be the target of RMA reads.
        const REMOTE_READ = consts::FI_REMOTE_READ;
        /// Be the target of RMA writes and atomics.
        const REMOTE_WRITE = consts::FI_REMOTE_WRITE;
        /// One receive buffer takes many messages.
        const MULTI_RECV = consts::FI_MULTI_RECV;
        /// Remote completion data.
        const REMOTE_CQ_DATA = consts::FI_REMOTE_CQ_DATA;
        /// Triggered operations.
        const TRIGGER = consts::FI_TRIGGER;
        /// Fenced operations.
        const FENCE = consts::FI_FENCE;
        /// Variable-length messages.
        const VARIABLE_MSG = consts::FI_VARIABLE_MSG;
        /// RMA to persistent memory.
        const RMA_PMEM = consts::FI_RMA_PMEM;
        /// The source address on error completions.
        const SOURCE_ERR = consts::FI_SOURCE_ERR;
        /// Peers on this node.
        const LOCAL_COMM = consts::FI_LOCAL_COMM;
        /// Peers on other nodes.
        const REMOTE_COMM = consts::FI_REMOTE_COMM;
        /// Shared address vectors.
        const SHARED_AV = consts::FI_SHARED_AV;
        /// Events for remote RMA accesses.
        const RMA_EVENT = consts::FI_RMA_EVENT;
        /// The source address of received messages.
        const SOURCE = consts::FI_SOURCE;
        /// Named receive contexts.
        const NAMED_RX_CTX = consts::FI_NAMED_RX_CTX;
        /// Receives may name the source they accept.
        const DIRECTED_RECV = consts::FI_DIRECTED_RECV;
        /// Device (heterogeneous) memory.
        const HMEM = consts::FI_HMEM;
        /// User ids in address vectors.
        const AV_USER_ID = consts::FI_AV_USER_ID;
        /// Peer providers.
        const PEER = consts::FI_PEER;
    }
}
flag_text!(Caps, u64, consts::CAP_NAMES, "FI_");

bitflags::bitflags! {
    /// Modes (`fi_info.mode`): what the application agrees to do for the
    /// provider (hints), or what the provider requires (offers).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Mode: u64 {
        /// A `fi_context` per operation.
        const CONTEXT = consts::FI_CONTEXT;
        /// Message prefix space.
        const MSG_PREFIX = consts::FI_MSG_PREFIX;
        /// iov arrays stay valid until completion.
        const ASYNC_IOV = consts::FI_ASYNC_IOV;
        /// Remote CQ data only on receive completions.
        const RX_CQ_DATA = consts::FI_RX_CQ_DATA;
        /// Local memory registration (old).
        const LOCAL_MR = consts::FI_LOCAL_MR;
        /// Completion flags only as notification.
        const NOTIFY_FLAGS_ONLY = consts::FI_NOTIFY_FLAGS_ONLY;
        /// Restricted completions.
        const RESTRICTED_COMP = consts::FI_RESTRICTED_COMP;
        /// A `fi_context2` per operation.
        const CONTEXT2 = consts::FI_CONTEXT2;
        /// Buffered receives.
        const BUFFERED_RECV = consts::FI_BUFFERED_RECV;
    }
}
flag_text!(Mode, u64, consts::MODE_NAMES, "FI_");

bitflags::bitflags! {
    /// Operation flags (`tx_attr.op_flags`, `rx_attr.op_flags`, and the
    /// flags of the `*msg` calls).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct OpFlags: u64 {
        /// One buffer receives many messages.
        const MULTI_RECV = consts::FI_MULTI_RECV;
        /// Carries remote CQ data.
        const REMOTE_CQ_DATA = consts::FI_REMOTE_CQ_DATA;
        /// More operations follow.
        const MORE = consts::FI_MORE;
        /// Peek for a matching message.
        const PEEK = consts::FI_PEEK;
        /// Claim a peeked message.
        const CLAIM = consts::FI_CLAIM;
        /// Discard a peeked message.
        const DISCARD = consts::FI_DISCARD;
        /// Triggered.
        const TRIGGER = consts::FI_TRIGGER;
        /// Fenced.
        const FENCE = consts::FI_FENCE;
        /// Write a completion.
        const COMPLETION = consts::FI_COMPLETION;
        /// The buffer may be reused when the call returns.
        const INJECT = consts::FI_INJECT;
        /// Complete once the buffer may be reused.
        const INJECT_COMPLETE = consts::FI_INJECT_COMPLETE;
        /// Complete once the data left the initiator.
        const TRANSMIT_COMPLETE = consts::FI_TRANSMIT_COMPLETE;
        /// Complete once the data is at the target.
        const DELIVERY_COMPLETE = consts::FI_DELIVERY_COMPLETE;
        /// Complete once the data is durable at the target.
        const COMMIT_COMPLETE = consts::FI_COMMIT_COMPLETE;
        /// Complete once the message is matched.
        const MATCH_COMPLETE = consts::FI_MATCH_COMPLETE;
    }
}
flag_text!(OpFlags, u64, consts::OP_FLAG_NAMES, "FI_");

bitflags::bitflags! {
    /// Message ordering (`tx_attr.msg_order`, `rx_attr.msg_order`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct MsgOrder: u64 {
        /// Read after read.
        const RAR = order::FI_ORDER_RAR;
        /// Read after write.
        const RAW = order::FI_ORDER_RAW;
        /// Read after send.
        const RAS = order::FI_ORDER_RAS;
        /// Write after read.
        const WAR = order::FI_ORDER_WAR;
        /// Write after write.
        const WAW = order::FI_ORDER_WAW;
        /// Write after send.
        const WAS = order::FI_ORDER_WAS;
        /// Send after read.
        const SAR = order::FI_ORDER_SAR;
        /// Send after write.
        const SAW = order::FI_ORDER_SAW;
        /// Send after send.
        const SAS = order::FI_ORDER_SAS;
        /// Data ordering.
        const DATA = order::FI_ORDER_DATA;
    }
}
flag_text!(MsgOrder, u64, consts::ORDER_NAMES, "FI_ORDER_");

bitflags::bitflags! {
    /// Access rights of a registered memory region (`fi_mr_reg`'s access).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct MrAccess: u64 {
        /// Local sends from it.
        const SEND = consts::FI_SEND;
        /// Local receives into it.
        const RECV = consts::FI_RECV;
        /// Local RMA reads into it.
        const READ = consts::FI_READ;
        /// Local RMA writes from it.
        const WRITE = consts::FI_WRITE;
        /// Peers read it.
        const REMOTE_READ = consts::FI_REMOTE_READ;
        /// Peers write it (and apply atomics to it).
        const REMOTE_WRITE = consts::FI_REMOTE_WRITE;
    }
}
flag_text!(MrAccess, u64, consts::CAP_NAMES, "FI_");

/// The MR mode names as one table (MR_MODE_NAMES, typed for [`MrMode`]).
const MR_NAMES: NameTable = consts::MR_MODE_NAMES;

bitflags::bitflags! {
    /// Memory-registration modes (`domain_attr.mr_mode`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct MrMode: u32 {
        /// Old basic mode (VIRT_ADDR | ALLOCATED | PROV_KEY).
        const BASIC = mr_mode::FI_MR_BASIC;
        /// Old scalable mode (none of them).
        const SCALABLE = mr_mode::FI_MR_SCALABLE;
        /// Local buffers must be registered.
        const LOCAL = mr_mode::FI_MR_LOCAL;
        /// Raw keys.
        const RAW = mr_mode::FI_MR_RAW;
        /// RMA addresses are virtual addresses.
        const VIRT_ADDR = mr_mode::FI_MR_VIRT_ADDR;
        /// Registered memory must be allocated.
        const ALLOCATED = mr_mode::FI_MR_ALLOCATED;
        /// The provider chooses keys.
        const PROV_KEY = mr_mode::FI_MR_PROV_KEY;
        /// MMU notification.
        const MMU_NOTIFY = mr_mode::FI_MR_MMU_NOTIFY;
        /// RMA events need the region bound.
        const RMA_EVENT = mr_mode::FI_MR_RMA_EVENT;
        /// Regions are bound to endpoints.
        const ENDPOINT = mr_mode::FI_MR_ENDPOINT;
        /// Device memory.
        const HMEM = mr_mode::FI_MR_HMEM;
        /// Collective registration.
        const COLLECTIVE = mr_mode::FI_MR_COLLECTIVE;
    }
}
flag_text!(MrMode, u32, MR_NAMES, "FI_MR_");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_keep_libfabric_values_and_print_like_fi_tostr() {
        assert_eq!(u64::from(Caps::MSG | Caps::TAGGED), (1 << 1) | (1 << 3));
        assert_eq!(
            (Caps::MSG | Caps::TAGGED).to_string(),
            "[ FI_MSG, FI_TAGGED ]"
        );
        assert_eq!(MrMode::VIRT_ADDR.bits(), 1 << 4);
        assert_eq!(OpFlags::DELIVERY_COMPLETE.bits(), 1 << 28);
        assert_eq!(Mode::CONTEXT.bits(), 1 << 59);
        assert_eq!(
            "msg|FI_TAGGED".parse::<Caps>().unwrap(),
            Caps::MSG | Caps::TAGGED
        );
        assert_eq!(
            "virt_addr,prov_key".parse::<MrMode>().unwrap(),
            MrMode::VIRT_ADDR | MrMode::PROV_KEY
        );
        let e = "msg|nonsense".parse::<Caps>().unwrap_err();
        assert!(e.message().contains("nonsense"), "{e}");
    }

    #[test]
    fn unknown_bits_are_kept_or_refused_as_asked() {
        let raw = consts::FI_MSG | (1 << 62);
        assert_eq!(Caps::from(raw).bits(), raw, "From keeps unnamed bits");
        assert_eq!(Caps::from_bits(raw), None, "from_bits refuses them");
        assert_eq!(
            Caps::from(raw).to_string(),
            "[ FI_MSG, 0x4000000000000000 ]"
        );
        assert!(
            "0x30000000000".parse::<MrMode>().is_err(),
            "wider than mr_mode"
        );
    }
}
