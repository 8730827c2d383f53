//! The gateway's dependencies run one way (ARCHITECTURE.md, "Code map"): no module imports
//! another that imports it back, directly or through others, and no module uses one of a higher
//! layer. The checker (how `src` is read as text, what counts as an edge) is the one the engine's
//! and the trainer's layers tests use: pgo-engine/tests/support/layers.rs.

#[path = "../../pgo-engine/tests/support/layers.rs"]
mod support;

use std::path::Path;
use support::{check, Crate};

/// Layers from the bottom up, one entry per top-level module of the crate (a folder's modules are
/// in its layer); a module may use its own layer (acyclically) and the ones below.
const GATEWAY: Crate = Crate {
    name: "gateway",
    layers: &[
        ("json", 0),
        ("sse", 0),
        ("alloc", 0),
        ("checker", 0),
        ("dialect", 1),
        ("http", 2),
        ("provider", 3),
        ("routing", 4),
        ("admission", 5),
        ("telemetry", 6),
        ("exchange", 7),
        ("config", 8),
        ("serve", 9),
        ("main", 10),
    ],
};

#[test]
fn gateway_modules_form_no_cycle_and_respect_the_layers() {
    support::assert_layered(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &GATEWAY);
}

/// The checker itself: a circle and an upward use are both reported, naming the modules.
#[test]
fn the_check_fails_on_a_circle_and_on_an_upward_use() {
    let files: Vec<(String, String)> =
        vec![
        ("lib".into(), "pub mod dialect; pub mod admission; pub mod json;".into()),
        ("json".into(), "// crate::admission is only a comment\nfn f() {}".into()),
        (
            "dialect".into(),
            "use crate::dialect::chat::X; let s = \"crate::serve\";".into(),
        ),
        ("dialect::chat".into(), "use super::Dialect; use crate::dialect::Y;".into()),
        (
            "admission".into(),
            "use crate::{json, dialect::chat};\n#[cfg(test)]\nmod tests { use crate::serve::Z; }"
                .into(),
        ),
        ("serve".into(), "".into()),
        ("checker".into(), "use crate::admission::auth::Keys;".into()),
    ];
    let problems = check(&files, &GATEWAY);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("circle") && p.contains("dialect -> dialect::chat -> dialect")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("checker (layer 0) uses admission (layer 5)")),
        "{problems:?}"
    );
    // Comments, strings and test modules are not dependencies.
    assert_eq!(problems.len(), 2, "{problems:?}");
}
