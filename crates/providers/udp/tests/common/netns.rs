//! Network namespaces the tests create and remove: one namespace whose
//! loopback carries multicast, or two joined by a veth pair (10.x
//! addresses inside them only). A drop guard deletes them even on panic.
//! Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2: without them
//! the tests fail saying so; they never pass without running.

use ofi_prov_test_support::netns::{ip, netns_list};
use std::process::Command;

/// Deletes namespaces of this pattern (`ofiu-<pid>-...`) left behind by a
/// process that no longer exists.
fn remove_stale() {
    for n in netns_list() {
        let Some(rest) = n.strip_prefix("ofiu-") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('-') else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing stale namespace {n} (pid {pid} is gone)");
            let _ = ip(&["netns", "del", &n]);
        }
    }
}

/// Namespaces made by a test; deleted on drop.
pub struct Netns {
    /// The namespaces' names.
    pub names: Vec<String>,
    /// The veth on each side (pair only).
    pub veths: Vec<String>,
    /// 10.98.x.1 and 10.98.x.2 (pair only).
    pub addrs: Vec<String>,
}

fn fail(e: String) -> ! {
    panic!(
        "cannot set up network namespaces: {e}\n\
         These tests need root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; \
         they do not pass without running."
    )
}

impl Netns {
    /// One namespace whose loopback is up and carries multicast
    /// (224.0.0.0/4 routed to it).
    pub fn multicast(kind: &str) -> Netns {
        remove_stale();
        let name = format!("ofiu-{}-{kind}", std::process::id());
        ip(&["netns", "add", &name]).unwrap_or_else(|e| fail(e));
        let n = Netns {
            names: vec![name.clone()],
            veths: Vec::new(),
            addrs: Vec::new(),
        };
        for s in [
            vec!["-n", &name, "link", "set", "lo", "up"],
            vec!["-n", &name, "link", "set", "lo", "multicast", "on"],
            vec!["-n", &name, "route", "add", "224.0.0.0/4", "dev", "lo"],
        ] {
            ip(&s).unwrap_or_else(|e| fail(e));
        }
        n
    }

    /// Two namespaces joined by a veth pair, 10.98.x.1/24 and 10.98.x.2/24,
    /// links up.
    pub fn pair(kind: &str, index: u32) -> Netns {
        remove_stale();
        let pid = std::process::id();
        let x = pid.wrapping_mul(7).wrapping_add(index) % 200 + 20;
        let (a, b) = (format!("ofiu-{pid}-{kind}a"), format!("ofiu-{pid}-{kind}b"));
        let (va, vb) = (format!("oua{pid}{index}"), format!("oub{pid}{index}"));
        ip(&["netns", "add", &a]).unwrap_or_else(|e| fail(e));
        let n = Netns {
            names: vec![a.clone(), b.clone()],
            veths: vec![va.clone(), vb.clone()],
            addrs: vec![format!("10.98.{x}.1"), format!("10.98.{x}.2")],
        };
        let (aa, ab) = (format!("{}/24", n.addrs[0]), format!("{}/24", n.addrs[1]));
        for s in [
            vec!["netns", "add", &b],
            vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
            vec!["link", "set", &va, "netns", &a],
            vec!["link", "set", &vb, "netns", &b],
            vec!["-n", &a, "addr", "add", &aa, "dev", &va],
            vec!["-n", &b, "addr", "add", &ab, "dev", &vb],
            vec!["-n", &a, "link", "set", &va, "up"],
            vec!["-n", &b, "link", "set", &vb, "up"],
            vec!["-n", &a, "link", "set", "lo", "up"],
            vec!["-n", &b, "link", "set", "lo", "up"],
        ] {
            ip(&s).unwrap_or_else(|e| fail(e));
        }
        n
    }

    /// This test binary's test `name` as `role` inside namespace `ns`
    /// (an index into `names`).
    pub fn child(&self, ns: usize, name: &str, role: &str) -> Command {
        let exe = std::env::current_exe().expect("current_exe");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[ns]])
            .arg(exe)
            .args(super::self_args(name))
            .env(super::ROLE, role);
        c
    }

    /// Sets namespace `ns`'s veth down or up.
    pub fn link(&self, ns: usize, up: bool) {
        ip(&[
            "-n",
            &self.names[ns],
            "link",
            "set",
            &self.veths[ns],
            if up { "up" } else { "down" },
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
        if let Some(v) = self.veths.first() {
            let _ = Command::new("ip")
                .args(["link", "del", v])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
