//! Inserting code: `declare`, `at`, `show instrumentation`, `delete`. Requests are checked
//! when made (functions resolve, points exist, snippets type-check) and kept in the context's
//! plan until `save` writes them out.

use anyhow::{anyhow, Result};
use engine::instrument::PointSpec;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record, Table};
use crate::target::TargetSlot;

pub const DECLARE: Spec = Spec {
    name: "declare",
    aliases: &[],
    usage: "TYPE NAME [= INIT]",
    complete: Complete::Nothing,
    summary: "make a variable that lives in the instrumented program",
    help: "Declares a variable for snippets to use: an integer type, `double` or a pointer, \
with an optional constant initial value (zero otherwise). It lives in the data gsh adds to the \
program (the rewritten file's new segment, or memory mapped into a live process) and keeps its \
value across points and calls.",
    examples: &[
        ("declare long calls", "a counter, starting at 0"),
        (
            "declare double ratio = 1.0 / 3",
            "an initial value, computed now",
        ),
    ],
    run: declare,
};

pub const AT: Spec = Spec {
    name: "at",
    aliases: &[],
    usage: "POINT [if (COND)] { SNIPPET }",
    complete: Complete::Point,
    summary: "insert a snippet at a point",
    help: "Inserts SNIPPET (a subset of C: `help snippets`) at POINT, which is `FUNC entry`, \
`FUNC exit` (every return, tail call and call to a function that never returns), `FUNC call \
[CALLEE] before|after` (every call site, or those calling CALLEE, by its name as `show points` \
lists it, without `@plt`), `FUNC loop LOOP entry|exit|iter-begin|iter-end` (edges into the loop's header from outside, \
edges leaving the loop, the header, back edges and exits; LOOP as `loops` names it, `loop_1.2`, \
or by its header's address, which names loops of stripped binaries too, or `'*'` for every \
loop of the function; a loop left by a \
`longjmp` or exception from a function it calls takes no edge, so that exit is not seen), \
`FUNC block ADDR` (entry to the basic block starting at ADDR), `FUNC insn ADDR before|after` \
(an instruction; after one that ends its block is an edge), or `FUNC edge FROM TO`. A point on \
an edge runs at the edge's target when it is the target's only way in, before the source's \
last instruction when it is the source's only way out, or else in an edge trampoline holding \
the relocated conditional branch; a jump-table edge runs at its case block when nothing else \
reaches that block, and otherwise where the table's entry is read, which then reads a private \
copy of the table whose entries for that block lead to the snippets (skipped with the reason \
when nothing bounds the table's index, or its entries are a PIE's absolute addresses). Where a \
function's first block is a loop header, its `entry` and the loop's entry (the call itself) run \
once per call: the function is copied whole and the back edges in the copy skip them. FUNC may be a glob (`'parse_*'`): the snippet goes to every \
matching function that has the point. With `if (COND)` the snippet runs only when COND is true. \
Prints the instrumentation's id and how many functions it reaches; the snippet is type-checked \
at every one of them now, its calls against their callees' prototypes (DWARF, or glibc's for \
common C library functions) and printf formats against their arguments, so what cannot be right \
is refused before anything is inserted. A snippet is plain C run by whichever thread reaches \
the point: `n++` or `total += $return` on a `declare`d variable from several threads at once may \
lose updates, as in C; `count` and `time` keep exact per-thread values.",
    examples: &[
        ("at work entry { calls++; }", ""),
        (
            "at main exit { printf(\"work ran %ld times\\n\", calls); }",
            "calls the program's own printf",
        ),
        (
            "at 'parse_*' entry { printf(\"-> %s\\n\", $function); }",
            "",
        ),
        ("at compute exit if ($return < 0) { failures++; }", ""),
    ],
    run: at,
};

pub const SHOW_INSTRUMENTATION: Spec = Spec {
    name: "show instrumentation",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "list inserted snippets: id, point, functions, snippet",
    help: "Lists every `at` request still in place, in the order they were made, and the \
variables made with `declare`.",
    examples: &[("show instrumentation", "")],
    run: show_instrumentation,
};

pub const DELETE: Spec = Spec {
    name: "delete",
    aliases: &["deleteinst", "remove"],
    usage: "ID...",
    complete: Complete::Nothing,
    summary: "remove inserted snippets by id",
    help: "Removes the instrumentation with each ID (from `at` or `show instrumentation`).",
    examples: &[("delete 3", ""), ("delete 1 2", "")],
    run: delete,
};

fn declare(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let words = args.rest();
    if words.is_empty() {
        return Err(args.usage_error("missing declaration"));
    }
    ctx.session.main()?;
    let d = ctx.plan.declare(&ctx.session, &words.join(" "))?.clone();
    if let Some(t) = ctx.target.live() {
        ctx.plan
            .place_declared(|plan| anyhow::Ok(t.inferior.sync_declared(plan)?))?;
    }
    Ok(Output::Record(Record {
        title: None,
        fields: vec![
            ("Declared", Cell::text(d.name.clone())),
            ("Type", Cell::text(d.ty.to_string())),
            ("Size", Cell::Num(d.ty.size())),
        ],
        table: None,
    }))
}

fn at(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let block = args
        .block
        .take()
        .ok_or_else(|| args.usage_error("missing `{ SNIPPET }`"))?;
    let mut words = args.rest();
    let mut cond = None;
    if let Some(i) = words.iter().position(|w| w == "if") {
        let c = words
            .get(i + 1)
            .filter(|c| c.starts_with('(') && c.ends_with(')'))
            .ok_or_else(|| anyhow!("`if` takes a condition in parentheses: if ($return < 0)"))?;
        cond = Some(c[1..c.len() - 1].trim().to_owned());
        if i + 2 != words.len() {
            return Err(args.usage_error("`if (COND)` goes right before the `{ SNIPPET }`"));
        }
        words.truncate(i);
    }
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    let spec = PointSpec::parse(&refs).map_err(|e| anyhow!(e))?;
    ctx.session.main()?;
    let r = ctx
        .plan
        .add(&mut ctx.session, spec, cond, block.text.trim().to_owned())?;
    let n = r.funcs.len();
    let (id, spec) = (r.id, r.spec.to_string());
    for w in &r.warnings {
        eprintln!("gsh: warning: {w}");
    }
    let mut fields = vec![
        ("Instrumentation", Cell::Num(u64::from(id))),
        ("Point", Cell::text(spec)),
        ("Functions", Cell::Num(n as u64)),
    ];
    if let Some(t) = ctx.target.live() {
        let session = &ctx.session;
        let reports = ctx
            .plan
            .place(id, |plan| anyhow::Ok(t.inferior.insert(session, plan, id)?))
            .map_err(|e| e.context(format!("instrumentation {id} not inserted")))?;
        fields.push(("Inserted", Cell::Num(reports.len() as u64)));
    }
    Ok(Output::Record(Record {
        title: None,
        fields,
        table: None,
    }))
}

fn show_instrumentation(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let mut t = Table::new(vec![
        "Id",
        "Point",
        "Functions",
        "Condition",
        "Snippet",
        "State",
    ]);
    let ids: Vec<u32> = ctx.plan.requests.iter().map(|r| r.id).collect();
    // In a live process, what each request's code is doing there; else it waits for `save`,
    // `start` or `attach`.
    let states: Vec<String> = match ctx.target.live_ref() {
        Some(target) => target.inferior.with_live(|live| {
            ids.iter()
                .map(|id| live.status(*id).unwrap_or_else(|| "not inserted".into()))
                .collect()
        })?,
        None => vec!["planned".into(); ids.len()],
    };
    for (r, state) in ctx.plan.requests.iter().zip(states) {
        t.rows.push(vec![
            Cell::Num(u64::from(r.id)),
            Cell::text(r.spec.to_string()),
            Cell::Num(r.funcs.len() as u64),
            Cell::opt(r.action.cond().map(str::to_owned)),
            Cell::text(r.action.describe()),
            Cell::text(state),
        ]);
    }
    t.title = Some(format!(
        "{} instrumentation request{}",
        t.rows.len(),
        if t.rows.len() == 1 { "" } else { "s" }
    ));
    if !ctx.plan.declared.is_empty() {
        t.note = Some(format!(
            "declared: {}",
            ctx.plan
                .declared
                .iter()
                .map(|d| format!("{} {}", d.ty, d.name))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(Output::Table(t))
}

fn delete(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let ids = args.positionals(1, usize::MAX)?;
    let ids: Vec<u32> = ids
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|_| anyhow!("`{s}` is not an instrumentation id"))
        })
        .collect::<Result<_>>()?;
    // All or nothing: check every id before removing any.
    for id in &ids {
        if !ctx.plan.requests.iter().any(|r| r.id == *id) {
            return Err(engine::instrument::RequestError::UnknownId(*id).into());
        }
    }
    // A request leaves the list once it has left the process: one whose removal failed stays
    // inserted and listed, for `delete` to be tried again.
    let mut gone = Vec::new();
    let result = match ctx.target.live() {
        Some(t) => ids.iter().try_for_each(|id| {
            t.inferior.remove(*id)?;
            gone.push(*id);
            anyhow::Ok(())
        }),
        None => {
            gone.clone_from(&ids);
            Ok(())
        }
    };
    for id in gone {
        ctx.plan.delete(id)?;
    }
    result?;
    Ok(Output::Nothing)
}

pub const SAVE: Spec = Spec {
    name: "save",
    aliases: &[],
    usage: "OUTFILE [--results FILE]",
    complete: Complete::File,
    summary: "write the open file with all current instrumentation",
    help: "Writes OUTFILE: the open executable or library with every `at` request inserted and \
every declared variable in place. New code and data go in new segments (read-execute and \
read-write, never both); the jumps into trampolines replace original instructions. The output \
runs on its own, with no extra files or environment variables. Prints how many points were \
patched and with which tactic. A point no jump can reach gets a trap (int3) as the last \
resort, and OUTFILE then carries its own SIGTRAP handler, installed at start-up (from the entry \
point, or a library's DT_INIT). Its calls to sigaction, signal, sigprocmask and \
pthread_sigmask through its PLT then go through gsh's wrappers (listed as `Signals`): a \
SIGTRAP handler it installs is recorded and gets every SIGTRAP that is not gsh's (with gsh's \
handler's flags and mask, not its own), and SIGTRAP is kept out of the masks it sets, so \
traps keep working in a program that manages signals itself (bash). Not seen: such calls \
from libraries or raw system calls, which still replace the handler or block SIGTRAP, and \
then a trap ends the program; a trap in code that runs before the handler is installed (an \
IFUNC resolver) ends it too. The notes list every point that got a trap, and why no jump \
fitted. With nothing inserted, OUTFILE runs exactly like the original.

With `count`, `time` or `profile` requests, OUTFILE measures too: it loads gsh's runtime \
library (named by its absolute path: OUTFILE does not start if the library is gone) before the \
program starts, and when the program exits the runtime writes the results as JSON to FILE \
(`--results`; default OUTFILE.gsh.json; a relative name is taken from the current directory \
now, not when the program runs), which `report FILE` reads. Setting GSH_RT_OUTPUT when running \
OUTFILE writes them elsewhere; a forked child that exits writes FILE.PID. If OUTFILE's dynamic \
table has no room to name the runtime, `save` says so and OUTFILE measures only when run with \
LD_PRELOAD=<runtime>; without it, it runs normally and measures nothing. A statically linked \
program cannot measure.",
    examples: &[
        ("save ./app.inst", ""),
        ("save ./app.inst --results /tmp/app-counts.json", ""),
    ],
    run: save,
};

pub const SHOW_POINTS: Spec = Spec {
    name: "show points",
    aliases: &[],
    usage: "FUNC [loop LOOP [entry|exit|iter-begin|iter-end] | block ADDR | edge FROM TO | insn ADDR before|after | ...]",
    complete: Complete::Function,
    summary: "the instrumentable points of a function and how each would be patched",
    help: "Lists FUNC's points (entry, every exit, before and after every call, and the entry, \
exit, iter-begin and iter-end points of every loop, with the loop's name and the edge each sits \
on), or only those named after FUNC as `at` names them (`loop LOOP` alone: its four kinds), with \
the original instructions a jump there would displace and the tactic that makes room for it: \
`jump` (a 5-byte jump over whole instructions of one block), `jump-before` (the jump sits on \
earlier instructions of the block), `pun` (a 2-byte jump to nearby padding holding the 5-byte \
one), `evict` (a 2-byte jump into nearby instructions moved to their own trampoline to make \
room), `relocate-function` (the whole function copied to a trampoline area), or `trap` (int3, \
handled by a SIGTRAP handler `save` writes into the file; about 100 times slower); \
`skipped` when no site may take the point (its instruction runs across a function's start, \
or its bytes belong to another site), with why. No two sites share a byte: each owns what \
it overwrites, the padding it borrows and the instructions it copies. FUNC may be a glob.",
    examples: &[
        ("show points main", ""),
        ("show points 'parse_*'", ""),
        ("show points main loop loop_1", ""),
        ("show points main block 0x401136", ""),
    ],
    run: show_points,
};

fn save(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let results = args.option("--results")?;
    let out = args.positionals(1, 1)?.remove(0);
    let options = engine::instrument::save::SaveOptions {
        results: results.map(std::path::PathBuf::from),
    };
    let report = engine::instrument::save::save_with(
        &ctx.session,
        &ctx.plan,
        std::path::Path::new(&out),
        &options,
    )?;
    let tactics = report
        .tactics
        .iter()
        .map(|(t, n)| format!("{} {n}", t.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut fields = vec![
        ("Saved", Cell::text(out)),
        ("Points", Cell::Num(report.points.len() as u64)),
        (
            "Tactics",
            Cell::text(if tactics.is_empty() {
                "-".into()
            } else {
                tactics
            }),
        ),
        ("Size", Cell::Num(report.file.size_after)),
    ];
    if !report.skipped.is_empty() {
        fields.insert(2, ("Skipped", Cell::Num(report.skipped.len() as u64)));
    }
    if !report.interposed.is_empty() {
        let text = report
            .interposed
            .iter()
            .map(|(name, why)| match why {
                None => name.clone(),
                Some(why) => format!("{name} (left alone: {why})"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        fields.push(("Signals", Cell::text(text)));
    }
    if let Some(m) = &report.measuring {
        fields.push(("Measured", Cell::Num(m.slots.len() as u64)));
        if m.coverage > 0 {
            let text = format!("{} block counters", m.coverage);
            fields.push(("Coverage", Cell::text(text)));
        }
        fields.push(("Results", Cell::text(m.results.display().to_string())));
        let runtime = if m.needed {
            format!("{} (loaded by the file)", m.runtime.display())
        } else {
            format!(
                "{0} (no room to name it in the file: run it with LD_PRELOAD={0})",
                m.runtime.display()
            )
        };
        fields.push(("Runtime", Cell::text(runtime)));
    }
    Ok(Output::Record(Record {
        title: None,
        fields,
        table: skipped_table(&report),
    }))
}

/// The points `save` left alone and the points that got traps (about 100 times slower than a
/// jump, so worth knowing), when there are any.
fn skipped_table(report: &engine::instrument::SaveReport) -> Option<(&'static str, Table)> {
    let mut t = Table::new(vec!["Point", "Address", "Outcome", "Why"]);
    for (p, why) in &report.skipped {
        t.rows.push(vec![
            Cell::text(p.kind.as_str()),
            Cell::Addr(p.addr.0),
            Cell::text("skipped"),
            Cell::text(why.clone()),
        ]);
    }
    for p in &report.points {
        if p.tactic == engine::instrument::Tactic::Trap {
            t.rows.push(vec![
                Cell::text(p.point.kind.as_str()),
                Cell::Addr(p.point.addr.0),
                Cell::text("trap"),
                Cell::text(p.why.clone()),
            ]);
        }
    }
    (!t.rows.is_empty()).then_some(("notes", t))
}

fn show_points(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let mut words = args.rest();
    if words.is_empty() {
        return Err(args.usage_error("missing FUNC"));
    }
    let name = words.remove(0);
    let wheres = match words.as_slice() {
        [] => engine::instrument::listed_points(None),
        // A loop alone: its four kinds of point.
        [l, loop_name] if l == "loop" => engine::instrument::listed_points(Some(loop_name)),
        _ => {
            let mut refs = vec![name.as_str()];
            refs.extend(words.iter().map(String::as_str));
            vec![PointSpec::parse(&refs).map_err(|e| anyhow!(e))?.at]
        }
    };
    let funcs = ctx.session.resolve_functions(&name)?;
    let rows = engine::instrument::describe_points(&ctx.session, &funcs, &wheres)
        .map_err(|e| anyhow!(e))?;
    let with_place = rows
        .iter()
        .any(|r| r.loop_name.is_some() || r.edge.is_some());
    let mut head = vec!["Function", "Point", "Address", "Callee"];
    if with_place {
        head.extend(["Loop", "Edge"]);
    }
    head.extend(["Displaced", "Tactic", "Why"]);
    let mut t = Table::new(head);
    for row in rows {
        let displaced = if row.tactic == Some(engine::instrument::Tactic::RelocateFunction) {
            format!("(the whole function, {} instructions)", row.displaced.len())
        } else {
            row.displaced.join("; ")
        };
        let mut cells = vec![
            Cell::text(row.function),
            Cell::text(row.kind),
            Cell::Addr(row.addr.0),
            Cell::opt(row.callee),
        ];
        if with_place {
            cells.extend([Cell::opt(row.loop_name), Cell::opt(row.edge)]);
        }
        cells.extend([
            Cell::text(displaced),
            Cell::text(row.tactic.map_or("skipped", |t| t.as_str())),
            Cell::text(row.why),
        ]);
        t.rows.push(cells);
    }
    let tactic_col = t.columns.len() - 2;
    let traps = t
        .rows
        .iter()
        .filter(|r| matches!(&r[tactic_col], Cell::Text(s) if s == "trap"))
        .count();
    let skipped = t
        .rows
        .iter()
        .filter(|r| matches!(&r[tactic_col], Cell::Text(s) if s == "skipped"))
        .count();
    let mut title = format!("{} points", t.rows.len());
    if traps > 0 {
        title.push_str(&format!(", {traps} would need a trap (see Why)"));
    }
    if skipped > 0 {
        title.push_str(&format!(", {skipped} would be skipped"));
    }
    t.title = Some(title);
    Ok(Output::Table(t))
}
