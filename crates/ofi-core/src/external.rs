//! Loading external providers from shared objects (the FFI edge of the core).
//!
//! The entry point is `ofi_provider_entry_v1(abi, build_id) -> *mut c_void`:
//! it returns a boxed `Arc<dyn Provider>` when both sides agree on the ABI
//! version and build identity, and null otherwise. Providers must be built
//! with the same toolchain and ofi-core version as the host; the build
//! identity check turns a mismatch into a clear error instead of a crash.
#![allow(unsafe_code)]

use crate::error::{errno, Error, Result};
use crate::provider::Provider;
use crate::registry::{build_id, EXTERNAL_ABI_VERSION, EXTERNAL_ENTRY_SYMBOL};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

/// Signature of the entry point.
pub type EntryFn = unsafe extern "C" fn(abi: u32, build: *const c_char) -> *mut c_void;

pub(crate) fn open(path: &str) -> Result<Arc<dyn Provider>> {
    // SAFETY: loading runs the object's initialisers, which the user vouched
    // for by naming it as a provider; RTLD_NOW resolves every symbol now, so
    // a broken object fails here rather than in a later call.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| Error::new(errno::FI_ENOENT, format!("dlopen {path}: {e}")))?;
    // SAFETY: the documented entry point has exactly this signature.
    let entry: Symbol<EntryFn> =
        unsafe { lib.get(EXTERNAL_ENTRY_SYMBOL.as_bytes()) }.map_err(|e| {
            Error::new(
                errno::FI_ENOSYS,
                format!("{path} does not export {EXTERNAL_ENTRY_SYMBOL}: {e}"),
            )
        })?;
    let id = CString::new(build_id())
        .map_err(|_| Error::inval("the build identity contains a NUL byte"))?;
    // SAFETY: calling the provider's entry point with valid arguments.
    let raw = unsafe { entry(EXTERNAL_ABI_VERSION, id.as_ptr()) };
    if raw.is_null() {
        // Nothing from the object was kept: dropping `lib` unloads it.
        return Err(Error::new(
            errno::FI_ENOSYS,
            format!(
                "{path} refused ABI {EXTERNAL_ABI_VERSION} / build '{}'",
                build_id()
            ),
        ));
    }
    // SAFETY: a non-null return is a Box<Arc<dyn Provider>> leaked by
    // `export_provider!` built against the same build identity.
    let boxed = unsafe { Box::from_raw(raw.cast::<Arc<dyn Provider>>()) };
    // The provider's code must stay mapped for as long as the process may
    // call it: the library is never unloaded.
    std::mem::forget(lib);
    Ok(*boxed)
}

/// Exports a provider constructor as the versioned external entry point.
///
/// ```text
/// ofi_core::export_provider!(MyProvider::new);
/// ```
#[macro_export]
macro_rules! export_provider {
    ($ctor:expr) => {
        /// The versioned entry point ofi looks up when loading this object.
        #[no_mangle]
        pub extern "C" fn ofi_provider_entry_v1(
            abi: u32,
            build: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            if abi != $crate::registry::EXTERNAL_ABI_VERSION || build.is_null() {
                return ::std::ptr::null_mut();
            }
            // SAFETY: the host passes a valid NUL-terminated build id.
            let host = unsafe { ::std::ffi::CStr::from_ptr(build) };
            if host.to_bytes() != $crate::registry::build_id().as_bytes() {
                return ::std::ptr::null_mut();
            }
            let result = ::std::panic::catch_unwind(|| {
                let p: ::std::sync::Arc<dyn $crate::provider::Provider> =
                    ::std::sync::Arc::new($ctor());
                Box::into_raw(Box::new(p)).cast::<::std::ffi::c_void>()
            });
            result.unwrap_or(::std::ptr::null_mut())
        }
    };
}
