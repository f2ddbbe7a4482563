//! `ofi storage target` and `ofi storage nbd`: a block target serving a
//! file or device over the fabric, and an NBD gateway forwarding to it
//! (`ofi storage bench`, a load generator on the initiator API, is in
//! `storage_bench.rs`).

use crate::args::Args;
use ofi_storage::gateway::{self, GatewayOptions, Listener};
use ofi_storage::target::{Limits, Target, TargetOptions};
use ofi_storage::{EpKind, NetOptions, VolumeOptions};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

const USAGE: &str = "Usage:
  ofi storage target [-p PROVIDER] [-e rdm|msg] [-B PORT] [-s ADDR] [--size N] [--read-only]
                     [--direct] [--max-initiators N] [--setup-timeout SECS] [--liveness SECS]
                     PATH
      serve PATH (a file or block device) as one volume; PORT is the control
      port initiators connect to (default 9230, 0 picks one), ADDR the address
      to bind (default 0.0.0.0); --size creates or extends a file (K, M, G, T
      suffixes). Prints 'listening on ADDR:PORT'. --direct: reads and writes
      aligned to 4096 bytes (offset and length) bypass the page cache
      (O_DIRECT), the others stay buffered. With -e msg (connected
      endpoints, e.g. -p tcp) the fabric's passive endpoint listens on
      ADDR:PORT itself and accepts one connection per initiator; a provider
      without MSG endpoints (shm) is an error.
      At most N initiators are connected at once (default 256; more are told
      the target is busy); one that has not opened its session SECS after it
      connected is dropped (default 10); over RDM one whose host answers
      nothing on the control connection for SECS (TCP keepalive; default 10,
      at least 2) is dropped and its credits come back.
  ofi storage nbd [-p PROVIDER] [-e rdm|msg] [-P PORT] [-s ADDR] [-q DEPTH]
                  [--liveness SECS] [--handshake-timeout SECS]
                  (--unix SOCKET | --port N) TARGET_ADDR
      an NBD server on SOCKET or port N (bound to ADDR, default 127.0.0.1)
      forwarding every request to the target at TARGET_ADDR, control port PORT
      (default 9230); DEPTH commands in flight per client (default 64). -p and
      -e must match the target's; with -e msg each client's session connects
      to the target (refused or unanswered within 5 s: the client is told).
      Over RDM a session ends when the target's host has answered nothing on
      its control connection for SECS (default 10, at least 2). A client's
      session opens when it selects the export (NBD_OPT_GO or EXPORT_NAME);
      one that has not finished its handshake within --handshake-timeout
      SECS (default 10) is dropped.
Both stop cleanly on SIGINT or SIGTERM.";

/// Entry point of `ofi storage`.
pub fn run(argv: &[String]) -> i32 {
    match argv.first().map(String::as_str) {
        Some("target") => report(target(&argv[1..])),
        Some("nbd") => report(nbd(&argv[1..])),
        Some("bench") => report(crate::storage_bench::bench(&argv[1..])),
        Some("-h") | Some("--help") | None => {
            outln!("{USAGE}\n{}", crate::storage_bench::USAGE);
            0
        }
        Some(c) => {
            eprintln!(
                "ofi storage: unknown command '{c}'\n{USAGE}\n{}",
                crate::storage_bench::USAGE
            );
            2
        }
    }
}

fn report(r: Result<(), String>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ofi storage: {e}");
            1
        }
    }
}

/// A size with an optional K/M/G/T suffix (powers of 1024).
pub(crate) fn size(s: &str) -> Result<u64, String> {
    let (num, shift) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 10),
        Some('M') => (&s[..s.len() - 1], 20),
        Some('G') => (&s[..s.len() - 1], 30),
        Some('T') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad size '{s}' (a positive number, optionally with K, M, G or T)"))
}

/// A positive number of seconds (fractions allowed), at most a day.
pub(crate) fn secs(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| *x > 0.0 && *x <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("bad number of seconds '{s}' (more than 0, at most 86400)"))
}

/// The value of option `k` as seconds, or `default`.
fn secs_opt(a: &Args, k: &str, default: Duration) -> Result<Duration, String> {
    a.get(k).map(secs).unwrap_or(Ok(default))
}

pub(crate) fn net(a: &Args) -> Result<NetOptions, String> {
    Ok(NetOptions {
        provider: a.get("p").map(str::to_string),
        ep: a.get("e").unwrap_or("rdm").parse::<EpKind>()?,
        node: None,
    })
}

pub(crate) fn port(a: &Args, k: &str) -> Result<u16, String> {
    a.get(k)
        .map(|p| p.parse::<u16>().map_err(|_| format!("bad port '{p}'")))
        .unwrap_or(Ok(9230))
}

/// `target` as host:port: as given, or a bare host or IP with `port`.
pub(crate) fn target_addr(target: &str, port: u16) -> String {
    let has_port = target.parse::<SocketAddr>().is_ok()
        || (target.contains(':') && target.parse::<IpAddr>().is_err());
    if has_port {
        target.to_string()
    } else if target.contains(':') {
        format!("[{target}]:{port}")
    } else {
        format!("{target}:{port}")
    }
}

fn target(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(
        argv,
        "peBs",
        &["size", "max-initiators", "setup-timeout", "liveness"],
    )?;
    if a.has("h") || a.has("help") {
        outln!("{USAGE}");
        return Ok(());
    }
    let [path] = a.pos.as_slice() else {
        return Err(format!("target: one PATH expected\n{USAGE}"));
    };
    let ip: IpAddr = a
        .get("s")
        .unwrap_or("0.0.0.0")
        .parse()
        .map_err(|_| format!("bad address '{}'", a.get("s").unwrap_or("")))?;
    let mut net = net(&a)?;
    if a.get("s").is_some() {
        net.node = Some(ip.to_string());
    }
    let d = Limits::default();
    let limits = Limits {
        max_initiators: a
            .get("max-initiators")
            .map(|n| {
                n.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("bad --max-initiators '{n}' (a positive number)"))
            })
            .unwrap_or(Ok(d.max_initiators))?,
        setup_timeout: secs_opt(&a, "setup-timeout", d.setup_timeout)?,
        liveness: secs_opt(&a, "liveness", d.liveness)?,
    };
    let opts = TargetOptions {
        net,
        listen: SocketAddr::new(ip, port(&a, "B")?),
        size: a.get("size").map(size).transpose()?,
        read_only: a.has("read-only"),
        direct: a.has("direct"),
        limits,
        ..TargetOptions::default()
    };
    let t = Target::bind(Path::new(path), &opts)?;
    outln!(
        "listening on {} (provider {}, {} bytes{})",
        t.local_addr(),
        t.provider(),
        t.size(),
        if opts.read_only { ", read-only" } else { "" }
    );
    crate::signals::install();
    let stop = t.stop_flag();
    let watcher = std::thread::spawn(move || {
        while !crate::signals::stopped() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let r = t.run();
    let _ = watcher.join();
    r
}

fn nbd(argv: &[String]) -> Result<(), String> {
    let a = Args::parse(
        argv,
        "pePsq",
        &["unix", "port", "liveness", "handshake-timeout"],
    )?;
    if a.has("h") || a.has("help") {
        outln!("{USAGE}");
        return Ok(());
    }
    let [target] = a.pos.as_slice() else {
        return Err(format!("nbd: one TARGET_ADDR expected\n{USAGE}"));
    };
    let target = target_addr(target, port(&a, "P")?);
    let qd = a
        .get("q")
        .map(|q| {
            q.parse::<u32>()
                .map_err(|_| format!("bad queue depth '{q}'"))
        })
        .unwrap_or(Ok(64))?;
    let listener = match (a.get("unix"), a.get("port")) {
        (Some(p), None) => {
            let _ = std::fs::remove_file(p);
            Listener::Unix(
                std::os::unix::net::UnixListener::bind(p).map_err(|e| format!("{p}: {e}"))?,
            )
        }
        (None, Some(n)) => {
            let n: u16 = n.parse().map_err(|_| format!("bad port '{n}'"))?;
            let ip: IpAddr = a
                .get("s")
                .unwrap_or("127.0.0.1")
                .parse()
                .map_err(|_| "bad address for -s".to_string())?;
            Listener::Tcp(
                std::net::TcpListener::bind((ip, n)).map_err(|e| format!("port {n}: {e}"))?,
            )
        }
        _ => {
            return Err(format!(
                "nbd: exactly one of --unix SOCKET and --port N\n{USAGE}"
            ))
        }
    };
    let at = match &listener {
        Listener::Unix(_) => a.get("unix").unwrap_or("").to_string(),
        Listener::Tcp(t) => t.local_addr().map(|a| a.to_string()).unwrap_or_default(),
    };
    outln!("nbd gateway on {at} for target {target}");
    crate::signals::install();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let watcher = std::thread::spawn(move || {
        while !crate::signals::stopped() {
            std::thread::sleep(Duration::from_millis(50));
        }
        s2.store(true, Ordering::Relaxed);
    });
    let opts = GatewayOptions {
        target,
        volume: VolumeOptions {
            net: net(&a)?,
            queue_depth: qd,
            liveness: secs_opt(&a, "liveness", VolumeOptions::default().liveness)?,
            ..VolumeOptions::default()
        },
        handshake_timeout: secs_opt(&a, "handshake-timeout", gateway::HANDSHAKE_TIMEOUT)?,
    };
    let r = gateway::serve(listener, opts, stop).map_err(|e| format!("nbd: {e}"));
    if let Some(p) = a.get("unix") {
        let _ = std::fs::remove_file(p);
    }
    let _ = watcher.join();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("64M"), Ok(64 << 20));
        assert_eq!(size("2g"), Ok(2 << 30));
        assert!(size("0").is_err());
        assert!(size("x").is_err());
        assert!(size("99999999999T").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(secs("3"), Ok(Duration::from_secs(3)));
        assert_eq!(secs("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "x", "NaN", "inf", "1e9"] {
            assert!(secs(bad).is_err(), "{bad}");
        }
    }
}
