//! Profiles as data (`docs/contracts.md`, "Pinned profiles"): LLVM's text profile
//! (`llvm-profdata merge --text`) and BOLT's fdata, read into counters per function, so that two
//! profiles can be compared (how much of the execution they agree on, which functions changed)
//! without trusting either tool's output order. The freshness checks and the refresh command use
//! this; the manifests that pin a profile to its toolchain and sources are in `pinned.rs`.

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

/// A function whose share of all counts moved between the two profiles.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Move {
    pub function: String,
    pub base_pct: f64,
    pub test_pct: f64,
}

/// How two profiles of the same kind relate.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Comparison {
    /// Sum over the counters both profiles have (same function, same hash, same counter) of the
    /// smaller of the two normalized counts, in percent: 100 for profiles that are equal up to
    /// scale; functions whose hash changed or that only one profile has add nothing. This is
    /// `llvm-profdata overlap`'s "edge profile overlap", applied to either kind.
    pub overlap_pct: f64,
    /// The same over the functions that count the request's work, each profile normalized by
    /// their counts alone: [`counts_scheduling`]'s functions left out. The freshness gate.
    pub work_overlap_pct: f64,
    pub base_functions: usize,
    pub test_functions: usize,
    pub base_total: u64,
    pub test_total: u64,
    /// In both, with another hash or another number of counters: the code changed.
    pub changed: Vec<String>,
    /// With counts in the base only / the test only, largest share first.
    pub only_base: Vec<Move>,
    pub only_test: Vec<Move>,
    /// The functions whose share of all counts moved most (absolute), largest first.
    pub moves: Vec<Move>,
}

fn share(f: &Function, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        f.total() as f64 * 100.0 / total as f64
    }
}

/// The edge overlap, in percent, of the functions `keep` names, each profile normalized by their
/// counts: a function whose hash or number of counters changed, or that one profile lacks, adds
/// nothing; 0 when either profile has no counts there.
fn overlap(base: &Profile, test: &Profile, keep: impl Fn(&str) -> bool) -> f64 {
    let total = |p: &Profile| -> u64 {
        p.functions
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, f)| f.total())
            .sum()
    };
    let (bt, tt) = (total(base), total(test));
    if bt == 0 || tt == 0 {
        return 0.0;
    }
    let min = |x: u64, y: u64| (x as f64 / bt as f64).min(y as f64 / tt as f64);
    let mut sum = 0.0;
    for (name, b) in base.functions.iter().filter(|(n, _)| keep(n)) {
        let Some(t) = test.functions.get(name).filter(|t| t.hash == b.hash) else {
            continue;
        };
        sum += match (&b.counters, &t.counters) {
            (Counters::Positional(x), Counters::Positional(y)) if x.len() == y.len() => {
                x.iter().zip(y).map(|(&x, &y)| min(x, y)).sum::<f64>()
            }
            (Counters::Keyed(x), Counters::Keyed(y)) => x
                .iter()
                .filter_map(|(k, &c)| y.get(k).map(|&d| min(c, d)))
                .sum::<f64>(),
            _ => 0.0,
        };
    }
    sum * 100.0
}

/// Crates whose functions run as often as the event loop goes round and tasks are woken: the
/// async runtime and the pieces that wait on it (and std, for its clocks, locks and parking).
const RUNTIME_CRATES: [&str; 7] = [
    "tokio",
    "mio",
    "hyper_util",
    "hyper_rustls",
    "atomic_waker",
    "want",
    "std",
];

/// Whether the function named `name` (a profile's symbol: legacy `_ZN` or v0 `_R` mangling,
/// with LLVM's `file;` prefix of local symbols or BOLT's `/N` suffix) counts scheduling rather
/// than work: a function of the runtime's crates or generic over their types, a future's `poll`
/// or a `park`, or a closure (an async block's body is one). How often these run follows how
/// the machine timed the training (how many reads found nothing, how many times a task was
/// polled before its bytes came), not what the requests asked: two quiet machines trained the
/// same binary to overlaps of 96.0% (LLVM) and 91.8% (BOLT) over all functions, 99.4% and 99.8%
/// over the rest, where a stale profile is at 76% and 53% (nix/README.md, Thresholds).
pub fn counts_scheduling(name: &str) -> bool {
    let sym = name.rsplit(';').next().unwrap_or(name);
    let sym = sym.split('/').next().unwrap_or(sym);
    if sym.contains("closure") {
        return true;
    }
    // A path segment named poll... or park...: its length's last digit, then the name.
    let b = sym.as_bytes();
    let segment_at = |word: &str| {
        sym.match_indices(word)
            .any(|(i, _)| i > 0 && b[i - 1].is_ascii_digit())
    };
    if segment_at("poll") || segment_at("park") {
        return true;
    }
    RUNTIME_CRATES.iter().any(|krate| {
        // Legacy: the first segment (`_ZN5tokio`), or a path in a generic or an impl's type
        // (`$LT$tokio..`); v0: a crate root (`Cs1a2b_5tokio`, `C5tokio`).
        let len = krate.len().to_string();
        sym.match_indices(krate).any(|(i, _)| {
            let after = &sym[i + krate.len()..];
            let before = &sym[..i];
            let legacy_path = after.starts_with("..")
                && !before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            let segment = before
                .strip_suffix(len.as_str())
                .is_some_and(|b| b.ends_with(['N', '_', 'C']));
            legacy_path || segment
        })
    })
}

/// Compare `test` with `base`; `top` bounds the lists of moves and one-sided functions.
pub fn compare(base: &Profile, test: &Profile, top: usize) -> Comparison {
    let (bt, tt) = (base.total(), test.total());
    let mut changed = Vec::new();
    let mut moves = Vec::new();
    let mut only_base = Vec::new();
    for (name, b) in &base.functions {
        let Some(t) = test.functions.get(name) else {
            if b.total() > 0 {
                only_base.push(Move {
                    function: name.clone(),
                    base_pct: share(b, bt),
                    test_pct: 0.0,
                });
            }
            continue;
        };
        let same_shape = match (&b.counters, &t.counters) {
            (Counters::Positional(x), Counters::Positional(y)) => x.len() == y.len(),
            (Counters::Keyed(_), Counters::Keyed(_)) => true,
            _ => false,
        };
        if b.hash != t.hash || !same_shape {
            changed.push(name.clone());
            continue;
        }
        let (bp, tp) = (share(b, bt), share(t, tt));
        if bp != tp {
            moves.push(Move {
                function: name.clone(),
                base_pct: bp,
                test_pct: tp,
            });
        }
    }
    let mut only_test: Vec<Move> = test
        .functions
        .iter()
        .filter(|(n, f)| !base.functions.contains_key(*n) && f.total() > 0)
        .map(|(n, f)| Move {
            function: n.clone(),
            base_pct: 0.0,
            test_pct: share(f, tt),
        })
        .collect();
    let by_size = |a: &Move, b: &Move| {
        let (da, db) = (
            (a.test_pct - a.base_pct).abs(),
            (b.test_pct - b.base_pct).abs(),
        );
        db.total_cmp(&da).then_with(|| a.function.cmp(&b.function))
    };
    for list in [&mut moves, &mut only_base, &mut only_test] {
        list.sort_by(by_size);
    }
    moves.truncate(top);
    Comparison {
        overlap_pct: overlap(base, test, |_| true),
        work_overlap_pct: overlap(base, test, |name| !counts_scheduling(name)),
        base_functions: base.functions.len(),
        test_functions: test.functions.len(),
        base_total: bt,
        test_total: tt,
        changed,
        only_base,
        only_test,
        moves,
    }
}

/// The comparison as the lines the checks and the refresh command print.
pub fn describe(kind: Kind, c: &Comparison, top: usize) -> String {
    let mut s = format!(
        "{} profiles: overlap {:.3}%, of the work {:.3}% (scheduling left out); {} -> {} functions, total count {} -> {}\n\
         functions changed (other hash): {}; with counts only before: {}; only after: {}\n",
        kind.name(),
        c.overlap_pct,
        c.work_overlap_pct,
        c.base_functions,
        c.test_functions,
        c.base_total,
        c.test_total,
        c.changed.len(),
        c.only_base.len(),
        c.only_test.len()
    );
    let mut list = |title: &str, items: &[Move]| {
        if items.is_empty() {
            return;
        }
        s.push_str(title);
        for m in items.iter().take(top) {
            s.push_str(&format!(
                "  {:>8.4}% -> {:>8.4}%  {}\n",
                m.base_pct, m.test_pct, m.function
            ));
        }
    };
    list(
        "largest moves (share of all counts, before -> after):\n",
        &c.moves,
    );
    list("with counts only before:\n", &c.only_base);
    list("with counts only after:\n", &c.only_test);
    if !c.changed.is_empty() {
        s.push_str("changed:\n");
        for n in c.changed.iter().take(top) {
            s.push_str(&format!("  {n}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# IR level Instrumentation Flag\n:ir\n\
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
    fn overlap_is_scale_free_and_drops_changed_functions() {
        let a = parse_llvm_text(TEXT).unwrap();
        let doubled = parse_llvm_text(
            &TEXT
                .replace("\n30\n10\n", "\n60\n20\n")
                .replace("\n60\n#", "\n120\n#"),
        )
        .unwrap();
        let c = compare(&a, &doubled, 5);
        assert!((c.overlap_pct - 100.0).abs() < 1e-9, "{c:?}");
        assert!(c.changed.is_empty() && c.moves.is_empty());
        // g's hash changes: its 60% of the counts no longer overlap.
        let edited = parse_llvm_text(&TEXT.replace("\n9\n", "\n10\n")).unwrap();
        let c = compare(&a, &edited, 5);
        assert_eq!(c.changed, vec!["g".to_string()]);
        assert!((c.overlap_pct - 40.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn fdata_groups_branches_by_function() {
        let text = "1 f 10 1 f 20 0 30\n1 f 10 1 g 0 1 10\n0 [unknown] 0 1 g 0 0 60\n";
        let p = parse_fdata(text).unwrap();
        assert_eq!(p.functions.len(), 2);
        assert_eq!(p.functions["f"].total(), 40);
        assert_eq!(p.functions["g"].total(), 60);
        let moved =
            parse_fdata("1 f 10 1 f 20 0 30\n1 f 10 1 g 0 1 40\n0 [unknown] 0 1 g 0 0 30\n")
                .unwrap();
        let c = compare(&p, &moved, 5);
        // f: min(.3,.3) + min(.1,.4); g: min(.6,.3).
        assert!((c.overlap_pct - 70.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.moves[0].function, "f");
        assert!(parse_fdata("1 f 10 1 f 20 0\n").is_err());
        assert!(parse_fdata("1 f 10 1 f 20 0 x\n").is_err());
    }

    #[test]
    fn scheduling_functions_are_told_from_work() {
        for name in [
            // The runtime's crates, in either mangling, with LLVM's prefix or BOLT's suffix.
            "_ZN5tokio7runtime2io12registration12Registration10poll_ready17h4a2adc4c2129a4fcE",
            "tokio.1984b93d253eeaef-cgu.0;_ZN5tokio4task5local8LocalSet4tick17h609bee78c5a170fdE",
            "_ZN3mio5poll4Poll4poll17habcE",
            "_ZN12atomic_waker11AtomicWaker8register17hf5805dfa6c80fd32E",
            "_RNvMNtNtNtNtCsjrHSEGnQ3l9_3std3sys3pal4unix4timeNtB2_8Timespec3now/1",
            // Generic over the runtime's types.
            "_ZN4core3ptr106drop_in_place$LT$std..sync..poison..mutex..MutexGuard$LT$tokio..runtime..io..scheduled_io..Waiters$GT$$GT$17h5d10dc0e817ff151E",
            // Polls, parks and async bodies of any crate.
            "_ZN5hyper5proto2h18dispatch32Dispatcher$LT$D$C$Bs$C$I$C$T$GT$10poll_write17hef250d96276ab251E",
            "_ZN88_$LT$gateway..serve..conn..ConnTask$LT$S$GT$$u20$as$u20$core..future..future..Future$GT$4poll17h3e4f04793c4f86d9E",
            "gateway.d7702b4540046871-cgu.0;_ZN7gateway4http6client14UpstreamClient7connect28_$u7b$$u7b$closure$u7d$$u7d$28_$u7b$$u7b$closure$u7d$$u7d$17he50984383a678307E/1",
        ] {
            assert!(counts_scheduling(name), "{name}");
        }
        for name in [
            "gateway.d7702b4540046871-cgu.0;_ZN7gateway4json15Cursor$LT$S$GT$8value_in17h47e2b8bd615e3b92E",
            "_ZN103_$LT$gateway..dialect..native..NativeStream$u20$as$u20$gateway..dialect..transform..StreamTransform$GT$8on_event17hd6536a6eb772248cE",
            "serde_json.a2a6b29b5e1e9d55-cgu.0;_ZN10serde_json4read9SliceRead14skip_to_escape17h20a577e2f93cad60E",
            "_ZN8httparse25parse_headers_iter_uninit17h71a9d5869002b667E",
            "_ZN5bytes9bytes_mut8BytesMut17advance_unchecked17h66b3972a5f2b1511E/1",
            // Names that merely contain a runtime crate's name.
            "_ZN7gateway9upstream8mistdone17hE",
            "_ZN7gateway5stdio4want17hE",
        ] {
            assert!(!counts_scheduling(name), "{name}");
        }
    }

    #[test]
    fn work_overlap_leaves_scheduling_out() {
        // The work (w) is the same; the runtime's poll ran three times as often in the test.
        let base = parse_fdata("1 w 0 1 w 4 0 60\n1 _ZN5tokio4park 0 1 w 0 0 40\n").unwrap();
        let test = parse_fdata("1 w 0 1 w 4 0 60\n1 _ZN5tokio4park 0 1 w 0 0 120\n").unwrap();
        let c = compare(&base, &test, 5);
        assert!((c.overlap_pct - 73.333).abs() < 1e-3, "{c:?}");
        assert!((c.work_overlap_pct - 100.0).abs() < 1e-9, "{c:?}");
        let text = describe(Kind::Bolt, &c, 5);
        assert!(text.contains("of the work 100.000%"), "{text}");
    }

    #[test]
    fn one_sided_functions_are_listed() {
        let a = parse_fdata("1 f 0 1 f 4 0 10\n").unwrap();
        let b = parse_fdata("1 f 0 1 f 4 0 10\n1 h 0 1 h 4 0 10\n").unwrap();
        let c = compare(&a, &b, 5);
        assert_eq!(c.only_test.len(), 1);
        assert_eq!(c.only_test[0].function, "h");
        assert!((c.overlap_pct - 50.0).abs() < 1e-9);
        let text = describe(Kind::Bolt, &c, 5);
        assert!(text.contains("overlap 50.000%"), "{text}");
        assert!(text.contains("only after:\n"), "{text}");
    }
}
