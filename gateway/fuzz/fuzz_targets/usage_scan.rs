#![no_main]
//! The usage scanner behind access-log tokens, metrics and token rate limits.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gateway::json::usage::scan_usage(data);
});
