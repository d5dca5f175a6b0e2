//! Checker tests: the diagnostics users see, rendered, and the types C's rules give.

use super::check_source;
use super::diag::render_all;
use super::env::{MapEnv, PointInfo, PointKind, VarPlace};
use super::types::{common_type, Field, FnSig, IntKind, StructLayout, Type};

fn prototype(name: &str) -> FnSig {
    super::libc::prototype(name).cloned().expect("in the table")
}

fn env() -> MapEnv {
    let mut e = MapEnv::default()
        .var("count", Type::LONG, VarPlace::Absolute(0x1000))
        .var("ratio", Type::Double, VarPlace::Absolute(0x1008))
        .var("name", Type::char_ptr(), VarPlace::Absolute(0x1010))
        .var(
            "node",
            Type::ptr(Type::Struct {
                name: "node".into(),
                size: 16,
            }),
            VarPlace::Absolute(0x1018),
        )
        .func("printf", 0x2000, prototype("printf"))
        .func("puts", 0x2010, prototype("puts"))
        .func("memcpy", 0x2020, prototype("memcpy"))
        .func("sqrt", 0x2030, prototype("sqrt"));
    e.structs.push(StructLayout {
        name: "node".into(),
        size: 16,
        fields: vec![
            Field {
                name: "value".into(),
                offset: 0,
                ty: Type::LONG,
            },
            Field {
                name: "next".into(),
                offset: 8,
                ty: Type::ptr(Type::Struct {
                    name: "node".into(),
                    size: 16,
                }),
            },
        ],
    });
    e.point = PointInfo {
        kind: PointKind::Entry,
        function: "main".into(),
        ..PointInfo::default()
    };
    e
}

fn errors(src: &str) -> String {
    let (p, d) = check_source(src, &env());
    assert!(p.is_none(), "{src} should not check");
    render_all(&d, src)
}

#[test]
fn unknown_names_suggest_the_closest() {
    assert_eq!(
        errors("cuont++;"),
        "error: unknown name `cuont`\n  |\n1 | cuont++;\n  | ^^^^^ did you mean `count`?\n"
    );
}

#[test]
fn return_outside_exits() {
    let e = errors("count = $return;");
    assert!(
        e.contains("`$return` is only available at exit points"),
        "{e}"
    );
    assert!(e.contains("        ^^^^^^^"), "{e}");
}

#[test]
fn type_errors() {
    assert!(errors("name + ratio;").contains("cannot add a pointer and a double"));
    assert!(errors("count = ratio % 2;").contains("`%` needs integers, not `double`"));
    assert!(errors("count();").contains("`count` is a variable of type `long`, not a function"));
    assert!(errors("printf();").contains("takes at least 1 argument"));
    assert!(errors("count = name;").contains("cannot use `char *` as `long`"));
    assert!(errors("node->vaule = 1;").contains("did you mean `value`?"));
    assert!(errors("node.value = 1;").contains("use `->` on a pointer"));
    assert!(errors("$7 = 1;").contains("`$7` does not exist"));
    assert!(errors("$fucntion;").contains("did you mean `$function`?"));
}

#[test]
fn calls_follow_the_c_library_prototypes() {
    assert_eq!(
        errors("printf(1, 2);"),
        "error: cannot use `int` as `char *`\n  |\n1 | printf(1, 2);\n  |        ^ cast it: `(char *)...`\n"
    );
    assert!(errors("puts(count);").contains("cannot use `long` as `char *`"));
    assert!(errors("puts();").contains("`puts` takes 1 argument, but 0 were given"));
    assert!(errors("puts(name, name);").contains("takes 1 argument, but 2 were given"));
    assert!(errors("memcpy(name, ratio, 4);").contains("cannot use `double` as `void *`"));
    assert!(errors("count = sqrt(name);").contains("cannot use `char *` as `double`"));
    // Integers convert as C converts them: `sqrt(2)` passes 2.0 in xmm0.
    let (p, d) = check_source("ratio = sqrt(2); memcpy(name, node, 4); puts(0);", &env());
    assert!(p.is_some(), "{}", render_all(&d, ""));
}

#[test]
fn printf_formats_match_their_arguments() {
    assert_eq!(
        errors("printf(\"%s\\n\", count);"),
        "error: `%s` needs a `char *`, not `long`\n  |\n1 | printf(\"%s\\n\", count);\n  |                ^^^^^ use `%ld` for this `long`\n"
    );
    assert_eq!(
        errors("printf(\"%d and %d\", 1);"),
        "error: `%d` has no argument: `printf` is given 1 after its format, and the format reads 2\n  |\n1 | printf(\"%d and %d\", 1);\n  |                ^^ pass one argument per conversion, or write `%%` for a percent sign\n"
    );
    assert!(errors("printf(\"%f\", count);").contains("`%f` needs a `double`, not `long`"));
    assert!(errors("printf(\"%f\", count);").contains("cast it: `(double)...`"));
    assert!(errors("printf(\"%d\", ratio);").contains("`%d` needs an integer, not `double`"));
    assert!(
        errors("printf(\"%ld\", 5);").contains("`%ld` reads a 8-byte integer, but this is `int`")
    );
    assert!(errors("printf(\"%p\", ratio);").contains("`%p` needs a pointer"));
    assert!(errors("printf(\"%n\", count);").contains("`%n` needs a pointer"));
    assert!(errors("printf(\"%Lf\", ratio);").contains("`long double`"));
    assert!(errors("printf(\"100%\");").contains("the format ends in the middle of a conversion"));
    assert!(errors("printf(\"%y\", 1);").contains("unknown conversion `%y`"));
    // `*` widths read an int first.
    assert!(errors("printf(\"%*d\", 3);").contains("`%*d` has no argument"));
}

#[test]
fn printf_formats_that_print_something_sensible_warn() {
    for (src, warning) in [
        (
            "printf(\"%d\\n\", count);",
            "`%d` prints only the low 32 bits of this `long`",
        ),
        (
            "printf(\"%d\\n\", 1, 2);",
            "the format reads 1 argument(s); the rest are not printed",
        ),
        (
            "printf(\"%lx\\n\", name);",
            "`%lx` prints this pointer as an integer",
        ),
        (
            "printf(\"%s\\n\", node);",
            "`%s` prints a `char *`, and this is `struct node *`",
        ),
    ] {
        let (p, d) = check_source(src, &env());
        assert!(p.is_some(), "{}", render_all(&d, src));
        assert!(
            render_all(&d, src).contains(warning),
            "{}",
            render_all(&d, src)
        );
    }
    for src in [
        "printf(\"%c %hd %hhu %5.2f %-8s %p %zu %%\\n\", 'a', 1, 2, ratio, name, name, count);",
        "printf(\"%*.*s|\", 4, 2, name);",
        "printf(\"%1$d %1$d\", 5);",
        "printf(name, count);",
        "printf(\"%m\\n\");",
    ] {
        let (p, d) = check_source(src, &env());
        assert!(
            p.is_some() && d.is_empty(),
            "{src}: {}",
            render_all(&d, src)
        );
    }
}

#[test]
fn all_errors_are_reported_at_once() {
    let (_, d) = check_source("a = 1; b = 2; count++;", &env());
    assert_eq!(d.len(), 2);
}

#[test]
fn well_typed_snippets_check() {
    for src in [
        "count++;",
        "printf(\"%s %ld %f\\n\", $function, count, ratio);",
        "node->next->value += 1; count = node->value;",
        "if (name && *name == 'a') count = sizeof(struct node);",
        "ratio = count / 3.0; count = ratio > 1 ? 1 : 2;",
        "(void)printf(\"x\");",
    ] {
        let (p, d) = check_source(src, &env());
        assert!(p.is_some(), "{}", render_all(&d, src));
    }
}

#[test]
fn usual_arithmetic_conversions() {
    use IntKind::*;
    let t = |a, b| common_type(&Type::Int(a), &Type::Int(b));
    assert_eq!(t(Char, Char), Type::INT);
    assert_eq!(t(Int, UInt), Type::Int(UInt));
    assert_eq!(t(Long, UInt), Type::LONG);
    assert_eq!(t(Long, ULong), Type::ULONG);
    assert_eq!(t(UShort, Short), Type::INT);
    assert_eq!(common_type(&Type::Double, &Type::ULONG), Type::Double);
}

#[test]
fn statements_without_effect_warn_but_compile() {
    let (p, d) = check_source("count + 1;", &env());
    assert!(p.is_some());
    assert_eq!(d.len(), 1);
    assert!(!d[0].is_error());
    assert!(render_all(&d, "count + 1;").starts_with("warning: this statement has no effect"));
}

#[test]
fn declarations_evaluate_constant_initializers() {
    let d = super::declare("long n = 6 * 7", &env()).expect("declares");
    assert_eq!((d.name.as_str(), &d.ty), ("n", &Type::LONG));
    assert_eq!(d.init, 42i64.to_le_bytes());
    let d = super::declare("double r = 1 / 4.0", &env()).expect("declares");
    assert_eq!(d.init, 0.25f64.to_le_bytes());
    let d = super::declare("unsigned char b = -1", &env()).expect("declares");
    assert_eq!(d.init, [255]);
    let d = super::declare("char *p", &env()).expect("declares");
    assert_eq!(d.init, [0; 8]);
    let e = super::declare("long n = count", &env()).expect_err("not constant");
    assert!(render_all(&e, "long n = count").contains("cannot read variables"));
    assert!(super::declare("long n = \"x\"", &env()).is_err());
    assert!(super::declare("struct node n", &env()).is_err());
    assert!(super::declare("long", &env()).is_err());
}

#[test]
fn a_whole_struct_is_never_a_value_even_as_a_statement() {
    // `*node;` used to check, and the interpreter then read the struct's 16 bytes as one
    // value (the panic behind `print *head`).
    assert!(errors("*node;").contains("cannot be used as a value"));
}

#[test]
fn declare_it_first_only_where_declaring_is_the_fix() {
    assert!(errors("hits++;").contains("declare it first: `declare long hits`"));
    assert!(errors("hits = 1;").contains("declare it first"));
    let read = errors("count = hits;");
    assert!(!read.contains("declare it first"), "{read}");
}
