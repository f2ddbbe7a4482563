//! ofi protocol cores: deterministic state machines that take bytes in and
//! give bytes and events out, driven by a thin I/O driver in the provider.
//! No sockets, no threads, no clocks (time, when needed, is an argument),
//! no unsafe: user memory is only ever named by address ([`IoVec`]) and
//! the driver does the reads, writes and copies.
//!
//! [`IoVec`]: ofi_base::iov::IoVec

#![forbid(unsafe_code)]

pub mod coll;
pub mod shm;
pub mod tcp;
pub mod udp;
