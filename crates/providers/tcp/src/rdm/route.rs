//! Routes to peers: the connection carrying traffic to each destination,
//! made on first use; the address vector followed as it changes; requests
//! parked for a peer until its crossing connection identifies itself.

use super::{Inner, Parked, Peer, TcpRdmEp, ACCEPT_EVERY_MIN};
use crate::link::Link;
use crate::sys::Socket;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::util::av::AvCore;
use ofi_proto::tcp::{Conn, ConnId, Req};
use std::time::Instant;

impl TcpRdmEp {
    pub(super) fn add_link(
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
    pub(super) fn link_for(&self, g: &mut Inner, dest: u64) -> Result<ConnId> {
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
    pub(super) fn sync_av(&self, g: &mut Inner, av: &AvCore) {
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
    pub(super) fn unpark_stale(&self, g: &mut Inner, now: Instant) {
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
    pub(super) fn fail_req(&self, g: &mut Inner, r: Req, err: i32) {
        match r {
            Req::Send(s) => g.sends.complete(&g.b, s.context, Some(err)),
            Req::Rma(x) => g.ops.complete(&g.b, x.context, Some(err)),
        }
    }

    /// Parks requests for the peer at `name` until its connection comes.
    pub(super) fn park(g: &mut Inner, name: &[u8], fi_addr: u64, reqs: Vec<Req>) {
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
    pub(super) fn forget_routes(g: &mut Inner, id: ConnId) {
        let Some(name) = g.peers.get(&id).map(|p| p.name.clone()) else {
            g.by_addr.retain(|_, c| *c != id);
            return;
        };
        if g.by_name.get(&name) == Some(&id) {
            g.by_name.remove(&name);
        }
        g.by_addr.retain(|_, c| *c != id);
    }
}
