//! Measuring commands: `count FUNC...` (calls), `time FUNC... [--cpu]` (inclusive wall or
//! thread-CPU time), `profile FUNC... [--cpu|--count]` (iPath call-path profiles), all kept by
//! the runtime library `gsh-rt` in the process, and `report` (their values, read from the
//! process's memory while it runs, as it left them when it exited or gsh detached, or from a
//! rewritten binary's results file), as tables, JSON, folded stacks or a flame graph. The
//! engine side is `engine::instrument::measure`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context as _, Result};
use engine::instrument::coverage::FunctionCoverage;
use engine::instrument::inferior::Reading;
use engine::instrument::measure::{self, CountValue, LoopSel, Measured, Metric, PathValue};

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};
use crate::target::TargetSlot;

pub const COUNT: Spec = Spec {
    name: "count",
    aliases: &[],
    usage: "FUNC [loop LOOP | call CALLEE]...",
    complete: Complete::Function,
    summary: "count calls to functions, or entries and iterations of their loops",
    help: "Counts every call to each FUNC (a name or a glob such as 'work_*'; `lib!FUNC` for a \
library's) at its entry, per thread and exactly, with a counter inlined in the trampoline: a \
thread-local load, a test and an increment. The runtime library libgsh_rt.so is loaded into the \
process the first time (found next to the gsh executable, or at $GSH_RT). Each FUNC gets an \
instrumentation id that `delete` removes; the table printed names what each id counts (the \
function, or the glob and how many functions it matched) and how many points went in. `report` \
shows the counts. Asked for before `start` or `run`, the counting begins when the process \
reaches main; `save` writes the same counters into a rewritten binary, whose results `report \
FILE` reads.

`FUNC loop LOOP` counts a loop instead: its entries (control coming into its header from outside \
it) and its iterations (passes through its header), and `report` shows iterations per entry. \
LOOP is a name as `loops FUNC` shows it (`loop_1.2`), the loop's header address, or '*' for \
every loop of FUNC, each loop its own row (`FUNC loop_1.2`). An unknown loop is an error \
listing FUNC's loops; irreducible cycles (entered at more than one block) form no loop and are \
named in a warning. Where the patcher cannot reach an entry edge (a call returning into the \
header, which other edges also reach), the entries are the iterations less the passes along \
the loop's back edges.

`FUNC call CALLEE` counts FUNC's direct calls to CALLEE instead (at each call site, as the point \
`FUNC call CALLEE before` is), its row named `FUNC call CALLEE`. FUNC must make such a call: an \
indirect call or none is an error.",
    examples: &[
        ("count work_item", "calls to work_item"),
        (
            "count parse loop '*'",
            "entries and iterations of every loop of parse",
        ),
        (
            "count 'parse_*' lookup",
            "two ids: the parse functions, and lookup",
        ),
    ],
    run: count,
};

pub const TIME: Spec = Spec {
    name: "time",
    aliases: &[],
    usage: "FUNC [loop LOOP | call CALLEE]... [--cpu]",
    complete: Complete::Function,
    summary: "time functions (inclusive wall or thread-CPU time) in the live process",
    help: "Counts the calls to each FUNC and sums the inclusive time spent in it, per thread, \
from its entry to its return. Wall time is read inline from the TSC (two `rdtsc`s per call, no \
call into the runtime); `--cpu` measures the thread's CPU time instead (a system call at entry \
and exit, so microseconds per call). Recursion is timed once, for the outermost activation. An \
activation that never returns through its exit (left by longjmp or an exception) is closed at \
the next entry of the function on that thread whose stack pointer shows the frame is gone \
(iPath's active-stack check). Activations still open are credited up to the moment `report` \
reads them. As for `count`, the table printed names what each id times.

`FUNC loop LOOP` (LOOP as for `count`) times a loop instead: its entries and the inclusive time \
from each entry to the exit that leaves it (break, return, goto and every other edge out; an \
exception caught in FUNC closes it in the handler). Its activations are keyed by FUNC's frame, \
so a recursive call's loop is timed with the outer one, and a loop left by longjmp or by an \
exception caught in a caller is closed at FUNC's next entry at that frame, as functions' timers \
are.

`FUNC call CALLEE` times CALLEE when called from FUNC: from each of FUNC's direct calls to it \
(the point `FUNC call CALLEE before`) to its return (`after`), keyed by FUNC's frame, so a call \
reached again through recursion below an open one is timed by the open one. That is the time of \
the call paths whose last step is FUNC > CALLEE (iPath's path timer); `consult` tests a call \
path hypothesis with it.",
    examples: &[
        (
            "time handle_request",
            "calls and wall time of handle_request",
        ),
        (
            "time 'parse_*' --cpu",
            "thread CPU time of each parse function",
        ),
        (
            "time main loop loop_1",
            "wall time spent in main's first loop",
        ),
        (
            "time hot_caller call hot",
            "wall time in hot when hot_caller calls it",
        ),
    ],
    run: time,
};

pub const PROFILE: Spec = Spec {
    name: "profile",
    aliases: &[],
    usage: "FUNC... [--cpu|--count]",
    complete: Complete::Function,
    summary: "call-path profile of functions: one row per distinct call path",
    help: "Walks the stack at the entry of each FUNC (frame pointers, and the unwind tables \
gsh gives the runtime where there are none) and keeps one record per distinct call path per \
thread, with its calls and inclusive wall time (`--cpu`: thread CPU time; `--count`: calls \
only, no exit instrumentation), as iPath does. Only the chosen functions pay for the walk. \
`report` shows one row per path with calls, total, mean and its share of the function; \
a thread keeps 3,072 distinct paths, and the calls on paths beyond those show as one row, \
`(other paths)`, so a profile's calls are always all its calls; `report --folded FILE` and `report --svg FILE` write folded stacks and a flame graph. \
Loops are path elements: where a function on the path has loops measured (`count` or `time \
FUNC loop LOOP|'*'`), the measured loops holding the call show after it, outermost first \
(`main > work > loop_1 > loop_1.2 > helper`), live and in a saved binary's results; loops not \
measured do not show.",
    examples: &[
        (
            "profile helper",
            "paths to helper; with `time work loop '*'` too, work's loops are elements \
             (`work > loop_1 > helper`)",
        ),
        (
            "profile malloc",
            "who calls malloc, and how long it takes per path",
        ),
        ("profile parse --count", "call paths to parse, counted only"),
    ],
    run: profile,
};

pub const REPORT: Spec = Spec {
    name: "report",
    aliases: &[],
    usage: "[RESULTS] [--json | --folded FILE | --svg FILE | --lcov FILE]",
    complete: Complete::File,
    summary: "show what `count`, `time`, `profile` and `coverage` measured so far",
    help: "Shows, for every measured function, the calls and the inclusive time so far, summed \
over all threads, and for profiles one row per call path. The values are read from the \
process's memory without stopping it, so `report` may be repeated while the process runs after \
`continue &`. Once the process has exited, the values are those it had when it exited; after \
`detach`, those it had when gsh detached. RESULTS names a results file written at exit by a \
binary that `save` rewrote with measuring in it. A loop's row is named `FUNC loop_1.2` (JSON: \
`\"loop\"`); its Calls are its entries, with Iterations and Per entry for `count` (JSON: \
`iterations`, `iterations_per_entry`). The row of a caller's calls to a callee (`time FUNC \
call CALLEE`) is named `FUNC call CALLEE` (JSON: `\"call\": CALLEE`, and no `\"loop\"`); its \
Calls are those calls. A measure that was deleted keeps the \
values it had then and is marked `(deleted)` (`\"deleted\": true` in JSON); the last 32 deleted \
are kept, older ones are dropped. `--json` prints \
everything as one JSON document; `--folded FILE` writes the profiles as folded stacks (`main;parse;malloc 1234`, in \
ns, or calls for `profile --count`), the input of flame graph tools; `--svg FILE` renders that \
flame graph itself. Block coverage (`coverage`) is shown per function: blocks covered of all, \
source lines covered (with DWARF), blocks left unprobed, and entries; `--lcov FILE` writes it as \
an lcov tracefile (`genhtml FILE` makes HTML of it).",
    examples: &[
        ("report", "every measured function's values so far"),
        ("report --svg flame.svg", "a flame graph of the profiles"),
        ("report --lcov cov.info", "block coverage as an lcov tracefile"),
        (
            "report run.gsh.json",
            "the results a rewritten binary wrote",
        ),
    ],
    run: report,
};

fn count(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let globs = args.positionals(1, usize::MAX)?;
    measure_cmd(ctx, targets(globs)?, Metric::Count)
}

/// The words after `count` or `time`: functions, each optionally followed by `loop LOOP`
/// (`loop_1.2`, a header address, or `'*'` for every loop of the function) or by `call
/// CALLEE` (the function's direct calls to CALLEE).
fn targets(words: Vec<String>) -> Result<Vec<(String, Measured)>> {
    let mut out: Vec<(String, Measured)> = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        if w == "call" {
            let Some((func, of)) = out.last_mut() else {
                bail!("`call` needs a function before it: `FUNC call CALLEE`");
            };
            let Some(callee) = words.next() else {
                bail!("`{func} call` needs the function called: `{func} call CALLEE`");
            };
            if *of != Measured::Function {
                bail!("`{func}` is given two things to measure; write `{func} call CALLEE` once per callee");
            }
            *of = Measured::Call { callee };
            continue;
        }
        if w != "loop" {
            out.push((w, Measured::Function));
            continue;
        }
        let Some((func, of)) = out.last_mut() else {
            bail!("`loop` needs a function before it: `FUNC loop LOOP`");
        };
        let Some(sel) = words.next() else {
            bail!("`{func} loop` needs the loop: `loop_1.2`, its header address, or '*' for every loop");
        };
        if *of != Measured::Function {
            bail!("`{func}` is given two loops; write `{func} loop LOOP` once per loop");
        }
        *of = Measured::Loop {
            loops: LoopSel::parse(&sel),
        };
    }
    Ok(out)
}

fn time(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let metric = if args.flag("--cpu") {
        Metric::TimeCpu
    } else {
        Metric::Time
    };
    let globs = args.positionals(1, usize::MAX)?;
    measure_cmd(ctx, targets(globs)?, metric)
}

fn profile(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let metric = match (args.flag("--cpu"), args.flag("--count")) {
        (true, true) => return Err(args.usage_error("`--cpu` and `--count` exclude each other")),
        (true, false) => Metric::ProfileCpu,
        (false, true) => Metric::ProfileCount,
        (false, false) => Metric::Profile,
    };
    // Parsed as `count` and `time` are, so `profile F loop L` gets the engine's reason.
    let globs = args.positionals(1, usize::MAX)?;
    measure_cmd(ctx, targets(globs)?, metric)
}

/// One request per glob; inserted at once into a live process, else when it reaches main.
/// The table names what each id measures: the function, or the glob and how many it matched.
fn measure_cmd(
    ctx: &mut Context,
    globs: Vec<(String, Measured)>,
    metric: Metric,
) -> Result<Output> {
    ctx.session.main()?;
    let mut t = Table::new(vec!["Instrumentation", "Function", "Measure", "Points"]);
    let live = ctx.target.is_live();
    let mut notes = Vec::new();
    for (glob, of) in globs {
        let r = measure::add_of(&mut ctx.plan, &mut ctx.session, &glob, metric, of.clone())?;
        let (id, funcs) = (r.id, r.funcs.clone());
        notes.extend(r.warnings.iter().cloned());
        if funcs.is_empty() {
            let _ = ctx.plan.delete(id);
            bail!("no function matches `{glob}`");
        }
        let mut inserted = Cell::Empty;
        if let Some(target) = ctx.target.live() {
            let session = &ctx.session;
            let n = ctx
                .plan
                .place(id, |plan| {
                    anyhow::Ok(target.inferior.insert_measure(session, plan, id)?)
                })
                .map_err(|e| e.context(format!("{} {glob}: not inserted", metric.command())))?;
            inserted = Cell::Num(n as u64);
        }
        let name = match funcs.as_slice() {
            [f] => ctx.session.func(*f).display_name().to_owned(),
            many => format!("{glob} ({} functions)", many.len()),
        };
        let name = match &of {
            Measured::Function => name,
            Measured::Loop { loops } => format!("{name} loop {loops}"),
            Measured::Call { callee } => format!("{name} call {callee}"),
        };
        t.rows.push(vec![
            Cell::Num(u64::from(id)),
            Cell::text(name),
            Cell::text(metric.command()),
            inserted,
        ]);
    }
    if !live {
        notes.push(
            "inserted when the process reaches main (`start` or `run`); `report` shows the values"
                .into(),
        );
    }
    if !notes.is_empty() {
        t.note = Some(notes.join("\n"));
    }
    Ok(Output::Table(t))
}

/// One call path of a profile, symbolised.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PathRow {
    pub id: u32,
    pub function: String,
    pub metric: Metric,
    /// The callers, outermost first (`main`, ..., the profiled function's caller).
    pub callers: Vec<String>,
    pub calls: u64,
    pub ns: u64,
}

/// Everything measured, ready to show.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Results {
    pub title: String,
    pub values: Vec<CountValue>,
    pub paths: Vec<PathRow>,
    /// Block coverage, per function (`coverage`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<FunctionCoverage>,
}

/// The call path of a profile's activations whose path the runtime did not keep: their
/// thread's path table was full (or the walk found no return address).
const OTHER_PATHS: &str = "(other paths)";

/// Names the paths' frames and merges paths that differ only in call sites within the same
/// functions (two calls of `leaf` in `path_a` are one path, `main > path_a`), naming a return
/// address with `name`: its function, then the measured loops holding the call, which the
/// path shows as elements of their own (`main > work > loop_1 > helper`).
fn merge_paths(paths: Vec<PathValue>, name: impl Fn(u64) -> Vec<String>) -> Vec<PathRow> {
    let mut names: HashMap<u64, Vec<String>> = HashMap::new();
    let mut merged: Vec<PathRow> = Vec::new();
    let mut index: HashMap<(u32, String, Vec<String>), usize> = HashMap::new();
    for p in paths {
        let mut callers: Vec<String> = Vec::new();
        if p.ras.is_empty() {
            callers.push(OTHER_PATHS.to_owned());
        }
        for &ra in p.ras.iter().rev() {
            callers.extend(names.entry(ra).or_insert_with(|| name(ra)).iter().cloned());
        }
        let key = (p.id, p.function.clone(), callers.clone());
        match index.get(&key) {
            Some(&i) => {
                merged[i].calls += p.calls;
                merged[i].ns += p.ns;
            }
            None => {
                index.insert(key, merged.len());
                merged.push(PathRow {
                    id: p.id,
                    function: p.function,
                    metric: p.metric,
                    callers,
                    calls: p.calls,
                    ns: p.ns,
                });
            }
        }
    }
    merged
}

impl Results {
    /// The values and paths under `title`; a profiled function's calls and time are its
    /// paths' sums (the runtime keeps them per path only).
    fn new(title: String, mut values: Vec<CountValue>, paths: Vec<PathRow>) -> Results {
        for v in values.iter_mut().filter(|v| v.metric.is_profile()) {
            let mine = paths
                .iter()
                .filter(|p| p.id == v.id && p.function == v.function);
            let (calls, ns) = mine.fold((0, 0), |(c, n), p| (c + p.calls, n + p.ns));
            v.calls = calls;
            v.ns = v.metric.is_timed().then_some(ns);
        }
        Results {
            title,
            values,
            paths,
            coverage: Vec::new(),
        }
    }
}

impl Results {
    /// What the engine read from a live process (or kept from it), under `title`.
    pub fn from_reading(title: String, r: Reading) -> Results {
        let callers = r.callers;
        let paths = merge_paths(r.paths, |ra| {
            callers
                .get(&ra)
                .cloned()
                .unwrap_or_else(|| vec![format!("{ra:#x}")])
        });
        Results {
            coverage: r.coverage,
            ..Results::new(title, r.values, paths)
        }
    }

    /// What the process measured: now when it is alive, else its last values.
    pub fn live(pid: i32, r: Reading) -> Results {
        let title = match (r.alive, &r.missing) {
            (true, _) => format!("process {pid}, values now"),
            (false, None) => format!("process {pid} has exited: its final values"),
            (false, Some(why)) => {
                format!("process {pid} has exited: its final values (warning: {why})")
            }
        };
        Results::from_reading(title, r)
    }
}

fn report(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let json = args.flag("--json");
    let folded = args.option("--folded")?;
    let svg = args.option("--svg")?;
    let lcov = args.option("--lcov")?;
    let file = args.positionals(0, 1)?.pop();
    let results = match (&file, &ctx.target) {
        (Some(f), _) => read_results_file(&mut ctx.session, Path::new(f))?,
        (None, Some(t)) => {
            // `coverage --once`: blocks seen so far lose their probes.
            Results::live(t.pid(), t.inferior.read_measures(true)?)
        }
        (None, None) => ctx.measured.clone().ok_or_else(|| {
            anyhow!("there is no process to read values from; `count FUNC`, then `run`")
        })?,
    };
    if results.values.is_empty() && results.coverage.is_empty() {
        bail!("nothing is measured; `count`, `time`, `profile` or `coverage FUNC` first");
    }
    if lcov.is_some() && results.coverage.is_empty() {
        bail!("--lcov writes block coverage, and nothing was covered; `coverage FUNC` first");
    }
    // Deleted measures keep the values they had when deleted: users who delete and then
    // report expect to see what was measured, marked so they know it stopped counting.
    let deleted: Vec<u32> = if file.is_some() {
        Vec::new()
    } else {
        let mut ids: Vec<u32> = results
            .values
            .iter()
            .map(|v| v.id)
            .filter(|id| !ctx.plan.requests.iter().any(|r| r.id == *id))
            .collect();
        ids.dedup();
        ids
    };
    let mut notes = Vec::new();
    if let Some(out) = &folded {
        let lines = folded_lines(&results)?;
        std::fs::write(out, lines.join("\n") + "\n")
            .with_context(|| format!("cannot write {out}"))?;
        notes.push(format!("{} folded stack(s) written to {out}", lines.len()));
    }
    if let Some(out) = &svg {
        write_svg(&results, Path::new(out))?;
        notes.push(format!("flame graph written to {out}"));
    }
    if let Some(out) = &lcov {
        notes.push(super::coverage::write_lcov(&results.coverage, out)?);
    }
    if json || ctx.json {
        let mut doc = serde_json::to_value(&results)?;
        if let Some(values) = doc.get_mut("values").and_then(|v| v.as_array_mut()) {
            for (v, value) in values.iter_mut().zip(&results.values) {
                let id = v.get("id").and_then(|i| i.as_u64()).unwrap_or(0);
                v["deleted"] = serde_json::json!(deleted.contains(&(id as u32)));
                if let (Some(it), true) = (value.iterations, value.calls > 0) {
                    v["iterations_per_entry"] = serde_json::json!(it as f64 / value.calls as f64);
                }
            }
        }
        return Ok(Output::Json(doc));
    }
    let mut parts = Vec::new();
    if !results.values.is_empty() {
        parts.push(("values", Output::Table(values_table(&results, &deleted))));
    }
    if !results.coverage.is_empty() {
        parts.push((
            "coverage",
            Output::Table(super::coverage::table(&results.coverage)),
        ));
    }
    if !results.paths.is_empty() {
        parts.push(("paths", Output::Table(paths_table(&results))));
    }
    if !notes.is_empty() {
        parts.push(("notes", Output::Text(notes.join("\n") + "\n")));
    }
    Ok(if parts.len() == 1 {
        parts.remove(0).1
    } else {
        Output::Sections(parts)
    })
}

/// `1.234 s`, `56.7 ms`, `812 ns`.
fn duration(ns: u64) -> String {
    let f = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.3} s", f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.3} µs", f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// Iterations per entry of a loop, to two decimals (`-` before its first entry).
fn per_entry(v: &CountValue) -> Option<String> {
    let it = v.iterations?;
    Some(if v.calls == 0 {
        "-".into()
    } else {
        format!("{:.2}", it as f64 / v.calls as f64)
    })
}

fn values_table(r: &Results, deleted: &[u32]) -> Table {
    // A loop's calls are its entries; its iterations get columns of their own when counted.
    let loops = r.values.iter().any(|v| v.iterations.is_some());
    let mut columns = vec!["Instrumentation", "Function", "Measure", "Calls"];
    if loops {
        columns.extend(["Iterations", "Per entry"]);
    }
    columns.extend(["Total", "Mean"]);
    let mut t = Table::new(columns);
    t.title = Some(r.title.clone());
    for v in &r.values {
        let (total, mean) = match v.ns {
            Some(ns) => (
                Cell::text(duration(ns)),
                ns.checked_div(v.calls)
                    .map_or(Cell::Empty, |m| Cell::text(duration(m))),
            ),
            None => (Cell::Empty, Cell::Empty),
        };
        let measure = if deleted.contains(&v.id) {
            format!("{} (deleted)", v.metric.command())
        } else {
            v.metric.command().to_owned()
        };
        let mut row = vec![
            Cell::Num(u64::from(v.id)),
            Cell::text(v.what()),
            Cell::text(measure),
            Cell::Num(v.calls),
        ];
        if loops {
            row.push(v.iterations.map_or(Cell::Empty, Cell::Num));
            row.push(Cell::opt(per_entry(v)));
        }
        row.extend([total, mean]);
        t.rows.push(row);
    }
    let mut notes = Vec::new();
    if loops {
        notes.push("a loop's calls are its entries; an iteration is a pass through its header");
    }
    if !deleted.is_empty() {
        notes.push("(deleted): values as they were when the instrumentation was deleted");
    }
    if !notes.is_empty() {
        t.note = Some(notes.join("\n"));
    }
    t
}

fn paths_table(r: &Results) -> Table {
    let mut t = Table::new(vec![
        "Instrumentation",
        "Function",
        "Call path",
        "Calls",
        "Total",
        "Mean",
        "%",
    ]);
    t.title = Some("call paths (outermost caller first)".into());
    let mut whole: HashMap<(u32, &str), u64> = HashMap::new();
    let share = |p: &PathRow| {
        if p.metric == Metric::ProfileCount {
            p.calls
        } else {
            p.ns
        }
    };
    for p in &r.paths {
        *whole.entry((p.id, &p.function)).or_default() += share(p);
    }
    let mut rows: Vec<&PathRow> = r.paths.iter().collect();
    rows.sort_by(|a, b| {
        (a.id, &a.function)
            .cmp(&(b.id, &b.function))
            .then(share(b).cmp(&share(a)))
            .then(a.callers.cmp(&b.callers))
    });
    for p in rows {
        let total = whole[&(p.id, p.function.as_str())];
        let pct = if total > 0 {
            format!("{:.1}", 100.0 * share(p) as f64 / total as f64)
        } else {
            "-".into()
        };
        let timed = p.metric != Metric::ProfileCount;
        t.rows.push(vec![
            Cell::Num(u64::from(p.id)),
            Cell::text(p.function.clone()),
            Cell::text(p.callers.join(" > ")),
            Cell::Num(p.calls),
            if timed {
                Cell::text(duration(p.ns))
            } else {
                Cell::Empty
            },
            match p.ns.checked_div(p.calls) {
                Some(m) if timed => Cell::text(duration(m)),
                _ => Cell::Empty,
            },
            Cell::text(pct),
        ]);
    }
    t
}

/// Folded stacks, one line per call path: `main;parse;malloc 1234` (outermost first, then
/// the profiled function; the value is ns, or calls for `profile --count`). Frame names have
/// `;` replaced, since it separates frames.
fn folded_lines(r: &Results) -> Result<Vec<String>> {
    if r.paths.is_empty() {
        bail!("no call paths to fold; `profile FUNC` records them");
    }
    let clean = |s: &str| s.replace([';', '\n'], ":").replace(' ', "_");
    let mut lines: Vec<String> = r
        .paths
        .iter()
        .map(|p| {
            let mut frames: Vec<String> = p.callers.iter().map(|c| clean(c)).collect();
            frames.push(clean(&p.function));
            let value = if p.metric == Metric::ProfileCount {
                p.calls
            } else {
                p.ns
            };
            format!("{} {value}", frames.join(";"))
        })
        .collect();
    lines.sort();
    Ok(lines)
}

fn write_svg(r: &Results, out: &Path) -> Result<()> {
    let lines = folded_lines(r)?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = "gsh profile".into();
    options.count_name = if r.paths.iter().all(|p| p.metric == Metric::ProfileCount) {
        "calls".into()
    } else {
        "ns".into()
    };
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot write {}", out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut w)
        .map_err(|e| anyhow!("cannot render the flame graph: {e}"))?;
    use std::io::Write as _;
    w.flush()?;
    Ok(())
}

/// The results file a rewritten binary writes at exit, read by the engine
/// ([`engine::instrument::results`]), its paths named and merged as a live process's are.
fn read_results_file(session: &mut engine::Session, path: &Path) -> Result<Results> {
    use engine::instrument::coverage::{self, UNPROBED};
    use engine::instrument::results;
    let file = results::read(path)?;
    // Coverage lines come from the saved program's own DWARF (the rewrite keeps it, at the
    // same addresses); with nothing open, the program is opened as the session's file.
    let program = file.modules.first().and_then(|m| {
        let p = Path::new(&m.name);
        let id = match session.main() {
            Ok(_) => session.module_for_path(p),
            Err(_) => session.open(p),
        };
        id.ok().map(|id| session.module_arc(id))
    });
    let names = results::Names::new(session, &file.modules);
    let paths = merge_paths(file.paths, |ra| names.frames(ra, &file.loops));
    let mut covered = Vec::new();
    for map in &file.coverage {
        covered.extend(coverage::summarise(map, program.as_deref(), |k| match file
            .coverage_counts
            .get(&k)
        {
            Some(&UNPROBED) => None,
            Some(&c) => Some(c),
            None => Some(0),
        }));
    }
    Ok(Results {
        coverage: covered,
        ..Results::new(
            format!("results file {}", path.display()),
            file.values,
            paths,
        )
    })
}
