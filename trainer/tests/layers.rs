//! The trainer's modules form no circle and respect their layers (ARCHITECTURE.md, "Code map: the
//! trainer"), checked by the engine's checker (pgo-engine/tests/support/layers.rs).

#[path = "../../pgo-engine/tests/support/layers.rs"]
mod support;

use std::path::Path;
use support::Crate;

/// From the bottom up: the mock upstream and the machine; driving a gateway with the shapes;
/// benchmarks and gates; the binary.
const TRAINER: Crate = Crate {
    name: "trainer",
    layers: &[
        ("mock", 0),
        ("host", 0),
        ("drive", 1),
        ("measure", 2),
        ("main", 3),
    ],
};

#[test]
fn trainer_modules_form_no_cycle_and_respect_the_layers() {
    support::assert_layered(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &TRAINER);
}
