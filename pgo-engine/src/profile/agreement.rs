//! What the machine moves, by measurement: two fresh trainings of one binary by one training
//! command, run under different perturbations of the builder (another CPU share, another speed,
//! other CPU features), count every counter of the requests' own work alike, since the workload
//! is the same requests; the counters they disagree on follow the machine's timing (how often
//! the event loop went round, how reads were batched, which CPU-feature path a dispatch took).
//! The freshness check leaves those out of its overlap with the pinned profile (`--overlap
//! stable`), so that a pinned profile trained on another machine is judged by the code's counts
//! and not by the machine's. No list of names: what is machine-bound is whatever the two
//! trainings say it is, counter by counter (a function that inlined the runtime's loop keeps its
//! other branches in the gate).

use std::collections::{BTreeMap, BTreeSet};

use super::{Counters, Profile};

/// A counter of a function: by position (LLVM) or by branch key (BOLT).
#[derive(Clone, Copy, Debug)]
pub enum Counter<'a> {
    At(usize),
    Key(&'a str),
}

/// The counters on which two trainings of one workload disagree.
#[derive(Clone, Debug, Default)]
pub struct MachineBound {
    /// Functions whose every counter is machine-bound (one training ran them, the other never;
    /// or their counters do not line up).
    whole: BTreeSet<String>,
    /// LLVM: the positions of a function's machine-bound counters.
    positions: BTreeMap<String, BTreeSet<usize>>,
    /// BOLT: the branch keys of a function's machine-bound counters.
    keys: BTreeMap<String, BTreeSet<String>>,
    /// How many counts of the first training the machine-bound counters hold, and of all.
    pub bound_counts: u64,
    pub total_counts: u64,
}

/// How far two counts of one counter may differ and still be the same work: `RELATIVE` of the
/// larger, plus `ABSOLUTE` for counters too small to have a stable ratio. Two quiet trainings on
/// one machine agree to the count on most counters; the machine-bound ones differ by tens of
/// percent (nix/README.md, Thresholds).
pub const RELATIVE: f64 = 0.05;
pub const ABSOLUTE: u64 = 16;

fn agree(x: u64, y: u64) -> bool {
    x.abs_diff(y) as f64 <= RELATIVE * x.max(y) as f64 + ABSOLUTE as f64
}

impl MachineBound {
    /// The counters on which `a` disagrees with any of `contrasts` (trainings of the same binary
    /// and workload under other perturbations): the union, so that perturbations that move the
    /// machine's counters in opposite directions together cover whichever way `a`'s machine went.
    pub fn measure(a: &Profile, contrasts: &[&Profile]) -> MachineBound {
        let mut m = MachineBound::default();
        for b in contrasts {
            m.add(a, b);
        }
        m.total_counts = a.total();
        m.bound_counts = m.largest(a, usize::MAX).iter().map(|(_, c)| c).sum();
        m
    }

    /// Adds the counters `a` and `b` disagree on.
    fn add(&mut self, a: &Profile, b: &Profile) {
        let names: BTreeSet<&String> = a.functions.keys().chain(b.functions.keys()).collect();
        for name in names {
            let (fa, fb) = (a.functions.get(name), b.functions.get(name));
            let (Some(fa), Some(fb)) = (fa, fb) else {
                if fa.or(fb).is_some_and(|f| f.total() > 0) {
                    self.whole.insert(name.clone());
                }
                continue;
            };
            match (&fa.counters, &fb.counters) {
                (Counters::Positional(x), Counters::Positional(y))
                    if x.len() == y.len() && fa.hash == fb.hash =>
                {
                    let bound = (0..x.len()).filter(|&i| !agree(x[i], y[i]));
                    let mut bound = bound.peekable();
                    if bound.peek().is_some() {
                        self.positions
                            .entry(name.clone())
                            .or_default()
                            .extend(bound);
                    }
                }
                (Counters::Keyed(x), Counters::Keyed(y)) => {
                    let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                    let mut bound = keys
                        .into_iter()
                        .filter(|k| {
                            !agree(
                                x.get(*k).copied().unwrap_or(0),
                                y.get(*k).copied().unwrap_or(0),
                            )
                        })
                        .cloned()
                        .peekable();
                    if bound.peek().is_some() {
                        self.keys.entry(name.clone()).or_default().extend(bound);
                    }
                }
                _ => {
                    self.whole.insert(name.clone());
                }
            }
        }
    }

    /// Whether counter `c` of function `name` is the work's: the two trainings agreed on it.
    pub fn is_stable(&self, name: &str, c: Counter<'_>) -> bool {
        if self.whole.contains(name) {
            return false;
        }
        match c {
            Counter::At(i) => !self.positions.get(name).is_some_and(|s| s.contains(&i)),
            Counter::Key(k) => !self.keys.get(name).is_some_and(|s| s.contains(k)),
        }
    }

    /// The share, in percent, of the first training's counts on machine-bound counters.
    pub fn bound_pct(&self) -> f64 {
        if self.total_counts == 0 {
            0.0
        } else {
            self.bound_counts as f64 * 100.0 / self.total_counts as f64
        }
    }

    /// The functions with machine-bound counters, by how many of the first training's counts
    /// those hold, largest first (`top` of them): what the check's log shows.
    pub fn largest(&self, a: &Profile, top: usize) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = Vec::new();
        for (name, f) in &a.functions {
            let held = match &f.counters {
                _ if self.whole.contains(name) => f.total(),
                Counters::Positional(x) => self
                    .positions
                    .get(name)
                    .map_or(0, |s| s.iter().map(|&i| x[i]).sum()),
                Counters::Keyed(x) => self
                    .keys
                    .get(name)
                    .map_or(0, |s| s.iter().filter_map(|k| x.get(k)).sum()),
            };
            if held > 0 {
                v.push((name.clone(), held));
            }
        }
        v.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        v.truncate(top);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::parse_fdata;

    #[test]
    fn counters_the_trainings_disagree_on_are_machine_bound() {
        // `w` is the work (the same in both); `loop`'s back edge ran as often as the loop went
        // round, which the second machine did less; `rare` ran in the first training only.
        let a = parse_fdata(
            "1 w 0 1 w 4 0 6000\n1 loop 0 1 loop 8 0 4000\n1 loop 0 1 w 0 0 3000\n1 rare 0 1 w 0 0 40\n",
        )
        .unwrap();
        let b =
            parse_fdata("1 w 0 1 w 4 0 6010\n1 loop 0 1 loop 8 0 2500\n1 loop 0 1 w 0 0 3000\n")
                .unwrap();
        let m = MachineBound::measure(&a, &[&b]);
        assert!(m.is_stable("w", Counter::Key("0 1 w 4")));
        assert!(!m.is_stable("loop", Counter::Key("0 1 loop 8")));
        // The same function's other branch is the work's.
        assert!(m.is_stable("loop", Counter::Key("0 1 w 0")));
        assert!(!m.is_stable("rare", Counter::Key("0 1 w 0")));
        assert_eq!(m.bound_counts, 4040);
        assert_eq!(m.largest(&a, 5)[0], ("loop".to_string(), 4000));
    }

    #[test]
    fn contrasts_that_move_the_machine_both_ways_are_united() {
        // The loop went round less in one contrast, its park ran more in the other: each is
        // machine-bound, though each contrast agrees with `a` on the other's counter.
        let a = parse_fdata("1 w 0 1 w 4 0 6000\n1 loop 0 1 loop 8 0 4000\n1 park 0 1 w 0 0 500\n")
            .unwrap();
        let slow =
            parse_fdata("1 w 0 1 w 4 0 6000\n1 loop 0 1 loop 8 0 2500\n1 park 0 1 w 0 0 500\n")
                .unwrap();
        let fast =
            parse_fdata("1 w 0 1 w 4 0 6000\n1 loop 0 1 loop 8 0 4000\n1 park 0 1 w 0 0 200\n")
                .unwrap();
        let m = MachineBound::measure(&a, &[&slow, &fast]);
        assert!(!m.is_stable("loop", Counter::Key("0 1 loop 8")));
        assert!(!m.is_stable("park", Counter::Key("0 1 w 0")));
        assert!(m.is_stable("w", Counter::Key("0 1 w 4")));
        assert_eq!(m.bound_counts, 4500);
        assert!((m.bound_pct() - 42.857).abs() < 1e-3);
    }

    #[test]
    fn small_counts_agree_within_the_absolute_slack() {
        assert!(agree(3, 12));
        assert!(agree(1000, 1060));
        assert!(!agree(1000, 1200));
        assert!(!agree(0, 400));
    }
}
