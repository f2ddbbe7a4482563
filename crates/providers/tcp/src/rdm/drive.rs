//! Driving the links: each connection's events, peers lost or gone
//! (declared dead), the polling pass over every link with its backoff for
//! looking at the listener, and receive completions handed to the CQ.

use super::{Inner, TcpRdmEp, ACCEPT_EVERY_MAX, ACCEPT_EVERY_MIN, DIRECT_POLL};
use crate::link::Link;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::util::peer::{Cause, PeerDown};
use ofi_inet::tcp_core::completions::drain_rx;
use ofi_proto::tcp::{reject, ConnId, Event};
use std::time::Instant;

impl TcpRdmEp {
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

    pub(super) fn drive_link(&self, g: &mut Inner, id: ConnId) {
        self.drive_link_with(g, id, true);
    }

    pub(super) fn drive_link_with(&self, g: &mut Inner, id: ConnId, read: bool) {
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

    pub(super) fn drive_all(&self, g: &mut Inner) {
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
    pub(super) fn set_watched(&self, g: &mut Inner, watch: impl Fn(&Link) -> bool) {
        let mut unwatched = false;
        for (id, p) in g.peers.iter_mut() {
            let w = watch(&p.link);
            p.link.keep_watched(&self.shared.poller, *id, w);
            unwatched |= !p.link.watched();
        }
        g.unwatched = unwatched;
    }

    pub(super) fn finish(&self, g: &mut Inner) {
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
