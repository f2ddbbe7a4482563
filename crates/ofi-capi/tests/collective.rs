//! Collectives through the drop-in `libfabric.so.1`: tests/c/coll.c (built
//! against the system's headers, unmodified libfabric API) forks N
//! processes that join AV sets' groups and run every collective over each
//! built-in RDM provider; one process killed mid-collective must turn
//! into errors at the others within a bound. See the comment at the top
//! of coll.c for what each scenario checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory of this test binary.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// A directory holding a `libfabric.so.1` link to the `libfabric.so` cargo
/// built with this test.
fn ofi_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let so = [deps.join("libfabric.so"), deps.join("../libfabric.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no libfabric.so in {} or its parent", deps.display()));
    let dir = scratch("coll-lib");
    let link = dir.join("libfabric.so.1");
    let _ = std::fs::remove_file(&link);
    let _ = std::os::unix::fs::symlink(&so, &link);
    assert!(link.exists(), "no link {}", link.display());
    dir
}

/// Builds tests/c/coll.c once per test binary run.
fn build() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
        let exe = scratch("coll").join("coll");
        let r = Command::new("gcc")
            .args(["-std=gnu11", "-O1", "-Wall", "-Werror", "-I"])
            .arg(&src_dir)
            .arg("-o")
            .arg(&exe)
            .arg(src_dir.join("coll.c"))
            .arg("-lfabric")
            .output()
            .expect("gcc runs (install gcc and libfabric-dev)");
        assert!(
            r.status.success(),
            "gcc coll.c failed:\n{}",
            String::from_utf8_lossy(&r.stderr)
        );
        exe
    })
    .clone()
}

/// Runs `coll PROV N SCENARIO` on ofi's library, bounded to 200 s; it
/// must pass (last line "ALL OK") and have loaded ofi's library.
fn run(prov: &str, n: usize, scenario: &str) {
    run_env(prov, n, scenario, &[]);
}

/// [`run`] with extra environment variables.
fn run_env(prov: &str, n: usize, scenario: &str, env: &[(&str, &str)]) {
    let exe = build();
    let dir = ofi_lib_dir();
    let mut child = Command::new(&exe)
        .args([prov, &n.to_string(), scenario])
        .env_remove("FI_PROVIDER")
        .env_remove("FI_LOG_LEVEL")
        .env_remove("FI_COLL_HELD_BYTES")
        .env_remove("FI_COLL_BOARD")
        .env("FI_TCP_IFACE", "lo")
        .env("FI_UDP_IFACE", "lo")
        .env("LD_LIBRARY_PATH", &dir)
        .env("OFI_CLIENT_LIB", "ofi")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start coll");
    let end = Instant::now() + Duration::from_secs(200);
    let mut status = None;
    while Instant::now() < end {
        if let Ok(Some(s)) = child.try_wait() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let o = child.wait_with_output().expect("coll output");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let report = format!(
        "coll {prov} {n} {scenario}{}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}",
        if status.is_none() { " (timed out)" } else { "" }
    );
    let ok = status.is_some_and(|s| s.success()) && stdout.lines().last() == Some("ALL OK");
    assert!(ok, "{report}");
    let loaded = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lib: "))
        .unwrap_or("");
    assert!(
        Path::new(loaded) == dir.join("libfabric.so.1")
            || Path::new(loaded) == std::fs::canonicalize(dir.join("libfabric.so.1")).unwrap(),
        "coll loaded {loaded:?}, not ofi's library\n{report}"
    );
}

/// 2, 3, 4 and 8 processes on shm: every collective, AV set operations,
/// two groups at once, bad input; the op x datatype matrix of allreduce at
/// 3 and 4.
#[test]
fn shm_two_three_four_and_eight_processes() {
    run("shm", 2, "basic");
    run("shm", 3, "all");
    run("shm", 4, "all");
    run("shm", 8, "basic");
    // The same group over frames: every member refuses the board.
    run_env("shm", 3, "all", &[("FI_COLL_BOARD", "0")]);
}

/// The same over tcp.
#[test]
fn tcp_two_three_four_and_eight_processes() {
    run("tcp", 2, "basic");
    run("tcp", 3, "basic");
    run("tcp", 4, "all");
    run("tcp", 8, "basic");
}

/// Over udp's and hybrid's RDM endpoints.
#[test]
fn udp_and_hybrid() {
    run("udp", 3, "basic");
    run("hybrid", 4, "all");
    run("hybrid", 2, "basic");
}

/// A process killed between collectives (on shm's board, where no frame to
/// it fails) and in the middle of a large allreduce: the others'
/// operations end within the bound (the next barrier and allreduce with an
/// error), no hang.
#[test]
fn a_process_killed_mid_collective() {
    run("shm", 3, "kill");
    run("shm", 3, "killmid");
    run("tcp", 4, "killmid");
    run("hybrid", 3, "killmid");
}

/// A broadcast root far ahead of the others, with 32 KiB held per group:
/// frames wait with the provider instead of failing the group.
#[test]
fn a_root_far_ahead_waits_for_the_others() {
    let small = [("FI_COLL_HELD_BYTES", "32k")];
    run_env("shm", 2, "ahead", &small);
    run_env("tcp", 3, "ahead", &small);
    run_env("hybrid", 2, "ahead", &small);
}
