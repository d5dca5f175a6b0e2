//! `check-switches BINARY...`: the independent jump-table checker
//! ([`gsh_tests::switches`]) on each binary, one row per binary: tables the checker decoded,
//! those with a real case target that starts no block in gsh's CFGs, and the first of them.

use anyhow::{bail, Result};

pub fn run(args: &[String]) -> Result<()> {
    if args.is_empty() {
        bail!("usage: cargo run -p xtask -- check-switches BINARY...");
    }
    println!(
        "| binary | jump tables | tables with real case targets missing | not understood by the checker |"
    );
    println!("|---|---|---|---|");
    let mut examples = Vec::new();
    for path in args {
        let report =
            gsh_tests::switches::check(std::path::Path::new(path)).map_err(anyhow::Error::msg)?;
        let missing: Vec<_> = report.with_missing().collect();
        println!(
            "| {path} | {} | {} | {} |",
            report.tables.len(),
            missing.len(),
            report.not_understood.len()
        );
        if std::env::var_os("GSH_CHECK_VERBOSE").is_some() {
            let first: Vec<String> = report
                .not_understood
                .iter()
                .take(12)
                .map(|a| format!("{a:#x}"))
                .collect();
            examples.push(format!("{path}: not understood at {}", first.join(" ")));
        }
        for t in missing.iter().take(5) {
            examples.push(format!(
                "{path}: jmp at {:#x}, table {:#x} ({} entries): {} targets missing, first {:#x}",
                t.jump,
                t.table,
                t.entries,
                t.missing.len(),
                t.missing[0]
            ));
        }
    }
    for e in examples {
        println!("{e}");
    }
    Ok(())
}
