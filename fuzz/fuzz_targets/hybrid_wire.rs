#![no_main]
//! cargo fuzz target: see `ofi_fuzz::hybrid_wire`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ofi_fuzz::hybrid_wire(data));
