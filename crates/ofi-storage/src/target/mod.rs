//! The target driver: serves one [`Backend`] to every initiator that
//! connects, running the [`TargetCore`] over an ofi channel. A control
//! listener (TCP) takes each initiator's fabric address and gives it a
//! token; capsules arrive as fabric messages; data moves by RMA between
//! the initiators' registered buffers and staging buffers here; completions
//! go back as capsules. One thread does everything; file I/O runs inline,
//! straight between the staging buffer the fabric lands the data in and
//! the file (pread/pwrite, or O_DIRECT with [`TargetOptions::direct`]: the
//! staging buffers are aligned for it).
//!
//! Over MSG endpoints ([`EpKind::Msg`]) there is no control listener: the
//! channel listens on the control address itself, accepts one connection
//! per initiator (the accept carries its token), posts that connection's
//! receives, and treats its shutdown or failure as the initiator's death.

use crate::backend::{Backend, DIRECT_ALIGN};
use crate::backlog::Backlog;
use crate::control;
use crate::core::target::{Action, Io, OpId, PeerId, TargetConfig, TargetCore};
use crate::net::{EpKind, NetOptions};
use crate::post;
use crate::wire::{feature, Repr, Status, BATCH_BYTES, CAPSULE_LEN};
use bytes::{Buf, BytesMut};
use ofi::safe::{Addr, Channel, CmEvent, Op};
use rustix::event::PollFlags;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

mod driver;
use driver::Driver;

/// How a target is set up.
#[derive(Clone, Debug)]
pub struct TargetOptions {
    /// The fabric.
    pub net: NetOptions,
    /// Where the control listener binds (over MSG: the passive endpoint).
    pub listen: SocketAddr,
    /// Create or extend the backing file to this size.
    pub size: Option<u64>,
    /// Refuse every change.
    pub read_only: bool,
    /// Aligned reads and writes bypass the page cache (O_DIRECT; see
    /// [`Backend::direct`]).
    pub direct: bool,
    /// Limits of the core (size and read-only are taken from the backend).
    pub config: TargetConfig,
    /// The control plane's bounds: connections, setup time, liveness.
    pub limits: Limits,
}

impl Default for TargetOptions {
    fn default() -> Self {
        TargetOptions {
            net: NetOptions::default(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            size: None,
            read_only: false,
            direct: false,
            config: TargetConfig::default(),
            limits: Limits::default(),
        }
    }
}

/// What a connecting or connected initiator may hold, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Initiators connected at once (control connections, or MSG
    /// connections), set up or not; more are refused at once (`Busy`).
    /// (0 counts as 1.)
    pub max_initiators: usize,
    /// From its connection to its session's ACCEPT (HELLO, then CONNECT):
    /// an initiator slower than this is dropped.
    pub setup_timeout: Duration,
    /// A control connection whose peer has not answered for this long
    /// (TCP keepalive probes, or unacknowledged data) ends, and with it
    /// the session: a host partitioned away or powered off gives its
    /// credits back after it (whole seconds, 2 s to a day; see
    /// [`control::keepalive`]). A host that answers keeps an idle
    /// session.
    pub liveness: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_initiators: 256,
            setup_timeout: Duration::from_secs(10),
            liveness: control::LIVENESS,
        }
    }
}

/// A bound target, ready to [`run`](Target::run).
#[derive(Debug)]
pub struct Target {
    /// The control listener (RDM; an MSG channel listens itself).
    listener: Option<TcpListener>,
    ch: Channel,
    backend: Backend,
    core: TargetCore,
    stop: Arc<AtomicBool>,
    limits: Limits,
}

#[derive(Debug)]
struct Peer {
    ctl: Option<TcpStream>,
    inbuf: Vec<u8>,
    addr: Option<Addr>,
    token: u64,
    session: Option<u32>,
    /// Until its session opens: the time by which it must have.
    setup_by: Option<Instant>,
}

/// Capsule receives kept posted (RDM: shared by every initiator).
const RECVS: usize = 256;

/// Capsule receives kept posted on each MSG connection.
const RECVS_PER_CONN: usize = 64;

/// Longest time between two looks at the control sockets while busy.
const CONTROL_EVERY: Duration = Duration::from_millis(5);

/// Longest an RMA waits for the provider to take it (FI_EAGAIN each
/// time) before its command fails with a transfer error: as long as an
/// initiator waits for an answer by default, so the path to that peer is
/// stuck rather than busy.
const RMA_PATIENCE: Duration = Duration::from_secs(30);

/// An RMA of a command: ready to post, or waiting to be after FI_EAGAIN.
#[derive(Debug)]
struct Rma {
    op: OpId,
    slot: u32,
    /// Reads the initiator's buffer (a WRITE's data) rather than writes it.
    read: bool,
    dest: Addr,
    addr: u64,
    key: u64,
    buf: BytesMut,
}

/// What posting an [`Rma`] did.
enum Posting<'ch> {
    /// It runs: (command, slot, peer, handle).
    Running(Running<'ch>),
    /// The provider pushed back (FI_EAGAIN): try again later.
    Again(Rma),
    /// Refused for good.
    Failed(Rma, ofi::Error),
}

/// An RMA in flight: its command, staging slot, peer and handle.
type Running<'ch> = (OpId, u32, Addr, Op<'ch, BytesMut>);

/// A staging buffer of `cap` bytes whose first byte is aligned to
/// [`DIRECT_ALIGN`] (a window of a slightly larger allocation; it never
/// grows past `cap`, so it never moves).
fn staging(cap: usize) -> BytesMut {
    let mut b = BytesMut::zeroed(cap + DIRECT_ALIGN);
    let at = b.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
    b.advance(at);
    b.truncate(cap);
    b
}

fn post_rma(ch: &Channel, r: Rma) -> Posting<'_> {
    let Rma {
        op,
        slot,
        read,
        dest,
        addr,
        key,
        buf,
    } = r;
    let posted = if read {
        ch.read(buf, dest, addr, key)
    } else {
        ch.write(buf, dest, addr, key)
    };
    match posted {
        Ok(h) => Posting::Running((op, slot, dest, h)),
        Err(e) => {
            let again = e.error.is_again();
            let r = Rma {
                op,
                slot,
                read,
                dest,
                addr,
                key,
                buf: e.buf,
            };
            if again {
                Posting::Again(r)
            } else {
                Posting::Failed(r, e.error)
            }
        }
    }
}

/// A connection's token (it ties a CONNECT to its control connection,
/// where a channel without FI_SOURCE has nothing else to go by), from the
/// system's random source: a guessable one would let another host's
/// process claim the connection, so a failed source refuses it instead.
fn token() -> Result<u64, String> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| format!("the system's random source failed: {e}"))?;
    Ok(u64::from_ne_bytes(b))
}

impl Target {
    /// Opens the backing store at `path`, the fabric channel and the
    /// control listener.
    pub fn bind(path: &Path, opts: &TargetOptions) -> Result<Target, String> {
        let mut backend = Backend::open(path, opts.size, opts.read_only)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if opts.direct {
            backend = backend.direct(path).map_err(|e| e.to_string())?;
        }
        Target::with_backend(backend, opts)
    }

    /// Serves `backend` (`opts.size` and `opts.read_only` are the
    /// backend's business here): opens the fabric channel and the control
    /// listener.
    pub fn with_backend(backend: Backend, opts: &TargetOptions) -> Result<Target, String> {
        let (ch, listener) = match opts.net.ep {
            EpKind::Rdm => {
                let info = opts.net.offer().map_err(|e| format!("fabric offer: {e}"))?;
                let ch = Channel::open(&info).map_err(|e| format!("fabric channel: {e}"))?;
                let listener = TcpListener::bind(opts.listen)
                    .map_err(|e| format!("control listener on {}: {e}", opts.listen))?;
                listener
                    .set_nonblocking(true)
                    .map_err(|e| format!("control listener: {e}"))?;
                (ch, Some(listener))
            }
            EpKind::Msg => {
                let (ip, port) = (opts.listen.ip().to_string(), opts.listen.port().to_string());
                let info = opts
                    .net
                    .msg_offer(Some(&ip), Some(&port), true)
                    .map_err(|e| format!("fabric offer: {e}"))?;
                let ch = Channel::open(&info).map_err(|e| format!("fabric channel: {e}"))?;
                ch.listen()
                    .map_err(|e| format!("listening on {}: {e}", opts.listen))?;
                (ch, None)
            }
        };
        let mut cfg = opts.config;
        cfg.size = backend.size();
        cfg.read_only = backend.read_only();
        if cfg.read_only {
            cfg.features &= !(feature::TRIM | feature::ZEROES);
        }
        Ok(Target {
            listener,
            ch,
            backend,
            core: TargetCore::new(cfg),
            stop: Arc::new(AtomicBool::new(false)),
            limits: opts.limits,
        })
    }

    /// The control address initiators connect to (over MSG: the passive
    /// endpoint's).
    pub fn local_addr(&self) -> SocketAddr {
        let any = SocketAddr::from(([0, 0, 0, 0], 0));
        match &self.listener {
            Some(l) => l.local_addr().unwrap_or(any),
            None => self
                .ch
                .address()
                .ok()
                .and_then(|a| crate::net::sockaddr(&a))
                .unwrap_or(any),
        }
    }

    /// The volume's size.
    pub fn size(&self) -> u64 {
        self.backend.size()
    }

    /// The provider serving the data path.
    pub fn provider(&self) -> String {
        self.ch
            .info()
            .fabric_attr
            .prov_name
            .clone()
            .unwrap_or_default()
    }

    /// A flag that, once set, makes [`run`](Self::run) stop accepting
    /// work, finish what runs and return.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Serves until the stop flag is set.
    pub fn run(mut self) -> Result<(), String> {
        let Target {
            listener,
            ch,
            backend,
            core,
            stop,
            limits,
        } = &mut self;
        let cfg = *core.config();
        Driver {
            ch,
            listener: listener.as_ref(),
            backend,
            core,
            stop,
            peers: HashMap::new(),
            by_addr: HashMap::new(),
            tokens: HashMap::new(),
            sessions: HashMap::new(),
            next_peer: 1,
            outbox: VecDeque::new(),
            collected: false,
            sources: listener.is_none() || ch.info().caps & ofi::consts::FI_SOURCE != 0,
            recvs: Vec::new(),
            closing: Vec::new(),
            slots: (0..cfg.slots)
                .map(|_| Some(staging(cfg.max_io as usize)))
                .collect(),
            backlog: Backlog::new(cfg.slots as usize),
            limits: *limits,
            refused: 0,
        }
        .run()
    }
}
