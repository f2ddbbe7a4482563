//! ofi's C ABI: a drop-in `libfabric.so.1`.
//!
//! Built as a cdylib, this crate exports libfabric 1.x's entry points with
//! libfabric's symbol versions (`libfabric.map`, [`compat`]) and lays out
//! every structure and ops table exactly as libfabric 1.17's headers do, so
//! C programs built against libfabric run on ofi's providers unchanged.
//!
//! - [`abi`]: the C types, named and laid out as in `rdma/fabric.h` and `rdma/fi_*.h`.
//! - `info`: converting `fi_info` lists to and from [`ofi_core::Info`].
//! - [`top`]: the top-level entry points (`fi_getinfo`, `fi_tostr`, `fi_param_get`, …).
//! - [`compat`]: the exported symbols and the FABRIC_1.0–1.2 entry points.
//! - [`obj`]: the fabric objects and their ops tables.
//!
//! Every exported function and ops-table slot runs inside the panic boundary
//! of `guard`; NULL or invalid arguments return `-FI_EINVAL`. No function
//! here is `#[no_mangle]`: [`compat`] alone names the exported symbols.
#![allow(unsafe_code)]

pub mod abi;
pub mod compat;
pub(crate) mod guard;
pub(crate) mod info;
pub mod obj;
pub mod top;
