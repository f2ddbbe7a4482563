//! Incoming datagrams: session traffic, RESETs (among them the IDLE
//! requests that end a quiet session by agreement) and the handshake
//! (HELLO, HELLO_ACK, CONFIRM) that makes a session.

use super::*;

impl Sessions {
    /// Takes one datagram from `addr`.
    pub fn on_datagram(&mut self, now: Instant, addr: &[u8], bytes: &[u8]) -> Incoming {
        let k = match peek_kind(bytes) {
            Ok(k) => k,
            Err(_) => return self.malformed("not a udp provider datagram"),
        };
        if k == kind::DGRAM {
            return self.malformed("a DGRAM endpoint's datagram");
        }
        let p = Packet::new_unchecked(bytes);
        let r = match Repr::parse(&p) {
            Ok(r) => r,
            Err(_) => return self.malformed("a malformed packet"),
        };
        match r.kind {
            kind::DATA | kind::ACK => self.on_in_session(now, addr, &r, p.payload()),
            kind::HELLO | kind::HELLO_ACK | kind::CONFIRM => {
                let hs = match Handshake::parse(&r, p.payload()) {
                    Ok(h) => h,
                    Err(_) => return self.malformed("a malformed handshake"),
                };
                self.on_handshake(now, addr, &r, &hs)
            }
            kind::RESET => self.on_reset(now, addr, &r),
            kind::REFUSE => {
                let Some(id) = self.find(addr) else {
                    return self.stale("a REFUSE from an unknown address");
                };
                let ours = self
                    .peers
                    .get(id)
                    .and_then(|p| p.hello.as_ref())
                    .is_some_and(|h| h.mine[..] == p.payload()[..]);
                if !ours {
                    return self.stale("a REFUSE of no current handshake");
                }
                if let Some(p) = self.peers.get_mut(id) {
                    p.hello = None;
                }
                if r.flags & flag::CLOSED != 0 {
                    // Nothing listens there: what waits for it fails now
                    // instead of at the dead bound.
                    self.events.push_back(SessionEvent::Down {
                        peer: id,
                        cause: Cause::Refused,
                        renewed: false,
                        closed: false,
                    });
                    return Incoming::Control;
                }
                self.drops.auth += 1;
                self.events.push_back(SessionEvent::Refused {
                    peer: id,
                    why:
                        "the peer refused the handshake: its auth key differs from this endpoint's",
                });
                Incoming::Control
            }
            _ => self.malformed("an unknown packet kind"),
        }
    }

    pub(super) fn on_reset(&mut self, now: Instant, addr: &[u8], r: &Repr) -> Incoming {
        let ask = r.flags & flag::IDLE != 0;
        let live = self.find(addr).filter(|&id| {
            self.peers
                .get(id)
                .and_then(|p| p.up.as_ref())
                .is_some_and(|u| u.chan.session() == r.session)
        });
        let Some(id) = live else {
            if ask {
                // A session we do not know (any more) may end: say so.
                self.ctrl
                    .push_back((addr.to_vec(), reset_packet(r.session, false).to_vec()));
                return Incoming::Control;
            }
            return self.stale("a RESET of no live session");
        };
        let t = self.cfg.chan.peer_timeout;
        let Some(p) = self.peers.get_mut(id) else {
            return Incoming::Control;
        };
        let Some(u) = p.up.as_mut() else {
            return Incoming::Control;
        };
        if r.flags & flag::CLOSED != 0 {
            self.down(id, Cause::Reset, false, true);
            return Incoming::Control;
        }
        if ask {
            if u.closing.is_some() {
                // Both sides asked at once: agreed.
                let reset = reset_packet(r.session, false).to_vec();
                self.ctrl.push_back((p.addr.clone(), reset));
                self.expire(now, id);
            } else if u.chan.quiet() && u.chan.snd_nxt() == r.ack {
                // The peer has all we sent, we have nothing to say: the
                // owner decides.
                self.events.push_back(SessionEvent::CloseAsked { peer: id });
            } else {
                u.chan.refuse_idle();
            }
            return Incoming::Control;
        }
        // A plain RESET: the answer to our request, or the end.
        let answers = u.closing.is_some()
            || u.asked.is_some_and(|(at, ack, sent)| {
                now < at + t
                    && u.chan.rcv_nxt() == ack
                    && u.chan.snd_nxt() == sent
                    && u.chan.quiet()
            });
        if answers {
            self.expire(now, id);
        } else {
            self.down(id, Cause::Reset, false, false);
        }
        Incoming::Control
    }

    /// `id`'s idle session ended (both sides agree, or the peer stayed
    /// silent through the ending): the owner hears [`SessionEvent::Expired`];
    /// the session is made again when it was asked for meanwhile, and an
    /// entry the owner never asked for by address is forgotten.
    pub(super) fn expire(&mut self, now: Instant, id: PeerId) {
        let Some(p) = self.peers.get_mut(id) else {
            return;
        };
        let reconnect =
            p.up.take()
                .and_then(|u| u.closing)
                .is_some_and(|c| c.reconnect);
        self.events.push_back(SessionEvent::Expired { peer: id });
        if reconnect {
            self.connect(now, id);
        } else {
            self.release(id);
        }
    }

    /// Asks the peer to end `id`'s idle session.
    pub(super) fn start_closing(&mut self, now: Instant, id: PeerId) {
        let rto = self.cfg.chan.initial_rto;
        let Some(p) = self.peers.get_mut(id) else {
            return;
        };
        let Some(u) = p.up.as_mut() else {
            return;
        };
        let ack = u.chan.rcv_nxt();
        u.closing = Some(Closing {
            since: now,
            next_at: now + rto,
            rto,
            ack,
            reconnect: false,
        });
        u.asked = None;
        let ask = idle_packet(u.chan.session(), ack).to_vec();
        self.ctrl.push_back((p.addr.clone(), ask));
    }

    pub(super) fn malformed(&mut self, why: &'static str) -> Incoming {
        self.drops.malformed += 1;
        Incoming::Dropped(why)
    }

    pub(super) fn stale(&mut self, why: &'static str) -> Incoming {
        self.drops.stale += 1;
        Incoming::Dropped(why)
    }

    pub(super) fn on_in_session(
        &mut self,
        now: Instant,
        addr: &[u8],
        r: &Repr,
        payload: &[u8],
    ) -> Incoming {
        // Datagrams come in runs from one peer: the last one's address is
        // compared before the map is asked.
        let id = match self.peers.get(self.last_in) {
            Some(p) if p.addr == addr => Some(self.last_in),
            _ => self.find(addr),
        };
        if let Some(p) = id.and_then(|i| self.peers.get_mut(i)) {
            if let Some(u) = p.up.as_mut().filter(|u| u.chan.session() == r.session) {
                self.last_in = id.unwrap_or_default();
                let recv = u.chan.on_packet(now, r, payload);
                if u.closing.is_some()
                    && (r.kind == kind::DATA || r.flags & (flag::IDLE | flag::ACK_NOW) != 0)
                {
                    // The peer sends data (new or again), waits on us or
                    // refuses to end: the session stays.
                    keep_open(u, now);
                }
                if let Recv::Dropped(d) = recv {
                    self.drops.channel += 1;
                    return Incoming::Dropped(d.describe());
                }
                if !u.confirmed {
                    u.confirmed = true;
                    u.confirm_at = None;
                }
                return Incoming::Data {
                    peer: id.unwrap_or_default(),
                    recv,
                };
            }
            if p.answered
                .as_ref()
                .is_some_and(|a| session_id(&a.mine, &a.theirs) == r.session)
            {
                // Ahead of its CONFIRM: the sender sends it again.
                return self.stale("data of a session whose CONFIRM has not arrived");
            }
        }
        self.drops.unknown_session += 1;
        self.ctrl
            .push_back((addr.to_vec(), reset_packet(r.session, false).to_vec()));
        Incoming::Dropped("a packet of an unknown session (answered with RESET)")
    }

    pub(super) fn on_handshake(
        &mut self,
        now: Instant,
        addr: &[u8],
        r: &Repr,
        hs: &Handshake,
    ) -> Incoming {
        let keyed = self.cfg.key.is_some();
        let auth = r.flags & flag::AUTH != 0;
        match r.kind {
            kind::HELLO => {
                if auth != keyed {
                    self.drops.auth += 1;
                    self.ctrl
                        .push_back((addr.to_vec(), refuse_packet(&hs.nonce)));
                    return Incoming::Dropped(if keyed {
                        "a HELLO without an auth key to an endpoint with one (refused)"
                    } else {
                        "a HELLO with an auth key to an endpoint without one (refused)"
                    });
                }
                self.on_hello(now, addr, hs)
            }
            kind::HELLO_ACK => {
                let Some(id) = self.find(addr) else {
                    return self.stale("a HELLO_ACK from an unknown address");
                };
                self.on_hello_ack(now, id, auth, hs)
            }
            _ => {
                let Some(id) = self.find(addr) else {
                    return self.stale("a CONFIRM from an unknown address");
                };
                self.on_confirm(now, id, auth, hs)
            }
        }
    }

    pub(super) fn on_hello(&mut self, now: Instant, addr: &[u8], hs: &Handshake) -> Incoming {
        let known = self.find(addr);
        if known.is_none_or(|id| self.at_bound(id)) && self.live() >= self.cfg.max_peers {
            // A new peer at the bound: its HELLO waits (it is sent again)
            // while an idle session ends.
            self.drops.full += 1;
            self.make_room(now);
            return Incoming::Dropped("a HELLO of a new peer at the peer bound (held back)");
        }
        if known.is_none() {
            self.make_room_for_half_open();
        }
        let id = self.entry(addr);
        let Some(p) = self.peers.get_mut(id) else {
            return Incoming::Control;
        };
        if let Some(u) =
            p.up.as_ref()
                .filter(|u| u.theirs == hs.nonce && u.epoch == hs.epoch)
        {
            // The HELLO of the live session again: our HELLO_ACK was lost.
            // (A HELLO from another epoch is a restarted peer, even if its
            // nonce repeats the old one: it gets a new session.)
            let mine = u.mine;
            self.send_hs(id, kind::HELLO_ACK, &mine, &hs.nonce, hs.epoch);
            return Incoming::Control;
        }
        if let Some(a) = p.answered.as_ref().filter(|a| a.theirs == hs.nonce) {
            let mine = a.mine;
            self.send_hs(id, kind::HELLO_ACK, &mine, &hs.nonce, hs.epoch);
            return Incoming::Control;
        }
        let mine = match &p.hello {
            Some(h) => h.mine,
            None => (self.nonces)(),
        };
        if let Some(p) = self.peers.get_mut(id) {
            p.answered = Some(Answered {
                mine,
                theirs: hs.nonce,
                since: now,
            });
        }
        self.send_hs(id, kind::HELLO_ACK, &mine, &hs.nonce, hs.epoch);
        Incoming::Control
    }

    pub(super) fn on_hello_ack(
        &mut self,
        now: Instant,
        id: PeerId,
        auth: bool,
        hs: &Handshake,
    ) -> Incoming {
        let Some(p) = self.peers.get(id) else {
            return Incoming::Control;
        };
        if let Some(u) = p.up.as_ref() {
            if u.mine == hs.echo && u.theirs == hs.nonce && u.epoch == hs.epoch {
                // Our CONFIRM was lost: send it again.
                let (mine, epoch) = (u.mine, u.epoch);
                self.send_hs(id, kind::CONFIRM, &mine, &hs.nonce, epoch);
                return Incoming::Control;
            }
        }
        let from_hello = p.hello.as_ref().is_some_and(|h| h.mine == hs.echo);
        let from_answer = p.answered.as_ref().is_some_and(|a| a.mine == hs.echo);
        if !from_hello && !from_answer {
            return self.stale("a HELLO_ACK answering no current HELLO");
        }
        let keyed = self.cfg.key.is_some();
        let proven = auth == keyed && self.verify(LABEL_ACK, &p.addr, hs);
        if !proven {
            // Only the peer knows our fresh nonce: its key differs.
            self.drops.auth += 1;
            if let Some(p) = self.peers.get_mut(id) {
                p.hello = None;
            }
            self.events.push_back(SessionEvent::Refused {
                peer: id,
                why: if auth != keyed {
                    "the peer's handshake shows one side has an auth key and the other none"
                } else {
                    "the peer's proof of the auth key is wrong: the keys differ"
                },
            });
            return Incoming::Dropped("a HELLO_ACK failing the auth key");
        }
        self.establish(now, id, hs, false);
        let (mine, epoch) = (hs.echo, hs.epoch);
        self.send_hs(id, kind::CONFIRM, &mine, &hs.nonce, epoch);
        Incoming::Control
    }

    pub(super) fn on_confirm(
        &mut self,
        now: Instant,
        id: PeerId,
        auth: bool,
        hs: &Handshake,
    ) -> Incoming {
        let Some(p) = self.peers.get_mut(id) else {
            return Incoming::Control;
        };
        if let Some(u) = p.up.as_mut() {
            if u.mine == hs.echo && u.theirs == hs.nonce {
                // A repeated CONFIRM: an acknowledgement tells the peer we have it.
                u.chan.ack_soon();
                return Incoming::Control;
            }
        }
        let current = p
            .answered
            .as_ref()
            .is_some_and(|a| a.mine == hs.echo && a.theirs == hs.nonce);
        if !current {
            return self.stale("a CONFIRM answering no current HELLO_ACK");
        }
        if self.at_bound(id) {
            self.drops.full += 1;
            self.make_room(now);
            return Incoming::Dropped("a CONFIRM of a new peer at the peer bound (held back)");
        }
        let Some(p) = self.peers.get_mut(id) else {
            return Incoming::Control;
        };
        let keyed = self.cfg.key.is_some();
        let addr = p.addr.clone();
        if auth != keyed || !self.verify(LABEL_CONFIRM, &addr, hs) {
            self.drops.auth += 1;
            if let Some(p) = self.peers.get_mut(id) {
                p.answered = None;
            }
            self.ctrl.push_back((addr, refuse_packet(&hs.nonce)));
            return Incoming::Dropped("a CONFIRM failing the auth key (refused)");
        }
        self.establish(now, id, hs, true);
        Incoming::Control
    }

    /// The MAC transcript of a handshake packet sent by `from` to `to`.
    pub(super) fn verify(&self, label: &[u8], peer_addr: &[u8], hs: &Handshake) -> bool {
        let Some(key) = &self.cfg.key else {
            return hs.mac.is_none();
        };
        let Some(mac) = &hs.mac else {
            return false;
        };
        let parts = transcript(
            label,
            peer_addr,
            &self.cfg.my_addr,
            hs.epoch,
            self.cfg.epoch,
            &hs.nonce,
            &hs.echo,
            hs.max_datagram,
            hs.window,
        );
        let refs: Vec<&[u8]> = parts.iter().map(|v| v.as_slice()).collect();
        key.verify(&refs, mac)
    }

    /// A session is up with `peer`: `hs.echo` is our nonce, `hs.nonce` theirs.
    pub(super) fn establish(&mut self, now: Instant, id: PeerId, hs: &Handshake, confirmed: bool) {
        let mine = hs.echo;
        let theirs = hs.nonce;
        let session = session_id(&mine, &theirs);
        let own = self.cfg.max_datagram;
        let mut ccfg = self.cfg.chan;
        ccfg.max_payload = own
            .min(hs.max_datagram as usize)
            .saturating_sub(HDR_LEN)
            .max(1);
        let rto = self.cfg.chan.initial_rto;
        let Some(p) = self.peers.get_mut(id) else {
            return;
        };
        let old = p.up.take();
        p.hello = None;
        p.answered = None;
        // The layer above hears of the session: it names the peer by id.
        p.held = true;
        p.up = Some(Up {
            mine,
            theirs,
            epoch: hs.epoch,
            chan: Channel::new(ccfg, session, hs.window, now),
            closing: None,
            asked: None,
            confirmed,
            since: now,
            confirm_at: (!confirmed).then_some(now + rto),
            confirm_rto: rto,
        });
        if let Some(old) = old {
            let renewed = old.epoch == hs.epoch && old.chan.is_idle();
            self.events.push_back(SessionEvent::Down {
                peer: id,
                cause: Cause::Reset,
                renewed,
                closed: false,
            });
        }
        self.events.push_back(SessionEvent::Up {
            peer: id,
            epoch: hs.epoch,
        });
    }

    pub(super) fn down(&mut self, id: PeerId, cause: Cause, renewed: bool, closed: bool) {
        if let Some(p) = self.peers.get_mut(id) {
            p.up = None;
            p.hello = None;
        }
        self.events.push_back(SessionEvent::Down {
            peer: id,
            cause,
            renewed,
            closed,
        });
    }

    /// Drops the oldest half-open peer when the table holds as many as allowed.
    pub(super) fn make_room_for_half_open(&mut self) {
        let half: Vec<(PeerId, (Instant, u64))> = self
            .peers
            .iter()
            .filter(|(_, p)| p.half_open() && !p.held)
            .filter_map(|(id, p)| p.answered.as_ref().map(|a| (id, (a.since, p.born))))
            .collect();
        if half.len() < self.cfg.max_half_open {
            return;
        }
        if let Some((id, _)) = half.iter().min_by_key(|(_, t)| *t) {
            self.forget(*id);
            self.drops.stale += 1;
        }
    }

    pub(super) fn forget(&mut self, id: PeerId) {
        if let Some(p) = self.peers.remove(id) {
            self.by_addr.remove(&p.addr);
        }
    }

    /// Queues a handshake packet of `kind` to `peer` whose epoch is
    /// `their_epoch` (0 for HELLO: not known yet).
    pub(super) fn send_hs(
        &mut self,
        id: PeerId,
        k: u8,
        mine: &Nonce,
        echo: &Nonce,
        their_epoch: u64,
    ) {
        let Some(p) = self.peers.get(id) else {
            return;
        };
        let keyed = self.cfg.key.is_some();
        let session = if k == kind::HELLO {
            0
        } else {
            session_id(mine, echo)
        };
        let window = self.cfg.chan.window;
        let max_datagram = self.cfg.max_datagram as u32;
        let mac = match (&self.cfg.key, k) {
            (Some(key), kind::HELLO_ACK | kind::CONFIRM) => {
                let label = if k == kind::HELLO_ACK {
                    LABEL_ACK
                } else {
                    LABEL_CONFIRM
                };
                let parts = transcript(
                    label,
                    &self.cfg.my_addr,
                    &p.addr,
                    self.cfg.epoch,
                    their_epoch,
                    mine,
                    echo,
                    max_datagram,
                    window,
                );
                let refs: Vec<&[u8]> = parts.iter().map(|v| v.as_slice()).collect();
                Some(key.mac(&refs))
            }
            _ => None,
        };
        let r = Repr {
            kind: k,
            flags: if keyed { flag::AUTH } else { 0 },
            session,
            ..Default::default()
        };
        let mut out = r.to_bytes().to_vec();
        Handshake {
            epoch: self.cfg.epoch,
            max_datagram,
            window,
            nonce: *mine,
            echo: *echo,
            mac,
        }
        .emit(&mut out);
        self.ctrl.push_back((p.addr.clone(), out));
    }
}
