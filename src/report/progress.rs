//! Live progress of `cassist run`: a thread of its own that receives the
//! runner's events and the finished tasks as messages, and alone writes the
//! terminal while tasks run.
//!
//! On a terminal: an overall bar (done/total, passed, failed, cached,
//! spend) and a line per running task with its phase, attempt, elapsed
//! time and cost (indicatif). Elsewhere (CI, pipes): one plain line per
//! state change, no control characters. `-q`: nothing (the summary says
//! the failures). What came from an agent or a command it ran (details,
//! notes, summaries, reasons, file names, transcripts) goes through
//! [`cassist_core::text::printable`]: it never drives the terminal.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle, TermLike};

use crate::cli::OutputLogs;
use crate::report::Output;
use cassist_core::event::{Event, Events, TaskEnd, TaskState};
use cassist_core::text::printable;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Bars,
    Lines,
    /// Only failures.
    Quiet,
}

impl Style {
    /// Bars on a terminal (unless `TERM=dumb`), plain lines elsewhere.
    pub fn detect(out: &Output) -> Style {
        if out.quiet {
            Style::Quiet
        } else if std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb") {
            Style::Bars
        } else {
            Style::Lines
        }
    }
}

enum Msg {
    Phase {
        task: String,
        phase: &'static str,
        attempt: u32,
        detail: String,
    },
    Note {
        task: String,
        message: String,
    },
    Cost {
        task: String,
        usd: f64,
    },
    Finished(Box<TaskEnd>),
    /// The `n`-th Ctrl-C.
    Interrupted(usize),
    /// Everything is said: clear the bars and end.
    Stop,
}

/// The reporter: send it events and finished tasks; [`Reporter::finish`]
/// waits until everything is written.
pub struct Reporter {
    tx: SyncSender<Msg>,
    thread: JoinHandle<()>,
}

impl Reporter {
    pub fn start(out: Output, style: Style, total: usize, logs: OutputLogs) -> Reporter {
        // Bounded: a slow terminal slows the tasks' events down rather than
        // letting them pile up.
        let (tx, rx) = sync_channel(1024);
        let thread = std::thread::Builder::new()
            .name("cassist-reporter".into())
            .spawn(move || Screen::new(out, style, total, logs).serve(rx))
            .expect("start the reporter thread");
        Reporter { tx, thread }
    }

    /// The runner's event sink.
    pub fn events(&self) -> Events {
        let tx = self.tx.clone();
        Arc::new(move |e: Event<'_>| {
            let msg = match e {
                Event::Phase { task, phase, attempt, detail } => {
                    Msg::Phase { task: task.to_owned(), phase, attempt, detail }
                }
                Event::Note { task, message } => Msg::Note { task: task.to_owned(), message },
                Event::Cost { task, usd } => Msg::Cost { task: task.to_owned(), usd },
            };
            let _ = tx.send(msg);
        })
    }

    /// What tells the reporter of the `n`-th Ctrl-C (from another thread:
    /// it says at once what cassist does about it).
    pub fn interrupts(&self) -> impl Fn(usize) + Send + 'static {
        let tx = self.tx.clone();
        move |n| {
            let _ = tx.send(Msg::Interrupted(n));
        }
    }

    /// A task ended.
    pub fn finished(&self, r: &TaskEnd) {
        let _ = self.tx.send(Msg::Finished(Box::new(r.clone())));
    }

    /// Waits until every message is written and the bars are gone.
    pub fn finish(self) {
        let _ = self.tx.send(Msg::Stop);
        let _ = self.thread.join();
    }
}

/// What one running task shows.
struct Running {
    bar: Option<ProgressBar>,
    cost: f64,
    phase: String,
}

/// The reporter thread's state.
struct Screen {
    out: Output,
    style: Style,
    total: usize,
    logs: OutputLogs,
    done: usize,
    passed: usize,
    failed: usize,
    cached: usize,
    spent: f64,
    multi: Option<MultiProgress>,
    overall: Option<ProgressBar>,
    running: HashMap<String, Running>,
}

impl Screen {
    fn new(out: Output, style: Style, total: usize, logs: OutputLogs) -> Screen {
        let (multi, overall) = if style == Style::Bars {
            let target = ProgressDrawTarget::term_like_with_hz(Box::new(Stderr::default()), 10);
            let multi = MultiProgress::with_draw_target(target);
            let overall = multi.add(ProgressBar::new(total as u64));
            // --color and NO_COLOR decide for the bars too.
            let template = if out.color_err {
                "{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} {msg}"
            } else {
                "{prefix} [{bar:30}] {pos}/{len} {msg}"
            };
            overall.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            overall.set_prefix("cassist");
            overall.enable_steady_tick(Duration::from_millis(200));
            (Some(multi), Some(overall))
        } else {
            (None, None)
        };
        let s = Screen {
            out,
            style,
            total,
            logs,
            done: 0,
            passed: 0,
            failed: 0,
            cached: 0,
            spent: 0.0,
            multi,
            overall,
            running: HashMap::new(),
        };
        s.update_overall();
        s
    }

    fn serve(mut self, rx: Receiver<Msg>) {
        for msg in rx {
            match msg {
                Msg::Phase { task, phase, attempt, detail } => self.phase(&task, phase, attempt, &detail),
                Msg::Note { task, message } => self.note(&task, &message),
                Msg::Cost { task, usd } => {
                    self.spent += usd;
                    if let Some(r) = self.running.get_mut(&task) {
                        r.cost += usd;
                    }
                    self.redraw(&task);
                    self.update_overall();
                }
                Msg::Finished(r) => self.finished(&r),
                Msg::Interrupted(n) => self.interrupted(n),
                Msg::Stop => break,
            }
        }
        if let Some(o) = self.overall.take() {
            o.finish_and_clear();
        }
        for (_, r) in self.running.drain() {
            if let Some(b) = r.bar {
                b.finish_and_clear();
            }
        }
        if let Some(m) = self.multi.take() {
            let _ = m.clear();
        }
    }

    fn counter(&self) -> String {
        format!("[{}/{}]", self.done, self.total)
    }

    fn phase(&mut self, task: &str, phase: &str, attempt: u32, detail: &str) {
        let attempt_text = if attempt > 0 { format!(" (attempt {attempt})") } else { String::new() };
        let detail_text = if detail.is_empty() { String::new() } else { format!(": {detail}") };
        let text = printable(&format!("{phase}{attempt_text}{detail_text}")).into_owned();
        if self.style == Style::Lines {
            cassist_core::errln!("{} {task}: {text}", self.counter());
        }
        // Every style counts the running tasks (Ctrl-C says how many it
        // stops); bars draw them.
        let multi = self.multi.clone();
        let template = if self.out.color_err {
            "{spinner:.green} {prefix:.bold} {wide_msg} [{elapsed}]"
        } else {
            "{spinner} {prefix} {wide_msg} [{elapsed}]"
        };
        let entry = self.running.entry(task.to_owned()).or_insert_with(|| Running {
            bar: multi.map(|m| {
                let bar = m.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template(template)
                        .unwrap_or_else(|_| ProgressStyle::default_spinner())
                        .with_key("elapsed", elapsed),
                );
                bar.set_prefix(task.to_owned());
                bar.enable_steady_tick(Duration::from_millis(120));
                bar
            }),
            cost: 0.0,
            phase: String::new(),
        });
        entry.phase = text;
        self.redraw(task);
    }

    fn redraw(&self, task: &str) {
        if let Some(r) = self.running.get(task)
            && let Some(bar) = &r.bar
        {
            let cost = if r.cost > 0.0 { format!(" ${:.2}", r.cost) } else { String::new() };
            // The line fits the terminal: the spinner, the name, the
            // message and the elapsed time (` [59m59s]` at most).
            let used = 2 + crate::report::table::visible_width(task) + 1 + 9;
            let room = usize::from(Stderr::default().width()).saturating_sub(used).min(120);
            bar.set_message(cassist_core::text::truncate(&format!("{}{cost}", r.phase), room).into_owned());
        }
    }

    fn note(&self, task: &str, message: &str) {
        let message = printable(message);
        match (&self.style, &self.multi) {
            (Style::Quiet, _) => {}
            (Style::Bars, Some(m)) => {
                let _ = m.println(format!("{task}: {message}"));
            }
            _ => cassist_core::errln!("{} {task}: {message}", self.counter()),
        }
    }

    /// The `n`-th Ctrl-C: said at once, above the bars, which go on
    /// ticking while the agents stop.
    fn interrupted(&self, n: usize) {
        let message = match (n, self.running.len()) {
            (1, 0) => "stopping… (Ctrl-C again to stop at once)".to_owned(),
            (1, 1) => "stopping 1 agent… (Ctrl-C again to stop at once)".to_owned(),
            (1, agents) => format!("stopping {agents} agents… (Ctrl-C again to stop at once)"),
            _ => "stopping at once".to_owned(),
        };
        match &self.multi {
            // Redrawn under it: what the terminal's echo of `^C` did to
            // the bars is gone.
            Some(m) => {
                let _ = m.println(message);
            }
            None => cassist_core::errln!("{message}"),
        }
    }

    fn update_overall(&self) {
        if let Some(o) = &self.overall {
            o.set_position(self.done as u64);
            let spend = if self.spent > 0.0 { format!(", ${:.2}", self.spent) } else { String::new() };
            o.set_message(format!("{} passed, {} failed, {} cached{spend}", self.passed, self.failed, self.cached));
        }
    }

    fn finished(&mut self, end: &TaskEnd) {
        let r = &end.report;
        self.done += 1;
        match r.state {
            TaskState::Passed => self.passed += 1,
            TaskState::UpToDate | TaskState::Replayed | TaskState::Verified | TaskState::Stale => self.cached += 1,
            TaskState::Failed | TaskState::Blocked => self.failed += 1,
            TaskState::Skipped => {}
        }
        if let Some(run) = self.running.remove(&r.name)
            && let (Some(bar), Some(m)) = (run.bar, &self.multi)
        {
            bar.finish_and_clear();
            m.remove(&bar);
        }
        match &self.multi {
            Some(m) => m.suspend(|| print_finished(&self.out, end, self.logs)),
            None => print_finished(&self.out, end, self.logs),
        }
        self.update_overall();
    }
}

/// Where the bars are drawn: stderr, as a terminal two columns narrower
/// than it is. Indicatif pads its last line to the terminal's width,
/// leaving the cursor where anything typed wraps to a new line; the
/// terminal's echo of Ctrl-C (`^C`) would then push the bars down a line
/// and leave a stale copy of them above. Two free columns take the echo
/// (and the next redraw clears it).
#[derive(Debug)]
struct Stderr(console::Term);

impl Default for Stderr {
    fn default() -> Stderr {
        Stderr(console::Term::buffered_stderr())
    }
}

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(2).max(1)
    }

    fn height(&self) -> u16 {
        self.0.size().0
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }

    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The `{elapsed}` of a running task's line: whole seconds, written as
/// every other duration is.
fn elapsed(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&cassist_core::text::duration(Duration::from_secs(state.elapsed().as_secs())));
}

/// The line of a finished task (stdout).
pub fn print_finished(out: &Output, end: &TaskEnd, logs: OutputLogs) {
    let r = &end.report;
    // -q: the summary says the failures.
    if out.quiet {
        return;
    }
    if matches!(r.state, TaskState::UpToDate | TaskState::Stale) {
        // A cache hit (a stale task's findings are kept): one line with the
        // stored summary, and where the transcript is (or the transcript
        // itself with --output-logs full).
        let summary = printable(r.summary.as_deref().unwrap_or(""));
        let summary = cassist_core::text::first_line(&summary, 100);
        let mut line = format!("{} {}", r.name, out.state(r.state));
        match &r.reason {
            // Why its findings stand.
            Some(note) if r.state == TaskState::Stale => line.push_str(&format!(" ({})", printable(note))),
            // Outputs the user changed since the run, left as they are.
            Some(note) => line.push_str(&format!(" ({}, kept)", printable(note))),
            None => {}
        }
        if !summary.is_empty() {
            line.push_str(&format!(": {summary}"));
        }
        cassist_core::outln!("{line}");
        if let Some(t) = &end.transcript {
            if logs == OutputLogs::Full {
                if let Ok(text) = std::fs::read_to_string(t) {
                    for l in printable(&text).lines() {
                        cassist_core::outln!("  | {l}");
                    }
                }
            } else {
                cassist_core::outln!("  {}", out.dim(&format!("transcript: {}", t.display())));
            }
        }
        return;
    }
    let state = out.end_state(end);
    let mut line = format!("{} {state} in {}", r.name, cassist_core::text::duration_ms(r.duration_ms));
    if !r.changed_files.is_empty() && r.state.is_success() {
        let files = printable(&r.changed_files.join(", ")).into_owned();
        line.push_str(&format!(", integrated {} file(s): {files}", r.changed_files.len()));
    }
    if let Some(reason) = r.reason.as_ref().filter(|_| !end.interrupted) {
        line.push_str(&format!(": {}", printable(reason)));
    }
    cassist_core::outln!("{line}");
    if r.state.is_success()
        && let Some(s) = &r.summary
        && !s.trim().is_empty()
    {
        let text = printable(s);
        let mut lines: Vec<&str> = text.trim().lines().collect();
        let more = lines.len() > 3;
        lines.truncate(3);
        let mut first = lines.join("\n  ");
        if more {
            first.push('…');
        }
        cassist_core::outln!("  {}", out.dim(&first));
    }
}
