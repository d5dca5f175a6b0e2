//! Commands that list functions and variables: `show functions`, `show variables`,
//! `find function`, `find variable`.

use anyhow::{bail, Result};
use engine::analysis::Metrics;
use engine::session::Matcher;
use engine::ModuleId;

use super::analysed::analysis;
use super::args::parse_count;
use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};

pub const SHOW_FUNCTIONS: Spec = Spec {
    name: "show functions",
    aliases: &["show funcs"],
    usage: "[PATTERN] [in MODULE] [--sort KEY] [--limit N]",
    complete: Complete::Function,
    summary: "list functions, optionally those whose name matches a glob",
    help: "Lists the functions of every open module (or only MODULE): name, address, size, \
module, and where the name came from (symtab, dynsym, plt, or synthetic for a made-up \
sub_ADDR name in a stripped binary). PATTERN is a shell glob matched against the whole raw, \
demangled, or alias name; quote it so the shell passes it whole. --sort orders by name, \
address (addr, the default) or size (largest first), or, after analysing the module's control \
flow, by a metric, largest first, shown in an extra column: complexity (cyclomatic), loops, \
blocks, instructions or callers. --limit N shows only the first N.",
    examples: &[
        ("show functions", "every function of the open file"),
        (
            "show functions 'mall*' in libc.so.6",
            "libc's malloc family",
        ),
        (
            "show functions 'ns::*' --sort size --limit 10",
            "the ten largest in namespace ns",
        ),
        (
            "show functions --sort complexity --limit 20",
            "the twenty most complex functions",
        ),
    ],
    run: show_functions,
};

pub const FIND_FUNCTION: Spec = Spec {
    name: "find function",
    aliases: &["find func"],
    usage: "REGEX [in MODULE] [--sort KEY] [--limit N]",
    complete: Complete::Nothing,
    summary: "list functions whose name matches a regular expression",
    help: "Like `show functions`, but REGEX is a regular expression that may match anywhere in \
the raw, demangled or alias name.",
    examples: &[
        (
            "find function '^str.*cmp$'",
            "strcmp, strncmp, strcasecmp, ...",
        ),
        ("find function 'Klass::'", "the methods of a C++ class"),
    ],
    run: find_function,
};

pub const SHOW_VARIABLES: Spec = Spec {
    name: "show variables",
    aliases: &["show vars"],
    usage: "[PATTERN] [in MODULE]",
    complete: Complete::Nothing,
    summary: "list global and static variables (data symbols)",
    help: "Lists the data symbols of every open module (or only MODULE): name, address, size, \
section and module. PATTERN is a glob; thread-local variables show their offset in the TLS \
block. A stripped binary shows only its exported variables.",
    examples: &[("show variables", ""), ("show variables 'std*'", "")],
    run: show_variables,
};

pub const FIND_VARIABLE: Spec = Spec {
    name: "find variable",
    aliases: &["find var"],
    usage: "REGEX [in MODULE]",
    complete: Complete::Nothing,
    summary: "list variables whose name matches a regular expression",
    help: "Like `show variables`, but REGEX is a regular expression that may match anywhere in \
the name.",
    examples: &[("find variable 'environ'", "")],
    run: find_variable,
};

/// How `show functions` orders rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SortKey {
    Name,
    Addr,
    Size,
    /// A metric of the control-flow analysis, largest first.
    Metric(Metric),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Metric {
    Complexity,
    Loops,
    Blocks,
    Instructions,
    Callers,
}

impl Metric {
    /// The column the metric is shown in.
    fn column(self) -> &'static str {
        match self {
            Metric::Complexity => "Complexity",
            Metric::Loops => "Loops",
            Metric::Blocks => "Blocks",
            Metric::Instructions => "Instructions",
            Metric::Callers => "Callers",
        }
    }

    fn of(self, m: &Metrics) -> u64 {
        match self {
            Metric::Complexity => m.cyclomatic.max(0) as u64,
            Metric::Loops => m.loops as u64,
            Metric::Blocks => m.blocks as u64,
            Metric::Instructions => m.instructions,
            Metric::Callers => m.callers as u64,
        }
    }
}

fn sort_key(s: Option<String>) -> Result<SortKey> {
    Ok(match s.as_deref() {
        None | Some("addr" | "address") => SortKey::Addr,
        Some("name") => SortKey::Name,
        Some("size") => SortKey::Size,
        Some("complexity" | "cyclomatic") => SortKey::Metric(Metric::Complexity),
        Some("loops") => SortKey::Metric(Metric::Loops),
        Some("blocks") => SortKey::Metric(Metric::Blocks),
        Some("instructions" | "insns") => SortKey::Metric(Metric::Instructions),
        Some("callers") => SortKey::Metric(Metric::Callers),
        Some(other) => bail!(
            "--sort takes name, addr, size, complexity, loops, blocks, instructions or callers, \
             not `{other}`"
        ),
    })
}

fn show_functions(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let sort = sort_key(args.option("--sort")?)?;
    let limit = match args.option("--limit")? {
        Some(n) => Some(parse_count("--limit", &n)?),
        None => None,
    };
    let module = args.keyword("in")?;
    let pattern = args.positionals(0, 1)?.pop();
    let matcher = match &pattern {
        Some(p) => Matcher::glob(p)?,
        None => Matcher::All,
    };
    let modules = ctx.modules_for(module.as_deref())?;
    let what = pattern.map(|p| format!(" matching `{p}`"));
    list_functions(ctx, &modules, &matcher, what, sort, limit)
}

fn find_function(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let sort = sort_key(args.option("--sort")?)?;
    let limit = match args.option("--limit")? {
        Some(n) => Some(parse_count("--limit", &n)?),
        None => None,
    };
    let module = args.keyword("in")?;
    let regex = args.positionals(1, 1)?.remove(0);
    let matcher = Matcher::regex(&regex)?;
    let modules = ctx.modules_for(module.as_deref())?;
    let what = Some(format!(" matching /{regex}/"));
    list_functions(ctx, &modules, &matcher, what, sort, limit)
}

fn list_functions(
    ctx: &Context,
    modules: &[ModuleId],
    matcher: &Matcher,
    what: Option<String>,
    sort: SortKey,
    limit: Option<usize>,
) -> Result<Output> {
    // (function, module name, the metric sorted by).
    let mut found = Vec::new();
    for &m in modules {
        let name = &ctx.session.module(m).name;
        let analysis = match sort {
            SortKey::Metric(_) => Some(analysis(ctx, m)),
            _ => None,
        };
        for f in ctx.functions(m).functions() {
            if matcher.matches_function(f) {
                let metric = match (sort, analysis) {
                    (SortKey::Metric(k), Some(a)) => k.of(&a.metrics(f.id)),
                    _ => 0,
                };
                found.push((f, name.as_str(), metric));
            }
        }
    }
    match sort {
        SortKey::Addr => {}
        SortKey::Name => found.sort_by(|a, b| a.0.display_name().cmp(b.0.display_name())),
        SortKey::Size => found.sort_by_key(|f| std::cmp::Reverse(f.0.size)),
        SortKey::Metric(_) => found.sort_by_key(|f| std::cmp::Reverse(f.2)),
    }
    let total = found.len();
    let shown = limit.unwrap_or(total).min(total);
    let mut columns = vec!["Name", "Address", "Size", "Module", "Name source"];
    if let SortKey::Metric(k) = sort {
        columns.push(k.column());
    }
    let mut t = Table::new(columns);
    t.title = Some(format!(
        "{total} function{}{}",
        if total == 1 { "" } else { "s" },
        what.unwrap_or_default()
    ));
    for (f, module, metric) in found.into_iter().take(shown) {
        let mut row = vec![
            Cell::text(f.display_name()),
            Cell::Addr(f.addr.0),
            Cell::Num(f.size),
            Cell::text(module),
            Cell::text(f.name_source.as_str()),
        ];
        if matches!(sort, SortKey::Metric(_)) {
            row.push(Cell::Num(metric));
        }
        t.rows.push(row);
    }
    if shown < total {
        t.note = Some(format!("({} more not shown; raise --limit)", total - shown));
    }
    Ok(Output::Table(t))
}

fn show_variables(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let module = args.keyword("in")?;
    let pattern = args.positionals(0, 1)?.pop();
    let matcher = match &pattern {
        Some(p) => Matcher::glob(p)?,
        None => Matcher::All,
    };
    let modules = ctx.modules_for(module.as_deref())?;
    list_variables(
        ctx,
        &modules,
        &matcher,
        pattern.map(|p| format!(" matching `{p}`")),
    )
}

fn find_variable(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let module = args.keyword("in")?;
    let regex = args.positionals(1, 1)?.remove(0);
    let matcher = Matcher::regex(&regex)?;
    let modules = ctx.modules_for(module.as_deref())?;
    list_variables(
        ctx,
        &modules,
        &matcher,
        Some(format!(" matching /{regex}/")),
    )
}

fn list_variables(
    ctx: &Context,
    modules: &[ModuleId],
    matcher: &Matcher,
    what: Option<String>,
) -> Result<Output> {
    let mut t = Table::new(vec!["Name", "Address", "Size", "Section", "Module"]);
    for &m in modules {
        let name = &ctx.session.module(m).name;
        for v in ctx.functions(m).variables() {
            if matcher.matches_variable(v) {
                t.rows.push(vec![
                    Cell::text(v.display_name()),
                    Cell::Addr(v.addr.0),
                    Cell::Num(v.size),
                    Cell::text(&v.section),
                    Cell::text(name),
                ]);
            }
        }
    }
    let n = t.rows.len();
    t.title = Some(format!(
        "{n} variable{}{}",
        if n == 1 { "" } else { "s" },
        what.unwrap_or_default()
    ));
    Ok(Output::Table(t))
}
