//! Analyses a whole binary and prints the module's counts: a quick check from the command line
//! (`cargo run --release -p gsh-engine --example analyze -- /usr/bin/ls`).

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: analyze BINARY");
        std::process::exit(2);
    };
    let mut session = engine::Session::new();
    if let Err(e) = session.open(&path) {
        eprintln!("analyze: {e}");
        std::process::exit(1);
    }
    let module = session.main().expect("just opened");
    let t = Instant::now();
    let n = module.functions().functions().len();
    let table_time = t.elapsed();
    let stats = module.analysis().stats();
    println!("functions {n} (table {:.3}s)", table_time.as_secs_f64());
    println!("{stats:#?}");
}
