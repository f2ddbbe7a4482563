//! Round-trip time estimation and the retransmission timeout (the
//! smoothed RTT and its variation, as RFC 6298 computes them), with
//! exponential backoff while retransmissions go unanswered.

use std::time::Duration;

/// The estimator of one session.
#[derive(Clone, Copy, Debug)]
pub struct Rtt {
    srtt: Option<Duration>,
    rttvar: Duration,
    initial: Duration,
    min: Duration,
    max: Duration,
    /// Consecutive timeouts: each doubles the timeout.
    backoff: u32,
}

impl Rtt {
    /// An estimator with no sample yet: the timeout is `initial` until the
    /// first one, and always within `min..=max`.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Rtt {
        let max = max.max(min);
        Rtt {
            srtt: None,
            rttvar: Duration::ZERO,
            initial: initial.clamp(min, max),
            min,
            max,
            backoff: 0,
        }
    }

    /// Takes one sample (a packet sent once and acknowledged: Karn's rule
    /// leaves retransmitted packets out) and ends any backoff.
    pub fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        self.backoff = 0;
    }

    /// The smoothed round-trip time, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The retransmission timeout, backoff included.
    pub fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.initial,
            Some(s) => (s + self.rttvar * 4).clamp(self.min, self.max),
        };
        base.checked_mul(1 << self.backoff.min(16))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// A timeout expired: the next one is twice as long (up to the maximum).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(16);
    }

    /// The peer answered: the backoff ends.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
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
