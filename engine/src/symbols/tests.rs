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
