//! Parameters: `fi_param_define`, `fi_param_get`, `fi_getparams` and
//! `fi_freeparams`.

use super::log::format_va;
use super::PANIC;
use crate::abi::*;
use crate::guard::{self, ffi};
use crate::info;
use ofi_core::error::errno::*;
use std::ffi::CString;
use std::ptr;
use std::sync::{Mutex, OnceLock};

/// A parameter known to `fi_param_get` and listed by `fi_getparams`.
#[derive(Clone, Debug)]
struct Param {
    /// Provider name as given ("" for the core).
    prov: String,
    /// Parameter name as given.
    name: String,
    /// `FI_PARAM_*`.
    ty: fi_param_type,
    /// Help text.
    help: String,
}

impl Param {
    /// `FI_<PROV>_<NAME>` upper-cased (`FI_<NAME>` for the core); a provider
    /// name's "ofi_" prefix is dropped, as libfabric does for its utility
    /// providers.
    fn var(&self) -> String {
        let p = self.prov.strip_prefix("ofi_").unwrap_or(&self.prov);
        if p.is_empty() || p == "core" {
            format!("FI_{}", self.name)
        } else {
            format!("FI_{}_{}", p, self.name)
        }
        .to_ascii_uppercase()
    }
}

/// Parameters defined through `fi_param_define`, after ofi's own tunables.
fn params() -> &'static Mutex<Vec<Param>> {
    static PARAMS: OnceLock<Mutex<Vec<Param>>> = OnceLock::new();
    PARAMS.get_or_init(|| {
        ofi::init();
        let own = ofi_core::registry::tunables()
            .into_iter()
            .map(|t| {
                use ofi_core::config::TunableKind;
                Param {
                    prov: t.prov.to_owned(),
                    name: t.name.to_owned(),
                    ty: match t.kind {
                        TunableKind::Size => param_type::FI_PARAM_SIZE_T,
                        TunableKind::Bool => param_type::FI_PARAM_BOOL,
                        TunableKind::Str => param_type::FI_PARAM_STRING,
                    },
                    help: t.help.to_owned(),
                }
            })
            .collect();
        Mutex::new(own)
    })
}

/// The name of a provider passed to the provider-facing calls ("" for NULL,
/// which means the core).
///
/// # Safety
/// `prov` is NULL or a valid `struct fi_provider`.
pub(super) unsafe fn provider_name(prov: *const fi_provider) -> String {
    // SAFETY: the caller's contract; the name is NULL or a C string.
    unsafe { prov.as_ref().and_then(|p| info::c_str(p.name)) }.unwrap_or_default()
}

/// libfabric's boolean spellings.
fn parse_bool(s: &str) -> Option<c_int> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" | "y" => Some(1),
        "0" | "no" | "off" | "false" | "n" => Some(0),
        _ => None,
    }
}

/// `fi_param_define` with its help format already expanded.
fn param_define(
    prov: String,
    name: Option<String>,
    ty: fi_param_type,
    help: Option<String>,
) -> c_int {
    let (Some(name), Some(help)) = (name, help) else {
        return guard::neg(FI_EINVAL);
    };
    if help.is_empty() || ty > param_type::FI_PARAM_SIZE_T {
        return guard::neg(FI_EINVAL);
    }
    let p = Param {
        prov,
        name,
        ty,
        help,
    };
    let mut list = params().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = list.iter_mut().find(|o| o.var() == p.var()) {
        *old = p;
    } else {
        list.push(p);
    }
    0
}

/// `fi_param_get`: reads the value of a defined parameter from
/// `FI_<PROV>_<NAME>`. `-FI_ENOENT` if not defined, `-FI_ENODATA` if not
/// set, `-FI_EINVAL` if the text is not a valid value of its type.
///
/// # Safety
/// `provider` is NULL or a valid `struct fi_provider`; `param_name` is a C
/// string; `value` points to storage of the parameter's type (`char *`,
/// `int`, `int` for booleans, `size_t`).
pub unsafe extern "C" fn fi_param_get(
    provider: *mut fi_provider,
    param_name: *const c_char,
    value: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        // SAFETY: the caller's contract.
        let (prov, name) = unsafe { (provider_name(provider), info::c_str(param_name)) };
        let Some(name) = name else {
            return guard::neg(FI_EINVAL);
        };
        if value.is_null() {
            return guard::neg(FI_EINVAL);
        }
        let probe = Param {
            prov,
            name,
            ty: 0,
            help: String::new(),
        };
        let var = probe.var();
        let ty = {
            let list = params().lock().unwrap_or_else(|e| e.into_inner());
            match list.iter().find(|p| p.var() == var) {
                Some(p) => p.ty,
                None => return guard::neg(FI_ENOENT),
            }
        };
        let Ok(cvar) = CString::new(var) else {
            return guard::neg(FI_EINVAL);
        };
        // SAFETY: getenv with a valid C string; the result points into the
        // environment, as libfabric hands it out.
        let raw = unsafe { libc::getenv(cvar.as_ptr()) };
        if raw.is_null() {
            return guard::neg(FI_ENODATA);
        }
        // SAFETY: `value` points to storage of the parameter's
        // type (caller's contract); `raw` is a C string.
        unsafe {
            match ty {
                param_type::FI_PARAM_STRING => *value.cast::<*mut c_char>() = raw,
                param_type::FI_PARAM_INT => {
                    *value.cast::<c_int>() = libc::strtol(raw, ptr::null_mut(), 0) as c_int;
                }
                param_type::FI_PARAM_SIZE_T => {
                    *value.cast::<size_t>() = libc::strtoul(raw, ptr::null_mut(), 0) as size_t;
                }
                _ => match info::c_str(raw).as_deref().and_then(parse_bool) {
                    Some(b) => *value.cast::<c_int>() = b,
                    None => return guard::neg(FI_EINVAL),
                },
            }
        }
        0
    })
}

/// `fi_getparams`: every known parameter with its current value (NULL when
/// unset), in an array terminated by an entry with a NULL name; free it
/// with `fi_freeparams`.
///
/// # Safety
/// `params_out` and `count` are NULL or writable.
pub unsafe extern "C" fn fi_getparams(params_out: *mut *mut fi_param, count: *mut c_int) -> c_int {
    ffi(PANIC, || {
        if params_out.is_null() || count.is_null() {
            return guard::neg(FI_EINVAL);
        }
        let list = params().lock().unwrap_or_else(|e| e.into_inner()).clone();
        let n = list.len();
        // SAFETY: calloc of n + 1 entries, checked for NULL.
        let arr =
            unsafe { libc::calloc(n + 1, std::mem::size_of::<fi_param>()) }.cast::<fi_param>();
        if arr.is_null() {
            return guard::neg(FI_ENOMEM);
        }
        for (i, p) in list.iter().enumerate() {
            let var = p.var();
            let value = std::env::var(&var).ok();
            let fill = (|| {
                Ok::<_, c_int>(fi_param {
                    name: info::dup_str(Some(&var))?,
                    r#type: p.ty,
                    help_string: info::dup_str(Some(&p.help))?,
                    value: info::dup_str(value.as_deref())?,
                })
            })();
            match fill {
                // SAFETY: i < n + 1 entries of arr.
                Ok(e) => unsafe { *arr.add(i) = e },
                Err(e) => {
                    // SAFETY: arr holds i filled entries and zeroed ones.
                    unsafe { fi_freeparams(arr) };
                    return e;
                }
            }
        }
        // SAFETY: both outputs are writable (checked non-NULL above).
        unsafe {
            *params_out = arr;
            *count = c_int::try_from(n).unwrap_or(c_int::MAX);
        }
        0
    })
}

/// `fi_freeparams`: frees an array from `fi_getparams`.
///
/// # Safety
/// `params` is NULL or an array from `fi_getparams`, not used afterwards.
pub unsafe extern "C" fn fi_freeparams(params: *mut fi_param) {
    ffi((), || {
        if params.is_null() {
            return;
        }
        let mut p = params;
        // SAFETY: the array ends with an entry whose name is NULL; every
        // string came from malloc.
        unsafe {
            while !(*p).name.is_null() {
                libc::free((*p).name.cast_mut().cast());
                libc::free((*p).help_string.cast_mut().cast());
                libc::free((*p).value.cast_mut().cast());
                p = p.add(1);
            }
            libc::free(params.cast());
        }
    })
}

/// The body of `fi_param_define`: `regs` holds the six integer argument
/// registers (prov, param_name, type, help_fmt, …), `ap` the variadic
/// arguments of the help format.
///
/// # Safety
/// Called only by the `fi_param_define` entry in `compat`.
pub(crate) unsafe extern "C" fn fi_param_define_va(regs: *const u64, ap: *mut c_void) -> c_int {
    ffi(PANIC, || {
        // SAFETY: regs holds six saved registers (the entry's contract).
        let r = unsafe { std::slice::from_raw_parts(regs, 6) };
        let prov = r[0] as *const fi_provider;
        let name = r[1] as *const c_char;
        let ty = r[2] as u32;
        let fmt = r[3] as *const c_char;
        // SAFETY: the arguments as the provider passed them.
        let (prov, name, help) =
            unsafe { (provider_name(prov), info::c_str(name), format_va(fmt, ap)) };
        param_define(prov, name, ty, help)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_names() {
        let p = Param {
            prov: "ofi_rxm".into(),
            name: "buffer_size".into(),
            ty: 0,
            help: "h".into(),
        };
        assert_eq!(p.var(), "FI_RXM_BUFFER_SIZE");
        let core = Param {
            prov: String::new(),
            name: "log_level".into(),
            ty: 0,
            help: "h".into(),
        };
        assert_eq!(core.var(), "FI_LOG_LEVEL");
        assert_eq!(parse_bool("ON"), Some(1));
        assert_eq!(parse_bool("maybe"), None);
    }
}
