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
        let mut widths: Vec<usize> = self.header.iter().map(|h| visible_width(h)).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(visible_width(c));
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], style: &dyn Fn(&str) -> String, out: &mut String| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                s.push_str(&style(c));
                if i + 1 < n {
                    s.push_str(&" ".repeat(widths[i] - visible_width(c) + 2));
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

/// The terminal columns `s` takes: colour codes take none, combining marks
/// none, East Asian wide characters two.
pub fn visible_width(s: &str) -> usize {
    console::measure_text_width(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_terminal_columns() {
        assert_eq!(visible_width("task"), 4);
        assert_eq!(visible_width("\u{1b}[31mfailed\u{1b}[0m"), 6);
        assert_eq!(visible_width("日本語"), 6);
        // e + COMBINING ACUTE ACCENT: one column.
        assert_eq!(visible_width("cafe\u{301}"), 4);
    }

    #[test]
    fn columns_line_up_with_wide_combining_and_coloured_cells() {
        let mut t = Table::new(&["TASK", "STATE", "TIME"]);
        t.row(vec!["日本語".to_owned(), "\u{1b}[32mpassed\u{1b}[0m".to_owned(), "1.2s".to_owned()]);
        t.row(vec!["cafe\u{301}".to_owned(), "\u{1b}[1m\u{1b}[31mfailed\u{1b}[0m".to_owned(), "3m".to_owned()]);
        t.row(vec!["ascii-name".to_owned(), "up-to-date".to_owned(), "0s".to_owned()]);
        let text = t.render(|h| h.to_owned());
        // Every TIME cell starts at the same terminal column.
        let columns: Vec<usize> = text
            .lines()
            .map(|l| {
                let at = ["TIME", "1.2s", "3m", "0s"].iter().find_map(|c| l.find(c)).unwrap();
                visible_width(&l[..at])
            })
            .collect();
        assert_eq!(columns, vec![24; 4], "{text}");
        assert!(text.lines().all(|l| !l.ends_with(' ')), "{text}");
    }
}
