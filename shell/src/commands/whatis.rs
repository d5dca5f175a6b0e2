//! `whatis NAME`: everything gsh knows about a function, variable or type, with DWARF facts
//! (signature, file:line, type layout) when the module has debug info.

use anyhow::Result;
use engine::dwarf::TypeLayout;
use engine::session::is_glob;
use engine::{Error, FuncRef, ModuleId, NameSource, Variable};

use super::analysed::analysis;
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record, Table};

pub const WHATIS: Spec = Spec {
    name: "whatis",
    aliases: &[],
    usage: "NAME",
    complete: Complete::Function,
    summary: "describe a function, variable or type",
    help: "Describes NAME. For a function: its demangled and raw names, aliases, address range, \
size, module, where its name came from and which discovery sources saw it, and, with DWARF, \
its signature and source position, and its metrics from the control-flow analysis: \
instructions, basic blocks, edges, cyclomatic complexity, loops and their deepest nesting, call \
sites, callers, whether it never returns, and jump tables. For a variable: address, size, section, and its type with \
DWARF. For a type (DWARF only): the layout of a struct, union or enum with member offsets. \
When NAME is several things, the function is shown and the others are listed under `Also`. \
NAME may be MODULE!NAME or an address 0xADDR (the function containing it).",
    examples: &[
        ("whatis main", ""),
        ("whatis libc.so.6!malloc", ""),
        ("whatis struct point", "a type's layout"),
    ],
    run: whatis,
};

fn whatis(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    // `whatis struct point` and `whatis unsigned long` name one thing in several words.
    let name = args.positionals(1, 4)?.join(" ");
    ctx.session.main()?;
    let (module, bare) = match name.split_once('!') {
        Some((m, n)) => (Some(m), n.to_owned()),
        None => (None, name.clone()),
    };
    let modules = ctx.modules_for(module)?;
    let funcs = if bare.starts_with("0x") || bare.starts_with("0X") {
        ctx.session.resolve_functions(&name)?
    } else {
        // An exact name, never a glob: `operator[]` and `operator*` are names too.
        let mut found = Vec::new();
        for &m in &modules {
            found.extend(ctx.functions(m).by_name(&bare).map(|f| FuncRef {
                module: m,
                func: f.id,
            }));
        }
        found
    };
    let vars = find_variables(ctx, &modules, &bare);
    let types = find_types(ctx, &modules, &bare);

    let mut also: Vec<String> = Vec::new();
    also.extend(funcs.iter().skip(1).map(|f| {
        let func = ctx.session.func(*f);
        format!(
            "function at {} in {}",
            func.addr,
            ctx.session.module(f.module).name
        )
    }));
    let skip_vars = usize::from(funcs.is_empty());
    also.extend(
        vars.iter()
            .skip(skip_vars)
            .map(|(v, m)| format!("variable at {} in {m}", v.addr)),
    );
    let skip_types = usize::from(funcs.is_empty() && vars.is_empty());
    also.extend(
        types
            .iter()
            .skip(skip_types)
            .map(|t| format!("type {}", t.name)),
    );

    let mut record = if let Some(f) = funcs.first() {
        function_record(ctx, *f)
    } else if let Some((v, m)) = vars.first() {
        variable_record(ctx, v, m)
    } else if let Some(t) = types.first() {
        type_record(t)
    } else {
        let hint = if is_glob(&bare) {
            format!("; `whatis` takes one name, `show functions '{bare}'` lists matches")
        } else {
            ctx.session
                .nearest_function_name(&bare, &modules)
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_else(|| {
                    "; `find function REGEX` and `find variable REGEX` search".into()
                })
        };
        return Err(Error::UnknownName { name, hint }.into());
    };
    if !also.is_empty() {
        record.fields.push(("Also", Cell::List(also)));
    }
    Ok(Output::Record(record))
}

fn function_record(ctx: &Context, r: FuncRef) -> Record {
    let module = ctx.session.module(r.module);
    let f = ctx.functions(r.module).get(r.func);
    let mut fields = vec![("Function", Cell::text(f.display_name()))];
    if f.demangled.is_some() {
        fields.push(("Raw name", Cell::text(&f.name)));
    }
    fields.extend([
        ("Aliases", Cell::List(f.aliases.clone())),
        ("Address", Cell::Addr(f.addr.0)),
        ("End", Cell::Addr(f.end().0)),
        ("Size", Cell::Num(f.size)),
        ("Module", Cell::text(&module.name)),
        (
            "Binding",
            // Only a symbol has a binding; PLT stubs and made-up names do not.
            match f.name_source {
                NameSource::Symtab | NameSource::Dynsym | NameSource::DebugSymtab if f.global => {
                    Cell::text("global")
                }
                NameSource::Symtab | NameSource::Dynsym | NameSource::DebugSymtab => {
                    Cell::text("local")
                }
                _ => Cell::Empty,
            },
        ),
        ("Name source", Cell::text(f.name_source.as_str())),
        (
            "Found by",
            Cell::List(f.found.names().into_iter().map(str::to_owned).collect()),
        ),
    ]);
    match module.debug_info() {
        Some(debug) => {
            let info = debug.function(f.addr);
            fields.push(("Signature", Cell::opt(info.as_ref().map(|i| i.signature()))));
            fields.push((
                "Declared",
                Cell::opt(info.and_then(|i| i.decl).map(|d| d.to_string())),
            ));
            fields.push((
                "Source",
                Cell::opt(debug.location(f.addr).map(|l| l.to_string())),
            ));
            fields.push(("Debug info", Cell::text(display_path(debug.source()))));
        }
        None => fields.push(("Debug info", Cell::text("none"))),
    }
    fields.extend(metric_fields(ctx, r));
    Record {
        title: None,
        fields,
        table: None,
    }
}

/// The function's size and shape, from the whole-module analysis (run now if needed).
fn metric_fields(ctx: &Context, r: FuncRef) -> Vec<(&'static str, Cell)> {
    let analysis = analysis(ctx, r.module);
    let m = analysis.metrics(r.func);
    let a = analysis.function(r.func);
    let num = |n: usize| Cell::Num(n as u64);
    vec![
        ("Instructions", Cell::Num(m.instructions)),
        ("Blocks", num(m.blocks)),
        ("Edges", num(m.edges)),
        // Every block is reached from the entry, so E ≥ N − 1 and E − N + 2 ≥ 1.
        (
            "Cyclomatic complexity",
            Cell::Num(m.cyclomatic.max(0) as u64),
        ),
        ("Loops", num(m.loops)),
        ("Loop depth", Cell::Num(u64::from(m.max_loop_depth))),
        ("Call sites", num(m.call_sites)),
        ("Callers", num(m.callers)),
        (
            "Noreturn",
            Cell::text(if a.noreturn { "yes" } else { "no" }),
        ),
        ("Jump tables", num(a.cfg.jump_tables.len())),
    ]
}

/// Variables named `name` in `modules`, with their module's name.
fn find_variables(ctx: &Context, modules: &[ModuleId], name: &str) -> Vec<(Variable, String)> {
    let mut out = Vec::new();
    for &m in modules {
        for v in ctx.functions(m).variables() {
            if v.name == name || v.demangled.as_deref() == Some(name) {
                out.push((v.clone(), ctx.session.module(m).name.clone()));
            }
        }
    }
    out
}

/// Types named `name` in the DWARF of `modules`.
fn find_types(ctx: &Context, modules: &[ModuleId], name: &str) -> Vec<TypeLayout> {
    modules
        .iter()
        .filter_map(|&m| ctx.session.module(m).debug_info()?.type_layout(name))
        .collect()
}

fn variable_record(ctx: &Context, v: &Variable, module: &str) -> Record {
    let info = ctx
        .session
        .modules()
        .iter()
        .find(|m| m.name == module)
        .and_then(|m| m.debug_info())
        .and_then(|d| d.variable(&v.name));
    Record {
        title: None,
        fields: vec![
            ("Variable", Cell::text(v.display_name())),
            (
                "Type",
                Cell::opt(info.as_ref().map(|i| i.type_name.clone())),
            ),
            ("Address", Cell::Addr(v.addr.0)),
            ("Size", Cell::Num(v.size)),
            ("Section", Cell::text(&v.section)),
            ("Module", Cell::text(module)),
            ("Thread-local", Cell::text(if v.tls { "yes" } else { "no" })),
            (
                "Declared",
                Cell::opt(info.and_then(|i| i.decl).map(|d| d.to_string())),
            ),
        ],
        table: None,
    }
}

fn type_record(t: &TypeLayout) -> Record {
    let kind = serde_json::to_value(t.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut fields = vec![
        ("Type", Cell::text(&t.name)),
        ("Kind", Cell::text(kind)),
        ("Size", t.size.map_or(Cell::Empty, Cell::Num)),
        (
            "Declared",
            Cell::opt(t.decl.as_ref().map(|d| d.to_string())),
        ),
    ];
    if let Some(target) = &t.target {
        fields.push(("Names", Cell::text(target)));
    }
    let table = if !t.members.is_empty() {
        let mut table = Table::new(vec!["Offset", "Name", "Type", "Size", "Bits"]);
        for m in &t.members {
            table.rows.push(vec![
                Cell::Num(m.offset),
                Cell::opt(m.name.clone()),
                Cell::text(&m.type_name),
                m.size.map_or(Cell::Empty, Cell::Num),
                Cell::opt(m.bits.map(|(off, n)| {
                    let s = if n == 1 { "" } else { "s" };
                    format!("bit {off}, {n} bit{s}")
                })),
            ]);
        }
        Some(("members", table))
    } else if !t.enumerators.is_empty() {
        let mut table = Table::new(vec!["Name", "Value"]);
        for (n, v) in &t.enumerators {
            table
                .rows
                .push(vec![Cell::text(n), Cell::text(v.to_string())]);
        }
        Some(("enumerators", table))
    } else {
        None
    };
    Record {
        title: None,
        fields,
        table,
    }
}

/// `path` relative to the current directory when it lies below it, as users typed it.
fn display_path(path: &std::path::Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok())
        .unwrap_or(path)
        .display()
        .to_string()
}
