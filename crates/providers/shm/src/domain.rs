//! The shm domain: opens endpoints and provides address handling.

use crate::addr::ShmAddrOps;
use crate::ep::ShmEndpoint;
use crate::Config;
use ofi_core::consts::ep_type;
use ofi_core::error::{Error, Result};
use ofi_core::info::Info;
use ofi_core::provider::{AddrOps, DomainOps, EndpointOps};
use ofi_core::util::atomic::{self, AtomicKind};
use std::sync::Arc;

/// An open shm domain.
#[derive(Debug)]
pub struct ShmDomain {
    cfg: Config,
}

impl ShmDomain {
    pub(crate) fn new(cfg: Config) -> Self {
        ShmDomain { cfg }
    }
}

impl DomainOps for ShmDomain {
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        if info.ep_attr.ep_type != ep_type::FI_EP_RDM {
            return Err(Error::nosys(format!(
                "shm supports FI_EP_RDM only (asked for type {})",
                info.ep_attr.ep_type
            )));
        }
        Ok(Arc::new(ShmEndpoint::open(self.cfg.clone(), info)?))
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        Arc::new(ShmAddrOps)
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        atomic::query(kind, op, datatype, crate::ep::ATOMIC_MAX_BYTES)
    }
}
