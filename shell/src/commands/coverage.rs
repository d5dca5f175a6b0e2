//! `coverage FUNC... [--once]`: block coverage, one counter per basic block of each function
//! (the engine side is `engine::instrument::coverage`), and what `report` shows of it: per
//! function covered/total blocks and lines, and `report --lcov FILE`.

use anyhow::{bail, Context as _, Result};
use engine::instrument::coverage::{self, FunctionCoverage};

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};
use crate::target::TargetSlot;

pub const COVERAGE: Spec = Spec {
    name: "coverage",
    aliases: &[],
    usage: "FUNC... [--once]",
    complete: Complete::Function,
    summary: "block coverage: count every basic block's executions",
    help: "Puts a probe at the entry of every basic block of each FUNC (a name or a glob; '*' \
for the whole program), each incrementing a counter of its own: one `inc` of memory, inline in \
the trampoline, with no call and nothing saved but the flags where they are live. The counters \
are shared by all threads (two threads hitting one block at the same instant may lose an \
increment, never a block's coverage). Works in a live process (`run`, `attach`) and in a file \
`save` writes: run the saved program, then `report RESULTS` reads what it wrote at exit. In a \
process that runs (`continue &` first: `attach` leaves it stopped), the probes go in while it \
runs, and it is stopped only in short pauses to write the jumps into them, a few hundred at a \
time; so does `delete`. \
`report` shows, per function, the blocks and (with DWARF) the source lines that ran, and how \
many blocks got no probe (\"unprobed\": doubtful code, or a block only a trap could reach in \
a live process); `report --lcov FILE` writes an lcov tracefile for genhtml. `--once` (live only) takes each \
block's probe out once its block has run, whenever `report` or `watch` reads the counters (all \
threads stopped while the bytes change, in short pauses), so code already seen costs nothing afterwards; its counts are \
then 0 or at least 1. A thread still inside an old trampoline (a relocated function it has not \
left) runs its probes until it leaves.",
    examples: &[
        ("coverage '*'", "every block of the program"),
        (
            "coverage parse_expr lookup",
            "two ids: the blocks of parse_expr, and of lookup",
        ),
        (
            "coverage '*' --once",
            "which code runs; each probe goes once `report` has seen its block run",
        ),
    ],
    run: coverage_cmd,
};

fn coverage_cmd(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let once = args.flag("--once");
    let globs = args.positionals(1, usize::MAX)?;
    ctx.session.main()?;
    let live = ctx.target.is_live();
    let mut t = Table::new(vec!["Instrumentation", "Function", "Blocks", "Points"]);
    for glob in globs {
        let r = coverage::add(&mut ctx.plan, &mut ctx.session, &glob, once)?;
        let (id, funcs) = (r.id, r.funcs.clone());
        if funcs.is_empty() {
            let _ = ctx.plan.delete(id);
            bail!("no function matches `{glob}`");
        }
        let blocks: usize = funcs
            .iter()
            .map(|f| {
                ctx.session
                    .module(f.module)
                    .analysis()
                    .function(f.func)
                    .cfg
                    .blocks
                    .len()
            })
            .sum();
        let mut inserted = Cell::Empty;
        if let Some(target) = ctx.target.live() {
            let session = &ctx.session;
            let n = ctx
                .plan
                .place(id, |plan| {
                    // `insert` takes out what went in when it fails part-way.
                    anyhow::Ok(target.inferior.insert(session, plan, id)?.len())
                })
                .map_err(|e| e.context(format!("coverage {glob}: not inserted")))?;
            inserted = Cell::Num(n as u64);
        }
        let name = match funcs.as_slice() {
            [f] => ctx.session.func(*f).display_name().to_owned(),
            many => format!("{glob} ({} functions)", many.len()),
        };
        t.rows.push(vec![
            Cell::Num(u64::from(id)),
            Cell::text(name),
            Cell::Num(blocks as u64),
            inserted,
        ]);
    }
    if !live {
        t.note = Some(
            "inserted when the process starts (`start` or `run`), or written by `save`; \
             `report` shows what ran"
                .into(),
        );
    }
    Ok(Output::Table(t))
}

/// `12/20 (60.0%)`.
fn ratio(part: u32, whole: u32) -> String {
    if whole == 0 {
        return "0/0".to_owned();
    }
    format!(
        "{part}/{whole} ({:.1}%)",
        100.0 * f64::from(part) / f64::from(whole)
    )
}

/// `report`'s coverage table: per function, blocks and lines covered.
pub fn table(functions: &[FunctionCoverage]) -> Table {
    let mut t = Table::new(vec![
        "Instrumentation",
        "Function",
        "Blocks",
        "Lines",
        "Unprobed",
        "Entries",
    ]);
    for f in functions {
        t.rows.push(vec![
            Cell::Num(u64::from(f.id)),
            Cell::text(&f.function),
            Cell::text(ratio(f.covered, f.blocks)),
            match f.line_totals() {
                Some((c, n)) => Cell::text(ratio(c, n)),
                None => Cell::Empty,
            },
            Cell::Num(u64::from(f.unprobed)),
            Cell::Num(f.entries),
        ]);
    }
    let (covered, blocks, unprobed) = functions.iter().fold((0, 0, 0), |(c, b, u), f| {
        (c + f.covered, b + f.blocks, u + f.unprobed)
    });
    let mut note = format!(
        "{} function(s): {} blocks covered",
        functions.len(),
        ratio(covered, blocks)
    );
    if unprobed > 0 {
        note.push_str(&format!(
            ", {unprobed} unprobed (no probe could be placed; `report --json` lists them)"
        ));
    }
    t.note = Some(note);
    t
}

/// Writes `functions` as an lcov tracefile to `out`; returns a note for the user.
pub fn write_lcov(functions: &[FunctionCoverage], out: &str) -> Result<String> {
    let text = coverage::lcov("gsh", functions);
    std::fs::write(out, &text).with_context(|| format!("cannot write {out}"))?;
    let files = text.matches("end_of_record").count();
    Ok(format!(
        "lcov tracefile of {files} source file(s) written to {out}"
    ))
}
