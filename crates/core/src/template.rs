//! The `{name}` placeholder syntax of prompt templates and custom agent
//! commands: `{{` and `}}` stand for literal braces; braces around anything
//! that is not a plain word (a shell snippet, JSON) are kept as written.
//! A leaf: imports nothing of the crate.

use std::ops::Range;

enum Piece<'a> {
    Text(&'a str),
    Field(&'a str),
}

fn is_word(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn pieces(text: &str) -> Vec<(Range<usize>, Piece<'_>)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut lit_start = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                out.push((lit_start..i + 1, Piece::Text(&text[lit_start..i + 1])));
                i += 2;
                lit_start = i;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                out.push((lit_start..i + 1, Piece::Text(&text[lit_start..i + 1])));
                i += 2;
                lit_start = i;
            }
            b'{' => {
                if let Some(close) = text[i + 1..].find('}') {
                    let inner = &text[i + 1..i + 1 + close];
                    if is_word(inner) {
                        out.push((lit_start..i, Piece::Text(&text[lit_start..i])));
                        out.push((i..i + close + 2, Piece::Field(inner)));
                        i += close + 2;
                        lit_start = i;
                        continue;
                    }
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    out.push((lit_start..text.len(), Piece::Text(&text[lit_start..])));
    out
}

/// Every `{word}` placeholder in `text`, with its byte range (braces
/// included).
pub fn scan_placeholders(text: &str) -> Vec<(Range<usize>, String)> {
    pieces(text)
        .into_iter()
        .filter_map(|(r, p)| match p {
            Piece::Field(name) => Some((r, name.to_owned())),
            Piece::Text(_) => None,
        })
        .collect()
}

/// Fills `template`; `value` gives each placeholder's text (`None` keeps it
/// as written, which validation has already reported).
pub fn fill(template: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    for (range, p) in pieces(template) {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Field(name) => match value(name) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&template[range]),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_words_only() {
        let found = scan_placeholders("a {goal} b {{literal}} c {not a word} d {x_1}");
        let names: Vec<_> = found.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["goal", "x_1"]);
        assert_eq!(found[0].0, 2..8);
    }

    #[test]
    fn fills_and_unescapes() {
        let out = fill("{{x}} {goal} {y}", |n| (n == "goal").then(|| "G".to_owned()));
        assert_eq!(out, "{x} G {y}");
    }

    #[test]
    fn shell_braces_are_literal() {
        assert_eq!(fill("awk '{print $1}'", |_| None), "awk '{print $1}'");
    }
}
