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
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

/// Signature of the entry point.
pub type EntryFn = unsafe extern "C" fn(abi: u32, build: *const c_char) -> *mut c_void;

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a pointer to a NUL-terminated string
    // owned by libc, valid until the next dl* call on this thread.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dynamic loader error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

pub(crate) fn open(path: &str) -> Result<Arc<dyn Provider>> {
    let cpath =
        CString::new(path).map_err(|_| Error::inval("provider path contains a NUL byte"))?;
    // SAFETY: cpath is a valid C string; RTLD_NOW resolves every symbol now
    // so a broken object fails here rather than later.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(Error::new(
            errno::FI_ENOENT,
            format!("dlopen {path}: {}", dlerror_text()),
        ));
    }
    let sym = CString::new(EXTERNAL_ENTRY_SYMBOL).expect("static symbol name");
    // SAFETY: handle is a live handle from dlopen; sym is a valid C string.
    let f = unsafe { libc::dlsym(handle, sym.as_ptr()) };
    if f.is_null() {
        // SAFETY: handle came from dlopen and nothing from it is in use.
        unsafe { libc::dlclose(handle) };
        return Err(Error::new(
            errno::FI_ENOSYS,
            format!("{path} does not export {EXTERNAL_ENTRY_SYMBOL}"),
        ));
    }
    // SAFETY: the symbol is the documented entry point with this signature.
    let entry: EntryFn = unsafe { std::mem::transmute::<*mut c_void, EntryFn>(f) };
    let id = CString::new(build_id()).expect("build id has no NUL");
    // SAFETY: calling the provider's entry point with valid arguments.
    let raw = unsafe { entry(EXTERNAL_ABI_VERSION, id.as_ptr()) };
    if raw.is_null() {
        // SAFETY: nothing from the object was kept.
        unsafe { libc::dlclose(handle) };
        return Err(Error::new(
            errno::FI_ENOSYS,
            format!(
                "{path} refused ABI {EXTERNAL_ABI_VERSION} / build '{}'",
                build_id()
            ),
        ));
    }
    // SAFETY: a non-null return is a Box<Arc<dyn Provider>> leaked by
    // `export_provider!` built against the same build identity. The library
    // handle is never closed, so the provider's code stays mapped.
    let boxed = unsafe { Box::from_raw(raw.cast::<Arc<dyn Provider>>()) };
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
