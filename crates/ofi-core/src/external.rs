//! Loading external providers from shared objects (the FFI edge of the core).
//!
//! The object exports `ofi_provider_build_id_v1() -> *const c_char`, the
//! build identity it was made with (ofi-core's version, the provider
//! interface version [`PROVIDER_TRAITS_VERSION`](crate::registry::PROVIDER_TRAITS_VERSION),
//! the sizes of the structures it passes), which the host compares with
//! its own first, refusing a mismatch by name; then the entry point
//! `ofi_provider_entry_v1(abi, build_id) -> *mut c_void`, which checks the
//! same from its side and returns a boxed `Arc<dyn Provider>`, or null.
//! Providers must be built with the same toolchain and ofi-core version as
//! the host: these checks turn a stale plugin into a clear error instead of
//! a crash through a changed vtable.
#![allow(unsafe_code)]

use crate::error::{errno, Error, Result};
use crate::provider::Provider;
use crate::registry::{
    build_id, check_build_id, EXTERNAL_ABI_VERSION, EXTERNAL_ENTRY_SYMBOL, EXTERNAL_ID_SYMBOL,
};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

/// Signature of the entry point.
pub type EntryFn = unsafe extern "C" fn(abi: u32, build: *const c_char) -> *mut c_void;
/// Signature of the build identity query.
pub type IdFn = unsafe extern "C" fn() -> *const c_char;

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
    // The plugin's build identity first: a mismatch (another ofi-core,
    // another provider interface) is refused by name, before any of the
    // plugin's code that depends on the interface runs.
    // SAFETY: the documented query has exactly this signature.
    let query: Symbol<IdFn> = unsafe { lib.get(EXTERNAL_ID_SYMBOL.as_bytes()) }.map_err(|_| {
        Error::new(
            errno::FI_ENOSYS,
            format!(
                "{path} does not export {EXTERNAL_ID_SYMBOL}: built against an older ofi-core \
                 whose provider interface this ofi cannot check; rebuild it"
            ),
        )
    })?;
    // SAFETY: the query takes nothing and returns a pointer to a static
    // NUL-terminated string (or null).
    let theirs = unsafe { query() };
    if theirs.is_null() {
        return Err(Error::new(
            errno::FI_ENOSYS,
            format!("{path}: {EXTERNAL_ID_SYMBOL} returned nothing"),
        ));
    }
    // SAFETY: non-null: a NUL-terminated string that lives as long as the
    // library (static in the plugin); copied before the library may go.
    let theirs = unsafe { std::ffi::CStr::from_ptr(theirs) }
        .to_string_lossy()
        .into_owned();
    check_build_id(path, &theirs)?;
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

/// Exports a provider constructor as the versioned external entry point
/// (and the build identity query the host checks first).
///
/// ```text
/// ofi_core::export_provider!(MyProvider::new);
/// ```
#[macro_export]
macro_rules! export_provider {
    ($ctor:expr) => {
        /// The build identity this provider was built with, for the host to
        /// compare with its own before calling the entry point.
        #[no_mangle]
        pub extern "C" fn ofi_provider_build_id_v1() -> *const ::std::ffi::c_char {
            static ID: ::std::sync::OnceLock<::std::ffi::CString> = ::std::sync::OnceLock::new();
            ID.get_or_init(|| {
                ::std::ffi::CString::new($crate::registry::build_id()).unwrap_or_default()
            })
            .as_ptr()
        }

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
