//! The limits of a project (`limits` in `cassist.kdl`): how large one
//! file of a change, a whole change and a transcript may grow, how many
//! entries one change may touch, and the memory and processes one command
//! of a task may use; sizes as written (`"16MiB"`, `"500KB"`) and as shown
//! (`2 GiB`). A leaf.

/// The limits a run works within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file a change may add or grow to.
    pub file_size: u64,
    /// All files a change adds or modifies, together.
    pub change_size: u64,
    /// Per command's output: the first and the last half are kept, the
    /// middle is cut with a marker.
    pub transcript: u64,
    /// Entries one change may add, change or remove (empty files count):
    /// counted while the change is read, before any content past it is.
    pub files: u64,
    /// Memory one command of a task may use, all its processes together
    /// (where a cgroup can bound them; else per process).
    pub memory: u64,
    /// Processes (and threads) one command of a task may run at once.
    pub processes: u64,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        file_size: 16 << 20,
        change_size: 256 << 20,
        transcript: 64 << 20,
        files: 10_000,
        memory: 8 << 30,
        processes: 2048,
    };
}

/// A change touching more entries than `limits { files }` allows: how many
/// it touches, and the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the change has {count} files, over the limit of {limit} (limits files)")]
pub struct TooManyFiles {
    pub count: u64,
    pub limit: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The units a size may be written in, binary and decimal.
pub const UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
];

/// Why a size does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("it is empty")]
    Empty,
    /// It does not start with a whole number.
    #[error("it must start with a whole number")]
    NoNumber,
    /// `1.5GiB`.
    #[error("write a whole number of a smaller unit (\"1536MiB\", not \"1.5GiB\")")]
    Fraction,
    /// A number without a unit.
    #[error("`{0}` has no unit")]
    NoUnit(u64),
    /// A unit that is not one of [`UNITS`] (as written).
    #[error("unknown unit `{0}`")]
    UnknownUnit(String),
    /// A space between the number and the unit.
    #[error("no spaces: write the unit right after the number, e.g. \"{0}MiB\"")]
    Space(u64),
    #[error("it must be larger than zero")]
    Zero,
    #[error("it is too large")]
    TooLarge,
}

/// Parses `<whole number><unit>`, the unit one of [`UNITS`] as written
/// (`16MiB`, `500KB`, `4096B`).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(SizeError::NoNumber);
    }
    let number: u64 = s[..digits].parse().map_err(|_| SizeError::TooLarge)?;
    let rest = &s[digits..];
    if rest.starts_with(['.', ',']) {
        return Err(SizeError::Fraction);
    }
    if rest.is_empty() {
        return Err(SizeError::NoUnit(number));
    }
    if rest.starts_with(char::is_whitespace) {
        return Err(SizeError::Space(number));
    }
    let Some((_, factor)) = UNITS.iter().find(|(u, _)| *u == rest) else {
        return Err(SizeError::UnknownUnit(rest.to_owned()));
    };
    let size = number.checked_mul(*factor).ok_or(SizeError::TooLarge)?;
    if size == 0 {
        return Err(SizeError::Zero);
    }
    Ok(size)
}

/// The unit meant by a unit written in another case (`mib` → `MiB`), or
/// the binary units for a bare letter (`M` → `MiB or MB`).
pub fn unit_hint(unit: &str) -> Option<String> {
    if let Some((u, _)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) {
        return Some(format!("did you mean `{u}`?"));
    }
    let letter = match unit {
        "k" | "K" => "K",
        "m" | "M" => "M",
        "g" | "G" => "G",
        _ => return None,
    };
    Some(format!("write `{letter}iB` (powers of 1024) or `{letter}B` (powers of 1000)"))
}

/// A size as people read it: `512 bytes`, `16 MiB`, `2.5 GiB` (binary
/// units; whole numbers where exact, else one decimal, cut).
pub fn format_size(bytes: u64) -> String {
    const BINARY: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, factor) in BINARY {
        if bytes >= factor {
            let whole = bytes / factor;
            let tenths = (bytes % factor) * 10 / factor;
            return if bytes.is_multiple_of(factor) {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenths} {unit}")
            };
        }
    }
    if bytes == 1 { "1 byte".to_owned() } else { format!("{bytes} bytes") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_and_decimal_units() {
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("500KB"), Ok(500_000));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size(" 4096B "), Ok(4096));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("MiB"), Err(SizeError::NoNumber));
        assert_eq!(parse_size("16"), Err(SizeError::NoUnit(16)));
        assert_eq!(parse_size("1.5GiB"), Err(SizeError::Fraction));
        assert_eq!(parse_size("16 MiB"), Err(SizeError::Space(16)));
        assert_eq!(parse_size("16mib"), Err(SizeError::UnknownUnit("mib".into())));
        assert_eq!(parse_size("16M"), Err(SizeError::UnknownUnit("M".into())));
        assert_eq!(parse_size("16TiB"), Err(SizeError::UnknownUnit("TiB".into())));
        assert_eq!(parse_size("0MiB"), Err(SizeError::Zero));
        assert_eq!(parse_size("99999999999999GiB"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("99999999999999999999999B"), Err(SizeError::TooLarge));
    }

    #[test]
    fn size_errors_read_as_sentences() {
        let why = |text: &str| parse_size(text).unwrap_err().to_string();
        assert_eq!(why(""), "it is empty");
        assert_eq!(why("MiB"), "it must start with a whole number");
        assert_eq!(why("16"), "`16` has no unit");
        assert_eq!(why("1.5GiB"), "write a whole number of a smaller unit (\"1536MiB\", not \"1.5GiB\")");
        assert_eq!(why("16 MiB"), "no spaces: write the unit right after the number, e.g. \"16MiB\"");
        assert_eq!(why("16mib"), "unknown unit `mib`");
        assert_eq!(why("0MiB"), "it must be larger than zero");
        assert_eq!(why("99999999999999GiB"), "it is too large");
    }

    #[test]
    fn unit_hints() {
        assert_eq!(unit_hint("mib").as_deref(), Some("did you mean `MiB`?"));
        assert_eq!(unit_hint("gb").as_deref(), Some("did you mean `GB`?"));
        assert_eq!(unit_hint("M").as_deref(), Some("write `MiB` (powers of 1024) or `MB` (powers of 1000)"));
        assert_eq!(unit_hint("parsecs"), None);
    }

    #[test]
    fn sizes_show_in_binary_units() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1), "1 byte");
        assert_eq!(format_size(1023), "1023 bytes");
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(2 << 30), "2 GiB");
        assert_eq!(format_size((2 << 30) + (1 << 29)), "2.5 GiB");
        assert_eq!(format_size(1_000_000), "976.5 KiB");
        assert_eq!(format_size(1_000_000_000), "953.6 MiB");
    }
}
