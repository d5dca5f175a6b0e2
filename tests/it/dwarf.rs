//! Source-level answers from DWARF on real mutatees: signatures, declaration lines, globals'
//! types, and the layouts of structs, unions, enums, bit-fields and typedefs, read from the
//! binary itself and from a separate debug file.

use engine::dwarf::{DebugInfo, TypeKind};
use engine::{LinkAddr, Session};
use gsh_tests::{truth, Mutatee, Variant};

/// The 1-based line of the first line of `basic.c` containing `needle`.
fn line_of(needle: &str) -> u32 {
    let source = std::fs::read_to_string(Mutatee::new("basic").source()).expect("read basic.c");
    let index = source
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("basic.c has no line containing {needle:?}"));
    index as u32 + 1
}

/// Opens `basic` in `variant` and runs `check` with its DWARF and its `nm` addresses.
fn with_basic(variant: Variant, check: impl FnOnce(&DebugInfo, &dyn Fn(&str) -> u64)) {
    let path = Mutatee::new("basic").path(variant);
    let nm = truth::nm_defined(&path);
    let addr = |name: &str| {
        nm.iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("nm has no {name}"))
            .addr
    };
    let mut session = Session::new();
    session.set_debug_dirs(Vec::new());
    session.open(&path).expect("opens");
    let module = session.main().expect("open");
    let debug = module
        .debug_info()
        .unwrap_or_else(|| panic!("basic {variant:?} has DWARF"));
    check(debug, &addr);
}

const DWARF_VARIANTS: [Variant; 3] = [Variant::O0, Variant::O2, Variant::SeparateDebug];

#[test]
fn signatures_come_from_dwarf() {
    for v in DWARF_VARIANTS {
        with_basic(v, |debug, addr| {
            let signature = |name: &str| {
                debug
                    .function(LinkAddr(addr(name)))
                    .unwrap_or_else(|| panic!("{v:?}: no DWARF for {name}"))
                    .signature()
            };
            assert_eq!(signature("add"), "int add(int a, int b)", "{v:?}");
            assert_eq!(signature("inc"), "int inc(int x)", "{v:?}");
            assert_eq!(
                signature("name_length"),
                "size_t name_length(const char *name)",
                "{v:?}"
            );
            assert_eq!(
                signature("sum_ints"),
                "int sum_ints(int count, ...)",
                "{v:?}"
            );
            assert_eq!(
                signature("print_report"),
                "void print_report(void)",
                "{v:?}"
            );
            assert_eq!(
                signature("color_name"),
                "const char *color_name(enum color c)",
                "{v:?}"
            );
            assert_eq!(
                signature("point_distance2"),
                "int point_distance2(point_t *p)",
                "{v:?}"
            );

            let add = debug
                .function(LinkAddr(addr("add")))
                .expect("checked above");
            let decl = add.decl.expect("add has a declaration line");
            assert!(decl.file.ends_with("basic.c"), "{v:?}: {decl}");
            assert_eq!(decl.line, line_of("int add(int a, int b)"), "{v:?}");
            // An address inside add belongs to add too.
            let inside = debug
                .function(LinkAddr(addr("add") + 1))
                .expect("inside add");
            assert_eq!(inside.name, "add");

            let line = debug
                .location(LinkAddr(addr("add")))
                .expect("add's entry has a line");
            assert!(line.file.ends_with("basic.c"), "{v:?}: {line}");
            // At -O0 the entry maps to the declaration line; optimised code may map it to the
            // first statement of the body instead, as gcc's line table says.
            let decl_line = line_of("int add(int a, int b)");
            assert!(
                (decl_line..=decl_line + 1).contains(&line.line),
                "{v:?}: {line} (declared at {decl_line})"
            );
        });
    }
}

#[test]
fn global_variables_have_types_and_addresses() {
    for v in DWARF_VARIANTS {
        with_basic(v, |debug, addr| {
            for (name, type_name, size) in [
                ("global_counter", "int", 4),
                ("global_long", "long", 8),
                ("global_double", "double", 8),
                ("global_name", "char [16]", 16),
                ("global_greeting", "const char *", 8),
                ("global_point", "struct point", 16),
                ("global_number", "union number", 4),
                ("global_color", "enum color", 4),
                ("global_array", "int [8]", 32),
            ] {
                let var = debug
                    .variable(name)
                    .unwrap_or_else(|| panic!("{v:?}: no DWARF variable {name}"));
                assert_eq!(var.type_name, type_name, "{v:?} {name}");
                assert_eq!(var.size, Some(size), "{v:?} {name}");
                assert_eq!(var.addr, Some(LinkAddr(addr(name))), "{v:?} {name}");
                let decl = var.decl.expect("globals have a declaration line");
                assert!(decl.line > 0);
            }
        });
    }
}

#[test]
fn type_layouts_come_from_dwarf() {
    for v in DWARF_VARIANTS {
        with_basic(v, |debug, _| {
            let point = debug.type_layout("struct point").expect("struct point");
            assert_eq!(point.kind, TypeKind::Struct);
            assert_eq!(point.size, Some(16));
            let members: Vec<(Option<&str>, &str, u64)> = point
                .members
                .iter()
                .map(|m| (m.name.as_deref(), m.type_name.as_str(), m.offset))
                .collect();
            assert_eq!(
                members,
                [
                    (Some("x"), "int", 0),
                    (Some("y"), "int", 4),
                    (Some("label"), "const char *", 8)
                ],
                "{v:?}"
            );
            // `point` alone names the struct too.
            assert_eq!(debug.type_layout("point").map(|t| t.size), Some(Some(16)));

            let typedef = debug.type_layout("point_t").expect("typedef point_t");
            assert_eq!(typedef.kind, TypeKind::Typedef);
            assert_eq!(typedef.target.as_deref(), Some("struct point"));

            let number = debug.type_layout("union number").expect("union number");
            assert_eq!(number.kind, TypeKind::Union);
            assert_eq!(number.size, Some(4));
            assert!(number.members.iter().all(|m| m.offset == 0), "{v:?}");
            assert_eq!(number.members.len(), 3);

            let color = debug.type_layout("enum color").expect("enum color");
            assert_eq!(color.kind, TypeKind::Enum);
            assert_eq!(
                color.enumerators,
                [
                    ("RED".to_owned(), 0),
                    ("GREEN".to_owned(), 5),
                    ("BLUE".to_owned(), 6)
                ]
            );

            let flags = debug.type_layout("struct flags").expect("struct flags");
            assert_eq!(flags.size, Some(8));
            let bits: Vec<(&str, Option<(u64, u64)>)> = flags
                .members
                .iter()
                .map(|m| (m.name.as_deref().unwrap_or("?"), m.bits))
                .collect();
            assert_eq!(
                bits,
                [
                    ("ready", Some((0, 1))),
                    ("mode", Some((1, 3))),
                    ("count", Some((4, 12))),
                    ("level", None)
                ],
                "{v:?}"
            );
            let level = flags
                .members
                .iter()
                .find(|m| m.name.as_deref() == Some("level"));
            assert_eq!(level.map(|m| m.offset), Some(4));
        });
    }
}

#[test]
fn stripped_build_has_no_dwarf() {
    let mut session = Session::new();
    session.set_debug_dirs(Vec::new());
    session
        .open(&Mutatee::new("basic").path(Variant::Stripped))
        .expect("opens");
    assert!(session.main().expect("open").debug_info().is_none());
}
