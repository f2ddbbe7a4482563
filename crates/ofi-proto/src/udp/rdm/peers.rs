//! What happens to peers: their connections' events and protocol
//! breaks, the session table's events (up, down, renewed, asked to end
//! while idle, expired), and a dead peer's operations failed with its
//! cause.

use super::*;

impl Rdm {
    /// Moves `peer`'s connection events out, and resets its session when
    /// the connection broke (then false).
    pub(super) fn conn_events(&mut self, peer: PeerId) -> bool {
        let Some(link) = self.links.get_mut(peer) else {
            return true;
        };
        match take_conn_events(link, &mut self.events) {
            None => true,
            Some(why) => {
                self.broken(peer, why);
                false
            }
        }
    }

    /// `peer`'s connection broke the protocol: its session is reset and
    /// the peer reported down.
    #[cold]
    #[inline(never)]
    pub(super) fn broken(&mut self, peer: PeerId, why: String) {
        let Some(link) = self.links.get_mut(peer) else {
            return;
        };
        let addr = self.sessions.addr(peer).unwrap_or_default().to_vec();
        let fi_addr = link.fi_addr;
        link.conn = None;
        self.copied = self.copied.saturating_sub(link.reset_stream());
        self.sessions.reset(peer);
        self.dirty = true;
        self.events.push_back(RdmEvent::Broken {
            addr: addr.clone(),
            why,
        });
        self.events.push_back(RdmEvent::PeerDown {
            fi_addr,
            addr,
            cause: Cause::Broken,
            closed: false,
        });
    }

    pub(super) fn session_events(&mut self, now: Instant, resolve: &mut dyn FnMut(&[u8]) -> u64) {
        while let Some(e) = self.sessions.poll_event() {
            self.dirty = true;
            match e {
                SessionEvent::Up { peer, .. } => {
                    let addr = self.sessions.addr(peer).unwrap_or_default().to_vec();
                    let fa = match self.links.get(peer) {
                        Some(l) if l.fi_addr != FI_ADDR_NOTAVAIL => l.fi_addr,
                        _ => resolve(&addr),
                    };
                    let reserve = self.cfg.session.chan.window as usize;
                    let link = self
                        .links
                        .get_or_insert_with(peer, || Link::new(fa, reserve));
                    link.fi_addr = fa;
                    self.copied = self.copied.saturating_sub(link.reset_stream());
                    if link.conn.as_ref().is_none_or(|c| c.is_closed()) {
                        let c = self.new_conn(peer, fa);
                        if let Some(l) = self.links.get_mut(peer) {
                            l.conn = Some(c);
                        }
                    } else if let Some(c) = self.links.get_mut(peer).and_then(|l| l.conn.as_mut()) {
                        c.set_peer(fa);
                    }
                    self.events
                        .push_back(RdmEvent::PeerUp { fi_addr: fa, addr });
                }
                SessionEvent::Down {
                    peer,
                    cause,
                    renewed,
                    closed,
                } => {
                    // The same peer endpoint made a new session in place of
                    // an idle one: a connection with nothing tied to the
                    // old stream goes on over the new one (sends queued in
                    // it included).
                    if renewed && self.link_quiet(peer, false) {
                        if let Some(link) = self.links.get_mut(peer) {
                            self.copied = self.copied.saturating_sub(link.reset_stream());
                        }
                        continue;
                    }
                    self.peer_down(peer, cause, renewed, closed);
                }
                SessionEvent::Refused { peer, why } => {
                    let addr = self.sessions.addr(peer).unwrap_or_default().to_vec();
                    let Some(link) = self.links.get_mut(peer) else {
                        continue;
                    };
                    let fi_addr = link.fi_addr;
                    if let Some(mut c) = link.conn.take() {
                        c.on_error(errno::FI_EKEYREJECTED, &mut self.rx);
                        while let Some(e) = c.poll_event() {
                            match e {
                                tcp::Event::ConnectionLost { .. } => {}
                                e => self.events.push_back(RdmEvent::Op(e)),
                            }
                        }
                        self.by_conn.remove(&c.id());
                    }
                    self.copied = self.copied.saturating_sub(link.reset_stream());
                    self.events
                        .push_back(RdmEvent::Refused { fi_addr, addr, why });
                }
                SessionEvent::CloseAsked { peer } => {
                    let agree = self.link_quiet(peer, true);
                    self.sessions.answer_close(now, peer, agree);
                }
                SessionEvent::Expired { peer } => {
                    self.note_expired(peer);
                    self.expired(peer);
                }
            }
        }
    }

    /// Nothing of `peer`'s link is tied to its session's stream: its
    /// connection is quiet (operations queued and not started allowed
    /// unless `strict`) and the receive side needs nothing more of it.
    pub(super) fn link_quiet(&mut self, peer: PeerId, strict: bool) -> bool {
        let Some(c) = self.links.get(peer).and_then(|l| l.conn.as_ref()) else {
            return true;
        };
        let quiet = if strict {
            c.is_quiet()
        } else {
            c.is_quiet_but_queued()
        };
        quiet && !self.rx.refers_to(c.id())
    }

    /// `peer`'s session ended for `cause`: its connection's operations fail
    /// and the peer is reported down (unless an idle session was renewed
    /// with nothing in flight here); the link goes.
    pub(super) fn peer_down(&mut self, peer: PeerId, cause: Cause, renewed: bool, closed: bool) {
        let addr = self.sessions.addr(peer).unwrap_or_default().to_vec();
        let Some(link) = self.links.get_mut(peer) else {
            self.sessions.release(peer);
            return;
        };
        let fi_addr = link.fi_addr;
        let busy = link.conn.as_ref().is_some_and(|c| c.in_flight() > 0);
        if let Some(mut c) = link.conn.take() {
            c.on_error(cause.errno(), &mut self.rx);
            while let Some(e) = c.poll_event() {
                match e {
                    tcp::Event::ConnectionLost { .. } => {}
                    e => self.events.push_back(RdmEvent::Op(e)),
                }
            }
            self.by_conn.remove(&c.id());
        }
        self.copied = self.copied.saturating_sub(link.reset_stream());
        if !renewed || busy {
            self.events.push_back(RdmEvent::PeerDown {
                fi_addr,
                addr,
                cause,
                closed,
            });
        }
        // A new session makes a new link; a peer no one asked for by
        // address is forgotten.
        if !self.sessions.is_up(peer) {
            self.links.remove(peer);
            self.sessions.release(peer);
        }
    }

    /// `peer`'s idle session ended by agreement: its link goes, unless
    /// operations were queued for it meanwhile (they go over the session
    /// the table makes again). A connection with something tied to the
    /// stream (which the agreement rules out) is failed as on a reset.
    pub(super) fn expired(&mut self, peer: PeerId) {
        if !self.link_quiet(peer, false) {
            self.peer_down(peer, Cause::Reset, false, false);
            return;
        }
        let Some(link) = self.links.get_mut(peer) else {
            return;
        };
        self.copied = self.copied.saturating_sub(link.reset_stream());
        if link.conn.as_ref().is_some_and(|c| !c.is_quiet()) {
            return;
        }
        if let Some(l) = self.links.remove(peer) {
            if let Some(c) = l.conn {
                self.by_conn.remove(&c.id());
            }
        }
    }

    /// `peer`'s idle session ended: reported for the log (the table may
    /// have forgotten the address already: then it is not named).
    pub(super) fn note_expired(&mut self, peer: PeerId) {
        let addr = self.sessions.addr(peer).unwrap_or_default().to_vec();
        self.events.push_back(RdmEvent::Expired { addr });
    }
}
