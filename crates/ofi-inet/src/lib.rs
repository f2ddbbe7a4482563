//! What ofi's providers over IP sockets share, written once:
//!
//! - [`addr`]: libfabric's socket address formats (FI_SOCKADDR_IN and
//!   FI_SOCKADDR_IN6 bytes), name resolution, and the AV address handling
//!   of socket-addressed endpoints.
//! - [`offers`]: the walk over the interfaces that are up which turns a
//!   getinfo request into one offer place per interface subnet, and the
//!   fields every offer of a place has.
//! - [`poller`]: the epoll set of an endpoint or domain, its wait fd.
//! - [`provider`]: the provider, fabric and domain objects, and the auth
//!   key an endpoint opens with.
//! - [`tcp_core`]: the driver half of `ofi_proto::tcp`'s protocol core, the
//!   same wherever the core runs (tcp's sockets, udp's reliable sessions):
//!   what such an endpoint offers, the tables of sends and one-sided
//!   requests in flight, the endpoint's memory as the target of its peers,
//!   and receive events into completions.
//!
//! Each provider passes its name, which prefixes the errors these make.

#![deny(unsafe_code)]

pub mod addr;
pub mod offers;
pub mod poller;
pub mod provider;
pub mod tcp_core;
