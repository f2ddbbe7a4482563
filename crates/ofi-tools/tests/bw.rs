//! End-to-end runs of `ofi bw --local`: every operation on shm with data
//! checks, `-o write` on tcp (which advertises FI_RMA), and injected sends
//! over tcp and udp.

use ofi::consts::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HEADER: &str =
    "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec";

/// Exit status (None: killed after the deadline), stdout and stderr of
/// `ofi ARGS`. Output goes to files, so a server child that outlives the
/// client cannot hold a pipe open.
fn ofi(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir();
    let file =
        |k: &str| -> PathBuf { dir.join(format!("ofi-bw-test-{}-{name}.{k}", std::process::id())) };
    let (out, err) = (file("out"), file("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ofi"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("spawning ofi");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for ofi") {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |p: &PathBuf| {
        let s = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        s
    };
    (status, read(&out), read(&err))
}

/// Checks the table: the header, then one row per size with fi_pingpong's
/// eight columns (`#sent` and `#ack` as `N =N`), numbers where numbers go.
fn assert_table(out: &str, sizes: &[&str], iters: &str) {
    let lines: Vec<&str> = out.lines().collect();
    let h = lines
        .iter()
        .position(|l| *l == HEADER)
        .unwrap_or_else(|| panic!("no header in:\n{out}"));
    for (i, size) in sizes.iter().enumerate() {
        let row = lines
            .get(h + 1 + i)
            .unwrap_or_else(|| panic!("row {i} missing in:\n{out}"));
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f.len(), 8, "row {row:?}");
        assert_eq!(f[0], *size, "row {row:?}");
        assert_eq!(f[1], iters, "row {row:?}");
        assert_eq!(f[2], format!("={iters}"), "row {row:?}");
        let secs = f[4].strip_suffix('s').unwrap_or("x");
        for v in [secs, f[5], f[6], f[7]] {
            let x: f64 = v.parse().unwrap_or_else(|_| panic!("{v:?} in row {row:?}"));
            assert!(x >= 0.0, "row {row:?}");
        }
        assert!(f[6].parse::<f64>().unwrap() > 0.0, "usec/xfer in {row:?}");
    }
}

fn run_ok(name: &str, args: &[&str]) -> String {
    let (status, out, err) = ofi(name, args);
    assert_eq!(
        status,
        Some(0),
        "ofi {args:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    out
}

#[test]
fn bw_send_checks_every_message() {
    let out = run_ok(
        "send",
        &[
            "bw", "--local", "-p", "shm", "-o", "send", "-c", "-S", "64,64k", "-I", "40", "-W", "8",
        ],
    );
    assert_table(&out, &["64", "64k"], "40");
}

#[test]
fn bw_tagged_checks_every_message() {
    let out = run_ok(
        "tagged",
        &[
            "bw", "--local", "-p", "shm", "-o", "tagged", "-c", "-S", "8,5000", "-I", "40", "-W",
            "4",
        ],
    );
    assert_table(&out, &["8", "4.8k"], "40");
}

#[test]
fn bw_write_checks_the_target_region() {
    let out = run_ok(
        "write",
        &[
            "bw", "--local", "-p", "shm", "-o", "write", "-c", "-S", "100,1m", "-I", "20", "-W",
            "8",
        ],
    );
    assert_table(&out, &["100", "1m"], "20");
}

#[test]
fn bw_read_checks_what_it_read() {
    let out = run_ok(
        "read",
        &[
            "bw", "--local", "-p", "shm", "-o", "read", "-c", "-S", "8,300k", "-I", "20", "-W", "8",
        ],
    );
    assert_table(&out, &["8", "300k"], "20");
}

#[test]
fn bw_atomic_sums_to_the_number_of_adds() {
    let out = run_ok(
        "atomic",
        &[
            "bw", "--local", "-p", "shm", "-o", "atomic", "-c", "-S", "8,64", "-I", "50", "-W", "1",
        ],
    );
    assert_table(&out, &["8", "64"], "50");
    let one_way: Vec<&str> = out.lines().filter(|l| l.contains("one-way")).collect();
    assert_eq!(one_way.len(), 2, "one-way lines in:\n{out}");
    assert!(
        one_way[0].contains("8 B FI_UINT64 FI_SUM"),
        "{}",
        one_way[0]
    );
    let v: f64 = one_way[0]
        .split_whitespace()
        .rev()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {:?}", one_way[0]));
    assert!(v > 0.0);
    // A window of fetch-adds on 32-bit elements sums as well.
    let out = run_ok(
        "atomic32",
        &[
            "bw",
            "--local",
            "-p",
            "shm",
            "-o",
            "atomic",
            "--datatype",
            "uint32",
            "-c",
            "-S",
            "4,16",
            "-I",
            "30",
            "-W",
            "8",
        ],
    );
    assert_table(&out, &["4", "16"], "30");
}

/// tcp advertises FI_RMA on RDM endpoints, so `-o write` must run there
/// and land every byte (checked with -c on the target).
#[test]
fn bw_write_on_tcp_checks_the_target_region() {
    let mut hints = ofi::Info::hints();
    hints.caps = FI_RMA;
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
    hints.fabric_attr.prov_name = Some("tcp".into());
    let offers = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints));
    assert!(
        offers.as_ref().is_ok_and(|v| !v.is_empty()),
        "tcp offers no RDM endpoint with FI_RMA: {offers:?}"
    );
    let args = [
        "bw", "--local", "-p", "tcp", "-o", "write", "-c", "-S", "8,64k", "-I", "20",
    ];
    let out = run_ok("tcp-write", &args);
    assert_table(&out, &["8", "64k"], "20");
}

/// Sends small enough to inject complete at once; over tcp and udp (RDM,
/// connections made on first use, manual progress) their bytes leave only
/// while the client keeps progressing, so it must while it waits for the
/// server's count. It waited on the control channel alone and hung.
#[test]
fn bw_injected_sends_reach_the_server_over_tcp_and_udp() {
    for p in ["tcp", "udp"] {
        let name = format!("{p}-inject");
        let args = [
            "bw", "--local", "-p", p, "-o", "send", "-c", "-S", "64,4k", "-I", "50",
        ];
        let out = run_ok(&name, &args);
        assert_table(&out, &["64", "4k"], "50");
    }
}

#[test]
fn bw_rejects_bad_flags_before_connecting() {
    for (args, what) in [
        (&["bw", "-o", "put", "127.0.0.1"][..], "unknown operation"),
        (
            &["bw", "-o", "atomic", "-S", "12", "127.0.0.1"][..],
            "whole numbers",
        ),
        (
            &["bw", "-o", "atomic", "--atomic-op", "cswap", "127.0.0.1"][..],
            "--atomic-op",
        ),
    ] {
        let (status, _, err) = ofi("bad", args);
        assert_eq!(status, Some(2), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
}
