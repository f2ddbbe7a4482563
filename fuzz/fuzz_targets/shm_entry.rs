#![no_main]
//! cargo fuzz target: see `ofi_fuzz::shm_entry`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ofi_fuzz::shm_entry(data));
