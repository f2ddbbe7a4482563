//! `fi_tostr` and `fi_tostr_r`: libfabric's text form of attributes, flag
//! sets, enum values and whole `fi_info` structures.

use super::names::*;
use crate::abi::*;
use crate::guard::ffi;
use crate::info;
use std::cell::RefCell;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::ptr;

/// The package version `FI_TYPE_VERSION` prints.
const PACKAGE_VERSION: &str = "1.17.0";

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
pub(super) unsafe fn s_or_null(p: *const c_char) -> String {
    // SAFETY: `p` is NULL or NUL-terminated (this function's contract), as `c_str` requires.
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

/// Opens an attribute's block: `name:` at `level`, or `name: (null)` when
/// there is no attribute; the attribute and the indent of its fields.
fn block<'a, T>(
    out: &mut String,
    name: &str,
    a: Option<&'a T>,
    level: usize,
) -> Option<(&'a T, &'static str)> {
    let i0 = ind(level);
    let Some(a) = a else {
        let _ = writeln!(out, "{i0}{name}: (null)");
        return None;
    };
    let _ = writeln!(out, "{i0}{name}:");
    Some((a, ind(level + 1)))
}

/// Bit-set fields, one a line: `field: [ FI_A, FI_B ]`.
fn bit_fields(out: &mut String, i1: &str, fields: &[(&str, Bits, u64)]) {
    for &(field, table, v) in fields {
        let _ = write!(out, "{i1}{field}: ");
        bracketed(out, table, v);
        out.push('\n');
    }
}

/// The fields `fi_tx_attr` and `fi_rx_attr` both open with: caps, mode,
/// op_flags, msg_order and comp_order.
fn xfer_flags(out: &mut String, i1: &str, a: [u64; 5]) {
    let [caps, mode, op_flags, msg_order, comp] = a;
    bit_fields(
        out,
        i1,
        &[
            ("caps", CAPS, caps),
            ("mode", MODE, mode),
            ("op_flags", OP_FLAGS, op_flags),
            ("msg_order", MSG_ORDER, msg_order),
        ],
    );
    let _ = write!(out, "{i1}comp_order: ");
    comp_order(out, comp);
    out.push('\n');
}

fn tx_attr_text(out: &mut String, a: *const fi_tx_attr, level: usize) {
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some((a, i1)) = block(out, "fi_tx_attr", unsafe { a.as_ref() }, level) else {
        return;
    };
    let flags = [a.caps, a.mode, a.op_flags, a.msg_order, a.comp_order];
    xfer_flags(out, i1, flags);
    let _ = writeln!(out, "{i1}inject_size: {}", a.inject_size);
    let _ = writeln!(out, "{i1}size: {}", a.size);
    let _ = writeln!(out, "{i1}iov_limit: {}", a.iov_limit);
    let _ = writeln!(out, "{i1}rma_iov_limit: {}", a.rma_iov_limit);
    let _ = writeln!(out, "{i1}tclass: {:#x}", a.tclass);
}

fn rx_attr_text(out: &mut String, a: *const fi_rx_attr, level: usize) {
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some((a, i1)) = block(out, "fi_rx_attr", unsafe { a.as_ref() }, level) else {
        return;
    };
    let flags = [a.caps, a.mode, a.op_flags, a.msg_order, a.comp_order];
    xfer_flags(out, i1, flags);
    let _ = writeln!(out, "{i1}total_buffered_recv: {}", a.total_buffered_recv);
    let _ = writeln!(out, "{i1}size: {}", a.size);
    let _ = writeln!(out, "{i1}iov_limit: {}", a.iov_limit);
}

fn ep_attr_text(out: &mut String, a: *const fi_ep_attr, level: usize) {
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some((a, i1)) = block(out, "fi_ep_attr", unsafe { a.as_ref() }, level) else {
        return;
    };
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
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some((a, i1)) = block(out, "fi_domain_attr", unsafe { a.as_ref() }, level) else {
        return;
    };
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
    bit_fields(
        out,
        i1,
        &[("mr_mode", MR_MODE, u64::from(a.mr_mode as u32))],
    );
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
    bit_fields(out, i1, &[("caps", CAPS, a.caps), ("mode", MODE, a.mode)]);
    let _ = writeln!(out, "{i1}auth_key_size: {}", a.auth_key_size);
    let _ = writeln!(out, "{i1}max_err_data: {}", a.max_err_data);
    let _ = writeln!(out, "{i1}mr_cnt: {}", a.mr_cnt);
    let _ = writeln!(out, "{i1}tclass: {:#x}", a.tclass);
}

fn fabric_attr_text(out: &mut String, a: *const fi_fabric_attr, level: usize) {
    // SAFETY: NULL or a valid attribute (the fi_tostr contract).
    let Some((a, i1)) = block(out, "fi_fabric_attr", unsafe { a.as_ref() }, level) else {
        return;
    };
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
    bit_fields(out, i1, &[("caps", CAPS, i.caps), ("mode", MODE, i.mode)]);
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
                // SAFETY: `data` points to a value of the type `datatype` names (caller's
                // contract): here a struct fid without a `tostr` slot.
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
}
