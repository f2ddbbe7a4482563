//! The top-level C entry points (being split into modules).

mod tostr;

pub use tostr::*;
