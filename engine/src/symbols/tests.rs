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
