//! The provider, fabric and domain objects of a provider over IP sockets,
//! written once: the provider reads its tunables and makes its offers, the
//! fabric opens domains (each with the part its endpoints share, and that
//! part's progress thread when asked for), the domain opens endpoints with
//! their auth key. A provider says what differs in an [`Inet`].

use crate::addr::SockAddrOps;
use ofi_core::config::Tunable;
use ofi_core::consts::progress;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::{FabricAttr, Info};
use ofi_core::provider::{
    AddrOps, DomainOps, EndpointOps, FabricOps, GetinfoRequest, PassiveEndpointOps, Provider,
};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::auth::AuthKey;
use std::marker::PhantomData;
use std::sync::Arc;

/// What makes a provider over IP sockets: its name, settings, offers, the
/// shared part of its domains, and its endpoints.
pub trait Inet: Sized + Send + Sync + 'static {
    /// The provider's name.
    const NAME: &'static str;
    /// The provider's version.
    const VERSION: u32;
    /// Settings read from the provider's tunables.
    type Config: Copy + Send + Sync + 'static;
    /// What the endpoints of one domain share (their epoll set, progress).
    type Shared: Send + Sync + 'static;

    /// Reads the tunables; a malformed value is an error naming the
    /// variable.
    fn config() -> Result<Self::Config>;
    /// The default transmit and receive context sizes of `cfg`, which the
    /// offers advertise.
    fn context_sizes(cfg: &Self::Config) -> (usize, usize);
    /// The provider's tunables.
    fn tunables() -> Vec<Tunable>;
    /// The offers for a request, best first.
    fn offers(req: &GetinfoRequest<'_>) -> Result<Vec<Info>>;
    /// The shared part of a new domain.
    fn open_shared(cfg: &Self::Config) -> Result<Arc<Self::Shared>>;
    /// FI_PROGRESS_AUTO: starts the thread that drives the domain.
    fn start_auto_progress(shared: &Arc<Self::Shared>) -> Result<()>;
    /// Opens an endpoint of `info` in domain `d` (its auth key:
    /// [`Domain::key`]).
    fn endpoint(d: &Domain<Self>, info: &Info) -> Result<Arc<dyn EndpointOps>>;
    /// Opens a passive endpoint; providers without connection management
    /// keep the default (`FI_ENOSYS`).
    fn passive_ep(cfg: &Self::Config, info: &Info) -> Result<Arc<dyn PassiveEndpointOps>> {
        let _ = (cfg, info);
        Err(Error::nosys("this provider has no passive endpoints"))
    }
}

/// The key an endpoint opened with `info` uses in a domain whose key is
/// `domain`: its own `ep_attr.auth_key` when set and not empty, else the
/// domain's (libfabric's rule); `None`: no key.
pub fn endpoint_key(info: &Info, domain: &Option<AuthKey>) -> Result<Option<AuthKey>> {
    match info.ep_attr.auth_key.as_deref() {
        Some(k) if !k.is_empty() => AuthKey::new(k),
        _ => Ok(domain.clone()),
    }
}

/// Provider `P`, as the core's registry holds it.
#[derive(Debug)]
pub struct InetProvider<P>(PhantomData<P>);

impl<P> Default for InetProvider<P> {
    fn default() -> Self {
        InetProvider(PhantomData)
    }
}

impl<P: Inet> Provider for InetProvider<P> {
    fn name(&self) -> &str {
        P::NAME
    }
    fn version(&self) -> u32 {
        P::VERSION
    }
    fn getinfo(&self, req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        let (tx_size, rx_size) = P::context_sizes(&P::config()?);
        let mut v = P::offers(req)?;
        for o in v.iter_mut() {
            o.tx_attr.size = tx_size;
            o.rx_attr.size = rx_size;
        }
        Ok(v)
    }
    fn fabric(&self, _attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(Fabric::<P> { cfg: P::config()? }))
    }
    fn tunables(&self) -> Vec<Tunable> {
        P::tunables()
    }
}

/// Registers provider `P` with the core, at its place in the built-in
/// order (`ofi_core::registry::BUILTIN_ORDER`; idempotent).
pub fn register<P: Inet>() -> Result<()> {
    ofi_core::registry::register_builtin(Arc::new(InetProvider::<P>::default()))
}

/// A fabric of provider `P`: its settings, read when it opened.
struct Fabric<P: Inet> {
    cfg: P::Config,
}

impl<P: Inet> FabricOps for Fabric<P> {
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        if info.provider() != P::NAME {
            return Err(Error::new(
                errno::FI_EDOMAIN,
                format!(
                    "info is for provider '{}', not {}",
                    info.provider(),
                    P::NAME
                ),
            ));
        }
        let shared = P::open_shared(&self.cfg)?;
        if info.domain_attr.data_progress == progress::FI_PROGRESS_AUTO {
            P::start_auto_progress(&shared)?;
        }
        Ok(Arc::new(Domain::<P> {
            cfg: self.cfg,
            shared,
            key: AuthKey::new(info.domain_attr.auth_key.as_deref().unwrap_or(&[]))?,
        }))
    }
    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEndpointOps>> {
        P::passive_ep(&self.cfg, info)
    }
}

/// A domain of provider `P`.
pub struct Domain<P: Inet> {
    /// The fabric's settings.
    pub cfg: P::Config,
    /// What its endpoints share.
    pub shared: Arc<P::Shared>,
    /// The domain's auth key: its endpoints' default.
    key: Option<AuthKey>,
}

impl<P: Inet> Domain<P> {
    /// The auth key of an endpoint opened with `info` here
    /// ([`endpoint_key`]).
    pub fn key(&self, info: &Info) -> Result<Option<AuthKey>> {
        endpoint_key(info, &self.key)
    }
}

impl<P: Inet> DomainOps for Domain<P> {
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        P::endpoint(self, info)
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        Arc::new(SockAddrOps)
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        crate::tcp_core::one_sided::query_atomic(kind, op, datatype)
    }
}
