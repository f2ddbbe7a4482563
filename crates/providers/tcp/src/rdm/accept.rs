//! Incoming connections: accepting from the listener through the
//! handshake gate (cap, deadline, descriptor exhaustion), and a peer's
//! HELLO: its claimed address checked, crossing connects resolved, parked
//! requests moved onto the connection that stays.

use super::{Inner, TcpRdmEp};
use crate::gate::Dropped;
use crate::link::Link;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_proto::tcp::{decide_hello, reject, Conn, ConnId, Existing, HelloDecision};
use std::time::Instant;

impl TcpRdmEp {
    /// Accepts every pending connection; returns how many. Each is driven
    /// once at once (its HELLO is usually there already) and admitted
    /// through the gate (the oldest half-open ones are dropped past the
    /// cap); out of descriptors, accepting pauses (see `gate`).
    pub(super) fn accept_new(&self, g: &mut Inner) -> usize {
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
    pub(super) fn sweep_half_open(&self, g: &mut Inner) {
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

    pub(super) fn on_hello(&self, g: &mut Inner, id: ConnId, peer_addr: &[u8]) {
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
}
