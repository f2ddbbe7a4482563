//! An application that installs its own global tracing subscriber before
//! calling the library keeps it, and receives the library's events.

mod subscriber;

use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Shares one counting subscriber between the dispatcher and the test.
struct Shared(Arc<subscriber::Counting>);

impl tracing::Subscriber for Shared {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        self.0.enabled(m)
    }
    fn new_span(&self, a: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.0.new_span(a)
    }
    fn record(&self, i: &tracing::span::Id, r: &tracing::span::Record<'_>) {
        self.0.record(i, r)
    }
    fn record_follows_from(&self, a: &tracing::span::Id, b: &tracing::span::Id) {
        self.0.record_follows_from(a, b)
    }
    fn event(&self, e: &tracing::Event<'_>) {
        self.0.event(e)
    }
    fn enter(&self, i: &tracing::span::Id) {
        self.0.enter(i)
    }
    fn exit(&self, i: &tracing::span::Id) {
        self.0.exit(i)
    }
}

#[test]
fn application_subscriber_set_before_getinfo_receives_the_events() {
    let counting = Arc::new(subscriber::Counting::default());
    tracing::subscriber::set_global_default(Shared(counting.clone()))
        .expect("the first global subscriber of this process");
    subscriber::call_getinfo();
    assert!(
        counting.events.load(Ordering::Relaxed) > 0,
        "getinfo's events did not reach the application's subscriber"
    );
    // Still the application's: a second install is refused as usual.
    assert!(tracing::subscriber::set_global_default(subscriber::Counting::default()).is_err());
}
