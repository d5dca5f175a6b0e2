//! The session-backed snippet environment on a binary compiled at test time.

use super::*;
use crate::snippet::env::{Binding, Env, PointInfo, PointKind, VarPlace};
use crate::snippet::types::{IntKind, Type};
use crate::testutil::{compile, open};

const SOURCE: &str = r#"
#include <stdio.h>
#include <stddef.h>
struct point { int x; int y; const char *label; };
typedef struct point point_t;
typedef unsigned long counter_t;
int global_counter = 3;
counter_t hits;
double ratio = 0.5;
point_t origin = { 0, 0, "origin" };
__attribute__((noinline)) int add(int a, int b) { return a + b; }
__attribute__((noinline)) double scale(double f, long n, const char *why) { return f * n + (why != NULL); }
__attribute__((noinline)) int norm(point_t *p) { return p->x * p->x + p->y * p->y; }
int main(void) { printf("%d %f %d\n", add(1, 2), scale(1.5, 2, "x"), norm(&origin)); return 0; }
"#;

fn ty_of(env: &dyn Env, name: &str) -> (Type, VarPlace) {
    match env.lookup(name) {
        Some(Binding::Var { ty, place }) => (ty, place),
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn c_spellings_become_snippet_types() {
    let none = |_: &str| None;
    let size = |_: &str| Some(16);
    let t = |s| c_type(s, &none, &size);
    assert_eq!(t("int"), Some(Type::INT));
    assert_eq!(t("long unsigned int"), Some(Type::ULONG));
    assert_eq!(
        t("const char *"),
        Some(Type::Ptr(Box::new(Type::Int(IntKind::Char))))
    );
    assert_eq!(t("int (*)(int)"), Some(Type::Ptr(Box::new(Type::Void))));
    assert_eq!(
        t("char [16]"),
        Some(Type::Array(Box::new(Type::Int(IntKind::Char)), 16))
    );
    assert_eq!(t("enum color"), Some(Type::INT));
    assert_eq!(t("float"), None);
    assert_eq!(t("size_t"), None, "unknown typedefs stay unknown");
    let typedefs = |n: &str| (n == "size_t").then(|| "long unsigned int".to_owned());
    assert_eq!(c_type("size_t", &typedefs, &size), Some(Type::ULONG));
}

#[test]
fn names_resolve_against_dwarf_symbols_and_declarations() {
    let path = compile("instrument-env", SOURCE, false, &["-O0", "-g"]);
    let session = open(&path);
    let module = session.main().unwrap();
    let table = module.functions();
    let scale = table.by_name("scale").next().unwrap();
    let declared = [Declaration {
        name: "n".into(),
        ty: Type::LONG,
        addr: 0x7000_0000,
    }];
    let entry = PointInfo {
        kind: PointKind::Entry,
        function: "scale".into(),
        ..PointInfo::default()
    };
    let env = SessionEnv::new(module, Some(scale), &declared, entry, 0);

    // Parameters by name: the double in xmm0, the integers in the first argument slots.
    assert_eq!(
        ty_of(&env, "f"),
        (Type::Double, VarPlace::Saved(abi::xmm_offset(0)))
    );
    assert_eq!(
        ty_of(&env, "n").1,
        VarPlace::Saved(abi::arg_offset(0)),
        "parameters shadow declarations"
    );
    assert_eq!(ty_of(&env, "why").1, VarPlace::Saved(abi::arg_offset(1)));

    // Globals, typed from DWARF through typedefs.
    let counter = table
        .variables()
        .iter()
        .find(|v| v.name == "global_counter")
        .unwrap();
    assert_eq!(
        ty_of(&env, "global_counter"),
        (Type::INT, VarPlace::Absolute(counter.addr.0))
    );
    assert_eq!(ty_of(&env, "hits").0, Type::ULONG);
    assert_eq!(ty_of(&env, "ratio").0, Type::Double);
    assert!(
        matches!(ty_of(&env, "origin").0, Type::Struct { ref name, size: 16 } if name == "point")
    );
    let layout = env.struct_layout("point").unwrap();
    assert_eq!(
        layout
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.offset))
            .collect::<Vec<_>>(),
        [("x", 0), ("y", 4), ("label", 8)]
    );

    // Functions: from DWARF when defined here, from the PLT (variadic, returning long) else.
    match env.lookup("add") {
        Some(Binding::Func { sig, .. }) => {
            assert_eq!(sig.ret, Type::INT);
            assert_eq!(sig.params.as_deref(), Some(&[Type::INT, Type::INT][..]));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(env.lookup("printf"), Some(Binding::Func { sig, .. }) if sig.variadic));

    // The whole thing compiles, and a typo gets a hint.
    crate::snippet::compile(
        "if (n > 1) printf(\"%s %f\\n\", why, f * ratio); global_counter++;",
        &env,
        0x40_0000,
    )
    .expect("compiles");
    let err = crate::snippet::compile("global_countr++;", &env, 0x40_0000).unwrap_err();
    assert!(format!("{err:?}").contains("global_counter"), "{err:?}");

    // Away from the entry, parameters are not registers any more.
    let exit = PointInfo {
        kind: PointKind::Exit,
        function: "scale".into(),
        ..PointInfo::default()
    };
    let env = SessionEnv::new(module, Some(scale), &declared, exit, 0);
    assert_eq!(
        ty_of(&env, "n"),
        (Type::LONG, VarPlace::Absolute(0x7000_0000))
    );
    assert!(env.lookup("why").is_none());
}
