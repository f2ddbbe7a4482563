//! Poll sets (`fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll`):
//! one call that progresses many CQs and counters and names those with
//! news: a CQ while it holds entries, a counter when its counts changed
//! since the previous `fi_poll` looked at it.

use super::cntr::CntrCore;
use super::cq::CqCore;
use super::lock::SpinLock;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A member of a poll set.
#[derive(Clone, Debug)]
pub enum Polled {
    /// A completion queue: news while entries are queued.
    Cq(Arc<CqCore>),
    /// A counter: news when its counts differ from the last look.
    Cntr(Arc<CntrCore>),
}

impl Polled {
    fn same(&self, other: &Polled) -> bool {
        match (self, other) {
            (Polled::Cq(a), Polled::Cq(b)) => Arc::ptr_eq(a, b),
            (Polled::Cntr(a), Polled::Cntr(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The member's count of users (a member cannot close).
    fn bound(&self) -> &std::sync::atomic::AtomicUsize {
        match self {
            Polled::Cq(c) => &c.bound,
            Polled::Cntr(c) => &c.bound,
        }
    }
}

#[derive(Debug)]
struct Entry {
    what: Polled,
    context: usize,
    /// A counter's (success, error) counts at the last look.
    seen: (u64, u64),
}

/// A poll set.
#[derive(Debug, Default)]
pub struct PollSetCore {
    members: SpinLock<Vec<Entry>>,
}

impl Drop for PollSetCore {
    fn drop(&mut self) {
        for e in self.members.get_mut().drain(..) {
            e.what.bound().fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl PollSetCore {
    /// An empty poll set.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `fi_poll_add`: watches a CQ or counter, reported with `context`.
    /// Adding a member again keeps one entry (its context is updated). A
    /// member counts as a user of the object: the object cannot close
    /// while it is in the set.
    pub fn add(&self, what: Polled, context: usize) {
        let mut m = self.members.lock();
        if let Some(e) = m.iter_mut().find(|e| e.what.same(&what)) {
            e.context = context;
            return;
        }
        let seen = match &what {
            Polled::Cntr(c) => c.counts(),
            Polled::Cq(_) => (0, 0),
        };
        what.bound().fetch_add(1, Ordering::AcqRel);
        m.push(Entry {
            what,
            context,
            seen,
        });
    }

    /// `fi_poll_del`: stops watching; `FI_EINVAL` if it is not a member.
    pub fn del(&self, what: &Polled) -> Result<()> {
        let mut m = self.members.lock();
        let Some(i) = m.iter().position(|e| e.what.same(what)) else {
            return Err(Error::inval("poll del: not a member of this poll set"));
        };
        let e = m.remove(i);
        e.what.bound().fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.members.lock().len()
    }

    /// True without members.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `fi_poll`: progresses every member, then writes the contexts of
    /// those with news to `out` (at most `out.len()`; the others keep
    /// their news for the next call). Returns how many were written.
    pub fn poll(&self, out: &mut [usize]) -> usize {
        self.poll_with(out, |c| c)
    }

    /// As [`poll`](Self::poll), each context passed through `map` while
    /// the members are locked (no member leaves meanwhile: the C ABI reads
    /// the context from the member's fid at this moment).
    pub fn poll_with(&self, out: &mut [usize], map: impl Fn(usize) -> usize) -> usize {
        let members: Vec<Polled> = self.members.lock().iter().map(|e| e.what.clone()).collect();
        for w in &members {
            match w {
                Polled::Cq(c) => c.driver().progress(),
                Polled::Cntr(c) => c.driver().progress(),
            }
        }
        let mut n = 0;
        let mut m = self.members.lock();
        for e in m.iter_mut() {
            if n == out.len() {
                break;
            }
            let news = match &e.what {
                Polled::Cq(c) => c.has_events(),
                Polled::Cntr(c) => {
                    let now = c.counts();
                    let changed = now != e.seen;
                    e.seen = now;
                    changed
                }
            };
            if news {
                out[n] = map(e.context);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::wait_obj;
    use crate::util::cntr::CntrAttr;
    use crate::util::cq::{completion, CqAttr};

    #[test]
    fn poll_names_queues_with_entries_and_changed_counters() {
        let cq = CqCore::new(&CqAttr {
            wait_obj: wait_obj::FI_WAIT_NONE,
            ..Default::default()
        })
        .expect("cq");
        let c = CntrCore::new(&CntrAttr {
            events: 0,
            wait_obj: wait_obj::FI_WAIT_NONE,
        })
        .expect("cntr");
        let ps = PollSetCore::new();
        ps.add(Polled::Cq(cq.clone()), 1);
        ps.add(Polled::Cq(cq.clone()), 1);
        ps.add(Polled::Cntr(c.clone()), 2);
        assert_eq!(ps.len(), 2);
        assert_eq!(cq.bound.load(Ordering::Acquire), 1);
        let mut out = [0usize; 4];
        assert_eq!(ps.poll(&mut out), 0);
        cq.push(completion(7, 0, 0, 0, 0, 0), 0);
        c.add(1);
        assert_eq!(ps.poll(&mut out), 2);
        assert_eq!(&out[..2], &[1, 2]);
        // The queue still holds its entry; the counter did not change again.
        assert_eq!(ps.poll(&mut out), 1);
        assert_eq!(out[0], 1);
        // Room for one: the counter's news waits for the next call.
        c.add(1);
        let mut one = [0usize; 1];
        assert_eq!(ps.poll(&mut one), 1);
        assert_eq!(one[0], 1);
        ps.del(&Polled::Cq(cq.clone())).expect("del");
        assert_eq!(cq.bound.load(Ordering::Acquire), 0);
        assert!(ps.del(&Polled::Cq(cq.clone())).is_err());
        assert_eq!(ps.poll(&mut out), 1);
        assert_eq!(out[0], 2);
        drop(ps);
        assert_eq!(c.bound.load(Ordering::Acquire), 0);
    }
}
