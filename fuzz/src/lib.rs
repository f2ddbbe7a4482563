//! Bodies of ofi's fuzz targets, one function per decoder. The files in
//! `fuzz_targets/` are one-line libFuzzer wrappers around these, so the same
//! code also runs without libFuzzer (`tests/replay.rs` replays the seeds and
//! any saved crash artifacts through them).
//!
//! Each target must never panic, hang or touch memory outside what it was
//! given, whatever the bytes. Where the decoders make promises beyond "no
//! panic" (a parsed header re-emits to the same bytes, the connection core
//! only names memory the harness lent it), the targets assert them.

mod capi;
mod hybrid;
mod shm;
mod storage;
mod tcp;
mod udp;
pub use capi::{capi_args, panicked};
pub use hybrid::hybrid_wire;
pub use shm::{shm_entry, shm_handler};
pub use storage::{storage_capsule, storage_cores, storage_nbd};
pub use tcp::{
    auth_stream, conn_stream, tcp_conn_stream, tcp_header, AuthReached, Reached, AUTH_ADDR,
    AUTH_KEY,
};
pub use udp::{sessions_run, udp_packet, udp_sessions, SessionsReached};
