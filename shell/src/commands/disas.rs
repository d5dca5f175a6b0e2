//! `disas FUNC|ADDR [N]`: disassembly with branch and data targets named.

use anyhow::{bail, Result};
use engine::disasm::disassemble;
use engine::session::is_glob;
use engine::{LinkAddr, ModuleId};

use super::args::parse_count;
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};

/// Most instructions shown when no count is given, so `disas` of a huge function stays usable.
const DEFAULT_CAP: usize = 1000;
/// Instructions shown from an address outside every known function, when no count is given.
const LOOSE_COUNT: usize = 32;

pub const DISAS: Spec = Spec {
    name: "disas",
    aliases: &["disassemble"],
    usage: "FUNC|ADDR [N]",
    complete: Complete::Function,
    summary: "disassemble a function, or N instructions from an address",
    help: "Disassembles FUNC (a name, MODULE!NAME, or 0xADDR) in Intel syntax: address, bytes, \
instruction, and the function or variable a branch, call or RIP-relative operand reaches. A \
function name shows the whole function (at most 1000 instructions unless N is given); an \
address shows from that address to the end of its function, or 32 instructions when no known \
function contains it. N limits the count.",
    examples: &[
        ("disas main", ""),
        (
            "disas libc.so.6!malloc 10",
            "the first ten instructions of malloc",
        ),
        ("disas 0x401136 5", ""),
    ],
    run: disas,
};

/// Where to start, where to stop, and what to call it.
struct Range {
    module: ModuleId,
    start: LinkAddr,
    end: Option<LinkAddr>,
    title: String,
}

fn disas(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let mut words = args.positionals(1, 2)?;
    let count = match words.get(1) {
        Some(n) => Some(parse_count("the instruction count", n)?),
        None => None,
    };
    let spec = words.swap_remove(0);
    let range = resolve(ctx, &spec)?;
    let module = ctx.session.module(range.module);
    let table = ctx.functions(range.module);
    let max = count.unwrap_or(if range.end.is_some() {
        DEFAULT_CAP
    } else {
        LOOSE_COUNT
    });
    // Ask for at most 15 bytes (the longest x86 instruction) per instruction wanted.
    let want = match range.end {
        Some(end) => end.0.saturating_sub(range.start.0),
        None => (max as u64).saturating_mul(15),
    }
    .min((max as u64).saturating_mul(15));
    let Some(bytes) = module.binary.bytes_at(range.start, want) else {
        bail!(
            "{} in {} has no bytes in the file (not in a loaded segment, or .bss)",
            range.start,
            module.name
        );
    };
    let name_of = |a: LinkAddr| {
        module.describe(a).or_else(|| {
            table
                .variables()
                .iter()
                .find(|v| !v.tls && a >= v.addr && a.0 < v.addr.0.saturating_add(v.size.max(1)))
                .map(|v| match a.0 - v.addr.0 {
                    0 => v.display_name().to_owned(),
                    off => format!("{}+{off:#x}", v.display_name()),
                })
                .or_else(|| table.got_slot(a).map(|name| format!("{name}@got")))
        })
    };
    let lines = disassemble(bytes, range.start, max, &name_of);
    let mut t = Table::new(vec!["Address", "Bytes", "Instruction", "Target"]);
    t.title = Some(range.title);
    let decoded: u64 = lines.iter().map(|l| l.len as u64).sum();
    for l in lines {
        t.rows.push(vec![
            Cell::Addr(l.addr.0),
            Cell::text(l.bytes),
            Cell::text(l.text),
            l.target.map_or(Cell::Empty, Cell::Symbol),
        ]);
    }
    if count.is_none() && range.end.is_some_and(|e| range.start.0 + decoded < e.0) {
        t.note = Some(format!(
            "(stopped after {max} instructions; `disas {spec} N` shows N)"
        ));
    }
    Ok(Output::Table(t))
}

/// Finds what `spec` names: a function, or an address inside or outside a function.
fn resolve(ctx: &mut Context, spec: &str) -> Result<Range> {
    let (module_name, bare) = match spec.split_once('!') {
        Some((m, n)) => (Some(m), n),
        None => (None, spec),
    };
    let modules = ctx.modules_for(module_name)?;
    for &m in &modules {
        ctx.functions(m);
    }
    if let Some(addr) = parse_addr(bare) {
        for &m in &modules {
            let module = ctx.session.module(m);
            if let Some(f) = ctx.functions(m).containing(addr) {
                return Ok(Range {
                    module: m,
                    start: addr,
                    end: Some(f.end()),
                    title: format!(
                        "{} in {}",
                        module.describe(addr).unwrap_or_default(),
                        module.name
                    ),
                });
            }
            if module.binary.section_at(addr).is_some_and(|s| s.is_exec()) {
                return Ok(Range {
                    module: m,
                    start: addr,
                    end: None,
                    title: format!("{addr} in {} (no known function)", module.name),
                });
            }
        }
        bail!("{addr} is not in the code of any open module");
    }
    let found = ctx.session.resolve_functions(spec)?;
    if is_glob(bare) && found.len() > 1 {
        let names: Vec<&str> = found
            .iter()
            .take(5)
            .map(|f| ctx.session.func(*f).display_name())
            .collect();
        bail!(
            "`{spec}` matches {} functions ({}{}); disassemble one at a time",
            found.len(),
            names.join(", "),
            if found.len() > 5 { ", ..." } else { "" }
        );
    }
    let Some(&r) = found.first() else {
        bail!("no function matches `{spec}`");
    };
    let f = ctx.session.func(r);
    let module = ctx.session.module(r.module);
    let mut title = format!(
        "{} in {} ({}..{}, {} bytes)",
        f.display_name(),
        module.name,
        f.addr,
        f.end(),
        f.size
    );
    if found.len() > 1 {
        title.push_str(&format!(
            "; {} more functions share this name",
            found.len() - 1
        ));
    }
    Ok(Range {
        module: r.module,
        start: f.addr,
        end: Some(f.end()),
        title,
    })
}

fn parse_addr(s: &str) -> Option<LinkAddr> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok().map(LinkAddr)
}
