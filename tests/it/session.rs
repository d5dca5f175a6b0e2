//! The engine's session on real mutatees: resolving names as users type them (plain, by
//! address, globs, `MODULE!NAME`), "did you mean" hints, and global variables graded against
//! `nm`.

use engine::{Error, LinkAddr, Session};
use gsh_tests::{truth, Mutatee, Variant};

fn open(name: &str, variant: Variant) -> Session {
    let mut session = Session::new();
    let path = Mutatee::new(name).path(variant);
    session
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    session
}

fn nm_addr(name: &str, variant: Variant, symbol: &str) -> u64 {
    truth::nm_defined(&Mutatee::new(name).path(variant))
        .into_iter()
        .find(|s| s.name == symbol)
        .unwrap_or_else(|| panic!("nm shows no {symbol} in {name}"))
        .addr
}

#[test]
fn names_addresses_and_globs_resolve() {
    for v in [Variant::O0, Variant::O2, Variant::NoPie] {
        let mut s = open("tailcall", v);
        let leaf = nm_addr("tailcall", v, "leaf");

        let by_name = s.resolve_functions("leaf").expect("leaf resolves");
        assert_eq!(by_name.len(), 1);
        assert_eq!(s.func(by_name[0]).addr, LinkAddr(leaf));

        let inside = format!("{:#x}", leaf + 1);
        let by_addr = s
            .resolve_functions(&inside)
            .expect("an address inside leaf");
        assert_eq!(by_addr, by_name, "{inside} is inside leaf");

        let mut names: Vec<String> = s
            .resolve_functions("is_*")
            .expect("glob")
            .into_iter()
            .map(|r| s.func(r).name.clone())
            .collect();
        names.sort();
        assert_eq!(names, ["is_even", "is_odd"], "{v:?}");

        let main = s.main().expect("open");
        assert_eq!(main.describe(LinkAddr(leaf)).as_deref(), Some("leaf"));
        assert_eq!(
            main.describe(LinkAddr(leaf + 3)).as_deref(),
            Some("leaf+0x3")
        );
    }
}

#[test]
fn library_functions_resolve_through_module_names() {
    let mut s = open("basic", Variant::O0);
    let found = s
        .resolve_functions("libc.so.6!puts")
        .expect("libc.so.6 is needed by every mutatee and exports puts");
    assert_eq!(found.len(), 1);
    let module = s.module(found[0].module);
    assert_eq!(module.name, "libc.so.6");
    assert!(!module.is_main);
    let puts = s.func(found[0]);
    assert!(
        puts.name == "puts" || puts.aliases.iter().any(|a| a == "puts"),
        "{puts:?}"
    );
}

#[test]
fn unknown_functions_suggest_the_nearest_name() {
    let mut s = open("basic", Variant::O0);
    let err = s.resolve_functions("factorail").expect_err("a typo");
    assert!(matches!(err, Error::UnknownFunction { .. }), "{err:?}");
    assert!(
        err.to_string().contains("did you mean `factorial`"),
        "{err}"
    );

    let err = s.resolve_functions("0x1").expect_err("no code at 0x1");
    assert!(err.to_string().contains("0x1"), "{err}");

    let err = s.resolve_functions("[").expect_err("a broken glob");
    assert!(matches!(err, Error::BadPattern { .. }), "{err:?}");
}

#[test]
fn global_variables_match_nm() {
    let globals = [
        ("global_counter", 4, ".bss"),
        ("global_long", 8, ".data"),
        ("global_double", 8, ".data"),
        ("global_name", 16, ".data"),
        ("global_greeting", 8, ".data"),
        ("global_point", 16, ".data"),
        ("global_number", 4, ".bss"),
        ("global_flags", 8, ".data"),
        ("global_color", 4, ".data"),
        ("global_array", 32, ".data"),
    ];
    for v in Variant::WITH_SYMTAB {
        let s = open("basic", v);
        let table = s.main().expect("open").functions();
        for (name, size, section) in globals {
            let var = table
                .variables()
                .iter()
                .find(|x| x.name == name)
                .unwrap_or_else(|| panic!("basic {v:?}: no variable {name}"));
            assert_eq!(
                var.addr,
                LinkAddr(nm_addr("basic", v, name)),
                "{v:?} {name}"
            );
            assert_eq!(var.size, size, "{v:?} {name}");
            assert_eq!(var.section, section, "{v:?} {name}");
            assert!(var.global && !var.tls, "{v:?} {name}");
        }
    }
    // A file-local static survives at -O0 (at -O2 gcc folds the constant away).
    let s = open("basic", Variant::O0);
    let hidden = s
        .main()
        .expect("open")
        .functions()
        .variables()
        .iter()
        .find(|x| x.name == "static_hidden")
        .cloned()
        .expect("static_hidden at -O0");
    assert!(!hidden.global);

    let s = open("threads", Variant::O0);
    let tls = s
        .main()
        .expect("open")
        .functions()
        .variables()
        .iter()
        .find(|x| x.name == "tls_calls")
        .cloned()
        .expect("the __thread variable");
    assert!(tls.tls, "tls_calls is thread-local");
    assert_eq!(tls.size, 4);
}

#[test]
fn another_module_can_be_loaded_and_named() {
    let mut s = open("basic", Variant::O0);
    let lib = Mutatee::new("libshared").path(Variant::O2);
    let id = s.load_module(&lib).expect("the library opens as a module");
    let spec = format!(
        "{}!shared_add",
        Mutatee::new("libshared").file_name(Variant::O2)
    );
    let found = s
        .resolve_functions(&spec)
        .expect("library function by module name");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].module, id);
    // Unqualified names look in the main module first, then in the others.
    let found = s
        .resolve_functions("shared_hash")
        .expect("found in the loaded library");
    assert_eq!(found[0].module, id);
    let found = s.resolve_functions("add").expect("main's own add");
    assert_eq!(s.func(found[0]).name, "add");
    assert!(s.module(found[0].module).is_main);
}
