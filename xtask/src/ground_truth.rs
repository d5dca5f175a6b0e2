//! `ground-truth [gcc|clang...]`: the corpus of [`gsh_tests::ground_truth`] built with each
//! compiler at -O0..-O3, PIE and not, and gsh graded on every build: jump tables found exactly
//! and invented, function starts of the stripped copy found exactly and invented inside a
//! function. `grade BINARY...` grades binaries built elsewhere the same way.

use anyhow::{bail, Result};
use gsh_tests::ground_truth::{grade, Build, SOURCES};

pub fn run(args: &[String]) -> Result<()> {
    let compilers: Vec<&'static str> = if args.is_empty() {
        vec!["gcc", "clang"]
    } else {
        let mut v = Vec::new();
        for a in args {
            v.push(match a.as_str() {
                "gcc" => "gcc",
                "clang" => "clang",
                other => bail!("unknown compiler `{other}`; usage: ground-truth [gcc|clang...]"),
            });
        }
        v
    };
    let dir = gsh_tests::target_dir().join("ground-truth");
    println!(
        "| source | build | tables | exact | invented | starts | found | inside | cold parts | attached | invented |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut problems = Vec::new();
    for compiler in compilers {
        for build in Build::all(compiler) {
            for source in SOURCES {
                let path = build.compile(source, &dir).map_err(anyhow::Error::msg)?;
                let g = grade(&path).map_err(anyhow::Error::msg)?;
                println!("| {source} | {} | {} |", build.label(), g.cells());
                problems.extend(
                    g.problems
                        .iter()
                        .map(|p| format!("{} {source}: {p}", build.label())),
                );
            }
        }
    }
    for p in problems {
        println!("{p}");
    }
    Ok(())
}

/// `grade BINARY...`: each binary graded (built with relocations and labels kept, with a
/// `BINARY.stripped` copy beside it), its problems listed.
pub fn grade_files(args: &[String]) -> Result<()> {
    if args.is_empty() {
        bail!("usage: grade BINARY...");
    }
    println!(
        "| binary | tables | exact | invented | starts | found | inside | cold parts | attached | invented |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut problems = Vec::new();
    for path in args {
        let g = grade(std::path::Path::new(path)).map_err(anyhow::Error::msg)?;
        println!("| {path} | {} |", g.cells());
        problems.extend(g.problems.iter().map(|p| format!("{path}: {p}")));
    }
    for p in problems {
        println!("{p}");
    }
    Ok(())
}
