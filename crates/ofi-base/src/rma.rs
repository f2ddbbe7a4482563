//! The range types of the RMA and atomic calls (`struct fi_rma_iov`,
//! `struct fi_rma_ioc`, `struct fi_ioc`), with libfabric's layout. The
//! target side that resolves and applies them is ofi-core's `util::rma`.

/// A remote memory range (`struct fi_rma_iov`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmaIov {
    /// Remote address: a virtual address with FI_MR_VIRT_ADDR, else an
    /// offset into the region (plus the region's requested offset).
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// The region's remote key.
    pub key: u64,
}

/// A remote atomic range (`struct fi_rma_ioc`): `count` elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmaIoc {
    /// Remote address (as in [`RmaIov`]).
    pub addr: u64,
    /// Number of datatype elements.
    pub count: usize,
    /// The region's remote key.
    pub key: u64,
}

/// A local atomic buffer (`struct fi_ioc`): `count` elements at `addr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ioc {
    /// Start address.
    pub addr: usize,
    /// Number of datatype elements.
    pub count: usize,
}

const _: () = assert!(std::mem::size_of::<RmaIov>() == 24);
const _: () = assert!(std::mem::size_of::<RmaIoc>() == 24);
const _: () = assert!(std::mem::size_of::<Ioc>() == 16);
