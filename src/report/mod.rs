//! What the user sees: diagnostics, tables, colours; the progress of a
//! run and its summary, and the reports for machines (JSON, JUnit, GitHub
//! annotations). Built from events and finished task reports only: this
//! layer imports no runner, scheduler or planning type.

pub mod github;
pub mod json;
pub mod junit;
pub mod progress;
pub mod summary;
pub mod table;

use std::io::IsTerminal;

use miette::{GraphicalReportHandler, GraphicalTheme};
use owo_colors::OwoColorize;

use crate::cli::ColorChoice;
use cassist_core::spec::SpecDiagnostic;

/// Output settings from the global flags.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub color_out: bool,
    pub color_err: bool,
    pub quiet: bool,
    pub verbose: u8,
}

impl Output {
    pub fn new(choice: ColorChoice, quiet: bool, verbose: u8) -> Output {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let decide = |tty: bool| match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && !no_color && std::env::var("TERM").map_or(true, |t| t != "dumb"),
        };
        Output {
            color_out: decide(std::io::stdout().is_terminal()),
            color_err: decide(std::io::stderr().is_terminal()),
            quiet,
            verbose,
        }
    }

    /// Renders one diagnostic for stderr.
    pub fn render(&self, d: &SpecDiagnostic) -> String {
        let theme = if self.color_err { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
        let handler = GraphicalReportHandler::new_themed(theme).with_width(100).with_links(false);
        let mut out = String::new();
        if handler.render_report(&mut out, d).is_err() {
            out = format!("{}: {}\n", if d.is_error() { "error" } else { "warning" }, d.message);
        }
        out
    }

    /// Prints diagnostics to stderr, then a one-line count of errors.
    pub fn print_diagnostics(&self, diags: &[SpecDiagnostic]) {
        let mut text = String::new();
        for d in diags {
            if self.quiet && !d.is_error() {
                continue;
            }
            text.push_str(&self.render(d));
            text.push('\n');
        }
        let errors = diags.iter().filter(|d| d.is_error()).count();
        if errors > 0 {
            let mut files: Vec<&str> = diags
                .iter()
                .filter(|d| d.is_error())
                .filter_map(|d| d.source.as_ref().map(|s| s.name.as_str()))
                .collect();
            files.sort();
            files.dedup();
            let what = if errors == 1 { "1 error".to_owned() } else { format!("{errors} errors") };
            let where_ = match files.len() {
                0 => String::new(),
                1 => format!(" in {}", files[0]),
                n => format!(" in {n} files"),
            };
            let line = format!("{what}{where_}; nothing was run");
            if self.color_err {
                text.push_str(&format!("{} {line}\n", "error:".red().bold()));
            } else {
                text.push_str(&format!("error: {line}\n"));
            }
        }
        cassist_core::err!("{text}");
    }

    pub fn dim(&self, s: &str) -> String {
        if self.color_out { s.dimmed().to_string() } else { s.to_owned() }
    }

    pub fn bold(&self, s: &str) -> String {
        if self.color_out { s.bold().to_string() } else { s.to_owned() }
    }

    pub fn green(&self, s: &str) -> String {
        if self.color_out { s.green().to_string() } else { s.to_owned() }
    }

    pub fn yellow(&self, s: &str) -> String {
        if self.color_out { s.yellow().to_string() } else { s.to_owned() }
    }

    pub fn red(&self, s: &str) -> String {
        if self.color_out { s.red().to_string() } else { s.to_owned() }
    }

    /// A finished task's state as people read it
    /// ([`cassist_core::event::TaskEnd::shown_state`]),
    /// coloured by what it means.
    pub fn end_state(&self, end: &cassist_core::event::TaskEnd) -> String {
        match end.shown_state() {
            "interrupted" => self.yellow("interrupted"),
            "replayed (remote)" => self.green("replayed (remote)"),
            _ => self.state(end.state()),
        }
    }

    /// A task's state, coloured by what it means.
    pub fn state(&self, state: cassist_core::event::TaskState) -> String {
        use cassist_core::event::TaskState;
        match state {
            TaskState::Passed | TaskState::UpToDate | TaskState::Replayed | TaskState::Verified | TaskState::Stale => {
                self.green(state.as_str())
            }
            TaskState::Skipped => self.yellow(state.as_str()),
            TaskState::Failed | TaskState::Blocked => self.red(state.as_str()),
        }
    }
}
