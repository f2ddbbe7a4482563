//! Admission of incoming connections, for RDM and passive endpoints alike:
//! a bound on connections still in their handshake (half-open or not yet
//! authenticated: the oldest is dropped first when a new one would exceed
//! FI_TCP_MAX_HALF_OPEN), a deadline for finishing the handshake
//! (FI_TCP_HANDSHAKE_TIMEOUT_MS), and `accept` backing off when the process
//! or the system is out of descriptors (EMFILE, ENFILE) or memory, with
//! one warning and then a count instead of a line per attempt.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

/// The limits (from the tunables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most incoming connections in their handshake at once.
    pub max_half_open: usize,
    /// Time an incoming connection has to finish its handshake.
    pub handshake_timeout: Duration,
}

/// Why a connection in its handshake was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// It was the oldest when the cap was reached.
    Oldest,
    /// Its handshake deadline passed.
    Deadline,
}

impl Dropped {
    /// For the log line.
    pub fn describe(self, l: &Limits) -> String {
        match self {
            Dropped::Oldest => format!(
                "the oldest of {} connections still in their handshake (FI_TCP_MAX_HALF_OPEN)",
                l.max_half_open
            ),
            Dropped::Deadline => format!(
                "no handshake within {} ms (FI_TCP_HANDSHAKE_TIMEOUT_MS)",
                l.handshake_timeout.as_millis()
            ),
        }
    }
}

/// The incoming connections in their handshake, oldest first.
#[derive(Debug)]
pub struct Gate {
    limits: Limits,
    pending: VecDeque<(u64, Instant)>,
}

impl Gate {
    /// An empty gate.
    pub fn new(limits: Limits) -> Gate {
        Gate {
            limits,
            pending: VecDeque::new(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// True when no incoming connection is in its handshake.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Connection `id` was accepted at `now`. Connections for which
    /// `pending(id)` is false finished (or lost) their handshake and are
    /// forgotten; then the oldest are handed to `drop` until at most
    /// `max_half_open` remain, this one included.
    pub fn admit(
        &mut self,
        id: u64,
        now: Instant,
        pending: impl Fn(u64) -> bool,
        mut drop: impl FnMut(u64, Dropped),
    ) {
        self.pending.retain(|(i, _)| pending(*i));
        self.pending.push_back((id, now));
        while self.pending.len() > self.limits.max_half_open.max(1) {
            if let Some((old, _)) = self.pending.pop_front() {
                drop(old, Dropped::Oldest);
            }
        }
    }

    /// Hands to `drop` every connection whose deadline passed at `now`
    /// and that is still `pending`; forgets those that are not.
    pub fn sweep(
        &mut self,
        now: Instant,
        pending: impl Fn(u64) -> bool,
        mut drop: impl FnMut(u64, Dropped),
    ) {
        while let Some(&(id, at)) = self.pending.front() {
            if !pending(id) {
                self.pending.pop_front();
                continue;
            }
            if now.saturating_duration_since(at) <= self.limits.handshake_timeout {
                break;
            }
            self.pending.pop_front();
            drop(id, Dropped::Deadline);
        }
    }
}

/// Shortest pause of `accept` after it ran out of a resource.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// While failures go on, a count is logged at most this often.
const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// `accept`'s state: whether to try now, and the rate-limited warning.
#[derive(Debug, Default)]
pub struct Accepting {
    /// No accept before this.
    until: Option<Instant>,
    delay: Duration,
    /// Failures since the last line logged.
    unlogged: u64,
    /// When the last line was logged (None: no failure streak).
    logged_at: Option<Instant>,
}

/// True for the errors that say a resource ran out, not that the
/// connection was bad: the listener should pause rather than spin.
pub fn exhausted(e: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        Errno::from_io_error(e),
        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)
    )
}

impl Accepting {
    /// True when `accept` may be called at `now`.
    #[inline]
    pub fn may_accept(&self, now: impl FnOnce() -> Instant) -> bool {
        match self.until {
            None => true,
            Some(t) => now() >= t,
        }
    }

    /// `accept` failed with `e` at `now` (listener at `at`, for the log):
    /// out of a resource, it pauses (10 ms, doubling to 1 s); the first
    /// failure of a streak is logged, the rest are counted and logged as
    /// one line every 30 s and when accepting works again.
    pub fn failed(&mut self, e: &io::Error, now: Instant, at: &str) {
        if exhausted(e) {
            self.delay = (self.delay * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
            self.until = Some(now + self.delay);
        }
        match self.logged_at {
            None => {
                tracing::warn!(
                    listener = at,
                    error = %e,
                    "tcp: accept failed; pausing accept while resources are exhausted (further failures are counted, not logged one by one)"
                );
                self.logged_at = Some(now);
            }
            Some(t) if now.saturating_duration_since(t) >= SUMMARY_EVERY => {
                self.unlogged += 1;
                tracing::warn!(
                    listener = at,
                    error = %e,
                    "tcp: accept still failing: {} more failures since the last report",
                    self.unlogged
                );
                self.unlogged = 0;
                self.logged_at = Some(now);
            }
            Some(_) => self.unlogged += 1,
        }
    }

    /// `accept` worked (or found nothing pending): the pause ends; a
    /// streak of failures is closed with one line counting them.
    pub fn recovered(&mut self, at: &str) {
        self.until = None;
        self.delay = Duration::ZERO;
        if self.logged_at.take().is_some() {
            tracing::warn!(
                listener = at,
                "tcp: accept works again ({} failures after the first were not logged)",
                self.unlogged
            );
            self.unlogged = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, ms: u64) -> Limits {
        Limits {
            max_half_open: max,
            handshake_timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn the_oldest_go_first_when_the_cap_is_reached() {
        let mut g = Gate::new(limits(2, 1000));
        let t = Instant::now();
        let mut dropped = Vec::new();
        for id in 1..=5 {
            g.admit(id, t, |i| i != 2, |i, w| dropped.push((i, w)));
        }
        // 2 finished its handshake (forgotten, it takes no room); then 1
        // and 3 were the oldest when 4 and 5 came.
        assert_eq!(dropped, [(1, Dropped::Oldest), (3, Dropped::Oldest)]);
    }

    #[test]
    fn deadlines_drop_only_pending_connections_in_order() {
        let mut g = Gate::new(limits(10, 100));
        let t = Instant::now();
        g.admit(1, t, |_| true, |_, _| {});
        g.admit(2, t + Duration::from_millis(50), |_| true, |_, _| {});
        g.admit(3, t + Duration::from_millis(60), |_| true, |_, _| {});
        let mut dropped = Vec::new();
        g.sweep(
            t + Duration::from_millis(120),
            |i| i != 3,
            |i, w| dropped.push((i, w)),
        );
        assert_eq!(dropped, [(1, Dropped::Deadline)]);
        g.sweep(
            t + Duration::from_millis(200),
            |i| i != 3,
            |i, w| dropped.push((i, w)),
        );
        assert_eq!(dropped, [(1, Dropped::Deadline), (2, Dropped::Deadline)]);
        assert!(g.is_empty(), "3 finished its handshake");
    }

    #[test]
    fn accept_backs_off_on_exhaustion_and_recovers() {
        let mut a = Accepting::default();
        let t = Instant::now();
        assert!(a.may_accept(|| t));
        let emfile = io::Error::from(rustix::io::Errno::MFILE);
        a.failed(&emfile, t, "l");
        assert!(!a.may_accept(|| t + Duration::from_millis(5)));
        assert!(a.may_accept(|| t + BACKOFF_MIN));
        for i in 0..20 {
            a.failed(&emfile, t, "l");
            assert!(a.delay <= BACKOFF_MAX, "{i}");
        }
        assert_eq!(a.delay, BACKOFF_MAX);
        assert_eq!(a.unlogged, 20);
        a.recovered("l");
        assert!(a.may_accept(|| t));
        assert_eq!((a.unlogged, a.logged_at), (0, None));
        // A bad connection (not a resource) pauses nothing.
        a.failed(&io::Error::from(rustix::io::Errno::CONNABORTED), t, "l");
        assert!(a.may_accept(|| t));
    }
}
