//! Helpers of the tcp provider's system tests: registering it and asking
//! for its offers. The rest (opening endpoints, completions, data
//! patterns, child processes) is the providers' shared test support,
//! re-exported here.
#![allow(dead_code)]

/// The endpoint the RDM tests open (not every suite names it).
#[allow(unused_imports)]
pub use ofi_prov_test_support::Ep as Rdm;
pub use ofi_prov_test_support::*;

/// getinfo for tcp offers of `ep_type` with FI_MSG bound to `node`
/// (FI_SOURCE, any port), its error as it comes.
pub fn request(ep_type: u32, node: &str) -> ofi_core::error::Result<Vec<ofi_core::Info>> {
    ofi_prov_tcp::register().expect("registering tcp");
    request_of("tcp", ep_type, node)
}

/// The tcp offer of `ep_type` bound to `node` (FI_SOURCE, any port).
pub fn offer(ep_type: u32, node: &str) -> ofi_core::Info {
    ofi_prov_tcp::register().expect("registering tcp");
    offer_of("tcp", ep_type, node)
}
