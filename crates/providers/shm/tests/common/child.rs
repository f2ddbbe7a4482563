//! Child processes of a test binary, spoken to by lines: a child is the
//! same binary run with the libtest filter of one test and [`ROLE`] set;
//! that test plays the role instead of the parent when [`role`] is set.
//! Protocol lines carry the [`TAG`] prefix, told apart from libtest's own
//! output.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Environment variable naming the role a child process plays.
pub const ROLE: &str = "OFI_SHM_TEST_ROLE";
/// Prefix of every protocol line a child prints.
pub const TAG: &str = "@ofi ";

/// A command running this test binary's test `name` in `role`.
pub fn self_cmd(name: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    c
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

/// Runs a child role, turning a panic into a `FAIL` line for the parent,
/// then exits the process.
pub fn child_main(f: impl FnOnce()) -> ! {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
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

/// A child process, spoken to by lines.
pub struct Kid {
    /// Name for messages.
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Kid {
    /// Spawns `cmd` with piped stdin/stdout (stderr inherited).
    pub fn spawn(name: &str, mut cmd: Command) -> Kid {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning child {name}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let tname = format!("{name}[{}]", child.id());
        let echo = tname.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                match l.find(TAG).map(|i| &l[i + TAG.len()..]) {
                    Some(p) => {
                        if tx.send(p.to_string()).is_err() {
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

    /// Waits up to `timeout` for a line starting with `prefix`; the rest.
    /// Panics on a `FAIL` line, the child's exit or the timeout.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l[prefix.len()..].trim().to_string(),
                Ok(l) if l.starts_with("FAIL") => panic!("{}: {l}", self.name),
                Ok(l) => eprintln!("{}: {l}", self.name),
                Err(e) => panic!("{}: no '{prefix}' line ({e:?})", self.name),
            }
        }
    }

    /// Sends `signal` to this child (by its pid).
    #[allow(unsafe_code)]
    pub fn signal(&self, signal: i32) {
        // SAFETY: a signal to our own child, by its pid (not yet reaped).
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// SIGSTOP, returning once every thread of the child is stopped (kill
    /// returns before a thread running on another cpu has been stopped).
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stopped = std::fs::read_dir(&tasks)
                .expect("the child's tasks")
                .filter_map(|t| t.ok())
                .all(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    // The state follows the command's closing parenthesis.
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
                });
            if stopped {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: not stopped after 10 s",
                self.name
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGKILL (this child only), and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// True while the child runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if self.running() {
            self.signal(libc::SIGCONT);
            self.kill();
        }
    }
}

/// Hex encoding (addresses over stdin/stdout).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex decoding.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}
