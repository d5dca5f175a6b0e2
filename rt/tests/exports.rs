//! The built `libgsh_rt.so` exports exactly what `rt-abi` says it does: every name the engine
//! may look up is a defined dynamic symbol of the right kind (function or object), and the
//! library exports no `gsh_rt_*`/`GSH_RT_*` symbol the ABI does not list. The signatures are
//! checked at compile time in `rt/src/lib.rs`.

mod common;

use gsh_rt_abi::exports::{self, Kind};
use object::{Object, ObjectSymbol, SymbolKind};

#[test]
fn the_library_exports_what_the_abi_lists() {
    let so = common::shared_library();
    let data = std::fs::read(&so).expect("read libgsh_rt.so");
    let file = object::File::parse(&*data).expect("an ELF file");
    let exported: Vec<(String, SymbolKind)> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| Some((s.name().ok()?.to_owned(), s.kind())))
        .collect();
    for (name, kind) in exports::all() {
        let found = exported
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("libgsh_rt.so does not export `{name}`"));
        let want = match kind {
            Kind::Function => SymbolKind::Text,
            Kind::Object => SymbolKind::Data,
        };
        assert_eq!(found.1, want, "`{name}` is exported as the wrong kind");
    }
    for (name, _) in &exported {
        let ours = name.starts_with("gsh_rt_") || name.starts_with("GSH_RT_");
        assert!(
            !ours || exports::all().any(|(n, _)| n == name),
            "libgsh_rt.so exports `{name}`, which rt-abi's exports do not list"
        );
    }
}
