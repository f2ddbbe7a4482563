//! The NBD gateway: an NBD server (fixed newstyle, NBD_OPT_GO/INFO,
//! structured replies) whose every request goes to a target through a
//! [`Volume`]. Each client connection opens its own session; a reader
//! thread decodes requests and submits them (many in flight), a writer
//! thread sends the replies as completions arrive, in any order.

use crate::initiator::{Completion, Volume, VolumeOptions};
use crate::nbd::request::{self, Decoded, Forward};
use crate::nbd::wire::{self, chunk, err, REQUEST_LEN};
use crate::nbd::{Export, Handshake, Outcome};
use crate::wire::{feature, Status};
use std::collections::HashMap;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// Where the gateway listens.
#[derive(Debug)]
pub enum Listener {
    /// A TCP port.
    Tcp(TcpListener),
    /// A Unix socket.
    Unix(UnixListener),
}

/// What every connection forwards to.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// The target's control address (`host:port`).
    pub target: String,
    /// The session's settings.
    pub volume: VolumeOptions,
}

trait Stream: Read + Write + Send {
    fn split(&self) -> std::io::Result<Box<dyn Stream>>;
}
impl Stream for std::net::TcpStream {
    fn split(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}
impl Stream for std::os::unix::net::UnixStream {
    fn split(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}

/// Serves NBD clients until `stop` is set; each connection runs on its
/// own threads and ends with its client.
pub fn serve(l: Listener, opts: GatewayOptions, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    match &l {
        Listener::Tcp(t) => t.set_nonblocking(true)?,
        Listener::Unix(u) => u.set_nonblocking(true)?,
    }
    while !stop.load(Ordering::Relaxed) {
        let accepted: std::io::Result<Box<dyn Stream>> = match &l {
            Listener::Tcp(t) => t.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                let _ = s.set_nonblocking(false);
                Box::new(s) as Box<dyn Stream>
            }),
            Listener::Unix(u) => u.accept().map(|(s, _)| {
                let _ = s.set_nonblocking(false);
                Box::new(s) as Box<dyn Stream>
            }),
        };
        match accepted {
            Ok(s) => {
                let o = opts.clone();
                let _ = std::thread::Builder::new()
                    .name("ofi-nbd-conn".into())
                    .spawn(move || connection(s, &o));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let fd = match &l {
                    Listener::Tcp(t) => rustix::event::PollFd::new(t, rustix::event::PollFlags::IN),
                    Listener::Unix(u) => {
                        rustix::event::PollFd::new(u, rustix::event::PollFlags::IN)
                    }
                };
                let t = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                let _ = rustix::event::poll(&mut [fd], Some(&t));
            }
            Err(e) => {
                warn!("nbd: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    Ok(())
}

fn export_of(v: &Volume) -> Export {
    let f = v.features();
    Export {
        size: v.size(),
        read_only: v.read_only(),
        flush: f & feature::FLUSH != 0,
        trim: f & feature::TRIM != 0,
        zeroes: !v.read_only(),
        min_block: 1,
        preferred_block: v.block_size().max(4096).min(v.max_io()),
        max_payload: v.max_io(),
    }
}

/// What the writer needs to answer a request.
#[derive(Clone, Copy, Debug)]
struct Pending {
    cookie: u64,
    read_at: Option<u64>,
}

fn connection(mut s: Box<dyn Stream>, o: &GatewayOptions) {
    let vol = Volume::open(&o.target, &o.volume);
    if let Err(e) = &vol {
        warn!("nbd: target {} unavailable: {e}", o.target);
    }
    let export = vol
        .as_ref()
        .map(export_of)
        .map_err(|e| format!("target unavailable: {e}"));
    if s.write_all(&Handshake::greeting()).is_err() {
        return;
    }
    let mut h = Handshake::new(export.clone());
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let neg = loop {
        let mut b = [0u8; 4096];
        let n = match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&b[..n]);
        let (used, outcome) = h.input(&buf, &mut out);
        buf.drain(..used);
        if s.write_all(&out).is_err() {
            return;
        }
        out.clear();
        match outcome {
            Outcome::Continue => {}
            Outcome::Transmission(n) => break n,
            Outcome::Close(why) => {
                info!("nbd: handshake ended: {why}");
                return;
            }
        }
    };
    let (Ok(vol), Ok(export)) = (vol, export) else {
        return;
    };
    let Some(replies) = vol.take_completions() else {
        return;
    };
    let Ok(w) = s.split() else { return };
    let table: Arc<Mutex<HashMap<u64, Pending>>> = Arc::default();
    let submitted = Arc::new(AtomicU64::new(0));
    let reading = Arc::new(AtomicBool::new(true));
    let writer = {
        let (table, submitted, reading) = (table.clone(), submitted.clone(), reading.clone());
        let structured = neg.structured;
        std::thread::spawn(move || {
            let mut w = BufWriter::with_capacity(256 << 10, w);
            let mut answered = 0u64;
            loop {
                let c = match replies.recv_timeout(Duration::from_millis(100)) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => {
                        if !reading.load(Ordering::Acquire)
                            && answered == submitted.load(Ordering::Acquire)
                        {
                            break;
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                let mut next = Some(c);
                let mut broken = false;
                while let Some(c) = next {
                    answered += 1;
                    let p = table.lock().ok().and_then(|mut t| t.remove(&c.user));
                    if let Some(p) = p {
                        if reply(&mut w, p, c, structured).is_err() {
                            broken = true;
                            break;
                        }
                    }
                    next = replies.try_recv().ok();
                }
                if broken || w.flush().is_err() {
                    break;
                }
            }
            let _ = w.flush();
        })
    };
    let tx = vol.completion_sender();
    let mut tag = 0u64;
    let local = |user: u64, result: Result<Vec<u8>, Status>| {
        let _ = tx.send(Completion { user, result });
    };
    let mut hdr = [0u8; REQUEST_LEN];
    loop {
        if s.read_exact(&mut hdr).is_err() {
            break;
        }
        let d = match request::decode(&hdr, &export) {
            Ok(d) => d,
            Err(e) => {
                warn!("nbd: {e}: closing the connection");
                break;
            }
        };
        tag += 1;
        let (cookie, read_at) = match d {
            Decoded::Disconnect => break,
            Decoded::Ok { cookie, .. } | Decoded::Error { cookie, .. } => (cookie, None),
            Decoded::Forward { cookie, fwd } => match fwd {
                Forward::Read { offset, .. } => (cookie, Some(offset)),
                _ => (cookie, None),
            },
        };
        if let Ok(mut t) = table.lock() {
            t.insert(tag, Pending { cookie, read_at });
        }
        submitted.fetch_add(1, Ordering::AcqRel);
        match d {
            Decoded::Disconnect => {}
            Decoded::Ok { skip, .. } => {
                if discard(&mut s, skip).is_err() {
                    break;
                }
                local(tag, Ok(Vec::new()));
            }
            Decoded::Error { error, skip, .. } => {
                if discard(&mut s, skip).is_err() {
                    break;
                }
                local(tag, Err(status_of_errno(error)));
            }
            Decoded::Forward { fwd, .. } => match fwd {
                Forward::Read { offset, len } => vol.submit_read(offset, len, tag),
                Forward::Write { offset, len, fua } => {
                    let mut data = vec![0u8; len as usize];
                    if s.read_exact(&mut data).is_err() {
                        local(tag, Err(Status::Disconnected));
                        break;
                    }
                    vol.submit_write(offset, data, fua, tag);
                }
                Forward::Flush => vol.submit_flush(tag),
                Forward::Trim { offset, len, .. } => vol.submit_trim(offset, len, tag),
                Forward::Zero {
                    offset,
                    len,
                    fua,
                    no_hole,
                } => vol.submit_zeroes(offset, len, fua, no_hole, tag),
            },
        }
    }
    reading.store(false, Ordering::Release);
    let _ = writer.join();
    drop(vol);
}

/// NBD errors the request checks give, as statuses (mapped back by
/// [`Status::errno`]).
fn status_of_errno(e: u32) -> Status {
    match e {
        err::EPERM => Status::ReadOnly,
        err::ENOSPC => Status::NoSpace,
        err::ENOTSUP => Status::Unsupported,
        err::EOVERFLOW => Status::Invalid,
        _ => Status::Invalid,
    }
}

fn discard(s: &mut Box<dyn Stream>, mut n: u32) -> std::io::Result<()> {
    let mut b = [0u8; 64 << 10];
    while n > 0 {
        let k = (n as usize).min(b.len());
        s.read_exact(&mut b[..k])?;
        n -= k as u32;
    }
    Ok(())
}

fn reply(w: &mut impl Write, p: Pending, c: Completion, structured: bool) -> std::io::Result<()> {
    match (c.result, p.read_at) {
        (Ok(data), Some(offset)) => {
            if structured {
                w.write_all(&wire::read_chunk(p.cookie, offset, data.len() as u32))?;
            } else {
                w.write_all(&wire::simple_reply(0, p.cookie))?;
            }
            w.write_all(&data)
        }
        (Ok(_), None) => {
            if structured {
                w.write_all(&wire::chunk_header(
                    chunk::FLAG_DONE,
                    chunk::NONE,
                    p.cookie,
                    0,
                ))
            } else {
                w.write_all(&wire::simple_reply(0, p.cookie))
            }
        }
        (Err(st), _) => {
            let e = match st {
                Status::OutOfRange | Status::Invalid => err::EINVAL,
                s => s.errno(),
            };
            if structured {
                w.write_all(&wire::error_chunk(p.cookie, e))
            } else {
                w.write_all(&wire::simple_reply(e, p.cookie))
            }
        }
    }
}
