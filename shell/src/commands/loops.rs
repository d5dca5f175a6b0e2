//! `loops FUNC`: the loop tree of one or more functions: each loop's name (`loop_1.2`), header,
//! nesting depth, size, source lines, back edges, and the calls made inside it.

use anyhow::Result;
use engine::analysis::FunctionAnalysis;
use engine::cfg::loops::Loop;
use engine::{FuncRef, LinkAddr};

use super::analysed::{analysis, qualified, resolve_many, target_name};
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};

pub const LOOPS: Spec = Spec {
    name: "loops",
    aliases: &[],
    usage: "FUNC",
    complete: Complete::Function,
    summary: "show the loop tree of a function",
    help: "Shows the natural loops of FUNC, outermost first with each loop followed by the loops \
nested in it. Loops are named as Dyninst names them: loop_1, loop_2 for the outermost loops in \
address order of their headers, loop_1.1 for the first loop nested in loop_1. Each row gives the \
loop's header block, its nesting depth (1 for outermost), how many basic blocks it has (nested \
loops' included), the source lines its blocks start on (with DWARF), its back edges (latch block \
-> header), and the functions called inside it (<indirect> for a call through a pointer). A \
cycle that can be entered at more than one block is irreducible: it forms no loop and is \
reported below the table. FUNC may be a name, MODULE!NAME, 0xADDR, or a glob, which shows the \
loops of every match.",
    examples: &[
        ("loops main", ""),
        (
            "loops 'parse_*'",
            "the loops of every function whose name starts with parse_",
        ),
        ("loops 0x401136", "the function containing that address"),
    ],
    run: loops,
};

fn loops(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let spec = args.positionals(1, 1)?.remove(0);
    let funcs = resolve_many(ctx, &spec)?;
    let mut t = Table::new(vec![
        "Function",
        "Loop",
        "Header",
        "Depth",
        "Blocks",
        "Lines",
        "Back edges",
        "Calls",
    ]);
    let mut irreducible = Vec::new();
    let mut with_loops = 0usize;
    for &r in &funcs {
        let a = analysis(ctx, r.module).function(r.func);
        if !a.loops.loops.is_empty() {
            with_loops += 1;
        }
        let name = qualified(ctx, r);
        for l in &a.loops.loops {
            t.rows.push(loop_row(ctx, r, a, l, &name));
        }
        let module = ctx.session.module(r.module);
        if let Some(cycles) = engine::instrument::loop_measure::irreducible(module, r.func) {
            irreducible.push(format!("{name} ({cycles})"));
        }
    }
    let n = t.rows.len();
    t.title = Some(if funcs.len() == 1 {
        format!("{n} loop{} in {}", plural(n), qualified(ctx, funcs[0]))
    } else {
        format!(
            "{n} loop{} in {with_loops} of {} functions matching `{spec}`",
            plural(n),
            funcs.len()
        )
    });
    if !irreducible.is_empty() {
        t.note = Some(format!(
            "irreducible cycles (retreating edges to a block that does not dominate their \
             source; no loop is made of them): {}",
            irreducible.join("; ")
        ));
    }
    Ok(Output::Table(t))
}

fn loop_row(ctx: &Context, r: FuncRef, a: &FunctionAnalysis, l: &Loop, name: &str) -> Vec<Cell> {
    let cfg = &a.cfg;
    let header = cfg.block(l.header).start;
    let back_edges = l
        .back_edges
        .iter()
        .map(|(latch, h)| format!("{}->{}", cfg.block(*latch).start, cfg.block(*h).start))
        .collect();
    let mut calls: Vec<String> = Vec::new();
    for b in &l.blocks {
        if let Some(call) = &cfg.block(*b).call {
            let callee = match call.target {
                Some(t) => target_name(ctx, r.module, t),
                None => "<indirect>".to_owned(),
            };
            if !calls.contains(&callee) {
                calls.push(callee);
            }
        }
    }
    let starts: Vec<LinkAddr> = l.blocks.iter().map(|b| cfg.block(*b).start).collect();
    vec![
        Cell::text(name),
        Cell::text(&l.name),
        Cell::Addr(header.0),
        Cell::Num(u64::from(l.depth)),
        Cell::Num(l.blocks.len() as u64),
        Cell::opt(source_lines(ctx, r, header, &starts)),
        Cell::List(back_edges),
        Cell::List(calls),
    ]
}

/// `file.c:12-19`: the lines the loop's blocks start on, in the header's file; `None`
/// without line information.
fn source_lines(
    ctx: &Context,
    r: FuncRef,
    header: LinkAddr,
    starts: &[LinkAddr],
) -> Option<String> {
    let debug = ctx.session.module(r.module).debug_info()?;
    let locs: Vec<_> = starts.iter().filter_map(|a| debug.location(*a)).collect();
    let file = debug
        .location(header)
        .map(|l| l.file)
        .or_else(|| locs.first().map(|l| l.file.clone()))?;
    // Line 0 marks compiler-made code with no source line.
    let lines = locs
        .iter()
        .filter(|l| l.file == file && l.line != 0)
        .map(|l| l.line);
    let (lo, hi) = lines.fold(None, |acc: Option<(u32, u32)>, line| match acc {
        None => Some((line, line)),
        Some((lo, hi)) => Some((lo.min(line), hi.max(line))),
    })?;
    Some(if lo == hi {
        format!("{file}:{lo}")
    } else {
        format!("{file}:{lo}-{hi}")
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
