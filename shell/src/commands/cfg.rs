//! `cfg FUNC [--dot FILE]`: a function's basic blocks and edges, as tables or as a Graphviz
//! DOT file.

use std::fmt::Write as _;

use anyhow::{Context as _, Result};
use engine::cfg::{Block, Cfg, EdgeKind, Exit};
use engine::ModuleId;

use super::analysed::{analysis, qualified, resolve_one, target_name};
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record, Table};

pub const CFG: Spec = Spec {
    name: "cfg",
    aliases: &[],
    usage: "FUNC [--dot FILE]",
    complete: Complete::Function,
    summary: "show a function's control-flow graph",
    help: "Shows the control-flow graph of FUNC: a summary, then its basic blocks (start, end, \
instruction count, and how each ends: branch, jump, fallthrough, call, jump-table, or one of the \
ways out of the function: return, tail-call, noreturn-call, indirect (a jump through a pointer \
with the stack as at entry), trap, invalid; or unresolved, an indirect jump whose targets are unknown, \
which is no way out and gets no exit point), then \
its edges (from block, to block, kind: taken, fallthrough, call-ft for the return from a call, \
jump-table, and catch from a call that may throw to its exception landing pad). With --dot FILE the graph is also written to FILE in Graphviz DOT: blocks are \
labelled with their address range and exit, taken edges are solid, fallthrough edges dashed, \
call fallthroughs dotted, jump-table edges bold and catch edges red; render it with `dot -Tsvg FILE > cfg.svg`. \
FUNC may be a name, MODULE!NAME or 0xADDR, and must name one function.",
    examples: &[
        ("cfg main", ""),
        ("cfg main --dot main.dot", "also write main's graph for graphviz"),
    ],
    run: cfg,
};

fn cfg(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let dot = args.option("--dot")?;
    let spec = args.positionals(1, 1)?.remove(0);
    let r = resolve_one(ctx, &spec, "cfg")?;
    let a = analysis(ctx, r.module).function(r.func);
    let cfg = &a.cfg;
    let name = qualified(ctx, r);

    if let Some(path) = &dot {
        std::fs::write(path, to_dot(ctx, r.module, &name, cfg))
            .with_context(|| format!("cannot write {path}"))?;
    }

    let f = ctx.session.func(r);
    let mut fields = vec![
        ("Function", Cell::text(&name)),
        ("Entry", Cell::Addr(f.addr.0)),
        ("Blocks", Cell::Num(cfg.blocks.len() as u64)),
        ("Edges", Cell::Num(cfg.edges.len() as u64)),
        ("Instructions", Cell::Num(cfg.instructions())),
        (
            "Jump tables",
            Cell::List(
                cfg.jump_tables
                    .iter()
                    .map(|t| {
                        format!(
                            "{} via {} ({} targets{})",
                            t.jump,
                            t.table,
                            t.targets.len(),
                            if t.bounded { "" } else { ", unbounded" }
                        )
                    })
                    .collect(),
            ),
        ),
        (
            "Unresolved jumps",
            Cell::List(cfg.unresolved.iter().map(|a| a.to_string()).collect()),
        ),
    ];
    if let Some(path) = dot {
        fields.push(("Dot file", Cell::text(path)));
    }
    let summary = Record {
        title: None,
        fields,
        table: None,
    };

    let mut blocks = Table::new(vec![
        "Block",
        "Start",
        "End",
        "Instructions",
        "Exit",
        "Target",
    ]);
    blocks.title = Some(format!("{} blocks", cfg.blocks.len()));
    for b in &cfg.blocks {
        let (exit, target) = ending(ctx, r.module, cfg, b);
        blocks.rows.push(vec![
            Cell::Num(u64::from(b.id.0)),
            Cell::Addr(b.start.0),
            Cell::Addr(b.end.0),
            Cell::Num(u64::from(b.instructions)),
            Cell::text(exit),
            target.map_or(Cell::Empty, Cell::Symbol),
        ]);
    }
    let mut edges = Table::new(vec!["From", "To", "Kind"]);
    edges.title = Some(format!("{} edges", cfg.edges.len()));
    for e in &cfg.edges {
        edges.rows.push(vec![
            Cell::Addr(cfg.block(e.from).start.0),
            Cell::Addr(cfg.block(e.to).start.0),
            Cell::text(e.kind.as_str()),
        ]);
    }
    Ok(Output::Sections(vec![
        ("function", Output::Record(summary)),
        ("blocks", Output::Table(blocks)),
        ("edges", Output::Table(edges)),
    ]))
}

/// How block `b` ends, as one word, and the function it reaches when it calls or leaves for
/// one.
fn ending(ctx: &Context, m: ModuleId, cfg: &Cfg, b: &Block) -> (&'static str, Option<String>) {
    let name = |t| Some(target_name(ctx, m, t));
    match &b.exit {
        Some(Exit::Return) => return ("return", None),
        Some(Exit::TailCall { target }) => return ("tail-call", name(*target)),
        Some(Exit::Indirect) => return ("indirect", None),
        Some(Exit::Unresolved) => return ("unresolved", None),
        Some(Exit::NoReturnCall { target }) => return ("noreturn-call", name(*target)),
        Some(Exit::Trap) => return ("trap", None),
        Some(Exit::Invalid) => return ("invalid", None),
        None => {}
    }
    if let Some(call) = &b.call {
        return (
            "call",
            Some(match call.target {
                Some(t) => target_name(ctx, m, t),
                None => "indirect".to_owned(),
            }),
        );
    }
    let kinds: Vec<EdgeKind> = cfg.successors(b.id).map(|e| e.kind).collect();
    let word = if kinds.contains(&EdgeKind::JumpTable) {
        "jump-table"
    } else if kinds.contains(&EdgeKind::Taken) && kinds.contains(&EdgeKind::FallThrough) {
        "branch"
    } else if kinds.contains(&EdgeKind::Taken) {
        "jump"
    } else {
        "fallthrough"
    };
    (word, None)
}

/// The graph in Graphviz DOT: one box per block, labelled with its address range and how it
/// ends; edge style by kind.
fn to_dot(ctx: &Context, m: ModuleId, name: &str, cfg: &Cfg) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", escape(name));
    let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
    let entry = cfg.entry_block();
    for b in &cfg.blocks {
        let (exit, target) = ending(ctx, m, cfg, b);
        let mut label = format!("{}..{}\\n{} insns, {exit}", b.start, b.end, b.instructions);
        if let Some(t) = target {
            let _ = write!(label, " {}", escape(&t));
        }
        let mut attrs = format!("label=\"{label}\"");
        if Some(b.id) == entry {
            attrs.push_str(", penwidth=2");
        }
        if b.exit.is_some() {
            attrs.push_str(", style=rounded");
        }
        let _ = writeln!(out, "  b{} [{attrs}];", b.id.0);
    }
    for e in &cfg.edges {
        let style = match e.kind {
            EdgeKind::Taken => "solid",
            EdgeKind::FallThrough => "dashed",
            EdgeKind::CallFallThrough => "dotted",
            EdgeKind::JumpTable => "bold",
            EdgeKind::Catch => "dashed, color=red",
        };
        let _ = writeln!(
            out,
            "  b{} -> b{} [style={style}, label=\"{}\"];",
            e.from.0,
            e.to.0,
            e.kind.as_str()
        );
    }
    out.push_str("}\n");
    out
}

/// `s` inside a DOT double-quoted string.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
