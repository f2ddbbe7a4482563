//! The control channel between server and client (a TCP connection, as in
//! fi_pingpong: `-B` / `-P` ports, the server address as the positional),
//! and `--local`, which runs both sides from one command.

use crate::args::Args;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The default control port (fi_pingpong's).
pub const PORT: u16 = 47592;

/// Length-prefixed messages and a one-byte barrier over the control connection.
pub struct Oob(pub TcpStream);

impl Oob {
    /// A failure of the channel as a message naming the peer (a peer that
    /// died shows here first when no data connection existed yet).
    fn failed(&self, e: impl std::fmt::Display) -> String {
        match self.0.peer_addr() {
            Ok(p) => format!("control channel with the peer at {p}: {e}"),
            Err(_) => format!("control channel: {e} (the peer has gone)"),
        }
    }
    /// Sends one message.
    pub fn send(&mut self, b: &[u8]) -> Result<(), String> {
        let r = self
            .0
            .write_all(&(b.len() as u32).to_le_bytes())
            .and_then(|_| self.0.write_all(b));
        r.map_err(|e| self.failed(e))
    }
    /// Receives one message (at most 4 KiB: the peer is not trusted).
    pub fn recv(&mut self) -> Result<Vec<u8>, String> {
        let mut l = [0u8; 4];
        if let Err(e) = self.0.read_exact(&mut l) {
            return Err(self.failed(e));
        }
        let n = u32::from_le_bytes(l) as usize;
        if n > 4096 {
            return Err("control channel: message too long".into());
        }
        let mut v = vec![0u8; n];
        if let Err(e) = self.0.read_exact(&mut v) {
            return Err(self.failed(e));
        }
        Ok(v)
    }
    /// Waits until the peer reaches the same point.
    pub fn sync(&mut self) -> Result<(), String> {
        let mut b = [0u8];
        let r = self
            .0
            .write_all(&[1])
            .and_then(|_| self.0.read_exact(&mut b));
        r.map_err(|e| self.failed(e))
    }
    /// True when bytes from the peer are waiting (never blocks); an error
    /// when the peer has gone.
    pub fn readable(&mut self) -> Result<bool, String> {
        let mut b = [0u8];
        self.0
            .set_nonblocking(true)
            .map_err(|e| format!("control channel: {e}"))?;
        let r = self.0.peek(&mut b);
        self.0
            .set_nonblocking(false)
            .map_err(|e| format!("control channel: {e}"))?;
        match r {
            Ok(0) => Err(self.failed("the peer closed the connection")),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(self.failed(e)),
        }
    }
}

/// Connects to the server named by the positional (the client, retrying
/// for 10 s while it starts), or listens on `-B` and accepts one client
/// (the server). Returns the channel and whether this side is the client.
pub fn connect(a: &Args) -> Result<(Oob, bool), String> {
    let port = |k: &str| -> Result<u16, String> {
        match a.get(k) {
            None => Ok(PORT),
            Some(p) => p.parse().map_err(|_| format!("bad -{k} port '{p}'")),
        }
    };
    if let Some(host) = a.pos.first() {
        let port = port("P")?;
        let start = Instant::now();
        loop {
            match TcpStream::connect((host.as_str(), port)) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok((Oob(s), true));
                }
                Err(_) if start.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("connecting to {host}:{port}: {e}")),
            }
        }
    }
    let port = port("B")?;
    let bind = a.get("s").unwrap_or("0.0.0.0");
    let l =
        TcpListener::bind((bind, port)).map_err(|e| format!("listening on {bind}:{port}: {e}"))?;
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok((Oob(s), false))
}

/// `--local`: runs `ofi <cmd>` as the server in a child process (pinned to
/// CPU 0 when taskset is available, its stdout silenced, no files written)
/// and as the client here (CPU 1) on a control port the kernel just found
/// free (a fixed or pid-derived one may be some other socket's ephemeral
/// port); returns the client's exit code.
pub fn run_local(cmd: &str, argv: &[String]) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ofi {cmd} --local: {e}");
            return 1;
        }
    };
    let port = TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(PORT + (std::process::id() % 1000) as u16);
    let rest: Vec<String> = argv.iter().filter(|x| *x != "--local").cloned().collect();
    let mut server_args = Vec::new();
    let mut it = rest.iter();
    while let Some(x) = it.next() {
        match x.as_str() {
            "--csv" | "--svg" => {
                it.next();
            }
            s if s.starts_with("--csv=") || s.starts_with("--svg=") => {}
            _ => server_args.push(x.clone()),
        }
    }
    let have_taskset = std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_ok();
    let spawn = |cpu: &str, args: &[String], extra: &[String]| {
        let mut c = if have_taskset {
            let mut c = std::process::Command::new("taskset");
            c.arg("-c").arg(cpu).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        c.arg(cmd).args(args).args(extra);
        c
    };
    let mut server = match spawn("0", &server_args, &["-B".into(), port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ofi {cmd} --local: starting the server: {e}");
            return 1;
        }
    };
    let client = spawn(
        "1",
        &rest,
        &["-P".into(), port.to_string(), "127.0.0.1".into()],
    )
    .status();
    match client {
        Ok(s) if s.success() => {
            let _ = server.wait();
            0
        }
        Ok(s) => {
            // A client that failed may leave the server waiting for it.
            let _ = server.kill();
            let _ = server.wait();
            s.code().unwrap_or(1)
        }
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            eprintln!("ofi {cmd} --local: starting the client: {e}");
            1
        }
    }
}
