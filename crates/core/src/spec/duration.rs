//! Durations as written in task files: `"90s"`, `"3m"`, `"1h30m"`, `"500ms"`.

use std::time::Duration;

/// The longest duration accepted anywhere (a week): larger values are typos.
const MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a duration of one or more `<integer><unit>` parts, units `h`, `m`,
/// `s`, `ms`, largest first, each at most once.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("it is empty".into());
    }
    let units: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let mut total_ms: u64 = 0;
    let mut last_rank: Option<usize> = None;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(if rest.len() == s.len() {
                "it must start with a number".to_owned()
            } else {
                format!("expected a number before `{rest}`")
            });
        }
        let number: u64 = rest[..digits].parse().map_err(|_| "the number is too large".to_string())?;
        rest = &rest[digits..];
        if let Some(fraction) = rest.strip_prefix(['.', ',']) {
            return Err(fraction_error(number, fraction, &units));
        }
        if rest.starts_with(char::is_whitespace) {
            return Err(format!("no spaces: write the unit right after the number, e.g. \"{number}m\""));
        }
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        if unit_len == 0 {
            return Err(format!("`{number}` has no unit"));
        }
        let unit = &rest[..unit_len];
        let Some(rank) = units.iter().position(|(u, _)| *u == unit) else {
            let short = match unit {
                "hour" | "hours" | "hr" | "hrs" => Some("h"),
                "min" | "mins" | "minute" | "minutes" => Some("m"),
                "sec" | "secs" | "second" | "seconds" => Some("s"),
                _ => None,
            };
            return Err(match short {
                Some(u) => format!("unknown unit `{unit}`; write `{u}`, as in \"{number}{u}\""),
                None => format!("unknown unit `{unit}`"),
            });
        };
        if last_rank.is_some_and(|r| rank <= r) {
            return Err("units must go from largest to smallest, each once".into());
        }
        last_rank = Some(rank);
        total_ms = number
            .checked_mul(units[rank].1)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| "it is too large".to_string())?;
        rest = &rest[unit_len..];
    }
    let d = Duration::from_millis(total_ms);
    if d.is_zero() {
        return Err("it must be longer than zero".into());
    }
    if d > MAX {
        return Err("it is longer than a week".into());
    }
    Ok(d)
}

/// Why `{number}.{fraction}` (the text after the decimal point, unit
/// included) is refused, with the whole-unit ways to write it: "1.5m" →
/// `"1m30s"` or `"90s"`.
fn fraction_error(number: u64, fraction: &str, units: &[(&str, u64)]) -> String {
    const REFUSED: &str = "fractions are not supported";
    let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
    let unit = &fraction[digits..];
    let Some(rank) = units.iter().position(|(u, _)| *u == unit) else {
        return format!("{REFUSED}: write whole numbers with a unit, e.g. \"1m30s\" rather than \"1.5m\"");
    };
    let unit_ms = u128::from(units[rank].1);
    // Whole milliseconds of `0.{digits}` units, when it is a whole number.
    let frac_ms = (digits > 0 && digits <= 12).then(|| {
        let scale = 10u128.pow(digits as u32);
        let n: u128 = fraction[..digits].parse().unwrap_or(0);
        (n * unit_ms).is_multiple_of(scale).then(|| n * unit_ms / scale)
    });
    let Some(Some(frac_ms)) = frac_ms else {
        return format!("{REFUSED}: write whole numbers with a unit, e.g. \"1m30s\" rather than \"1.5m\"");
    };
    let total = u128::from(number) * unit_ms + frac_ms;
    let Ok(total) = u64::try_from(total) else { return format!("{REFUSED}, and it is too large") };
    if total == 0 {
        return format!("{REFUSED}, and it must be longer than zero");
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
    match smaller {
        Some(s) if s != whole => format!("{REFUSED}: write \"{whole}\" or \"{s}\""),
        _ => format!("{REFUSED}: write \"{whole}\""),
    }
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
        let err = |s: &str| parse_duration(s).unwrap_err();
        assert_eq!(err("1.5m"), "fractions are not supported: write \"1m30s\" or \"90s\"");
        assert_eq!(err("1.5h"), "fractions are not supported: write \"1h30m\" or \"90m\"");
        assert_eq!(err("2.5s"), "fractions are not supported: write \"2s500ms\" or \"2500ms\"");
        assert_eq!(err("0.5s"), "fractions are not supported: write \"500ms\"");
        assert!(err("1.5x").starts_with("fractions are not supported: write whole numbers"), "{}", err("1.5x"));
        assert!(err("1.5ms").starts_with("fractions are not supported"), "{}", err("1.5ms"));
    }

    #[test]
    fn formats_back() {
        for s in ["90ms", "1m30s", "1h", "2h5m7s"] {
            assert_eq!(crate::text::duration(parse_duration(s).unwrap()), s);
        }
    }
}
