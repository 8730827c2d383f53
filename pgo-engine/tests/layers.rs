//! The engine's modules form no circle and respect their layers (ARCHITECTURE.md, "Code map: the
//! engine"); the checker is `support/layers.rs`, which the trainer's test shares.

#[path = "support/layers.rs"]
mod support;

use std::path::Path;
use support::{check, Crate};

/// From the bottom up: files and the machine; profiles as data; the training contract; pinned
/// profiles; the proof marker; the binary.
const ENGINE: Crate = Crate {
    name: "pgo_engine",
    layers: &[
        ("digest", 0),
        ("json_file", 0),
        ("host", 0),
        ("profile", 1),
        ("training", 2),
        ("pinned", 3),
        ("proof", 4),
        ("main", 5),
    ],
};

#[test]
fn engine_modules_form_no_cycle_and_respect_the_layers() {
    support::assert_layered(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &ENGINE);
}

/// The checker itself: a circle and an upward use are both reported, naming the modules; the
/// binary's paths through the crate's name count.
#[test]
fn the_check_fails_on_a_circle_and_on_an_upward_use() {
    let files: Vec<(String, String)> =
        vec![
        ("lib".into(), "pub mod profile; pub mod pinned; pub mod digest;".into()),
        ("digest".into(), "// crate::pinned is only a comment\nfn f() {}".into()),
        (
            "profile".into(),
            "use crate::profile::bolt::X; let s = \"crate::proof\";".into(),
        ),
        ("profile::bolt".into(), "use super::Kind; use crate::profile::Y;".into()),
        (
            "pinned".into(),
            "use crate::{digest, profile::bolt};\n#[cfg(test)]\nmod tests { use crate::proof::Z; }"
                .into(),
        ),
        ("proof".into(), "".into()),
        ("host".into(), "use crate::pinned::pin::Pin;".into()),
        ("main".into(), "use pgo_engine::training::run;".into()),
        ("training".into(), "use crate::proof::marker;".into()),
    ];
    let problems = check(&files, &ENGINE);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("circle") && p.contains("profile -> profile::bolt -> profile")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("host (layer 0) uses pinned (layer 3)")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("training (layer 2) uses proof (layer 4)")),
        "{problems:?}"
    );
    // Comments, strings and test modules are not dependencies; main may use any layer.
    assert_eq!(problems.len(), 3, "{problems:?}");
}
