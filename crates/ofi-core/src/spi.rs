//! The provider-author side of the objects: reaching the shared cores
//! ([`crate::util`]) behind an application's objects, and a provider's own
//! endpoint behind an [`Endpoint`]. Applications do not need this module;
//! providers, the C ABI and white-box tests import its traits.

use crate::object::{
    AddressVector, CompletionQueue, Counter, Domain, Endpoint, EventQueue, MemoryRegion, PollSet,
    WaitSet,
};
use crate::provider::EndpointOps;
use crate::util::av::AvCore;
use crate::util::cntr::CntrCore;
use crate::util::cq::CqCore;
use crate::util::eq::EqCore;
use crate::util::mr::{MrCore, MrMap};
use crate::util::poll::PollSetCore;
use crate::util::waitset::WaitSetCore;
use std::sync::Arc;

/// An object backed by one of the core's shared implementations.
pub trait HasCore {
    /// The shared implementation (`CqCore`, `CntrCore` …).
    type Core: ?Sized;
    /// The shared core, as providers and the C ABI drive it.
    fn core(&self) -> &Arc<Self::Core>;
}

macro_rules! has_core {
    ($($t:ty => $c:ty,)*) => {
        $(impl HasCore for $t {
            type Core = $c;
            fn core(&self) -> &Arc<$c> {
                self.core_arc()
            }
        })*
    };
}

has_core! {
    CompletionQueue => CqCore,
    Counter => CntrCore,
    AddressVector => AvCore,
    EventQueue => EqCore,
    MemoryRegion => MrCore,
    WaitSet => WaitSetCore,
    PollSet => PollSetCore,
}

/// An endpoint's provider object.
pub trait HasOps {
    /// The provider's endpoint (for the C ABI and white-box tests).
    fn ops(&self) -> &Arc<dyn EndpointOps>;
}

impl HasOps for Endpoint {
    fn ops(&self) -> &Arc<dyn EndpointOps> {
        self.ops_arc()
    }
}

/// A domain's registered regions, as providers' RMA targets look keys up.
pub trait HasMrMap {
    /// The domain's region map.
    fn mr_map(&self) -> &Arc<MrMap>;
}

impl HasMrMap for Domain {
    fn mr_map(&self) -> &Arc<MrMap> {
        self.mr_map_arc()
    }
}
