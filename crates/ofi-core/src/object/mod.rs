//! The objects applications open: fabric, domain, endpoint, completion
//! queue, counter, address vector and memory region (the raw layer).
//!
//! Raw data-transfer calls take caller-owned memory and a per-operation
//! context and allocate nothing; they are `unsafe` because the memory must
//! stay valid until the operation completes. Closing an object that others
//! still depend on is refused with `FI_EBUSY` and the object is handed back.
//!
//! One file per object; the endpoint's data calls are split by family
//! (`msg`, `rma`, `atomic`, `triggered`, `coll`). The operation descriptors
//! providers receive live beside the provider traits ([`crate::provider`])
//! and are re-exported here.

use crate::consts::wait_obj;
use crate::error::{Error, Result};
use crate::util::driver::Driver;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod atomic;
mod av;
mod av_set;
mod cntr;
mod coll;
mod cq;
mod domain;
mod endpoint;
mod eq;
mod fabric;
mod mc;
mod mr;
mod msg;
mod pep;
mod rma;
mod sets;
mod triggered;

pub use av::AddressVector;
pub use av_set::{AvSet, AvSetAttr, SET_ADDR_MASK, SET_ADDR_TAG};
pub use cntr::Counter;
pub use coll::{CollAttr, CollOp};
pub use cq::CompletionQueue;
pub use domain::Domain;
pub use endpoint::Endpoint;
pub use endpoint::SharedTxContext;
pub use eq::EventQueue;
pub use fabric::Fabric;
pub use mc::Multicast;
pub use mr::MemoryRegion;
pub use pep::PassiveEndpoint;
pub use sets::{PollSet, WaitSet};
pub use triggered::Deferred;
// The operation descriptors and bindings, at their historical paths
// (`ofi_core::object::SendOp` …).
pub use crate::provider::{tx_completion, AtomicOp, EpBindings, RecvOp, RmaDir, RmaOp, SendOp};
// Providers and white-box tests glob-import this module: the provider-side
// accessors (`core()`, `ops()`, `mr_map()`) stay in scope for them.
pub use crate::spi::{HasCore, HasMrMap, HasOps};

/// Counts an object's open dependents; decremented when a dependent drops.
#[derive(Debug)]
struct DepGuard(Arc<AtomicUsize>);

impl DepGuard {
    fn new(c: &Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, Ordering::AcqRel);
        DepGuard(c.clone())
    }
}

impl Drop for DepGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The result of `close`: on refusal (`FI_EBUSY`) the object comes back with the error.
pub type CloseResult<T> = std::result::Result<(), Box<(T, Error)>>;

fn refuse<T>(obj: T, what: &str, n: usize) -> CloseResult<T> {
    Err(Box::new((
        obj,
        Error::busy(format!("{what} still has {n} open dependent object(s)")),
    )))
}

/// FI_WAIT_SET needs the set: refused where none is given.
fn no_set(wait: u32, what: &str, instead: &str) -> Result<()> {
    if wait == wait_obj::FI_WAIT_SET {
        return Err(Error::inval(format!(
            "{what}: wait_obj FI_WAIT_SET needs a wait set ({instead})"
        )));
    }
    Ok(())
}

/// The exposed wait fd of a driver, borrowed for as long as its object.
fn borrowed<'a>(driver: &'a Driver, what: &str) -> Result<BorrowedFd<'a>> {
    driver.waits().map(|w| w.as_fd()).ok_or_else(|| {
        Error::nodata(format!(
            "{what}: opened with FI_WAIT_NONE, it has no wait fd"
        ))
    })
}
