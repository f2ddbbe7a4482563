//! The shm fabric: one per open, holding the configuration.

use crate::domain::ShmDomain;
use crate::Config;
use ofi_core::error::{Error, Result};
use ofi_core::info::Info;
use ofi_core::provider::{DomainOps, FabricOps};
use std::sync::Arc;

/// An open shm fabric.
#[derive(Debug)]
pub struct ShmFabric {
    cfg: Config,
}

impl ShmFabric {
    pub(crate) fn new(cfg: Config) -> Self {
        ShmFabric { cfg }
    }
}

impl FabricOps for ShmFabric {
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        if info.provider() != crate::NAME {
            return Err(Error::new(
                ofi_core::error::errno::FI_EDOMAIN,
                format!("info is for provider '{}', not shm", info.provider()),
            ));
        }
        Ok(Arc::new(ShmDomain::new(self.cfg.clone())))
    }
}
