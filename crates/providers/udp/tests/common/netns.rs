//! The shared namespace fixture (`ofi_testkit::netns::Netns`)
//! and how this suite runs its children inside one.

pub use ofi_testkit::netns::Netns;
use std::process::Command;

/// This test binary's test `name` as `role` inside namespace `ns` of `n`
/// (an index into its names).
pub fn child_in(n: &Netns, ns: usize, name: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = n.exec(ns);
    c.arg(exe)
        .args(super::self_args(name))
        .env(super::ROLE, role);
    c
}
