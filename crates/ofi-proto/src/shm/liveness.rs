//! Peer liveness: when an shm peer counts as dead, decided from what the
//! driver observes of the peer's segment at each look and the time, both
//! passed in (no clock, no system call here).
//!
//! A peer is dead ([`Cause::Reset`]) once its owner process has exited
//! (or its pid names another process) or it closed its endpoint. It is
//! dead by silence ([`Cause::TimedOut`]) when this endpoint waits on it
//! ([`Wait`]) and neither its ring position nor its heartbeat has moved
//! for the bound (`FI_SHM_PEER_TIMEOUT_MS`): its process lives but its
//! endpoint is not progressing (stopped, hung, or never polling). What the
//! peer does when it reads its ring (an answer, room in it) counts as owed
//! only while entries sit unread there: a peer whose ring is empty is
//! merely idle. Data the peer pushes on its own (the rest of a message in
//! reassembly) is owed whatever its ring holds. A peer that reads nothing
//! because its unexpected budget is spent still beats: it is not dead.

use ofi_base::peer::Cause;
use std::time::{Duration, Instant};

/// One look at a peer's segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its owner process has exited (or the pid names another process).
    pub exited: bool,
    /// Its owner closed the endpoint.
    pub closed: bool,
    /// Entries waiting unread in its ring (from every producer).
    pub backlog: u64,
    /// The ring position its consumer last published.
    pub consumed: u64,
    /// Its heartbeat.
    pub beat: u64,
}

/// What this endpoint waits on a peer for, at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing: the peer may stay silent for ever.
    Nothing,
    /// What the peer does when it reads its ring (an ACK or answer, room
    /// for an answer or pushed data): silence counts only while entries
    /// sit unread there.
    Reading,
    /// Data the peer pushes on its own (a receive in reassembly waits for
    /// its DATA): silence counts with its ring empty too.
    Pushing,
}

/// What an endpoint remembers of one peer between looks.
#[derive(Clone, Copy, Debug)]
pub struct Liveness {
    consumed: u64,
    beat: u64,
    since: Instant,
}

impl Liveness {
    /// A peer first looked at `now`.
    pub fn new(now: Instant) -> Self {
        Liveness {
            consumed: 0,
            beat: 0,
            since: now,
        }
    }

    /// Takes a look: `Some(cause)` when the peer is dead. `wait`: what
    /// this endpoint's operations need the peer to do; `bound`: how long
    /// it may stay silent while it owes something (`None`: a peer whose
    /// process lives and whose endpoint is open is never dead by silence).
    pub fn observe(
        &mut self,
        s: &Seen,
        wait: Wait,
        now: Instant,
        bound: Option<Duration>,
    ) -> Option<Cause> {
        if s.exited || s.closed {
            return Some(Cause::Reset);
        }
        let moved = s.consumed != self.consumed || s.beat != self.beat;
        let owed = match wait {
            Wait::Nothing => false,
            Wait::Reading => s.backlog != 0,
            Wait::Pushing => true,
        };
        if moved || !owed {
            self.consumed = s.consumed;
            self.beat = s.beat;
            self.since = now;
            return None;
        }
        let silent = now.saturating_duration_since(self.since);
        bound
            .is_some_and(|b| silent >= b)
            .then_some(Cause::TimedOut)
    }
}

/// How a receiver waits for the chunks of a cooperative copy its peer
/// claimed: dead when the peer is, or when no chunk finished for the bound.
#[derive(Clone, Copy, Debug)]
pub struct CopyWait {
    done: u64,
    since: Instant,
}

impl CopyWait {
    /// A wait that starts `now` with `done` chunks finished.
    pub fn new(done: u64, now: Instant) -> Self {
        CopyWait { done, since: now }
    }

    /// Takes a look: `Some(cause)` to give up. `exited`: the peer's owner
    /// process is gone (or its endpoint closed); `bound`: as for
    /// [`Liveness::observe`] (`None`: only the peer's end gives up).
    pub fn observe(
        &mut self,
        done: u64,
        exited: bool,
        now: Instant,
        bound: Option<Duration>,
    ) -> Option<Cause> {
        if exited {
            return Some(Cause::Reset);
        }
        if done != self.done {
            self.done = done;
            self.since = now;
            return None;
        }
        let silent = now.saturating_duration_since(self.since);
        bound
            .is_some_and(|b| silent >= b)
            .then_some(Cause::TimedOut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Option<Duration> = Some(Duration::from_millis(100));

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn an_exited_or_closed_owner_is_a_reset() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        let gone = Seen {
            exited: true,
            ..Default::default()
        };
        assert_eq!(
            l.observe(&gone, Wait::Nothing, t0, BOUND),
            Some(Cause::Reset)
        );
        let closed = Seen {
            closed: true,
            ..Default::default()
        };
        assert_eq!(
            l.observe(&closed, Wait::Nothing, t0, BOUND),
            Some(Cause::Reset)
        );
    }

    #[test]
    fn a_stuck_peer_times_out_only_while_waited_on_with_a_backlog() {
        let t0 = Instant::now();
        let stuck = Seen {
            backlog: 3,
            consumed: 10,
            beat: 7,
            ..Default::default()
        };
        // Not waited on: never dead, however long.
        let mut l = Liveness::new(t0);
        assert_eq!(l.observe(&stuck, Wait::Nothing, at(t0, 0), BOUND), None);
        assert_eq!(l.observe(&stuck, Wait::Nothing, at(t0, 500), BOUND), None);
        // Waited on, nothing moves: dead once the bound has passed since
        // the last look that found nothing to wait for.
        assert_eq!(l.observe(&stuck, Wait::Reading, at(t0, 510), BOUND), None);
        assert_eq!(l.observe(&stuck, Wait::Reading, at(t0, 599), BOUND), None);
        assert_eq!(
            l.observe(&stuck, Wait::Reading, at(t0, 600), BOUND),
            Some(Cause::TimedOut)
        );
    }

    #[test]
    fn without_a_bound_only_the_peers_end_kills_it() {
        let t0 = Instant::now();
        let stuck = Seen {
            backlog: 3,
            consumed: 10,
            beat: 7,
            ..Default::default()
        };
        // Silent for an hour while owing data and answers: alive (its
        // application computes between progress calls).
        let mut l = Liveness::new(t0);
        for wait in [Wait::Reading, Wait::Pushing] {
            assert_eq!(l.observe(&stuck, wait, at(t0, 3_600_000), None), None);
        }
        let mut c = CopyWait::new(2, t0);
        assert_eq!(c.observe(2, false, at(t0, 3_600_000), None), None);
        // Its exit or close still counts at once.
        let gone = Seen {
            exited: true,
            ..stuck
        };
        assert_eq!(
            l.observe(&gone, Wait::Reading, at(t0, 3_600_001), None),
            Some(Cause::Reset)
        );
        assert_eq!(
            c.observe(2, true, at(t0, 3_600_001), None),
            Some(Cause::Reset)
        );
    }

    #[test]
    fn a_beating_or_reading_or_idle_peer_lives() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        let mut s = Seen {
            backlog: 5,
            ..Default::default()
        };
        for i in 1..20u64 {
            // Budget spent: the ring does not move, the heartbeat does.
            s.beat = i;
            assert_eq!(l.observe(&s, Wait::Reading, at(t0, i * 60), BOUND), None);
        }
        for i in 20..40u64 {
            // Reading: the position moves.
            s.consumed = i;
            assert_eq!(l.observe(&s, Wait::Reading, at(t0, i * 60), BOUND), None);
        }
        // Idle (empty ring): alive however still.
        let idle = Seen { backlog: 0, ..s };
        for i in 40..60u64 {
            assert_eq!(l.observe(&idle, Wait::Reading, at(t0, i * 60), BOUND), None);
        }
    }

    #[test]
    fn a_silent_pusher_times_out_with_its_ring_empty() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        let quiet = Seen {
            backlog: 0,
            consumed: 4,
            beat: 9,
            ..Default::default()
        };
        // Read (its ring empty) but owes data: silence counts.
        assert_eq!(l.observe(&quiet, Wait::Pushing, at(t0, 0), BOUND), None);
        assert_eq!(l.observe(&quiet, Wait::Pushing, at(t0, 99), BOUND), None);
        assert_eq!(
            l.observe(&quiet, Wait::Pushing, at(t0, 100), BOUND),
            Some(Cause::TimedOut)
        );
        // A pusher that beats lives, however slow its data.
        let mut l = Liveness::new(t0);
        let mut s = quiet;
        for i in 1..20u64 {
            s.beat = i;
            assert_eq!(l.observe(&s, Wait::Pushing, at(t0, i * 60), BOUND), None);
        }
        // The same silence with nothing owed, or only an answer to an
        // empty ring, is idleness.
        let mut l = Liveness::new(t0);
        for w in [Wait::Nothing, Wait::Reading] {
            assert_eq!(l.observe(&quiet, w, at(t0, 0), BOUND), None);
            assert_eq!(l.observe(&quiet, w, at(t0, 500), BOUND), None);
        }
    }

    #[test]
    fn a_copy_wait_gives_up_on_death_or_silence() {
        let t0 = Instant::now();
        let mut w = CopyWait::new(2, t0);
        assert_eq!(w.observe(2, false, at(t0, 90), BOUND), None);
        assert_eq!(w.observe(3, false, at(t0, 150), BOUND), None, "moved");
        assert_eq!(w.observe(3, false, at(t0, 240), BOUND), None);
        assert_eq!(
            w.observe(3, false, at(t0, 250), BOUND),
            Some(Cause::TimedOut)
        );
        let mut w = CopyWait::new(0, t0);
        assert_eq!(w.observe(0, true, t0, BOUND), Some(Cause::Reset));
    }
}
