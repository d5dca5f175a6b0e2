//! Commands about files and modules: `open`, `show modules`, `show libraries`.

use std::path::Path;

use anyhow::Result;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record, Table};

pub const OPEN: Spec = Spec {
    name: "open",
    aliases: &[],
    usage: "FILE",
    complete: Complete::File,
    summary: "open an ELF file for analysis",
    help: "Opens FILE, a 64-bit x86-64 ELF executable or shared library, and makes it the main \
module, closing whatever was open. Opening is quick: functions are discovered the first time a \
command needs them, and debug info the first time a source-level question is asked.",
    examples: &[("open /bin/ls", "analyse ls")],
    run: open,
};

pub const SHOW_MODULES: Spec = Spec {
    name: "show modules",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "list the open modules",
    help: "Lists the modules gsh has open: the main file and any library a command has named \
(`show functions 'mall*' in libc.so.6` opens libc). FUNCTIONS is `-` until the module's \
functions have been discovered.",
    examples: &[("show modules", "")],
    run: show_modules,
};

pub const SHOW_LIBRARIES: Spec = Spec {
    name: "show libraries",
    aliases: &["show libs"],
    usage: "",
    complete: Complete::Nothing,
    summary: "list the libraries the main module needs and where they resolve",
    help: "Lists the DT_NEEDED entries of the main module in order, each with the path the \
dynamic linker would load it from (DT_RUNPATH with $ORIGIN, LD_LIBRARY_PATH, then the system \
directories), or `-` when none is found.",
    examples: &[("show libraries", "")],
    run: show_libraries,
};

fn yes_no(b: bool) -> Cell {
    Cell::text(if b { "yes" } else { "no" })
}

fn open(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let path = args.positionals(1, 1)?.remove(0);
    let id = ctx.session.open(Path::new(&path))?;
    // Requests name functions of the file that was open; they do not carry over.
    ctx.plan = engine::instrument::Plan::default();
    let m = ctx.session.module(id);
    let b = &m.binary;
    Ok(Output::Record(Record {
        title: None,
        fields: vec![
            ("Opened", Cell::text(b.path().display().to_string())),
            ("Kind", Cell::text(b.kind().as_str())),
            ("Entry", Cell::Addr(b.entry().0)),
            ("Symtab", yes_no(b.has_symtab())),
            ("DWARF", yes_no(b.has_dwarf())),
            ("Libraries", Cell::Num(b.needed().len() as u64)),
        ],
        table: None,
    }))
}

fn show_modules(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    ctx.session.main()?;
    let mut t = Table::new(vec![
        "Name",
        "Path",
        "Kind",
        "Entry",
        "Functions",
        "Symtab",
        "DWARF",
        "Build id",
    ]);
    for m in ctx.session.modules() {
        let b = &m.binary;
        t.rows.push(vec![
            Cell::text(&m.name),
            Cell::text(b.path().display().to_string()),
            Cell::text(b.kind().as_str()),
            Cell::Addr(b.entry().0),
            if m.functions_ready() {
                Cell::Num(m.functions().functions().len() as u64)
            } else {
                Cell::Empty
            },
            yes_no(b.has_symtab()),
            yes_no(b.has_dwarf()),
            Cell::opt(
                b.build_id()
                    .map(|id| id.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            ),
        ]);
    }
    Ok(Output::Table(t))
}

fn show_libraries(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let libs = ctx.session.libraries()?;
    let mut t = Table::new(vec!["Name", "Path"]);
    if libs.is_empty() {
        t.note = Some("no DT_NEEDED entries (statically linked?)".into());
    }
    for lib in libs {
        t.rows.push(vec![
            Cell::text(lib.name),
            Cell::opt(lib.path.map(|p| p.display().to_string())),
        ]);
    }
    Ok(Output::Table(t))
}
