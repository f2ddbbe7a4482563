//! The RDM endpoint: reliable datagrams over connections made on first use
//! to each address-vector peer. One listening socket per endpoint (its
//! address is the endpoint's name); crossing connects are resolved so both
//! sides keep the same connection; one receive side shared by every
//! connection matches messages in arrival order per connection.
//!
//! A peer is its address: one connection per peer address, whichever
//! fi_addr names it (duplicates in the AV are aliases, see
//! `ofi_core::util::av`) or none (it connected before its address was
//! inserted). Per-peer state (a connection's source for FI_SOURCE and
//! directed receives, dead peers) uses the peer's primary fi_addr.
#![allow(unsafe_code)]

use crate::domain::{Member, Shared};
use crate::gate::{Accepting, Gate};
use crate::link::{Fast, Link};
use crate::sys::Socket;
use crate::{TcpConfig, INJECT_SIZE};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{EndpointOps, Progress};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::auth::AuthKey;
use ofi_core::util::hash::IdMap;
use ofi_core::util::lock::SpinLock;
use ofi_core::util::peer::DeadPeers;
use ofi_inet::tcp_core::completions::rx_error;
use ofi_inet::tcp_core::one_sided::{ack_level, query_atomic, refused, Ops, Target};
use ofi_inet::tcp_core::sends::Sends;
use ofi_proto::tcp::{ConnId, Memory, RecvReq, Req, Rx, RxConfig};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod accept;
mod drive;
mod route;

/// Below this many connections every one is polled directly (no epoll_wait).
const DIRECT_POLL: usize = 4;
/// Fewest and most polling passes between looks for new connections.
const ACCEPT_EVERY_MIN: u32 = 16;
const ACCEPT_EVERY_MAX: u32 = 1024;

struct Peer {
    link: Link,
    /// The peer's primary fi_addr (`FI_ADDR_NOTAVAIL` while its address
    /// is not in the AV).
    fi_addr: u64,
    outgoing: bool,
    /// The peer's address (its endpoint's name): from the AV for an
    /// outgoing connection, from its HELLO for an incoming one; empty until
    /// known.
    name: Vec<u8>,
}

struct Inner {
    b: EpBindings,
    rx: Rx,
    sends: Sends,
    ops: Ops,
    peers: IdMap<ConnId, Peer>,
    /// The connection carrying traffic to each identified peer, by the
    /// peer's address: at most one per peer.
    by_name: HashMap<Vec<u8>, ConnId>,
    /// Route cache: a destination fi_addr (any alias) to its peer's
    /// connection in `by_name` (entries of a connection go with it).
    by_addr: IdMap<u64, ConnId>,
    /// Requests for a peer whose connection was refused for a crossing
    /// one, until that one identifies itself (bounded: see `Parked`).
    parked: HashMap<Vec<u8>, Parked>,
    /// Identified connections whose peer's address was not in the AV:
    /// looked up again after inserts (`resolve_unknown`).
    unknown: Vec<ConnId>,
    av_gen: u64,
    /// The AV's insert count when `unknown` was last resolved.
    av_inserts: u64,
    ready: Vec<u64>,
    /// Passes over the links since the last look for new connections.
    polls: u32,
    /// Passes between looks for new connections (see `drive_all`).
    accept_every: u32,
    src_ok: bool,
    /// Some connection's socket is out of the poller (see `drive_all`).
    unwatched: bool,
    /// Peers declared dead (`ofi_core::util::peer`).
    dead: DeadPeers,
    /// Incoming connections in their handshake (cap and deadline).
    gate: Gate,
    /// The listener's accept state (backoff, rate-limited warnings).
    accepting: Accepting,
}

/// Requests waiting for a peer's crossing connection.
struct Parked {
    reqs: Vec<Req>,
    /// The peer's primary fi_addr.
    fi_addr: u64,
    /// When they were parked: past the peer timeout without a connection
    /// they go out on a new one (`unpark_stale`), so none waits forever.
    since: Instant,
}

/// Where an RDM endpoint listens.
struct Name {
    listener: Socket,
    me: Vec<u8>,
}

/// A tcp RDM endpoint.
pub struct TcpRdmEp {
    cfg: TcpConfig,
    shared: Arc<Shared>,
    /// The listening socket and the address it gives (`fi_getname`), which
    /// `fi_setname` may move before the endpoint is enabled.
    name: SpinLock<Name>,
    listener_key: u64,
    /// The auth key every handshake proves (`None`: none).
    key: Option<AuthKey>,
    /// The offer's address format (what `setname` accepts).
    format: u32,
    enabled: AtomicBool,
    inner: SpinLock<Inner>,
}

impl TcpRdmEp {
    /// Opens the endpoint and its listening socket on the offer's source address.
    pub fn open(
        cfg: TcpConfig,
        info: &Info,
        shared: Arc<Shared>,
        key: Option<AuthKey>,
    ) -> Result<TcpRdmEp> {
        let src = match &info.src_addr {
            Some(b) => crate::addr::decode(b)?,
            None => "127.0.0.1:0".parse().expect("literal address"),
        };
        let listener = Socket::listen_in(&src, cfg.port_range)?;
        let me = crate::addr::encode(
            &listener
                .local_addr()
                .map_err(|e| Error::os(e, "tcp: getsockname"))?,
        );
        let listener_key = shared.key();
        shared
            .poller
            .add(&listener, listener_key, false)
            .map_err(|e| Error::os(e, "tcp: epoll add"))?;
        let rxc = RxConfig {
            max_unexpected_bytes: cfg.max_unexpected_bytes,
            depth: info.rx_attr.size.max(64),
            ..Default::default()
        };
        Ok(TcpRdmEp {
            cfg,
            shared,
            listener_key,
            name: SpinLock::new(Name { listener, me }),
            key,
            format: info.addr_format,
            enabled: AtomicBool::new(false),
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                rx: Rx::new(rxc),
                sends: Sends::new(crate::NAME),
                ops: Ops::new(crate::NAME),
                peers: IdMap::default(),
                by_name: HashMap::new(),
                by_addr: IdMap::default(),
                parked: HashMap::new(),
                unknown: Vec::new(),
                av_gen: 0,
                av_inserts: 0,
                ready: Vec::with_capacity(64),
                polls: 0,
                accept_every: ACCEPT_EVERY_MIN,
                src_ok: info.caps & FI_SOURCE != 0,
                unwatched: false,
                dead: DeadPeers::default(),
                gate: Gate::new(cfg.limits),
                accepting: Accepting::default(),
            }),
        })
    }
}

impl TcpRdmEp {
    /// Queues a one-sided request on connection `id` and drives it, unless
    /// `more` (FI_MORE) holds it back.
    fn queue_one_sided(
        &self,
        g: &mut Inner,
        id: ConnId,
        req: ofi_proto::tcp::RmaReq,
        more: bool,
    ) -> Result<()> {
        let Inner { peers, ops, .. } = &mut *g;
        let Some(p) = peers.get_mut(&id) else {
            ops.abandon(&req);
            return Err(Error::new(errno::FI_EIO, "tcp: the connection vanished"));
        };
        if let Err(e) = p.link.conn.queue_rma(req) {
            ops.abandon(&req);
            return Err(refused(crate::NAME, e));
        }
        if !more {
            self.drive_link(g, id);
            self.finish(g);
        }
        Ok(())
    }
}

impl Peer {
    /// Sets the peer's primary fi_addr (the source its messages carry).
    fn set_fi_addr(&mut self, fi_addr: u64) {
        if self.fi_addr != fi_addr {
            self.fi_addr = fi_addr;
            self.link.conn.set_peer(fi_addr);
        }
    }
}

impl Member for TcpRdmEp {
    fn drive(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut g) = self.inner.try_lock() {
            self.drive_all(&mut g);
        }
    }
    fn restless(&self) -> bool {
        self.inner.try_lock().is_none_or(|g| {
            g.rx.has_wakeups()
                || g.peers
                    .values()
                    .any(|p| p.link.connecting || p.link.has_read_ahead())
        })
    }
    fn single(&self) -> bool {
        self.inner.try_lock().is_some_and(|g| g.peers.len() <= 1)
    }
    fn idle(&self) -> bool {
        // A socket out of the poller cannot report readiness: not idle.
        self.inner.try_lock().is_some_and(|g| {
            !g.rx.has_wakeups() && !g.unwatched && !g.peers.values().any(|p| p.link.needs_drive())
        })
    }
    fn watch_all(&self) {
        let mut g = self.inner.lock();
        self.set_watched(&mut g, |_| true);
    }
}

impl Progress for TcpRdmEp {
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

impl EndpointOps for TcpRdmEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut g = self.inner.lock();
        let target = Target::for_endpoint(&b).map(|t| Box::new(t) as Box<dyn Memory>);
        g.rx.set_memory(target);
        if let Some(x) = &b.srx {
            g.rx.set_shared(x.srx.clone(), x.member);
        }
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(self.name.lock().me.clone())
    }
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let sa = crate::addr::decode_for(addr, self.format)?;
        if self.enabled.load(Ordering::Acquire) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: setname on an enabled endpoint",
            ));
        }
        // Listen at the new address first: on failure the old one stays.
        let listener = Socket::listen_in(&sa, self.cfg.port_range)?;
        let me = crate::addr::encode(
            &listener
                .local_addr()
                .map_err(|e| Error::os(e, "tcp: getsockname"))?,
        );
        let mut n = self.name.lock();
        self.shared.poller.remove(&n.listener);
        self.shared
            .poller
            .add(&listener, self.listener_key, false)
            .map_err(|e| Error::os(e, "tcp: epoll add"))?;
        *n = Name { listener, me };
        Ok(())
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: send on an endpoint that is not enabled",
            ));
        }
        let mut g = self.inner.lock();
        let id = self.link_for(&mut g, op.dest)?;
        let ack = ack_level(op.flags, g.b.info.tx_attr.op_flags);
        // FI_MORE: the request stays queued in its connection, to leave
        // with the next post made without the flag, or at the next progress
        // call (which drives every link with bytes to write): a batch costs
        // one `sendmsg` instead of one each, and no read is tried per post.
        // No system call here: a waiter's trywait progresses before it
        // arms, which drives the held bytes out.
        let more = op.flags & FI_MORE != 0;
        let Inner {
            peers, sends, b, ..
        } = &mut *g;
        if let Some(p) = peers.get_mut(&id).filter(|_| !more) {
            // SAFETY: post_send's caller keeps `op`'s ranges readable for
            // this call, and until the send completes unless FI_INJECT:
            // send_fast's contract.
            match unsafe { p.link.send_fast(sends, b, op, ack) } {
                Fast::Sent => return Ok(()),
                Fast::Staged => {
                    self.drive_link_with(&mut g, id, false);
                    return Ok(());
                }
                Fast::Queue => {}
            }
        }
        let selective = g.b.tx_selective;
        // SAFETY: post_send's caller keeps `op`'s ranges readable for this
        // call, and until the send completes unless FI_INJECT (which start
        // copies here): start's contract.
        let mut req = unsafe { g.sends.start(op, selective, INJECT_SIZE)? };
        req.ack = ack;
        req.fence = op.flags & FI_FENCE != 0;
        let Inner { peers, sends, .. } = &mut *g;
        let p = peers
            .get_mut(&id)
            .ok_or_else(|| Error::new(errno::FI_EIO, "tcp: the connection vanished"))?;
        if let Err(e) = p.link.conn.queue_send(req) {
            sends.abandon(&req);
            return Err(Error::new(e, "tcp: the connection refused the send"));
        }
        if !more {
            self.drive_link_with(&mut g, id, false);
            self.finish(&mut g);
        }
        Ok(())
    }
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: RMA on an endpoint that is not enabled",
            ));
        }
        let mut g = self.inner.lock();
        let id = self.link_for(&mut g, op.addr)?;
        let selective = g.b.tx_selective;
        // SAFETY: post_rma's caller keeps the local ranges valid until the
        // request completes (with FI_INJECT, for this call, and start_rma
        // copies them): start_rma's contract.
        let req = unsafe { g.ops.start_rma(op, selective)? };
        self.queue_one_sided(&mut g, id, req, op.flags & FI_MORE != 0)
    }
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: atomic on an endpoint that is not enabled",
            ));
        }
        let mut g = self.inner.lock();
        let id = self.link_for(&mut g, op.addr)?;
        let selective = g.b.tx_selective;
        // SAFETY: post_atomic's caller keeps operand, compare and result
        // memory valid until the atomic completes: start_atomic's contract.
        let req = unsafe { g.ops.start_atomic(op, selective)? };
        self.queue_one_sided(&mut g, id, req, op.flags & FI_MORE != 0)
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        query_atomic(kind, op, datatype)
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: receive on an endpoint that is not enabled",
            ));
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
            // Messages carry their peer's primary fi_addr: a receive
            // directed at an alias waits for the same peer.
            let src = match g.b.av.clone() {
                Some(av) => {
                    self.sync_av(&mut g, &av);
                    av.primary(op.src).unwrap_or(op.src)
                }
                None => op.src,
            };
            if let Some(err) = g.dead.dead(src) {
                // Its peer is dead: no message will come (see
                // ofi_core::util::peer).
                let flags = FI_RECV | if op.tagged { FI_TAGGED } else { FI_MSG };
                rx_error(&g.b, op.context, flags, err, op.tag);
                return Ok(());
            }
            req = req.from_src(src);
        }
        g.rx.post_recv(&req)
            .map_err(|e| Error::new(e, "tcp: receive refused"))?;
        self.finish(&mut g);
        Ok(())
    }
    fn srx_posted(&self) {
        let mut g = self.inner.lock();
        if g.rx.rescan_shared() {
            self.finish(&mut g);
        }
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.inner.lock();
        g.rx.cancel(context)
            .map_err(|e| Error::new(e, "tcp: no posted receive has this context"))?;
        self.finish(&mut g);
        Ok(())
    }
    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => {
                self.inner.lock().rx.set_min_multi_recv(value);
                Ok(())
            }
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("tcp: option {name} is not supported"),
            )),
        }
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => Ok(self.inner.lock().rx.config().min_multi_recv),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("tcp: option {name} is not supported"),
            )),
        }
    }
    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        let mut g = self.inner.lock();
        let Inner { peers, rx, .. } = &mut *g;
        for p in peers.values_mut() {
            // An orderly end: each peer reads SHUTDOWN (the endpoint was
            // closed), not a reset it would report as this process's
            // death; written as far as the socket takes it now.
            p.link.conn.shutdown(rx);
            p.link.drive_with(rx, false);
            p.link.conn.on_error(errno::FI_ECANCELED, rx);
        }
        rx.close(errno::FI_ECANCELED);
        let parked: Vec<Req> = g.parked.drain().flat_map(|(_, p)| p.reqs).collect();
        for r in parked {
            self.fail_req(&mut g, r, errno::FI_ECANCELED);
        }
        g.peers.clear();
        g.by_name.clear();
        g.by_addr.clear();
        g.unknown.clear();
        g.dead.clear();
        g.b = EpBindings::default();
    }
}
