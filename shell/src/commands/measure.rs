//! Measuring commands: `count FUNC...` (calls per function, counted inline by the runtime
//! library `gsh-rt` in the process) and `report` (the counts, read from the process's memory
//! while it runs, or as it left them when it exited). The engine side is
//! `engine::instrument::measure`.

use anyhow::{anyhow, bail, Result};
use engine::instrument::measure::{self, CountValue};
use engine::instrument::Live;
use engine::process::Process;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};

pub const COUNT: Spec = Spec {
    name: "count",
    aliases: &[],
    usage: "FUNC...",
    complete: Complete::Function,
    summary: "count calls to functions in the live process",
    help: "Counts every call to each FUNC (a name or a glob such as 'work_*'; `lib!FUNC` for a \
library's) at its entry, per thread and exactly, with a counter inlined in the trampoline: a \
thread-local load, a test and an increment. The runtime library libgsh_rt.so is loaded into the \
process the first time (found next to the gsh executable, or at $GSH_RT). Each FUNC gets an \
instrumentation id that `delete` removes; `report` shows the counts. Asked for before `start` or \
`run`, the counting begins when the process reaches main.",
    examples: &[
        ("count work_item", "calls to work_item"),
        (
            "count 'parse_*' lookup",
            "two ids: the parse functions, and lookup",
        ),
    ],
    run: count,
};

pub const REPORT: Spec = Spec {
    name: "report",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "show the counts of `count` so far",
    help: "Shows, for every counted function, the calls so far summed over all threads. The \
counts are read from the process's memory without stopping it, so `report` may be repeated \
while the process runs after `continue &`. Once the process has exited, the counts are those it \
had when it exited.",
    examples: &[(
        "report",
        "every counted function's calls so far (`gsh --json` for JSON)",
    )],
    run: report,
};

fn count(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let globs = args.positionals(1, usize::MAX)?;
    ctx.session.main()?;
    let mut t = Table::new(vec!["Instrumentation", "Functions", "Inserted"]);
    for glob in globs {
        let r = measure::add_count(&mut ctx.plan, &mut ctx.session, &glob)?;
        let (id, funcs) = (r.id, r.funcs.len());
        if funcs == 0 {
            let _ = ctx.plan.delete(id);
            bail!("no function matches `{glob}`");
        }
        let mut inserted = Cell::Empty;
        if let Some(target) = ctx.target.as_mut().filter(|t| t.gone.is_none()) {
            let (session, plan) = (&ctx.session, &ctx.plan);
            let result = target.with(|p, live| {
                let mut n = live.insert(p, session, plan, id)?.len();
                n += Live::paused(p, |p| live.start_measuring(p))?.len();
                Ok(n)
            });
            match result {
                Ok(n) => inserted = Cell::Num(n as u64),
                Err(e) => {
                    // Nothing half-done: the request goes, as if never made.
                    let _ = target.with(|p, live| Ok(live.remove(p, id)?));
                    let _ = ctx.plan.delete(id);
                    return Err(e.context(format!("count {glob}: not inserted")));
                }
            }
        }
        t.rows.push(vec![
            Cell::Num(u64::from(id)),
            Cell::Num(funcs as u64),
            inserted,
        ]);
    }
    Ok(Output::Table(t))
}

/// Loads the runtime and inserts the waiting counts, if there are any; for `start` (at main)
/// and `attach`. Returns notes for the user.
pub fn start_measuring(p: &mut Process, live: &mut Live) -> Result<Vec<String>> {
    let reports = live.start_measuring(p)?;
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "counting: {} point(s) inserted, runtime {}",
        reports.len(),
        live.measure
            .runtime
            .as_ref()
            .map_or_else(String::new, |r| r.path.display().to_string())
    )])
}

fn report(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let t = ctx.target.as_ref().ok_or_else(|| {
        anyhow!("there is no process to read counts from; `count FUNC`, then `run`")
    })?;
    let pid = t.pid();
    // The tracer thread outlives the process: the live layer is there either way. Reading
    // goes through process_vm_readv, so a running process keeps running.
    let (alive, values) = t
        .tracer
        .with(|p, live| -> Result<(bool, Vec<CountValue>)> {
            if p.state().is_alive() {
                return Ok((true, live.measure.values(&p.reader())?));
            }
            match &live.measure.last {
                Some(last) => Ok((false, last.clone())),
                None if live.measure.counters.is_empty() => Ok((false, Vec::new())),
                None => bail!("process {pid} ended before its counts could be read (killed?)"),
            }
        })??;
    if values.is_empty() {
        bail!("nothing is counted in process {pid}; `count FUNC` first");
    }
    let mut table = Table::new(vec!["Instrumentation", "Function", "Calls"]);
    table.title = Some(if alive {
        format!("process {pid}, counts now")
    } else {
        format!("process {pid} has exited: its final counts")
    });
    for v in values {
        table.rows.push(vec![
            Cell::Num(u64::from(v.id)),
            Cell::text(v.function),
            Cell::Num(v.calls),
        ]);
    }
    Ok(Output::Table(table))
}
