//! Plain aligned tables for terminal output.

/// A table of left-aligned columns; cells may hold colour codes, which do
/// not count towards widths.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|s| (*s).to_owned()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self, header_style: impl Fn(&str) -> String) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| visible_len(h)).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(visible_len(c));
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], style: &dyn Fn(&str) -> String, out: &mut String| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                let styled = style(c);
                if i + 1 == n {
                    s.push_str(&styled);
                } else {
                    s.push_str(&styled);
                    s.push_str(&" ".repeat(widths[i] - visible_len(c) + 2));
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&self.header, &header_style, &mut out);
        for r in &self.rows {
            line(r, &|s: &str| s.to_owned(), &mut out);
        }
        out
    }
}

/// Length in characters, ignoring ANSI escape sequences.
pub fn visible_len(s: &str) -> usize {
    let mut n = 0;
    let mut in_esc = false;
    for c in s.chars() {
        if in_esc {
            if c.is_ascii_alphabetic() {
                in_esc = false;
            }
        } else if c == '\x1b' {
            in_esc = true;
        } else {
            n += 1;
        }
    }
    n
}
