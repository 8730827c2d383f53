//! ARCHITECTURE.md's code map names every top-level module of `gateway/src`, and its glossary
//! every posture with where its code is: a module added or moved without its line in the map fails
//! here, so the map cannot go stale silently.

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

/// The glossary, the folders and `config/postures.rs` agree: every posture the gateway lists (its
/// name is what `gateway paths` prints, the coverage gate reads and a shape's `posture` field
/// names) is in ARCHITECTURE.md's glossary entry with the file or folder its code is in, and
/// that path exists. A posture names a config switch, not a folder, so this is where a moved
/// module or a new posture shows that the glossary went stale.
#[test]
fn every_posture_is_in_the_glossary_with_where_its_code_is() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(manifest.join("../ARCHITECTURE.md")).unwrap();
    let start = map
        .find("- **posture**")
        .expect("ARCHITECTURE.md's glossary has no posture entry");
    let entry = &map[start..];
    let entry = &entry[..entry[2..].find("\n- **").map_or(entry.len(), |e| e + 2)];
    let mut problems = Vec::new();
    for p in gateway::config::postures::POSTURES {
        if !manifest.join("src").join(p.code).exists() {
            problems.push(format!("{}: gateway/src/{} does not exist", p.name, p.code));
        }
        for named in [format!("`{}`", p.name), format!("`{}`", p.code)] {
            if !entry.contains(&named) {
                problems.push(format!("{}: the glossary does not name {named}", p.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
