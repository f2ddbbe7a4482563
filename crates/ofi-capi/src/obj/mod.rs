//! The libfabric objects: fids and their ops tables.
