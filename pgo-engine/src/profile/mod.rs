//! Profiles as data (`docs/contracts.md`, "Pinned profiles"): LLVM's text profile
//! (`llvm-profdata merge --text`) and BOLT's fdata, read into counters per function, so that two
//! profiles can be compared (`compare`: how much of the execution they agree on, which functions
//! changed) without trusting either tool's output order, and what llvm-bolt said reading one
//! (`bolt`). The freshness checks and the pin use this; the manifests that pin a profile to its
//! toolchain and sources are in `pinned`.

pub mod agreement;
pub mod bolt;
pub mod compare;

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Which profiler wrote a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// LLVM IR instrumentation (`-Cprofile-generate`), as `llvm-profdata merge --text` writes it.
    Llvm,
    /// BOLT instrumentation, as `merge-fdata` writes it.
    Bolt,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Llvm => "llvm",
            Kind::Bolt => "bolt",
        }
    }
}

/// One function's counters. LLVM: its control-flow hash and counters by position. BOLT: no hash
/// (the binary's sha256 identifies the code), and its branch records keyed by
/// `from-offset to-symbol to-offset`.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub hash: u64,
    pub counters: Counters,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Counters {
    Positional(Vec<u64>),
    Keyed(BTreeMap<String, u64>),
}

impl Function {
    pub fn total(&self) -> u64 {
        match &self.counters {
            Counters::Positional(v) => v.iter().sum(),
            Counters::Keyed(m) => m.values().sum(),
        }
    }
}

/// A whole profile: functions by name.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub functions: BTreeMap<String, Function>,
}

impl Profile {
    pub fn total(&self) -> u64 {
        self.functions.values().map(Function::total).sum()
    }

    pub fn read(kind: Kind, path: &Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the {} profile {}", kind.name(), path.display()))?;
        match kind {
            Kind::Llvm => parse_llvm_text(&text),
            Kind::Bolt => parse_fdata(&text),
        }
        .with_context(|| format!("{} is not a {} profile", path.display(), kind.name()))
    }
}

fn number(line: Option<&str>, what: &str, record: &str) -> Result<u64> {
    let line = line.ok_or_else(|| anyhow!("record {record}: ends before its {what}"))?;
    line.trim()
        .parse()
        .map_err(|_| anyhow!("record {record}: {what} {line:?} is not a number"))
}

/// `llvm-profdata merge --text`: a header of `#` comments and `:flag` lines, then records
/// separated by blank lines: name, `# Func Hash:` hash, `# Num Counters:` n, `# Counter Values:`
/// n values, then value-profile data (not used here).
pub fn parse_llvm_text(text: &str) -> Result<Profile> {
    let mut p = Profile::default();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.peek() {
        if l.starts_with('#') || l.starts_with(':') || l.trim().is_empty() {
            lines.next();
        } else {
            break;
        }
    }
    while let Some(name) = lines.next() {
        if name.trim().is_empty() {
            continue;
        }
        let expect = |line: Option<&str>, header: &str| -> Result<()> {
            match line {
                Some(l) if l.trim() == header => Ok(()),
                other => bail!("record {name}: expected {header:?}, found {other:?}"),
            }
        };
        expect(lines.next(), "# Func Hash:")?;
        let hash = number(lines.next(), "hash", name)?;
        expect(lines.next(), "# Num Counters:")?;
        let n = number(lines.next(), "counter count", name)?;
        expect(lines.next(), "# Counter Values:")?;
        let counters = (0..n)
            .map(|_| number(lines.next(), "counter value", name))
            .collect::<Result<Vec<_>>>()?;
        // Value-profile data runs to the blank line that ends the record.
        for l in lines.by_ref() {
            if l.trim().is_empty() {
                break;
            }
        }
        let f = Function {
            hash,
            counters: Counters::Positional(counters),
        };
        if p.functions.insert(name.to_string(), f).is_some() {
            bail!("record {name} appears twice");
        }
    }
    if p.functions.is_empty() {
        bail!("no function records");
    }
    Ok(p)
}

/// fdata without LBR (what BOLT instrumentation writes): one branch per line,
/// `is_sym from from_off is_sym to to_off mispredicts count`. A branch belongs to the function it
/// leaves, or, for a call from unknown code (`0 [unknown] 0`), to the function it enters.
pub fn parse_fdata(text: &str) -> Result<Profile> {
    let mut p = Profile::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 8 {
            bail!(
                "line {}: {} fields, a branch record has 8: {line:?}",
                i + 1,
                f.len()
            );
        }
        let count: u64 = f[7]
            .parse()
            .map_err(|_| anyhow!("line {}: count {:?} is not a number", i + 1, f[7]))?;
        f[6].parse::<u64>()
            .map_err(|_| anyhow!("line {}: mispredicts {:?} is not a number", i + 1, f[6]))?;
        let (owner, key) = if f[0] == "0" {
            (f[4], format!("{} {} {} <- {}", f[3], f[4], f[5], f[1]))
        } else {
            (f[1], format!("{} {} {} {}", f[2], f[3], f[4], f[5]))
        };
        let func = p
            .functions
            .entry(owner.to_string())
            .or_insert_with(|| Function {
                hash: 0,
                counters: Counters::Keyed(BTreeMap::new()),
            });
        if let Counters::Keyed(m) = &mut func.counters {
            *m.entry(key).or_insert(0) += count;
        }
    }
    if p.functions.is_empty() {
        bail!("no branch records");
    }
    Ok(p)
}

/// The first five of `names`, comma-separated, with ", ..." when there are more: how every
/// message of the engine names the functions it is about.
pub fn first_names<S: AsRef<str>>(names: &[S]) -> String {
    let shown: Vec<&str> = names.iter().take(5).map(AsRef::as_ref).collect();
    let more = if names.len() > shown.len() {
        ", ..."
    } else {
        ""
    };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TEXT: &str = "# IR level Instrumentation Flag\n:ir\n\
        f\n# Func Hash:\n7\n# Num Counters:\n2\n# Counter Values:\n30\n10\n\n\
        g\n# Func Hash:\n9\n# Num Counters:\n1\n# Counter Values:\n60\n\
        # Num Value Kinds:\n1\n# ValueKind = IPVK_MemOPSize:\n1\n# NumValueSites:\n1\n0\n\n";

    #[test]
    fn llvm_text_parses_with_value_data() {
        let p = parse_llvm_text(TEXT).unwrap();
        assert_eq!(p.functions.len(), 2);
        assert_eq!(p.functions["f"].hash, 7);
        assert_eq!(p.functions["g"].counters, Counters::Positional(vec![60]));
        assert_eq!(p.total(), 100);
    }

    #[test]
    fn llvm_text_refuses_broken_records() {
        assert!(parse_llvm_text("f\n# Func Hash:\nx\n").is_err());
        assert!(
            parse_llvm_text("f\n# Func Hash:\n1\n# Num Counters:\n3\n# Counter Values:\n1\n")
                .is_err()
        );
        assert!(parse_llvm_text("# only a header\n").is_err());
        let twice = format!("{TEXT}f\n# Func Hash:\n7\n# Num Counters:\n0\n# Counter Values:\n\n");
        assert!(parse_llvm_text(&twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    #[test]
    fn fdata_groups_branches_by_function() {
        let text = "1 f 10 1 f 20 0 30\n1 f 10 1 g 0 1 10\n0 [unknown] 0 1 g 0 0 60\n";
        let p = parse_fdata(text).unwrap();
        assert_eq!(p.functions.len(), 2);
        assert_eq!(p.functions["f"].total(), 40);
        assert_eq!(p.functions["g"].total(), 60);
        assert!(parse_fdata("1 f 10 1 f 20 0\n").is_err());
        assert!(parse_fdata("1 f 10 1 f 20 0 x\n").is_err());
    }
}
