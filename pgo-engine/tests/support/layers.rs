//! The layers check of a crate's modules, shared by the engine's, the trainer's and the gateway's
//! `layers.rs`: its dependencies run one way (ARCHITECTURE.md, "Code map"): no module imports
//! another that imports it back, directly or through others, and no module uses one of a higher
//! layer.
//!
//! The check reads `src` as text: every path a file names through `crate::`, `super::`, `self::`
//! (or the crate's own name, in its binary) is resolved to the deepest module that exists, and is
//! an edge from the file's module to that module. Comments, string literals and `#[cfg(test)]`
//! modules are left out: a doc link or a test helper is not a dependency of the code. A `mod`
//! declaration is not an edge either; a module's own children are the modules it declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate as the check sees it: the name its binary uses for its library (`pgo_engine`), and
/// its layers from the bottom up, one entry per top-level module (a folder's modules are in its
/// layer; `main` is the binary): a module may use its own layer (acyclically) and the ones below.
pub struct Crate<'a> {
    pub name: &'a str,
    pub layers: &'a [(&'a str, usize)],
}

/// Fails, naming every circle and every upward use, unless the modules of `src` respect `krate`.
pub fn assert_layered(src: &Path, krate: &Crate) {
    let files = read_tree(src);
    assert!(
        files.len() > 10,
        "found only {} files under {src:?}",
        files.len()
    );
    let problems = check(&files, krate);
    assert!(
        problems.is_empty(),
        "module dependencies of {}:\n  {}",
        src.display(),
        problems.join("\n  ")
    );
}

/// (module path, source) for every `.rs` file under `src`; `main` is the binary.
pub fn read_tree(src: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p: PathBuf = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod") {
                    parts.pop();
                }
                out.push((parts.join("::"), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

pub fn check(files: &[(String, String)], krate: &Crate) -> Vec<String> {
    let modules: BTreeSet<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, text) in files {
        let code = strip_tests(&strip_comments_and_strings(text));
        let targets = edges.entry(module.as_str()).or_default();
        for path in paths(&code, krate.name) {
            let Some(abs) = resolve(module, &path, krate.name) else {
                continue;
            };
            // The deepest module the path names (the rest is an item inside it).
            let target = (1..=abs.len())
                .rev()
                .map(|n| abs[..n].join("::"))
                .find(|m| modules.contains(m.as_str()));
            if let Some(t) = target {
                let t = *modules.get(t.as_str()).unwrap();
                if t != module {
                    targets.insert(t);
                }
            }
        }
    }
    let mut problems = Vec::new();
    for cycle in cycles(&edges) {
        problems.push(format!("import circle: {}", cycle.join(" -> ")));
    }
    for (from, tos) in &edges {
        let lf = layer(from, krate);
        for to in tos {
            let lt = layer(to, krate);
            if lf < lt {
                problems.push(format!("{from} (layer {lf}) uses {to} (layer {lt})"));
            }
        }
    }
    problems
}

fn layer(module: &str, krate: &Crate) -> usize {
    if module == "lib" || module.is_empty() {
        return 0;
    }
    let top = module.split("::").next().unwrap_or(module);
    krate
        .layers
        .iter()
        .find(|(p, _)| *p == top)
        .map(|&(_, l)| l)
        .unwrap_or_else(|| panic!("module {module} is in no layer: add it to the layers"))
}

/// `crate::a::b`, `super::x`, `self::y`, `NAME::z` (the binary's name for the library) as
/// absolute segment lists; a path into another crate is `None`.
fn resolve(module: &str, path: &[String], name: &str) -> Option<Vec<String>> {
    let here: Vec<String> = if module == "lib" || module == "main" {
        Vec::new()
    } else {
        module.split("::").map(str::to_owned).collect()
    };
    let (base, rest) = match path[0].as_str() {
        "crate" => (Vec::new(), &path[1..]),
        first if first == name => (Vec::new(), &path[1..]),
        "self" => (here, &path[1..]),
        "super" => {
            let mut b = here;
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                b.pop();
                rest = &rest[1..];
            }
            (b, rest)
        }
        _ => return None,
    };
    let mut abs = base;
    abs.extend(rest.iter().cloned());
    (!abs.is_empty()).then_some(abs)
}

/// Every path that starts with `crate`, `super`, `self` or `name` followed by `::`, with `use`
/// groups (`crate::{a, b::{c, d}}`) expanded.
fn paths(code: &str, name: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident(b[i]) && (i == 0 || !is_ident(b[i - 1]) && b[i - 1] != b':') {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &code[start..i];
            if (matches!(word, "crate" | "super" | "self") || word == name)
                && code[i..].starts_with("::")
            {
                i = tree(code, start, &mut Vec::new(), &mut out);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Parses a path tree at `i` (`a::b::{c, d::e}`), pushing every full path; returns where it ended.
fn tree(code: &str, mut i: usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    let depth = prefix.len();
    loop {
        i = skip_ws(b, i);
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                i = skip_ws(b, i);
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    break;
                }
                i = tree(code, i, prefix, out);
                i = skip_ws(b, i);
                if i < b.len() && b[i] == b',' {
                    i += 1;
                }
            }
            prefix.truncate(depth);
            return i;
        }
        let start = i;
        while i < b.len() && (is_ident(b[i]) || b[i] == b'*') {
            i += 1;
        }
        if start == i {
            break;
        }
        prefix.push(code[start..i].to_owned());
        let j = skip_ws(b, i);
        if code[j..].starts_with("::") {
            i = j + 2;
        } else {
            break;
        }
    }
    if prefix.len() > depth {
        out.push(prefix.clone());
    }
    prefix.truncate(depth);
    i
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Source with comments removed and string and char literals emptied, so that only code is left.
fn strip_comments_and_strings(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if s[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if s[i..].starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if s[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if s[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && (s[i..].starts_with("r#") || s[i..].starts_with("r\""))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            let hashes = s[i + 1..].bytes().take_while(|&h| h == b'#').count();
            let open = i + 1 + hashes;
            if b.get(open) == Some(&b'"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let end = s[open + 1..]
                    .find(&close)
                    .map_or(b.len(), |e| open + 1 + e + close.len());
                out.push_str("\"\"");
                i = end;
            } else {
                out.push('r');
                i += 1;
            }
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{1f}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let end = s[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
                out.push_str("' '");
                i = end;
            } else if let Some(ch) = s[i + 1..].chars().next() {
                let after = i + 1 + ch.len_utf8();
                if b.get(after) == Some(&b'\'') {
                    out.push_str("' '");
                    i = after + 1;
                } else {
                    out.push('\'');
                    i += 1;
                }
            } else {
                i += 1;
            }
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Removes every `#[cfg(test)]` item that is a `mod NAME { ... }` block.
fn strip_tests(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        if trimmed.starts_with("mod ") {
            if let Some(open) = trimmed.find('{') {
                let mut depth = 0;
                let mut end = trimmed.len();
                for (k, ch) in trimmed[open..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &trimmed[end..];
                continue;
            }
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Every circle in the graph, as `a -> b -> ... -> a` (one per strongly connected component).
fn cycles<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for &start in edges.keys() {
        if done.contains(start) {
            continue;
        }
        // Depth-first search for a path back to `start`.
        let mut stack: Vec<(&str, Vec<&str>)> = vec![(start, vec![start])];
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for &next in edges.get(node).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start);
                    if !cycle.iter().any(|m| done.contains(m)) {
                        found.push(cycle);
                    }
                    stack.clear();
                    break;
                }
                if seen.insert(next) {
                    let mut p = path.clone();
                    p.push(next);
                    stack.push((next, p));
                }
            }
        }
        done.insert(start);
    }
    found
}
