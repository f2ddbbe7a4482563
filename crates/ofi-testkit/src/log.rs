//! The log lines a test provokes: [`LogCapture::start`] makes a subscriber
//! that writes into memory the default of the calling thread (the thread
//! that drives progress in these tests) until the capture drops, and
//! [`LogCapture::text`] reads what it wrote.

use std::sync::{Arc, Mutex};

/// An in-memory log of the current thread's events.
pub struct LogCapture {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    /// Captures the events of this thread, at every level, from now until
    /// the capture drops.
    pub fn start() -> LogCapture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || Sink(w.clone()))
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        LogCapture {
            buf,
            _guard: tracing::subscriber::set_default(sub),
        }
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        let b = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&b).into_owned()
    }
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
