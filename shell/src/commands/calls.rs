//! `callers FUNC` and `callees FUNC`: the call graph around a function, from the whole-module
//! analysis. Calls through the PLT name the stub (`puts@plt`); tail calls count as calls.

use std::collections::BTreeMap;

use anyhow::Result;
use engine::cfg::Exit;
use engine::{FuncRef, LinkAddr};

use super::analysed::{analysis, qualified, resolve_many, target_name};
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};

pub const CALLERS: Spec = Spec {
    name: "callers",
    aliases: &[],
    usage: "FUNC",
    complete: Complete::Function,
    summary: "list the functions that call a function",
    help: "Lists the functions of FUNC's module that call it directly or jump to it as a tail \
call: the caller, its address, the addresses of the call sites, and the kind of each (call, \
tail-call). Calls from other modules arrive through their PLT stubs: ask for `callers \
puts@plt` in the program rather than `callers libc.so.6!puts`. Calls through function pointers \
cannot be attributed and are not listed. FUNC may be a name, MODULE!NAME, 0xADDR, or a glob.",
    examples: &[
        (
            "callers malloc@plt",
            "every function of the program calling malloc",
        ),
        ("callers 'parse_*'", ""),
    ],
    run: callers,
};

pub const CALLEES: Spec = Spec {
    name: "callees",
    aliases: &[],
    usage: "FUNC",
    complete: Complete::Function,
    summary: "list the functions a function calls",
    help: "Lists what FUNC calls: each callee (a PLT stub is shown as itself, `puts@plt`), its \
address, how many call sites reach it, and the kind (call, tail-call, or both). Calls through a \
pointer are counted in one `<indirect>` row, as are indirect jumps that leave the function. \
FUNC may be a name, MODULE!NAME, 0xADDR, or a glob.",
    examples: &[("callees main", ""), ("callees libc.so.6!qsort", "")],
    run: callees,
};

/// Call sites of one caller→callee pair, by kind.
#[derive(Default)]
struct Sites {
    calls: Vec<LinkAddr>,
    tail: Vec<LinkAddr>,
}

impl Sites {
    fn kind(&self) -> &'static str {
        match (self.calls.is_empty(), self.tail.is_empty()) {
            (false, true) => "call",
            (true, false) => "tail-call",
            _ => "call, tail-call",
        }
    }

    fn addrs(&self) -> Vec<String> {
        let mut all: Vec<LinkAddr> = self.calls.iter().chain(&self.tail).copied().collect();
        all.sort_unstable();
        all.iter().map(|a| a.to_string()).collect()
    }
}

/// Direct call sites of `r`, by target, and its indirect calls and indirect exits.
fn call_sites(ctx: &Context, r: FuncRef) -> (BTreeMap<LinkAddr, Sites>, u64, u64) {
    let a = analysis(ctx, r.module).function(r.func);
    let mut by_target: BTreeMap<LinkAddr, Sites> = BTreeMap::new();
    let mut indirect_calls = 0;
    let mut indirect_jumps = 0;
    for b in &a.cfg.blocks {
        if let Some(call) = &b.call {
            match call.target {
                Some(t) => by_target.entry(t).or_default().calls.push(call.addr),
                None => indirect_calls += 1,
            }
        }
        match b.exit {
            Some(Exit::TailCall { target }) => {
                by_target.entry(target).or_default().tail.push(b.last)
            }
            Some(Exit::Indirect) => indirect_jumps += 1,
            _ => {}
        }
    }
    (by_target, indirect_calls, indirect_jumps)
}

fn callees(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let spec = args.positionals(1, 1)?.remove(0);
    let funcs = resolve_many(ctx, &spec)?;
    let mut t = Table::new(vec!["Function", "Callee", "Address", "Sites", "Kind"]);
    let mut indirect_total = 0;
    for &r in &funcs {
        let name = qualified(ctx, r);
        let (by_target, indirect_calls, indirect_jumps) = call_sites(ctx, r);
        for (target, sites) in &by_target {
            t.rows.push(vec![
                Cell::text(&name),
                Cell::text(target_name(ctx, r.module, *target)),
                Cell::Addr(target.0),
                Cell::Num((sites.calls.len() + sites.tail.len()) as u64),
                Cell::text(sites.kind()),
            ]);
        }
        for (n, kind) in [
            (indirect_calls, "indirect-call"),
            (indirect_jumps, "indirect-jump"),
        ] {
            if n > 0 {
                t.rows.push(vec![
                    Cell::text(&name),
                    Cell::text("<indirect>"),
                    Cell::Empty,
                    Cell::Num(n),
                    Cell::text(kind),
                ]);
            }
        }
        indirect_total += indirect_calls;
    }
    let direct = t.rows.iter().filter(|r| r[2] != Cell::Empty).count();
    t.title = Some(format!(
        "{direct} callee{} of {}, {indirect_total} indirect call site{}",
        if direct == 1 { "" } else { "s" },
        describe(ctx, &spec, &funcs),
        if indirect_total == 1 { "" } else { "s" }
    ));
    Ok(Output::Table(t))
}

fn callers(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let spec = args.positionals(1, 1)?.remove(0);
    let funcs = resolve_many(ctx, &spec)?;
    let mut t = Table::new(vec!["Function", "Caller", "Address", "Sites", "Kind"]);
    for &r in &funcs {
        let name = qualified(ctx, r);
        let callee = ctx.session.func(r).addr;
        let callers: Vec<FuncRef> = analysis(ctx, r.module)
            .callers(r.func)
            .iter()
            .map(|&func| FuncRef {
                module: r.module,
                func,
            })
            .collect();
        for c in callers {
            let (mut by_target, _, _) = call_sites(ctx, c);
            let sites = by_target.remove(&callee).unwrap_or_default();
            t.rows.push(vec![
                Cell::text(&name),
                Cell::text(qualified(ctx, c)),
                Cell::Addr(ctx.session.func(c).addr.0),
                Cell::List(sites.addrs()),
                Cell::text(sites.kind()),
            ]);
        }
    }
    let n = t.rows.len();
    t.title = Some(format!(
        "{n} caller{} of {}",
        if n == 1 { "" } else { "s" },
        describe(ctx, &spec, &funcs)
    ));
    Ok(Output::Table(t))
}

/// The function's name, or `N functions matching `spec`` for a glob.
fn describe(ctx: &Context, spec: &str, funcs: &[FuncRef]) -> String {
    match funcs {
        [one] => qualified(ctx, *one),
        _ => format!("{} functions matching `{spec}`", funcs.len()),
    }
}
