//! A deployment's price (its `price` member in the `models` section) and what a request's usage
//! costs at it. Prices are written in US dollars per million tokens, as providers list them:
//!
//! ```json
//! "gpt": { "provider": "up-openai", "model": "gpt-4o",
//!          "price": { "input": 2.5, "output": 10, "cached_input": 1.25 } }
//! ```
//!
//! `cached_input` (the price of input tokens read from the provider's prompt cache) defaults to
//! `input`. They are kept as integer picodollars per token (a price is exact to 1e-6 $ per
//! million tokens), and a request's cost is computed in integers: nothing drifts however many
//! requests are summed. Costs leave the gateway in nanodollars ([`nano`]).

use serde_json::{Map, Value};

use crate::checker::Checker;
use crate::json::usage::Usage;

/// Picodollars per token, for each kind of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: u64,
    pub output: u64,
    pub cached_input: u64,
}

/// The highest price accepted, in dollars per million tokens (a typo guard).
const MAX_PER_MILLION: f64 = 100_000.0;

impl Price {
    /// The `price` member of a deployment `o` at `path`, `None` when absent or wrong (reported).
    pub fn from_config(c: &mut Checker, o: &Map<String, Value>, path: &str) -> Option<Price> {
        let v = o.get("price")?;
        let path = format!("{path}.price");
        let p = c.obj(v, &path)?;
        c.warn_unknown(p, &path, &["input", "output", "cached_input"]);
        let mut field = |k: &str, required: bool| -> Option<Option<u64>> {
            match p.get(k) {
                None if required => {
                    c.err(
                        format!("{path}.{k}"),
                        "is required (dollars per million tokens)",
                    );
                    None
                }
                None => Some(None),
                Some(v) => match v.as_f64() {
                    Some(f) if (0.0..=MAX_PER_MILLION).contains(&f) => {
                        Some(Some((f * 1e6).round() as u64))
                    }
                    _ => {
                        c.err(
                            format!("{path}.{k}"),
                            format!("must be a number of dollars per million tokens from 0 to {MAX_PER_MILLION}"),
                        );
                        None
                    }
                },
            }
        };
        let input = field("input", true);
        let output = field("output", true);
        let cached = field("cached_input", false);
        let input = input??;
        Some(Price {
            input,
            output: output??,
            cached_input: cached?.unwrap_or(input),
        })
    }

    /// What `u` costs, in picodollars: uncached input, cached input and output each at its
    /// price (an unknown count as zero; cached tokens beyond the input as input).
    pub fn cost(&self, u: &Usage) -> u64 {
        let input = u.input.unwrap_or(0);
        let cached = u.cached.unwrap_or(0).min(input);
        (input - cached)
            .saturating_mul(self.input)
            .saturating_add(cached.saturating_mul(self.cached_input))
            .saturating_add(u.output.unwrap_or(0).saturating_mul(self.output))
    }
}

/// Picodollars to nanodollars, rounded to the nearest.
pub fn nano(pico: u64) -> u64 {
    pico / 1000 + u64::from(pico % 1000 >= 500)
}

/// `nano` nanodollars as dollars with nine decimals (`0.000012500`), into `out`.
pub fn write_usd(out: &mut Vec<u8>, nano: u64) {
    let mut buf = [0; 32];
    out.extend_from_slice(usd(&mut buf, nano));
}

/// `nano` nanodollars as dollars with nine decimals, written in `buf` (no allocation: the
/// response header's value). One pass of digits, zero-padded to ten, and copies of fixed size.
pub fn usd(buf: &mut [u8; 32], nano: u64) -> &[u8] {
    let mut digits = [b'0'; 20];
    // At least one whole digit ("0.000012500").
    let start = crate::json::digits_into(&mut digits, nano).min(10);
    buf[..11].copy_from_slice(&digits[..11]);
    buf[11] = b'.';
    buf[12..21].copy_from_slice(&digits[11..]);
    &buf[start..21]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(v: serde_json::Value) -> (Option<Price>, Vec<String>) {
        let mut c = Checker::default();
        let o = serde_json::json!({ "price": v });
        let p = Price::from_config(&mut c, o.as_object().unwrap(), "$.models.m");
        (p, c.errors.iter().map(|e| e.path.clone()).collect())
    }

    #[test]
    fn prices_are_read_and_checked() {
        let (p, e) = price(serde_json::json!({"input": 2.5, "output": 10, "cached_input": 1.25}));
        assert!(e.is_empty());
        assert_eq!(
            p,
            Some(Price {
                input: 2_500_000,
                output: 10_000_000,
                cached_input: 1_250_000
            })
        );
        let (p, _) = price(serde_json::json!({"input": 0.15, "output": 0.6}));
        assert_eq!(p.unwrap().cached_input, 150_000);
        let (p, e) = price(serde_json::json!({"input": -1, "output": 1}));
        assert_eq!((p, e), (None, vec!["$.models.m.price.input".to_string()]));
        let (p, e) = price(serde_json::json!({"input": 1}));
        assert_eq!((p, e), (None, vec!["$.models.m.price.output".to_string()]));
        let (p, e) = price(serde_json::json!("cheap"));
        assert_eq!((p, e), (None, vec!["$.models.m.price".to_string()]));
    }

    #[test]
    fn cost_in_integers() {
        let p = Price {
            input: 2_500_000,
            output: 10_000_000,
            cached_input: 1_250_000,
        };
        let u = Usage {
            input: Some(1000),
            output: Some(200),
            cached: Some(400),
        };
        // 600 × 2.5 + 400 × 1.25 + 200 × 10 dollars per million = 0.004 dollars.
        assert_eq!(p.cost(&u), 4_000_000_000);
        assert_eq!(nano(p.cost(&u)), 4_000_000);
        assert_eq!(p.cost(&Usage::default()), 0);
        let mut out = Vec::new();
        write_usd(&mut out, 4_000_000);
        assert_eq!(out, b"0.004000000");
        out.clear();
        write_usd(&mut out, 12_345_678_901);
        assert_eq!(out, b"12.345678901");
        out.clear();
        write_usd(&mut out, 0);
        assert_eq!(out, b"0.000000000");
        for (nano, text) in [
            (1, "0.000000001"),
            (999_999_999, "0.999999999"),
            (1_000_000_000, "1.000000000"),
            (u64::MAX, "18446744073.709551615"),
        ] {
            out.clear();
            write_usd(&mut out, nano);
            assert_eq!(out, text.as_bytes());
        }
        assert_eq!(nano(1499), 1);
        assert_eq!(nano(1500), 2);
    }
}
