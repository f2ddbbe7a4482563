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

static READY: Mutex<Vec<Fire>> = Mutex::new(Vec::new());
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
        let fired: Vec<Fire> = w.drain(..n).map(|(_, f)| f).collect();
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
    let batch: Vec<Fire> = {
        let mut r = READY.lock().unwrap_or_else(|e| e.into_inner());
        ANY_READY.store(false, Ordering::Release);
        std::mem::take(&mut *r)
    };
    // Threshold order (fi_trigger(3)): once one operation must wait
    // (FI_EAGAIN), it and every one after it wait, in order.
    let mut again = Vec::new();
    let mut ops = batch.into_iter();
    for mut f in ops.by_ref() {
        if let Err(e) = f() {
            if e.is_again() {
                again.push(f);
                break;
            }
        }
    }
    again.extend(ops);
    if !again.is_empty() {
        let mut r = READY.lock().unwrap_or_else(|e| e.into_inner());
        // Retried ones go first: they were reached earlier.
        again.append(&mut r);
        *r = again;
        ANY_READY.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::Arc;

    #[test]
    fn an_operation_that_must_wait_keeps_the_later_ones_behind_it() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let d = Deferrals::default();
        let mut refusals = 2;
        for t in 1..=3u64 {
            let log = log.clone();
            let fire: Fire = if t == 2 {
                Box::new(move || {
                    if refusals > 0 {
                        refusals -= 1;
                        return Err(Error::again());
                    }
                    log.lock().unwrap().push(t);
                    Ok(())
                })
            } else {
                Box::new(move || {
                    log.lock().unwrap().push(t);
                    Ok(())
                })
            };
            d.add(t, fire);
        }
        d.reached(3);
        run_ready();
        assert_eq!(*log.lock().unwrap(), vec![1], "3 waits behind 2");
        run_ready();
        assert_eq!(*log.lock().unwrap(), vec![1]);
        run_ready();
        assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
        run_ready();
        assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
    }
}
