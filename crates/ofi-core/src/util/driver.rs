//! What a CQ or counter shares: the list of endpoints to drive, and blocking
//! waits that spin briefly and then sleep on the wait set.

use super::lock::SpinLock;
use super::wait::WaitFd;
use crate::error::{errno, Error, Result};
use crate::provider::Progress;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Drives bound endpoints and blocks for a wait object.
pub struct Driver {
    sources: SpinLock<Vec<Arc<dyn Progress>>>,
    waits: Option<WaitFd>,
    sleepers: AtomicU32,
    /// Sources left armed by `trywait` for an application that sleeps on the fd.
    armed: AtomicBool,
    /// The sources that `trywait` armed (each gets exactly one `disarm`).
    armed_sources: SpinLock<Vec<Arc<dyn Progress>>>,
    /// Set by `signal`: the next (or current) blocking wait returns FI_EAGAIN.
    signaled: AtomicBool,
    spin: Duration,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("spin", &self.spin).finish()
    }
}

impl Driver {
    /// A driver; `waitable` creates the wait set (`FI_WAIT_NONE` does not).
    pub fn new(waitable: bool) -> Result<Self> {
        let spin = crate::config::core_tunable("cq_spin_us").get_size()?;
        Ok(Driver {
            sources: SpinLock::new(Vec::new()),
            waits: if waitable { Some(WaitFd::new()?) } else { None },
            sleepers: AtomicU32::new(0),
            armed: AtomicBool::new(false),
            armed_sources: SpinLock::new(Vec::new()),
            signaled: AtomicBool::new(false),
            spin: Duration::from_micros(spin as u64),
        })
    }

    /// Adds an endpoint to drive (and its wake-up fd to the wait set). One
    /// that joins while a `trywait` holds the sources armed is armed too.
    pub fn attach(&self, p: Arc<dyn Progress>) -> Result<()> {
        if let (Some(w), Some(fd)) = (&self.waits, p.wait_fd()) {
            w.add(fd)?;
        }
        let mut s = self.sources.lock();
        if !s.iter().any(|x| Arc::ptr_eq(x, &p)) {
            if self.armed.load(Ordering::Acquire) {
                let _ = p.arm();
                self.armed_sources.lock().push(p.clone());
            }
            s.push(p);
        }
        Ok(())
    }

    /// Removes an endpoint.
    pub fn detach(&self, p: &Arc<dyn Progress>) {
        let mut s = self.sources.lock();
        if let Some(i) = s.iter().position(|x| Arc::ptr_eq(x, p)) {
            let gone = s.swap_remove(i);
            let mut a = self.armed_sources.lock();
            if let Some(j) = a.iter().position(|x| Arc::ptr_eq(x, p)) {
                a.swap_remove(j).disarm();
            }
            drop(a);
            if let (Some(w), Some(fd)) = (&self.waits, gone.wait_fd()) {
                if !s.iter().any(|x| x.wait_fd() == Some(fd)) {
                    w.remove(fd);
                }
            }
        }
    }

    /// Runs one round of progress over every bound endpoint.
    #[inline]
    pub fn progress(&self) {
        let s = self.sources.lock();
        if self.armed.load(Ordering::Relaxed) {
            self.release_trywait();
        }
        for p in s.iter() {
            p.progress();
        }
        drop(s);
        super::trigger::run_ready();
    }

    /// Disarms what `trywait` armed, once a sleeper on the wait fd would
    /// have been woken (the set is readable) or there is no wait set: a
    /// thread that polls while another sleeps on the fd must not disarm
    /// the sources under the sleeper.
    fn release_trywait(&self) {
        if self.waits.as_ref().is_some_and(|w| !w.readable_now()) {
            return;
        }
        if self.armed.swap(false, Ordering::AcqRel) {
            let armed = std::mem::take(&mut *self.armed_sources.lock());
            for p in armed {
                p.disarm();
            }
        }
    }

    /// `fi_trywait`: arms every source so a peer's next event makes the wait
    /// fd readable, and returns false (disarmed again) if events are already
    /// pending. A progress call disarms once the wait fd is readable.
    pub fn trywait(&self) -> bool {
        self.reset_signal();
        let s = self.sources.lock();
        if self.armed.swap(true, Ordering::AcqRel) {
            return true;
        }
        let mut safe = true;
        for p in s.iter() {
            safe &= p.arm();
        }
        if safe {
            *self.armed_sources.lock() = s.clone();
        } else {
            self.armed.store(false, Ordering::Release);
            for p in s.iter() {
                p.disarm();
            }
        }
        safe
    }

    /// Wakes a blocked waiter if there is one (cheap when nobody sleeps).
    #[inline]
    pub fn wake(&self) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            if let Some(w) = &self.waits {
                w.signal();
            }
        }
    }

    /// A waiter outside the core (an async runtime watching the wait fd)
    /// is about to sleep: until [`remove_sleeper`](Self::remove_sleeper),
    /// new entries signal the fd, as they do for a blocked `sread`, without
    /// the fd being exposed (which costs a system call per change). Call
    /// it before `trywait`, so an entry between the two is not missed.
    pub fn add_sleeper(&self) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
    }

    /// The outside waiter woke: stops signalling for it and clears the
    /// signals it may have received.
    pub fn remove_sleeper(&self) {
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        if let Some(w) = &self.waits {
            w.drain();
        }
    }

    /// Wakes a blocked waiter, which returns `FI_EAGAIN` (`fi_cq_signal`).
    pub fn signal(&self) {
        self.signaled.store(true, Ordering::Release);
        if let Some(w) = &self.waits {
            w.signal();
        }
    }

    /// A waiter about to sleep (`fi_trywait`) resets a pending signal, as
    /// libfabric's trywait resets its wait object, unless a reader sleeps
    /// now: the signal is that reader's.
    pub fn reset_signal(&self) {
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            self.take_signal();
        }
    }

    /// Takes a pending [`signal`](Self::signal): true when there was one.
    /// Its mark on the wait fd goes with it, so an application watching
    /// the fd does not find it readable for ever (nor does a wait set
    /// holding it wake again and again).
    pub fn take_signal(&self) -> bool {
        let was = self.signaled.swap(false, Ordering::AcqRel);
        if was {
            if let Some(w) = &self.waits {
                w.drain();
            }
        }
        was
    }

    /// The wait object, if waitable.
    pub fn waits(&self) -> Option<&WaitFd> {
        self.waits.as_ref()
    }

    /// The wait fd to hand out (`FI_GETWAIT`, `AsFd`); from now on it is
    /// readable while the owner reports something to read through
    /// [`set_ready`](Self::set_ready). None without a wait object.
    pub fn expose(&self) -> Option<RawFd> {
        match self.waits.as_ref().map(WaitFd::expose) {
            Some(Ok(fd)) => Some(fd),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "wait fd: no readiness eventfd");
                self.waits.as_ref().map(|w| w.as_raw_fd())
            }
            None => None,
        }
    }

    /// Keeps an exposed wait fd readable while `has_events()` holds (see
    /// [`WaitFd::set_ready`]); one atomic load when nothing is exposed.
    #[inline]
    pub fn set_ready(&self, has_events: impl FnOnce() -> bool) {
        if let Some(w) = &self.waits {
            w.set_ready(has_events);
        }
    }

    /// Arms every bound endpoint for a waiter that sleeps on a fd holding
    /// this one (a wait set); true if it is safe to sleep. The returned
    /// list goes back to [`disarm_sources`](Self::disarm_sources).
    pub fn arm_sources(&self) -> (bool, Vec<Arc<dyn Progress>>) {
        let sources: Vec<Arc<dyn Progress>> = self.sources.lock().clone();
        let mut safe = true;
        for s in &sources {
            safe &= s.arm();
        }
        (safe, sources)
    }

    /// Disarms what [`arm_sources`](Self::arm_sources) armed.
    pub fn disarm_sources(&self, sources: Vec<Arc<dyn Progress>>) {
        for s in sources {
            s.disarm();
        }
    }

    /// Blocks until `ready()` or the timeout. Progress runs throughout.
    /// `None` waits forever. Returns `FI_EAGAIN` on timeout.
    pub fn block(&self, timeout: Option<Duration>, mut ready: impl FnMut() -> bool) -> Result<()> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        loop {
            self.progress();
            if ready() {
                return Ok(());
            }
            if self.take_signal() {
                return Err(Error::new(errno::FI_EAGAIN, "wait interrupted by a signal"));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::new(errno::FI_EAGAIN, "timed out waiting"));
            }
            if now.duration_since(start) < self.spin {
                std::hint::spin_loop();
                continue;
            }
            let Some(w) = &self.waits else {
                std::thread::yield_now();
                continue;
            };
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let sources: Vec<Arc<dyn Progress>> = self.sources.lock().clone();
            let mut safe = true;
            for s in &sources {
                safe &= s.arm();
            }
            self.progress();
            if safe && !ready() {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                // Sleep in slices so a source that cannot signal (a peer that
                // died before ringing) never turns into a hang.
                let slice = left.map_or(Duration::from_millis(100), |l| {
                    l.min(Duration::from_millis(100))
                });
                let r = w.wait(Some(slice));
                w.drain();
                for s in &sources {
                    s.disarm();
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                r?;
            } else {
                for s in &sources {
                    s.disarm();
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Number of bound endpoints.
    pub fn attached(&self) -> usize {
        self.sources.lock().len()
    }
}
