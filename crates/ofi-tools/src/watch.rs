//! Noticing the peer's death while a loop waits for completions, so a
//! survivor exits with a message naming the peer instead of waiting
//! forever: the endpoint's event queue (the provider's death report on RDM
//! endpoints, FI_SHUTDOWN or an error on MSG ones; see
//! `ofi_core::util::peer`) and, as a backstop for a peer that dies before
//! any connection to it exists, the control channel (its end closes when
//! the peer process goes).

use crate::control::Oob;
use crate::setup::Ctx;
use std::time::{Duration, Instant};

/// Empty polls between two looks at the event queue (a power of two).
const EVERY: u32 = 256;
/// Time between two looks at the control channel (three system calls).
const OOB_EVERY: Duration = Duration::from_millis(100);
/// How long the provider gets to report a death the control channel
/// already shows (its report says why; shm looks at its peers every
/// 20 ms).
const REPORT_GRACE: Duration = Duration::from_secs(1);

/// The state of the looks (one per waiting loop, cheap to make).
pub struct Watch {
    spins: u32,
    last_oob: Instant,
}

impl Watch {
    /// A fresh watch.
    pub fn new() -> Watch {
        Watch {
            spins: 0,
            last_oob: Instant::now(),
        }
    }

    /// A poll found nothing: every [`EVERY`]th call looks at the event
    /// queue, and at the control channel when [`OOB_EVERY`] has passed.
    /// An error names the peer and what happened to it.
    #[inline]
    pub fn idle(&mut self, c: &Ctx, oob: &mut Oob) -> Result<(), String> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins & (EVERY - 1) != 0 {
            return Ok(());
        }
        self.look(c, oob)
    }

    /// Looks now (after a blocking read that timed out).
    pub fn look(&mut self, c: &Ctx, oob: &mut Oob) -> Result<(), String> {
        c.check_peer()?;
        if self.last_oob.elapsed() >= OOB_EVERY {
            self.last_oob = Instant::now();
            if let Err(e) = oob.readable() {
                // The peer's process is gone: the provider's own report,
                // when it comes within the grace, names the cause.
                let t0 = Instant::now();
                while t0.elapsed() < REPORT_GRACE {
                    c.ep.progress();
                    c.check_peer()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                return Err(format!(
                    "peer {}: {e} (its process exited or was killed)",
                    c.peer_name
                ));
            }
        }
        Ok(())
    }
}

impl Default for Watch {
    fn default() -> Self {
        Watch::new()
    }
}
