//! The top-level C entry points: discovery (`fi_getinfo`, `fi_freeinfo`,
//! `fi_dupinfo`), library information (`fi_version`, `fi_strerror`,
//! `fi_tostr`, `fi_tostr_r`, `fi_open`), and the provider-facing services
//! (`fi_param_*`, `fi_getparams`, `fi_log*`).
//!
//! The functions carry no `#[no_mangle]`: `compat` exports them under
//! their C names with libfabric's symbol versions.
//!
//! - `discovery`: `fi_getinfo`, `fi_freeinfo`, `fi_dupinfo`.
//! - `library`: `fi_version`, `fi_strerror`, `fi_open`.
//! - `tostr`: `fi_tostr`, `fi_tostr_r`; `names`: the names they print.
//! - `params`: `fi_param_define`, `fi_param_get`, `fi_getparams`, `fi_freeparams`.
//! - `log`: `fi_log`, `fi_log_enabled`, `fi_log_ready`.

mod discovery;
mod library;
mod log;
mod names;
mod params;
mod tostr;

pub use discovery::{fi_dupinfo, fi_freeinfo, fi_getinfo};
pub use library::{fi_open, fi_strerror, fi_version};
pub(crate) use log::fi_log_va;
pub use log::{fi_log_enabled, fi_log_ready};
pub(crate) use params::fi_param_define_va;
pub use params::{fi_freeparams, fi_getparams, fi_param_get};
pub use tostr::{fi_tostr, fi_tostr_r};

use crate::guard;
use libc::c_int;
use ofi_core::error::errno::FI_EOTHER;

/// Return value of an `int` entry point that panicked.
const PANIC: c_int = guard::neg(FI_EOTHER);
