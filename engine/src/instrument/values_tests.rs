//! Values printed as gdb prints them, over a program's DWARF and the initial bytes of its
//! globals (read from the file, so no process is needed).

use super::*;
use crate::testutil::{compile, open};
use crate::LinkAddr;

const SOURCE: &str = r#"
enum kind { KIND_NONE, KIND_LINE = 3, KIND_POLY };
struct pt { int x; int y; };
union val { long l; double d; };
typedef struct shape {
    int id;
    enum kind kind;
    struct pt origin;
    struct pt pts[4];
    char name[16];
    unsigned ready : 1;
    unsigned sides : 3;
    int level : 5;
    union val v;
    struct shape *next;
} shape_t;
shape_t one = {7, KIND_LINE, {1, 2}, {{1, 1}, {2, 4}, {3, 9}, {4, 16}}, "line", 1, 5, -3,
               {.d = 1.5}, 0};
int zeros[16];
int mixed[14] = {1, 2};
char empty[16];
char long_name[32] = "abc";
const char *greeting = "hi\n";
_Bool yes = 1;
char letter = 'a';
struct wrap { int tag; union { int i; float f; }; struct { short a, b; } pair; };
struct wrap wrapped = {1, {.i = 7}, {2, 3}};
double third = 1.0 / 3;
float tenth = 0.1f;
int main(void) { return one.id + zeros[0] + mixed[0] + wrapped.tag; }
"#;

fn printed(name: &str) -> String {
    printed_as(name, None)
}

fn printed_as(name: &str, format: Option<char>) -> String {
    let path = compile("values", SOURCE, false, &["-O0", "-g", "-no-pie"]);
    let session = open(&path);
    let module = session.main().unwrap();
    let debug = module.debug_info().expect("debug info");
    let var = debug.variable(name).expect("variable");
    let types = Types::new(Some(debug));
    let size = types.size(&var.type_name).expect("size");
    let binary = &module.binary;
    let bytes = binary
        .bytes_at(var.addr.unwrap(), size)
        .map(<[u8]>::to_vec)
        .unwrap_or_else(|| vec![0; size as usize]);
    let mut read = |a: u64, n: usize| binary.bytes_at(LinkAddr(a), n as u64).map(<[u8]>::to_vec);
    let symbol = |_: u64| None;
    let mut p = Printer {
        types,
        read: &mut read,
        symbol: &symbol,
        format,
    };
    p.top(&var.type_name, &bytes)
}

#[test]
fn structs_arrays_unions_bitfields_and_enums_print_as_gdb_prints_them() {
    assert_eq!(
        printed("one"),
        "{id = 7, kind = KIND_LINE, origin = {x = 1, y = 2}, pts = {{x = 1, y = 1}, \
         {x = 2, y = 4}, {x = 3, y = 9}, {x = 4, y = 16}}, name = \"line\", '\\000' \
         <repeats 11 times>, ready = 1, sides = 5, level = -3, v = {l = 4609434218613702656, \
         d = 1.5}, next = 0x0}"
    );
    assert_eq!(printed("zeros"), "{0 <repeats 16 times>}");
    assert_eq!(printed("mixed"), "{1, 2, 0 <repeats 12 times>}");
    assert_eq!(printed("empty"), "'\\000' <repeats 15 times>");
    assert_eq!(printed("long_name"), "\"abc\", '\\000' <repeats 28 times>");
    assert!(
        printed("greeting").ends_with(" \"hi\\n\""),
        "{}",
        printed("greeting")
    );
    assert_eq!(printed("yes"), "true");
    assert_eq!(printed("letter"), "97 'a'");
    // Anonymous members and members of anonymous types; floats with gdb's digits.
    assert_eq!(
        printed("wrapped"),
        "{tag = 1, {i = 7, f = 9.80908925e-45}, pair = {a = 2, b = 3}}"
    );
    assert_eq!(printed("third"), "0.33333333333333331");
    assert_eq!(printed("tenth"), "0.100000001");
}

#[test]
fn floats_print_with_the_digits_gdb_uses() {
    assert_eq!(float_text(1.5, 17), "1.5");
    assert_eq!(float_text(3.0, 17), "3");
    assert_eq!(float_text(0.1, 17), "0.10000000000000001");
    assert_eq!(float_text(1e20, 17), "1e+20");
    assert_eq!(float_text(-2.5e-7, 17), "-2.4999999999999999e-07");
    assert_eq!(float_text(123456789.0, 9), "123456789");
}

#[test]
fn print_formats_apply_to_every_scalar_inside() {
    assert_eq!(
        printed_as("mixed", Some('x')),
        "{0x1, 0x2, 0x0 <repeats 12 times>}"
    );
    assert_eq!(printed_as("letter", Some('x')), "0x61");
    assert_eq!(printed_as("letter", Some('t')), "1100001");
    assert_eq!(printed_as("letter", Some('z')), "0x61");
    assert!(printed_as("one", Some('x')).starts_with("{id = 0x7, kind = 0x3, origin = {x = 0x1"));
    assert!(printed_as("long_name", Some('d')).starts_with("{97, 98, 99, 0 <repeats 29 times>}"));
}

#[test]
fn char_arrays_fold_only_long_runs() {
    assert_eq!(
        char_array(b"basic\0\0\0\0\0\0\0\0\0\0\0"),
        "\"basic\\000\\000\\000\\000\\000\\000\\000\\000\\000\\000\""
    );
    assert_eq!(char_array(b"a\"b\0"), "\"a\\\"b\"");
    assert_eq!(
        char_array(b"xxxxxxxxxxxxy"),
        "'x' <repeats 12 times>, \"y\""
    );
}
