//! `rdma/providers/fi_prov.h` and `fi_log.h`: what the provider-facing
//! entry points (`fi_param_*`, `fi_log*`) receive.

use crate::abi::{fi_context, fi_fabric_attr, fi_info, fid_fabric};
use libc::{c_char, c_int, c_void};

/// `enum fi_log_level`.
pub type fi_log_level = u32;
/// `enum fi_log_subsys`.
pub type fi_log_subsys = u32;

/// A provider as libfabric's core sees it (`struct fi_provider`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_provider {
    /// Provider version.
    pub version: u32,
    /// API version the provider implements.
    pub fi_version: u32,
    /// Core-owned space.
    pub context: fi_context,
    /// Provider name.
    pub name: *const c_char,
    /// The provider's getinfo.
    pub getinfo: Option<
        unsafe extern "C" fn(
            version: u32,
            node: *const c_char,
            service: *const c_char,
            flags: u64,
            hints: *const fi_info,
            info: *mut *mut fi_info,
        ) -> c_int,
    >,
    /// The provider's fabric open.
    pub fabric: Option<
        unsafe extern "C" fn(
            attr: *mut fi_fabric_attr,
            fabric: *mut *mut fid_fabric,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// Called at unload.
    pub cleanup: Option<unsafe extern "C" fn()>,
}
