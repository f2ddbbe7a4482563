//! Helpers of the udp provider's system tests: registering it and asking
//! for its offers. The rest (opening endpoints, completions, data
//! patterns, child processes) is the providers' shared test support,
//! re-exported here.
#![allow(dead_code)]

pub mod netns;

pub use ofi_testkit::*;

/// getinfo for udp offers of `ep_type` with FI_MSG bound to `node`
/// (FI_SOURCE, any port), its error as it comes.
pub fn request(ep_type: u32, node: &str) -> ofi_core::error::Result<Vec<ofi_core::Info>> {
    ofi_prov_udp::register().expect("registering udp");
    request_of("udp", ep_type, node)
}

/// The udp offer of `ep_type` bound to `node` (FI_SOURCE, any port).
pub fn offer(ep_type: u32, node: &str) -> ofi_core::Info {
    ofi_prov_udp::register().expect("registering udp");
    offer_of("udp", ep_type, node)
}
