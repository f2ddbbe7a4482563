//! The C types of libfabric 1.17's public headers (`rdma/fabric.h` and
//! `rdma/fi_*.h`), laid out exactly as C lays them out.
//!
//! Every struct keeps its C name and C field names; function pointers are
//! `Option<unsafe extern "C" fn ..>` (NULL is `None`). C enums are `u32`
//! aliases named as the C enum; their values live in `ofi_core::consts` or
//! in [`consts`] for those only the C ABI needs. Everything is re-exported
//! flat, so `use crate::abi::*;` brings every C type into scope.
#![allow(non_camel_case_types)]
// The ops tables are C function-pointer tables; their types are the C ones.
#![allow(clippy::type_complexity)]

mod atomic;
mod cm;
mod collective;
pub mod consts;
mod domain;
mod endpoint;
mod eq;
mod fabric;
mod prov;
mod rma;
mod tagged;
mod trigger;

pub use atomic::*;
pub use cm::*;
pub use collective::*;
pub use consts::*;
pub use domain::*;
pub use endpoint::*;
pub use eq::*;
pub use fabric::*;
pub use prov::*;
pub use rma::*;
pub use tagged::*;
pub use trigger::*;

pub use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};
