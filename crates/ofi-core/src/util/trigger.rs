//! Triggered operations: operations deferred until a counter reaches a
//! threshold (`man fi_trigger`), for every provider at once.
//!
//! A counter keeps its deferred operations sorted by threshold. When its
//! value moves (a provider's completion, `fi_cntr_add`, `fi_cntr_set`) the
//! operations whose threshold is reached move to a process-wide ready list.
//! That list is run outside every provider lock: at the end of each
//! progress call and right after an application's counter update. Running
//! an operation posts it to its endpoint; one refused with `FI_EAGAIN`
//! stays ready, and the ones after it wait behind it (threshold order), to
//! be retried by the next progress call.

use crate::error::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A deferred operation: posts itself when run; `Err(FI_EAGAIN)` means
/// "try again later", any other error has already been reported by the
/// closure (as an error completion).
pub type Fire = Box<dyn FnMut() -> Result<()> + Send>;

/// One counter's deferred operations.
#[derive(Default)]
pub struct Deferrals {
    waiting: Mutex<Vec<(u64, Fire)>>,
    any: AtomicBool,
}

impl std::fmt::Debug for Deferrals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferrals")
            .field("any", &self.any.load(Ordering::Relaxed))
            .finish()
    }
}

/// Ready operations, each with its counter's key (the address of its
/// [`Deferrals`]): threshold order holds per counter.
static READY: Mutex<Vec<(usize, Fire)>> = Mutex::new(Vec::new());
static ANY_READY: AtomicBool = AtomicBool::new(false);

impl Deferrals {
    /// Queues `fire` until the counter value reaches `threshold`.
    pub fn add(&self, threshold: u64, fire: Fire) {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let at = w.partition_point(|(t, _)| *t <= threshold);
        w.insert(at, (threshold, fire));
        self.any.store(true, Ordering::Release);
    }

    /// The counter now reads `value`: moves every reached operation to the
    /// ready list (in threshold order). Cheap when nothing is deferred.
    #[inline]
    pub fn reached(&self, value: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let n = w.partition_point(|(t, _)| *t <= value);
        if n == 0 {
            return;
        }
        let key = self as *const Deferrals as usize;
        let fired: Vec<(usize, Fire)> = w.drain(..n).map(|(_, f)| (key, f)).collect();
        if w.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        drop(w);
        let mut r = READY.lock().unwrap_or_else(|e| e.into_inner());
        r.extend(fired);
        ANY_READY.store(true, Ordering::Release);
    }

    /// Operations still waiting.
    pub fn len(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs every ready operation. Called where no provider lock is held.
#[inline]
pub fn run_ready() {
    if ANY_READY.load(Ordering::Acquire) {
        run_ready_slow();
    }
}

#[cold]
fn run_ready_slow() {
    let batch: Vec<(usize, Fire)> = {
        let mut r = READY.lock().unwrap_or_else(|e| e.into_inner());
        ANY_READY.store(false, Ordering::Release);
        std::mem::take(&mut *r)
    };
    let again = run_batch(batch);
    if !again.is_empty() {
        let mut r = READY.lock().unwrap_or_else(|e| e.into_inner());
        // Retried ones go first: they were reached earlier.
        let mut again = again;
        again.append(&mut r);
        *r = again;
        ANY_READY.store(true, Ordering::Release);
    }
}

/// Runs a batch of ready operations in order and returns those to retry,
/// in order. Threshold order (fi_trigger(3)) holds per counter: once one
/// of a counter's operations must wait (FI_EAGAIN), the ones after it of
/// the same counter wait behind it; other counters' operations go on (one
/// of them may be what lets the waiting one through).
fn run_batch(batch: Vec<(usize, Fire)>) -> Vec<(usize, Fire)> {
    let mut again: Vec<(usize, Fire)> = Vec::new();
    for (key, mut f) in batch {
        if again.iter().any(|(k, _)| *k == key) {
            again.push((key, f));
            continue;
        }
        if let Err(e) = f() {
            if e.is_again() {
                again.push((key, f));
            }
        }
    }
    again
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::Arc;

    /// An operation of counter `key` that logs `t` when it runs, refused
    /// (FI_EAGAIN) its first `refusals` times.
    fn op(key: usize, t: u64, refusals: u32, log: &Arc<Mutex<Vec<u64>>>) -> (usize, Fire) {
        let log = log.clone();
        let mut left = refusals;
        (
            key,
            Box::new(move || {
                if left > 0 {
                    left -= 1;
                    return Err(Error::again());
                }
                log.lock().unwrap().push(t);
                Ok(())
            }),
        )
    }

    #[test]
    fn an_operation_that_must_wait_keeps_its_counters_later_ones_behind_it() {
        let log = Arc::new(Mutex::new(Vec::new()));
        // Counter 1: thresholds 1, 2 (refused twice), 3; counter 2: 10.
        let batch = vec![
            op(1, 1, 0, &log),
            op(1, 2, 2, &log),
            op(1, 3, 0, &log),
            op(2, 10, 0, &log),
        ];
        let again = run_batch(batch);
        assert_eq!(
            *log.lock().unwrap(),
            vec![1, 10],
            "3 waits behind 2; the other counter goes on"
        );
        assert_eq!(
            again.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            vec![1, 1]
        );
        let again = run_batch(again);
        assert_eq!(*log.lock().unwrap(), vec![1, 10]);
        let again = run_batch(again);
        assert!(again.is_empty());
        assert_eq!(*log.lock().unwrap(), vec![1, 10, 2, 3]);
    }
}
