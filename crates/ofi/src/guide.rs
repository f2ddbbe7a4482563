//! For people coming from C: libfabric's calls and their ofi counterparts.
#![doc = include_str!("../../../docs/from-c.md")]
