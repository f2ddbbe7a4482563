//! `ofi pingpong` and `ofi bw` over tcp and shm with one side killed
//! (SIGKILL) in the middle of a long run: the survivor exits non-zero
//! within a bounded time with a message naming the peer, instead of
//! waiting forever. Over shm the message is the provider's own report
//! ("peer fi_shm://PID.IDX died: ..."), not the control channel's end.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the survivor may take to exit after the kill (the kernel
/// closes the killed process's sockets at once: this only catches a hang).
const BOUND: Duration = Duration::from_secs(10);
/// How long setup may take.
const STEP: Duration = Duration::from_secs(30);

/// A running `ofi` with its output in files.
struct Ofi {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Ofi {
    fn spawn(tag: &str, args: &[&str]) -> Ofi {
        let dir = std::env::temp_dir();
        let f = |k: &str| dir.join(format!("ofi-survivor-{}-{tag}.{k}", std::process::id()));
        let (out, err) = (f("out"), f("err"));
        let child = Command::new(env!("CARGO_BIN_EXE_ofi"))
            .args(args)
            .env_remove("FI_PROVIDER")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawning ofi");
        Ofi { child, out, err }
    }
    fn read(p: &PathBuf) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
    fn stdout(&self) -> String {
        Ofi::read(&self.out)
    }
    fn stderr(&self) -> String {
        Ofi::read(&self.err)
    }
    /// Waits up to `bound` for the exit; its code (None: still running,
    /// then killed).
    fn exit_within(&mut self, bound: Duration) -> Option<i32> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s.code().unwrap_or(-1));
            }
            if Instant::now() > deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Ofi {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
    }
}

/// Runs `ofi CMD` server and client on loopback with `args`, waits until
/// the client printed its table header (data is flowing), lets it run
/// `after`, kills `victim` ("server" or "client") and checks the survivor:
/// its message names the peer and holds every one of `says`.
fn kill_one(cmd: &str, args: &[&str], victim: &str, after: Duration, port: u16, says: &[&str]) {
    let port = port.to_string();
    let mut sargs = vec![cmd, "-B", &port];
    sargs.extend_from_slice(args);
    let mut cargs = vec![cmd, "-P", &port];
    cargs.extend_from_slice(args);
    cargs.push("127.0.0.1");
    let tag = format!("{cmd}-{victim}-{}", after.as_millis());
    let mut server = Ofi::spawn(&format!("{tag}-s"), &sargs);
    let mut client = Ofi::spawn(&format!("{tag}-c"), &cargs);
    let deadline = Instant::now() + STEP;
    while !client.stdout().contains("bytes") {
        assert!(
            Instant::now() < deadline,
            "no table header from the client within {STEP:?}\nclient stderr:\n{}\nserver stderr:\n{}",
            client.stderr(),
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(after);
    let (dead, survivor) = if victim == "server" {
        (&mut server, &mut client)
    } else {
        (&mut client, &mut server)
    };
    assert!(
        dead.child.try_wait().expect("try_wait").is_none(),
        "the {victim} exited before it was killed: {}",
        dead.stderr()
    );
    dead.kill();
    let t0 = Instant::now();
    let code = survivor.exit_within(BOUND);
    let took = t0.elapsed();
    let err = survivor.stderr();
    eprintln!("ofi {cmd} {args:?}, {victim} killed after {after:?}: survivor exit {code:?} after {took:?}: {err}");
    assert!(
        code.is_some(),
        "the survivor of a killed {victim} still ran {BOUND:?} later; stderr:\n{err}"
    );
    assert_ne!(code, Some(0), "the survivor exited successfully: {err}");
    let prefix = format!("ofi {cmd}: ");
    let provider = |l: &str| {
        (l.contains(" died: ") || l.contains(" is gone (")) && !l.contains("control channel")
    };
    assert!(
        err.lines().any(|l| l.starts_with(&prefix)
            && l.contains("peer")
            && says.iter().all(|s| if *s == "provider" {
                provider(l)
            } else {
                l.contains(s)
            })),
        "the survivor's message does not name the peer or lacks {says:?}:\n{err}"
    );
}

/// What a tcp survivor's message holds (the peer's socket address).
const TCP: &[&str] = &["127.0.0.1:"];
/// What an shm survivor's message holds: the peer's address, from the
/// provider (its EQ report, "died", or an error completion naming the
/// cause, "is gone"), not from the control channel's end.
const SHM: &[&str] = &["fi_shm://", "provider"];

/// A control port for one case: one the kernel just found free (a
/// pid-derived one may be another test's ephemeral port).
fn port(_case: u16) -> u16 {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn pingpong_rdm_survivor_exits_naming_the_peer() {
    let args = ["-p", "tcp", "-e", "rdm", "-S", "8", "-I", "100000000"];
    kill_one(
        "pingpong",
        &args,
        "server",
        Duration::from_millis(200),
        port(0),
        TCP,
    );
    kill_one(
        "pingpong",
        &args,
        "client",
        Duration::from_millis(20),
        port(1),
        TCP,
    );
}

#[test]
fn pingpong_msg_and_bw_survivors_exit_naming_the_peer() {
    let pp = ["-p", "tcp", "-e", "msg", "-S", "8", "-I", "100000000"];
    kill_one(
        "pingpong",
        &pp,
        "server",
        Duration::from_millis(100),
        port(2),
        TCP,
    );
    let bw = ["-p", "tcp", "-e", "rdm", "-S", "8", "-I", "100000000"];
    kill_one(
        "bw",
        &bw,
        "client",
        Duration::from_millis(100),
        port(3),
        TCP,
    );
}

#[test]
fn shm_pingpong_and_bw_survivors_exit_naming_the_peer() {
    let pp = ["-p", "shm", "-e", "rdm", "-S", "8", "-I", "100000000"];
    kill_one(
        "pingpong",
        &pp,
        "server",
        Duration::from_millis(150),
        port(4),
        SHM,
    );
    kill_one(
        "pingpong",
        &pp,
        "client",
        Duration::from_millis(10),
        port(5),
        SHM,
    );
    let big = ["-p", "shm", "-e", "rdm", "-S", "1m", "-I", "100000000"];
    kill_one(
        "pingpong",
        &big,
        "server",
        Duration::from_millis(60),
        port(6),
        SHM,
    );
    let bw = ["-p", "shm", "-e", "rdm", "-S", "64k", "-I", "100000000"];
    kill_one(
        "bw",
        &bw,
        "client",
        Duration::from_millis(100),
        port(7),
        SHM,
    );
    kill_one("bw", &bw, "server", Duration::from_millis(30), port(8), SHM);
}
