//! The code map check shared by the engine's and the trainer's `code_map.rs`: a crate's section of
//! ARCHITECTURE.md names every module of its `src` (a folder as `name/`, a file as `name.rs`, in
//! backticks; a folder's own `mod.rs` aside), so that a module added or moved without its line in
//! the map fails, and the map cannot go stale silently.

use std::path::Path;

/// Fails, naming them, unless the section of ARCHITECTURE.md headed `heading` names every module
/// of the crate at `manifest` (its `CARGO_MANIFEST_DIR`).
pub fn assert_mapped(manifest: &Path, heading: &str) {
    let missing = unnamed(
        &manifest.join("src"),
        &manifest.join("../ARCHITECTURE.md"),
        heading,
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's {heading:?} does not name {}",
        missing.join(", ")
    );
}

/// The modules under `src` that the section of `architecture` headed `heading` does not name.
pub fn unnamed(src: &Path, architecture: &Path, heading: &str) -> Vec<String> {
    let map = std::fs::read_to_string(architecture).unwrap();
    let start = map
        .find(heading)
        .unwrap_or_else(|| panic!("{} has no section {heading:?}", architecture.display()));
    let rest = &map[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut missing = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let named = if p.is_dir() {
                stack.push(p.clone());
                format!("`{name}/`")
            } else if name.ends_with(".rs") && !(name == "mod.rs" && dir != src) {
                format!("`{name}`")
            } else {
                continue;
            };
            if !section.contains(&named) {
                let rel = p.strip_prefix(src).unwrap().display().to_string();
                missing.push(format!("{named} ({rel})"));
            }
        }
    }
    missing.sort();
    missing
}
