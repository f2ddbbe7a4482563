//! `ofi storage bench` against a real `ofi storage target` on a file,
//! over shm and over tcp on loopback: a verified write pass, then verified
//! random and sequential reads; the JSON record's fields; the bytes in the
//! target's file hold the pattern the bench wrote (offset and seed in
//! every sector); a block overwritten behind the bench's back fails a
//! verified read with its offset; bad flags get clear errors.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a step (start-up, one bench run) may take before the test
/// calls it a hang.
const STEP: Duration = Duration::from_secs(60);

/// A child process killed at the end.
struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory removed at the end.
struct Dir(PathBuf);
impl Dir {
    fn new(tag: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("ofi-storage-bench-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Dir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ofi storage target -p PROV` on `file` (created at `size`), bound to
/// loopback on a port it picks; the process and its port.
fn start_target(dir: &Path, prov: &str, file: &Path, size: &str) -> (Proc, u16) {
    let out = dir.join(format!("target-{prov}.out"));
    let err = dir.join(format!("target-{prov}.err"));
    let child = Command::new(env!("CARGO_BIN_EXE_ofi"))
        .args([
            "storage",
            "target",
            "-p",
            prov,
            "-s",
            "127.0.0.1",
            "-B",
            "0",
        ])
        .args(["--size", size])
        .arg(file)
        .env_remove("FI_PROVIDER")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("spawning ofi");
    let mut t = Proc { child, out, err };
    let deadline = Instant::now() + STEP;
    loop {
        let out = t.stdout();
        if let Some(rest) = out.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap_or("");
            let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
            return (t, port.expect("the target's port"));
        }
        if let Ok(Some(s)) = t.child.try_wait() {
            panic!("the target exited ({s}): {}", t.stderr());
        }
        assert!(Instant::now() < deadline, "the target did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ofi storage bench ARGS` run to its end (bounded by `timeout(1)`).
fn bench(args: &[&str]) -> Output {
    let secs = STEP.as_secs().to_string();
    Command::new("timeout")
        .args([
            "-k",
            "5",
            &secs,
            env!("CARGO_BIN_EXE_ofi"),
            "storage",
            "bench",
        ])
        .args(args)
        .env_remove("FI_PROVIDER")
        .stdin(Stdio::null())
        .output()
        .expect("running ofi storage bench")
}

fn bench_ok(args: &[&str]) -> String {
    let o = bench(args);
    assert!(
        o.status.success(),
        "ofi storage bench {args:?} failed ({:?}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The value at `path` (keys separated by '.') in a flat JSON record, as
/// text: enough for the bench's one-line record, no JSON crate needed.
fn field<'a>(json: &'a str, path: &str) -> &'a str {
    let mut rest = json;
    for key in path.split('.') {
        let pat = format!("\"{key}\":");
        let at = rest
            .find(&pat)
            .unwrap_or_else(|| panic!("no {path} in {json}"));
        rest = &rest[at + pat.len()..];
    }
    let end = rest
        .find([',', '}'])
        .unwrap_or_else(|| panic!("{path} unterminated in {json}"));
    rest[..end].trim_matches('"')
}

fn num(json: &str, path: &str) -> f64 {
    field(json, path)
        .parse()
        .unwrap_or_else(|_| panic!("{path} is not a number in {json}"))
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The documented verify pattern of the 512-byte sector at `off`.
fn sector(off: u64, seed: u64) -> Vec<u8> {
    let mut s = Vec::with_capacity(512);
    s.extend_from_slice(b"ofibench");
    s.extend_from_slice(&off.to_le_bytes());
    s.extend_from_slice(&seed.to_le_bytes());
    let mut x = off ^ seed.rotate_left(32);
    while s.len() < 512 {
        x = splitmix(x);
        s.extend_from_slice(&x.to_le_bytes());
    }
    s
}

const SEED: &str = "4242";
const SPAN: u64 = 4 << 20;

/// A verified write pass over the first 4 MiB, verified reads, the JSON
/// record, and the file's bytes.
fn write_then_read(prov: &str) {
    let d = Dir::new(prov);
    let file = d.path("volume.img");
    let (_t, port) = start_target(&d.0, prov, &file, "8M");
    let p = port.to_string();
    let net = ["-p", prov, "-P", p.as_str()];
    let span = SPAN.to_string();

    // One pass of 64 KiB writes over the span (no --runtime: each block
    // once), every block read back and checked at the end.
    let mut a = net.to_vec();
    a.extend([
        "--rw",
        "write",
        "--bs",
        "64k",
        "--iodepth",
        "8",
        "--size",
        &span,
    ]);
    a.extend(["--verify", "--seed", SEED, "--json", "127.0.0.1"]);
    let w = bench_ok(&a);
    let w = w.trim();
    assert!(
        w.starts_with('{') && w.ends_with('}') && !w.contains('\n'),
        "{w}"
    );
    assert_eq!(field(w, "rw"), "write");
    assert_eq!(field(w, "provider"), prov);
    assert_eq!(field(w, "api"), "volume");
    assert_eq!(num(w, "bs"), 65536.0);
    assert_eq!(num(w, "iodepth"), 8.0);
    assert_eq!(num(w, "size"), SPAN as f64);
    assert_eq!(num(w, "write.ios"), 64.0, "{w}");
    assert_eq!(num(w, "write.bytes"), SPAN as f64);
    assert_eq!(num(w, "read.ios"), 0.0);
    assert_eq!(field(w, "verify.enabled"), "true");
    assert_eq!(num(w, "verify.blocks_checked"), 64.0);
    assert!(num(w, "write.iops") > 0.0 && num(w, "write.bw_mib") > 0.0);
    let (p50, p99, p999, max) = (
        num(w, "write.clat_ns.p50"),
        num(w, "write.clat_ns.p99"),
        num(w, "write.clat_ns.p99_9"),
        num(w, "write.clat_ns.max"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max, "{w}");
    // MB/s and MiB/s of the same bytes.
    let ratio = num(w, "write.bw_mb") / num(w, "write.bw_mib");
    assert!((ratio - 1.048576).abs() < 0.01, "{w}");

    // The target's file holds the pattern: offset and seed in a few
    // sectors, spread over the span, and nothing past it.
    let bytes = std::fs::read(&file).expect("the target's file");
    assert_eq!(bytes.len(), 8 << 20);
    for off in [0u64, 512, 65536 + 3 * 512, 2 << 20, SPAN - 512] {
        let o = off as usize;
        assert_eq!(
            &bytes[o..o + 512],
            sector(off, SEED.parse().unwrap()).as_slice(),
            "sector at {off}"
        );
    }
    assert!(bytes[SPAN as usize..].iter().all(|b| *b == 0));

    // Random 4 KiB reads for 1 s, each checked, the session stepped on
    // the bench's thread (Volume::inline).
    let mut a = net.to_vec();
    a.push("--inline");
    a.extend([
        "--rw",
        "randread",
        "--bs",
        "4k",
        "--size",
        &span,
        "--runtime",
        "1",
    ]);
    a.extend(["--verify", "--seed", SEED, "--json", "127.0.0.1"]);
    let r = bench_ok(&a);
    assert_eq!(field(&r, "rw"), "randread");
    assert_eq!(field(&r, "api"), "inline");
    let ios = num(&r, "read.ios");
    assert!(ios > 0.0, "{r}");
    assert_eq!(num(&r, "read.bytes"), ios * 4096.0);
    assert_eq!(num(&r, "verify.blocks_checked"), ios);
    assert_eq!(num(&r, "write.ios"), 0.0);
    assert!(num(&r, "runtime_ms") >= 1000.0, "{r}");

    // Sequential 128 KiB reads, one pass, in fio's text format.
    let mut a = net.to_vec();
    a.extend(["--rw", "read", "--bs", "128k", "--size", &span]);
    a.extend(["--verify", "--seed", SEED, "127.0.0.1"]);
    let t = bench_ok(&a);
    assert!(t.contains("rw=read bs=131072"), "{t}");
    assert!(t.contains("read: IOPS="), "{t}");
    assert!(t.contains("MiB/s (") && t.contains("MB/s)"), "{t}");
    assert!(
        t.contains("p50=") && t.contains("p99=") && t.contains("p99.9="),
        "{t}"
    );
    assert!(t.contains("verify: 32 blocks checked"), "{t}");
    assert!(!t.contains("write:"), "{t}");

    // Another seed's pattern is not this one: the first sector read says
    // which offset and seed it holds.
    let mut a = net.to_vec();
    a.extend([
        "--rw",
        "read",
        "--bs",
        "4k",
        "--iodepth",
        "1",
        "--size",
        "4k",
    ]);
    a.extend(["--verify", "--seed", "7", "127.0.0.1"]);
    let o = bench(&a);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("mismatch at offset 0") && e.contains("seed 4242 (expected 7)"),
        "{e}"
    );
}

#[test]
fn verified_writes_then_reads_over_shm() {
    write_then_read("shm");
}

#[test]
fn verified_writes_then_reads_over_tcp() {
    write_then_read("tcp");
}

/// Mixed random reads and writes for 1 s, verified: reads of blocks
/// already written are checked, and every block written is read back.
#[test]
fn verified_random_mix_over_tcp() {
    let d = Dir::new("mix");
    let file = d.path("volume.img");
    let (_t, port) = start_target(&d.0, "tcp", &file, "2M");
    let p = port.to_string();
    let r = bench_ok(&[
        "-p",
        "tcp",
        "-P",
        &p,
        "--rw",
        "randrw",
        "--rwmixread",
        "30",
        "--bs",
        "8k",
        "--runtime",
        "1",
        "--verify",
        "--json",
        "127.0.0.1",
    ]);
    let (reads, writes) = (num(&r, "read.ios"), num(&r, "write.ios"));
    assert!(reads > 0.0 && writes > 0.0, "{r}");
    assert_eq!(num(&r, "size"), (2 << 20) as f64);
    // Blocks read back at the end: every distinct block written, at most
    // the 256 of the volume; plus the reads that found a block written.
    let checked = num(&r, "verify.blocks_checked");
    assert!(checked >= 1.0 && checked <= 256.0 + reads, "{r}");
    // The file: every 8 KiB block either untouched (zeroes) or the pattern.
    let bytes = std::fs::read(&file).expect("the target's file");
    let mut patterned = 0;
    for (i, s) in bytes.chunks(512).enumerate() {
        if s.iter().all(|b| *b == 0) {
            continue;
        }
        assert_eq!(s, sector(i as u64 * 512, 1).as_slice(), "sector {i}");
        patterned += 1;
    }
    assert!(patterned > 0);
}

#[test]
fn bad_flags_get_clear_errors() {
    let d = Dir::new("flags");
    let file = d.path("volume.img");
    let (_t, port) = start_target(&d.0, "tcp", &file, "1M");
    let p = port.to_string();
    for (args, want) in [
        (
            &["--rw", "sideways", "127.0.0.1"][..],
            "bad --rw 'sideways'",
        ),
        (&["--bs", "1000", "127.0.0.1"], "bad --bs '1000'"),
        (&["--iodepth", "0", "127.0.0.1"], "bad --iodepth '0'"),
        (
            &["--runtime", "soon", "127.0.0.1"],
            "--runtime: bad number of seconds",
        ),
        (
            &["--frobnicate", "127.0.0.1"],
            "unknown option --frobnicate",
        ),
        (&[], "one TARGET_ADDR expected"),
        // Past the volume (1 MiB), and a block larger than the span.
        (
            &["-p", "tcp", "-P", &p, "--size", "2M", "127.0.0.1"],
            "larger than the volume",
        ),
        (
            &["-p", "tcp", "-P", &p, "--bs", "2M", "127.0.0.1"],
            "--bs 2097152",
        ),
    ] {
        let o = bench(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
    // No target there.
    let o = bench(&["-p", "tcp", "-P", "1", "127.0.0.1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("127.0.0.1:1"));
}
