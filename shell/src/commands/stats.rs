//! `stats [in MODULE]`: counts over the whole-module analysis (functions, blocks, edges, loops,
//! jump tables, non-returning and overlapping functions) and how long it took.

use anyhow::Result;
use std::time::Instant;

use super::analysed::analysis;
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record};

pub const STATS: Spec = Spec {
    name: "stats",
    aliases: &[],
    usage: "[in MODULE]",
    complete: Complete::Nothing,
    summary: "analyse a whole module and count what was found",
    help: "Builds the control-flow graph of every function of the open file (or of MODULE) and \
reports: functions, basic blocks, edges, instructions, natural loops, functions with \
irreducible cycles, jump tables resolved (bounded by a guarding compare, or read until an entry \
left the function), indirect jumps left unresolved, functions that never return, functions \
whose code overlaps another's, direct call-graph edges, indirect call sites, and the time the \
analysis took. The analysis runs once per module; later commands reuse it.",
    examples: &[
        ("stats", "the open file"),
        ("stats in libc.so.6", "a library the program needs"),
    ],
    run: stats,
};

fn stats(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let module = args.keyword("in")?;
    args.positionals(0, 0)?;
    let m = match module.as_deref() {
        Some(name) => ctx.session.find_module(name)?,
        None => ctx.session.main()?.id,
    };
    let was_ready = ctx.session.module(m).analysis_ready();
    let started = Instant::now();
    let s = analysis(ctx, m).stats();
    // The engine times its own analysis; reading the table first is part of what users wait
    // for, so a fresh run reports the whole wait.
    let elapsed = if was_ready {
        s.elapsed
    } else {
        started.elapsed()
    };
    let num = |n: usize| Cell::Num(n as u64);
    let module = ctx.session.module(m);
    Ok(Output::Record(Record {
        title: None,
        fields: vec![
            ("Module", Cell::text(&module.name)),
            ("Functions", num(s.functions)),
            ("Blocks", num(s.blocks)),
            ("Edges", num(s.edges)),
            ("Instructions", Cell::Num(s.instructions)),
            ("Loops", num(s.loops)),
            ("Irreducible functions", num(s.irreducible)),
            ("Jump tables", num(s.jump_tables)),
            (
                "Jump tables bounded",
                num(s.jump_tables - s.jump_tables_unbounded),
            ),
            ("Jump tables unbounded", num(s.jump_tables_unbounded)),
            (
                "Unresolved indirect jumps",
                num(s.unresolved_indirect_jumps),
            ),
            ("Noreturn functions", num(s.noreturn_functions)),
            ("Overlapping functions", num(s.overlapping_functions)),
            ("Call edges", num(s.call_edges)),
            ("Indirect calls", num(s.indirect_calls)),
            ("Time ms", Cell::Num(elapsed.as_millis() as u64)),
        ],
        table: None,
    }))
}
