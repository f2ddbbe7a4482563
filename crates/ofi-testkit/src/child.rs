//! Child processes of the test binary, spoken to by lines.
//!
//! A child is the same test binary run with the libtest filter of one test
//! (`NAME --exact --nocapture --test-threads=1`) and [`ROLE`] set; that test
//! checks [`role`] first and, when it is set, plays the role instead of the
//! parent. Protocol lines carry the [`TAG`] prefix so libtest's own output
//! ("running 1 test" ...) is told apart.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Environment variable naming the role a child process plays.
pub const ROLE: &str = "OFI_PROV_TEST_ROLE";
/// Prefix of every protocol line a child prints.
pub const TAG: &str = "@ofi ";

/// The libtest arguments that run exactly the test `name` in a child.
pub fn self_args(name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

/// A command running this test binary's test `name` in `role`.
pub fn self_cmd(name: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args(self_args(name)).env(ROLE, role);
    c
}

/// A child process, spoken to by lines.
pub struct Kid {
    /// Name for messages.
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Kid {
    /// Spawns `cmd` with piped stdin/stdout (stderr inherited).
    pub fn spawn(name: &str, mut cmd: Command) -> Kid {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {name} ({cmd:?}): {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let tname = format!("{name}[{}]", child.id());
        let echo = tname.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                // libtest's "test NAME ... " has no newline: the tag may
                // follow it on the same line.
                match l.find(TAG).map(|i| &l[i + TAG.len()..]) {
                    Some(p) => {
                        if tx.send((Instant::now(), p.to_string())).is_err() {
                            break;
                        }
                    }
                    None => eprintln!("{echo} stdout: {l}"),
                }
            }
        });
        let stdin = child.stdin.take();
        Kid {
            name: tname,
            child,
            stdin,
            lines: rx,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line.
    pub fn say(&mut self, line: &str) {
        let name = self.name.clone();
        let w = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{name}: stdin closed"));
        writeln!(w, "{line}").unwrap_or_else(|e| panic!("{name}: writing '{line}': {e}"));
        let _ = w.flush();
    }

    fn status(&mut self) -> String {
        match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "still running".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Waits until `deadline` for a line starting with one of `prefixes`;
    /// returns (which prefix, the rest, when it arrived). Panics on a
    /// `FAIL` line, the child's exit or the deadline.
    pub fn expect_any(&mut self, prefixes: &[&str], deadline: Instant) -> (usize, String, Instant) {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((t, l)) => {
                    if let Some(i) = prefixes.iter().position(|p| l.starts_with(p)) {
                        return (i, l[prefixes[i].len()..].trim().to_string(), t);
                    }
                    if l.starts_with("FAIL") {
                        panic!("{}: {l}", self.name);
                    }
                    eprintln!("{}: {l}", self.name);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{}: no {prefixes:?} line in time", self.name)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50));
                    let st = self.status();
                    panic!(
                        "{}: stdout closed ({st}) before a {prefixes:?} line",
                        self.name
                    )
                }
            }
        }
    }

    /// Waits up to `timeout` for a line starting with `prefix`; the rest.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        self.expect_any(&[prefix], Instant::now() + timeout).1
    }

    /// A line already received, if any (never blocks). Panics on `FAIL`
    /// or if the child's stdout closed.
    pub fn try_line(&mut self) -> Option<String> {
        match self.lines.try_recv() {
            Ok((_, l)) if l.starts_with("FAIL") => panic!("{}: {l}", self.name),
            Ok((_, l)) => Some(l),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(50));
                let st = self.status();
                panic!("{}: stdout closed ({st})", self.name)
            }
        }
    }

    /// SIGKILL (this child only, by its pid), and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin and waits for a successful exit.
    pub fn finish(&mut self, timeout: Duration) {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    assert!(st.success(), "{} exited with {st}", self.name);
                    return;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    self.kill();
                    panic!("{} did not exit within {timeout:?}", self.name);
                }
            }
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// This process's role, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Prints a protocol line to the parent.
pub fn tell(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{TAG}{line}");
    let _ = o.flush();
}

/// Reads stdin lines until one starts with `prefix`; the rest. Panics if
/// the parent closes stdin first.
pub fn listen(prefix: &str) -> String {
    loop {
        let mut s = String::new();
        match std::io::stdin().lock().read_line(&mut s) {
            Ok(0) | Err(_) => panic!("parent closed stdin before '{prefix}'"),
            Ok(_) => {
                if let Some(r) = s.trim().strip_prefix(prefix) {
                    return r.trim().to_string();
                }
            }
        }
    }
}

/// Blocks until the parent says EXIT or closes stdin.
pub fn linger() {
    loop {
        let mut s = String::new();
        match std::io::stdin().lock().read_line(&mut s) {
            Ok(0) | Err(_) => return,
            Ok(_) if s.trim() == "EXIT" => return,
            Ok(_) => {}
        }
    }
}

/// Runs a child role, turning a panic into a `FAIL` line for the parent
/// (the panic message also goes to stderr), then exits the process.
pub fn child_main(f: impl FnOnce()) -> ! {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    match r {
        Ok(()) => std::process::exit(0),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            tell(&format!("FAIL {}", msg.replace('\n', " | ")));
            std::process::exit(3)
        }
    }
}
