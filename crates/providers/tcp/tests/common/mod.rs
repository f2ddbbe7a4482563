//! Helpers of the tcp provider's system tests: registering it and asking
//! for its offers. The rest (opening endpoints, completions, data
//! patterns, child processes) is the providers' shared test support,
//! re-exported here.
#![allow(dead_code)]

/// The endpoint the RDM tests open (not every suite names it).
#[allow(unused_imports)]
pub use ofi_testkit::Ep as Rdm;
pub use ofi_testkit::*;

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

/// True when `fd` (a wait fd) becomes readable within `ms` milliseconds.
#[allow(unsafe_code)]
pub fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// The first tcp offer for `hints` on 127.0.0.1 (FI_SOURCE, any port).
pub fn loopback_offer(hints: &ofi_core::Info) -> ofi_core::Info {
    ofi_prov_tcp::register().expect("registering tcp");
    ofi_core::getinfo(
        ofi_core::consts::FI_VERSION_CURRENT,
        Some("127.0.0.1"),
        Some("0"),
        ofi_core::consts::FI_SOURCE,
        Some(hints),
    )
    .expect("getinfo")
    .into_iter()
    .find(|i| i.provider() == "tcp")
    .expect("a tcp offer")
}
