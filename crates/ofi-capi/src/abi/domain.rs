//! `rdma/fi_domain.h`: domain, address vector, memory registration.

use crate::abi::{
    fi_addr_t, fi_av_type, fi_cntr_attr, fi_cq_attr, fi_info, fi_poll_attr, fi_rx_attr, fi_tx_attr,
    fid, fid_av_set, fid_cntr, fid_cq, fid_ep, fid_poll, fid_stx,
};
use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};

/// `enum fi_hmem_iface`.
pub type fi_hmem_iface = u32;
/// `enum fi_datatype`.
pub type fi_datatype = u32;
/// `enum fi_op`.
pub type fi_op = u32;
/// `enum fi_collective_op`.
pub type fi_collective_op = u32;

/// Address vector attributes (`struct fi_av_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_av_attr {
    /// AV type.
    pub r#type: fi_av_type,
    /// Bits of an address that select a receive context.
    pub rx_ctx_bits: c_int,
    /// Expected number of addresses.
    pub count: size_t,
    /// Endpoints per node.
    pub ep_per_node: size_t,
    /// Name of a shared AV.
    pub name: *const c_char,
    /// Address to map a shared AV at.
    pub map_addr: *mut c_void,
    /// Flags.
    pub flags: u64,
}

/// Address vector set attributes (`struct fi_av_set_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_av_set_attr {
    /// Number of members.
    pub count: size_t,
    /// First address.
    pub start_addr: fi_addr_t,
    /// Last address.
    pub end_addr: fi_addr_t,
    /// Stride between addresses.
    pub stride: u64,
    /// Length of `comm_key`.
    pub comm_key_size: size_t,
    /// Communication key.
    pub comm_key: *mut u8,
    /// Flags.
    pub flags: u64,
}

/// Address vector operations (`struct fi_ops_av`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_av {
    /// Size of this table.
    pub size: size_t,
    /// `fi_av_insert`.
    pub insert: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            addr: *const c_void,
            count: size_t,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_av_insertsvc`.
    pub insertsvc: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            node: *const c_char,
            service: *const c_char,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_av_insertsym`.
    pub insertsym: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            node: *const c_char,
            nodecnt: size_t,
            service: *const c_char,
            svccnt: size_t,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_av_remove`.
    pub remove: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            fi_addr: *mut fi_addr_t,
            count: size_t,
            flags: u64,
        ) -> c_int,
    >,
    /// `fi_av_lookup`.
    pub lookup: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            fi_addr: fi_addr_t,
            addr: *mut c_void,
            addrlen: *mut size_t,
        ) -> c_int,
    >,
    /// `fi_av_straddr`.
    pub straddr: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            addr: *const c_void,
            buf: *mut c_char,
            len: *mut size_t,
        ) -> *const c_char,
    >,
    /// `fi_av_set`.
    pub av_set: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            attr: *mut fi_av_set_attr,
            av_set: *mut *mut fid_av_set,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// An address vector (`struct fid_av`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_av {
    /// Object header.
    pub fid: fid,
    /// AV operations.
    pub ops: *mut fi_ops_av,
}

/// A memory region (`struct fid_mr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_mr {
    /// Object header.
    pub fid: fid,
    /// Local descriptor passed with data transfers.
    pub mem_desc: *mut c_void,
    /// Remote key.
    pub key: u64,
}

/// The device part of [`fi_mr_attr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_mr_attr_device {
    /// Unused (system memory).
    pub reserved: u64,
    /// CUDA device.
    pub cuda: c_int,
    /// Level Zero device.
    pub ze: c_int,
    /// Neuron device.
    pub neuron: c_int,
    /// SynapseAI device.
    pub synapseai: c_int,
}

/// Memory registration attributes (`struct fi_mr_attr`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_attr {
    /// Regions to register.
    pub mr_iov: *const iovec,
    /// Number of regions.
    pub iov_count: size_t,
    /// Access rights.
    pub access: u64,
    /// Offset (FI_MR_BASIC / scalable addressing).
    pub offset: u64,
    /// Requested remote key.
    pub requested_key: u64,
    /// Context for the registration event.
    pub context: *mut c_void,
    /// Length of `auth_key`.
    pub auth_key_size: size_t,
    /// Authorization key.
    pub auth_key: *mut u8,
    /// Memory interface.
    pub iface: fi_hmem_iface,
    /// Device of the memory interface.
    pub device: fi_mr_attr_device,
}

/// Argument of `FI_REFRESH` (`struct fi_mr_modify`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_modify {
    /// Flags.
    pub flags: u64,
    /// New attributes.
    pub attr: fi_mr_attr,
}

/// Device-memory copy overrides (`struct fi_hmem_override_ops`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_hmem_override_ops {
    /// Size of this table.
    pub size: size_t,
    /// Copy out of device memory.
    pub copy_from_hmem_iov: Option<
        unsafe extern "C" fn(
            dest: *mut c_void,
            size: size_t,
            iface: fi_hmem_iface,
            device: u64,
            hmem_iov: *const iovec,
            hmem_iov_count: size_t,
            hmem_iov_offset: u64,
        ) -> ssize_t,
    >,
    /// Copy into device memory.
    pub copy_to_hmem_iov: Option<
        unsafe extern "C" fn(
            iface: fi_hmem_iface,
            device: u64,
            hmem_iov: *const iovec,
            hmem_iov_count: size_t,
            hmem_iov_offset: u64,
            src: *const c_void,
            size: size_t,
        ) -> ssize_t,
    >,
}

/// Domain operations (`struct fi_ops_domain`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_domain {
    /// Size of this table.
    pub size: size_t,
    /// `fi_av_open`.
    pub av_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_av_attr,
            av: *mut *mut fid_av,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_cq_open`.
    pub cq_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_cq_attr,
            cq: *mut *mut fid_cq,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_endpoint`.
    pub endpoint: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_scalable_ep`.
    pub scalable_ep: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            sep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_cntr_open`.
    pub cntr_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_cntr_attr,
            cntr: *mut *mut fid_cntr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_poll_open`.
    pub poll_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_poll_attr,
            pollset: *mut *mut fid_poll,
        ) -> c_int,
    >,
    /// `fi_stx_context`.
    pub stx_ctx: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_tx_attr,
            stx: *mut *mut fid_stx,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_srx_context`.
    pub srx_ctx: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_rx_attr,
            rx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_query_atomic`.
    pub query_atomic: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            datatype: fi_datatype,
            op: fi_op,
            attr: *mut crate::abi::fi_atomic_attr,
            flags: u64,
        ) -> c_int,
    >,
    /// `fi_query_collective`.
    pub query_collective: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            coll: fi_collective_op,
            attr: *mut crate::abi::fi_collective_attr,
            flags: u64,
        ) -> c_int,
    >,
    /// `fi_endpoint2`.
    pub endpoint2: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            ep: *mut *mut fid_ep,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// Memory registration operations (`struct fi_ops_mr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_mr {
    /// Size of this table.
    pub size: size_t,
    /// `fi_mr_reg`.
    pub reg: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            buf: *const c_void,
            len: size_t,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut fid_mr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_mr_regv`.
    pub regv: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            iov: *const iovec,
            count: size_t,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut fid_mr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_mr_regattr`.
    pub regattr: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            attr: *const fi_mr_attr,
            flags: u64,
            mr: *mut *mut fid_mr,
        ) -> c_int,
    >,
}

/// A domain (`struct fid_domain`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_domain {
    /// Object header.
    pub fid: fid,
    /// Domain operations.
    pub ops: *mut fi_ops_domain,
    /// Memory registration operations.
    pub mr: *mut fi_ops_mr,
}
