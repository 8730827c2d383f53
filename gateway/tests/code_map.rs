//! ARCHITECTURE.md's code map names every top-level module of `gateway/src`: a module added or
//! moved without its line in the map fails here, so the map cannot go stale silently.

use std::path::Path;

#[test]
fn every_top_level_module_is_in_the_code_map() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(manifest.join("../ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(manifest.join("src")).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // A folder is named as `name/`, a file as `name.rs`, each in backticks.
        let named = if p.is_dir() {
            format!("`{name}/`")
        } else if name.ends_with(".rs") {
            format!("`{name}`")
        } else {
            continue;
        };
        if !map.contains(&named) {
            missing.push(named);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name {}",
        missing.join(", ")
    );
}
