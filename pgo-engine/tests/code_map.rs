//! ARCHITECTURE.md's code map of the engine names every module of `pgo-engine/src`.

#[path = "support/code_map.rs"]
mod support;

#[test]
fn every_module_is_in_the_code_map() {
    support::assert_mapped(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        "## Code map: the engine (`pgo-engine/src`)",
    );
}
