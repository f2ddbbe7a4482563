//! The fabric (`fi_fabric`): the root of one provider's objects, which
//! opens its domains, event queues and passive endpoints.

use super::{no_set, refuse, CloseResult, DepGuard, Domain, EventQueue, PassiveEndpoint};
use crate::consts::ep_type;
use crate::error::{Error, Result};
use crate::info::{FabricAttr, Info};
use crate::provider::FabricOps;
use crate::util::eq::{EqAttr, EqCore};
use crate::util::mr::MrMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A fabric: the root of one provider's objects.
pub struct Fabric {
    ops: Arc<dyn FabricOps>,
    prov: String,
    pub(super) deps: Arc<AtomicUsize>,
    _open: DepGuard,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("provider", &self.prov)
            .finish()
    }
}

impl Fabric {
    /// Opens the fabric of an offer (`fi_fabric`).
    pub fn open(attr: &FabricAttr) -> Result<Fabric> {
        let name = attr
            .prov_name
            .as_deref()
            .ok_or_else(|| Error::inval("fabric_attr.prov_name is not set"))?;
        let name = name.split(';').next().unwrap_or(name);
        let (prov, open) = crate::registry::lookup(name)
            .ok_or_else(|| Error::nodata(format!("no provider named '{name}' is registered")))?;
        let ops = prov.fabric(attr)?;
        Ok(Fabric {
            ops,
            prov: name.to_string(),
            deps: Arc::new(AtomicUsize::new(0)),
            _open: DepGuard::new(&open),
        })
    }
    /// The provider's name.
    pub fn provider(&self) -> &str {
        &self.prov
    }
    /// Opens a domain (`fi_domain`). The provider (and [`Domain::info`])
    /// see the memory-registration modes in force (FI_MR_BASIC spelled out).
    pub fn domain(&self, info: &Info) -> Result<Domain> {
        let info = info.in_force();
        let ops = self.ops.domain(&info)?;
        Ok(Domain {
            ops,
            info,
            mr_map: MrMap::new(),
            deps: Arc::new(AtomicUsize::new(0)),
            default_eq: Arc::new(Mutex::new(None)),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens an event queue (`fi_eq_open`); one with FI_WAIT_SET opens
    /// through [`eq_in`](Self::eq_in).
    pub fn eq(&self, attr: &EqAttr) -> Result<EventQueue> {
        no_set(attr.wait_obj, "eq", "Fabric::eq_in")?;
        self.eq_any(attr)
    }
    pub(super) fn eq_any(&self, attr: &EqAttr) -> Result<EventQueue> {
        Ok(EventQueue {
            core: EqCore::new(attr)?,
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Opens a passive endpoint (`fi_passive_ep`) for a connection-oriented
    /// offer; `context` is reported as `fid` in its events.
    pub fn passive_ep(&self, info: &Info, context: usize) -> Result<PassiveEndpoint> {
        if info.ep_attr.ep_type != ep_type::FI_EP_MSG {
            return Err(Error::inval("passive endpoints are for FI_EP_MSG offers"));
        }
        let ops = self.ops.passive_ep(&info.in_force())?;
        Ok(PassiveEndpoint {
            ops,
            context,
            listening: std::sync::atomic::AtomicBool::new(false),
            released: std::sync::atomic::AtomicBool::new(false),
            eq: Mutex::new(None),
            _parent: DepGuard::new(&self.deps),
        })
    }
    /// Closes the fabric; refused while domains are open.
    pub fn close(self) -> CloseResult<Self> {
        match self.deps.load(Ordering::Acquire) {
            0 => Ok(()),
            n => refuse(self, "fabric", n),
        }
    }
}
