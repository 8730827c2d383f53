//! wordfreq: the N most frequent words of the files it is given, a stand-in for your crate.
//!
//!     wordfreq N FILE...
//!
//! Prints `COUNT WORD` lines, most frequent first, ties by word: the same output for the same
//! input, so the holdout can compare the plain and the optimized binaries' answers.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(Ok(n)) = args.next().map(|a| a.parse::<usize>()) else {
        eprintln!("usage: wordfreq N FILE...");
        return ExitCode::from(2);
    };
    let mut counts: HashMap<String, u64> = HashMap::new();
    for file in args {
        let text = match std::fs::read(&file) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                eprintln!("wordfreq: {file}: {e}");
                return ExitCode::from(2);
            }
        };
        for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            *counts.entry(word.to_lowercase()).or_default() += 1;
        }
    }
    let mut top: Vec<(String, u64)> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = BufWriter::new(io::stdout().lock());
    for (word, count) in top.into_iter().take(n) {
        if writeln!(out, "{count} {word}").is_err() {
            return ExitCode::from(1);
        }
    }
    if out.flush().is_err() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
