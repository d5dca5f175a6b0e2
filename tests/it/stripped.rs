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

/// Every function start of a stripped -O2 mutatee, crt's size-less ones included (`_init` and
/// `_fini` from the dynamic section, `frame_dummy` and `__do_global_dtors_aux` from the init and
/// fini arrays, `register_tm_clones` as a tail call's target), is found exactly, and no start
/// is invented inside a function. They used to run together as one `sub_11c0`.
#[test]
fn stripped_mutatees_keep_every_start_and_invent_none_inside() {
    let mut wrong = Vec::new();
    for m in Mutatee::all() {
        let truth = truth::symtab_function_starts(&m.path(Variant::O2));
        let binary = Binary::open(&m.path(Variant::Stripped)).expect("stripped build opens");
        let table = FunctionTable::build(&binary, &NoProgress);
        for f in &truth {
            if table.at(LinkAddr(f.addr)).is_none() {
                wrong.push(format!(
                    "{}: {} at {:#x} not found",
                    m.name(),
                    f.name,
                    f.addr
                ));
            }
        }
        for found in table.functions() {
            let a = found.addr.0;
            if let Some(f) = truth.iter().find(|f| a > f.addr && a < f.addr + f.size) {
                wrong.push(format!(
                    "{}: {} invented inside {}",
                    m.name(),
                    found.name,
                    f.name
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
