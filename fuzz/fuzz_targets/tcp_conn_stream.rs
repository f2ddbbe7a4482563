#![no_main]
//! cargo fuzz target: see `ofi_fuzz::tcp_conn_stream`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ofi_fuzz::tcp_conn_stream(data));
