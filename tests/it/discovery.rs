//! Function discovery graded against tools that are not the engine: every function `nm`
//! reports sits in the table at `nm`'s address under `nm`'s name, PLT stubs sit where
//! `objdump -d` puts them, the binary kind matches the link flags, and C++ names demangle.

use std::path::Path;

use engine::symbols::NoProgress;
use engine::{Binary, BinaryKind, FunctionTable, NameSource, Session};
use gsh_tests::{truth, Mutatee, Variant, LIBRARIES};

/// Functions each mutatee defines that must exist, by those names, in every build.
const EXPECTED: &[(&str, &[&str])] = &[
    (
        "basic",
        &[
            "main",
            "inc",
            "add",
            "name_length",
            "sum_ints",
            "factorial",
            "scale_hidden",
            "point_distance2",
            "number_as_float",
            "color_name",
            "flags_mode",
            "print_report",
        ],
    ),
    (
        "loops",
        &[
            "main",
            "square",
            "classify",
            "nested",
            "collatz_steps",
            "siblings",
            "calls_in_loop",
        ],
    ),
    (
        "noreturn",
        &[
            "main",
            "fatal",
            "die_hard",
            "checked_div",
            "parse_mode",
            "after_noreturn",
        ],
    ),
    (
        "tailcall",
        &[
            "main", "leaf", "forward", "choose", "is_even", "is_odd", "apply",
        ],
    ),
    ("threads", &["main", "work_item", "worker"]),
    (
        "cxx",
        &[
            "main",
            "_Z11check_depthi",
            "_Z7descendi",
            "_ZN3geo6detail5scaleEi",
        ],
    ),
];

/// Every build that keeps a `.symtab`: each program in its five such variants, each library
/// in its three.
fn builds_with_symtab() -> Vec<(Mutatee, Variant)> {
    let mut builds = Vec::new();
    for m in Mutatee::all() {
        builds.extend(Variant::WITH_SYMTAB.map(|v| (m.clone(), v)));
    }
    for name in LIBRARIES {
        let m = Mutatee::new(name);
        builds.extend([Variant::O0, Variant::O2, Variant::SeparateDebug].map(|v| (m.clone(), v)));
    }
    builds
}

fn table(path: &Path) -> FunctionTable {
    let binary =
        Binary::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    FunctionTable::build(&binary, &NoProgress)
}

#[test]
fn every_nm_function_is_in_the_table_at_its_address() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (m, v) in builds_with_symtab() {
        {
            let exe = m.path(v);
            let table = table(&exe);
            for sym in truth::nm_functions(&exe) {
                checked += 1;
                match table.at(engine::LinkAddr(sym.addr)) {
                    None => failures.push(format!(
                        "{}: no function at {:#x} where nm has {}",
                        m.file_name(v),
                        sym.addr,
                        sym.name
                    )),
                    Some(f) if f.name != sym.name && !f.aliases.contains(&sym.name) => failures
                        .push(format!(
                            "{}: function at {:#x} is `{}` (aliases {:?}); nm calls it `{}`",
                            m.file_name(v),
                            sym.addr,
                            f.name,
                            f.aliases,
                            sym.name
                        )),
                    Some(_) => {}
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} nm symbols checked: is nm's output parsed?"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} nm functions wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn expected_functions_exist_by_name_with_symtab_names() {
    for (name, functions) in EXPECTED {
        let m = Mutatee::new(name);
        for v in Variant::WITH_SYMTAB {
            let exe = m.path(v);
            let nm = truth::nm_functions(&exe);
            let table = table(&exe);
            for want in *functions {
                let sym = nm.iter().find(|s| s.name == *want).unwrap_or_else(|| {
                    panic!("{}: nm has no {want}; is it inlined?", m.file_name(v))
                });
                let found: Vec<_> = table.by_name(want).collect();
                assert_eq!(
                    found.len(),
                    1,
                    "{}: `{want}` matched {found:?}",
                    m.file_name(v)
                );
                let f = found[0];
                assert_eq!(f.addr.0, sym.addr, "{}: `{want}`", m.file_name(v));
                assert_eq!(
                    f.name_source,
                    NameSource::Symtab,
                    "{}: `{want}`",
                    m.file_name(v)
                );
                assert!(f.size > 0, "{}: `{want}` has size 0", m.file_name(v));
            }
        }
    }
}

#[test]
fn expected_functions_keep_their_starts_when_stripped() {
    for (name, functions) in EXPECTED {
        let m = Mutatee::new(name);
        let nm = truth::nm_functions(&m.path(Variant::O2));
        let stripped = table(&m.path(Variant::Stripped));
        for want in *functions {
            let sym = nm
                .iter()
                .find(|s| s.name == *want)
                .expect("checked by the test above");
            assert!(
                stripped.at(engine::LinkAddr(sym.addr)).is_some(),
                "{}: no function at {:#x}, where `{want}` starts",
                m.file_name(Variant::Stripped),
                sym.addr
            );
        }
    }
}

#[test]
fn stripped_executables_still_name_main_and_start() {
    for name in ["basic", "loops", "cxx"] {
        let m = Mutatee::new(name);
        let nm = truth::nm_functions(&m.path(Variant::O2));
        let main = nm.iter().find(|s| s.name == "main").expect("main in nm");
        let stripped = table(&m.path(Variant::Stripped));
        let f = stripped
            .at(engine::LinkAddr(main.addr))
            .expect("a function where main starts");
        assert_eq!(f.name, "main", "{name}: {f:?}");
        assert_eq!(f.name_source, NameSource::Inferred);
        let start = stripped.by_name("_start").next().expect("_start named");
        assert_eq!(start.name_source, NameSource::Inferred);
    }
    // Non-PIE: `_start` passes main as an immediate, not RIP-relative.
    let m = Mutatee::new("basic");
    let nm = truth::nm_functions(&m.path(Variant::NoPie));
    let main = nm.iter().find(|s| s.name == "main").expect("main in nm");
    let bin = Binary::open(&m.path(Variant::NoPie)).unwrap();
    assert_eq!(
        engine::symbols::main_from_entry(&bin),
        Some(engine::LinkAddr(main.addr))
    );
}

#[test]
fn plt_stubs_are_named_where_objdump_puts_them() {
    let mut checked = 0;
    for m in Mutatee::all() {
        for v in Variant::ALL {
            let exe = m.path(v);
            let stubs = truth::objdump_plt_stubs(&exe);
            assert!(
                !stubs.is_empty(),
                "{}: objdump shows no PLT stubs",
                m.file_name(v)
            );
            let table = table(&exe);
            for (addr, name) in stubs {
                checked += 1;
                let f = table.at(engine::LinkAddr(addr)).unwrap_or_else(|| {
                    panic!(
                        "{}: no function at {addr:#x} where objdump has {name}",
                        m.file_name(v)
                    )
                });
                assert!(
                    f.name == name || f.aliases.contains(&name),
                    "{}: {addr:#x} is `{}`, objdump says `{name}`",
                    m.file_name(v),
                    f.name
                );
            }
        }
    }
    assert!(checked > 0);
    let basic = table(&Mutatee::new("basic").path(Variant::O2));
    let puts = basic
        .by_name("puts@plt")
        .next()
        .expect("basic calls puts through the PLT");
    assert_eq!(puts.name_source, NameSource::Plt);
}

#[test]
fn binary_kind_follows_the_link_flags() {
    for m in Mutatee::all() {
        let kind = |v| {
            Binary::open(&m.path(v))
                .unwrap_or_else(|e| panic!("{}: {e}", m.file_name(v)))
                .kind()
        };
        assert_eq!(
            kind(Variant::Pie),
            BinaryKind::PieExecutable,
            "{}",
            m.name()
        );
        assert_eq!(kind(Variant::NoPie), BinaryKind::Executable, "{}", m.name());
        let nopie = Binary::open(&m.path(Variant::NoPie)).expect("opened above");
        assert!(!nopie.is_position_independent());
        // O0 uses the compiler's default; whatever it is, the engine agrees with the ELF type.
        let o0 = m.path(Variant::O0);
        let data = std::fs::read(&o0).expect("just built");
        let e_type = u16::from_le_bytes([data[16], data[17]]);
        let want = if e_type == object::elf::ET_EXEC {
            BinaryKind::Executable
        } else {
            BinaryKind::PieExecutable
        };
        assert_eq!(kind(Variant::O0), want, "{}", m.name());
    }
}

#[test]
fn cxx_names_are_demangled_and_findable_without_parameters() {
    for v in Variant::WITH_SYMTAB {
        let table = table(&Mutatee::new("cxx").path(v));
        let demangled = |raw: &str| {
            table
                .functions()
                .iter()
                .find(|f| f.name == raw)
                .unwrap_or_else(|| panic!("cxx {v:?}: no {raw}"))
                .demangled
                .clone()
        };
        assert_eq!(
            demangled("_ZN3geo6detail5scaleEi").as_deref(),
            Some("geo::detail::scale(int)")
        );
        assert_eq!(
            demangled("_ZNK3geo4Rect4areaEv").as_deref(),
            Some("geo::Rect::area() const")
        );
        assert_eq!(demangled("main"), None);
        assert_eq!(table.by_name("geo::detail::scale").count(), 1, "{v:?}");
        assert_eq!(
            table.by_name("describe").count(),
            3,
            "cxx {v:?}: three overloads"
        );
        assert_eq!(table.by_name("describe(double)").count(), 1, "{v:?}");
        assert!(
            table
                .functions()
                .iter()
                .any(|f| f.display_name().contains("biggest<int>")),
            "cxx {v:?}: the int instantiation of biggest"
        );
        assert!(
            table
                .functions()
                .iter()
                .any(|f| f.display_name().contains("biggest<double>")),
            "cxx {v:?}: the double instantiation of biggest"
        );
    }
}

#[test]
fn separate_debug_file_is_found_by_debuglink() {
    let m = Mutatee::new("basic");
    let exe = m.path(Variant::SeparateDebug);
    let binary = Binary::open(&exe).expect("opens");
    assert!(!binary.has_dwarf(), "DWARF should have moved out");
    assert!(binary.has_symtab(), "strip --strip-debug keeps .symtab");
    let (link, _crc) = binary.debuglink().expect("objcopy added a .gnu_debuglink");
    assert_eq!(link, "basic-debuglink.debug");

    let mut session = Session::new();
    // No system directories: the debug file beside the binary must be found on its own.
    session.set_debug_dirs(Vec::new());
    session.open(&exe).expect("opens");
    let debug = session
        .main()
        .expect("open")
        .debug_info()
        .expect("debug file found");
    assert_eq!(
        debug.source().canonicalize().expect("exists"),
        m.debug_file().canonicalize().expect("exists")
    );
}

#[test]
fn symtab_sizes_are_kept_and_ranges_contain_their_last_byte() {
    for (m, v) in builds_with_symtab() {
        {
            let exe = m.path(v);
            let table = table(&exe);
            for sym in truth::symtab_functions(&exe) {
                let f = table.at(engine::LinkAddr(sym.addr)).unwrap_or_else(|| {
                    panic!("{}: no function at {:#x}", m.file_name(v), sym.addr)
                });
                assert_eq!(f.size, sym.size, "{}: size of {}", m.file_name(v), sym.name);
                let last = engine::LinkAddr(sym.addr + sym.size - 1);
                assert_eq!(
                    table.containing(last).map(|c| c.addr),
                    Some(f.addr),
                    "{}: last byte of {}",
                    m.file_name(v),
                    sym.name
                );
            }
        }
    }
}

#[test]
fn shared_library_exports_keep_their_names_when_stripped() {
    let lib = Mutatee::new("libshared");
    for v in [
        Variant::O0,
        Variant::O2,
        Variant::Stripped,
        Variant::SeparateDebug,
    ] {
        let binary = Binary::open(&lib.path(v)).expect("opens");
        assert_eq!(binary.kind(), BinaryKind::SharedLibrary, "{v:?}");
        assert!(binary.is_position_independent());
    }
    let nm = truth::nm_functions(&lib.path(Variant::O2));
    let addr = |name: &str| {
        nm.iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("nm has no {name}"))
            .addr
    };
    let stripped = table(&lib.path(Variant::Stripped));
    for export in ["shared_add", "shared_hash", "shared_hello"] {
        let f = stripped
            .at(engine::LinkAddr(addr(export)))
            .unwrap_or_else(|| panic!("stripped: no function at {export}'s address"));
        assert_eq!(f.name, export);
        assert_eq!(f.name_source, NameSource::Dynsym);
        assert!(f.global);
    }
    // Hidden and static functions lose their names but not their starts.
    for local in ["shared_internal", "mix"] {
        let f = stripped
            .at(engine::LinkAddr(addr(local)))
            .unwrap_or_else(|| panic!("stripped: no function where {local} starts"));
        assert_eq!(f.name_source, NameSource::Synthetic, "{local}: {f:?}");
    }
}
