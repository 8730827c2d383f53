#![no_main]
//! The config checker (every section, through `config::parse`, which starts no store) on arbitrary
//! files: every problem is an error with a path, never a panic.
use gateway::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(errs) = config::parse(data) {
        assert!(!errs.is_empty());
        for e in errs {
            assert!(e.path.starts_with('$'));
        }
    }
});
