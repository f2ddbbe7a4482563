//! Provider discovery: asks `getinfo` for every offer that can do message
//! and tagged transfers on a reliable-datagram (RDM) endpoint, and prints
//! each offer's provider, fabric, domain and capabilities.
//!
//! Run with `cargo run --release -p ofi --example discover`.
#![allow(unsafe_code)]

use ofi::consts::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut hints = ofi::Info::hints();
    hints.caps = FI_MSG | FI_TAGGED;
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;

    let offers = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints))?;
    println!(
        "{} offer(s) for FI_MSG | FI_TAGGED on FI_EP_RDM",
        offers.len()
    );
    for (i, info) in offers.iter().enumerate() {
        println!("offer {i}:");
        println!("    provider: {}", info.provider());
        println!(
            "    fabric:   {}",
            info.fabric_attr.name.as_deref().unwrap_or("?")
        );
        println!(
            "    domain:   {}",
            info.domain_attr.name.as_deref().unwrap_or("?")
        );
        println!("    caps:     {}", bits_to_string(CAP_NAMES, info.caps));
    }
    if offers.is_empty() {
        return Err("no provider offers FI_MSG | FI_TAGGED on FI_EP_RDM".into());
    }
    Ok(())
}
