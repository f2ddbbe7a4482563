//! `rdma/fabric.h`: fid, fi_info and its attributes, the fabric object.

use libc::{c_char, c_int, c_void, size_t};

/// An address handle returned by an address vector (`fi_addr_t`).
pub type fi_addr_t = u64;
/// A pointer to a generic fabric object (`fid_t`).
pub type fid_t = *mut fid;

/// `enum fi_av_type`.
pub type fi_av_type = u32;
/// `enum fi_mr_mode` (the legacy basic/scalable values).
pub type fi_mr_mode = u32;
/// `enum fi_progress`.
pub type fi_progress = u32;
/// `enum fi_threading`.
pub type fi_threading = u32;
/// `enum fi_resource_mgmt`.
pub type fi_resource_mgmt = u32;
/// `enum fi_ep_type`.
pub type fi_ep_type = u32;
/// `enum fi_bus_type`.
pub type fi_bus_type = u32;
/// `enum fi_link_state`.
pub type fi_link_state = u32;
/// `enum fi_type`: what `fi_tostr` formats.
pub type fi_type = u32;
/// `enum fi_param_type`.
pub type fi_param_type = u32;

/// An atomic or collective buffer: address and element count (`struct fi_ioc`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ioc {
    /// Start of the buffer.
    pub addr: *mut c_void,
    /// Number of elements.
    pub count: size_t,
}

/// Transmit context attributes (`struct fi_tx_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_tx_attr {
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
    /// Traffic class.
    pub tclass: u32,
}

/// Receive context attributes (`struct fi_rx_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_rx_attr {
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
    /// Buffered receive space.
    pub total_buffered_recv: size_t,
    /// Queue depth.
    pub size: size_t,
    /// Largest iov count.
    pub iov_limit: size_t,
}

/// Endpoint attributes (`struct fi_ep_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ep_attr {
    /// Endpoint type (`enum fi_ep_type`).
    pub r#type: fi_ep_type,
    /// Wire protocol.
    pub protocol: u32,
    /// Wire protocol version.
    pub protocol_version: u32,
    /// Largest message.
    pub max_msg_size: size_t,
    /// Message prefix size (FI_MSG_PREFIX).
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
    /// Length of `auth_key`.
    pub auth_key_size: size_t,
    /// Authorization key.
    pub auth_key: *mut u8,
}

/// Domain attributes (`struct fi_domain_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_domain_attr {
    /// An opened domain to match (hints) or NULL.
    pub domain: *mut crate::abi::fid_domain,
    /// Domain name.
    pub name: *mut c_char,
    /// Threading model.
    pub threading: fi_threading,
    /// Control progress model.
    pub control_progress: fi_progress,
    /// Data progress model.
    pub data_progress: fi_progress,
    /// Resource management.
    pub resource_mgmt: fi_resource_mgmt,
    /// Address vector type.
    pub av_type: fi_av_type,
    /// Memory registration mode bits.
    pub mr_mode: c_int,
    /// Size of a memory key.
    pub mr_key_size: size_t,
    /// Size of remote CQ data.
    pub cq_data_size: size_t,
    /// Number of CQs.
    pub cq_cnt: size_t,
    /// Number of endpoints.
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
    /// Number of counters.
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
    /// Number of memory regions.
    pub mr_cnt: size_t,
    /// Traffic class.
    pub tclass: u32,
}

/// Fabric attributes (`struct fi_fabric_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_fabric_attr {
    /// An opened fabric to match (hints) or NULL.
    pub fabric: *mut fid_fabric,
    /// Fabric name.
    pub name: *mut c_char,
    /// Provider name.
    pub prov_name: *mut c_char,
    /// Provider version.
    pub prov_version: u32,
    /// API version.
    pub api_version: u32,
}

/// A provider offer or hints (`struct fi_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_info {
    /// Next offer in the list.
    pub next: *mut fi_info,
    /// Capabilities.
    pub caps: u64,
    /// Modes.
    pub mode: u64,
    /// Address format.
    pub addr_format: u32,
    /// Length of `src_addr`.
    pub src_addrlen: size_t,
    /// Length of `dest_addr`.
    pub dest_addrlen: size_t,
    /// Source address.
    pub src_addr: *mut c_void,
    /// Destination address.
    pub dest_addr: *mut c_void,
    /// Connection request handle or opened object.
    pub handle: fid_t,
    /// Transmit attributes.
    pub tx_attr: *mut fi_tx_attr,
    /// Receive attributes.
    pub rx_attr: *mut fi_rx_attr,
    /// Endpoint attributes.
    pub ep_attr: *mut fi_ep_attr,
    /// Domain attributes.
    pub domain_attr: *mut fi_domain_attr,
    /// Fabric attributes.
    pub fabric_attr: *mut fi_fabric_attr,
    /// NIC description.
    pub nic: *mut fid_nic,
}

/// NIC device attributes (`struct fi_device_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_device_attr {
    /// Device name.
    pub name: *mut c_char,
    /// Device id.
    pub device_id: *mut c_char,
    /// Device version.
    pub device_version: *mut c_char,
    /// Vendor id.
    pub vendor_id: *mut c_char,
    /// Driver.
    pub driver: *mut c_char,
    /// Firmware.
    pub firmware: *mut c_char,
}

/// PCI location (`struct fi_pci_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fi_pci_attr {
    /// PCI domain.
    pub domain_id: u16,
    /// Bus.
    pub bus_id: u8,
    /// Device.
    pub device_id: u8,
    /// Function.
    pub function_id: u8,
}

/// The bus-specific part of [`fi_bus_attr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_bus_attr_attr {
    /// PCI attributes.
    pub pci: fi_pci_attr,
}

/// Bus attributes (`struct fi_bus_attr`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_bus_attr {
    /// Bus type.
    pub bus_type: fi_bus_type,
    /// Bus-specific attributes.
    pub attr: fi_bus_attr_attr,
}

/// Link attributes (`struct fi_link_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_link_attr {
    /// Link address.
    pub address: *mut c_char,
    /// MTU.
    pub mtu: size_t,
    /// Speed.
    pub speed: size_t,
    /// State.
    pub state: fi_link_state,
    /// Network type.
    pub network_type: *mut c_char,
}

/// Base operations of every object (`struct fi_ops`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops {
    /// Size of this table.
    pub size: size_t,
    /// `fi_close`.
    pub close: Option<unsafe extern "C" fn(fid: *mut fid) -> c_int>,
    /// `fi_bind`.
    pub bind: Option<unsafe extern "C" fn(fid: *mut fid, bfid: *mut fid, flags: u64) -> c_int>,
    /// `fi_control`.
    pub control:
        Option<unsafe extern "C" fn(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int>,
    /// `fi_open_ops`.
    pub ops_open: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            name: *const c_char,
            flags: u64,
            ops: *mut *mut c_void,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_tostr` of the object.
    pub tostr:
        Option<unsafe extern "C" fn(fid: *const fid, buf: *mut c_char, len: size_t) -> c_int>,
    /// `fi_set_ops`.
    pub ops_set: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            name: *const c_char,
            flags: u64,
            ops: *mut c_void,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// The header of every fabric object (`struct fid`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid {
    /// Object class (`FI_CLASS_*`).
    pub fclass: size_t,
    /// The application's context.
    pub context: *mut c_void,
    /// Base operations.
    pub ops: *mut fi_ops,
}

/// Fabric operations (`struct fi_ops_fabric`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_ops_fabric {
    /// Size of this table.
    pub size: size_t,
    /// `fi_domain`.
    pub domain: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            dom: *mut *mut crate::abi::fid_domain,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_passive_ep`.
    pub passive_ep: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            pep: *mut *mut crate::abi::fid_pep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_eq_open`.
    pub eq_open: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            attr: *mut crate::abi::fi_eq_attr,
            eq: *mut *mut crate::abi::fid_eq,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `fi_wait_open`.
    pub wait_open: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            attr: *mut crate::abi::fi_wait_attr,
            waitset: *mut *mut crate::abi::fid_wait,
        ) -> c_int,
    >,
    /// `fi_trywait`.
    pub trywait: Option<
        unsafe extern "C" fn(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int,
    >,
    /// `fi_domain2`.
    pub domain2: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            dom: *mut *mut crate::abi::fid_domain,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// A fabric (`struct fid_fabric`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_fabric {
    /// Object header.
    pub fid: fid,
    /// Fabric operations.
    pub ops: *mut fi_ops_fabric,
    /// API version the fabric was opened with.
    pub api_version: u32,
}

/// A NIC description (`struct fid_nic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fid_nic {
    /// Object header.
    pub fid: fid,
    /// Device attributes.
    pub device_attr: *mut fi_device_attr,
    /// Bus attributes.
    pub bus_attr: *mut fi_bus_attr,
    /// Link attributes.
    pub link_attr: *mut fi_link_attr,
    /// Provider attributes.
    pub prov_attr: *mut c_void,
}

/// Argument of `FI_ALIAS` (`struct fi_alias`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_alias {
    /// Where the alias is returned.
    pub fid: *mut *mut fid,
    /// Flags of the alias.
    pub flags: u64,
}

/// Argument of `FI_GET_VAL` / `FI_SET_VAL` (`struct fi_fid_var`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_fid_var {
    /// Variable name.
    pub name: c_int,
    /// Value.
    pub val: *mut c_void,
}

/// Argument of `FI_GET_RAW_MR` (`struct fi_mr_raw_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_mr_raw_attr {
    /// Flags.
    pub flags: u64,
    /// Base address returned.
    pub base_addr: *mut u64,
    /// Raw key buffer.
    pub raw_key: *mut u8,
    /// Raw key size (in: buffer size, out: key size).
    pub key_size: *mut size_t,
}

/// Argument of `FI_MAP_RAW_MR` (`struct fi_mr_map_raw`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_mr_map_raw {
    /// Flags.
    pub flags: u64,
    /// Base address.
    pub base_addr: u64,
    /// Raw key.
    pub raw_key: *mut u8,
    /// Raw key size.
    pub key_size: size_t,
    /// Where the mapped key is returned.
    pub key: *mut u64,
}

/// A tunable as listed by `fi_getparams` (`struct fi_param`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_param {
    /// Variable name.
    pub name: *const c_char,
    /// Value type.
    pub r#type: fi_param_type,
    /// Help text.
    pub help_string: *const c_char,
    /// Value from the environment, or NULL.
    pub value: *const c_char,
}

/// Provider-owned space in each operation (FI_CONTEXT mode, `struct fi_context`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_context {
    /// Provider scratch space.
    pub internal: [*mut c_void; 4],
}

/// Provider-owned space in each operation (FI_CONTEXT2 mode, `struct fi_context2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_context2 {
    /// Provider scratch space.
    pub internal: [*mut c_void; 8],
}

/// Context of a receive completed with FI_RECV_CONTEXT-style reporting (`struct fi_recv_context`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_recv_context {
    /// The endpoint.
    pub ep: *mut crate::abi::fid_ep,
    /// The application's context.
    pub context: *mut c_void,
}
