//! Stripped binaries: how many of the unstripped build's function starts the engine still
//! finds, exactly, once `.symtab` is gone.

use engine::symbols::NoProgress;
use engine::{Binary, FunctionTable, LinkAddr};
use gsh_tests::{truth, Mutatee, Variant, LIBRARIES};

/// The least fraction of `.symtab` function starts a stripped mutatee must keep.
const FLOOR: f64 = 0.95;

#[test]
fn stripped_mutatees_keep_nearly_every_function_start() {
    let mut report = Vec::new();
    let mut below = Vec::new();
    let libraries = LIBRARIES.iter().map(|n| Mutatee::new(n));
    for m in Mutatee::all().into_iter().chain(libraries) {
        let truth = truth::symtab_functions(&m.path(Variant::O2));
        let stripped_path = m.path(Variant::Stripped);
        let binary = Binary::open(&stripped_path).expect("stripped build opens");
        let table = FunctionTable::build(&binary, &NoProgress);
        let missing: Vec<_> = truth
            .iter()
            .filter(|f| table.at(LinkAddr(f.addr)).is_none())
            .map(|f| format!("{}@{:#x}", f.name, f.addr))
            .collect();
        let found = truth.len() - missing.len();
        let fraction = found as f64 / truth.len() as f64;
        let line = format!(
            "{:<12} {found:>3}/{:<3} {:5.1}%  missing: {}",
            m.name(),
            truth.len(),
            fraction * 100.0,
            if missing.is_empty() {
                "none".to_owned()
            } else {
                missing.join(" ")
            }
        );
        if fraction < FLOOR {
            below.push(line.clone());
        }
        report.push(line);
    }
    // Printed so `cargo test -- --nocapture` shows the figures even when the test passes.
    println!(
        "stripped coverage (symtab FUNC starts found exactly):\n{}",
        report.join("\n")
    );
    assert!(
        below.is_empty(),
        "below {:.0}%:\n{}",
        FLOOR * 100.0,
        below.join("\n")
    );
}
