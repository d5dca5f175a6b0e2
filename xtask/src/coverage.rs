//! `stripped-coverage`: strips a copy of each binary and counts how many function starts of
//! the unstripped `.symtab` (FUNC symbols with a size, in code sections) the engine finds at
//! exactly the same address in the copy.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use engine::symbols::NoProgress;
use engine::{Binary, FunctionTable, LinkAddr};
use gsh_tests::{target_dir, truth, Mutatee, Variant, LIBRARIES};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

/// How many missed functions to name per binary.
const SHOW_MISSES: usize = 8;

pub fn run(args: &[String]) -> Result<()> {
    let binaries: Vec<PathBuf> = if args.is_empty() {
        let libraries = LIBRARIES.iter().map(|n| Mutatee::new(n));
        let mut v: Vec<PathBuf> = Mutatee::all()
            .into_iter()
            .chain(libraries)
            .map(|m| m.path(Variant::O2))
            .collect();
        v.push(PathBuf::from(LIBC));
        v
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    let work = target_dir()
        .join("xtask")
        .join(format!("strip-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let result = measure_all(&binaries, &work);
    // Best effort: the stripped copies are only needed for the measurement.
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn measure_all(binaries: &[PathBuf], work: &Path) -> Result<()> {
    println!(
        "{:<24} {:>7} {:>7} {:>7} {:>7}  truth from",
        "binary", "symtab", "found", "%", "extra"
    );
    let mut failed = false;
    for binary in binaries {
        if let Err(e) = measure(binary, work) {
            println!("{:<24} error: {e:#}", short(binary));
            failed = true;
        }
    }
    if failed {
        bail!("some binaries could not be measured");
    }
    Ok(())
}

fn measure(binary: &Path, work: &Path) -> Result<()> {
    if !binary.is_file() {
        bail!("{} is not a file", binary.display());
    }
    Binary::open(binary)?;
    let truth_file = if truth::has_symtab(binary) {
        binary.to_owned()
    } else {
        match truth::system_debug_file(binary) {
            Some(debug) if truth::has_symtab(&debug) => debug,
            _ => bail!("no .symtab and no separate debug file with one: nothing to compare with"),
        }
    };
    let functions = truth::symtab_functions(&truth_file);
    if functions.is_empty() {
        bail!("{} has no FUNC symbols with a size", truth_file.display());
    }

    let name = binary.file_name().context("a binary path names a file")?;
    let stripped = work.join(name);
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(binary)
        .status()
        .context("cannot run strip")?;
    if !status.success() {
        bail!(
            "`strip -o {} {}` failed ({status})",
            stripped.display(),
            binary.display()
        );
    }
    let opened = Binary::open(&stripped)?;
    let table = FunctionTable::build(&opened, &NoProgress);
    let missing: Vec<_> = functions
        .iter()
        .filter(|f| table.at(LinkAddr(f.addr)).is_none())
        .collect();
    let found = functions.len() - missing.len();
    // Starts the engine reports that no symbol has: PLT stubs aside, each is either code the
    // symbol table does not describe (zero-size assembly labels) or a false start.
    let starts: std::collections::HashSet<u64> = truth::all_function_symbols(&truth_file);
    let extras: Vec<String> = table
        .functions()
        .iter()
        .filter(|f| !f.name.ends_with("@plt") && !starts.contains(&f.addr.0))
        .map(|f| format!("{}/{}[{}]", f.name, f.size, f.found.names().join(",")))
        .collect();
    let extra = extras.len();
    println!(
        "{:<24} {:>7} {:>7} {:>6.2}% {:>7}  {}",
        short(binary),
        functions.len(),
        found,
        100.0 * found as f64 / functions.len() as f64,
        extra,
        if truth_file == binary {
            "own .symtab".to_owned()
        } else {
            truth_file.display().to_string()
        }
    );
    if !missing.is_empty() {
        let names: Vec<String> = missing
            .iter()
            .take(SHOW_MISSES)
            .map(|f| format!("{}@{:#x}/{}", f.name, f.addr, f.size))
            .collect();
        let more = missing.len().saturating_sub(SHOW_MISSES);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        println!("    missed: {}{tail}", names.join(" "));
    }
    if !extras.is_empty() {
        let shown = extras.iter().take(SHOW_MISSES).cloned().collect::<Vec<_>>();
        let more = extras.len().saturating_sub(SHOW_MISSES);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        println!("    extra: {}{tail}", shown.join(" "));
    }
    Ok(())
}

/// The path as it fits a table column: its file name, which is what users call a binary.
fn short(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
