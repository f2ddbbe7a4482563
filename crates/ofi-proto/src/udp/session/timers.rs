//! The session table's timers: handshake retransmission and give-up,
//! the peer timeout of live sessions, idle sessions asked to end, and
//! room made for a new peer under the bound on live peers.

use super::*;

impl Sessions {
    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.cfg.chan.peer_timeout;
        let idle = self.cfg.idle_timeout;
        let mut at = self.room_at;
        for p in self.peers.values() {
            if let Some(u) = &p.up {
                let ct = u.chan.poll_timeout();
                at = earliest(at, ct);
                if let Some(c) = u.confirm_at {
                    at = earliest(at, Some(c.min(u.since + t)));
                }
                if let Some(c) = &u.closing {
                    at = earliest(at, Some(c.next_at.min(c.since + t)));
                } else if ct.is_none() && u.chan.quiet() {
                    // (A channel with a timer of its own is not quiet.)
                    at = earliest(at, Some(u.chan.last_active() + idle));
                }
            }
            if let Some(h) = &p.hello {
                at = earliest(at, Some(h.next_at.min(h.started + t)));
            }
            if let Some(a) = &p.answered {
                at = earliest(at, Some(a.since + t));
            }
        }
        at
    }

    /// Runs the timers due at `now`: handshake retransmissions and bounds,
    /// half-open expiry, and every channel's timers (a dead channel ends
    /// its session with `TimedOut`); sessions idle for
    /// [`SessionConfig::idle_timeout`] are asked to end (the owner always
    /// agrees: see [`handle_timeout_with`](Self::handle_timeout_with)).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_with(now, &mut |_| true);
    }

    /// [`handle_timeout`](Self::handle_timeout), `may_end(peer)` saying
    /// whether the owner lets an idle session with `peer` end (nothing of
    /// its own tied to it). A session idle for
    /// [`SessionConfig::idle_timeout`], or the least recently active idle
    /// one when a new peer waits for room ([`make_room`](Self::make_room)),
    /// is asked to end: the peer agrees (then [`SessionEvent::Expired`]),
    /// refuses (it stays), or stays silent through `peer_timeout` (then it
    /// ends all the same: nothing was waiting on it).
    pub fn handle_timeout_with(&mut self, now: Instant, may_end: &mut dyn FnMut(PeerId) -> bool) {
        let t = self.cfg.chan.peer_timeout;
        let idle = self.cfg.idle_timeout;
        let max_rto = self.cfg.chan.max_rto;
        // By slot (the table changes under the loop; no allocation on the
        // hot path).
        for i in 0..self.peers.slots() {
            let Some(id) = self.peers.id_at(i) else {
                continue;
            };
            let Some(p) = self.peers.get_mut(id) else {
                continue;
            };
            if p.answered.as_ref().is_some_and(|a| now >= a.since + t) {
                p.answered = None;
                if !p.held && p.hello.is_none() && p.up.is_none() {
                    // A stranger's HELLO that led nowhere: nothing of it
                    // stays (each forged source would otherwise leave an
                    // entry every timer pass walks).
                    self.forget(id);
                    continue;
                }
            }
            let mut resend_hello = None;
            let mut hello_dead = false;
            if let Some(h) = p.hello.as_mut() {
                if now >= h.started + t {
                    hello_dead = true;
                } else if now >= h.next_at {
                    h.rto = (h.rto * 2).min(max_rto);
                    h.next_at = now + h.rto;
                    resend_hello = Some(h.mine);
                }
            }
            let mut resend_confirm = None;
            let mut chan_dead = false;
            let mut idle_work = false;
            if let Some(u) = p.up.as_mut() {
                if !u.confirmed && now >= u.since + t {
                    chan_dead = true;
                } else if u.confirm_at.is_some_and(|c| now >= c) {
                    u.confirm_rto = (u.confirm_rto * 2).min(max_rto);
                    u.confirm_at = Some(now + u.confirm_rto);
                    resend_confirm = Some((u.mine, u.theirs, u.epoch));
                }
                u.chan.handle_timeout(now);
                chan_dead |= u.chan.is_dead();
                // The idle bound (the time first: a busy channel was
                // active just now), or the ending under way.
                idle_work =
                    u.closing.is_some() || (now >= u.chan.last_active() + idle && u.chan.quiet());
            }
            if hello_dead {
                p.hello = None;
                self.events.push_back(SessionEvent::Down {
                    peer: id,
                    cause: Cause::TimedOut,
                    renewed: false,
                    closed: false,
                });
            } else if let Some(mine) = resend_hello {
                self.send_hs(id, kind::HELLO, &mine, &[0; NONCE_LEN], 0);
            }
            if chan_dead {
                self.down(id, Cause::TimedOut, false, false);
            } else if let Some((mine, theirs, epoch)) = resend_confirm {
                self.send_hs(id, kind::CONFIRM, &mine, &theirs, epoch);
            }
            if idle_work && !chan_dead {
                self.idle_timer(now, id, t, idle, max_rto, may_end);
            }
        }
        if self.room_at.take().is_some() {
            self.end_least_active(now, may_end);
        }
    }

    /// The idle bound and the ending of `id`'s session.
    pub(super) fn idle_timer(
        &mut self,
        now: Instant,
        id: PeerId,
        t: Duration,
        idle: Duration,
        max_rto: Duration,
        may_end: &mut dyn FnMut(PeerId) -> bool,
    ) {
        let Some(p) = self.peers.get_mut(id) else {
            return;
        };
        let Some(u) = p.up.as_mut() else {
            return;
        };
        match u.closing.as_mut() {
            Some(c) if now >= c.since + t => {
                // No answer: the peer is gone or stalled, and nothing
                // waited on the session.
                self.expire(now, id);
            }
            Some(c) if now >= c.next_at => {
                c.rto = (c.rto * 2).min(max_rto);
                c.next_at = now + c.rto;
                let ask = idle_packet(u.chan.session(), c.ack).to_vec();
                self.ctrl.push_back((p.addr.clone(), ask));
            }
            Some(_) => {}
            None if u.chan.quiet() && now >= u.chan.last_active() + idle => {
                if may_end(id) {
                    self.start_closing(now, id);
                } else {
                    // The owner still holds something of it: later.
                    u.chan.touch(now);
                }
            }
            None => {}
        }
    }

    /// Room for a new peer: unless a session is ending already, asks the
    /// least recently active idle one the owner lets go to end.
    #[cold]
    pub(super) fn end_least_active(
        &mut self,
        now: Instant,
        may_end: &mut dyn FnMut(PeerId) -> bool,
    ) {
        if self.live() < self.cfg.max_peers
            || self
                .peers
                .values()
                .any(|p| p.up.as_ref().is_some_and(|u| u.closing.is_some()))
        {
            return;
        }
        let mut quiet: Vec<(Instant, u64, PeerId)> = self
            .peers
            .iter()
            .filter_map(|(id, p)| {
                let u = p.up.as_ref()?;
                (u.chan.quiet() && u.closing.is_none()).then(|| (u.chan.last_active(), p.born, id))
            })
            .collect();
        quiet.sort_unstable();
        for (_, _, id) in quiet {
            if may_end(id) {
                self.start_closing(now, id);
                return;
            }
        }
    }
}
