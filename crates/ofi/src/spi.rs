//! The provider author's side of ofi: the provider traits and registry,
//! endpoint bindings, the shared cores behind the objects (`core()`,
//! `ops()`, `mr_map()` through [`HasCore`], [`HasOps`], [`HasMrMap`]) and
//! the event-queue and peer utilities. Applications do not need it.

pub use ofi_core::object::{tx_completion, EpBindings};
pub use ofi_core::provider;
pub use ofi_core::registry;
pub use ofi_core::spi::{HasCore, HasMrMap, HasOps};
pub use ofi_core::util;
pub use ofi_core::util::eq as util_eq;
pub use ofi_core::util::peer;
