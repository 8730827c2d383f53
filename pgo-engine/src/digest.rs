//! The sha256 of a file and of a tree of files, as the manifests and the proof marker record them:
//! what a profile was trained on and what an artifact was built from.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_bytes(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(sha256_bytes(&data))
}

/// Whether `s` is a sha256 in hex, as every digest here is written.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Digest of the regular files under `root` named by `include` (files or directories, relative;
/// empty: every entry of `root`): sha256 of `sha256sum`'s lines for them sorted by path, i.e.
/// what `find INCLUDE... -type f | LC_ALL=C sort | xargs sha256sum | sha256sum` prints in `root`.
pub fn tree_digest(root: &Path, include: &[String]) -> Result<String> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
        let path = root.join(rel);
        let md = std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if md.is_dir() {
            for e in std::fs::read_dir(&path)? {
                walk(root, &rel.join(e?.file_name()), out)?;
            }
        } else if md.is_file() {
            out.push((rel.to_string_lossy().into_owned(), path));
        }
        Ok(())
    }
    let everything;
    let include = if include.is_empty() {
        everything = entries(root)?;
        &everything
    } else {
        include
    };
    let mut files = Vec::new();
    for i in include {
        walk(root, Path::new(i), &mut files)?;
    }
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut lines = String::new();
    for (rel, path) in &files {
        lines.push_str(&format!("{}  {rel}\n", sha256_file(path)?));
    }
    Ok(sha256_bytes(lines.as_bytes()))
}

/// The names of the entries directly under `dir`, sorted.
pub fn entries(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_digest_is_sha256sum_of_sorted_listing() {
        let d = std::env::temp_dir().join(format!("tree-digest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("src/b")).unwrap();
        std::fs::write(d.join("Cargo.toml"), "x").unwrap();
        std::fs::write(d.join("src/b/z.rs"), "z").unwrap();
        std::fs::write(d.join("src/a.rs"), "a").unwrap();
        let got = tree_digest(&d, &["Cargo.toml".into(), "src".into()]).unwrap();
        let listing = format!(
            "{}  Cargo.toml\n{}  src/a.rs\n{}  src/b/z.rs\n",
            sha256_bytes(b"x"),
            sha256_bytes(b"a"),
            sha256_bytes(b"z")
        );
        assert_eq!(got, sha256_bytes(listing.as_bytes()));
        // No list: every entry of the root, which here is the same files.
        assert_eq!(tree_digest(&d, &[]).unwrap(), got);
        assert!(is_sha256_hex(&got) && !is_sha256_hex("abc"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
