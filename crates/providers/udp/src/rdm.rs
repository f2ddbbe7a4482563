//! The RDM endpoint: the driver of `ofi_proto::udp::Rdm` (the tcp protocol
//! core over udp sessions) on one UDP socket. Each progress pass reads the
//! datagrams waiting, runs the timers due, sends what every peer has to
//! send and turns events into completions, deaths and log lines.
//!
//! Its unsafe blocks copy between datagrams and the memory of posted
//! operations and registered regions, which the raw layer's callers keep
//! valid until completion (and the region map while a grant is held), and
//! hand the kernel ranges of that memory to send.
#![allow(unsafe_code)]

use crate::domain::{Member, Shared};
use crate::sys::{Part as SysPart, RawAddr, UdpSocket, MAX_PARTS as SYS_PARTS};
use crate::UdpConfig;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{EndpointOps, Progress};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::auth::AuthKey;
use ofi_core::util::av::AvCore;
use ofi_core::util::hash::IdMap;
use ofi_core::util::iov::{copy_to_iov, IoVec};
use ofi_core::util::lock::SpinLock;
use ofi_core::util::peer::{DeadPeers, PeerDown};
use ofi_inet::tcp_core::completions::{drain_rx, rx_error};
use ofi_inet::tcp_core::one_sided::{ack_level, query_atomic, refused, Ops, Target};
use ofi_inet::tcp_core::sends::Sends;
use ofi_proto::tcp::{Ack, Memory, RecvReq, Req, FAST_MAX};
use ofi_proto::udp::{
    ChanConfig, FastMap, Part, PeerId, Rdm, RdmConfig, RdmEvent, SessionConfig, UserMem,
};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Most datagrams read per progress pass.
const BATCH: usize = 64;

/// User memory as the core names it: the copies it asks for, done here.
struct Direct;

impl UserMem for Direct {
    fn write(&mut self, iov: &[IoVec], src: &[u8]) -> usize {
        // SAFETY: the core names ranges of posted receives, of registered
        // regions it resolved for a peer's request (held by a grant), or of
        // its own requests' result buffers: all writable until their
        // operation completes (the raw layer's contract).
        unsafe { copy_to_iov(iov, 0, src) }
    }
    fn read(&mut self, from: IoVec, into: &mut [u8]) {
        // SAFETY: the core names ranges of pending sends and requests or of
        // regions resolved for a peer's READ: readable until completion;
        // `into` is the core's own buffer of `into.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(from.base as *const u8, into.as_mut_ptr(), into.len())
        };
    }
}

struct Inner {
    b: EpBindings,
    rdm: Rdm,
    sends: Sends,
    ops: Ops,
    dead: DeadPeers,
    /// Destination addresses by fi_addr, for the AV generation `dest_gen`.
    dests: IdMap<u64, PeerId>,
    dest_gen: u64,
    /// Kernel forms of peer addresses (see [`RawCache`]).
    raw: RawCache,
    /// Encoded form of the last source seen.
    last_src: Option<(SocketAddr, Vec<u8>)>,
    av_gen: u64,
    buf: Vec<u8>,
    src_ok: bool,
    /// The last transmit stopped at a bound with more to send.
    tx_more: bool,
    /// Peers the kernel reported unreachable (ICMP port unreachable), acted
    /// on once the datagrams queued ahead of the report are read.
    unreachable: Vec<Vec<u8>>,
}

/// A udp RDM endpoint.
pub struct RdmEp {
    shared: Arc<Shared>,
    sock: UdpSocket,
    me: Vec<u8>,
    enabled: AtomicBool,
    inner: SpinLock<Inner>,
}

impl RdmEp {
    /// Opens the endpoint on the offer's source address.
    pub fn open(
        cfg: &UdpConfig,
        info: &Info,
        shared: Arc<Shared>,
        key: Option<AuthKey>,
    ) -> Result<Arc<RdmEp>> {
        let src = match &info.src_addr {
            Some(b) => crate::addr::decode(b)?,
            None => "127.0.0.1:0".parse().expect("literal address"),
        };
        let sock = UdpSocket::bind(&src, false)
            .map_err(|e| Error::os(e, &format!("udp: binding {src}")))?;
        let granted = sock.set_buffers(cfg.socket_buffer);
        let local = sock
            .local_addr()
            .map_err(|e| Error::os(e, "udp: getsockname"))?;
        let _ = sock.no_fragments(local.is_ipv6());
        // ICMP port unreachable tells a dead peer at once.
        if let Err(e) = sock.report_errors(local.is_ipv6()) {
            tracing::debug!(error = %e, "udp: no ICMP error reports on this socket");
        }
        let me = crate::addr::encode(&local);
        let ifname = info.domain_attr.name.clone().unwrap_or_default();
        let max_datagram = crate::rdm_datagram(&ifname, local.is_ipv6(), cfg.max_datagram);
        // The window: what the socket holds (the kernel counts about twice
        // a datagram's bytes), within the tunable.
        let window = (granted / 2).clamp(64 << 10, cfg.window.max(64 << 10)) as u32;
        let epoch = loop {
            let n = ofi_core::util::auth::nonce()?;
            let e = u64::from_le_bytes(n[..8].try_into().expect("8 bytes"));
            if e != 0 {
                break e;
            }
        };
        let rcfg = RdmConfig {
            proto: ofi_proto::tcp::Config {
                eager_max: cfg.eager_max,
                ..Default::default()
            },
            rx: ofi_proto::tcp::RxConfig {
                max_unexpected_bytes: cfg.max_unexpected_bytes,
                depth: info.rx_attr.size.max(64),
                ..Default::default()
            },
            session: SessionConfig {
                epoch,
                my_addr: me.clone(),
                key,
                max_datagram,
                chan: ChanConfig {
                    window,
                    peer_timeout: cfg.peer_timeout,
                    ..Default::default()
                },
                max_half_open: 256,
                idle_timeout: cfg.idle_timeout,
                max_peers: cfg.max_peers,
            },
            copy_max: cfg.copy_max,
            tx_size: info.tx_attr.size.max(1),
            copy_budget: window as usize,
            copy_total: cfg.copy_budget,
        };
        // Nonces come from the system's random source (which answered for
        // the epoch just now). Should it fail later, a nonce is made unique
        // from the epoch, the clock and a counter: still fresh, so no
        // handshake can be replayed, only predictable (it is sent in clear
        // anyway; the key is what an impostor lacks).
        let mut fallback = 0u64;
        let opened = Instant::now();
        let nonces = Box::new(move || match ofi_core::util::auth::nonce() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "udp: the system's random source failed; using a unique fallback nonce");
                fallback += 1;
                let mut n = [0u8; ofi_core::util::auth::NONCE_LEN];
                n[..8].copy_from_slice(&epoch.to_le_bytes());
                n[8..24].copy_from_slice(&opened.elapsed().as_nanos().to_le_bytes());
                n[24..].copy_from_slice(&fallback.to_le_bytes());
                n
            }
        });
        shared
            .watch(sock.fd(), shared.key())
            .map_err(|e| Error::os(e, "udp: epoll add"))?;
        Ok(Arc::new(RdmEp {
            shared,
            sock,
            me,
            enabled: AtomicBool::new(false),
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                rdm: Rdm::new(rcfg, nonces),
                sends: Sends::new(crate::NAME),
                ops: Ops::new(crate::NAME),
                dead: DeadPeers::default(),
                dests: IdMap::default(),
                dest_gen: u64::MAX,
                raw: RawCache::default(),
                last_src: None,
                av_gen: 0,
                buf: vec![0u8; max_datagram.max(ofi_wire::udp::HDR_LEN + 1)],
                src_ok: info.caps & FI_SOURCE != 0,
                tx_more: false,
                unreachable: Vec::new(),
            }),
        }))
    }

    /// The core's peer at the address of `fi_addr` in the AV, cached per
    /// AV generation (the hot path looks it up without allocating).
    fn dest(
        b: &EpBindings,
        dests: &mut IdMap<u64, PeerId>,
        dest_gen: &mut u64,
        rdm: &mut Rdm,
        fi_addr: u64,
    ) -> Result<PeerId> {
        let av =
            b.av.as_ref()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "udp: no address vector bound"))?;
        let gen = av.generation();
        if gen != *dest_gen {
            dests.clear();
            *dest_gen = gen;
        }
        match dests.get(&fi_addr) {
            Some(&p) => Ok(p),
            None => Self::learn_dest(av, dests, rdm, fi_addr),
        }
    }

    /// Looks `fi_addr` up in the AV and caches its address.
    #[cold]
    #[inline(never)]
    fn learn_dest(
        av: &AvCore,
        dests: &mut IdMap<u64, PeerId>,
        rdm: &mut Rdm,
        fi_addr: u64,
    ) -> Result<PeerId> {
        let bytes = av.lookup(fi_addr).map_err(|_| {
            Error::inval(format!(
                "udp: destination fi_addr {fi_addr} is not in the address vector"
            ))
        })?;
        let sa = crate::addr::decode(&bytes)?;
        let peer = rdm.peer(&crate::addr::encode(&sa));
        dests.insert(fi_addr, peer);
        Ok(peer)
    }

    /// One progress pass: receive, timers, transmit, events. Transmitting
    /// is skipped when nothing since the last time can have given it work
    /// (no datagram that asks for an answer, no timer due, nothing from the
    /// receive side, no bound hit; see `Rdm::wants_transmit`): the pass of
    /// a busy-polling waiter is then one read and a look at the clock, and
    /// a datagram that only brings data is not followed by a pass over
    /// every peer.
    fn pass(&self, g: &mut Inner) {
        let now = Instant::now();
        self.receive(g, now);
        let mut work = g.rdm.wants_transmit() | g.tx_more;
        let Inner { b, rdm, .. } = g;
        if rdm.poll_timeout().is_some_and(|t| t <= now) {
            rdm.handle_timeout(now, &mut |a: &[u8]| resolve(&b.av, a));
            work = true;
        }
        if rdm.rx().has_wakeups() {
            rdm.wakeups(&mut Direct);
            work = true;
        }
        if work || rdm.rx().owes_frames() {
            self.transmit(g, now);
        }
        self.events(g);
    }

    /// Reads the datagrams waiting, at most [`BATCH`], and stops early at
    /// the first that completes something: the caller is about to report
    /// it, and a read that would only find the socket empty costs a system
    /// call before the application sees its completion (the rest wait for
    /// the next pass; the socket stays readable for a waiter).
    fn receive(&self, g: &mut Inner, now: Instant) {
        let Inner {
            b,
            rdm,
            last_src,
            buf,
            av_gen,
            unreachable,
            ..
        } = g;
        let av = &b.av;
        let mut resolve = |a: &[u8]| resolve(av, a);
        if let Some(av) = &b.av {
            let gen = av.generation();
            if gen != *av_gen {
                *av_gen = gen;
                rdm.refresh(&mut resolve);
            }
        }
        let mut drained = false;
        for _ in 0..BATCH {
            let r = match self.sock.recv_from(buf) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    drained = true;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    // Nothing listens where an earlier datagram went: the
                    // error queue says where; that peer's operations fail
                    // instead of at the dead bound. Not yet: the kernel
                    // reports the error ahead of the datagrams already
                    // queued, and those may be the peer's last words (the
                    // acknowledgement and RESET of an orderly close).
                    while let Ok(Some((to, refused))) = self.sock.recv_err() {
                        if !refused {
                            continue;
                        }
                        tracing::debug!(peer = %to, "udp: port unreachable");
                        let to = crate::addr::encode(&to);
                        if !unreachable.contains(&to) {
                            unreachable.push(to);
                        }
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "udp: receive failed");
                    break;
                }
            };
            if r.truncated {
                tracing::debug!(from = %r.from, "udp: dropping a datagram larger than any this endpoint takes");
                continue;
            }
            let from = match last_src {
                Some((sa, enc)) if *sa == r.from => enc,
                _ => &mut last_src.insert((r.from, crate::addr::encode(&r.from))).1,
            };
            rdm.on_datagram(now, from, &buf[..r.len], &mut Direct, &mut resolve);
            if rdm.completes() {
                break;
            }
        }
        if drained {
            for to in unreachable.drain(..) {
                rdm.on_port_unreachable(now, &to, &mut resolve);
            }
        }
    }

    /// Sends what every peer has to send.
    fn transmit(&self, g: &mut Inner, now: Instant) {
        let Inner {
            rdm, raw, tx_more, ..
        } = g;
        let mut send = sender(&self.sock, raw);
        *tx_more = rdm.poll_transmit(now, &mut Direct, &mut send);
    }

    /// Turns the core's events into completions, deaths and log lines.
    fn events(&self, g: &mut Inner) {
        while let Some(e) = g.rdm.poll_event() {
            match e {
                RdmEvent::Op(ev) => match ev {
                    ofi_proto::tcp::Event::SendComplete { context } => {
                        g.sends.complete(&g.b, context, None)
                    }
                    ofi_proto::tcp::Event::SendError { context, err } => {
                        g.sends.complete(&g.b, context, Some(err))
                    }
                    ofi_proto::tcp::Event::RmaComplete { context } => {
                        g.ops.complete(&g.b, context, None)
                    }
                    ofi_proto::tcp::Event::RmaError { context, err } => {
                        g.ops.complete(&g.b, context, Some(err))
                    }
                    _ => {}
                },
                RdmEvent::PeerUp { fi_addr, addr } => g.dead.revive(fi_addr, &addr),
                RdmEvent::PeerDown {
                    fi_addr,
                    addr,
                    cause,
                    closed,
                } => {
                    let name =
                        crate::addr::decode(&addr).map_or_else(|_| "?".into(), |a| a.to_string());
                    let down = PeerDown {
                        fi_addr,
                        addr,
                        cause,
                    };
                    g.dead.declare(&g.b, &down, &name, closed);
                    if fi_addr != FI_ADDR_NOTAVAIL {
                        g.rdm.rx().fail_directed(fi_addr, cause.errno());
                    }
                }
                RdmEvent::Refused { addr, why, .. } => {
                    let peer = crate::addr::decode(&addr).ok();
                    tracing::warn!(?peer, "udp: authentication failed: {why}");
                }
                RdmEvent::Broken { addr, why } => {
                    let peer = crate::addr::decode(&addr).ok();
                    tracing::warn!(
                        ?peer,
                        "udp: resetting the session of a peer that broke the protocol: {why}"
                    );
                }
                RdmEvent::Dropped { why } => tracing::debug!("udp: dropped {why}"),
                RdmEvent::Expired { addr } => {
                    let peer = crate::addr::decode(&addr).ok();
                    tracing::debug!(?peer, "udp: an idle session ended");
                }
            }
        }
        let src_ok = g.src_ok;
        let Inner { b, rdm, .. } = &mut *g;
        if rdm.rx().has_events() {
            drain_rx(b, rdm.rx(), src_ok);
        }
    }

    /// The fast path of a small send to a peer whose session is up and
    /// whose connection is idle (`Rdm::send_now`): copied and sent at once,
    /// complete before this returns, nothing registered. False: take the
    /// queue.
    fn send_fast(&self, g: &mut Inner, op: &SendOp<'_>) -> bool {
        // Larger sends are the queue's (as are injects beyond the limit,
        // which it refuses).
        if ofi_core::util::iov::iov_len(op.iov) > FAST_MAX.min(crate::INJECT_SIZE) {
            return false;
        }
        let Some(req) = Sends::bare(op) else {
            return false;
        };
        let Inner {
            b,
            rdm,
            dests,
            dest_gen,
            raw,
            tx_more,
            ..
        } = g;
        // An error (no AV, an unknown fi_addr) is the queue's to report.
        let Ok(to) = Self::dest(b, dests, dest_gen, rdm, op.dest) else {
            return false;
        };
        let now = Instant::now();
        let mut send = sender(&self.sock, raw);
        match rdm.send_now(now, op.dest, to, &req, &mut Direct, &mut send) {
            Some(more) => {
                *tx_more |= more;
                Sends::complete_now(b, op);
                true
            }
            None => false,
        }
    }

    /// Queues an operation to `dest` and drives the endpoint.
    fn queue(&self, g: &mut Inner, dest: u64, req: Req) -> std::result::Result<(), i32> {
        let Inner {
            b,
            rdm,
            dests,
            dest_gen,
            ..
        } = g;
        let to = Self::dest(b, dests, dest_gen, rdm, dest).map_err(|e| e.code())?;
        let now = Instant::now();
        rdm.queue_to(now, dest, to, req)?;
        // What was queued goes now; receiving waits for the next progress
        // call (a read here would mostly find the socket empty, a system
        // call in front of every send).
        self.transmit(g, now);
        self.events(g);
        Ok(())
    }
}

impl Member for RdmEp {
    fn drive(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut g) = self.inner.try_lock() {
            self.pass(&mut g);
        }
    }
    fn deadline(&self) -> Option<Instant> {
        self.inner.try_lock().and_then(|g| g.rdm.poll_timeout())
    }
    fn restless(&self) -> bool {
        self.inner.try_lock().is_none_or(|g| g.rdm.has_events())
    }
}

impl Progress for RdmEp {
    fn progress(&self) {
        self.shared.progress();
    }
    fn arm(&self) -> bool {
        self.shared.arm()
    }
    fn disarm(&self) {
        self.shared.disarm();
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.shared.fd())
    }
}

/// Most kernel addresses kept: every destination is cached, strangers
/// answered with a RESET or a HELLO_ACK included, so the cache starts
/// over when full rather than grow with each forged source.
const RAW_CACHE: usize = 4096;

/// Kernel forms of peer addresses by their encoded form: the last one
/// used (consecutive datagrams mostly go to one peer: compared, not
/// hashed), then a map of at most [`RAW_CACHE`].
#[derive(Default)]
struct RawCache {
    last: Option<(Vec<u8>, RawAddr)>,
    map: FastMap<Vec<u8>, RawAddr>,
}

impl RawCache {
    /// The kernel form of `to` (None: not an address).
    #[inline]
    fn get(&mut self, to: &[u8]) -> Option<&RawAddr> {
        let hit = self.last.as_ref().is_some_and(|(k, _)| k.as_slice() == to);
        if !hit {
            let a = raw_addr(&mut self.map, to)?.clone();
            self.last = Some((to.to_vec(), a));
        }
        self.last.as_ref().map(|(_, a)| a)
    }
}

/// The kernel form of `to` (None: not an address), cached.
fn raw_addr<'a>(raw: &'a mut FastMap<Vec<u8>, RawAddr>, to: &[u8]) -> Option<&'a RawAddr> {
    if !raw.contains_key(to) {
        let sa = crate::addr::decode(to).ok()?;
        if raw.len() >= RAW_CACHE {
            raw.clear();
        }
        raw.insert(to.to_vec(), RawAddr::new(&sa));
    }
    raw.get(to)
}

/// The core's `send`: one datagram to `to` on `sock`, its parts gathered
/// by the kernel (or, small, by `send_to`).
fn sender<'a>(sock: &'a UdpSocket, raw: &'a mut RawCache) -> impl FnMut(&[u8], &[Part<'_>]) + 'a {
    move |to: &[u8], parts: &[Part<'_>]| {
        let Some(a) = raw.get(to) else {
            return;
        };
        let mut v = [SysPart { base: 0, len: 0 }; SYS_PARTS];
        let n = parts.len().min(SYS_PARTS);
        for (o, p) in v.iter_mut().zip(&parts[..n]) {
            *o = match p {
                Part::Bytes(b) => SysPart::bytes(b),
                Part::Iov(i) => SysPart {
                    base: i.base,
                    len: i.len,
                },
            };
        }
        // SAFETY: core bytes live for this call; user ranges belong to
        // pending sends or requests (readable until they complete).
        if let Err(e) = unsafe { sock.send_to(a, &v[..n]) } {
            // Lost like any datagram: the session sends it again.
            tracing::trace!(error = %e, "udp: a datagram was not sent");
        }
    }
}

/// The fi_addr of a peer address in `av` (`FI_ADDR_NOTAVAIL` when not in
/// it, unless the AV learns senders: see `AvCore::set_learning`).
fn resolve(av: &Option<Arc<AvCore>>, a: &[u8]) -> u64 {
    match av {
        Some(av) => av.reverse_or_learn(a).unwrap_or(FI_ADDR_NOTAVAIL),
        None => FI_ADDR_NOTAVAIL,
    }
}

fn not_enabled(what: &str) -> Error {
    Error::new(
        errno::FI_EOPBADSTATE,
        format!("udp: {what} on an endpoint that is not enabled"),
    )
}

impl EndpointOps for RdmEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut g = self.inner.lock();
        let target = Target::for_endpoint(&b).map(|t| Box::new(t) as Box<dyn Memory>);
        g.rdm.rx().set_memory(target);
        if let Some(x) = &b.srx {
            g.rdm.rx().set_shared(x.srx.clone(), x.member);
        }
        g.src_ok = b.info.caps & FI_SOURCE != 0;
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(self.me.clone())
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(not_enabled("send"));
        }
        let mut g = self.inner.lock();
        let ack = ack_level(op.flags, g.b.info.tx_attr.op_flags);
        if ack == Ack::None && op.flags & FI_FENCE == 0 && self.send_fast(&mut g, op) {
            return Ok(());
        }
        let selective = g.b.tx_selective;
        // SAFETY: post_send's caller keeps `op`'s ranges readable for this
        // call, and until the send completes unless FI_INJECT (which start
        // copies here): start's contract.
        let mut req = unsafe { g.sends.start(op, selective, crate::INJECT_SIZE)? };
        req.ack = ack;
        req.fence = op.flags & FI_FENCE != 0;
        if let Err(e) = self.queue(&mut g, op.dest, Req::Send(req)) {
            g.sends.abandon(&req);
            return Err(Error::new(e, "udp: the send was refused"));
        }
        Ok(())
    }
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(not_enabled("RMA"));
        }
        let mut g = self.inner.lock();
        let selective = g.b.tx_selective;
        // SAFETY: post_rma's caller keeps the local ranges valid until the
        // request completes (with FI_INJECT, for this call, and start_rma
        // copies them): start_rma's contract.
        let req = unsafe { g.ops.start_rma(op, selective)? };
        if let Err(e) = self.queue(&mut g, op.addr, Req::Rma(req)) {
            g.ops.abandon(&req);
            return Err(refused(crate::NAME, e));
        }
        Ok(())
    }
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(not_enabled("atomic"));
        }
        let mut g = self.inner.lock();
        let selective = g.b.tx_selective;
        // SAFETY: post_atomic's caller keeps operand, compare and result
        // memory valid until the atomic completes: start_atomic's contract.
        let req = unsafe { g.ops.start_atomic(op, selective)? };
        if let Err(e) = self.queue(&mut g, op.addr, Req::Rma(req)) {
            g.ops.abandon(&req);
            return Err(refused(crate::NAME, e));
        }
        Ok(())
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        query_atomic(kind, op, datatype)
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(not_enabled("receive"));
        }
        let mut g = self.inner.lock();
        let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let mut req = if op.tagged {
            RecvReq::tagged(op.iov, op.tag, op.ignore, op.context)
        } else {
            RecvReq::msg(op.iov, op.context)
        };
        req = req.with_flags(op.flags | if completion { FI_COMPLETION } else { 0 });
        if op.src != FI_ADDR_UNSPEC {
            if let Some(err) = g.dead.dead(op.src) {
                // Its peer is dead: no message will come.
                let flags = FI_RECV | if op.tagged { FI_TAGGED } else { FI_MSG };
                rx_error(&g.b, op.context, flags, err, op.tag);
                return Ok(());
            }
            req = req.from_src(op.src);
        }
        g.rdm
            .rx()
            .post_recv(&req)
            .map_err(|e| Error::new(e, "udp: receive refused"))?;
        // The receive may free a blocked connection or answer a waiting
        // rendezvous: that goes now. Reading the socket waits for the next
        // progress call.
        let rx = g.rdm.rx();
        if rx.has_wakeups() || rx.owes_frames() {
            let now = Instant::now();
            g.rdm.wakeups(&mut Direct);
            self.transmit(&mut g, now);
        }
        self.events(&mut g);
        Ok(())
    }
    fn srx_posted(&self) {
        let mut g = self.inner.lock();
        if !g.rdm.rx().rescan_shared() {
            return;
        }
        // As after a post: a matched rendezvous or a freed connection
        // answers now.
        let rx = g.rdm.rx();
        if rx.has_wakeups() || rx.owes_frames() {
            let now = Instant::now();
            g.rdm.wakeups(&mut Direct);
            self.transmit(&mut g, now);
        }
        self.events(&mut g);
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.inner.lock();
        g.rdm
            .rx()
            .cancel(context)
            .map_err(|e| Error::new(e, "udp: no posted receive has this context"))?;
        self.events(&mut g);
        Ok(())
    }
    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => {
                self.inner.lock().rdm.rx().set_min_multi_recv(value);
                Ok(())
            }
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("udp: option {name} is not supported"),
            )),
        }
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => Ok(self.inner.lock().rdm.rx().config().min_multi_recv),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("udp: option {name} is not supported"),
            )),
        }
    }
    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        self.shared.unwatch(self.sock.fd());
        let mut g = self.inner.lock();
        let peers: Vec<u64> = g.rdm.sessions().up_peers().collect();
        for p in peers {
            if let Some(st) = g.rdm.stats(p) {
                tracing::debug!(peer = p, ?st, drops = ?g.rdm.sessions().drops(), "udp: session statistics at close");
            }
        }
        let Inner { rdm, raw, buf, .. } = &mut *g;
        let sock = &self.sock;
        // Handshakes that reached us but were never read are refused (their
        // senders fail at once instead of at the dead bound).
        for _ in 0..BATCH * 4 {
            let r = match sock.recv_from(buf) {
                Ok(Some(r)) => r,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                _ => break,
            };
            if let Some(answer) = ofi_proto::udp::closing_answer(&buf[..r.len]) {
                let a = RawAddr::new(&r.from);
                // SAFETY: the answer lives for this call.
                let _ = unsafe { sock.send_to(&a, &[SysPart::bytes(&answer)]) };
            }
        }
        rdm.close(&mut |to: &[u8], parts: &[Part<'_>]| {
            let Some(a) = raw.get(to) else {
                return;
            };
            let v: Vec<SysPart> = parts
                .iter()
                .filter_map(|p| match p {
                    Part::Bytes(b) => Some(SysPart::bytes(b)),
                    Part::Iov(_) => None,
                })
                .collect();
            // SAFETY: the parts are core bytes that live for this call.
            let _ = unsafe { sock.send_to(a, &v) };
        });
        g.dead.clear();
        g.b = EpBindings::default();
    }
}

#[cfg(test)]
mod raw_cache_tests {
    use super::*;

    /// Destinations from a flood of forged sources: the cache stays
    /// bounded and still answers each one.
    #[test]
    fn the_address_cache_is_bounded() {
        let mut raw = FastMap::default();
        for i in 0..3 * RAW_CACHE as u32 {
            let sa = SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 9));
            let to = crate::addr::encode(&sa);
            assert!(raw_addr(&mut raw, &to).is_some());
            assert!(raw.len() <= RAW_CACHE);
        }
        assert!(raw_addr(&mut raw, b"not an address").is_none());
    }
}
