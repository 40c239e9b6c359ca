//! Durations as written in task files: `"90s"`, `"3m"`, `"1h30m"`, `"500ms"`.

use std::time::Duration;

/// The longest duration accepted anywhere (a week): larger values are typos.
const MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why a text is no duration, in the words that follow "invalid duration".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("it is empty")]
    Empty,
    #[error("it must start with a number")]
    NoNumber,
    /// A unit not followed by a number: the text from there.
    #[error("expected a number before `{0}`")]
    NumberExpected(String),
    #[error("the number is too large")]
    NumberTooLarge,
    /// A decimal point: refused, with how to write it in whole units.
    #[error("fractions are not supported{0}")]
    Fraction(Fraction),
    #[error("no spaces: write the unit right after the number, e.g. \"{number}m\"")]
    Space { number: u64 },
    #[error("`{number}` has no unit")]
    NoUnit { number: u64 },
    /// `short`: the unit meant, for a spelled-out one (`min` → `m`).
    #[error("unknown unit `{unit}`{}", unit_hint(*.number, *.short))]
    UnknownUnit { unit: String, number: u64, short: Option<&'static str> },
    #[error("units must go from largest to smallest, each once")]
    UnitOrder,
    #[error("it is too large")]
    TooLarge,
    #[error("it must be longer than zero")]
    Zero,
    #[error("it is longer than a week")]
    OverAWeek,
}

/// `; write `m`, as in "3m"` after an unknown unit, when the meant one is
/// known.
fn unit_hint(number: u64, short: Option<&str>) -> String {
    match short {
        Some(u) => format!("; write `{u}`, as in \"{number}{u}\""),
        None => String::new(),
    }
}

/// What follows "fractions are not supported": how to write the duration
/// in whole units, or why it cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fraction {
    /// Not a whole number of milliseconds, or no known unit.
    #[error(": write whole numbers with a unit, e.g. \"1m30s\" rather than \"1.5m\"")]
    WholeNumbers,
    #[error(", and it is too large")]
    TooLarge,
    #[error(", and it must be longer than zero")]
    Zero,
    /// In whole units largest first (`1m30s`), and in the next smaller
    /// unit when that differs (`90s`).
    #[error(": write \"{whole}\"{}", .smaller.as_ref().map(|s| format!(" or \"{s}\"")).unwrap_or_default())]
    Write { whole: String, smaller: Option<String> },
}

/// Parses a duration of one or more `<integer><unit>` parts, units `h`, `m`,
/// `s`, `ms`, largest first, each at most once.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let units: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let mut total_ms: u64 = 0;
    let mut last_rank: Option<usize> = None;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(if rest.len() == s.len() {
                DurationError::NoNumber
            } else {
                DurationError::NumberExpected(rest.to_owned())
            });
        }
        let number: u64 = rest[..digits].parse().map_err(|_| DurationError::NumberTooLarge)?;
        rest = &rest[digits..];
        if let Some(fraction) = rest.strip_prefix(['.', ',']) {
            return Err(DurationError::Fraction(fraction_error(number, fraction, &units)));
        }
        if rest.starts_with(char::is_whitespace) {
            return Err(DurationError::Space { number });
        }
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        if unit_len == 0 {
            return Err(DurationError::NoUnit { number });
        }
        let unit = &rest[..unit_len];
        let Some(rank) = units.iter().position(|(u, _)| *u == unit) else {
            let short = match unit {
                "hour" | "hours" | "hr" | "hrs" => Some("h"),
                "min" | "mins" | "minute" | "minutes" => Some("m"),
                "sec" | "secs" | "second" | "seconds" => Some("s"),
                _ => None,
            };
            return Err(DurationError::UnknownUnit { unit: unit.to_owned(), number, short });
        };
        if last_rank.is_some_and(|r| rank <= r) {
            return Err(DurationError::UnitOrder);
        }
        last_rank = Some(rank);
        total_ms =
            number.checked_mul(units[rank].1).and_then(|v| total_ms.checked_add(v)).ok_or(DurationError::TooLarge)?;
        rest = &rest[unit_len..];
    }
    let d = Duration::from_millis(total_ms);
    if d.is_zero() {
        return Err(DurationError::Zero);
    }
    if d > MAX {
        return Err(DurationError::OverAWeek);
    }
    Ok(d)
}

/// How to write `{number}.{fraction}` (the text after the decimal point,
/// unit included) in whole units: "1.5m" → `"1m30s"` or `"90s"`.
fn fraction_error(number: u64, fraction: &str, units: &[(&str, u64)]) -> Fraction {
    let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
    let unit = &fraction[digits..];
    let Some(rank) = units.iter().position(|(u, _)| *u == unit) else {
        return Fraction::WholeNumbers;
    };
    let unit_ms = u128::from(units[rank].1);
    // Whole milliseconds of `0.{digits}` units, when it is a whole number.
    let frac_ms = (digits > 0 && digits <= 12).then(|| {
        let scale = 10u128.pow(digits as u32);
        let n: u128 = fraction[..digits].parse().unwrap_or(0);
        (n * unit_ms).is_multiple_of(scale).then(|| n * unit_ms / scale)
    });
    let Some(Some(frac_ms)) = frac_ms else {
        return Fraction::WholeNumbers;
    };
    let total = u128::from(number) * unit_ms + frac_ms;
    let Ok(total) = u64::try_from(total) else { return Fraction::TooLarge };
    if total == 0 {
        return Fraction::Zero;
    }
    // Written in whole units, largest first: "1m30s", "2s500ms".
    let mut whole = String::new();
    let mut left = total;
    for (u, ms) in units {
        if left >= *ms {
            whole.push_str(&format!("{}{u}", left / ms));
            left %= ms;
        }
    }
    // The same in the next smaller unit, when that is whole: "90s".
    let smaller =
        units.get(rank + 1).and_then(|(u, ms)| total.is_multiple_of(*ms).then(|| format!("{}{u}", total / ms)));
    Fraction::Write { smaller: smaller.filter(|s| *s != whole), whole }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_forms() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1m500ms"), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn rejects_bad_forms() {
        for bad in ["", "3", "3 minutes", "m3", "1m1h", "0s", "1s1s", "3d", "9999999999999999999h", "200h"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn fractions_are_refused_with_the_whole_units_to_write() {
        let err = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert_eq!(err("1.5m"), "fractions are not supported: write \"1m30s\" or \"90s\"");
        assert_eq!(err("1.5h"), "fractions are not supported: write \"1h30m\" or \"90m\"");
        assert_eq!(err("2.5s"), "fractions are not supported: write \"2s500ms\" or \"2500ms\"");
        assert_eq!(err("0.5s"), "fractions are not supported: write \"500ms\"");
        assert!(err("1.5x").starts_with("fractions are not supported: write whole numbers"), "{}", err("1.5x"));
        assert!(err("1.5ms").starts_with("fractions are not supported"), "{}", err("1.5ms"));
    }

    #[test]
    fn each_refusal_says_why() {
        let err = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert_eq!(err(" "), "it is empty");
        assert_eq!(err("m3"), "it must start with a number");
        assert_eq!(err("1mx"), "unknown unit `mx`");
        assert_eq!(err("1m3"), "`3` has no unit");
        assert_eq!(err("1m s"), "expected a number before ` s`");
        assert_eq!(err("99999999999999999999s"), "the number is too large");
        assert_eq!(err("3 m"), "no spaces: write the unit right after the number, e.g. \"3m\"");
        assert_eq!(err("3mins"), "unknown unit `mins`; write `m`, as in \"3m\"");
        assert_eq!(err("1s1m"), "units must go from largest to smallest, each once");
        assert_eq!(err("9999999999999999h"), "it is too large");
        assert_eq!(err("0s"), "it must be longer than zero");
        assert_eq!(err("200h"), "it is longer than a week");
        assert_eq!(err("0.0s"), "fractions are not supported, and it must be longer than zero");
        assert_eq!(err("99999999999999999999.5h"), "the number is too large");
    }

    #[test]
    fn formats_back() {
        for s in ["90ms", "1m30s", "1h", "2h5m7s"] {
            assert_eq!(crate::text::duration(parse_duration(s).unwrap()), s);
        }
    }
}
