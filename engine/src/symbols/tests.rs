use std::path::Path;

use super::*;

#[test]
fn strips_parameter_lists() {
    assert_eq!(strip_params("ns::f(int, char)"), "ns::f");
    assert_eq!(strip_params("f(void (*)(int))"), "f");
    assert_eq!(strip_params("main"), "main");
    assert_eq!(strip_params("ns::Klass::get() const"), "ns::Klass::get");
    assert_eq!(strip_params("K::f(int) const &&"), "K::f");
    assert_eq!(strip_params("operator&"), "operator&");
}

#[test]
fn finds_own_functions() {
    let exe = std::env::current_exe().unwrap();
    let bin = Binary::open(Path::new(&exe)).unwrap();
    let table = FunctionTable::build(&bin, &NoProgress);
    assert!(table.functions().len() > 100);
    let f = table
        .functions()
        .iter()
        .find(|f| f.name == "main")
        .expect("the test binary has a main");
    assert_eq!(f.name_source, NameSource::Symtab);
    assert!(table.functions().windows(2).all(|w| w[0].addr < w[1].addr));
    assert!(table.containing(f.addr.offset(1)).is_some());
}

#[test]
fn the_name_index_answers_as_a_scan_of_every_function_would() {
    let exe = std::env::current_exe().unwrap();
    let bin = Binary::open(Path::new(&exe)).unwrap();
    let table = FunctionTable::build(&bin, &NoProgress);
    let scan = |name: &str| -> Vec<FuncId> {
        table
            .functions()
            .iter()
            .filter(|f| {
                f.name == name
                    || f.demangled.as_deref() == Some(name)
                    || f.demangled
                        .as_deref()
                        .is_some_and(|d| strip_params(d) == name)
                    || f.aliases.iter().any(|a| a == name)
            })
            .map(|f| f.id)
            .collect()
    };
    // Forty functions spread over the table: each answer is checked against a full scan.
    let mut asked = 0;
    let step = (table.functions().len() / 40).max(1);
    for f in table.functions().iter().step_by(step) {
        let demangled = f.demangled.as_deref();
        let names = std::iter::once(f.name.as_str())
            .chain(demangled)
            .chain(demangled.map(strip_params))
            .chain(f.aliases.iter().map(String::as_str));
        for name in names {
            let indexed: Vec<FuncId> = table.by_name(name).map(|g| g.id).collect();
            assert_eq!(indexed, scan(name), "{name}");
            assert!(indexed.contains(&f.id), "{name}");
            asked += 1;
        }
    }
    assert!(asked >= 40, "{asked} names asked");
    assert_eq!(table.by_name("no such function, surely").count(), 0);
}

const COLD: &str = include_str!("../../../tests/corpus/cold.c");

/// Stripped, every cold part of the corpus's `cold.c` (gcc -O2) is named after the function
/// that owns it, and nothing else is taken for one. `mid_cold.cold` is entered only past its
/// start (its first block is reached from another of its blocks), as python3.11's cold part at
/// 0x440f9c is: it used to stay a function of its own whose exits had no entries.
#[test]
fn stripped_cold_parts_are_named_after_their_parents() {
    let path = crate::testutil::compile("cold", COLD, false, &["-O2"]);
    let full = FunctionTable::build(&Binary::open(&path).unwrap(), &NoProgress);
    let stripped = path.with_extension("stripped");
    let out = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&path)
        .output()
        .expect("run strip");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = FunctionTable::build(&Binary::open(&stripped).unwrap(), &NoProgress);
    let mut parts = Vec::new();
    for f in full.functions().iter().filter(|f| f.name.contains(".cold")) {
        let parent = f.name.split(".cold").next().unwrap();
        let owner = full.functions().iter().find(|g| g.name == parent).unwrap();
        let owner = table.at(owner.addr).expect("the parent is found stripped");
        let part = table.at(f.addr).expect("the cold part is found stripped");
        assert!(
            part.is_cold_part() && part.name.starts_with(&format!("{}.cold", owner.name)),
            "{} at {:#x} is {} stripped, its parent {}",
            f.name,
            f.addr.0,
            part.name,
            owner.name
        );
        parts.push(f.addr);
    }
    assert!(parts.len() >= 3, "{parts:x?}");
    let invented: Vec<&str> = table
        .functions()
        .iter()
        .filter(|f| f.is_cold_part() && !parts.contains(&f.addr))
        .map(|f| f.name.as_str())
        .collect();
    assert!(invented.is_empty(), "{invented:?}");
}
