//! The top-level C entry points: discovery (`fi_getinfo`, `fi_freeinfo`,
//! `fi_dupinfo`), library information (`fi_version`, `fi_strerror`,
//! `fi_tostr`, `fi_tostr_r`, `fi_open`), and the provider-facing services
//! (`fi_param_*`, `fi_getparams`, `fi_log*`).
//!
//! The functions carry no `#[no_mangle]`: `compat` exports them under
//! their C names with libfabric's symbol versions.

use crate::abi::*;
use crate::guard::{self, ffi};
use crate::info;
use ofi_core::error::errno::*;
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::ptr;
use std::sync::{Mutex, OnceLock};

/// Return value of an `int` entry point that panicked.
const PANIC: c_int = guard::neg(FI_EOTHER);

/// A C string argument as `&str`: `Ok(None)` for NULL, `Err` for invalid UTF-8.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn arg_str<'a>(p: *const c_char) -> Result<Option<&'a str>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    match unsafe { CStr::from_ptr(p) }.to_str() {
        Ok(s) => Ok(Some(s)),
        Err(_) => Err(guard::neg(FI_EINVAL)),
    }
}

// ---------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------

/// `fi_getinfo` (FABRIC_1.3): the offers matching `hints`, best first, as a
/// list the caller frees with `fi_freeinfo`. `-FI_ENODATA` when nothing
/// matches; `-FI_EINVAL` for a NULL `info` or malformed hints.
///
/// # Safety
/// `node`, `service` are NULL or C strings; `hints` is NULL or a valid
/// `fi_info`; `info` is NULL or writable.
pub unsafe extern "C" fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    ffi(PANIC, || {
        if info.is_null() {
            return guard::neg(FI_EINVAL);
        }
        // SAFETY: `info` is non-NULL and writable (caller's contract).
        unsafe { *info = ptr::null_mut() };
        // SAFETY: the caller's contract on node and service.
        let (node, service) = match unsafe { (arg_str(node), arg_str(service)) } {
            (Ok(n), Ok(s)) => (n, s),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        let hints = if hints.is_null() {
            None
        } else {
            // SAFETY: non-NULL hints are a valid fi_info (caller's contract).
            match unsafe { info::info_from_c(hints) } {
                Ok(mut h) => {
                    relax_hints(&mut h);
                    Some(h)
                }
                Err(e) => return e,
            }
        };
        let result = if flags & ofi_core::consts::FI_PROV_ATTR_ONLY != 0 {
            provider_list(hints.as_ref())
        } else {
            ofi::getinfo(version, node, service, flags, hints.as_ref())
        };
        let offers = match result {
            Ok(o) => o,
            Err(e) => {
                tracing::info!("fi_getinfo: {}", e.message());
                return guard::err(&e);
            }
        };
        if offers.is_empty() {
            return guard::neg(FI_ENODATA);
        }
        match info::list_to_c(&offers) {
            Ok(list) => {
                // SAFETY: as above.
                unsafe { *info = list };
                0
            }
            Err(e) => e,
        }
    })
}

/// Hints say in `mode` and `mr_mode` what the application supports; bits no
/// provider can require mean nothing there (Debian's `fi_info` passes all
/// ones), so they are dropped before ofi's strict hint validation.
fn relax_hints(h: &mut ofi_core::Info) {
    let modes = MODE.iter().fold(0, |m, (bit, _)| m | bit);
    let mr_modes = MR_MODE.iter().fold(0, |m, (bit, _)| m | bit) as u32;
    h.mode &= modes;
    h.tx_attr.mode &= modes;
    h.rx_attr.mode &= modes;
    h.domain_attr.mode &= modes;
    h.domain_attr.mr_mode &= mr_modes;
}

/// `FI_PROV_ATTR_ONLY`: one offer per provider that FI_PROVIDER and the
/// hinted provider names allow, with only the provider's name and version
/// filled in (usable or not).
fn provider_list(hints: Option<&ofi_core::Info>) -> ofi_core::Result<Vec<ofi_core::Info>> {
    use ofi_core::hints::ProviderFilter;
    ofi::init();
    let env = ofi_core::config::provider_filter()?;
    let hinted = match hints.and_then(|h| h.fabric_attr.prov_name.as_deref()) {
        Some(p) => Some(ProviderFilter::parse(p)?),
        None => None,
    };
    let mut out: Vec<ofi_core::Info> = Vec::new();
    for (name, version, _) in ofi_core::registry::providers() {
        let allowed = |f: &Option<ProviderFilter>| f.as_ref().is_none_or(|f| f.allows(&name));
        if !allowed(&env) || !allowed(&hinted) || out.iter().any(|o| o.provider() == name) {
            continue;
        }
        let mut i = ofi_core::Info::default();
        i.fabric_attr.prov_name = Some(name);
        i.fabric_attr.prov_version = version;
        i.fabric_attr.api_version = ofi_core::consts::FI_VERSION_CURRENT;
        out.push(i);
    }
    Ok(out)
}

/// `fi_freeinfo` (FABRIC_1.3): frees a whole `fi_info` list (NULL is a no-op).
///
/// # Safety
/// `info` is NULL or a list from `fi_getinfo`/`fi_dupinfo` (fields the
/// application replaced allocated with `malloc`), not used afterwards.
pub unsafe extern "C" fn fi_freeinfo(info: *mut fi_info) {
    // SAFETY: the caller's contract.
    ffi((), || unsafe { info::free_info(info) })
}

/// `fi_dupinfo` (FABRIC_1.3): a deep copy of one `fi_info` (not its `next`);
/// for NULL, a zeroed info with all five attribute structs (`fi_allocinfo`).
/// NULL when out of memory.
///
/// # Safety
/// `info` is NULL or a valid `fi_info`.
pub unsafe extern "C" fn fi_dupinfo(info: *const fi_info) -> *mut fi_info {
    ffi(ptr::null_mut(), || {
        let r = if info.is_null() {
            info::alloc_info()
        } else {
            // SAFETY: the caller's contract.
            unsafe { info::dup_info(info) }
        };
        r.unwrap_or(ptr::null_mut())
    })
}

// ---------------------------------------------------------------------------
// Library information
// ---------------------------------------------------------------------------

/// `fi_version`: the API version this library implements (1.17).
pub extern "C" fn fi_version() -> u32 {
    ofi_core::consts::FI_VERSION_CURRENT
}

/// Error numbers at or above this are libfabric's own (`FI_ERRNO_OFFSET`).
const FI_ERRNO_OFFSET: c_int = 256;

/// `fi_strerror`: the text of an error number (either sign). Numbers below
/// 256 are the C library's `strerror`; libfabric's own numbers have their
/// own texts; beyond those, "Unspecified error".
pub extern "C" fn fi_strerror(errnum: c_int) -> *const c_char {
    static OWN: OnceLock<Vec<CString>> = OnceLock::new();
    ffi(ptr::null(), || {
        let code = errnum.checked_abs().unwrap_or(FI_EOTHER);
        if code < FI_ERRNO_OFFSET {
            // SAFETY: strerror returns a string that stays valid at least
            // until the next strerror call of this thread, as in libfabric.
            return unsafe { libc::strerror(code) }.cast_const();
        }
        let own = OWN.get_or_init(|| {
            (FI_ERRNO_OFFSET..=FI_ENORX)
                .map(|c| CString::new(ofi_core::error::strerror(c)).unwrap_or_default())
                .collect()
        });
        let idx = if code > FI_ENORX { FI_EOTHER } else { code } - FI_ERRNO_OFFSET;
        own[idx as usize].as_ptr()
    })
}

/// `fi_open` (FABRIC_1.5): opens a named library resource. This library has
/// none (libfabric's "mr_cache" and "logging" are not provided), so every
/// name is `-FI_ENOSYS`; a NULL name or output is `-FI_EINVAL`.
///
/// # Safety
/// `name` is NULL or a C string; `fid` is NULL or writable.
pub unsafe extern "C" fn fi_open(
    _version: u32,
    name: *const c_char,
    _attr: *mut c_void,
    _attr_len: size_t,
    _flags: u64,
    fid: *mut *mut fid,
    _context: *mut c_void,
) -> c_int {
    ffi(PANIC, || {
        if name.is_null() || fid.is_null() {
            return guard::neg(FI_EINVAL);
        }
        guard::neg(FI_ENOSYS)
    })
}

// ---------------------------------------------------------------------------
// fi_tostr
// ---------------------------------------------------------------------------

/// The package version `FI_TYPE_VERSION` prints.
const PACKAGE_VERSION: &str = "1.17.0";

type Bits = &'static [(u64, &'static str)];

const CAPS: Bits = &[
    (1 << 1, "FI_MSG"),
    (1 << 2, "FI_RMA"),
    (1 << 3, "FI_TAGGED"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 6, "FI_COLLECTIVE"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 10, "FI_RECV"),
    (1 << 11, "FI_SEND"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 48, "FI_VARIABLE_MSG"),
    (1 << 49, "FI_RMA_PMEM"),
    (1 << 50, "FI_SOURCE_ERR"),
    (1 << 51, "FI_LOCAL_COMM"),
    (1 << 52, "FI_REMOTE_COMM"),
    (1 << 53, "FI_SHARED_AV"),
    (1 << 56, "FI_RMA_EVENT"),
    (1 << 57, "FI_SOURCE"),
    (1 << 58, "FI_NAMED_RX_CTX"),
    (1 << 59, "FI_DIRECTED_RECV"),
    (1 << 47, "FI_HMEM"),
];

const OP_FLAGS: Bits = &[
    (1 << 5, "FI_MULTICAST"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 18, "FI_MORE"),
    (1 << 19, "FI_PEEK"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 24, "FI_COMPLETION"),
    (1 << 25, "FI_INJECT"),
    (1 << 26, "FI_INJECT_COMPLETE"),
    (1 << 27, "FI_TRANSMIT_COMPLETE"),
    (1 << 28, "FI_DELIVERY_COMPLETE"),
    (1 << 31, "FI_MATCH_COMPLETE"),
    (1 << 29, "FI_AFFINITY"),
    (1 << 59, "FI_CLAIM"),
    (1 << 58, "FI_DISCARD"),
];

const MSG_ORDER: Bits = &[
    (1 << 0, "FI_ORDER_RAR"),
    (1 << 1, "FI_ORDER_RAW"),
    (1 << 2, "FI_ORDER_RAS"),
    (1 << 3, "FI_ORDER_WAR"),
    (1 << 4, "FI_ORDER_WAW"),
    (1 << 5, "FI_ORDER_WAS"),
    (1 << 6, "FI_ORDER_SAR"),
    (1 << 7, "FI_ORDER_SAW"),
    (1 << 8, "FI_ORDER_SAS"),
    (1 << 32, "FI_ORDER_RMA_RAR"),
    (1 << 33, "FI_ORDER_RMA_RAW"),
    (1 << 34, "FI_ORDER_RMA_WAR"),
    (1 << 35, "FI_ORDER_RMA_WAW"),
    (1 << 36, "FI_ORDER_ATOMIC_RAR"),
    (1 << 37, "FI_ORDER_ATOMIC_RAW"),
    (1 << 38, "FI_ORDER_ATOMIC_WAR"),
    (1 << 39, "FI_ORDER_ATOMIC_WAW"),
];

const MODE: Bits = &[
    (1 << 59, "FI_CONTEXT"),
    (1 << 58, "FI_MSG_PREFIX"),
    (1 << 57, "FI_ASYNC_IOV"),
    (1 << 56, "FI_RX_CQ_DATA"),
    (1 << 55, "FI_LOCAL_MR"),
    (1 << 54, "FI_NOTIFY_FLAGS_ONLY"),
    (1 << 53, "FI_RESTRICTED_COMP"),
    (1 << 52, "FI_CONTEXT2"),
    (1 << 51, "FI_BUFFERED_RECV"),
];

const CQ_EVENT_FLAGS: Bits = &[
    (1 << 11, "FI_SEND"),
    (1 << 10, "FI_RECV"),
    (1 << 2, "FI_RMA"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 1, "FI_MSG"),
    (1 << 3, "FI_TAGGED"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 18, "FI_MORE"),
    (1 << 59, "FI_CLAIM"),
];

const MR_MODE: Bits = &[
    (1 << 0, "FI_MR_BASIC"),
    (1 << 1, "FI_MR_SCALABLE"),
    (1 << 2, "FI_MR_LOCAL"),
    (1 << 3, "FI_MR_RAW"),
    (1 << 4, "FI_MR_VIRT_ADDR"),
    (1 << 5, "FI_MR_ALLOCATED"),
    (1 << 6, "FI_MR_PROV_KEY"),
    (1 << 7, "FI_MR_MMU_NOTIFY"),
    (1 << 8, "FI_MR_RMA_EVENT"),
    (1 << 9, "FI_MR_ENDPOINT"),
    (1 << 10, "FI_MR_HMEM"),
    (1 << 11, "FI_MR_COLLECTIVE"),
];

/// Names of consecutive enum values from 0 (`""`: a hole, printed "Unknown").
type Names = &'static [&'static str];

const EP_TYPE: Names = &[
    "FI_EP_UNSPEC",
    "FI_EP_MSG",
    "FI_EP_DGRAM",
    "FI_EP_RDM",
    "FI_EP_SOCK_STREAM",
    "FI_EP_SOCK_DGRAM",
];
const ADDR_FORMAT: Names = &[
    "FI_FORMAT_UNSPEC",
    "FI_SOCKADDR",
    "FI_SOCKADDR_IN",
    "FI_SOCKADDR_IN6",
    "FI_SOCKADDR_IB",
    "FI_ADDR_PSMX",
    "FI_ADDR_GNI",
    "FI_ADDR_BGQ",
    "FI_ADDR_MLX",
    "FI_ADDR_STR",
    "FI_ADDR_PSMX2",
    "FI_ADDR_IB_UD",
    "FI_ADDR_EFA",
    "FI_ADDR_PSMX3",
    "FI_ADDR_OPX",
    "FI_ADDR_CXI",
];
const THREADING: Names = &[
    "FI_THREAD_UNSPEC",
    "FI_THREAD_SAFE",
    "FI_THREAD_FID",
    "FI_THREAD_DOMAIN",
    "FI_THREAD_COMPLETION",
    "FI_THREAD_ENDPOINT",
];
const PROGRESS: Names = &[
    "FI_PROGRESS_UNSPEC",
    "FI_PROGRESS_AUTO",
    "FI_PROGRESS_MANUAL",
];
const RESOURCE_MGMT: Names = &["FI_RM_UNSPEC", "FI_RM_DISABLED", "FI_RM_ENABLED"];
const PROTOCOL: Names = &[
    "FI_PROTO_UNSPEC",
    "FI_PROTO_RDMA_CM_IB_RC",
    "FI_PROTO_IWARP",
    "FI_PROTO_IB_UD",
    "FI_PROTO_PSMX",
    "FI_PROTO_UDP",
    "FI_PROTO_SOCK_TCP",
    "",
    "FI_PROTO_IWARP_RDM",
    "FI_PROTO_IB_RDM",
    "FI_PROTO_GNI",
    "FI_PROTO_RXM",
    "FI_PROTO_RXD",
    "FI_PROTO_MLX",
    "FI_PROTO_NETWORKDIRECT",
    "FI_PROTO_PSMX2",
    "FI_PROTO_SHM",
    "",
    "FI_PROTO_RSTREAM",
    "FI_PROTO_RDMA_CM_IB_XRC",
    "FI_PROTO_EFA",
    "FI_PROTO_PSMX3",
    "FI_PROTO_RXM_TCP",
    "FI_PROTO_OPX",
    "FI_PROTO_CXI",
    "FI_PROTO_XNET",
];
const AV_TYPE: Names = &["FI_AV_UNSPEC", "FI_AV_MAP", "FI_AV_TABLE"];
const ATOMIC_TYPE: Names = &[
    "FI_INT8",
    "FI_UINT8",
    "FI_INT16",
    "FI_UINT16",
    "FI_INT32",
    "FI_UINT32",
    "FI_INT64",
    "FI_UINT64",
    "FI_FLOAT",
    "FI_DOUBLE",
    "FI_FLOAT_COMPLEX",
    "FI_DOUBLE_COMPLEX",
    "FI_LONG_DOUBLE",
    "FI_LONG_DOUBLE_COMPLEX",
    "FI_INT128",
    "FI_UINT128",
];
const ATOMIC_OP: Names = &[
    "FI_MIN",
    "FI_MAX",
    "FI_SUM",
    "FI_PROD",
    "FI_LOR",
    "FI_LAND",
    "FI_BOR",
    "FI_BAND",
    "FI_LXOR",
    "FI_BXOR",
    "FI_ATOMIC_READ",
    "FI_ATOMIC_WRITE",
    "FI_CSWAP",
    "FI_CSWAP_NE",
    "FI_CSWAP_LE",
    "FI_CSWAP_LT",
    "FI_CSWAP_GE",
    "FI_CSWAP_GT",
    "FI_MSWAP",
];
const EQ_EVENT: Names = &[
    "FI_NOTIFY",
    "FI_CONNREQ",
    "FI_CONNECTED",
    "FI_SHUTDOWN",
    "FI_MR_COMPLETE",
    "FI_AV_COMPLETE",
    "FI_JOIN_COMPLETE",
];
const OP_TYPE: Names = &[
    "FI_OP_RECV",
    "FI_OP_SEND",
    "FI_OP_TRECV",
    "FI_OP_TSEND",
    "FI_OP_READ",
    "FI_OP_WRITE",
    "FI_OP_ATOMIC",
    "FI_OP_FETCH_ATOMIC",
    "FI_OP_COMPARE_ATOMIC",
    "FI_OP_CNTR_SET",
    "FI_OP_CNTR_ADD",
];
const COLLECTIVE_OP: Names = &[
    "FI_BARRIER",
    "FI_BROADCAST",
    "FI_ALLTOALL",
    "FI_ALLREDUCE",
    "FI_ALLGATHER",
    "FI_REDUCE_SCATTER",
    "FI_REDUCE",
    "FI_SCATTER",
    "FI_GATHER",
];
const HMEM_IFACE: Names = &[
    "FI_HMEM_SYSTEM",
    "FI_HMEM_CUDA",
    "FI_HMEM_ROCR",
    "FI_HMEM_ZE",
    "FI_HMEM_NEURON",
    "FI_HMEM_SYNAPSEAI",
];
const CQ_FORMAT: Names = &[
    "FI_CQ_FORMAT_UNSPEC",
    "FI_CQ_FORMAT_CONTEXT",
    "FI_CQ_FORMAT_MSG",
    "FI_CQ_FORMAT_DATA",
    "FI_CQ_FORMAT_TAGGED",
];
const LOG_LEVEL: Names = &["warn", "trace", "info", "debug"];
const LOG_SUBSYS: Names = &[
    "core", "fabric", "domain", "ep_ctrl", "ep_data", "av", "cq", "eq", "mr", "cntr",
];

/// A bit set as libfabric lists it: each known name followed by ", "
/// (unknown bits are not shown; the caller strips the last ", ").
fn bits(out: &mut String, table: Bits, v: u64) {
    for (bit, name) in table {
        if v & bit != 0 {
            out.push_str(name);
            out.push_str(", ");
        }
    }
}

/// A bit set inside brackets: `[ FI_A, FI_B ]`, `[  ]` when empty.
fn bracketed(out: &mut String, table: Bits, v: u64) {
    out.push_str("[ ");
    bits(out, table, v);
    strip_comma(out);
    out.push_str(" ]");
}

/// Completion order: NONE / STRICT for the ordering bits, then DATA.
fn comp_order(out: &mut String, v: u64) {
    const STRICT: u64 = 0x1ff;
    const DATA: u64 = 1 << 16;
    out.push_str("[ ");
    if v & STRICT == 0 {
        out.push_str("FI_ORDER_NONE, ");
    } else if v & STRICT == STRICT {
        out.push_str("FI_ORDER_STRICT, ");
    }
    if v & DATA != 0 {
        out.push_str("FI_ORDER_DATA, ");
    }
    strip_comma(out);
    out.push_str(" ]");
}

/// Removes one trailing ", ".
fn strip_comma(out: &mut String) {
    if out.ends_with(", ") {
        out.truncate(out.len() - 2);
    }
}

fn name(table: Names, v: u32) -> &'static str {
    match table.get(v as usize) {
        Some(n) if !n.is_empty() => n,
        _ => "Unknown",
    }
}

/// Protocols and address formats may be provider-specific values.
fn prov_name(table: Names, v: u32) -> &'static str {
    if v & FI_PROV_SPECIFIC != 0 {
        "Provider specific"
    } else {
        name(table, v)
    }
}

fn ver(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

fn ind(level: usize) -> &'static str {
    &"                "[..(4 * level).min(16)]
}

/// `%p` as glibc prints it.
fn ptr_p<T>(p: *const T) -> String {
    if p.is_null() {
        "(nil)".into()
    } else {
        format!("{p:p}")
    }
}

/// `%s` of a C string, `(null)` for NULL.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn s_or_null(p: *const c_char) -> String {
    // SAFETY: forwarded.
    unsafe { info::c_str(p) }.unwrap_or_else(|| "(null)".into())
}

/// An address the way libfabric prints it; "" when its format or family is
/// not one it can show.
///
/// # Safety
/// `addr` is NULL or valid for `len` bytes.
unsafe fn addr_str(format: u32, addr: *const c_void, len: usize) -> String {
    use ofi_core::consts::addr_format as af;
    if addr.is_null() {
        return "(null)".into();
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) };
    let family = if bytes.len() >= 2 {
        i32::from(u16::from_ne_bytes([bytes[0], bytes[1]]))
    } else {
        -1
    };
    let fmt = match format {
        af::FI_SOCKADDR_IN | af::FI_SOCKADDR_IN6 | af::FI_SOCKADDR => match family {
            libc::AF_INET if bytes.len() >= 16 && format != af::FI_SOCKADDR_IN6 => {
                af::FI_SOCKADDR_IN
            }
            libc::AF_INET6 if bytes.len() >= 28 && format != af::FI_SOCKADDR_IN => {
                af::FI_SOCKADDR_IN6
            }
            _ => return String::new(),
        },
        af::FI_ADDR_STR | af::FI_FORMAT_UNSPEC => format,
        _ => return String::new(),
    };
    ofi_core::info::addr_to_string(fmt, bytes)
}

fn tx_attr_text(out: &mut String, a: *const fi_tx_attr, level: usize) {
    let (i0, i1) = (ind(level), ind(level + 1));
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some(a) = (unsafe { a.as_ref() }) else {
        let _ = writeln!(out, "{i0}fi_tx_attr: (null)");
        return;
    };
    let _ = writeln!(out, "{i0}fi_tx_attr:");
    out.push_str(i1);
    out.push_str("caps: ");
    bracketed(out, CAPS, a.caps);
    let _ = write!(out, "\n{i1}mode: ");
    bracketed(out, MODE, a.mode);
    let _ = write!(out, "\n{i1}op_flags: ");
    bracketed(out, OP_FLAGS, a.op_flags);
    let _ = write!(out, "\n{i1}msg_order: ");
    bracketed(out, MSG_ORDER, a.msg_order);
    let _ = write!(out, "\n{i1}comp_order: ");
    comp_order(out, a.comp_order);
    let _ = writeln!(out);
    let _ = writeln!(out, "{i1}inject_size: {}", a.inject_size);
    let _ = writeln!(out, "{i1}size: {}", a.size);
    let _ = writeln!(out, "{i1}iov_limit: {}", a.iov_limit);
    let _ = writeln!(out, "{i1}rma_iov_limit: {}", a.rma_iov_limit);
    let _ = writeln!(out, "{i1}tclass: {:#x}", a.tclass);
}

fn rx_attr_text(out: &mut String, a: *const fi_rx_attr, level: usize) {
    let (i0, i1) = (ind(level), ind(level + 1));
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some(a) = (unsafe { a.as_ref() }) else {
        let _ = writeln!(out, "{i0}fi_rx_attr: (null)");
        return;
    };
    let _ = writeln!(out, "{i0}fi_rx_attr:");
    out.push_str(i1);
    out.push_str("caps: ");
    bracketed(out, CAPS, a.caps);
    let _ = write!(out, "\n{i1}mode: ");
    bracketed(out, MODE, a.mode);
    let _ = write!(out, "\n{i1}op_flags: ");
    bracketed(out, OP_FLAGS, a.op_flags);
    let _ = write!(out, "\n{i1}msg_order: ");
    bracketed(out, MSG_ORDER, a.msg_order);
    let _ = write!(out, "\n{i1}comp_order: ");
    comp_order(out, a.comp_order);
    let _ = writeln!(out);
    let _ = writeln!(out, "{i1}total_buffered_recv: {}", a.total_buffered_recv);
    let _ = writeln!(out, "{i1}size: {}", a.size);
    let _ = writeln!(out, "{i1}iov_limit: {}", a.iov_limit);
}

fn ep_attr_text(out: &mut String, a: *const fi_ep_attr, level: usize) {
    let (i0, i1) = (ind(level), ind(level + 1));
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some(a) = (unsafe { a.as_ref() }) else {
        let _ = writeln!(out, "{i0}fi_ep_attr: (null)");
        return;
    };
    let _ = writeln!(out, "{i0}fi_ep_attr:");
    let _ = writeln!(out, "{i1}type: {}", name(EP_TYPE, a.r#type));
    let _ = writeln!(out, "{i1}protocol: {}", prov_name(PROTOCOL, a.protocol));
    let _ = writeln!(out, "{i1}protocol_version: {}", a.protocol_version);
    let _ = writeln!(out, "{i1}max_msg_size: {}", a.max_msg_size);
    let _ = writeln!(out, "{i1}msg_prefix_size: {}", a.msg_prefix_size);
    let _ = writeln!(out, "{i1}max_order_raw_size: {}", a.max_order_raw_size);
    let _ = writeln!(out, "{i1}max_order_war_size: {}", a.max_order_war_size);
    let _ = writeln!(out, "{i1}max_order_waw_size: {}", a.max_order_waw_size);
    let _ = writeln!(out, "{i1}mem_tag_format: {:#018x}", a.mem_tag_format);
    let _ = writeln!(out, "{i1}tx_ctx_cnt: {}", a.tx_ctx_cnt);
    let _ = writeln!(out, "{i1}rx_ctx_cnt: {}", a.rx_ctx_cnt);
    let _ = writeln!(out, "{i1}auth_key_size: {}", a.auth_key_size);
}

fn domain_attr_text(out: &mut String, a: *const fi_domain_attr, level: usize) {
    let (i0, i1) = (ind(level), ind(level + 1));
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some(a) = (unsafe { a.as_ref() }) else {
        let _ = writeln!(out, "{i0}fi_domain_attr: (null)");
        return;
    };
    let _ = writeln!(out, "{i0}fi_domain_attr:");
    let _ = writeln!(out, "{i1}domain: {:#x}", a.domain as usize);
    // SAFETY: the name is NULL or a C string.
    let _ = writeln!(out, "{i1}name: {}", unsafe { s_or_null(a.name) });
    let _ = writeln!(out, "{i1}threading: {}", name(THREADING, a.threading));
    let _ = writeln!(
        out,
        "{i1}control_progress: {}",
        name(PROGRESS, a.control_progress)
    );
    let _ = writeln!(
        out,
        "{i1}data_progress: {}",
        name(PROGRESS, a.data_progress)
    );
    let _ = writeln!(
        out,
        "{i1}resource_mgmt: {}",
        name(RESOURCE_MGMT, a.resource_mgmt)
    );
    let _ = writeln!(out, "{i1}av_type: {}", name(AV_TYPE, a.av_type));
    let _ = write!(out, "{i1}mr_mode: ");
    bracketed(out, MR_MODE, u64::from(a.mr_mode as u32));
    let _ = writeln!(out);
    let _ = writeln!(out, "{i1}mr_key_size: {}", a.mr_key_size);
    let _ = writeln!(out, "{i1}cq_data_size: {}", a.cq_data_size);
    let _ = writeln!(out, "{i1}cq_cnt: {}", a.cq_cnt);
    let _ = writeln!(out, "{i1}ep_cnt: {}", a.ep_cnt);
    let _ = writeln!(out, "{i1}tx_ctx_cnt: {}", a.tx_ctx_cnt);
    let _ = writeln!(out, "{i1}rx_ctx_cnt: {}", a.rx_ctx_cnt);
    let _ = writeln!(out, "{i1}max_ep_tx_ctx: {}", a.max_ep_tx_ctx);
    let _ = writeln!(out, "{i1}max_ep_rx_ctx: {}", a.max_ep_rx_ctx);
    let _ = writeln!(out, "{i1}max_ep_stx_ctx: {}", a.max_ep_stx_ctx);
    let _ = writeln!(out, "{i1}max_ep_srx_ctx: {}", a.max_ep_srx_ctx);
    let _ = writeln!(out, "{i1}cntr_cnt: {}", a.cntr_cnt);
    let _ = writeln!(out, "{i1}mr_iov_limit: {}", a.mr_iov_limit);
    let _ = write!(out, "{i1}caps: ");
    bracketed(out, CAPS, a.caps);
    let _ = write!(out, "\n{i1}mode: ");
    bracketed(out, MODE, a.mode);
    let _ = writeln!(out);
    let _ = writeln!(out, "{i1}auth_key_size: {}", a.auth_key_size);
    let _ = writeln!(out, "{i1}max_err_data: {}", a.max_err_data);
    let _ = writeln!(out, "{i1}mr_cnt: {}", a.mr_cnt);
    let _ = writeln!(out, "{i1}tclass: {:#x}", a.tclass);
}

fn fabric_attr_text(out: &mut String, a: *const fi_fabric_attr, level: usize) {
    let (i0, i1) = (ind(level), ind(level + 1));
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some(a) = (unsafe { a.as_ref() }) else {
        let _ = writeln!(out, "{i0}fi_fabric_attr: (null)");
        return;
    };
    let _ = writeln!(out, "{i0}fi_fabric_attr:");
    // SAFETY: the strings are NULL or C strings.
    let (n, p) = unsafe { (s_or_null(a.name), s_or_null(a.prov_name)) };
    let _ = writeln!(out, "{i1}name: {n}");
    let _ = writeln!(out, "{i1}prov_name: {p}");
    let _ = writeln!(out, "{i1}prov_version: {}", ver(a.prov_version));
    let _ = writeln!(out, "{i1}api_version: {}", ver(a.api_version));
}

fn info_text(out: &mut String, i: &fi_info) {
    let i1 = ind(1);
    out.push_str("fi_info:\n");
    let _ = write!(out, "{i1}caps: ");
    bracketed(out, CAPS, i.caps);
    let _ = write!(out, "\n{i1}mode: ");
    bracketed(out, MODE, i.mode);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{i1}addr_format: {}",
        prov_name(ADDR_FORMAT, i.addr_format)
    );
    let _ = writeln!(out, "{i1}src_addrlen: {}", i.src_addrlen);
    let _ = writeln!(out, "{i1}dest_addrlen: {}", i.dest_addrlen);
    // SAFETY: the addresses are NULL or hold their stated lengths.
    let (s, d) = unsafe {
        (
            addr_str(i.addr_format, i.src_addr, i.src_addrlen),
            addr_str(i.addr_format, i.dest_addr, i.dest_addrlen),
        )
    };
    let _ = writeln!(out, "{i1}src_addr: {s}");
    let _ = writeln!(out, "{i1}dest_addr: {d}");
    let _ = writeln!(out, "{i1}handle: {}", ptr_p(i.handle));
    tx_attr_text(out, i.tx_attr, 1);
    rx_attr_text(out, i.rx_attr, 1);
    ep_attr_text(out, i.ep_attr, 1);
    domain_attr_text(out, i.domain_attr, 1);
    fabric_attr_text(out, i.fabric_attr, 1);
    let _ = writeln!(out, "{i1}nic: {}", ptr_p(i.nic));
}

/// Reads a 4-byte enum value.
///
/// # Safety
/// `data` points to at least 4 readable bytes.
unsafe fn read_u32(data: *const c_void) -> u32 {
    // SAFETY: the caller's contract; C enums may be unaligned in packed data.
    unsafe { data.cast::<u32>().read_unaligned() }
}

/// Reads a 64-bit flag set.
///
/// # Safety
/// `data` points to 8 readable bytes.
unsafe fn read_u64(data: *const c_void) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { data.cast::<u64>().read_unaligned() }
}

/// What `fi_tostr` prints for non-NULL `data`, or `None` for an unknown type.
/// `FI_TYPE_FID` objects with their own `tostr` slot are handled by the caller.
///
/// # Safety
/// `data` points to a value of the type `t` names.
unsafe fn tostr_text(data: *const c_void, t: fi_type) -> Option<String> {
    use crate::abi::tostr_type::*;
    let mut out = String::new();
    // SAFETY: `data` points to a value of the named type.
    unsafe {
        match t {
            FI_TYPE_INFO => info_text(&mut out, &*data.cast::<fi_info>()),
            FI_TYPE_EP_TYPE => out.push_str(name(EP_TYPE, read_u32(data))),
            FI_TYPE_CAPS => bits(&mut out, CAPS, read_u64(data)),
            FI_TYPE_OP_FLAGS => bits(&mut out, OP_FLAGS, read_u64(data)),
            FI_TYPE_ADDR_FORMAT => out.push_str(prov_name(ADDR_FORMAT, read_u32(data))),
            FI_TYPE_TX_ATTR => tx_attr_text(&mut out, data.cast(), 0),
            FI_TYPE_RX_ATTR => rx_attr_text(&mut out, data.cast(), 0),
            FI_TYPE_EP_ATTR => ep_attr_text(&mut out, data.cast(), 0),
            FI_TYPE_DOMAIN_ATTR => domain_attr_text(&mut out, data.cast(), 0),
            FI_TYPE_FABRIC_ATTR => fabric_attr_text(&mut out, data.cast(), 0),
            FI_TYPE_THREADING => out.push_str(name(THREADING, read_u32(data))),
            FI_TYPE_PROGRESS => out.push_str(name(PROGRESS, read_u32(data))),
            FI_TYPE_PROTOCOL => out.push_str(prov_name(PROTOCOL, read_u32(data))),
            FI_TYPE_MSG_ORDER => bits(&mut out, MSG_ORDER, read_u64(data)),
            FI_TYPE_MODE => bits(&mut out, MODE, read_u64(data)),
            FI_TYPE_AV_TYPE => out.push_str(name(AV_TYPE, read_u32(data))),
            FI_TYPE_ATOMIC_TYPE => out.push_str(name(ATOMIC_TYPE, read_u32(data))),
            FI_TYPE_ATOMIC_OP => out.push_str(name(ATOMIC_OP, read_u32(data))),
            FI_TYPE_VERSION => out.push_str(PACKAGE_VERSION),
            FI_TYPE_EQ_EVENT => out.push_str(name(EQ_EVENT, read_u32(data))),
            FI_TYPE_CQ_EVENT_FLAGS => bits(&mut out, CQ_EVENT_FLAGS, read_u64(data)),
            FI_TYPE_MR_MODE => bits(&mut out, MR_MODE, u64::from(read_u32(data))),
            FI_TYPE_OP_TYPE => out.push_str(name(OP_TYPE, read_u32(data))),
            FI_TYPE_FID => {
                let _ = writeln!(out, "fid: {:p}", data);
            }
            FI_TYPE_COLLECTIVE_OP => out.push_str(name(COLLECTIVE_OP, read_u32(data))),
            FI_TYPE_HMEM_IFACE => out.push_str(name(HMEM_IFACE, read_u32(data))),
            FI_TYPE_CQ_FORMAT => out.push_str(name(CQ_FORMAT, read_u32(data))),
            FI_TYPE_LOG_LEVEL => out.push_str(name(LOG_LEVEL, read_u32(data))),
            FI_TYPE_LOG_SUBSYS => out.push_str(name(LOG_SUBSYS, read_u32(data))),
            _ => return None,
        }
    }
    Some(out)
}

/// The object's own `tostr` slot, if its ops table has one.
///
/// # Safety
/// `data` points to a valid `struct fid`.
unsafe fn fid_tostr_slot(
    data: *const c_void,
) -> Option<unsafe extern "C" fn(*const fid, *mut c_char, size_t) -> c_int> {
    // SAFETY: the caller's contract; the ops table is NULL or valid.
    let ops = unsafe { (*data.cast::<fid>()).ops.as_ref() }?;
    if ops.size <= std::mem::offset_of!(fi_ops, tostr) {
        return None;
    }
    ops.tostr
}

static NULL_TEXT: &CStr = c"(null)";
static UNKNOWN_TYPE: &str = "Unknown type";

/// Copies `text` into `buf` as libfabric does: at most `len - 2` bytes,
/// a trailing ", " removed, NUL-terminated.
///
/// # Safety
/// `buf` is writable for `len >= 1` bytes.
unsafe fn put(buf: *mut c_char, len: usize, text: &str) {
    let mut n = text.len().min(len.saturating_sub(2));
    let b = text.as_bytes();
    if n >= 2 && &b[n - 2..n] == b", " {
        n -= 2;
    }
    // SAFETY: n + 1 <= len bytes are written; `text` has n readable bytes.
    unsafe {
        ptr::copy_nonoverlapping(b.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// `fi_tostr_r` (FABRIC_1.4): formats `data` of type `datatype` into `buf`
/// (at most `len` bytes, NUL included). Returns `buf`, the static "(null)"
/// for NULL `data`, or NULL for a NULL or empty buffer.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes; `data` is NULL or points to a
/// value of the type `datatype` names.
pub unsafe extern "C" fn fi_tostr_r(
    buf: *mut c_char,
    len: size_t,
    data: *const c_void,
    datatype: fi_type,
) -> *mut c_char {
    ffi(ptr::null_mut(), || {
        if buf.is_null() || len == 0 {
            return ptr::null_mut();
        }
        if data.is_null() {
            return NULL_TEXT.as_ptr().cast_mut();
        }
        if datatype == tostr_type::FI_TYPE_FID {
            // SAFETY: FI_TYPE_FID data is a struct fid.
            if let Some(f) = unsafe { fid_tostr_slot(data) } {
                // SAFETY: buf has len writable bytes; the object formats itself.
                unsafe {
                    *buf = 0;
                    f(data.cast(), buf, len);
                }
                return buf;
            }
        }
        // SAFETY: the caller's contract on data.
        let text = unsafe { tostr_text(data, datatype) };
        // SAFETY: buf has len >= 1 writable bytes.
        unsafe { put(buf, len, text.as_deref().unwrap_or(UNKNOWN_TYPE)) };
        buf
    })
}

/// `fi_tostr`: like [`fi_tostr_r`] into a buffer owned by the calling
/// thread, valid until its next `fi_tostr` call.
///
/// # Safety
/// `data` is NULL or points to a value of the type `datatype` names.
pub unsafe extern "C" fn fi_tostr(data: *const c_void, datatype: fi_type) -> *mut c_char {
    thread_local! {
        static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    ffi(ptr::null_mut(), || {
        if data.is_null() {
            return NULL_TEXT.as_ptr().cast_mut();
        }
        let text = if datatype == tostr_type::FI_TYPE_FID {
            // SAFETY: FI_TYPE_FID data is a struct fid.
            match unsafe { fid_tostr_slot(data) } {
                Some(f) => {
                    let mut tmp = vec![0u8; 8192];
                    // SAFETY: tmp has 8192 writable bytes; the object formats itself.
                    unsafe { f(data.cast(), tmp.as_mut_ptr().cast(), tmp.len()) };
                    let end = tmp.iter().position(|&b| b == 0).unwrap_or(tmp.len() - 1);
                    String::from_utf8_lossy(&tmp[..end]).into_owned()
                }
                // SAFETY: as above.
                None => unsafe { tostr_text(data, datatype) }.unwrap_or_default(),
            }
        } else {
            // SAFETY: the caller's contract on data.
            unsafe { tostr_text(data, datatype) }.unwrap_or_else(|| UNKNOWN_TYPE.into())
        };
        BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            b.resize(text.len() + 2, 0);
            // SAFETY: b holds text.len() + 2 bytes, so nothing is cut.
            unsafe { put(b.as_mut_ptr().cast(), b.len(), &text) };
            b.as_mut_ptr().cast()
        })
    })
}

// ---------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------

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
unsafe fn provider_name(prov: *const fi_provider) -> String {
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

// ---------------------------------------------------------------------------
// Logging
// ---------------------------------------------------------------------------

/// FI_LOG_LEVEL, FI_LOG_PROV and FI_LOG_SUBSYS, read once.
struct LogConfig {
    /// Highest enabled level (`FI_LOG_*`), `None`: logging off.
    level: Option<fi_log_level>,
    /// Provider filter (`prov1,prov2` or `^prov`).
    prov: Option<ofi_core::hints::ProviderFilter>,
    /// Subsystem filter (`cq,eq` or `^ep_data`), same syntax as FI_LOG_PROV.
    subsys: Option<ofi_core::hints::ProviderFilter>,
}

fn log_config() -> &'static LogConfig {
    static CFG: OnceLock<LogConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let level = std::env::var("FI_LOG_LEVEL").ok().and_then(|v| {
            let v = v.trim().to_ascii_lowercase();
            LOG_LEVEL
                .iter()
                .position(|n| *n == v)
                .map(|p| p as fi_log_level)
        });
        let prov = std::env::var("FI_LOG_PROV")
            .ok()
            .and_then(|v| ofi_core::hints::ProviderFilter::parse(&v).ok());
        let subsys = std::env::var("FI_LOG_SUBSYS")
            .ok()
            .and_then(|v| ofi_core::hints::ProviderFilter::parse(&v).ok());
        LogConfig {
            level,
            prov,
            subsys,
        }
    })
}

fn log_enabled(prov: &str, level: fi_log_level, subsys: fi_log_subsys) -> bool {
    log_config().allows(prov, level, subsys)
}

impl LogConfig {
    /// Whether a message of this provider, level and subsystem is printed.
    fn allows(&self, prov: &str, level: fi_log_level, subsys: fi_log_subsys) -> bool {
        self.level.is_some_and(|l| level <= l)
            && self.prov.as_ref().is_none_or(|f| f.allows(prov))
            && self
                .subsys
                .as_ref()
                .is_none_or(|f| f.allows(name(LOG_SUBSYS, subsys)))
    }
}

/// `fi_log_enabled`: whether a message of this provider, level and
/// subsystem would be printed (FI_LOG_LEVEL, FI_LOG_PROV, FI_LOG_SUBSYS).
///
/// # Safety
/// `prov` is NULL or a valid `struct fi_provider`.
pub unsafe extern "C" fn fi_log_enabled(
    prov: *const fi_provider,
    level: fi_log_level,
    subsys: fi_log_subsys,
) -> c_int {
    ffi(0, || {
        // SAFETY: the caller's contract.
        let name = unsafe { provider_name(prov) };
        c_int::from(log_enabled(&name, level, subsys))
    })
}

/// `fi_log_ready` (FABRIC_1.6): like [`fi_log_enabled`], but at most once
/// per second per `showtime` (sparse logging).
///
/// # Safety
/// `prov` is NULL or a valid `struct fi_provider`; `showtime` is NULL or
/// points to the caller's timestamp.
pub unsafe extern "C" fn fi_log_ready(
    prov: *const fi_provider,
    level: fi_log_level,
    subsys: fi_log_subsys,
    showtime: *mut u64,
) -> c_int {
    ffi(0, || {
        // SAFETY: the caller's contract.
        let name = unsafe { provider_name(prov) };
        if !log_enabled(&name, level, subsys) {
            return 0;
        }
        // SAFETY: showtime is NULL or writable (caller's contract).
        let Some(t) = (unsafe { showtime.as_mut() }) else {
            return 1;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if now < *t {
            return 0;
        }
        *t = now + 1000;
        1
    })
}

extern "C" {
    /// C's `vsnprintf`; on x86-64 a `va_list` is passed as a pointer.
    fn vsnprintf(s: *mut c_char, n: size_t, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

/// Expands a printf format with a C `va_list`.
///
/// # Safety
/// `fmt` is a C format string whose arguments `ap` holds; `ap` points to a
/// 24-byte x86-64 `va_list` that is not used afterwards.
unsafe fn format_va(fmt: *const c_char, ap: *mut c_void) -> Option<String> {
    if fmt.is_null() {
        return None;
    }
    let mut copy = [0u8; 24];
    // SAFETY: ap is a 24-byte va_list; the copy is a va_copy on x86-64.
    unsafe { ptr::copy_nonoverlapping(ap.cast::<u8>(), copy.as_mut_ptr(), 24) };
    // SAFETY: sizing call: NULL buffer of size 0.
    let n = unsafe { vsnprintf(ptr::null_mut(), 0, fmt, ap) };
    let n = usize::try_from(n).ok()?;
    let mut buf = vec![0u8; n + 1];
    // SAFETY: buf holds n + 1 bytes; `copy` is an unused va_list.
    unsafe {
        vsnprintf(
            buf.as_mut_ptr().cast(),
            n + 1,
            fmt,
            copy.as_mut_ptr().cast(),
        )
    };
    buf.truncate(n);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The body of `fi_log`: `regs` holds the six integer argument registers
/// (prov, level, subsys, func, line, fmt), `ap` the variadic arguments.
///
/// # Safety
/// Called only by the `fi_log` entry in `compat` with the caller's
/// arguments.
pub(crate) unsafe extern "C" fn fi_log_va(regs: *const u64, ap: *mut c_void) {
    ffi((), || {
        // SAFETY: regs holds six saved registers (the entry's contract).
        let r = unsafe { std::slice::from_raw_parts(regs, 6) };
        let prov = r[0] as *const fi_provider;
        let (level, subsys) = (r[1] as u32, r[2] as u32);
        let func = r[3] as *const c_char;
        let line = r[4] as u32 as c_int;
        let fmt = r[5] as *const c_char;
        // SAFETY: the arguments of fi_log as the provider passed them.
        let (name, func, msg) =
            unsafe { (provider_name(prov), s_or_null(func), format_va(fmt, ap)) };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let text = format!(
            "libfabric:{}:{}::{}:{}:{}():{}<{}> {}",
            std::process::id(),
            now,
            name,
            name_or_unknown(LOG_SUBSYS, subsys),
            func,
            line,
            name_or_unknown(LOG_LEVEL, level),
            msg.unwrap_or_default()
        );
        let text = if text.ends_with('\n') {
            text
        } else {
            text + "\n"
        };
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(text.as_bytes());
    })
}

fn name_or_unknown(table: Names, v: u32) -> &'static str {
    name(table, v)
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

    fn tostr_r(len: usize, data: *const c_void, t: fi_type) -> String {
        let mut b = vec![0 as c_char; len.max(1)];
        // SAFETY: b has len bytes.
        let p = unsafe { fi_tostr_r(b.as_mut_ptr(), len, data, t) };
        // SAFETY: the result is NULL or a C string.
        unsafe { info::c_str(p) }.unwrap_or_else(|| "<NULL>".into())
    }

    #[test]
    fn bit_sets_truncate_like_libfabric() {
        let caps: u64 = (1 << 1) | (1 << 3) | (1 << 10);
        let d = (&caps as *const u64).cast();
        let t = tostr_type::FI_TYPE_CAPS;
        assert_eq!(tostr_r(100, d, t), "FI_MSG, FI_TAGGED, FI_RECV");
        assert_eq!(tostr_r(10, d, t), "FI_MSG");
        assert_eq!(tostr_r(9, d, t), "FI_MSG,");
        assert_eq!(tostr_r(20, d, t), "FI_MSG, FI_TAGGED,");
        assert_eq!(tostr_r(2, d, t), "");
        assert_eq!(tostr_r(0, d, t), "<NULL>");
        assert_eq!(tostr_r(5, ptr::null(), t), "(null)");
        assert_eq!(tostr_r(100, d, 99), "Unknown type");
    }

    #[test]
    fn enums_name_or_unknown() {
        let v: u32 = 25;
        assert_eq!(
            tostr_r(64, (&v as *const u32).cast(), tostr_type::FI_TYPE_PROTOCOL),
            "FI_PROTO_XNET"
        );
        let v: u32 = 7;
        assert_eq!(
            tostr_r(64, (&v as *const u32).cast(), tostr_type::FI_TYPE_PROTOCOL),
            "Unknown"
        );
        let v: u32 = u32::MAX;
        assert_eq!(
            tostr_r(
                64,
                (&v as *const u32).cast(),
                tostr_type::FI_TYPE_ADDR_FORMAT
            ),
            "Provider specific"
        );
        assert_eq!(
            tostr_r(64, (&v as *const u32).cast(), tostr_type::FI_TYPE_VERSION),
            "1.17.0"
        );
    }

    #[test]
    fn comp_order_forms() {
        let mut s = String::new();
        comp_order(&mut s, 1 << 16);
        assert_eq!(s, "[ FI_ORDER_NONE, FI_ORDER_DATA ]");
        s.clear();
        comp_order(&mut s, 0x2 | (1 << 16));
        assert_eq!(s, "[ FI_ORDER_DATA ]");
        s.clear();
        comp_order(&mut s, 0x1ff);
        assert_eq!(s, "[ FI_ORDER_STRICT ]");
    }

    #[test]
    fn strerror_texts() {
        // SAFETY: fi_strerror returns C strings.
        let s = |c| unsafe { info::c_str(fi_strerror(c)) }.unwrap_or_default();
        assert_eq!(s(FI_EAGAIN), "Resource temporarily unavailable");
        assert_eq!(s(-FI_ETRUNC), "Truncation error");
        assert_eq!(s(4000), "Unspecified error");
    }

    #[test]
    fn log_filters() {
        use ofi_core::hints::ProviderFilter;
        let off = LogConfig {
            level: None,
            prov: None,
            subsys: None,
        };
        assert!(!off.allows("tcp", log_level::FI_LOG_WARN, 0));
        let info = LogConfig {
            level: Some(log_level::FI_LOG_INFO),
            prov: ProviderFilter::parse("^shm").ok(),
            subsys: ProviderFilter::parse("cq,eq").ok(),
        };
        assert!(info.allows("tcp", log_level::FI_LOG_WARN, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("tcp", log_level::FI_LOG_DEBUG, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("shm", log_level::FI_LOG_WARN, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("tcp", log_level::FI_LOG_WARN, log_subsys::FI_LOG_MR));
    }

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
