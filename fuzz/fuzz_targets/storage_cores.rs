#![no_main]
//! cargo fuzz target: see `ofi_fuzz::storage_cores`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ofi_fuzz::storage_cores(data));
