//! `watch [SECONDS]`: a live view of what `count` (and, later, `time` and `profile`) measure.
//! Every SECONDS it reads the metrics the way `report` does, from the process's memory without
//! stopping it, feeds one Paradyn time histogram per metric
//! (`engine::instrument::histogram`) with the growth since the last sample, and shows a table:
//! total, rate over the last interval, and the histogram as a sparkline. On a terminal the
//! table is redrawn in place; anywhere else (pipes, scripts, tests, `--json`) each sample is
//! its own table, and the last one is the command's output.
//!
//! `watch [SECONDS] consult [OPTIONS]` runs `consult` and shows the running search instead:
//! every SECONDS a table of the experiments started so far, each with its state, its last
//! fraction and the history of its fraction as a sparkline (one Paradyn time histogram per
//! experiment), then the search's report; with `--json`, one stream line per redraw (JSON
//! lines: the search so far), then the report's.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use engine::instrument::histogram::{TimeHistogram, DEFAULT_BUCKETS};
use engine::instrument::inferior::State;

use super::args::parse_count;
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{render_text, Cell, Output, Table};
use crate::target::{self, Target};

/// The shortest interval: below it, sampling costs more than the view is worth (each sample
/// walks every thread's counter block with process_vm_readv).
const MIN_INTERVAL: f64 = 0.05;
/// The longest interval or `--for`, as for `sleep`.
const MAX_SECONDS: f64 = 86_400.0;
/// How often the wait between samples looks at Ctrl-C and whether the process still runs.
const POLL: Duration = Duration::from_millis(20);
/// The sparkline's levels, lowest first; a bucket where nothing happened is a space.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

pub const WATCH: Spec = Spec {
    name: "watch",
    aliases: &[],
    usage: "[SECONDS] [--samples N] [--for SECONDS] [consult [CONSULT OPTIONS]]",
    complete: Complete::Nothing,
    summary: "live view of the measurements, refreshed, with a time history per metric",
    help: "Reads every measured metric (each function of `count`; a loop's entries and \
iterations) every SECONDS (default 1; \
fractions such as 0.2 are fine, at least 0.05) from the process's memory without stopping it, \
and shows for each its total, its rate per second over the last interval, and its history as a \
sparkline of bars scaled to its busiest bucket (a space where nothing happened). The history is a Paradyn time histogram of \
64 buckets, one per interval at first; when the watch outlasts them, neighbouring buckets merge \
in pairs and a bucket covers twice the time (the Bucket column), so an hours-long watch costs no \
more memory than a short one. On a terminal the table is redrawn in place; otherwise (a pipe, a \
script, --json) every sample prints its own table.

The watch ends on Ctrl-C (the process keeps running; `halt` stops it), when the process exits \
(the last table then holds its final values), when it stops (a breakpoint, a signal), after \
--samples N tables, or after --for SECONDS. The first table comes one interval after the start. \
`watch` never resumes a process: on a stopped one (after `start`, `attach` or a breakpoint) it \
shows the values once and says so; `continue &` lets the process run, then `watch` follows it.

`watch [SECONDS] consult [OPTIONS]` runs `consult` with OPTIONS (on the process, or the \
program it starts) and shows the search as it runs: every SECONDS a table of the experiments \
started so far (hypothesis, focus, state: testing, true, false or failed; the fraction last \
measured; the history of that fraction as a sparkline, one bucket per interval), redrawn in \
place on a terminal, each its own table otherwise. With --json, each redraw is one line of the \
stream instead (JSON lines): {\"command\", \"result\": {\"search\": \"running\", \"seconds\", \
\"tested\", \"findings\", \"graph\"}}, the findings and graph as in `consult`'s result so far; \
the last line is `consult`'s own result. Its output is `consult`'s. --samples and --for are `watch`'s own and do not apply to a search (`consult \
--for` does).",
    examples: &[
        (
            "watch",
            "every second until Ctrl-C (after `count FUNC` and `continue &`)",
        ),
        (
            "watch 0.2 --samples 5",
            "five tables, a fifth of a second apart, for scripts and tests",
        ),
        (
            "watch 10 --for 3600",
            "an hour in 10-second steps; the history folds to keep 64 buckets",
        ),
        (
            "watch 0.5 consult --for 20",
            "run the bottleneck search, showing its experiments every half second",
        ),
    ],
    run: watch,
};

/// One measured quantity: an instrumentation id, a name, and a value that only grows while
/// the process lives (calls so far; the lead's `time` and `profile` add their own).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Metric {
    id: u32,
    name: String,
    value: u64,
}

/// One look at the process.
struct Reading {
    state: State,
    metrics: Vec<Metric>,
}

/// Reads every metric, as `report` does: live from memory while the process is alive, else
/// the values it had when it exited.
fn read(t: &Target) -> Result<Reading> {
    // `coverage --once`: blocks seen so far lose their probes at every reading, as at
    // `report`, in short pauses.
    let reading = t.inferior.read_measures(true)?;
    let state = reading.state;
    let results = super::measure::Results::live(t.pid(), reading);
    let mut metrics = Vec::new();
    {
        for v in results.values {
            let what = v.what();
            let calls = if v.loop_only().is_some() {
                "entries"
            } else {
                "calls"
            };
            metrics.push(Metric {
                id: v.id,
                name: format!("{what} {calls}"),
                value: v.calls,
            });
            if let Some(it) = v.iterations {
                metrics.push(Metric {
                    id: v.id,
                    name: format!("{what} iterations"),
                    value: it,
                });
            }
            // Time as a cumulative metric too: its rate is the time spent per second.
            if let Some(ns) = v.ns {
                metrics.push(Metric {
                    id: v.id,
                    name: format!("{what} {} µs", v.metric.command()),
                    value: ns / 1000,
                });
            }
        }
    }
    Ok(Reading { state, metrics })
}

/// One row of the view: a metric, its last value and its history.
struct Row {
    id: u32,
    name: String,
    value: u64,
    /// Growth per second over the last interval; `None` before the second reading.
    rate: Option<f64>,
    history: TimeHistogram,
}

/// Everything `watch` remembers between samples.
struct View {
    /// The histograms' initial bucket width: one sample interval.
    width: Duration,
    rows: Vec<Row>,
    /// When the last reading was taken, since the watch began.
    at: Duration,
}

impl View {
    fn new(width: Duration) -> View {
        View {
            width,
            rows: Vec::new(),
            at: Duration::ZERO,
        }
    }

    /// Takes in a reading made `at` after the watch began. A metric seen for the first time
    /// gets a histogram that is empty up to `at`, so every histogram folds at the same
    /// moments; a metric no longer measured (its id deleted) leaves the view.
    fn update(&mut self, at: Duration, reading: &Reading) -> Result<()> {
        let dt = at.saturating_sub(self.at).as_secs_f64();
        let mut rows = Vec::with_capacity(reading.metrics.len());
        for m in &reading.metrics {
            let known = self
                .rows
                .iter()
                .position(|r| r.id == m.id && r.name == m.name);
            let row = match known {
                Some(i) => {
                    let mut row = self.rows.swap_remove(i);
                    // A value that shrank was reset (re-inserted counters start at zero):
                    // count its growth from zero.
                    let grew = m.value.checked_sub(row.value).unwrap_or(m.value);
                    row.history.record(at, grew)?;
                    row.rate = (dt > 0.0).then(|| grew as f64 / dt);
                    row.value = m.value;
                    row
                }
                None => {
                    let mut history = TimeHistogram::new(DEFAULT_BUCKETS, self.width)?;
                    history.record(at, 0)?;
                    Row {
                        id: m.id,
                        name: m.name.clone(),
                        value: m.value,
                        rate: None,
                        history,
                    }
                }
            };
            rows.push(row);
        }
        self.rows = rows;
        self.at = at;
        Ok(())
    }

    /// The view as a table, its sparklines at most `spark` characters wide.
    fn table(&self, title: String, note: Option<String>, spark: usize) -> Table {
        let mut t = Table::new(vec![
            "Instrumentation",
            "Metric",
            "Total",
            "Per second",
            "History",
            "Bucket",
        ]);
        t.title = Some(title);
        t.note = note;
        for r in &self.rows {
            t.rows.push(vec![
                Cell::Num(u64::from(r.id)),
                Cell::text(&r.name),
                Cell::Num(r.value),
                r.rate.map_or(Cell::Empty, |x| Cell::Num(x.round() as u64)),
                Cell::text(sparkline(&r.history.rates(), spark)),
                Cell::text(duration_text(r.history.width())),
            ]);
        }
        t
    }
}

/// Rates as bars scaled to the largest, merged in neighbouring pairs (averaged, as a folding
/// histogram would) until they fit in `max` characters.
pub(crate) fn sparkline(rates: &[f64], max: usize) -> String {
    let mut rates = rates.to_vec();
    while rates.len() > max.max(1) {
        rates = rates
            .chunks(2)
            .map(|pair| pair.iter().sum::<f64>() / pair.len() as f64)
            .collect();
    }
    let top = rates.iter().copied().fold(0.0, f64::max);
    rates
        .iter()
        .map(|&r| {
            if r <= 0.0 || top <= 0.0 {
                ' '
            } else {
                let level = (r / top * BARS.len() as f64).ceil() as usize;
                BARS[level.clamp(1, BARS.len()) - 1]
            }
        })
        .collect()
}

/// `200ms`, `1.6s`, `3m12s`, `2h05m`: a bucket width as people read it.
pub(crate) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs_f64();
    if s < 60.0 {
        let text = format!("{s:.1}");
        return format!("{}s", text.strip_suffix(".0").unwrap_or(&text));
    }
    let s = d.as_secs();
    if s < 3600 {
        return format!("{}m{:02}s", s / 60, s % 60);
    }
    format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
}

/// Parses a number of seconds between `min` and a day.
fn seconds(what: &str, s: &str, min: f64) -> Result<Duration> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=MAX_SECONDS).contains(&x) => {
            Ok(Duration::from_secs_f64(x))
        }
        _ => bail!("{what} must be a number of seconds from {min} to {MAX_SECONDS}, not `{s}`"),
    }
}

/// Why the wait for the next sample ended.
enum Wake {
    /// The sample is due.
    Due,
    /// Ctrl-C.
    Interrupted,
    /// The process is no longer running (exited, killed, stopped).
    Stopped,
}

/// Sleeps until `due`, looking at Ctrl-C and the process's state every [`POLL`].
fn wait_until(t: &Target, due: Instant, interrupt: &std::sync::atomic::AtomicBool) -> Wake {
    loop {
        if interrupt.load(Ordering::SeqCst) {
            return Wake::Interrupted;
        }
        // An error here means the tracer is gone with the process: the next reading says so.
        if !matches!(t.inferior.state(), Ok(State::Running)) {
            return Wake::Stopped;
        }
        let now = Instant::now();
        if now >= due {
            return Wake::Due;
        }
        std::thread::sleep((due - now).min(POLL));
    }
}

/// Why a process that is not running cannot be watched further, as a table note.
fn not_running(pid: i32, state: State) -> String {
    match state {
        State::Exited(_) | State::Signaled(_) | State::Ended => {
            format!("process {pid} {state}: these are its final values")
        }
        State::Stopped => format!(
            "process {pid} is stopped, so these values stand still; `continue &` lets it run \
             while `watch` follows it"
        ),
        State::Detached => format!("gsh let process {pid} go: these are its last values"),
        State::Running => format!("process {pid} is running"),
    }
}

/// Prints tables, redrawing the previous one in place on a terminal.
struct Screen {
    /// Redraw in place: a terminal and tables for people.
    redraw: bool,
    /// Lines of the table on screen, to move back over.
    lines: usize,
    /// Sparkline width that fits beside the other columns.
    spark: usize,
}

impl Screen {
    fn new(ctx: &Context) -> Screen {
        let redraw = ctx.style.terminal && !ctx.json;
        let spark = if redraw {
            // The other columns take about 70 characters with their borders.
            crossterm::terminal::size().map_or(DEFAULT_BUCKETS, |(w, _)| {
                usize::from(w).saturating_sub(70).clamp(16, DEFAULT_BUCKETS)
            })
        } else {
            DEFAULT_BUCKETS
        };
        Screen {
            redraw,
            lines: 0,
            spark,
        }
    }

    /// The output that shows `table`: on a terminal, text that first moves back over and
    /// clears the previous table.
    fn output(&mut self, ctx: &Context, table: Table) -> Result<Output> {
        if !self.redraw {
            return Ok(Output::Table(table));
        }
        self.redrawn(table, ctx.style)
    }

    /// `table` as text that first moves back over and clears the previous one (on a
    /// terminal).
    fn redrawn(&mut self, table: Table, style: crate::output::Style) -> Result<Output> {
        let text = render_text(&Output::Table(table), style);
        let mut bytes = Vec::new();
        if self.lines > 0 {
            let up = u16::try_from(self.lines).unwrap_or(u16::MAX);
            crossterm::queue!(
                bytes,
                crossterm::cursor::MoveToPreviousLine(up),
                crossterm::terminal::Clear(crossterm::terminal::ClearType::FromCursorDown)
            )?;
        }
        bytes.write_all(text.as_bytes())?;
        self.lines = text.lines().count();
        Ok(Output::Text(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

fn the_target(ctx: &Context) -> Result<&Target> {
    ctx.target.as_ref().ok_or_else(|| {
        anyhow!("there is no process to watch; `count FUNC`, then `run` (or `attach PID`)")
    })
}

/// `watch [SECONDS] consult [OPTIONS]`: the running search, every `interval`.
struct SearchView {
    interval: Duration,
    /// Tables shown so far.
    shown: u32,
    /// Each node's fraction history, by its index in the search graph.
    histories: Vec<TimeHistogram>,
    screen: Screen,
    style: crate::output::Style,
    /// With `--json`, the command that each line of the stream is tagged with.
    json: Option<Option<String>>,
    /// Where the tables or JSON lines go (the context's output, taken while the search runs).
    out: Box<dyn std::io::Write>,
}

/// What `watch consult --json` prints at each redraw: the search so far.
#[derive(serde::Serialize)]
struct Snapshot {
    /// Always `"running"`: a redraw, not the search's final report.
    search: &'static str,
    seconds: f64,
    tested: usize,
    findings: Vec<engine::consult::FindingOut>,
    graph: Vec<engine::consult::NodeOut>,
}

impl SearchView {
    /// Takes in the search at `now` seconds; shows it when an interval has passed.
    fn step(&mut self, search: &engine::consult::Search, now: f64) -> Result<()> {
        let due = self.interval.as_secs_f64() * f64::from(self.shown + 1);
        if now < due {
            return Ok(());
        }
        self.shown += 1;
        if let Some(command) = &self.json {
            let r = search.report(now, 0.0);
            let snapshot = Snapshot {
                search: "running",
                seconds: now,
                tested: r.tested,
                findings: r.findings,
                graph: r.graph,
            };
            let line =
                crate::context::stream_line(command.as_deref(), serde_json::to_value(snapshot)?);
            self.out.write_all(line.as_bytes())?;
            self.out.flush()?;
            return Ok(());
        }
        let at = Duration::from_secs_f64(now);
        let mut t = Table::new(vec!["Hypothesis", "Focus", "State", "Fraction", "History"]);
        for (i, n) in search.nodes().iter().enumerate() {
            if self.histories.len() <= i {
                let mut h = TimeHistogram::new(DEFAULT_BUCKETS, self.interval)?;
                h.record(at, 0)?;
                self.histories.push(h);
            }
            use engine::consult::State as S;
            let state = match n.state {
                S::Untested => continue,
                S::Active => "testing",
                S::True => "true",
                S::False => "false",
                S::Failed => "failed",
                S::Refused => "refused",
            };
            // Thousandths of the fraction, so the sparkline shows how it moved.
            let f = n.fraction.unwrap_or(0.0);
            self.histories[i].record(at, (f * 1000.0).round() as u64)?;
            t.rows.push(vec![
                Cell::text(n.experiment.hypothesis.name()),
                Cell::text(n.experiment.focus.to_string()),
                Cell::text(state),
                n.fraction
                    .map_or(Cell::Empty, |f| Cell::text(format!("{f:.2}"))),
                Cell::text(sparkline(&self.histories[i].rates(), self.screen.spark)),
            ]);
        }
        let judged = search.tested();
        t.title = Some(format!(
            "consult, {} in, {judged} experiment{} judged",
            duration_text(at),
            if judged == 1 { "" } else { "s" }
        ));
        let out = if self.screen.redraw {
            self.screen.redrawn(t, self.style)?
        } else {
            Output::Table(t)
        };
        let text = render_text(&out, self.style);
        self.out.write_all(text.as_bytes())?;
        if !self.screen.redraw && !text.ends_with('\n') {
            self.out.write_all(b"\n")?;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// `watch [SECONDS] consult [OPTIONS]`.
fn watch_search(ctx: &mut Context, interval: Duration, consult: &mut Args) -> Result<Output> {
    let mut view = SearchView {
        interval,
        shown: 0,
        histories: Vec::new(),
        screen: Screen::new(ctx),
        style: ctx.style,
        json: ctx.json.then(|| ctx.command().map(str::to_owned)),
        out: ctx.take_writer(),
    };
    let mut failed = None;
    let mut observe = |search: &engine::consult::Search, now: f64| {
        if failed.is_some() {
            return;
        }
        if let Err(e) = view.step(search, now) {
            failed = Some(e);
        }
    };
    let out = super::consult::search(ctx, consult, Some(&mut observe));
    ctx.restore_writer(view.out);
    let out = out?;
    match failed {
        // The reader went away (`gsh ... | head`): stop quietly, as `watch` does.
        Some(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ctx.quit = true;
            Ok(Output::Nothing)
        }
        Some(e) => Err(e.context("showing the search")),
        None => Ok(out),
    }
}

fn watch(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    if let Some(mut consult) = args.split_off("consult", &super::consult::CONSULT) {
        if args.option("--samples")?.is_some() || args.option("--for")?.is_some() {
            bail!(
                "--samples and --for are watch's own; a search ends by itself or after \
                 `consult --for SECONDS`"
            );
        }
        let interval = match args.positionals(0, 1)?.first() {
            Some(s) => seconds("the interval", s, MIN_INTERVAL)?,
            None => Duration::from_secs(1),
        };
        return watch_search(ctx, interval, &mut consult);
    }
    let samples = match args.option("--samples")? {
        Some(s) => match parse_count("--samples", &s)? {
            0 => bail!("--samples must be at least 1"),
            n => Some(n),
        },
        None => None,
    };
    let limit = match args.option("--for")? {
        Some(s) => Some(seconds("--for", &s, MIN_INTERVAL)?),
        None => None,
    };
    let interval = match args.positionals(0, 1)?.first() {
        Some(s) => seconds("the interval", s, MIN_INTERVAL)?,
        None => Duration::from_secs(1),
    };
    let pid = the_target(ctx)?.pid();
    let flag = ctx.interrupt.clone();
    let _ctrl_c = target::CtrlC::catch(&flag);
    let start = Instant::now();
    let first = read(the_target(ctx)?)?;
    if first.metrics.is_empty() {
        bail!("nothing is measured in process {pid}; `count FUNC` first");
    }
    let mut view = View::new(interval);
    view.update(Duration::ZERO, &first)?;
    let mut screen = Screen::new(ctx);
    if first.state != State::Running {
        let title = format!("process {pid}, {}", first.state);
        let table = view.table(title, Some(not_running(pid, first.state)), screen.spark);
        return screen.output(ctx, table);
    }
    let mut shown = 0usize;
    loop {
        // Due times are multiples of the interval from the start, so samples do not drift.
        let mut due = interval.saturating_mul(u32::try_from(shown + 1).unwrap_or(u32::MAX));
        if let Some(limit) = limit {
            due = due.min(limit);
        }
        let wake = wait_until(the_target(ctx)?, start + due, &flag);
        // A sample on time is stamped with its due time, so it fills exactly one bucket
        // instead of spilling a sliver into the next; an early one (Ctrl-C, an exit) with
        // the time it was taken.
        let at = start.elapsed().min(due);
        let reading = read(the_target(ctx)?)?;
        view.update(at, &reading)?;
        shown += 1;
        let of = samples.map_or_else(String::new, |n| format!(" of {n}"));
        let title = format!(
            "process {pid}, sample {shown}{of}, {} watched",
            duration_text(at)
        );
        let note = if reading.state != State::Running {
            Some(not_running(pid, reading.state))
        } else if matches!(wake, Wake::Interrupted) {
            Some(format!(
                "watch interrupted; process {pid} runs on (`halt` stops it)"
            ))
        } else {
            // Due, or a stop that was over by the time of the reading: go on.
            None
        };
        let done = note.is_some()
            || samples.is_some_and(|n| shown >= n)
            || limit.is_some_and(|l| due >= l);
        let table = view.table(title, note, screen.spark);
        let out = screen.output(ctx, table)?;
        if done {
            return Ok(out);
        }
        ctx.emit(&out)?;
        if ctx.quit {
            // Nobody reads the output any more (`gsh ... | head`).
            return Ok(Output::Nothing);
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
