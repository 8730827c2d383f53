//! ARCHITECTURE.md's code map of the trainer names every module of `trainer/src` (the check is
//! the engine's, pgo-engine/tests/support/code_map.rs).

#[path = "../../pgo-engine/tests/support/code_map.rs"]
mod support;

#[test]
fn every_module_is_in_the_code_map() {
    support::assert_mapped(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        "## Code map: the trainer (`trainer/src`)",
    );
}
