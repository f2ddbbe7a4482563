//! Typed configuration: capability, mode, operation-flag, message-order,
//! access and mr_mode sets as bitflags types, and endpoint, address-format,
//! threading, progress and AV kinds as enums.
//!
//! Each keeps libfabric's numeric value underneath, so it converts both ways
//! with the raw [`Info`](crate::info::Info) fields the C ABI reads: a set
//! from raw bits keeps bits it has no name for ([`Caps::from_bits_retain`]),
//! or refuses them ([`Caps::from_bits`]); an enum from a number it does not
//! know is refused with [`UnknownValue`]. They print and parse as `ofi info`
//! does (`[ FI_MSG, FI_TAGGED ]`, `FI_EP_RDM`; `"msg|tagged".parse()`).

mod flags;
mod kinds;

pub use flags::{Caps, Mode, MrAccess, MrMode, MsgOrder, OpFlags};
pub use kinds::{AddrFormat, AvType, EpType, Progress, Protocol, Threading, UnknownValue};
