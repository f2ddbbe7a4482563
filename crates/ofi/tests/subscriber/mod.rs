//! A minimal application-side tracing subscriber that counts the events it
//! sees, for the tests that check the library installs no subscriber.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Counts events; every span gets a fresh id.
#[derive(Default)]
pub struct Counting {
    next: AtomicU64,
    /// Events seen so far.
    pub events: AtomicUsize,
}

impl Subscriber for Counting {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Asks getinfo for something, so that the library has every chance to log
/// (a refused request logs why at info level).
pub fn call_getinfo() {
    let _ = ofi::getinfo(ofi::consts::FI_VERSION_CURRENT, None, None, 0, None)
        .expect("getinfo without hints");
    let mut h = ofi::Info::hints();
    h.fabric_attr.prov_name = Some("no-such-provider".into());
    let _refused = ofi::getinfo(ofi::consts::FI_VERSION_CURRENT, None, None, 0, Some(&h));
}
