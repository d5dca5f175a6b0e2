//! Compiles every snippet in a directory over and over and prints the resident set size, to
//! check that compiling does not accumulate memory (`--example snippet_rss -- DIR ROUNDS`).

use engine::snippet::env::{MapEnv, PointInfo, PointKind, VarPlace};
use engine::snippet::types::{FnSig, IntKind, Type};

fn rss_kb() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: snippet_rss DIR ROUNDS");
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let sources: Vec<String> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .filter_map(|b| String::from_utf8(b).ok())
        .collect();
    let env = MapEnv {
        point: PointInfo {
            kind: PointKind::Exit,
            ..PointInfo::default()
        },
        ..MapEnv::default()
    }
    .var("n", Type::LONG, VarPlace::Absolute(0x60_1000))
    .var("i", Type::INT, VarPlace::Absolute(0x60_1008))
    .var("d", Type::Double, VarPlace::Absolute(0x60_1018))
    .var(
        "p",
        Type::Ptr(Box::new(Type::LONG)),
        VarPlace::Absolute(0x60_1020),
    )
    .func(
        "printf",
        0x40_1000,
        FnSig {
            ret: Type::INT,
            params: Some(vec![Type::Ptr(Box::new(Type::Int(IntKind::Char)))]),
            variadic: true,
            printf_format: None,
        },
    );
    for round in 0..rounds {
        let t = std::time::Instant::now();
        for s in &sources {
            let _ = engine::snippet::compile(s, &env, 0x50_0000);
        }
        println!(
            "round {round}: {} snippets in {:?}, rss {} KB",
            sources.len(),
            t.elapsed(),
            rss_kb()
        );
    }
}
