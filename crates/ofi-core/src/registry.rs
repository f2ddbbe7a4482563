//! The provider registry and getinfo.
//!
//! Built-in providers register with one call; external providers load at run
//! time from a shared object exporting a versioned entry point (see
//! [`export_provider!`](crate::export_provider)). A provider whose fabrics are
//! still open cannot be deregistered.

use crate::config;
use crate::error::{errno, Error, Result};
use crate::hints;
use crate::info::Info;
use crate::provider::{GetinfoRequest, Provider};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once, RwLock};

/// ABI version of the external provider entry point.
pub const EXTERNAL_ABI_VERSION: u32 = 1;
/// Symbol an external provider exports.
pub const EXTERNAL_ENTRY_SYMBOL: &str = "ofi_provider_entry_v1";
/// Symbol returning the build identity an external provider was built with
/// (a NUL-terminated string), so a mismatch is refused by name before the
/// provider's code runs.
pub const EXTERNAL_ID_SYMBOL: &str = "ofi_provider_build_id_v1";

/// Version of the provider interface: the traits of [`crate::provider`],
/// the operations and bindings they pass ([`crate::object`]'s `SendOp`,
/// `RecvOp`, `RmaOp`, `AtomicOp`, `EpBindings`) and the shared cores
/// providers drive ([`crate::util`]). Bump it with any change to them: a
/// plugin built against another version is refused, where calling it
/// through a changed vtable would crash.
pub const PROVIDER_TRAITS_VERSION: u32 = 3;

/// The interface version as it appears in the build identity (a literal in
/// the provider's binary; kept equal to [`PROVIDER_TRAITS_VERSION`] by a test).
const TRAITS_TAG: &str = "provider-traits-3";

/// Build identity both sides of an external load must share, as fields
/// separated by `; `: the core's version, the provider interface version,
/// and the sizes of the structures the interface passes.
pub fn build_id() -> String {
    format!(
        "ofi-core {}; {}; info {}; domain_attr {}; ep_bindings {}",
        env!("CARGO_PKG_VERSION"),
        TRAITS_TAG,
        std::mem::size_of::<Info>(),
        std::mem::size_of::<crate::info::DomainAttr>(),
        std::mem::size_of::<crate::object::EpBindings>(),
    )
}

/// Compares a plugin's build identity with this build's; the error names
/// the first field that differs.
pub(crate) fn check_build_id(path: &str, plugin: &str) -> Result<()> {
    let host = build_id();
    if plugin == host {
        return Ok(());
    }
    let mut theirs = plugin.split("; ");
    for mine in host.split("; ") {
        let other = theirs.next().unwrap_or("(nothing)");
        if other != mine {
            return Err(Error::new(
                errno::FI_ENOSYS,
                format!(
                    "{path} was built against {other}, this ofi has {mine}: rebuild the \
                     provider against this ofi-core (its build: '{plugin}')"
                ),
            ));
        }
    }
    Err(Error::new(
        errno::FI_ENOSYS,
        format!("{path} has build identity '{plugin}', this ofi '{host}'"),
    ))
}

/// Where a provider came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled in.
    Builtin,
    /// Loaded from a shared object at this path.
    External(String),
}

pub(crate) struct Entry {
    pub(crate) prov: Arc<dyn Provider>,
    pub(crate) priority: i32,
    pub(crate) open_fabrics: Arc<AtomicUsize>,
    pub(crate) origin: Origin,
}

static REGISTRY: RwLock<Vec<Entry>> = RwLock::new(Vec::new());
static EXTERNAL_INIT: Once = Once::new();

fn registry_read() -> std::sync::RwLockReadGuard<'static, Vec<Entry>> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

fn registry_write() -> std::sync::RwLockWriteGuard<'static, Vec<Entry>> {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

/// The built-in providers and their priorities, best first: the one place
/// their order is set (getinfo lists a provider's offers before those of
/// every provider of lower priority; external providers load at 0, after
/// all of these).
///
/// - `hybrid`: first, so that an application naming no provider gets, as
///   its first RDM offer, the one endpoint that reaches peers on this node
///   and on others; it costs little over plain shm on the node (8 B latency
///   within 1.10x, README "One endpoint for local and remote peers"), and
///   `FI_PROVIDER=shm` or `tcp` still gives the plain providers.
/// - `shm`: the fastest path, between processes of one node.
/// - `tcp`: reliable streams over any network interface.
/// - `udp`: ofi's reliability protocol over datagrams, and DGRAM endpoints.
pub const BUILTIN_ORDER: [(&str, i32); 4] =
    [("hybrid", 110), ("shm", 100), ("tcp", 50), ("udp", 40)];

/// Registers a built-in provider at its place in [`BUILTIN_ORDER`]
/// (idempotent: a provider of that name already registered is left as it
/// is). A name the table lacks is refused (`FI_EINVAL`): a built-in
/// provider takes its place there.
pub fn register_builtin(prov: Arc<dyn Provider>) -> Result<()> {
    let name = prov.name();
    let Some(&(_, priority)) = BUILTIN_ORDER.iter().find(|(n, _)| *n == name) else {
        return Err(Error::inval(format!(
            "provider '{name}' has no place in the built-in order (registry::BUILTIN_ORDER)"
        )));
    };
    if is_registered(name) {
        return Ok(());
    }
    match register(prov, priority) {
        Err(e) if e.code() == errno::FI_EALREADY => Ok(()),
        r => r,
    }
}

/// Registers a provider. Higher priority ranks its offers first (the
/// built-in providers' priorities: [`BUILTIN_ORDER`]).
/// A second provider with the same name is refused (`FI_EALREADY`).
pub fn register(prov: Arc<dyn Provider>, priority: i32) -> Result<()> {
    register_from(prov, priority, Origin::Builtin)
}

fn register_from(prov: Arc<dyn Provider>, priority: i32, origin: Origin) -> Result<()> {
    let mut reg = registry_write();
    if reg.iter().any(|e| e.prov.name() == prov.name()) {
        return Err(Error::new(
            errno::FI_EALREADY,
            format!("provider '{}' is already registered", prov.name()),
        ));
    }
    tracing::debug!(provider = prov.name(), ?origin, "registered provider");
    reg.push(Entry {
        prov,
        priority,
        open_fabrics: Arc::new(AtomicUsize::new(0)),
        origin,
    });
    reg.sort_by_key(|e| std::cmp::Reverse(e.priority));
    Ok(())
}

/// Removes a provider. Refused (`FI_EBUSY`) while any of its fabrics is open.
pub fn deregister(name: &str) -> Result<()> {
    let mut reg = registry_write();
    let idx = reg
        .iter()
        .position(|e| e.prov.name() == name)
        .ok_or_else(|| Error::new(errno::FI_ENOENT, format!("no provider named '{name}'")))?;
    let open = reg[idx].open_fabrics.load(Ordering::Acquire);
    if open > 0 {
        return Err(Error::busy(format!(
            "provider '{name}' still has {open} open fabric(s)"
        )));
    }
    reg.remove(idx);
    Ok(())
}

/// True when a provider of this name is registered.
pub fn is_registered(name: &str) -> bool {
    registry_read().iter().any(|e| e.prov.name() == name)
}

/// Names, versions and origins of registered providers, best first.
pub fn providers() -> Vec<(String, u32, Origin)> {
    load_external_from_env();
    registry_read()
        .iter()
        .map(|e| {
            (
                e.prov.name().to_string(),
                e.prov.version(),
                e.origin.clone(),
            )
        })
        .collect()
}

/// Every tunable of the core and of every registered provider.
pub fn tunables() -> Vec<config::Tunable> {
    load_external_from_env();
    let mut all = config::core_tunables();
    for e in registry_read().iter() {
        all.extend(e.prov.tunables());
    }
    all
}

/// A registered provider by name, whatever FI_PROVIDER says: how a
/// composing provider opens the providers it is built on (through the
/// [`Provider`] trait, without importing their crates).
pub fn provider(name: &str) -> Option<Arc<dyn Provider>> {
    lookup(name).map(|(p, _)| p)
}

/// Finds a provider and the counter of its open fabrics.
pub(crate) fn lookup(name: &str) -> Option<(Arc<dyn Provider>, Arc<AtomicUsize>)> {
    registry_read()
        .iter()
        .find(|e| e.prov.name() == name)
        .map(|e| (e.prov.clone(), e.open_fabrics.clone()))
}

/// Returns every offer that satisfies the hints, best first.
///
/// `version` is the API version the caller is written for
/// ([`crate::consts::FI_VERSION_CURRENT`]). Malformed hints give `FI_EINVAL`
/// naming the field; hints nobody can satisfy give `FI_ENODATA`.
pub fn getinfo(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Info>,
) -> Result<Vec<Info>> {
    hints::validate_version(version)?;
    if let Some(h) = hints {
        hints::validate_hints(h)?;
    }
    hints::check_node(node, flags, hints)?;
    load_external_from_env();
    let env_filter = config::provider_filter()?;
    let hint_filter = match hints.and_then(|h| h.fabric_attr.prov_name.as_deref()) {
        Some(p) => Some(hints::ProviderFilter::parse(p)?),
        None => None,
    };
    let provs: Vec<Arc<dyn Provider>> = registry_read().iter().map(|e| e.prov.clone()).collect();
    let req = GetinfoRequest {
        version,
        node,
        service,
        flags,
        hints,
    };
    let mut out = Vec::new();
    let mut reasons = Vec::new();
    // Offers given, per provider asked (for the log).
    let mut given = Vec::new();
    let mut hard_error = None;
    // Providers asked (not excluded by FI_PROVIDER or the hinted names).
    let mut asked = 0;
    for prov in provs {
        let name = prov.name().to_string();
        if env_filter.as_ref().is_some_and(|f| !f.allows(&name)) {
            reasons.push(format!("{name}: excluded by FI_PROVIDER"));
            continue;
        }
        if hint_filter.as_ref().is_some_and(|f| !f.allows(&name)) {
            reasons.push(format!("{name}: not in the hinted provider list"));
            continue;
        }
        asked += 1;
        let offers = match prov.getinfo(&req) {
            Ok(o) => o,
            Err(e) if e.code() == errno::FI_ENODATA => {
                reasons.push(format!("{name}: {}", e.message()));
                continue;
            }
            Err(e) => {
                tracing::debug!(provider = %name, error = %e, "getinfo failed");
                reasons.push(format!("{name}: {}", e.message()));
                hard_error.get_or_insert(e);
                continue;
            }
        };
        let before = out.len();
        for mut offer in offers {
            // FI_PROVIDER=tcp;ofi_rxm names tcp's RDM offers only.
            if env_filter
                .as_ref()
                .is_some_and(|f| !f.allows_offer(offer.provider(), offer.ep_attr.ep_type))
            {
                reasons.push(format!(
                    "{name}: {} excluded by FI_PROVIDER",
                    offer.provider()
                ));
                continue;
            }
            match hints {
                None => {
                    // An old API's offer speaks the old mr_mode enum.
                    if let Ok(m) = hints::offer_mr_mode(version, None, offer.domain_attr.mr_mode) {
                        offer.domain_attr.mr_mode = m;
                        out.push(offer);
                    }
                }
                Some(h) => match hints::match_offer_for(&offer, h, version) {
                    Ok(m) => out.push(m),
                    Err(field) => {
                        tracing::debug!(provider = %name, field, "offer does not satisfy hints");
                        reasons.push(format!("{name}: {field}"));
                    }
                },
            }
        }
        given.push((name, out.len() - before));
    }
    if out.is_empty() {
        // The one provider asked failed outright (a malformed tunable, a
        // bad address): its error, not "no data".
        if let Some(e) = hard_error {
            if e.code() != errno::FI_ENODATA && asked == 1 {
                return Err(e);
            }
        }
        reasons.dedup();
        let why = if reasons.is_empty() {
            "no provider is registered".to_string()
        } else {
            format!("no offer satisfies the hints ({})", reasons.join("; "))
        };
        return Err(Error::nodata(why));
    }
    tracing::info!(
        "getinfo: {} {} ({}){}",
        out.len(),
        if out.len() == 1 { "offer" } else { "offers" },
        given
            .iter()
            .map(|(name, n)| format!("{name}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        if reasons.is_empty() {
            String::new()
        } else {
            format!("; left out: {}", reasons.join("; "))
        }
    );
    Ok(out)
}

/// Loads the providers named in FI_PROVIDER_PATH (once per process):
/// shared objects, or directories whose `*.so` files are loaded.
pub fn load_external_from_env() {
    EXTERNAL_INIT.call_once(|| {
        let Ok(path) = std::env::var("FI_PROVIDER_PATH") else {
            return;
        };
        for part in path.split(':').filter(|p| !p.is_empty()) {
            let p = std::path::Path::new(part);
            let files: Vec<std::path::PathBuf> = if p.is_dir() {
                std::fs::read_dir(p)
                    .map(|d| {
                        d.filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|f| f.extension().is_some_and(|x| x == "so"))
                            .collect()
                    })
                    .unwrap_or_default()
            } else {
                vec![p.to_path_buf()]
            };
            for f in files {
                // SAFETY: FI_PROVIDER_PATH is the process's own setting,
                // trusted as the dynamic loader trusts LD_PRELOAD: naming an
                // object there vouches for it.
                #[allow(unsafe_code)]
                let loaded = unsafe { load_external(&f.to_string_lossy()) };
                if let Err(e) = loaded {
                    tracing::warn!(path = %f.display(), error = %e, "external provider not loaded");
                }
            }
        }
    });
}

/// Loads one external provider from a shared object and registers it.
/// Returns the provider's name.
///
/// # Safety
/// Loading runs the object's code (its initialisers, then its entry point,
/// and later every call into the provider) inside this process, with no
/// check ofi can make: `path` must name a provider built for this ofi
/// (same ofi-core and toolchain; a mismatched build identity is refused by
/// name, but an object that lies about it, or whose initialisers misbehave,
/// is undefined behaviour), as with any `dlopen`.
#[allow(unsafe_code)]
pub unsafe fn load_external(path: &str) -> Result<String> {
    let prov = crate::external::open(path)?;
    let name = prov.name().to_string();
    register_from(prov, 0, Origin::External(path.to_string()))?;
    Ok(name)
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn the_traits_tag_follows_the_version_and_a_mismatch_is_named() {
        assert_eq!(
            TRAITS_TAG,
            format!("provider-traits-{PROVIDER_TRAITS_VERSION}")
        );
        let host = build_id();
        assert!(check_build_id("x.so", &host).is_ok());
        let stale = host.replace(TRAITS_TAG, "provider-traits-1");
        let e = check_build_id("x.so", &stale).unwrap_err();
        assert_eq!(e.code(), errno::FI_ENOSYS);
        assert!(
            e.message().contains("built against provider-traits-1"),
            "{e}"
        );
        assert!(
            e.message().contains(&format!(
                "this ofi has provider-traits-{PROVIDER_TRAITS_VERSION}"
            )),
            "{e}"
        );
        let old = "ofi-core 0.1.0 info456 attr200";
        assert!(check_build_id("x.so", old).is_err());
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;

    #[test]
    fn the_builtin_order_ranks_each_provider_once_above_external_ones() {
        let names: Vec<&str> = BUILTIN_ORDER.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["hybrid", "shm", "tcp", "udp"]);
        for w in BUILTIN_ORDER.windows(2) {
            assert!(w[0].1 > w[1].1, "{BUILTIN_ORDER:?} is not best first");
        }
        // External providers load at priority 0.
        assert!(BUILTIN_ORDER.iter().all(|(_, p)| *p > 0));
    }

    #[test]
    fn a_builtin_outside_the_order_is_refused() {
        struct Stray;
        impl Provider for Stray {
            fn name(&self) -> &str {
                "stray"
            }
            fn version(&self) -> u32 {
                1
            }
            fn getinfo(&self, _: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
                Ok(Vec::new())
            }
            fn fabric(
                &self,
                _: &crate::info::FabricAttr,
            ) -> Result<Arc<dyn crate::provider::FabricOps>> {
                Err(Error::nosys("stray"))
            }
        }
        let e = register_builtin(Arc::new(Stray)).unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL);
        assert!(e.message().contains("BUILTIN_ORDER"), "{e}");
        assert!(!is_registered("stray"));
    }
}
