//! `ofi pingpong`: fi_pingpong's flags, control channel and output columns,
//! plus latency percentiles, CSV and an SVG plot.
//!
//! It measures the raw layer (as fi_pingpong measures libfabric's C API), so
//! its two post calls are `unsafe`: the buffers outlive every operation.
#![allow(unsafe_code)]

use crate::args::Args;
use crate::plot;
use ofi::consts::*;
use ofi::errno;
use ofi::{AvAttr, CqAttr, CqEntry, Endpoint, Info};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const USAGE: &str = "Usage:
  ofi pingpong [OPTIONS]             start server
  ofi pingpong [OPTIONS] <srv_addr>  connect to server
Options:
 -B <src_port>   source control port (server: 47592)
 -P <dst_port>   destination control port (client: 47592)
 -p <provider>   provider name (default: the best offer)
 -e <ep_type>    endpoint type: msg|rdm|dgram (rdm)
 -I <number>     iterations (10)
 -S <size>       transfer size or 'all' (default: 64, 256, 1k, 4k, 64k, 1m)
 -c              check data integrity
 -m <mode>       transmit mode: msg|tagged (msg)
 -W <count>      warm-up iterations per size (10)
 --block         wait for completions with a blocking read (spin, then sleep)
 --csv FILE      write the results as CSV
 --svg FILE      plot latency and bandwidth against size
 --local         run both sides here (server in a child process)
 -h              this text";

/// fi_pingpong's `-S all` list: 0, then 2^k and 3·2^(k-1) up to 6 MiB.
fn all_sizes() -> Vec<usize> {
    let mut v = vec![0, 1];
    let mut p = 2usize;
    while p <= 4 << 20 {
        v.push(p);
        v.push(p + p / 2);
        p *= 2;
    }
    v
}

/// fi_pingpong's sizes when `-S` is not given.
const DEFAULT_SIZES: [usize; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];

fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (n, m) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1 << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1),
    };
    n.parse::<usize>().ok().map(|x| x * m)
}

/// fi_pingpong's number format: a unit suffix, with one decimal below ten
/// when the value is not whole (`1.5k`, `3.9g`).
fn unit_str(v: u64, base: u64) -> String {
    for (i, suffix) in ["g", "m", "k"].iter().enumerate() {
        let unit = base.pow(3 - i as u32);
        if v >= unit {
            let x = v as f64 / unit as f64;
            let tenths = (x * 10.0).floor() / 10.0;
            return if x < 10.0 && tenths.fract() != 0.0 {
                format!("{tenths:.1}{suffix}")
            } else {
                format!("{}{suffix}", v / unit)
            };
        }
    }
    v.to_string()
}

/// Counts in thousands.
fn cnt_str(v: u64) -> String {
    unit_str(v, 1000)
}

/// Bytes in KiB.
fn size_str(v: u64) -> String {
    unit_str(v, 1024)
}

/// One size's result.
#[derive(Clone, Debug)]
pub struct Row {
    /// Message size.
    pub size: usize,
    /// Iterations.
    pub iters: usize,
    /// Seconds for all iterations.
    pub secs: f64,
    /// One-way latency percentiles (µs): p50, p99, max.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Row {
    fn xfers(&self) -> f64 {
        2.0 * self.iters as f64
    }
    /// MB/s as fi_pingpong counts it (both directions).
    pub fn mbps(&self) -> f64 {
        self.xfers() * self.size as f64 / self.secs / 1e6
    }
    /// µs per one-way transfer.
    pub fn usec(&self) -> f64 {
        self.secs * 1e6 / self.xfers()
    }
}

const HEADER: &str = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec   p50(us)   p99(us)   max(us)";

fn print_row(r: &Row) {
    let total = 2 * r.iters as u64 * r.size as u64;
    outln!(
        "{:<8}{:<8}={:<8}{:<8}{:>9.2}s{:>11.2}{:>13.2}{:>13.2}{:>10.2}{:>10.2}{:>10.2}",
        size_str(r.size as u64),
        cnt_str(r.iters as u64),
        cnt_str(r.iters as u64),
        size_str(total),
        r.secs,
        r.mbps(),
        r.usec(),
        r.xfers() / r.secs / 1e6,
        r.p50,
        r.p99,
        r.max
    );
}

struct Oob(TcpStream);

impl Oob {
    fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.write_all(&(b.len() as u32).to_le_bytes())?;
        self.0.write_all(b)
    }
    fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let mut l = [0u8; 4];
        self.0.read_exact(&mut l)?;
        let n = u32::from_le_bytes(l) as usize;
        if n > 4096 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "control message too long",
            ));
        }
        let mut v = vec![0u8; n];
        self.0.read_exact(&mut v)?;
        Ok(v)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.write_all(&[1])?;
        let mut b = [0u8];
        self.0.read_exact(&mut b)
    }
}

struct Ctx {
    ep: Endpoint,
    cq: ofi::CompletionQueue,
    peer: u64,
    tagged: bool,
    inject: usize,
    block: bool,
    /// Completions read ahead of the wait that wants them: (rx, tx).
    banked: std::cell::Cell<(usize, usize)>,
    _av: Option<ofi::AddressVector>,
    _eq: Option<ofi::EventQueue>,
    _pep: Option<ofi::PassiveEndpoint>,
    _domain: ofi::Domain,
    _fabric: ofi::Fabric,
}

const RX_CTX: usize = 1;
const TX_CTX: usize = 2;
const TAG: u64 = 0x1234;

impl Ctx {
    fn post_rx(&self, buf: &mut [u8], size: usize) -> ofi::Result<()> {
        loop {
            // SAFETY: `buf` outlives the receive: the caller waits for its
            // completion before touching or dropping the buffer.
            let r = unsafe {
                if self.tagged {
                    self.ep
                        .trecv(buf.as_mut_ptr(), size, FI_ADDR_UNSPEC, TAG, 0, RX_CTX)
                } else {
                    self.ep.recv(buf.as_mut_ptr(), size, FI_ADDR_UNSPEC, RX_CTX)
                }
            };
            match r {
                Err(e) if e.is_again() => self.ep.progress(),
                r => return r,
            }
        }
    }
    /// Sends; returns true if a send completion will follow.
    fn tx(&self, buf: &[u8], size: usize) -> ofi::Result<bool> {
        loop {
            let r = if size <= self.inject {
                let b = &buf[..size];
                if self.tagged {
                    self.ep.tinject(b, self.peer, TAG)
                } else {
                    self.ep.inject(b, self.peer)
                }
                .map(|_| false)
            } else {
                // SAFETY: `buf` outlives the send: the caller waits for its
                // completion before reusing the buffer.
                unsafe {
                    if self.tagged {
                        self.ep.tsend(buf.as_ptr(), size, self.peer, TAG, TX_CTX)
                    } else {
                        self.ep.send(buf.as_ptr(), size, self.peer, TX_CTX)
                    }
                }
                .map(|_| true)
            };
            match r {
                Err(e) if e.is_again() => self.ep.progress(),
                r => return r,
            }
        }
    }
    /// Waits until the completions wanted have arrived.
    fn wait(&self, mut rx: usize, mut tx: usize) -> ofi::Result<()> {
        let mut ents = [CqEntry::default(); 8];
        let (mut brx, mut btx) = self.banked.get();
        let take = brx.min(rx);
        (brx, rx) = (brx - take, rx - take);
        let take = btx.min(tx);
        (btx, tx) = (btx - take, tx - take);
        while rx + tx > 0 {
            let r = if self.block {
                self.cq.sread(&mut ents, Some(Duration::from_secs(30)))
            } else {
                self.cq.read(&mut ents)
            };
            match r {
                Ok(n) => {
                    for e in &ents[..n] {
                        match e.op_context {
                            RX_CTX if rx > 0 => rx -= 1,
                            RX_CTX => brx += 1,
                            TX_CTX if tx > 0 => tx -= 1,
                            TX_CTX => btx += 1,
                            _ => {}
                        }
                    }
                }
                Err(e) if e.is_again() && !self.block => {}
                Err(e) if e.code() == errno::FI_EAVAIL => {
                    let err = self.cq.readerr()?;
                    return Err(ofi::Error::new(
                        err.err,
                        format!(
                            "completion error (context {}, len {}, olen {})",
                            err.op_context, err.len, err.olen
                        ),
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        self.banked.set((brx, btx));
        Ok(())
    }
}

/// The integrity pattern: byte i of iteration `seed` is `(i * 31 + seed * 7) mod 251`,
/// which repeats every 251 bytes, so it is built once and copied.
fn pattern(seed: usize) -> [u8; 251] {
    let mut p = [0u8; 251];
    for (i, b) in p.iter_mut().enumerate() {
        *b = ((i * 31 + seed * 7) % 251) as u8;
    }
    p
}

fn fill(buf: &mut [u8], size: usize, seed: usize) {
    let p = pattern(seed);
    for chunk in buf[..size].chunks_mut(251) {
        chunk.copy_from_slice(&p[..chunk.len()]);
    }
}

fn check(buf: &[u8], size: usize, seed: usize) -> Result<(), String> {
    let p = pattern(seed);
    for (k, chunk) in buf[..size].chunks(251).enumerate() {
        if chunk != &p[..chunk.len()] {
            let j = chunk.iter().zip(&p).position(|(a, b)| a != b).unwrap_or(0);
            let i = k * 251 + j;
            return Err(format!(
                "data check failed at byte {i} of {size}: got {:#x}, want {:#x}",
                buf[i], p[j]
            ));
        }
    }
    Ok(())
}

/// Opens the endpoint and its objects for the hints the flags describe.
///
/// `local` is this side's address on the control connection: offers are
/// asked to use that interface (`FI_SOURCE`), so the data path takes the
/// same route as the control channel (loopback for local runs).
/// The hints the flags describe, and whether the transfers are tagged.
fn hints_from(a: &Args) -> Result<(Info, bool), String> {
    let mut hints = Info::hints();
    let tagged = match a.get("m").unwrap_or("msg") {
        "msg" => false,
        "tagged" => true,
        m => return Err(format!("unknown transmit mode '{m}' (msg|tagged)")),
    };
    hints.caps = if tagged { FI_TAGGED } else { FI_MSG };
    hints.mode = FI_CONTEXT | FI_CONTEXT2;
    hints.ep_attr.ep_type = match a.get("e").unwrap_or("rdm") {
        "rdm" => ep_type::FI_EP_RDM,
        "msg" => ep_type::FI_EP_MSG,
        "dgram" => ep_type::FI_EP_DGRAM,
        e => return Err(format!("unknown endpoint type '{e}' (msg|rdm|dgram)")),
    };
    if let Some(p) = a.get("p") {
        hints.fabric_attr.prov_name = Some(p.to_string());
    }
    if let Some(d) = a.get("d") {
        hints.domain_attr.name = Some(d.to_string());
    }
    Ok((hints, tagged))
}

/// The first offer for the flags, on the control connection's interface.
fn offer(a: &Args, local: Option<std::net::IpAddr>) -> Result<(Info, bool), String> {
    let (hints, tagged) = hints_from(a)?;
    let node = local.map(|ip| ip.to_string());
    let flags = if node.is_some() { FI_SOURCE } else { 0 };
    let infos = ofi::getinfo(
        FI_VERSION_CURRENT,
        node.as_deref(),
        None,
        flags,
        Some(&hints),
    )
    .map_err(|e| format!("fi_getinfo: {e}"))?;
    let info = infos.into_iter().next().ok_or("no offer")?;
    Ok((info, tagged))
}

fn cq_attr(block: bool) -> CqAttr {
    CqAttr {
        size: 0,
        format: cq_format::FI_CQ_FORMAT_CONTEXT,
        wait_obj: if block {
            wait_obj::FI_WAIT_FD
        } else {
            wait_obj::FI_WAIT_NONE
        },
    }
}

/// Opens the endpoint for the flags and connects it to the peer on the
/// other end of the control channel: RDM endpoints swap addresses over it
/// and insert each other in an AV; MSG endpoints connect (the server listens
/// on a passive endpoint whose address goes over the control channel).
fn open(
    a: &Args,
    local: Option<std::net::IpAddr>,
    oob: &mut Oob,
    client: bool,
) -> Result<(Info, Ctx), String> {
    let (info, tagged) = offer(a, local)?;
    let fabric = ofi::Fabric::open(&info.fabric_attr).map_err(|e| format!("fi_fabric: {e}"))?;
    let domain = fabric
        .domain(&info)
        .map_err(|e| format!("fi_domain: {e}"))?;
    let block = a.has("block");
    let cq = domain
        .cq(&cq_attr(block))
        .map_err(|e| format!("fi_cq_open: {e}"))?;
    // An endpoint bound to the CQ and to an AV or an EQ, enabled.
    let endpoint = |info: &Info,
                    av: Option<&ofi::AddressVector>,
                    eq: Option<&ofi::EventQueue>|
     -> Result<Endpoint, String> {
        let ep = domain
            .endpoint(info)
            .map_err(|e| format!("fi_endpoint: {e}"))?;
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)
            .map_err(|e| format!("fi_ep_bind: {e}"))?;
        if let Some(av) = av {
            ep.bind_av(av).map_err(|e| format!("fi_ep_bind: {e}"))?;
        }
        if let Some(eq) = eq {
            ep.bind_eq(eq).map_err(|e| format!("fi_ep_bind: {e}"))?;
        }
        ep.enable().map_err(|e| format!("fi_enable: {e}"))?;
        Ok(ep)
    };
    let (ep, peer, av, eq, pep) = if info.ep_attr.ep_type != ep_type::FI_EP_MSG {
        let av = domain
            .av(&AvAttr::default())
            .map_err(|e| format!("fi_av_open: {e}"))?;
        let ep = endpoint(&info, Some(&av), None)?;
        let me = ep.getname().map_err(|e| format!("fi_getname: {e}"))?;
        oob.send(&me).map_err(|e| e.to_string())?;
        let theirs = oob.recv().map_err(|e| e.to_string())?;
        let peer = av
            .insert_one(&theirs)
            .map_err(|e| format!("fi_av_insert: {e}"))?;
        (ep, peer, Some(av), None, None)
    } else {
        let eq = fabric
            .eq(&Default::default())
            .map_err(|e| format!("fi_eq_open: {e}"))?;
        let (ep, pep, what) = if client {
            let server = oob.recv().map_err(|e| e.to_string())?;
            let ep = endpoint(&info, None, Some(&eq))?;
            ep.connect(&server, &[])
                .map_err(|e| format!("fi_connect: {e}"))?;
            (ep, None, "fi_connect")
        } else {
            let pep = fabric
                .passive_ep(&info, 0)
                .map_err(|e| format!("fi_passive_ep: {e}"))?;
            pep.bind_eq(&eq).map_err(|e| format!("fi_pep_bind: {e}"))?;
            pep.listen().map_err(|e| format!("fi_listen: {e}"))?;
            let name = pep.getname().map_err(|e| format!("fi_getname: {e}"))?;
            oob.send(&name).map_err(|e| e.to_string())?;
            let req = eq_wait(&eq, "fi_listen")?;
            let rinfo = match (req.event, req.info) {
                (eq_event::FI_CONNREQ, Some(i)) => *i,
                (e, _) => return Err(format!("fi_listen: unexpected event {e}")),
            };
            let ep = endpoint(&rinfo, None, Some(&eq))?;
            ep.accept(&[]).map_err(|e| format!("fi_accept: {e}"))?;
            (ep, Some(pep), "fi_accept")
        };
        let ev = eq_wait(&eq, what)?;
        if ev.event != eq_event::FI_CONNECTED {
            return Err(format!("{what}: unexpected event {}", ev.event));
        }
        (ep, 0, None, Some(eq), pep)
    };
    let ctx = Ctx {
        ep,
        cq,
        peer,
        tagged,
        inject: info.tx_attr.inject_size,
        block,
        banked: std::cell::Cell::new((0, 0)),
        _av: av,
        _eq: eq,
        _pep: pep,
        _domain: domain,
        _fabric: fabric,
    };
    Ok((info, ctx))
}

/// Runs `ofi pingpong`; returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let a = match Args::parse(argv, "BPpeISmdWs", &["csv", "svg"]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ofi pingpong: {e}\n{USAGE}");
            return 2;
        }
    };
    if a.has("h") || a.has("help") {
        outln!("{USAGE}");
        return 0;
    }
    if a.has("local") {
        return local(argv);
    }
    match session(&a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ofi pingpong: {e}");
            1
        }
    }
}

/// Runs the server in a child process (pinned to CPU 0 when taskset is
/// available) and the client here (CPU 1): the README's main job.
fn local(argv: &[String]) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ofi pingpong --local: {e}");
            return 1;
        }
    };
    let port = 47592 + (std::process::id() % 1000) as u16;
    let rest: Vec<String> = argv.iter().filter(|x| *x != "--local").cloned().collect();
    // The server prints nothing and writes no files: the client reports.
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
        c.arg("pingpong").args(args).args(extra);
        c
    };
    let mut server = match spawn("0", &server_args, &["-B".into(), port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ofi pingpong --local: starting the server: {e}");
            return 1;
        }
    };
    let client = spawn(
        "1",
        &rest,
        &["-P".into(), port.to_string(), "127.0.0.1".into()],
    )
    .status();
    let _ = server.wait();
    match client {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("ofi pingpong --local: starting the client: {e}");
            1
        }
    }
}

fn connect(a: &Args) -> Result<(Oob, bool), String> {
    if let Some(host) = a.pos.first() {
        let port: u16 = a
            .get("P")
            .unwrap_or("47592")
            .parse()
            .map_err(|_| "bad -P port")?;
        let start = Instant::now();
        loop {
            match TcpStream::connect((host.as_str(), port)) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok((Oob(s), true));
                }
                Err(e) if start.elapsed() < Duration::from_secs(10) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("connecting to {host}:{port}: {e}")),
            }
        }
    }
    let port: u16 = a
        .get("B")
        .unwrap_or("47592")
        .parse()
        .map_err(|_| "bad -B port")?;
    let bind = a.get("s").unwrap_or("0.0.0.0");
    let l =
        TcpListener::bind((bind, port)).map_err(|e| format!("listening on {bind}:{port}: {e}"))?;
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok((Oob(s), false))
}

fn session(a: &Args) -> Result<(), String> {
    let (mut oob, client) = connect(a)?;
    let local = oob.0.local_addr().ok().map(|a| a.ip());
    let (info, ctx) = open(a, local, &mut oob, client)?;
    let iters: usize = a.get("I").unwrap_or("10").parse().map_err(|_| "bad -I")?;
    let warm: usize = a.get("W").unwrap_or("10").parse().map_err(|_| "bad -W")?;
    let sizes = match a.get("S") {
        None => DEFAULT_SIZES.to_vec(),
        Some("all") => all_sizes(),
        Some(s) => vec![parse_size(s).ok_or_else(|| format!("bad size '{s}'"))?],
    };
    let verify = a.has("c");
    let max = *sizes.iter().max().unwrap_or(&1);
    let mut tx = vec![0u8; max.max(1)];
    let mut rx = vec![0u8; max.max(1)];
    let mut rows = Vec::new();
    let mut lat = Vec::with_capacity(iters);
    outln!("{HEADER}");
    for &size in &sizes {
        oob.sync().map_err(|e| e.to_string())?;
        fill(&mut tx, size, 0);
        lat.clear();
        ctx.post_rx(&mut rx, size)
            .map_err(|e| format!("fi_recv: {e}"))?;
        let mut start = Instant::now();
        for i in 0..warm + iters {
            if i == warm {
                start = Instant::now();
            }
            let t0 = Instant::now();
            if verify {
                fill(&mut tx, size, i);
            }
            if client {
                let txc = ctx.tx(&tx, size).map_err(|e| format!("fi_send: {e}"))?;
                ctx.wait(1, usize::from(txc)).map_err(|e| e.to_string())?;
            } else {
                ctx.wait(1, 0).map_err(|e| e.to_string())?;
            }
            if verify {
                check(&rx, size, i)?;
            }
            if i + 1 < warm + iters || !client {
                ctx.post_rx(&mut rx, size)
                    .map_err(|e| format!("fi_recv: {e}"))?;
            }
            if !client {
                let txc = ctx.tx(&tx, size).map_err(|e| format!("fi_send: {e}"))?;
                if txc {
                    ctx.wait(0, 1).map_err(|e| e.to_string())?;
                }
            }
            if i >= warm {
                lat.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if !client {
            // The last posted receive is left over: cancel it for the next size.
            let _ = ctx.ep.cancel(RX_CTX);
            let mut e = [CqEntry::default(); 1];
            let _ = ctx.cq.read(&mut e);
            let _ = ctx.cq.readerr();
        }
        lat.sort_by(|x, y| x.total_cmp(y));
        let pick = |q: f64| {
            lat.get(((lat.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let row = Row {
            size,
            iters,
            secs,
            p50: pick(0.5),
            p99: pick(0.99),
            max: pick(1.0),
        };
        print_row(&row);
        rows.push(row);
    }
    oob.sync().map_err(|e| e.to_string())?;
    if let Some(f) = a.get("csv") {
        plot::write_csv(f, &rows).map_err(|e| format!("{f}: {e}"))?;
    }
    if let Some(f) = a.get("svg") {
        plot::write_svg(f, &rows, info.provider()).map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(())
}

/// Waits for one event on the EQ (connection management is slow: 30 s).
fn eq_wait(eq: &ofi::EventQueue, what: &str) -> Result<ofi::util_eq::EqEvent, String> {
    match eq.sread(Some(Duration::from_secs(30))) {
        Ok(e) => Ok(e),
        Err(e) if e.code() == errno::FI_EAVAIL => {
            let err = eq.readerr().map_err(|e| e.to_string())?;
            Err(format!(
                "{what}: {} ({})",
                ofi::error::strerror(err.err),
                err.err
            ))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_fi_pingpong() {
        assert_eq!(size_str(8), "8");
        assert_eq!(size_str(1536), "1.5k");
        assert_eq!(size_str(3072), "3k");
        assert_eq!(size_str(12288), "12k");
        assert_eq!(size_str(4_194_304_000), "3.9g");
        assert_eq!(cnt_str(10_000), "10k");
        assert_eq!(cnt_str(200_000), "200k");
        assert_eq!(size_str(3_200_000), "3m");
    }

    #[test]
    fn size_lists_match_fi_pingpong() {
        let all = all_sizes();
        assert_eq!(&all[..8], &[0, 1, 2, 3, 4, 6, 8, 12]);
        assert_eq!(*all.last().unwrap(), 6 << 20);
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("x"), None);
    }
}
