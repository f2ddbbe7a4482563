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
use crate::gate::{Accepting, Dropped, Gate};
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
use ofi_core::util::av::AvCore;
use ofi_core::util::hash::IdMap;
use ofi_core::util::lock::SpinLock;
use ofi_core::util::peer::{Cause, DeadPeers, PeerDown};
use ofi_inet::tcp_core::completions::{drain_rx, rx_error};
use ofi_inet::tcp_core::one_sided::{ack_level, query_atomic, refused, Ops, Target};
use ofi_inet::tcp_core::sends::Sends;
use ofi_proto::tcp::{
    decide_hello, reject, Conn, ConnId, Event, Existing, HelloDecision, Memory, RecvReq, Req, Rx,
    RxConfig,
};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

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

    fn add_link(
        &self,
        g: &mut Inner,
        link: Link,
        fi_addr: u64,
        outgoing: bool,
        name: Vec<u8>,
    ) -> ConnId {
        let id = link.conn.id();
        let _ = self.shared.poller.add(&link.sock, id, true);
        g.peers.insert(
            id,
            Peer {
                link,
                fi_addr,
                outgoing,
                name,
            },
        );
        id
    }

    /// The connection carrying traffic to `dest`, made on first use (or
    /// the one its peer already has, through another alias or its own
    /// connection).
    fn link_for(&self, g: &mut Inner, dest: u64) -> Result<ConnId> {
        let av =
            g.b.av
                .clone()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "tcp: no address vector bound"))?;
        self.sync_av(g, &av);
        if let Some(id) = g.by_addr.get(&dest) {
            return Ok(*id);
        }
        let bytes = av.lookup(dest).map_err(|_| {
            Error::inval(format!(
                "tcp: destination fi_addr {dest} is not in the address vector"
            ))
        })?;
        let primary = av.primary(dest).unwrap_or(dest);
        let id = match g.by_name.get(&bytes[..]).copied() {
            Some(id) => {
                if let Some(p) = g.peers.get_mut(&id) {
                    p.set_fi_addr(primary);
                }
                id
            }
            None => self.connect_to(g, &bytes, primary)?,
        };
        g.by_addr.insert(dest, id);
        Ok(id)
    }

    /// Opens the connection to the peer at `name` (primary fi_addr
    /// `fi_addr`), its route for every alias; parked requests for it go
    /// out on it.
    fn connect_to(&self, g: &mut Inner, name: &[u8], fi_addr: u64) -> Result<ConnId> {
        let to = crate::addr::decode(name)?;
        let me = self.name.lock().me.clone();
        // From the endpoint's IP; its port is the listener's.
        let from = crate::addr::decode(&me)
            .ok()
            .map(|a| std::net::SocketAddr::new(a.ip(), 0));
        let sock = Socket::connect(&to, from.as_ref())
            .map_err(|e| Error::os(e, &format!("tcp: connect to {to}")))?;
        let id = self.shared.key();
        let conn = Conn::connect(id, fi_addr, self.cfg.proto, &me, &[])
            .map_err(|e| Error::new(e, "tcp: connect"))?;
        let conn = crate::auth::arm(conn, &self.key)?;
        let id = self.add_link(
            g,
            Link::new(sock, conn, true, self.cfg.peer_timeout),
            fi_addr,
            true,
            name.to_vec(),
        );
        g.by_name.insert(name.to_vec(), id);
        // A new peer may connect back (crossing connects, replies): look
        // for its connection soon.
        g.polls = 0;
        g.accept_every = ACCEPT_EVERY_MIN;
        if let Some(parked) = g.parked.remove(name) {
            let p = g.peers.get_mut(&id).expect("just added");
            for r in parked.reqs {
                let _ = p.link.conn.queue(r);
            }
        }
        Ok(id)
    }

    /// Follows the AV: after a removal, routes of removed or reused
    /// fi_addrs go and every peer's primary fi_addr is looked up again;
    /// after inserts, peers met before their address was inserted are
    /// looked up.
    fn sync_av(&self, g: &mut Inner, av: &AvCore) {
        let gen = av.generation();
        if gen != g.av_gen {
            g.av_gen = gen;
            let Inner {
                by_addr,
                peers,
                unknown,
                ..
            } = &mut *g;
            by_addr.retain(|a, id| {
                let name = peers.get(id).map(|p| &p.name[..]);
                av.lookup(*a).is_ok_and(|b| Some(&b[..]) == name)
            });
            for (id, p) in peers.iter_mut() {
                if p.name.is_empty() {
                    continue;
                }
                let f = av.reverse_or_learn(&p.name).unwrap_or(FI_ADDR_NOTAVAIL);
                p.set_fi_addr(f);
                if f == FI_ADDR_NOTAVAIL && !unknown.contains(id) {
                    unknown.push(*id);
                }
            }
        }
        if !g.unknown.is_empty() && av.insertions() != g.av_inserts {
            g.av_inserts = av.insertions();
            let Inner { unknown, peers, .. } = &mut *g;
            unknown.retain(|id| {
                let Some(p) = peers.get_mut(id) else {
                    return false;
                };
                match av.reverse_or_learn(&p.name) {
                    Some(f) => {
                        p.set_fi_addr(f);
                        false
                    }
                    None => true,
                }
            });
        }
    }

    /// Parked requests whose peer's crossing connection did not identify
    /// itself within the peer timeout go out on a new connection (it may
    /// have died before its HELLO); one that cannot be made fails them.
    fn unpark_stale(&self, g: &mut Inner, now: Instant) {
        let stale: Vec<Vec<u8>> = g
            .parked
            .iter()
            .filter(|(_, p)| now.duration_since(p.since) >= self.cfg.peer_timeout)
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            if let Some(&id) = g.by_name.get(&name) {
                let reqs = g.parked.remove(&name).map(|p| p.reqs).unwrap_or_default();
                if let Some(p) = g.peers.get_mut(&id) {
                    for r in reqs {
                        let _ = p.link.conn.queue(r);
                    }
                }
                continue;
            }
            let fi_addr = g.parked.get(&name).map_or(FI_ADDR_NOTAVAIL, |p| p.fi_addr);
            if let Err(e) = self.connect_to(g, &name, fi_addr) {
                tracing::warn!(error = %e, "tcp: parked operations fail: no connection to their peer");
                for r in g.parked.remove(&name).map(|p| p.reqs).unwrap_or_default() {
                    self.fail_req(g, r, e.code());
                }
            }
        }
    }

    /// Completes a request that never went out with error `err`.
    fn fail_req(&self, g: &mut Inner, r: Req, err: i32) {
        match r {
            Req::Send(s) => g.sends.complete(&g.b, s.context, Some(err)),
            Req::Rma(x) => g.ops.complete(&g.b, x.context, Some(err)),
        }
    }

    /// Parks requests for the peer at `name` until its connection comes.
    fn park(g: &mut Inner, name: &[u8], fi_addr: u64, reqs: Vec<Req>) {
        if reqs.is_empty() {
            return;
        }
        g.parked
            .entry(name.to_vec())
            .or_insert_with(|| Parked {
                reqs: Vec::new(),
                fi_addr,
                since: Instant::now(),
            })
            .reqs
            .extend(reqs);
    }

    /// Connection `id` no longer carries traffic to its peer: its routes
    /// go (the next send finds the peer's current connection).
    fn forget_routes(g: &mut Inner, id: ConnId) {
        let Some(name) = g.peers.get(&id).map(|p| p.name.clone()) else {
            g.by_addr.retain(|_, c| *c != id);
            return;
        };
        if g.by_name.get(&name) == Some(&id) {
            g.by_name.remove(&name);
        }
        g.by_addr.retain(|_, c| *c != id);
    }

    /// Accepts every pending connection; returns how many. Each is driven
    /// once at once (its HELLO is usually there already) and admitted
    /// through the gate (the oldest half-open ones are dropped past the
    /// cap); out of descriptors, accepting pauses (see `gate`).
    fn accept_new(&self, g: &mut Inner) -> usize {
        let mut n = 0;
        if !g.accepting.may_accept(Instant::now) {
            return 0;
        }
        loop {
            let accepted = self.name.lock().listener.accept();
            match accepted {
                Ok(Some((sock, peer))) => {
                    n += 1;
                    g.accepting.recovered(&self.label());
                    let id = self.shared.key();
                    let conn = Conn::incoming(id, FI_ADDR_NOTAVAIL, self.cfg.proto);
                    let conn = match crate::auth::arm(conn, &self.key) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "tcp: dropping a connection");
                            continue;
                        }
                    };
                    let id = self.add_link(
                        g,
                        Link::new(sock, conn, false, self.cfg.peer_timeout),
                        FI_ADDR_NOTAVAIL,
                        false,
                        Vec::new(),
                    );
                    self.drive_link(g, id);
                    let mut drops = Vec::new();
                    let Inner { gate, peers, .. } = &mut *g;
                    gate.admit(
                        id,
                        Instant::now(),
                        |i| peers.get(&i).is_some_and(|p| p.link.half_open()),
                        |i, why| drops.push((i, why)),
                    );
                    for (i, why) in drops {
                        self.drop_half_open(g, i, why);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    g.accepting.failed(&e, Instant::now(), &self.label());
                    break;
                }
            }
        }
        n
    }

    /// The listening address, for log lines.
    fn label(&self) -> String {
        crate::addr::decode(&self.name.lock().me).map_or_else(|_| "?".into(), |a| a.to_string())
    }

    /// Drops an incoming connection still in its handshake (the gate's
    /// cap or deadline), logging it.
    fn drop_half_open(&self, g: &mut Inner, id: ConnId, why: Dropped) {
        if let Some(p) = g.peers.remove(&id) {
            self.shared.poller.remove(&p.link.sock);
            let who = p.link.sock.peer_addr().ok();
            tracing::warn!(
                peer = ?who,
                listener = %self.label(),
                "tcp: dropping an incoming connection: {}",
                why.describe(g.gate.limits())
            );
        }
    }

    /// Drops incoming connections whose handshake deadline passed.
    fn sweep_half_open(&self, g: &mut Inner) {
        let mut drops = Vec::new();
        let Inner { gate, peers, .. } = &mut *g;
        gate.sweep(
            Instant::now(),
            |i| peers.get(&i).is_some_and(|p| p.link.half_open()),
            |i, why| drops.push((i, why)),
        );
        for (i, why) in drops {
            self.drop_half_open(g, i, why);
        }
    }

    fn on_hello(&self, g: &mut Inner, id: ConnId, peer_addr: &[u8]) {
        // A peer names itself by its listening address; outgoing connections
        // are bound to the endpoint's own IP, so the claimed IP must be the
        // connection's source IP. Anything else is an impostor trying to
        // take over another peer's traffic: disconnect it.
        let claimed = crate::addr::decode(peer_addr).ok().map(|a| a.ip());
        let actual = g
            .peers
            .get(&id)
            .and_then(|p| p.link.sock.peer_addr().ok())
            .map(|a| a.ip());
        if claimed.is_none() || claimed != actual {
            tracing::warn!(
                ?claimed,
                ?actual,
                "tcp: disconnecting a peer whose HELLO claims an address it does not connect from"
            );
            let Inner { peers, rx, .. } = &mut *g;
            if let Some(p) = peers.get_mut(&id) {
                p.link.conn.on_error(errno::FI_EIO, rx);
            }
            return;
        }
        // The peer's address as the AV holds addresses (canonical).
        let name = ofi_core::provider::AddrOps::canonical(&crate::addr::SockAddrOps, peer_addr)
            .unwrap_or_else(|_| peer_addr.to_vec());
        let fi_addr =
            g.b.av
                .as_ref()
                .and_then(|av| av.reverse_or_learn(&name))
                .unwrap_or(FI_ADDR_NOTAVAIL);
        let existing_id = g.by_name.get(&name).copied().filter(|e| *e != id);
        let existing = match existing_id.and_then(|e| g.peers.get(&e)) {
            None => Existing::None,
            Some(p) if p.outgoing => Existing::Outgoing,
            Some(_) => Existing::Incoming,
        };
        let decision = decide_hello(&self.name.lock().me, peer_addr, existing);
        let Some(p) = g.peers.get_mut(&id) else {
            return;
        };
        p.name = name.clone();
        p.fi_addr = fi_addr;
        p.link.conn.set_peer(fi_addr);
        match decision {
            HelloDecision::RejectSimultaneous => {
                let _ = p.link.conn.reject_with(reject::SIMULTANEOUS, &[]);
                return;
            }
            HelloDecision::Accept
            | HelloDecision::AcceptRetireOutgoing
            | HelloDecision::AcceptReplaceIncoming => {
                let _ = p.link.conn.accept(&[]);
            }
        }
        // It answered: a peer declared dead came back.
        g.dead.revive(fi_addr, &name);
        if fi_addr == FI_ADDR_NOTAVAIL {
            g.unknown.push(id);
        }
        let mut moved = Vec::new();
        match (decision, existing_id) {
            (HelloDecision::AcceptRetireOutgoing, Some(old)) => {
                if let Some(o) = g.peers.get_mut(&old) {
                    moved = o.link.conn.take_queued_sends();
                }
                Self::forget_routes(g, old);
                g.by_name.insert(name.clone(), id);
            }
            (HelloDecision::AcceptReplaceIncoming, Some(old)) => {
                if let Some(o) = g.peers.get_mut(&old) {
                    o.link.conn.shutdown(&mut g.rx);
                }
                Self::forget_routes(g, old);
                g.by_name.insert(name.clone(), id);
            }
            _ => {
                g.by_name.entry(name.clone()).or_insert(id);
            }
        }
        moved.extend(g.parked.remove(&name).map(|p| p.reqs).unwrap_or_default());
        if let Some(p) = g.peers.get_mut(&id) {
            for r in moved {
                let _ = p.link.conn.queue(r);
            }
        }
    }

    /// Connection `id` ended abnormally with `err`: when it was an
    /// identified peer's and no other connection to that peer is up, the
    /// peer is declared dead (`ofi_core::util::peer`): reported once on the
    /// EQ, its parked operations and the receives directed at it fail with
    /// the cause's number. (The connection's own operations and the
    /// receives it was filling failed in the protocol core already.)
    fn peer_lost(&self, g: &mut Inner, id: ConnId, err: i32) {
        self.peer_gone(g, id, err, false);
    }

    /// A peer's connection ended (`closed`: with its SHUTDOWN, the peer
    /// closed its endpoint): unless another connection to it is up, it is
    /// declared dead and what waits on it fails with `err`'s cause.
    fn peer_gone(&self, g: &mut Inner, id: ConnId, err: i32, closed: bool) {
        let Some(cause) = Cause::of_errno(err) else {
            return;
        };
        let Some(p) = g.peers.get(&id) else { return };
        if p.name.is_empty() {
            // Never identified itself (no HELLO yet): not a peer.
            return;
        }
        let (fi_addr, name) = (p.fi_addr, p.name.clone());
        let other_up = g.peers.iter().any(|(k, q)| {
            *k != id && q.name == name && q.link.conn.state() == ofi_proto::tcp::State::Connected
        });
        if other_up {
            return;
        }
        let err = cause.errno();
        for r in g.parked.remove(&name).map(|p| p.reqs).unwrap_or_default() {
            self.fail_req(g, r, err);
        }
        let down = PeerDown {
            fi_addr,
            addr: name,
            cause,
        };
        let label = crate::addr::decode(&down.addr).map_or_else(|_| "?".into(), |a| a.to_string());
        g.dead.declare(&g.b, &down, &label, closed);
        if fi_addr != FI_ADDR_NOTAVAIL {
            g.rx.fail_directed(fi_addr, err);
        }
    }

    fn drive_link(&self, g: &mut Inner, id: ConnId) {
        self.drive_link_with(g, id, true);
    }

    fn drive_link_with(&self, g: &mut Inner, id: ConnId, read: bool) {
        let Inner { peers, rx, .. } = &mut *g;
        let Some(p) = peers.get_mut(&id) else { return };
        p.link.drive_with(rx, read);
        while let Some(ev) = g.peers.get_mut(&id).and_then(|p| p.link.conn.poll_event()) {
            match ev {
                Event::ConnRequest { peer_addr, .. } => self.on_hello(g, id, &peer_addr),
                Event::Connected { .. } => {
                    if let Some(p) = g.peers.get(&id).filter(|p| p.outgoing) {
                        let (fi_addr, name) = (p.fi_addr, p.name.clone());
                        g.dead.revive(fi_addr, &name);
                    }
                }
                Event::Rejected { reason, .. } => {
                    let (fi_addr, name) = g
                        .peers
                        .get(&id)
                        .map_or((FI_ADDR_NOTAVAIL, Vec::new()), |p| {
                            (p.fi_addr, p.name.clone())
                        });
                    Self::forget_routes(g, id);
                    if reason == reject::SIMULTANEOUS {
                        // The peer keeps its own connection to us: what
                        // was queued here goes there, or waits for it.
                        let queued = g
                            .peers
                            .get_mut(&id)
                            .map(|p| p.link.conn.take_queued_sends())
                            .unwrap_or_default();
                        match g
                            .by_name
                            .get(&name)
                            .copied()
                            .and_then(|w| g.peers.get_mut(&w))
                        {
                            Some(w) => {
                                for r in queued {
                                    let _ = w.link.conn.queue(r);
                                }
                            }
                            None => Self::park(g, &name, fi_addr, queued),
                        }
                    }
                }
                // The peer closed its endpoint: gone as surely as a dead
                // one, but no fault (reported quietly).
                Event::PeerShutdown => self.peer_gone(g, id, errno::FI_ECONNRESET, true),
                Event::ConnectionLost { err } => self.peer_lost(g, id, err),
                Event::AuthFailed { why } => {
                    let p = g.peers.get(&id);
                    let who = p.and_then(|p| p.link.sock.peer_addr().ok());
                    let out = p.is_some_and(|p| p.outgoing);
                    tracing::warn!(
                        peer = ?who,
                        outgoing = out,
                        "tcp: authentication failed, connection closed: {why}"
                    );
                }
                Event::ProtocolError(e) => {
                    let who = g.peers.get(&id).and_then(|p| p.link.sock.peer_addr().ok());
                    tracing::warn!(error = %e, peer = ?who, "tcp: disconnecting a peer that broke the protocol");
                    let Inner { peers, rx, .. } = &mut *g;
                    if let Some(p) = peers.get_mut(&id) {
                        p.link.conn.on_error(errno::FI_EIO, rx);
                    }
                    self.peer_lost(g, id, errno::FI_EIO);
                }
                Event::SendComplete { context } => g.sends.complete(&g.b, context, None),
                Event::SendError { context, err } => g.sends.complete(&g.b, context, Some(err)),
                Event::RmaComplete { context } => g.ops.complete(&g.b, context, None),
                Event::RmaError { context, err } => g.ops.complete(&g.b, context, Some(err)),
                _ => {}
            }
        }
        let closed = g.peers.get(&id).is_none_or(|p| p.link.conn.is_closed());
        if closed {
            Self::forget_routes(g, id);
            if let Some(p) = g.peers.remove(&id) {
                self.shared.poller.remove(&p.link.sock);
            }
        } else if let Some(p) = g.peers.get_mut(&id) {
            p.link.sync_interest(&self.shared.poller, id);
        }
    }

    fn drive_all(&self, g: &mut Inner) {
        let mut ids = std::mem::take(&mut g.ready);
        ids.clear();
        if g.peers.len() < DIRECT_POLL {
            // New connections are rare, and each look is a system call the
            // busy-polling loop pays for (on a loopback ping-pong, a look
            // every 16th pass cost 13 % of the latency): look on every pass
            // while there is no connection, otherwise on a backoff from
            // every ACCEPT_EVERY_MIN-th to every ACCEPT_EVERY_MAX-th pass
            // that doubles while nothing arrives and restarts when a
            // connection does.
            // A waiter about to sleep looks at once (the listener's
            // readiness would keep it from sleeping otherwise); an armed
            // waiter may stay armed across many passes (it sleeps on its
            // own fds too), so it asks the listener first: an `accept4`
            // that finds nothing allocates and frees a socket, an inode
            // and a file, several times the cost of the look.
            g.polls = g.polls.saturating_add(1);
            if g.peers.is_empty() {
                g.polls = 0;
                g.accept_every = ACCEPT_EVERY_MIN;
                let _ = self.accept_new(g);
            } else if g.polls >= g.accept_every
                || (self.shared.armed() && self.name.lock().listener.acceptable())
            {
                g.polls = 0;
                g.accept_every = if self.accept_new(g) > 0 {
                    ACCEPT_EVERY_MIN
                } else {
                    (g.accept_every * 2).min(ACCEPT_EVERY_MAX)
                };
            }
            ids.extend(g.peers.keys().copied());
        } else {
            let _ = self.shared.poller.ready(&mut ids);
            // Keys are domain-wide: drive our listener if it is ready, and
            // our links among the ready keys (others' keys are ignored).
            if ids.contains(&self.listener_key) {
                let _ = self.accept_new(g);
            }
            ids.retain(|k| g.peers.contains_key(k));
            ids.extend(
                g.peers
                    .iter()
                    .filter(|(_, p)| p.link.wants_write())
                    .map(|(k, _)| *k),
            );
        }
        for &id in &ids {
            self.drive_link(g, id);
        }
        ids.clear();
        g.ready = ids;
        if !g.gate.is_empty() {
            self.sweep_half_open(g);
        }
        if !g.parked.is_empty() {
            self.unpark_stale(g, Instant::now());
        }
        self.finish(g);
        // One connection polled with recv on every pass stays out of the
        // poller while nobody sleeps on it; any other shape is watched.
        // (Only a pass that may change something looks at the links: an
        // endpoint with many connections is not walked on every poll.)
        let quiet = self.shared.quiet() && g.peers.len() == 1;
        if quiet || g.unwatched {
            self.set_watched(g, |l| !quiet || l.connecting);
        }
    }

    /// Puts each link in the poller or takes it out, as `watch` says
    /// (Link::keep_watched), and notes whether one is left out.
    fn set_watched(&self, g: &mut Inner, watch: impl Fn(&Link) -> bool) {
        let mut unwatched = false;
        for (id, p) in g.peers.iter_mut() {
            let w = watch(&p.link);
            p.link.keep_watched(&self.shared.poller, *id, w);
            unwatched |= !p.link.watched();
        }
        g.unwatched = unwatched;
    }

    fn finish(&self, g: &mut Inner) {
        let src_ok = g.src_ok;
        let Inner { b, rx, .. } = &mut *g;
        drain_rx(b, rx, src_ok);
        let mut rounds = 0;
        while let Some(id) = g.rx.next_wakeup() {
            self.drive_link(g, id);
            let Inner { b, rx, .. } = &mut *g;
            drain_rx(b, rx, src_ok);
            rounds += 1;
            if rounds > 1024 {
                break;
            }
        }
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
