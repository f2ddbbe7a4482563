//! An application that installs its own global tracing subscriber after
//! calling the library: the library must not have installed one (a second
//! `set_global_default` fails, and `tracing_subscriber`'s `init` panics).

mod subscriber;

#[test]
fn application_sets_its_subscriber_after_getinfo() {
    std::env::set_var("FI_LOG_LEVEL", "debug");
    subscriber::call_getinfo();
    let r = tracing::subscriber::set_global_default(subscriber::Counting::default());
    assert!(
        r.is_ok(),
        "the library installed a global subscriber during getinfo: {r:?}"
    );
}
