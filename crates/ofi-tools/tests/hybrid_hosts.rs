//! `ofi pingpong` and `ofi bw` over the hybrid offer between two "hosts":
//! network namespaces joined by a veth pair (10.97.N.1 and 10.97.N.2),
//! made distinct nodes with FI_HYBRID_NODE (namespaces share /dev/shm and
//! the boot id, so by default they would be one node). Across the hosts the
//! hybrid endpoint goes through tcp; two processes on host A go through
//! shm. Every run checks its data (`-c`). Needs root and `ip`; skipped,
//! with a message, without them. The namespaces are removed at the end.
//! (crates/providers/hybrid/tests/netns.rs shows which path each pair
//! takes; this test runs the tools on both.)

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Hosts {
    ns: [String; 2],
    ip_a: String,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.ns {
            run("ip", &["netns", "del", n]);
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn hosts() -> Option<Hosts> {
    if !is_root() || !run("ip", &["netns", "list"]) {
        eprintln!("SKIP hybrid across hosts: needs root and iproute2");
        return None;
    }
    let pid = std::process::id();
    let ns = [format!("ofitoolh{pid}a"), format!("ofitoolh{pid}b")];
    let (va, vb) = (
        format!("th{}a", pid % 10_000_000),
        format!("th{}b", pid % 10_000_000),
    );
    let net = pid % 200 + 20;
    let (ipa, ipb) = (format!("10.97.{net}.1/24"), format!("10.97.{net}.2/24"));
    let h = Hosts {
        ns: ns.clone(),
        ip_a: format!("10.97.{net}.1"),
    };
    let [na, nb] = &ns;
    for args in [
        vec!["netns", "add", na],
        vec!["netns", "add", nb],
        vec![
            "link", "add", &va, "netns", na, "type", "veth", "peer", "name", &vb, "netns", nb,
        ],
        vec!["-n", na, "addr", "add", &ipa, "dev", &va],
        vec!["-n", nb, "addr", "add", &ipb, "dev", &vb],
        vec!["-n", na, "link", "set", &va, "up"],
        vec!["-n", nb, "link", "set", &vb, "up"],
        vec!["-n", na, "link", "set", "lo", "up"],
        vec!["-n", nb, "link", "set", "lo", "up"],
    ] {
        assert!(run("ip", &args), "ip {args:?} failed");
    }
    Some(h)
}

/// `ofi ARGS` inside namespace `ns` as node `node`, output to files (a
/// server that outlives its client holds no pipe).
fn spawn(ns: &str, node: &str, args: &[&str], tag: &str) -> (Child, PathBuf, PathBuf) {
    let dir = std::env::temp_dir();
    let f = |k: &str| dir.join(format!("ofi-hyb-hosts-{}-{tag}.{k}", std::process::id()));
    let (out, err) = (f("out"), f("err"));
    let child = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_ofi")])
        .args(args)
        .env("FI_HYBRID_NODE", node)
        .env_remove("FI_PROVIDER")
        .env_remove("FI_TCP_IFACE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawning ofi in a namespace");
    (child, out, err)
}

fn finish((mut c, out, err): (Child, PathBuf, PathBuf), what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let o = std::fs::read_to_string(&out).unwrap_or_default();
    let e = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = (std::fs::remove_file(&out), std::fs::remove_file(&err));
    assert_eq!(status, Some(0), "{what}\nstdout:\n{o}\nstderr:\n{e}");
    o
}

/// A server on host A and a client on `client_ns` as `client_node`; both
/// must succeed, and the client's table has one row per size, every
/// operation acknowledged.
fn pair(h: &Hosts, tool: &str, extra: &[&str], client: (&str, &str), sizes: &[&str], iters: &str) {
    let port = {
        // A port the kernel finds free in the host namespace; the server's
        // namespace is new, so nothing else listens there.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let mut common = vec![tool, "-p", "hybrid", "-e", "rdm", "-c", "-I", iters];
    common.extend_from_slice(extra);
    let size_list = sizes.join(",");
    common.extend_from_slice(&["-S", &size_list]);
    let mut srv_args = common.clone();
    srv_args.extend_from_slice(&["-B", &port]);
    let what = format!("{tool} {extra:?} client on {}", client.1);
    let srv = spawn(&h.ns[0], "host-a", &srv_args, &format!("{tool}-srv"));
    // The client retries its control connection while the server starts.
    std::thread::sleep(Duration::from_millis(300));
    let mut cli_args = common.clone();
    cli_args.extend_from_slice(&["-P", &port, &h.ip_a]);
    let cli = spawn(client.0, client.1, &cli_args, &format!("{tool}-cli"));
    let out = finish(cli, &what);
    finish(srv, &format!("server of {what}"));
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| sizes.iter().any(|s| l.starts_with(&format!("{s} "))))
        .collect();
    assert_eq!(rows.len(), sizes.len(), "{what}: rows in\n{out}");
    for r in rows {
        let f: Vec<&str> = r.split_whitespace().collect();
        assert_eq!((f[1], f[2]), (iters, &*format!("={iters}")), "{what}: {r}");
    }
}

#[test]
fn tools_run_over_hybrid_within_and_across_hosts() {
    let Some(h) = hosts() else {
        return;
    };
    let b = h.ns[1].clone();
    let a = h.ns[0].clone();
    // Across the hosts (tcp path) and within host A (shm path).
    for client in [(&*b, "host-b"), (&*a, "host-a")] {
        pair(&h, "pingpong", &[], client, &["8", "100k"], "50");
        pair(&h, "bw", &["-o", "write"], client, &["4k", "1m"], "100");
        pair(&h, "bw", &["-o", "atomic"], client, &["8"], "100");
    }
}
