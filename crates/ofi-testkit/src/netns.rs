//! Network namespaces the tests create and remove: one namespace whose
//! loopback carries multicast, or two joined by a veth pair (10.98.x
//! addresses inside them only). A drop guard deletes them even on panic.
//! Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2: without them
//! the tests fail saying so; they never pass without running.

use std::process::Command;

/// Runs `ip ARGS`.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The names of the network namespaces that exist.
pub fn netns_list() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("running `ip netns list` (is iproute2 installed?)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Deletes namespaces of this pattern (`ofit-<pid>-...`) left behind by a
/// process that no longer exists.
fn remove_stale() {
    for n in netns_list() {
        let Some(rest) = n.strip_prefix("ofit-") else {
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
        let name = format!("ofit-{}-{kind}", std::process::id());
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
        let (a, b) = (format!("ofit-{pid}-{kind}a"), format!("ofit-{pid}-{kind}b"));
        let (va, vb) = (
            format!("ota{}{index}", pid % 1_000_000),
            format!("otb{}{index}", pid % 1_000_000),
        );
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

    /// `ip netns exec` into namespace `ns` (an index into `names`): add
    /// the program and its arguments.
    pub fn exec(&self, ns: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[ns]]);
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
