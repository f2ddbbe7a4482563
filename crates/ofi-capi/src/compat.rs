//! The exported C symbols with libfabric's symbol versions, and the
//! FABRIC_1.0–1.2 entry points that take the older structure layouts.
//!
//! Every exported name is a small assembly entry that jumps to a Rust
//! function (none of which is `#[no_mangle]`): rustc's own version script
//! then lists none of them, and `libfabric.map` alone assigns the version
//! nodes. Names with several versions get `.symver` aliases, `@@` marking
//! the default.
//!
//! What changed between the ABI versions (fields were only ever appended):
//! - FABRIC_1.0: `fi_tx_attr` without `tclass`; `fi_ep_attr` without
//!   `auth_key_size`/`auth_key`; `fi_domain_attr` ending at
//!   `max_ep_srx_ctx`; `fi_fabric_attr` without `api_version`; `fi_info`
//!   without `nic`.
//! - FABRIC_1.1: `fi_ep_attr` and `fi_fabric_attr` as today; `fi_domain_attr`
//!   gained `cntr_cnt` … `mr_cnt` (not `tclass`); `fi_tx_attr` still
//!   without `tclass`; `fi_info` without `nic`.
//! - FABRIC_1.2: as 1.1, plus `fi_info.nic`.
//! - FABRIC_1.3: today's layout (`tclass` in `fi_tx_attr` and `fi_domain_attr`).
//!
//! An old structure is therefore a prefix of today's: the old entry points
//! copy it into a zeroed current structure and call the current function.
//! What they return is in today's layout, which old callers read as a
//! prefix, as libfabric does.
#![allow(non_camel_case_types)]

use crate::abi::*;
use crate::guard::{self, ffi};
use crate::top;
use ofi_core::error::errno::*;
use std::mem::size_of;
use std::ptr;

/// `struct fi_tx_attr` of FABRIC_1.0–1.2 (no `tclass`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_tx_attr_1_0 {
    /// Capabilities.
    pub caps: u64,
    /// Modes.
    pub mode: u64,
    /// Default operation flags.
    pub op_flags: u64,
    /// Message ordering.
    pub msg_order: u64,
    /// Completion ordering.
    pub comp_order: u64,
    /// Largest inject size.
    pub inject_size: size_t,
    /// Queue depth.
    pub size: size_t,
    /// Largest iov count.
    pub iov_limit: size_t,
    /// Largest RMA iov count.
    pub rma_iov_limit: size_t,
}

/// `struct fi_ep_attr` of FABRIC_1.0 (no authorization key).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ep_attr_1_0 {
    /// Endpoint type.
    pub r#type: fi_ep_type,
    /// Wire protocol.
    pub protocol: u32,
    /// Wire protocol version.
    pub protocol_version: u32,
    /// Largest message.
    pub max_msg_size: size_t,
    /// Message prefix size.
    pub msg_prefix_size: size_t,
    /// Read-after-write ordering limit.
    pub max_order_raw_size: size_t,
    /// Write-after-read ordering limit.
    pub max_order_war_size: size_t,
    /// Write-after-write ordering limit.
    pub max_order_waw_size: size_t,
    /// Tag format.
    pub mem_tag_format: u64,
    /// Transmit contexts.
    pub tx_ctx_cnt: size_t,
    /// Receive contexts.
    pub rx_ctx_cnt: size_t,
}

/// `struct fi_domain_attr` of FABRIC_1.0 (ends at `max_ep_srx_ctx`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_domain_attr_1_0 {
    /// Opened domain.
    pub domain: *mut fid_domain,
    /// Domain name.
    pub name: *mut c_char,
    /// Threading model.
    pub threading: fi_threading,
    /// Control progress.
    pub control_progress: fi_progress,
    /// Data progress.
    pub data_progress: fi_progress,
    /// Resource management.
    pub resource_mgmt: fi_resource_mgmt,
    /// AV type.
    pub av_type: fi_av_type,
    /// MR mode (`enum fi_mr_mode` then).
    pub mr_mode: c_int,
    /// Key size.
    pub mr_key_size: size_t,
    /// CQ data size.
    pub cq_data_size: size_t,
    /// CQs.
    pub cq_cnt: size_t,
    /// Endpoints.
    pub ep_cnt: size_t,
    /// Transmit contexts.
    pub tx_ctx_cnt: size_t,
    /// Receive contexts.
    pub rx_ctx_cnt: size_t,
    /// Transmit contexts per endpoint.
    pub max_ep_tx_ctx: size_t,
    /// Receive contexts per endpoint.
    pub max_ep_rx_ctx: size_t,
    /// Shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: size_t,
    /// Shared receive contexts per endpoint.
    pub max_ep_srx_ctx: size_t,
}

/// `struct fi_domain_attr` of FABRIC_1.1–1.2 (no `tclass`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_domain_attr_1_1 {
    /// Opened domain.
    pub domain: *mut fid_domain,
    /// Domain name.
    pub name: *mut c_char,
    /// Threading model.
    pub threading: fi_threading,
    /// Control progress.
    pub control_progress: fi_progress,
    /// Data progress.
    pub data_progress: fi_progress,
    /// Resource management.
    pub resource_mgmt: fi_resource_mgmt,
    /// AV type.
    pub av_type: fi_av_type,
    /// MR mode bits.
    pub mr_mode: c_int,
    /// Key size.
    pub mr_key_size: size_t,
    /// CQ data size.
    pub cq_data_size: size_t,
    /// CQs.
    pub cq_cnt: size_t,
    /// Endpoints.
    pub ep_cnt: size_t,
    /// Transmit contexts.
    pub tx_ctx_cnt: size_t,
    /// Receive contexts.
    pub rx_ctx_cnt: size_t,
    /// Transmit contexts per endpoint.
    pub max_ep_tx_ctx: size_t,
    /// Receive contexts per endpoint.
    pub max_ep_rx_ctx: size_t,
    /// Shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: size_t,
    /// Shared receive contexts per endpoint.
    pub max_ep_srx_ctx: size_t,
    /// Counters.
    pub cntr_cnt: size_t,
    /// Largest iov count of one registration.
    pub mr_iov_limit: size_t,
    /// Domain capabilities.
    pub caps: u64,
    /// Domain modes.
    pub mode: u64,
    /// Authorization key.
    pub auth_key: *mut u8,
    /// Length of `auth_key`.
    pub auth_key_size: size_t,
    /// Largest provider error data.
    pub max_err_data: size_t,
    /// Memory regions.
    pub mr_cnt: size_t,
}

/// `struct fi_fabric_attr` of FABRIC_1.0 (no `api_version`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_fabric_attr_1_0 {
    /// Opened fabric.
    pub fabric: *mut fid_fabric,
    /// Fabric name.
    pub name: *mut c_char,
    /// Provider name.
    pub prov_name: *mut c_char,
    /// Provider version.
    pub prov_version: u32,
}

/// `struct fi_info` of FABRIC_1.0 (no `nic`, 1.0 attributes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_info_1_0 {
    /// Next.
    pub next: *mut fi_info_1_0,
    /// Capabilities.
    pub caps: u64,
    /// Modes.
    pub mode: u64,
    /// Address format.
    pub addr_format: u32,
    /// Source address length.
    pub src_addrlen: size_t,
    /// Destination address length.
    pub dest_addrlen: size_t,
    /// Source address.
    pub src_addr: *mut c_void,
    /// Destination address.
    pub dest_addr: *mut c_void,
    /// Handle.
    pub handle: fid_t,
    /// Transmit attributes.
    pub tx_attr: *mut fi_tx_attr_1_0,
    /// Receive attributes (unchanged since 1.0).
    pub rx_attr: *mut fi_rx_attr,
    /// Endpoint attributes.
    pub ep_attr: *mut fi_ep_attr_1_0,
    /// Domain attributes.
    pub domain_attr: *mut fi_domain_attr_1_0,
    /// Fabric attributes.
    pub fabric_attr: *mut fi_fabric_attr_1_0,
}

/// `struct fi_info` of FABRIC_1.1 (no `nic`, 1.1 attributes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_info_1_1 {
    /// Next.
    pub next: *mut fi_info_1_1,
    /// Capabilities.
    pub caps: u64,
    /// Modes.
    pub mode: u64,
    /// Address format.
    pub addr_format: u32,
    /// Source address length.
    pub src_addrlen: size_t,
    /// Destination address length.
    pub dest_addrlen: size_t,
    /// Source address.
    pub src_addr: *mut c_void,
    /// Destination address.
    pub dest_addr: *mut c_void,
    /// Handle.
    pub handle: fid_t,
    /// Transmit attributes.
    pub tx_attr: *mut fi_tx_attr_1_0,
    /// Receive attributes.
    pub rx_attr: *mut fi_rx_attr,
    /// Endpoint attributes (today's layout).
    pub ep_attr: *mut fi_ep_attr,
    /// Domain attributes.
    pub domain_attr: *mut fi_domain_attr_1_1,
    /// Fabric attributes (today's layout).
    pub fabric_attr: *mut fi_fabric_attr,
}

/// `struct fi_info` of FABRIC_1.2 (1.1 attributes, with `nic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_info_1_2 {
    /// Next.
    pub next: *mut fi_info_1_2,
    /// Capabilities.
    pub caps: u64,
    /// Modes.
    pub mode: u64,
    /// Address format.
    pub addr_format: u32,
    /// Source address length.
    pub src_addrlen: size_t,
    /// Destination address length.
    pub dest_addrlen: size_t,
    /// Source address.
    pub src_addr: *mut c_void,
    /// Destination address.
    pub dest_addr: *mut c_void,
    /// Handle.
    pub handle: fid_t,
    /// Transmit attributes.
    pub tx_attr: *mut fi_tx_attr_1_0,
    /// Receive attributes.
    pub rx_attr: *mut fi_rx_attr,
    /// Endpoint attributes.
    pub ep_attr: *mut fi_ep_attr,
    /// Domain attributes.
    pub domain_attr: *mut fi_domain_attr_1_1,
    /// Fabric attributes.
    pub fabric_attr: *mut fi_fabric_attr,
    /// NIC.
    pub nic: *mut fid_nic,
}

/// Copies an older structure into a zeroed current one of which it is a
/// prefix (fields only ever appended); NULL gives `None`.
///
/// # Safety
/// `Old` is a layout prefix of `New` (checked by tests/layout.rs), `New` is
/// valid when zeroed, and `old` is NULL or valid.
unsafe fn upgrade<Old, New>(old: *const Old) -> Option<New> {
    const { assert!(size_of::<Old>() <= size_of::<New>()) };
    if old.is_null() {
        return None;
    }
    // SAFETY: New is plain C data, valid when zeroed (caller's contract).
    let mut new: New = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is valid for size_of::<Old>() bytes, which fit in `new`.
    unsafe {
        ptr::copy_nonoverlapping(
            old.cast::<u8>(),
            (&mut new as *mut New).cast::<u8>(),
            size_of::<Old>(),
        )
    };
    Some(new)
}

/// The attribute structs of an old `fi_info`, upgraded and kept alive
/// while a current-layout view of it is used.
struct Upgraded {
    info: fi_info,
    tx: Option<fi_tx_attr>,
    rx: Option<fi_rx_attr>,
    ep: Option<fi_ep_attr>,
    domain: Option<fi_domain_attr>,
    fabric: Option<fi_fabric_attr>,
}

impl Upgraded {
    /// A current-layout `fi_info` pointing at the upgraded attributes (and
    /// at the old structure's strings and addresses, which are not copied).
    fn view(&mut self) -> *const fi_info {
        fn p<T>(o: &mut Option<T>) -> *mut T {
            o.as_mut().map_or(ptr::null_mut(), |r| r as *mut T)
        }
        self.info.tx_attr = p(&mut self.tx);
        self.info.rx_attr = p(&mut self.rx);
        self.info.ep_attr = p(&mut self.ep);
        self.info.domain_attr = p(&mut self.domain);
        self.info.fabric_attr = p(&mut self.fabric);
        self.info.next = ptr::null_mut();
        &self.info
    }
}

/// The common part of the three old `fi_info` layouts (all fields up to
/// `fabric_attr`), upgraded attribute by attribute.
macro_rules! upgrade_info {
    ($old:expr, $tx:ty, $ep:ty, $dom:ty, $fab:ty) => {{
        let o = $old;
        // SAFETY: the old info's attribute pointers are NULL or valid
        // structures of the old layouts, which are prefixes of today's.
        unsafe {
            let mut info: fi_info = std::mem::zeroed();
            info.caps = o.caps;
            info.mode = o.mode;
            info.addr_format = o.addr_format;
            info.src_addrlen = o.src_addrlen;
            info.dest_addrlen = o.dest_addrlen;
            info.src_addr = o.src_addr;
            info.dest_addr = o.dest_addr;
            info.handle = o.handle;
            Upgraded {
                info,
                tx: upgrade::<$tx, fi_tx_attr>(o.tx_attr),
                rx: upgrade::<fi_rx_attr, fi_rx_attr>(o.rx_attr),
                ep: upgrade::<$ep, fi_ep_attr>(o.ep_attr),
                domain: upgrade::<$dom, fi_domain_attr>(o.domain_attr),
                fabric: upgrade::<$fab, fi_fabric_attr>(o.fabric_attr),
            }
        }
    }};
}

/// # Safety
/// `p` is a valid 1.0 info.
unsafe fn up_1_0(p: *const fi_info_1_0) -> Upgraded {
    // SAFETY: the caller's contract.
    let o = unsafe { &*p };
    upgrade_info!(
        o,
        fi_tx_attr_1_0,
        fi_ep_attr_1_0,
        fi_domain_attr_1_0,
        fi_fabric_attr_1_0
    )
}

/// # Safety
/// `p` is a valid 1.1 info.
unsafe fn up_1_1(p: *const fi_info_1_1) -> Upgraded {
    // SAFETY: the caller's contract.
    let o = unsafe { &*p };
    upgrade_info!(
        o,
        fi_tx_attr_1_0,
        fi_ep_attr,
        fi_domain_attr_1_1,
        fi_fabric_attr
    )
}

/// # Safety
/// `p` is a valid 1.2 info.
unsafe fn up_1_2(p: *const fi_info_1_2) -> Upgraded {
    // SAFETY: the caller's contract.
    let o = unsafe { &*p };
    let mut u = upgrade_info!(
        o,
        fi_tx_attr_1_0,
        fi_ep_attr,
        fi_domain_attr_1_1,
        fi_fabric_attr
    );
    u.info.nic = o.nic;
    u
}

/// `fi_getinfo` with old hints: upgrades them, calls today's entry point;
/// the list it returns is in today's layout (a superset of the old one).
///
/// # Safety
/// As `fi_getinfo`, with `hints` of the matching old layout.
unsafe fn getinfo_old<T>(
    up: unsafe fn(*const T) -> Upgraded,
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const T,
    info: *mut *mut T,
) -> c_int {
    ffi(guard::neg(FI_EOTHER), || {
        let mut u = (!hints.is_null()).then(|| {
            // SAFETY: non-NULL hints are valid (caller's contract).
            unsafe { up(hints) }
        });
        let h = u.as_mut().map_or(ptr::null(), Upgraded::view);
        // SAFETY: node/service/info per the caller's contract; `h` is NULL
        // or a valid current-layout view that outlives the call.
        unsafe { top::fi_getinfo(version, node, service, flags, h, info.cast()) }
    })
}

/// `fi_dupinfo` of an old info: a current-layout deep copy.
///
/// # Safety
/// `info` is NULL or valid in the matching old layout.
unsafe fn dupinfo_old<T>(up: unsafe fn(*const T) -> Upgraded, info: *const T) -> *mut T {
    ffi(ptr::null_mut(), || {
        if info.is_null() {
            return crate::info::alloc_info().map_or(ptr::null_mut(), |p| p.cast());
        }
        // SAFETY: the caller's contract.
        let mut u = unsafe { up(info) };
        // SAFETY: the view is a valid current-layout info while `u` lives.
        unsafe { crate::info::dup_info(u.view()) }.map_or(ptr::null_mut(), |p| p.cast())
    })
}

/// `fi_getinfo@FABRIC_1.0`.
///
/// # Safety
/// As `fi_getinfo`, with 1.0 hints.
pub unsafe extern "C" fn fi_getinfo_1_0(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info_1_0,
    info: *mut *mut fi_info_1_0,
) -> c_int {
    // SAFETY: this function's contract is `getinfo_old`'s with 1.0 hints, the layout `up_1_0`
    // reads.
    unsafe { getinfo_old(up_1_0, version, node, service, flags, hints, info) }
}

/// `fi_getinfo@FABRIC_1.1`.
///
/// # Safety
/// As `fi_getinfo`, with 1.1 hints.
pub unsafe extern "C" fn fi_getinfo_1_1(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info_1_1,
    info: *mut *mut fi_info_1_1,
) -> c_int {
    // SAFETY: this function's contract is `getinfo_old`'s with 1.1 hints, the layout `up_1_1`
    // reads.
    unsafe { getinfo_old(up_1_1, version, node, service, flags, hints, info) }
}

/// `fi_getinfo@FABRIC_1.2`.
///
/// # Safety
/// As `fi_getinfo`, with 1.2 hints.
pub unsafe extern "C" fn fi_getinfo_1_2(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info_1_2,
    info: *mut *mut fi_info_1_2,
) -> c_int {
    // SAFETY: this function's contract is `getinfo_old`'s with 1.2 hints, the layout `up_1_2`
    // reads.
    unsafe { getinfo_old(up_1_2, version, node, service, flags, hints, info) }
}

/// `fi_dupinfo@FABRIC_1.0`.
///
/// # Safety
/// `info` is NULL or a valid 1.0 info.
pub unsafe extern "C" fn fi_dupinfo_1_0(info: *const fi_info_1_0) -> *mut fi_info_1_0 {
    // SAFETY: `info` is NULL or a valid 1.0 info (this function's contract), the layout `up_1_0`
    // reads.
    unsafe { dupinfo_old(up_1_0, info) }
}

/// `fi_dupinfo@FABRIC_1.1`.
///
/// # Safety
/// `info` is NULL or a valid 1.1 info.
pub unsafe extern "C" fn fi_dupinfo_1_1(info: *const fi_info_1_1) -> *mut fi_info_1_1 {
    // SAFETY: `info` is NULL or a valid 1.1 info (this function's contract), the layout `up_1_1`
    // reads.
    unsafe { dupinfo_old(up_1_1, info) }
}

/// `fi_dupinfo@FABRIC_1.2`.
///
/// # Safety
/// `info` is NULL or a valid 1.2 info.
pub unsafe extern "C" fn fi_dupinfo_1_2(info: *const fi_info_1_2) -> *mut fi_info_1_2 {
    // SAFETY: `info` is NULL or a valid 1.2 info (this function's contract), the layout `up_1_2`
    // reads.
    unsafe { dupinfo_old(up_1_2, info) }
}

/// `fi_freeinfo@FABRIC_1.0`–`1.2`: the lists this library hands to old
/// callers are in today's layout, so freeing is today's.
///
/// # Safety
/// As `fi_freeinfo`.
pub unsafe extern "C" fn fi_freeinfo_old(info: *mut fi_info) {
    // SAFETY: the lists old callers get are in today's layout, so `info` is NULL or a list
    // `fi_freeinfo` accepts, not used afterwards (caller's contract).
    unsafe { top::fi_freeinfo(info) }
}

/// `fi_fabric@FABRIC_1.0`: the attribute has no `api_version`; the fabric
/// is opened as API 1.0.
///
/// # Safety
/// `attr` is NULL or a valid 1.0 fabric attribute; `fabric` as `fi_fabric`.
pub unsafe extern "C" fn fi_fabric_1_0(
    attr: *mut fi_fabric_attr_1_0,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    ffi(guard::neg(FI_EOTHER), || {
        // SAFETY: attr is NULL or valid; the 1.0 layout is a prefix of today's.
        let Some(mut a) = (unsafe { upgrade::<fi_fabric_attr_1_0, fi_fabric_attr>(attr) }) else {
            return guard::neg(FI_EINVAL);
        };
        a.api_version = ofi_core::consts::fi_version(1, 0);
        // SAFETY: `a` is a valid attribute for the duration of the call.
        unsafe { crate::obj::fabric::fi_fabric(&mut a, fabric, context) }
    })
}

/// Exports `$name` (a symbol of one version, assigned by libfabric.map) as a
/// jump to a Rust function.
macro_rules! export {
    ($name:literal, $f:path) => {
        #[cfg(target_arch = "x86_64")]
        core::arch::global_asm!(
            ".text",
            ".p2align 4",
            concat!(".globl ", $name),
            concat!(".type ", $name, ",@function"),
            concat!($name, ":"),
            "jmp {f}",
            concat!(".size ", $name, ", .-", $name),
            f = sym $f,
        );
    };
}

/// Exports `$name@$ver` (`@@` when `$default`) as a jump to a Rust function.
macro_rules! export_ver {
    ($name:literal, $ver:literal, $at:literal, $f:path) => {
        #[cfg(target_arch = "x86_64")]
        core::arch::global_asm!(
            ".text",
            ".p2align 4",
            concat!(".globl ofi_capi_", $name, "_", $ver),
            concat!(".type ofi_capi_", $name, "_", $ver, ",@function"),
            concat!("ofi_capi_", $name, "_", $ver, ":"),
            "jmp {f}",
            concat!(".size ofi_capi_", $name, "_", $ver, ", .-ofi_capi_", $name, "_", $ver),
            concat!(".symver ofi_capi_", $name, "_", $ver, ", ", $name, $at, "FABRIC_", $ver),
            f = sym $f,
        );
    };
}

/// Exports a variadic `$name` whose first `$fixed` arguments are integers:
/// the entry saves the argument registers, builds an x86-64 `va_list` for
/// the rest and calls `$f(regs, va_list)`.
macro_rules! export_variadic {
    ($name:literal, $fixed:literal, $f:path) => {
        #[cfg(target_arch = "x86_64")]
        core::arch::global_asm!(
            ".text",
            ".p2align 4",
            concat!(".globl ", $name),
            concat!(".type ", $name, ",@function"),
            concat!($name, ":"),
            // 48 bytes of integer registers, 128 of vector registers, a
            // 24-byte va_list and padding; keeps rsp 16-byte aligned.
            "sub rsp, 216",
            "mov [rsp], rdi",
            "mov [rsp + 8], rsi",
            "mov [rsp + 16], rdx",
            "mov [rsp + 24], rcx",
            "mov [rsp + 32], r8",
            "mov [rsp + 40], r9",
            "movaps [rsp + 48], xmm0",
            "movaps [rsp + 64], xmm1",
            "movaps [rsp + 80], xmm2",
            "movaps [rsp + 96], xmm3",
            "movaps [rsp + 112], xmm4",
            "movaps [rsp + 128], xmm5",
            "movaps [rsp + 144], xmm6",
            "movaps [rsp + 160], xmm7",
            // va_list: gp_offset, fp_offset, overflow_arg_area, reg_save_area.
            concat!("mov dword ptr [rsp + 176], ", $fixed, " * 8"),
            "mov dword ptr [rsp + 180], 48",
            "lea rax, [rsp + 224]",
            "mov [rsp + 184], rax",
            "mov [rsp + 192], rsp",
            "mov rdi, rsp",
            "lea rsi, [rsp + 176]",
            "call {f}",
            "add rsp, 216",
            "ret",
            concat!(".size ", $name, ", .-", $name),
            f = sym $f,
        );
    };
}

export_ver!("fi_getinfo", "1.3", "@@", top::fi_getinfo);
export_ver!("fi_getinfo", "1.2", "@", fi_getinfo_1_2);
export_ver!("fi_getinfo", "1.1", "@", fi_getinfo_1_1);
export_ver!("fi_getinfo", "1.0", "@", fi_getinfo_1_0);
export_ver!("fi_freeinfo", "1.3", "@@", top::fi_freeinfo);
export_ver!("fi_freeinfo", "1.2", "@", fi_freeinfo_old);
export_ver!("fi_freeinfo", "1.1", "@", fi_freeinfo_old);
export_ver!("fi_freeinfo", "1.0", "@", fi_freeinfo_old);
export_ver!("fi_dupinfo", "1.3", "@@", top::fi_dupinfo);
export_ver!("fi_dupinfo", "1.2", "@", fi_dupinfo_1_2);
export_ver!("fi_dupinfo", "1.1", "@", fi_dupinfo_1_1);
export_ver!("fi_dupinfo", "1.0", "@", fi_dupinfo_1_0);
export_ver!("fi_fabric", "1.1", "@@", crate::obj::fabric::fi_fabric);
export_ver!("fi_fabric", "1.0", "@", fi_fabric_1_0);
export!("fi_version", top::fi_version);
export!("fi_strerror", top::fi_strerror);
export!("fi_tostr", top::fi_tostr);
export!("fi_tostr_r", top::fi_tostr_r);
export!("fi_open", top::fi_open);
export!("fi_log_enabled", top::fi_log_enabled);
export!("fi_log_ready", top::fi_log_ready);
export!("fi_param_get", top::fi_param_get);
export!("fi_getparams", top::fi_getparams);
export!("fi_freeparams", top::fi_freeparams);
export_variadic!("fi_log", "6", top::fi_log_va);
export_variadic!("fi_param_define", "4", top::fi_param_define_va);
