//! Two profiles of one kind compared: their overlap (of all functions, and of the work, with the
//! functions that count the runtime's scheduling left out: the freshness check gates on it), the
//! functions whose code changed, and the largest moves; `pgo-engine compare` prints it.

use anyhow::Result;
use std::path::PathBuf;

use super::agreement::{Counter, MachineBound};
use super::{Counters, Function, Kind, Profile};
use crate::json_file;

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

/// The edge overlap, in percent, of the counters `keep` names, each profile normalized by their
/// counts: a function whose hash or number of counters changed, or that one profile lacks, adds
/// nothing; 0 when either profile has no counts there.
pub fn overlap_of(base: &Profile, test: &Profile, keep: impl Fn(&str, Counter<'_>) -> bool) -> f64 {
    let total = |p: &Profile| -> u64 {
        p.functions
            .iter()
            .map(|(n, f)| match &f.counters {
                Counters::Positional(v) => v
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| keep(n, Counter::At(i)))
                    .map(|(_, c)| c)
                    .sum::<u64>(),
                Counters::Keyed(m) => m
                    .iter()
                    .filter(|(k, _)| keep(n, Counter::Key(k)))
                    .map(|(_, c)| c)
                    .sum(),
            })
            .sum()
    };
    let (bt, tt) = (total(base), total(test));
    if bt == 0 || tt == 0 {
        return 0.0;
    }
    let min = |x: u64, y: u64| (x as f64 / bt as f64).min(y as f64 / tt as f64);
    let mut sum = 0.0;
    for (name, b) in &base.functions {
        let Some(t) = test.functions.get(name).filter(|t| t.hash == b.hash) else {
            continue;
        };
        sum += match (&b.counters, &t.counters) {
            (Counters::Positional(x), Counters::Positional(y)) if x.len() == y.len() => x
                .iter()
                .zip(y)
                .enumerate()
                .filter(|&(i, _)| keep(name, Counter::At(i)))
                .map(|(_, (&x, &y))| min(x, y))
                .sum::<f64>(),
            (Counters::Keyed(x), Counters::Keyed(y)) => x
                .iter()
                .filter(|(k, _)| keep(name, Counter::Key(k)))
                .filter_map(|(k, &c)| y.get(k).map(|&d| min(c, d)))
                .sum::<f64>(),
            _ => 0.0,
        };
    }
    sum * 100.0
}

/// The edge overlap of the functions `keep` names, every counter of theirs.
fn overlap(base: &Profile, test: &Profile, keep: impl Fn(&str) -> bool) -> f64 {
    overlap_of(base, test, |name, _| keep(name))
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

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    pub base: PathBuf,
    pub test: PathBuf,
    /// How many functions each list shows.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also write the comparison as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Trainings of TEST's binary under other perturbations (repeatable): also print the overlap
    /// over the counters TEST agrees with all of them on (the freshness check's `--overlap
    /// stable`).
    #[arg(long)]
    pub contrast: Vec<PathBuf>,
}

/// `pgo-engine compare`: how TEST differs from BASE.
pub fn compare_cli(a: &CompareArgs) -> Result<()> {
    let base = Profile::read(a.kind, &a.base)?;
    let test = Profile::read(a.kind, &a.test)?;
    let c = compare(&base, &test, a.top);
    print!("{}", describe(a.kind, &c, a.top));
    let mut value = serde_json::to_value(&c)?;
    if !a.contrast.is_empty() {
        let contrasts = a
            .contrast
            .iter()
            .map(|p| Profile::read(a.kind, p))
            .collect::<Result<Vec<_>>>()?;
        let bound = MachineBound::measure(&test, &contrasts.iter().collect::<Vec<_>>());
        let stable = overlap_of(&base, &test, |n, c| bound.is_stable(n, c));
        println!(
            "machine-bound (TEST and the contrast disagree): {:.3}% of TEST's counts; overlap of the rest {stable:.3}%",
            bound.bound_pct()
        );
        value["stable_overlap_pct"] = serde_json::json!(stable);
        value["machine_bound_pct"] = serde_json::json!(bound.bound_pct());
    }
    if let Some(p) = &a.json {
        json_file::write(p, &value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::TEXT;
    use crate::profile::{parse_fdata, parse_llvm_text};

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
    fn fdata_overlap_is_per_branch() {
        let p = parse_fdata("1 f 10 1 f 20 0 30\n1 f 10 1 g 0 1 10\n0 [unknown] 0 1 g 0 0 60\n")
            .unwrap();
        let moved =
            parse_fdata("1 f 10 1 f 20 0 30\n1 f 10 1 g 0 1 40\n0 [unknown] 0 1 g 0 0 30\n")
                .unwrap();
        let c = compare(&p, &moved, 5);
        // f: min(.3,.3) + min(.1,.4); g: min(.6,.3).
        assert!((c.overlap_pct - 70.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.moves[0].function, "f");
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
