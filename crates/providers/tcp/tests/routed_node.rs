//! getinfo with a node outside every local subnet: a client given the
//! address of a server behind a router gets the offers of the interface
//! the kernel's route to it goes through, as libfabric's tcp does (it used
//! to get FI_ENODATA, since only an interface whose subnet holds the node
//! counted). No route: still FI_ENODATA, naming the destination.
//!
//! Runs in network namespaces it makes: A (10.98.x.1/24 on a veth to B)
//! routes 10.201.x.0/24 through B. The child, inside A, only asks getinfo:
//! choosing the source address connects a datagram socket, which sends
//! nothing. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for `ip netns`);
//! without it the test fails saying so.

mod common;

use common::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_testkit::netns::{ip, Netns};

const NAME: &str = "a_node_behind_a_router_gets_the_routes_interface";
const NODE_ENV: &str = "OFI_TCP_TEST_ROUTED_NODE";

/// The child: getinfo for tcp RDM and MSG to the node (port 9228), one
/// line per offer with its source address, or the error number.
fn ask() {
    ofi_prov_tcp::register().expect("registering tcp");
    let node = std::env::var(NODE_ENV).expect("node");
    for ep in [ep_type::FI_EP_RDM, ep_type::FI_EP_MSG] {
        let mut h = ofi_core::Info::hints();
        h.caps = FI_MSG;
        h.ep_attr.ep_type = ep;
        h.fabric_attr.prov_name = Some("tcp".into());
        match ofi_core::getinfo(FI_VERSION_CURRENT, Some(&node), Some("9228"), 0, Some(&h)) {
            Ok(v) => {
                for o in v {
                    let src = o.src_addr.as_deref().expect("an offer binds somewhere");
                    let src = ofi_inet::addr::decode(src).expect("a socket address");
                    let dest = o.dest_addr.as_deref().expect("the node is the destination");
                    let dest = ofi_inet::addr::decode(dest).expect("a socket address");
                    println!("{TAG}OFFER {ep} {} {dest}", src.ip());
                }
            }
            Err(e) => println!("{TAG}ERR {ep} {} {}", e.code(), e.message()),
        }
    }
}

fn lines(net: &Netns, node: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let out = net
        .exec(0)
        .arg(exe)
        .args(self_args(NAME))
        .env(ROLE, "ask")
        .env(NODE_ENV, node)
        .output()
        .expect("running the child in namespace A");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        // libtest may print "test NAME ... " ahead of the first line.
        .filter_map(|l| l.find(TAG).map(|at| l[at + TAG.len()..].to_string()))
        .collect()
}

#[test]
fn a_node_behind_a_router_gets_the_routes_interface() {
    if role().is_some() {
        ask();
        return;
    }
    let net = Netns::pair("rt", 0);
    let x = net.addrs[0]
        .split('.')
        .nth(2)
        .expect("10.98.x.1")
        .to_string();
    let node = format!("10.201.{x}.7");
    // No route to the node yet: nothing reaches it.
    let before = lines(&net, &node);
    assert_eq!(before.len(), 2, "{before:?}");
    for l in &before {
        assert!(
            l.starts_with("ERR ") && l.contains(&format!(" {} ", errno::FI_ENODATA)),
            "an unreachable node must be FI_ENODATA: {l}"
        );
        assert!(l.contains(&node), "the error names the node: {l}");
    }
    // A route through B: the offers bind A's veth address.
    ip(&[
        "-n",
        &net.names[0],
        "route",
        "add",
        &format!("10.201.{x}.0/24"),
        "via",
        &net.addrs[1],
    ])
    .expect("adding the route");
    let after = lines(&net, &node);
    for ep in [ep_type::FI_EP_RDM, ep_type::FI_EP_MSG] {
        let offers: Vec<&String> = after
            .iter()
            .filter(|l| l.starts_with(&format!("OFFER {ep} ")))
            .collect();
        assert!(!offers.is_empty(), "no offer of type {ep}: {after:?}");
        for l in offers {
            assert_eq!(
                l,
                &format!("OFFER {ep} {} {node}:9228", net.addrs[0]),
                "the offer binds the route's interface and sends to the node"
            );
        }
    }
}
