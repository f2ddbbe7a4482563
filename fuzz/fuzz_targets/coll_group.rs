#![no_main]
//! cargo fuzz target: see `ofi_fuzz::coll_group`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ofi_fuzz::coll_group(data));
