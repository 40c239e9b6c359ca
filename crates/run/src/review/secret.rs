//! The secret rule: the lines a change adds are searched for private
//! keys, known token formats and high-entropy values assigned to names
//! that name a secret. A finding names the file, the line and the kind of
//! secret, never its value.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use super::{Finding, Rule, Severity, text};
use cassist_core::changes::{Change, ChangeSet};

static PRIVATE_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----").unwrap());
static BASE64_RUN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/]{40,}").unwrap());

/// Token formats with a recognizable prefix, and what they are called.
static TOKENS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "AWS access key id"),
        (r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", "GitHub token"),
        (r"\bgithub_pat_[A-Za-z0-9_]{40,}", "GitHub token"),
        (r"\bglpat-[A-Za-z0-9_-]{20,}", "GitLab token"),
        (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "Slack token"),
        (r"\bAIza[0-9A-Za-z_-]{35}", "Google API key"),
        (r"\bsk-ant-[A-Za-z0-9_-]{20,}", "Anthropic API key"),
        (r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,}", "OpenAI API key"),
        (r"\b[sr]k_live_[0-9A-Za-z]{20,}", "Stripe live key"),
    ]
    .into_iter()
    .map(|(re, kind)| (Regex::new(re).unwrap(), kind))
    .collect()
});

/// What every match of [`PRIVATE_KEY`] contains.
const PRIVATE_KEY_LITERAL: &str = "-----BEGIN ";
/// What every match of one of the [`TOKENS`] contains (its fixed prefix).
const TOKEN_LITERALS: &[&str] =
    &["AKIA", "ASIA", "gh", "github_pat_", "glpat-", "xox", "AIza", "sk-ant-", "sk-", "sk_live_", "rk_live_"];
/// What the name of every [`ASSIGNMENT`] contains, in any case.
const SECRET_NAME_WORDS: &[&str] = &["key", "token", "secret", "password", "passwd", "auth", "credential"];

/// Whether [`ASSIGNMENT`] may match `line`. Lines are searched only when
/// they may: most changes then compile none of these patterns, which
/// costs a task more than reading its change (about a millisecond).
fn may_assign_a_secret(line: &str) -> bool {
    // `(?i)` folds a few other letters onto ASCII ones (the Kelvin sign
    // onto `k`): a line with any non-ASCII character is always searched.
    if !line.is_ascii() {
        return true;
    }
    let lower = line.to_ascii_lowercase();
    SECRET_NAME_WORDS.iter().any(|w| lower.contains(w))
}

/// `NAME = "value"`, `NAME: value`, `export NAME=value`, `const NAME: &str = "value"`,
/// `"name": "value"`, `Authorization: Bearer value` where NAME names a secret.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?P<name>[a-z0-9_.-]*(?:key|token|secret|password|passwd|auth|credential)[a-z0-9_.-]*)["']?\s*(?::\s*[a-z&'<>\[\]_ ]{1,40}?\s*)?(?:=|:=|=>|\?=|:)\s*(?:(?:bearer|basic|token)\s+)?(?P<value>"[^"]*"|'[^']*'|`[^`]*`|[^\s"'`,;)}\]]+)"#,
    )
    .unwrap()
});
static CODE_REFERENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*[(\[]?$").unwrap());
static URL_WITH_CREDENTIALS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"://[^/\s:@]+:[^/\s@]+@").unwrap());

/// Words that mark a value as a placeholder or a lookup, not a secret.
const PLACEHOLDER_WORDS: &[&str] = &[
    "${",
    "$(",
    "{{",
    "%(",
    "<",
    ">",
    "xxxx",
    "****",
    "...",
    "changeme",
    "change_me",
    "change-me",
    "your",
    "example",
    "placeholder",
    "dummy",
    "fake",
    "redacted",
    "replace",
    "todo",
    "environ",
    "getenv",
    "process.env",
    "env::var",
    "env(",
    "secrets.",
];

fn looks_like_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if lower.starts_with('$') || PLACEHOLDER_WORDS.iter().any(|w| lower.contains(w)) {
        return true;
    }
    // A run of six of the same character: "aaaaaa", "000000".
    let bytes = lower.as_bytes();
    bytes.windows(6).any(|w| w.iter().all(|b| *b == w[0]))
}

/// Shannon entropy of `s`, in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for ch in s.chars() {
        *counts.entry(ch).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts.values().map(|&c| c as f64 / n as f64).map(|p| -p * p.log2()).sum()
}

/// Whether a value assigned to a secret-looking name looks like a real secret.
fn secret_value(raw: &str) -> bool {
    let quoted = raw.starts_with(['"', '\'', '`']);
    let value = if quoted { &raw[1..raw.len().saturating_sub(1).max(1)] } else { raw };
    if value.chars().count() < 16 || value.contains(char::is_whitespace) || looks_like_placeholder(value) {
        return false;
    }
    if value.starts_with('/') || value.starts_with("./") {
        return false; // a path
    }
    if value.contains("://") && !URL_WITH_CREDENTIALS.is_match(value) {
        return false; // a URL without credentials
    }
    if !quoted && !value.starts_with("eyJ") && CODE_REFERENCE.is_match(value) {
        // `os.environ[`, `settings.API_KEY`, `get_token(`: code, unless it
        // is a single word with digits and no underscore (an .env value).
        let single_word = !value.contains(['.', ':', '-', '(', '[', '$']);
        if !single_word || value.contains('_') || !value.contains(|c: char| c.is_ascii_digit()) {
            return false;
        }
    }
    // An environment variable's name: `API_KEY_NAME = "OPENAI_API_KEY"`.
    if value.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()) && value.contains('_') {
        return false;
    }
    // Random secrets mix digits and letters, or both cases; words joined
    // by dashes (`user-profile-settings`) do not.
    let lower = value.contains(|c: char| c.is_ascii_lowercase());
    let upper = value.contains(|c: char| c.is_ascii_uppercase());
    let digit = value.contains(|c: char| c.is_ascii_digit());
    ((digit && (lower || upper)) || (lower && upper)) && shannon_entropy(value) >= 3.5
}

/// Added lines of a text change with their 1-based line numbers in the new file.
fn numbered_added_lines(c: &Change) -> Vec<(usize, String)> {
    let Some(new) = text(c.new.as_ref()) else { return Vec::new() };
    let old = text(c.old.as_ref()).unwrap_or("");
    if old.is_empty() {
        return new.lines().enumerate().map(|(i, l)| (i + 1, l.to_owned())).collect();
    }
    let diff = similar::TextDiff::configure().timeout(Duration::from_secs(2)).diff_lines(old, new);
    diff.iter_all_changes()
        .filter(|ch| ch.tag() == similar::ChangeTag::Insert)
        .filter_map(|ch| Some((ch.new_index()? + 1, ch.value().trim_end_matches(['\n', '\r']).to_owned())))
        .collect()
}

/// The secrets in a list of numbered lines: (line, kind), at most one per
/// kind and line, in line order.
fn find_secrets(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut push = |line: usize, kind: String| {
        if !out.iter().any(|(l, k)| *l == line && *k == kind) {
            out.push((line, kind));
        }
    };
    for (i, (line_no, line)) in lines.iter().enumerate() {
        // A private key header counts when key material follows: on the
        // same line (an escaped PEM) or in the next few added lines. A
        // lone header in code that looks for keys is not a key.
        if let Some(m) = line.contains(PRIVATE_KEY_LITERAL).then(|| PRIVATE_KEY.find(line)).flatten() {
            let after = &line[m.end()..];
            let following = lines[i + 1..].iter().take(5).map(|(_, l)| l.as_str());
            if BASE64_RUN.is_match(after) || following.into_iter().any(|l| BASE64_RUN.is_match(l)) {
                push(*line_no, "private key".into());
            }
        }
        let mut token = false;
        let tokens: &[(Regex, &str)] = if TOKEN_LITERALS.iter().any(|l| line.contains(l)) { &TOKENS } else { &[] };
        for (re, kind) in tokens {
            if re.find_iter(line).any(|m| !looks_like_placeholder(m.as_str())) {
                push(*line_no, (*kind).into());
                token = true;
            }
        }
        // A known token format says more than "a value assigned to a name".
        if token || !may_assign_a_secret(line) {
            continue;
        }
        for caps in ASSIGNMENT.captures_iter(line) {
            if secret_value(&caps["value"]) {
                push(*line_no, format!("secret value assigned to `{}`", &caps["name"]));
            }
        }
    }
    out
}

/// A rejection for each secret found in the lines a text change adds.
pub(super) fn check(changes: &ChangeSet) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &changes.changes {
        if c.new.is_none() || c.is_binary() {
            continue;
        }
        for (line, kind) in find_secrets(&numbered_added_lines(c)) {
            out.push(Finding {
                rule: Rule::Secret,
                severity: Severity::Reject,
                path: Some(c.path.clone()),
                message: format!(
                    "possible {kind} added in {}:{line} — remove it and read the value from the environment instead",
                    c.path
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::Rule;
    use crate::review::test_support::*;
    use cassist_core::changes::ChangeKind;

    fn secret_kinds(file: &str) -> Vec<(usize, String)> {
        let lines: Vec<(usize, String)> = file.lines().enumerate().map(|(i, l)| (i + 1, l.to_owned())).collect();
        find_secrets(&lines)
    }

    #[test]
    fn token_formats_are_found() {
        let cases = [
            ("aws = 'AKIAIOSFODNN7ABCDEFG'", "AWS access key id"),
            ("ASIAY34FZKBOKMUTVV7A", "AWS access key id"),
            ("t = ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", "GitHub token"),
            ("github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345", "GitHub token"),
            ("glpat-xR4nd0mT0k3nV4lu3zz9", "GitLab token"),
            ("SLACK=xoxb-1234567890-0987654321-AbCdEfGhIjKl", "Slack token"),
            ("key: AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "Google API key"),
            ("sk-ant-api03-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9", "Anthropic API key"),
            ("sk-proj-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0", "OpenAI API key"),
            ("openai.api_key=sk-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2", "OpenAI API key"),
            ("stripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc", "Stripe live key"),
        ];
        for (line, kind) in cases {
            let found = secret_kinds(line);
            assert!(found.iter().any(|(l, k)| *l == 1 && k == kind), "{line}: {found:?}");
        }
    }

    #[test]
    fn token_placeholders_and_near_misses_are_not_secrets() {
        for line in [
            "AKIAIOSFODNN7EXAMPLE",
            "token = ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "task-queue-worker-sk-abc",
            "const SK = \"sk-short\";",
            "risk-adjusted-return-calculation-module",
            "see https://docs.stripe.com/keys#sk_test",
        ] {
            assert!(secret_kinds(line).is_empty(), "{line}: {:?}", secret_kinds(line));
        }
    }

    #[test]
    fn private_key_needs_key_material() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1c2b3a4d5e6f7g8h9i0jKlMnOpQrStUvWxYz0123456789ab\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(secret_kinds(pem), [(1, "private key".to_string())]);
        let escaped = r#"{"key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"}"#;
        assert!(secret_kinds(escaped).iter().any(|(_, k)| k == "private key"));
        let scanner = "if line.starts_with(\"-----BEGIN OPENSSH PRIVATE KEY-----\") {\n    return true;\n}\n";
        assert!(secret_kinds(scanner).is_empty());
    }

    #[test]
    fn high_entropy_assignments_are_found() {
        for line in [
            r#"API_KEY = "q8Zr2Lx9Vt4Nw7Pb1Hs6""#,
            r#"export DB_PASSWORD=Tr0ub4dor3xKq9Zp2Wm"#,
            r#"  client_secret: 'f3A9c2E7b1D8e4F6a0C5'"#,
            r#""authToken": "aB3dE5gH7jK9mN1pQ3sT5v","#,
            r#"const SIGNING_KEY: &str = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5";"#,
            r#"Authorization: Bearer a8F3kL0pQ7zX2cV9bN4mW1"#,
            r#"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzKq8d3QpLm"#,
        ] {
            let found = secret_kinds(line);
            assert!(found.iter().any(|(_, k)| k.starts_with("secret value assigned to")), "{line}: {found:?}");
        }
    }

    #[test]
    fn lines_that_cannot_hold_a_secret_are_skipped_and_no_other() {
        assert!(!may_assign_a_secret("let total = items.iter().sum::<u32>();"));
        assert!(may_assign_a_secret("MY_ApI_kEy = 1"));
        // Case folding reaches past ASCII: the Kelvin sign is a `k`.
        let kelvin = "\u{212A}EY = \"q8Zr2Lx9Vt4Nw7Pb1Hs6\"";
        assert!(may_assign_a_secret(kelvin));
        assert_eq!(secret_kinds(kelvin), [(1, "secret value assigned to `\u{212A}EY`".to_string())]);
    }

    #[test]
    fn placeholders_and_lookups_are_not_secrets() {
        for line in [
            r#"API_KEY = "${API_KEY}""#,
            r#"api_key: <your-api-key-goes-here>"#,
            r#"PASSWORD=xxxxxxxxxxxxxxxxxxxx"#,
            r#"password = "changeme-changeme-123""#,
            r#"API_KEY = os.environ["OPENAI_API_KEY"]"#,
            r#"token = os.getenv("GITHUB_TOKEN_FOR_CI")"#,
            r#"const apiKey = process.env.OPENAI_API_KEY_PROD;"#,
            r#"let token = std::env::var("CASSIST_TOKEN_VALUE")?;"#,
            r#"auth_message = "Authentication failed for this user, try again""#,
            r#"TOKEN_URL = "https://oauth2.googleapis.com/token/v2""#,
            r#"secret_key = settings.SECRET_KEY_BASE_VALUE"#,
            r#"KEY_NAME = "OPENAI_API_KEY_FOR_PRODUCTION""#,
            r#"token = "short""#,
            r#"cache_key = "user-profile-settings-page""#,
            r#"password_file = "/etc/app/secrets/password.txt""#,
            r#"token: ${{ secrets.GITHUB_TOKEN }}"#,
            r#"primary_key = generate_primary_key_for_table"#,
        ] {
            assert!(secret_kinds(line).is_empty(), "{line}: {:?}", secret_kinds(line));
        }
    }

    #[test]
    fn secret_finding_names_file_line_and_kind_but_never_the_value() {
        let secret = "ghp_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7";
        let value = "q8Zr2Lx9Vt4Nw7Pb1Hs6";
        let old = "import os\n\nHOST = 'x'\n";
        let new = format!("import os\n\nHOST = 'x'\nTOKEN = '{secret}'\nAPI_KEY = \"{value}\"\n");
        let r = run(vec![modified("app/config.py", old, &new)], &[], &[]);
        assert!(r.rejected());
        assert!(r.security_issue());
        assert_eq!(rules(&r), [Rule::Secret, Rule::Secret]);
        assert!(r.findings[0].message.contains("GitHub token added in app/config.py:4"), "{}", r.findings[0].message);
        assert!(r.findings[1].message.contains("app/config.py:5"));
        assert!(r.findings[1].message.contains("read the value from the environment"));
        let fb = r.feedback();
        let json = serde_json::to_string(&r).unwrap();
        for text in [&fb, &json, &r.reason().unwrap()] {
            assert!(!text.contains(secret) && !text.contains(value), "{text}");
            assert!(!text.contains("ghp_Zx8"), "{text}");
        }
    }

    #[test]
    fn new_file_secrets_have_their_line_numbers() {
        let env = "# local settings\r\nDEBUG=1\r\nSTRIPE_KEY=sk_live_51HxQz2eZvKYlo2C8f0A1b2C3\r\n";
        let r = run(vec![added(".env", env)], &[], &[]);
        assert_eq!(r.findings.len(), 1, "{r:?}");
        assert!(
            r.findings[0].message.starts_with("possible Stripe live key added in .env:3 "),
            "{}",
            r.findings[0].message
        );
        assert!(!r.feedback().contains("sk_live_51"));
    }

    #[test]
    fn only_added_lines_are_scanned() {
        let old = "TOKEN = 'ghp_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7'\n";
        let new = format!("{old}print('hello')\n");
        assert!(run(vec![modified("a.py", old, &new)], &[], &[]).findings.is_empty());
        assert!(run(vec![change("a.py", ChangeKind::Deleted, Some(old), None)], &[], &[]).findings.is_empty());
    }

    #[test]
    fn binary_files_are_not_scanned() {
        let mut c = added("img.bin", "");
        c.new = Some(b"\x00\x01AKIAQWERTYUIOPASDFGH\xff".to_vec());
        assert!(run(vec![c], &[], &[]).findings.is_empty());
    }

    #[test]
    fn entropy() {
        assert_eq!(shannon_entropy(""), 0.0);
        assert_eq!(shannon_entropy("aaaa"), 0.0);
        assert!((shannon_entropy("abcd") - 2.0).abs() < 1e-9);
        assert!(shannon_entropy("q8Zr2Lx9Vt4Nw7Pb1Hs6") > 4.0);
    }
}
