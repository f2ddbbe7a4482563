//! Conformance suite helpers (filled in by the suite).
