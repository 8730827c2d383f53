//! What llvm-bolt says of a BOLT profile: how many functions it found profiled (its log's
//! `BOLT-INFO` line, which the proof marker records), and whether the profile fits a PGO binary
//! by its content (`fit`: no profiled function stale or missing), which `pgo-engine verify`
//! requires of a BOLT profile before the optimization reads it.

use anyhow::{bail, Result};

use super::{first_names, Profile};

/// `N out of M functions ... have non-empty execution profile` from llvm-bolt's output.
pub fn function_counts(log: &str) -> Option<(u64, u64)> {
    for line in log.lines() {
        if !line.contains("BOLT-INFO") || !line.contains("have non-empty execution profile") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for i in 0..words.len().saturating_sub(3) {
            if words[i + 1] == "out" && words[i + 2] == "of" {
                if let (Ok(n), Ok(m)) = (words[i].parse(), words[i + 3].parse()) {
                    return Some((n, m));
                }
            }
        }
    }
    None
}

/// Functions of a BOLT profile that may find no function in a PGO binary without making it
/// stale: the C runtime's and the compiler builtins' own code, which the link environment brings
/// (another crt or libgcc, or a linker that leaves them global instead of local) and the
/// crate's source does not decide. Measured: GNU ld leaves `_init`, `_fini`, `__udivti3` and
/// `ceil` global where rust-lld makes them local (172 of 597.7M counts; docs/flake.md).
pub const BOLT_MAY_MISS: &[&str] = &[
    "_init",
    "_fini",
    "_start",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "__udivti3",
    "ceil",
];

/// How a BOLT profile fits a PGO binary: what llvm-bolt found stale reading it, and which of the
/// functions it profiles the binary lacks.
#[derive(Debug, Default)]
pub struct BoltFit {
    /// Profiled functions llvm-bolt found, whose recorded branches do not fit their code.
    pub stale: Vec<String>,
    /// Profiled functions without a symbol of that name and binding in the binary.
    pub missing: Vec<String>,
    /// Missing or stale, but of `BOLT_MAY_MISS`.
    pub allowed: Vec<String>,
    /// llvm-bolt's "N out of M functions ... have non-empty execution profile".
    pub profiled: Option<(u64, u64)>,
}

impl BoltFit {
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some((n, m)) = self.profiled {
            parts.push(format!("llvm-bolt profiles {n} of {m} functions"));
        }
        if !self.stale.is_empty() {
            parts.push(format!(
                "{} profiled function(s) whose code changed (llvm-bolt: invalid, possibly stale profile): {}",
                self.stale.len(),
                first_names(&self.stale)
            ));
        }
        if !self.missing.is_empty() {
            parts.push(format!(
                "{} profiled function(s) this PGO binary lacks: {}",
                self.missing.len(),
                first_names(&self.missing)
            ));
        }
        if !self.allowed.is_empty() {
            parts.push(format!(
                "{} C runtime/builtin function(s) unmatched, allowed: {}",
                self.allowed.len(),
                first_names(&self.allowed)
            ));
        }
        if self.stale.is_empty() && self.missing.is_empty() {
            parts.push("no profiled function stale or missing".into());
        }
        parts.join("; ")
    }
}

/// BOLT's name of a function without its local-symbol suffix (`name/1`) and its
/// `-report-stale` fragment count (`(*2)`): the symbol's name, and whether BOLT saw it local.
fn bolt_symbol(name: &str) -> (&str, bool) {
    let name = name.split_once("(*").map_or(name, |(n, _)| n);
    match name.rsplit_once('/') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => (base, true),
        _ => (name, false),
    }
}

/// Check a BOLT profile against a PGO binary by its content: `report` is what
/// `llvm-bolt PGO -data=PROFILE -report-stale` printed, `symbols` what `llvm-readelf -s -W PGO`
/// printed. The profile fits when llvm-bolt found none of its functions stale and the binary has
/// every function it profiles (a local symbol for BOLT's `name/N`, a global one for `name`),
/// except the C runtime's of `BOLT_MAY_MISS`.
pub fn fit(profile: &Profile, report: &str, symbols: &str) -> Result<BoltFit> {
    let mut fit = BoltFit {
        profiled: function_counts(report),
        ..BoltFit::default()
    };
    if fit.profiled.is_none() {
        bail!("the llvm-bolt report has no \"N out of M functions ... have non-empty execution profile\" line: llvm-bolt did not read the profile");
    }
    let mut in_stale_list = false;
    for line in report.lines() {
        if line.contains("Functions with stale profile:") {
            in_stale_list = true;
            continue;
        }
        if in_stale_list {
            match line.strip_prefix("  ") {
                Some(name) if !name.trim().is_empty() => {
                    fit.stale.push(name.trim().to_owned());
                    continue;
                }
                _ => in_stale_list = false,
            }
        }
    }
    // The symbol table: `Num: Value Size Type Bind Vis Ndx Name`.
    let mut local = std::collections::HashSet::new();
    let mut global = std::collections::HashSet::new();
    for line in symbols.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[0].ends_with(':') || f[6] == "UND" {
            continue;
        }
        match f[4] {
            "LOCAL" => local.insert(f[7]),
            _ => global.insert(f[7]),
        };
    }
    if local.is_empty() && global.is_empty() {
        bail!("the symbol table of the PGO binary is empty: is it stripped?");
    }
    for name in profile.functions.keys() {
        let (base, is_local) = bolt_symbol(name);
        let found = if is_local {
            local.contains(base)
        } else {
            global.contains(base) || base.ends_with("@PLT")
        };
        if !found {
            fit.missing.push(name.clone());
        }
    }
    for list in [&mut fit.stale, &mut fit.missing] {
        let (allowed, kept): (Vec<String>, Vec<String>) = list
            .drain(..)
            .partition(|n| BOLT_MAY_MISS.contains(&bolt_symbol(n).0));
        *list = kept;
        fit.allowed.extend(allowed);
    }
    Ok(fit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::parse_fdata;

    #[test]
    fn bolt_line() {
        let log = "BOLT-INFO: 1234 out of 5678 functions in the binary (21.7%) have non-empty execution profile\n";
        assert_eq!(function_counts(log), Some((1234, 5678)));
        assert_eq!(function_counts("BOLT-INFO: nothing"), None);
    }

    /// What llvm-bolt prints reading a profile with `-report-stale`, and `llvm-readelf -s -W`.
    const BOLT_REPORT: &str = "BOLT-INFO: Functions with stale profile:\n  g/1(*2)\nBOLT-INFO: 3 out of 40 functions in the binary (7.5%) have non-empty execution profile\nBOLT-INFO: profile for 1 objects was ignored\n";
    const SYMBOLS: &str = "Symbol table '.symtab' contains 5 entries:\n   Num:    Value          Size Type    Bind   Vis       Ndx Name\n     1: 0000000000001000    10 FUNC    LOCAL  DEFAULT    14 f\n     2: 0000000000001010    10 FUNC    LOCAL  DEFAULT    14 g\n     3: 0000000000001020    10 FUNC    GLOBAL DEFAULT    14 main\n     4: 0000000000001030    10 FUNC    GLOBAL DEFAULT    14 _init\n     5: 0000000000000000     0 FUNC    GLOBAL DEFAULT   UND h\n";

    #[test]
    fn bolt_fit_names_stale_and_missing_functions_but_not_the_c_runtime() {
        let fdata = |names: &[&str]| {
            let text: String = names
                .iter()
                .map(|n| format!("1 {n} 0 1 {n} 4 0 10\n"))
                .collect();
            parse_fdata(&text).unwrap()
        };
        // All found, none stale (the report's stale list aside).
        let clean = BOLT_REPORT.replace("  g/1(*2)\n", "");
        let fit = super::fit(&fdata(&["f/1", "main", "puts@PLT"]), &clean, SYMBOLS).unwrap();
        assert!(fit.stale.is_empty() && fit.missing.is_empty(), "{fit:?}");
        assert_eq!(fit.profiled, Some((3, 40)));
        // g's code changed: stale. h is undefined here, k absent, f is local not global.
        let fit = super::fit(&fdata(&["f", "g/1", "h", "k/1"]), BOLT_REPORT, SYMBOLS).unwrap();
        assert_eq!(fit.stale, ["g/1(*2)"]);
        assert_eq!(fit.missing, ["f", "h", "k/1"]);
        assert!(fit.describe().contains("whose code changed"));
        // The C runtime's functions may be missing or local-vs-global: allowed, and named.
        let fit = super::fit(&fdata(&["_init/1", "_fini/1", "ceil"]), &clean, SYMBOLS).unwrap();
        assert!(fit.missing.is_empty(), "{fit:?}");
        assert_eq!(fit.allowed, ["_fini/1", "_init/1", "ceil"]);
        // A report without the profile line: llvm-bolt did not read the profile.
        assert!(super::fit(&fdata(&["f/1"]), "BOLT-ERROR: x", SYMBOLS).is_err());
    }
}
