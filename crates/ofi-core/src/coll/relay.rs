//! The relay between a provider and an application's completion queue, on
//! an endpoint opened with FI_COLLECTIVE (see the [module](super) docs):
//! the provider writes into a queue of the relay's; reading or waiting on
//! the application's queue drives the relay, which hands the collective
//! layer its own entries ([`CqTap`]) and passes the others on in order.
//! Endpoints opened without FI_COLLECTIVE complete straight into the
//! application's queue and pay nothing.

use super::engine::CollEp;
use super::guard::Guarded;
use crate::consts::{cq_format, wait_obj, FI_ADDR_NOTAVAIL};
use crate::error::Result;
use crate::provider::{EndpointOps, EpBindings, Progress};
use crate::util::cq::{CqAttr, CqCore, Drained};
use crate::util::eq::EqCore;
use crate::util::tap::CqTap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Rounds of passing and collective progress one progress call runs at
/// most (a frame posted may complete at once and bring the next step).
const ROUNDS: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The collective side of an endpoint opened with FI_COLLECTIVE: the
/// provider's endpoint behind the tag guard, the relays set up at enable,
/// and the collective layer once the endpoint joins a group.
pub(crate) struct CollSide {
    /// The provider's endpoint, unguarded: the layer's frames go here.
    pub(crate) raw: Arc<dyn EndpointOps>,
    /// The layer, from the first join.
    pub(crate) layer: Arc<OnceLock<Arc<CollEp>>>,
    /// One relay per application queue the endpoint is bound to.
    relays: Mutex<Vec<Arc<Relay>>>,
    /// The event queue the relays drive too.
    eq: Mutex<Option<Arc<EqCore>>>,
}

impl std::fmt::Debug for CollSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollSide").finish_non_exhaustive()
    }
}

impl CollSide {
    /// The side of a provider's endpoint, and the guarded endpoint the
    /// core calls.
    pub(crate) fn new(raw: Arc<dyn EndpointOps>) -> (Arc<dyn EndpointOps>, CollSide) {
        let guarded: Arc<dyn EndpointOps> = Arc::new(Guarded::new(raw.clone()));
        let side = CollSide {
            raw,
            layer: Arc::new(OnceLock::new()),
            relays: Mutex::new(Vec::new()),
            eq: Mutex::new(None),
        };
        (guarded, side)
    }

    /// At enable: the bindings the provider gets, each completion queue
    /// replaced by its relay's (made here; [`attach`](Self::attach) wires
    /// them once the provider is enabled).
    pub(crate) fn bindings(&self, b: &EpBindings) -> Result<EpBindings> {
        let mut pb = b.clone();
        let mut relays = lock(&self.relays);
        relays.clear();
        for slot in [&mut pb.tx_cq, &mut pb.rx_cq] {
            let Some(app) = slot.clone() else {
                continue;
            };
            let r = match relays.iter().find(|r| Arc::ptr_eq(&r.app, &app)) {
                Some(r) => r.clone(),
                None => {
                    let r = Relay::new(app, self.layer.clone())?;
                    relays.push(r.clone());
                    r
                }
            };
            *slot = Some(r.queue.clone());
        }
        Ok(pb)
    }

    /// After the provider's endpoint is enabled: reading or waiting on the
    /// application's queues, or on the event queue, drives the relays.
    pub(crate) fn attach(&self, eq: Option<&Arc<EqCore>>) -> Result<()> {
        let relays = lock(&self.relays).clone();
        for r in &relays {
            let p: Arc<dyn Progress> = r.clone();
            r.app.attach(p.clone())?;
            if let Some(eq) = eq {
                eq.attach(p)?;
            }
        }
        *lock(&self.eq) = eq.cloned();
        Ok(())
    }

    /// As the endpoint closes: the relays leave the queues, after passing
    /// on what the provider wrote last.
    pub(crate) fn detach(&self) {
        let relays = std::mem::take(&mut *lock(&self.relays));
        let eq = lock(&self.eq).take();
        for r in relays {
            r.pass();
            let p: Arc<dyn Progress> = r.clone();
            r.app.detach(&p);
            if let Some(eq) = &eq {
                eq.detach(&p);
            }
        }
    }
}

/// One application queue's relay.
pub(crate) struct Relay {
    /// What the provider writes into.
    queue: Arc<CqCore>,
    /// The application's queue.
    app: Arc<CqCore>,
    /// The collective layer, once started.
    layer: Arc<OnceLock<Arc<CollEp>>>,
    /// Serializes passing (so entries keep their order) and holds its
    /// scratch.
    scratch: Mutex<Vec<Drained>>,
}

impl Relay {
    fn new(app: Arc<CqCore>, layer: Arc<OnceLock<Arc<CollEp>>>) -> Result<Arc<Relay>> {
        let queue = CqCore::new(&CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_FD,
        })?;
        Ok(Arc::new(Relay {
            queue,
            app,
            layer,
            scratch: Mutex::new(Vec::new()),
        }))
    }

    /// Passes the provider's entries on: the layer's to the layer, the
    /// others to the application's queue, in the order they came.
    fn pass(&self) {
        if !self.queue.has_events() {
            return;
        }
        let mut buf = lock(&self.scratch);
        self.queue.drain(&mut buf);
        let tap = self.layer.get();
        for d in buf.drain(..) {
            match d {
                Drained::Ok(e, src) => {
                    if !tap.is_some_and(|t| t.completed(&e, src)) {
                        self.app.push(e, src);
                    }
                }
                Drained::Err(e) => {
                    if !tap.is_some_and(|t| t.failed(&e)) {
                        self.app.push_err(e, FI_ADDR_NOTAVAIL);
                    }
                }
            }
        }
    }
}

impl Progress for Relay {
    fn progress(&self) {
        for _ in 0..ROUNDS {
            self.pass();
            let Some(l) = self.layer.get() else {
                return;
            };
            l.progress();
            if !self.queue.has_events() {
                return;
            }
        }
    }
    fn arm(&self) -> bool {
        self.queue.driver().add_sleeper();
        !self.queue.has_events() && self.layer.get().is_none_or(|l| l.arm())
    }
    fn disarm(&self) {
        self.queue.driver().remove_sleeper();
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.queue.driver().waits().map(|w| w.as_raw_fd())
    }
}
