//! Round-trip time estimation and the retransmission timeout (the
//! smoothed RTT and its variation, as RFC 6298 computes them), with
//! exponential backoff while retransmissions go unanswered.

use std::time::Duration;

/// The estimator of one session. Kept in nanoseconds, with the timeout
/// worked out when a sample or a backoff changes it: the data path reads
/// it at every acknowledgement.
#[derive(Clone, Copy, Debug)]
pub struct Rtt {
    /// Smoothed RTT in nanoseconds (`None`: no sample yet).
    srtt: Option<u64>,
    rttvar: u64,
    initial: u64,
    min: u64,
    max: u64,
    /// Consecutive timeouts: each doubles the timeout.
    backoff: u32,
    /// The timeout now, backoff included.
    rto: Duration,
}

/// Nanoseconds of `d`, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Rtt {
    /// An estimator with no sample yet: the timeout is `initial` until the
    /// first one, and always within `min..=max`.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Rtt {
        let max = max.max(min);
        let mut r = Rtt {
            srtt: None,
            rttvar: 0,
            initial: nanos(initial.clamp(min, max)),
            min: nanos(min),
            max: nanos(max),
            backoff: 0,
            rto: Duration::ZERO,
        };
        r.update();
        r
    }

    /// Takes one sample (a packet sent once and acknowledged: Karn's rule
    /// leaves retransmitted packets out) and ends any backoff.
    pub fn sample(&mut self, r: Duration) {
        let r = nanos(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (self.rttvar.saturating_mul(3).saturating_add(diff)) / 4;
                self.srtt = Some(s.saturating_mul(7).saturating_add(r) / 8);
            }
        }
        self.backoff = 0;
        self.update();
    }

    /// The smoothed round-trip time, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// The retransmission timeout, backoff included.
    #[inline]
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// A timeout expired: the next one is twice as long (up to the maximum).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(16);
        self.update();
    }

    /// The peer answered: the backoff ends.
    #[inline]
    pub fn reset_backoff(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.update();
        }
    }

    fn update(&mut self) {
        let base = match self.srtt {
            None => self.initial,
            Some(s) => s
                .saturating_add(self.rttvar.saturating_mul(4))
                .clamp(self.min, self.max),
        };
        let ns = base
            .checked_mul(1 << self.backoff.min(16))
            .unwrap_or(self.max)
            .min(self.max);
        self.rto = Duration::from_nanos(ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn timeout_follows_samples_within_bounds() {
        let mut r = Rtt::new(20 * MS, 2 * MS, 1000 * MS);
        assert_eq!(r.rto(), 20 * MS);
        r.sample(10 * MS);
        // srtt 10, rttvar 5: 10 + 20.
        assert_eq!(r.rto(), 30 * MS);
        for _ in 0..64 {
            r.sample(MS / 10);
        }
        assert_eq!(r.rto(), 2 * MS, "clamped to the minimum");
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(), 8 * MS);
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(), 1000 * MS, "clamped to the maximum");
        r.sample(MS / 10);
        assert_eq!(r.rto(), 2 * MS, "a sample ends the backoff");
    }
}
