//! `ofi pingpong` and `ofi bw` over the hybrid offer between two "hosts":
//! network namespaces joined by a veth pair (10.98.N.1 and 10.98.N.2),
//! made distinct nodes with FI_HYBRID_NODE (namespaces share /dev/shm and
//! the boot id, so by default they would be one node). Across the hosts the
//! hybrid endpoint goes through tcp; two processes on host A go through
//! shm. Every run checks its data (`-c`). Needs root and `ip` (the shared
//! fixture fails without them, never passes without running). The
//! namespaces are removed at the end.
//! (crates/providers/hybrid/tests/netns.rs shows which path each pair
//! takes; this test runs the tools on both.)

use ofi_testkit::netns::Netns;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `ofi ARGS` inside namespace `ns` as node `node`, output to files (a
/// server that outlives its client holds no pipe).
fn spawn(
    h: &Netns,
    (ns, node, net): (usize, &str, &str),
    args: &[&str],
    tag: &str,
) -> (Child, PathBuf, PathBuf) {
    let dir = std::env::temp_dir();
    let f = |k: &str| dir.join(format!("ofi-hyb-hosts-{}-{tag}.{k}", std::process::id()));
    let (out, err) = (f("out"), f("err"));
    let child = h
        .exec(ns)
        .arg(env!("CARGO_BIN_EXE_ofi"))
        .args(args)
        .env("FI_HYBRID_NODE", node)
        .env("FI_HYBRID_NET", net)
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
fn pair(
    h: &Netns,
    net: &str,
    tool: &str,
    extra: &[&str],
    client: (usize, &str),
    sizes: &[&str],
    iters: &str,
) {
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
    let what = format!(
        "{tool} {extra:?} client on {}, network path {net}",
        client.1
    );
    let srv = spawn(
        h,
        (0, "host-a", net),
        &srv_args,
        &format!("{net}-{tool}-srv"),
    );
    // The client retries its control connection while the server starts.
    std::thread::sleep(Duration::from_millis(300));
    let mut cli_args = common.clone();
    cli_args.extend_from_slice(&["-P", &port, &h.addrs[0]]);
    let cli = spawn(
        h,
        (client.0, client.1, net),
        &cli_args,
        &format!("{net}-{tool}-cli"),
    );
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
    let h = Netns::pair("tools", 0);
    // Across the hosts (tcp path) and within host A (shm path).
    for client in [(1, "host-b"), (0, "host-a")] {
        pair(&h, "tcp", "pingpong", &[], client, &["8", "100k"], "50");
        pair(
            &h,
            "tcp",
            "bw",
            &["-o", "write"],
            client,
            &["4k", "1m"],
            "100",
        );
        pair(&h, "tcp", "bw", &["-o", "atomic"], client, &["8"], "100");
    }
}

/// The same across the hosts with FI_HYBRID_NET=udp: the network path on
/// ofi's udp provider (its reliability protocol over the veth).
#[test]
fn tools_run_over_hybrid_with_a_udp_network_path() {
    let h = Netns::pair("toolsu", 1);
    let client = (1, "host-b");
    pair(&h, "udp", "pingpong", &[], client, &["8", "100k"], "50");
    pair(
        &h,
        "udp",
        "bw",
        &["-o", "write"],
        client,
        &["4k", "1m"],
        "100",
    );
    pair(&h, "udp", "bw", &["-o", "atomic"], client, &["8"], "100");
}
