//! `fi_info` lists in C memory, converted to and from [`ofi_core::Info`].
//!
//! Everything handed to the application is allocated with the C allocator
//! (`calloc`, `malloc`, `strdup`): applications free fields of hints with
//! `free()` and `strdup` their own strings into infos that `fi_freeinfo`
//! later releases.

use crate::abi::*;
use ofi_core::error::errno::{FI_EINVAL, FI_ENOMEM};
use ofi_core::info::{DomainAttr, EpAttr, FabricAttr, RxAttr, TxAttr};
use ofi_core::Info;
use std::ffi::CStr;
use std::ptr;

/// Reads a C string; NULL is `None`. Invalid UTF-8 is replaced, not rejected.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copies `len` bytes at `p`; NULL or zero length is `None`.
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes.
pub(crate) unsafe fn c_bytes(p: *const c_void, len: usize) -> Option<Vec<u8>> {
    if p.is_null() || len == 0 {
        return None;
    }
    // SAFETY: valid for `len` bytes per the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
}

/// `strdup` of a Rust string into C memory (NULL for `None`). An interior
/// NUL ends the copy. Returns `Err` when out of memory.
pub(crate) fn dup_str(s: Option<&str>) -> Result<*mut c_char, c_int> {
    let Some(s) = s else {
        return Ok(ptr::null_mut());
    };
    let bytes = s.as_bytes();
    let n = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    // SAFETY: malloc of n + 1 bytes; the result is checked for NULL.
    let p = unsafe { libc::malloc(n + 1) }.cast::<u8>();
    if p.is_null() {
        return Err(-FI_ENOMEM);
    }
    // SAFETY: `p` holds n + 1 bytes and does not overlap `bytes`.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
        *p.add(n) = 0;
    }
    Ok(p.cast())
}

/// Copies bytes into fresh C memory (NULL and 0 for `None` or empty).
fn dup_bytes(b: Option<&[u8]>) -> Result<(*mut c_void, usize), c_int> {
    match b {
        Some(b) if !b.is_empty() => {
            // SAFETY: malloc of b.len() bytes; checked for NULL below.
            let p = unsafe { libc::malloc(b.len()) };
            if p.is_null() {
                return Err(-FI_ENOMEM);
            }
            // SAFETY: `p` holds b.len() bytes and does not overlap `b`.
            unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len()) };
            Ok((p, b.len()))
        }
        _ => Ok((ptr::null_mut(), 0)),
    }
}

/// Duplicates a C byte buffer (NULL stays NULL).
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes.
unsafe fn dup_c_bytes(p: *const c_void, len: usize) -> Result<*mut c_void, c_int> {
    // SAFETY: `p` is NULL or valid for reading `len` bytes (this function's contract), as `c_bytes`
    // requires.
    let b = unsafe { c_bytes(p, len) };
    dup_bytes(b.as_deref()).map(|(p, _)| p)
}

/// Duplicates a C string (NULL stays NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn dup_c_str(p: *const c_char) -> Result<*mut c_char, c_int> {
    if p.is_null() {
        return Ok(ptr::null_mut());
    }
    // SAFETY: `p` is a valid C string.
    let q = unsafe { libc::strdup(p) };
    if q.is_null() {
        Err(-FI_ENOMEM)
    } else {
        Ok(q)
    }
}

/// `calloc` of one zeroed `T`.
fn calloc_one<T>() -> Result<*mut T, c_int> {
    // SAFETY: calloc of one element of T's size; checked for NULL.
    let p = unsafe { libc::calloc(1, std::mem::size_of::<T>()) }.cast::<T>();
    if p.is_null() {
        Err(-FI_ENOMEM)
    } else {
        Ok(p)
    }
}

/// Reads a C `fi_tx_attr` (NULL: all unspecified).
///
/// # Safety
/// `p` is NULL or points to a valid `fi_tx_attr`.
pub(crate) unsafe fn tx_attr_from_c(p: *const fi_tx_attr) -> TxAttr {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(a) = (unsafe { p.as_ref() }) else {
        return TxAttr::default();
    };
    TxAttr {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
        inject_size: a.inject_size,
        size: a.size,
        iov_limit: a.iov_limit,
        rma_iov_limit: a.rma_iov_limit,
        tclass: a.tclass,
    }
}

/// Reads a C `fi_rx_attr` (NULL: all unspecified).
///
/// # Safety
/// `p` is NULL or points to a valid `fi_rx_attr`.
pub(crate) unsafe fn rx_attr_from_c(p: *const fi_rx_attr) -> RxAttr {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(a) = (unsafe { p.as_ref() }) else {
        return RxAttr::default();
    };
    RxAttr {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
        total_buffered_recv: a.total_buffered_recv,
        size: a.size,
        iov_limit: a.iov_limit,
    }
}

/// Reads a C `fi_ep_attr` (NULL: all unspecified).
///
/// # Safety
/// `p` is NULL or points to a valid `fi_ep_attr` whose `auth_key` holds
/// `auth_key_size` bytes.
pub(crate) unsafe fn ep_attr_from_c(p: *const fi_ep_attr) -> EpAttr {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(a) = (unsafe { p.as_ref() }) else {
        return EpAttr::default();
    };
    EpAttr {
        ep_type: a.r#type,
        protocol: a.protocol,
        protocol_version: a.protocol_version,
        max_msg_size: a.max_msg_size,
        msg_prefix_size: a.msg_prefix_size,
        max_order_raw_size: a.max_order_raw_size,
        max_order_war_size: a.max_order_war_size,
        max_order_waw_size: a.max_order_waw_size,
        mem_tag_format: a.mem_tag_format,
        tx_ctx_cnt: a.tx_ctx_cnt,
        rx_ctx_cnt: a.rx_ctx_cnt,
        // SAFETY: auth_key holds auth_key_size bytes per contract.
        auth_key: unsafe { c_bytes(a.auth_key.cast(), a.auth_key_size) },
    }
}

/// Reads a C `fi_domain_attr` (NULL: all unspecified). The `domain` field
/// is not converted.
///
/// # Safety
/// `p` is NULL or points to a valid `fi_domain_attr`.
pub(crate) unsafe fn domain_attr_from_c(p: *const fi_domain_attr) -> DomainAttr {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(a) = (unsafe { p.as_ref() }) else {
        return DomainAttr::default();
    };
    DomainAttr {
        // SAFETY: name is NULL or a C string per contract.
        name: unsafe { c_str(a.name) },
        threading: a.threading,
        control_progress: a.control_progress,
        data_progress: a.data_progress,
        resource_mgmt: a.resource_mgmt,
        av_type: a.av_type,
        mr_mode: a.mr_mode as u32,
        mr_key_size: a.mr_key_size,
        cq_data_size: a.cq_data_size,
        cq_cnt: a.cq_cnt,
        ep_cnt: a.ep_cnt,
        tx_ctx_cnt: a.tx_ctx_cnt,
        rx_ctx_cnt: a.rx_ctx_cnt,
        max_ep_tx_ctx: a.max_ep_tx_ctx,
        max_ep_rx_ctx: a.max_ep_rx_ctx,
        max_ep_stx_ctx: a.max_ep_stx_ctx,
        max_ep_srx_ctx: a.max_ep_srx_ctx,
        cntr_cnt: a.cntr_cnt,
        mr_iov_limit: a.mr_iov_limit,
        caps: a.caps,
        mode: a.mode,
        // SAFETY: auth_key holds auth_key_size bytes per contract.
        auth_key: unsafe { c_bytes(a.auth_key.cast(), a.auth_key_size) },
        max_err_data: a.max_err_data,
        mr_cnt: a.mr_cnt,
        tclass: a.tclass,
    }
}

/// Reads a C `fi_fabric_attr` (NULL: all unspecified). The `fabric` field
/// is not converted.
///
/// # Safety
/// `p` is NULL or points to a valid `fi_fabric_attr`.
pub(crate) unsafe fn fabric_attr_from_c(p: *const fi_fabric_attr) -> FabricAttr {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(a) = (unsafe { p.as_ref() }) else {
        return FabricAttr::default();
    };
    FabricAttr {
        // SAFETY: name is NULL or a C string per contract.
        name: unsafe { c_str(a.name) },
        // SAFETY: prov_name is NULL or a C string per contract.
        prov_name: unsafe { c_str(a.prov_name) },
        prov_version: a.prov_version,
        api_version: a.api_version,
    }
}

/// Reads one C `fi_info` (not its `next`) into an [`Info`]. NULL attribute
/// pointers mean "unspecified". `handle` is left `None`: the object layer
/// reads it directly. Fails with `-FI_EINVAL` for a NULL `p`.
///
/// # Safety
/// `p` is NULL or points to a valid `fi_info` whose pointers are NULL or
/// valid (addresses for their stated lengths, strings NUL-terminated).
pub(crate) unsafe fn info_from_c(p: *const fi_info) -> Result<Info, c_int> {
    // SAFETY: NULL-checked by as_ref; valid per contract.
    let Some(i) = (unsafe { p.as_ref() }) else {
        return Err(-FI_EINVAL);
    };
    // SAFETY: every pointer below is NULL or valid per the contract.
    unsafe {
        Ok(Info {
            caps: i.caps,
            mode: i.mode,
            addr_format: i.addr_format,
            src_addr: c_bytes(i.src_addr, i.src_addrlen),
            dest_addr: c_bytes(i.dest_addr, i.dest_addrlen),
            handle: None,
            tx_attr: tx_attr_from_c(i.tx_attr),
            rx_attr: rx_attr_from_c(i.rx_attr),
            ep_attr: ep_attr_from_c(i.ep_attr),
            domain_attr: domain_attr_from_c(i.domain_attr),
            fabric_attr: fabric_attr_from_c(i.fabric_attr),
        })
    }
}

/// Fills a zeroed C `fi_tx_attr`.
pub(crate) fn tx_attr_to_c(a: &TxAttr) -> fi_tx_attr {
    fi_tx_attr {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
        inject_size: a.inject_size,
        size: a.size,
        iov_limit: a.iov_limit,
        rma_iov_limit: a.rma_iov_limit,
        tclass: a.tclass,
    }
}

/// Fills a C `fi_rx_attr`.
pub(crate) fn rx_attr_to_c(a: &RxAttr) -> fi_rx_attr {
    fi_rx_attr {
        caps: a.caps,
        mode: a.mode,
        op_flags: a.op_flags,
        msg_order: a.msg_order,
        comp_order: a.comp_order,
        total_buffered_recv: a.total_buffered_recv,
        size: a.size,
        iov_limit: a.iov_limit,
    }
}

/// Builds one C `fi_info` node (with all five attribute structs) from an
/// [`Info`]; `next`, `handle`, `nic`, `fabric_attr->fabric` and
/// `domain_attr->domain` are NULL. Returns NULL when out of memory.
pub(crate) fn info_to_c(info: &Info) -> *mut fi_info {
    match build_info(info) {
        Ok(p) => p,
        Err(_) => ptr::null_mut(),
    }
}

/// Allocates a zeroed `fi_info` with all five attribute structs, as
/// `fi_allocinfo` returns it.
pub(crate) fn alloc_info() -> Result<*mut fi_info, c_int> {
    let p = calloc_one::<fi_info>()?;
    let fill = || -> Result<(), c_int> {
        // SAFETY: `p` is a fresh zeroed fi_info we own.
        let i = unsafe { &mut *p };
        i.tx_attr = calloc_one()?;
        i.rx_attr = calloc_one()?;
        i.ep_attr = calloc_one()?;
        i.domain_attr = calloc_one()?;
        i.fabric_attr = calloc_one()?;
        Ok(())
    };
    if let Err(e) = fill() {
        // SAFETY: `p` is a partially filled info we allocated; free_info
        // frees what is non-NULL.
        unsafe { free_info(p) };
        return Err(e);
    }
    Ok(p)
}

fn build_info(info: &Info) -> Result<*mut fi_info, c_int> {
    let p = alloc_info()?;
    let fill = || -> Result<(), c_int> {
        // SAFETY: `p` and its attribute structs were just allocated by us.
        let i = unsafe { &mut *p };
        i.caps = info.caps;
        i.mode = info.mode;
        i.addr_format = info.addr_format;
        (i.src_addr, i.src_addrlen) = dup_bytes(info.src_addr.as_deref())?;
        (i.dest_addr, i.dest_addrlen) = dup_bytes(info.dest_addr.as_deref())?;
        // SAFETY: attribute pointers are valid allocations from alloc_info.
        unsafe {
            *i.tx_attr = tx_attr_to_c(&info.tx_attr);
            *i.rx_attr = rx_attr_to_c(&info.rx_attr);
            let e = &info.ep_attr;
            let ep = &mut *i.ep_attr;
            ep.r#type = e.ep_type;
            ep.protocol = e.protocol;
            ep.protocol_version = e.protocol_version;
            ep.max_msg_size = e.max_msg_size;
            ep.msg_prefix_size = e.msg_prefix_size;
            ep.max_order_raw_size = e.max_order_raw_size;
            ep.max_order_war_size = e.max_order_war_size;
            ep.max_order_waw_size = e.max_order_waw_size;
            ep.mem_tag_format = e.mem_tag_format;
            ep.tx_ctx_cnt = e.tx_ctx_cnt;
            ep.rx_ctx_cnt = e.rx_ctx_cnt;
            let (k, n) = dup_bytes(e.auth_key.as_deref())?;
            ep.auth_key = k.cast();
            ep.auth_key_size = n;

            let d = &info.domain_attr;
            let da = &mut *i.domain_attr;
            da.name = dup_str(d.name.as_deref())?;
            da.threading = d.threading;
            da.control_progress = d.control_progress;
            da.data_progress = d.data_progress;
            da.resource_mgmt = d.resource_mgmt;
            da.av_type = d.av_type;
            da.mr_mode = d.mr_mode as c_int;
            da.mr_key_size = d.mr_key_size;
            da.cq_data_size = d.cq_data_size;
            da.cq_cnt = d.cq_cnt;
            da.ep_cnt = d.ep_cnt;
            da.tx_ctx_cnt = d.tx_ctx_cnt;
            da.rx_ctx_cnt = d.rx_ctx_cnt;
            da.max_ep_tx_ctx = d.max_ep_tx_ctx;
            da.max_ep_rx_ctx = d.max_ep_rx_ctx;
            da.max_ep_stx_ctx = d.max_ep_stx_ctx;
            da.max_ep_srx_ctx = d.max_ep_srx_ctx;
            da.cntr_cnt = d.cntr_cnt;
            da.mr_iov_limit = d.mr_iov_limit;
            da.caps = d.caps;
            da.mode = d.mode;
            let (k, n) = dup_bytes(d.auth_key.as_deref())?;
            da.auth_key = k.cast();
            da.auth_key_size = n;
            da.max_err_data = d.max_err_data;
            da.mr_cnt = d.mr_cnt;
            da.tclass = d.tclass;

            let f = &info.fabric_attr;
            let fa = &mut *i.fabric_attr;
            fa.name = dup_str(f.name.as_deref())?;
            fa.prov_name = dup_str(f.prov_name.as_deref())?;
            fa.prov_version = f.prov_version;
            fa.api_version = f.api_version;
        }
        Ok(())
    };
    match fill() {
        Ok(()) => Ok(p),
        Err(e) => {
            // SAFETY: `p` is our partially filled info; every non-NULL
            // pointer in it came from the C allocator.
            unsafe { free_info(p) };
            Err(e)
        }
    }
}

/// Builds a C list from offers, in order. Returns NULL for an empty list
/// and `Err(-FI_ENOMEM)` (having freed what was built) when out of memory.
pub(crate) fn list_to_c(infos: &[Info]) -> Result<*mut fi_info, c_int> {
    let mut head: *mut fi_info = ptr::null_mut();
    let mut tail: *mut fi_info = ptr::null_mut();
    for info in infos {
        let node = match build_info(info) {
            Ok(n) => n,
            Err(e) => {
                // SAFETY: `head` is a list we built from the C allocator.
                unsafe { free_info(head) };
                return Err(e);
            }
        };
        if tail.is_null() {
            head = node;
        } else {
            // SAFETY: `tail` is the last node we built.
            unsafe { (*tail).next = node };
        }
        tail = node;
    }
    Ok(head)
}

/// Frees a whole `fi_info` list and everything its fields point to that the
/// library or the application allocated with the C allocator. `handle`,
/// `fabric_attr->fabric` and `domain_attr->domain` are objects, not owned
/// by the info, and are left alone.
///
/// # Safety
/// `p` is NULL or the head of a list whose nodes, attribute structs,
/// strings and addresses were allocated with the C allocator and are not
/// used afterwards.
pub(crate) unsafe fn free_info(mut p: *mut fi_info) {
    while !p.is_null() {
        // SAFETY: `p` is a valid node per the contract; every field we free
        // came from the C allocator and is freed once.
        unsafe {
            let i = &mut *p;
            let next = i.next;
            libc::free(i.src_addr);
            libc::free(i.dest_addr);
            libc::free(i.tx_attr.cast());
            libc::free(i.rx_attr.cast());
            if let Some(ep) = i.ep_attr.as_mut() {
                libc::free(ep.auth_key.cast());
                libc::free(i.ep_attr.cast());
            }
            if let Some(d) = i.domain_attr.as_mut() {
                libc::free(d.name.cast());
                libc::free(d.auth_key.cast());
                libc::free(i.domain_attr.cast());
            }
            if let Some(f) = i.fabric_attr.as_mut() {
                libc::free(f.name.cast());
                libc::free(f.prov_name.cast());
                libc::free(i.fabric_attr.cast());
            }
            if let Some(nic) = i.nic.as_mut() {
                if let Some(close) = nic.fid.ops.as_ref().and_then(|o| o.close) {
                    close(&mut nic.fid);
                }
            }
            libc::free(p.cast());
            p = next;
        }
    }
}

/// Deep-copies one C `fi_info` node (not its `next`) as `fi_dupinfo` does:
/// strings, addresses, keys and attribute structs are duplicated; `handle`,
/// `fabric_attr->fabric` and `domain_attr->domain` are copied as pointers;
/// `nic` is not copied. Missing attribute structs in the source are
/// allocated zeroed in the copy.
///
/// # Safety
/// `src` points to a valid `fi_info` whose pointers are NULL or valid.
pub(crate) unsafe fn dup_info(src: *const fi_info) -> Result<*mut fi_info, c_int> {
    let p = alloc_info()?;
    let fill = || -> Result<(), c_int> {
        // SAFETY: `src` is valid per contract; `p` and its attribute
        // structs are fresh allocations we own.
        unsafe {
            let s = &*src;
            let d = &mut *p;
            d.caps = s.caps;
            d.mode = s.mode;
            d.addr_format = s.addr_format;
            d.handle = s.handle;
            d.src_addr = dup_c_bytes(s.src_addr, s.src_addrlen)?;
            d.src_addrlen = if d.src_addr.is_null() {
                0
            } else {
                s.src_addrlen
            };
            d.dest_addr = dup_c_bytes(s.dest_addr, s.dest_addrlen)?;
            d.dest_addrlen = if d.dest_addr.is_null() {
                0
            } else {
                s.dest_addrlen
            };
            if let Some(a) = s.tx_attr.as_ref() {
                *d.tx_attr = *a;
            }
            if let Some(a) = s.rx_attr.as_ref() {
                *d.rx_attr = *a;
            }
            if let Some(a) = s.ep_attr.as_ref() {
                let e = &mut *d.ep_attr;
                *e = *a;
                e.auth_key = ptr::null_mut();
                e.auth_key = dup_c_bytes(a.auth_key.cast(), a.auth_key_size)?.cast();
                if e.auth_key.is_null() {
                    e.auth_key_size = 0;
                }
            }
            if let Some(a) = s.domain_attr.as_ref() {
                let e = &mut *d.domain_attr;
                *e = *a;
                e.name = ptr::null_mut();
                e.auth_key = ptr::null_mut();
                e.name = dup_c_str(a.name)?;
                e.auth_key = dup_c_bytes(a.auth_key.cast(), a.auth_key_size)?.cast();
                if e.auth_key.is_null() {
                    e.auth_key_size = 0;
                }
            }
            if let Some(a) = s.fabric_attr.as_ref() {
                let e = &mut *d.fabric_attr;
                *e = *a;
                e.name = ptr::null_mut();
                e.prov_name = ptr::null_mut();
                e.name = dup_c_str(a.name)?;
                e.prov_name = dup_c_str(a.prov_name)?;
            }
        }
        Ok(())
    };
    match fill() {
        Ok(()) => Ok(p),
        Err(e) => {
            // SAFETY: `p` holds only our own allocations (copied pointers
            // to objects are not freed by free_info).
            unsafe { free_info(p) };
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Info {
        let mut i = Info::hints();
        i.caps = 0x18;
        i.mode = 0x2;
        i.addr_format = 9;
        i.src_addr = Some(b"fi_shm://1234\0".to_vec());
        i.tx_attr.inject_size = 4096;
        i.rx_attr.size = 1024;
        i.ep_attr.ep_type = 3;
        i.ep_attr.auth_key = Some(vec![1, 2, 3]);
        i.domain_attr.name = Some("shm".into());
        i.domain_attr.mr_mode = 0x60;
        i.domain_attr.tclass = 7;
        i.fabric_attr.name = Some("shm".into());
        i.fabric_attr.prov_name = Some("shm".into());
        i.fabric_attr.prov_version = 0x10011;
        i
    }

    #[test]
    fn round_trip_through_c() {
        let i = sample();
        let c = info_to_c(&i);
        assert!(!c.is_null());
        // SAFETY: `c` is a valid info built above.
        let back = unsafe { info_from_c(c) }.expect("valid info");
        assert_eq!(back, i);
        // SAFETY: `c` came from info_to_c and is not used afterwards.
        unsafe { free_info(c) };
    }

    #[test]
    fn dup_is_deep_and_equal() {
        let c = info_to_c(&sample());
        // SAFETY: `c` is valid; the copy and the original are freed once.
        unsafe {
            let d = dup_info(c).expect("dup");
            assert_ne!((*d).fabric_attr, (*c).fabric_attr);
            assert_ne!((*(*d).domain_attr).name, (*(*c).domain_attr).name);
            assert_eq!(info_from_c(d), info_from_c(c));
            free_info(c);
            free_info(d);
        }
    }

    #[test]
    fn null_attrs_are_unspecified() {
        // SAFETY: a zeroed fi_info has only NULL pointers.
        let z: fi_info = unsafe { std::mem::zeroed() };
        // SAFETY: `z` is a valid info with NULL pointers.
        assert_eq!(unsafe { info_from_c(&z) }, Ok(Info::hints()));
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { info_from_c(ptr::null()) }, Err(-FI_EINVAL));
    }

    #[test]
    fn list_keeps_order() {
        let mut a = sample();
        let b = sample();
        a.caps = 1;
        let l = list_to_c(&[a, b]).expect("list");
        // SAFETY: `l` is a two-node list we built.
        unsafe {
            assert_eq!((*l).caps, 1);
            assert_eq!((*(*l).next).caps, 0x18);
            assert!((*(*l).next).next.is_null());
            free_info(l);
        }
    }
}
