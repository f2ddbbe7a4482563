//! `rdma/fi_cm.h`: connection management and multicast.

use crate::abi::{fi_addr_t, fid, fid_ep, fid_pep, fid_t};
use libc::{c_int, c_void, size_t};

/// A multicast group (`struct fid_mc`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_mc {
    /// Object header.
    pub fid: fid,
    /// Address to send to the group.
    pub fi_addr: fi_addr_t,
}

/// Connection management operations (`struct fi_ops_cm`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_cm {
    /// Size of this table.
    pub size: size_t,
    /// `fi_setname`.
    pub setname:
        Option<unsafe extern "C" fn(fid: fid_t, addr: *mut c_void, addrlen: size_t) -> c_int>,
    /// `fi_getname`.
    pub getname:
        Option<unsafe extern "C" fn(fid: fid_t, addr: *mut c_void, addrlen: *mut size_t) -> c_int>,
    /// `fi_getpeer`.
    pub getpeer: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut size_t) -> c_int,
    >,
    /// `fi_connect`.
    pub connect: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            addr: *const c_void,
            param: *const c_void,
            paramlen: size_t,
        ) -> c_int,
    >,
    /// `fi_listen`.
    pub listen: Option<unsafe extern "C" fn(pep: *mut fid_pep) -> c_int>,
    /// `fi_accept`.
    pub accept: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, param: *const c_void, paramlen: size_t) -> c_int,
    >,
    /// `fi_reject`.
    pub reject: Option<
        unsafe extern "C" fn(
            pep: *mut fid_pep,
            handle: fid_t,
            param: *const c_void,
            paramlen: size_t,
        ) -> c_int,
    >,
    /// `fi_shutdown`.
    pub shutdown: Option<unsafe extern "C" fn(ep: *mut fid_ep, flags: u64) -> c_int>,
    /// `fi_join`.
    pub join: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            addr: *const c_void,
            flags: u64,
            mc: *mut *mut fid_mc,
            context: *mut c_void,
        ) -> c_int,
    >,
}
