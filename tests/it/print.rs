//! `print` as gdb prints: whole structs, arrays of structs, unions, bit-fields, enums and
//! char arrays from DWARF; globals of every module (`MODULE!NAME` too) wherever the process
//! stopped. The expected values are gdb 13's for the same program and breakpoint, with
//! addresses masked.

use gsh_tests::{gsh_c, Mutatee, Variant};

/// `text` with every hex number replaced by `0x?`, so runs at different addresses compare.
fn masked(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        out.push_str("0x?");
        rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out.push_str(rest);
    out
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = gsh_tests::target_dir().join("print-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

#[test]
fn structs_arrays_unions_bitfields_and_enums_print_as_gdb_prints_them() {
    let m = Mutatee::new("shapes");
    for v in [Variant::O0, Variant::O2] {
        let out = scratch(&format!("shapes-{}", v.suffix()));
        let o = gsh_c(
            &format!(
                "break classify entry; run > {}; print *head; print head->pts[3]; \
                 print head->name; print shapes[1].kind; print head->next->sides; \
                 print head->next->level; print zeros; print greeting; print head; \
                 print shapes[2].v; print head->pts[1].y + 10; print *&shapes[1].origin; \
                 p/x head->pts[3]; print/x head->id + 5; print &shapes[1]; \
                 print head->pts[1]@2; print shapes[1].name[0]@6",
                out.display()
            ),
            &m.path(v),
        );
        o.assert_code(0);
        let got = masked(&o.stdout);
        for want in [
            "*head = {id = 10, kind = KIND_LINE, origin = {x = 0, y = 0}, pts = {{x = 0, y = 0}, \
             {x = 1, y = 1}, {x = 2, y = 2}, {x = 3, y = 3}}, name = \
             \"shape0\\000\\000\\000\\000\\000\\000\\000\\000\\000\", ready = 1, sides = 3, \
             level = 0, v = {l = 0, d = 0}, next = 0x? <shapes+88>}\n",
            "head->pts[3] = {x = 3, y = 3}\n",
            "head->name = \"shape0\\000\\000\\000\\000\\000\\000\\000\\000\\000\"\n",
            "shapes[1].kind = KIND_POLY\n",
            "head->next->sides = 4\n",
            "head->next->level = -1\n",
            "zeros = {0 <repeats 16 times>}\n",
            "greeting = 0x? \"hello\"\n",
            "head = (struct shape *) 0x? <shapes>\n",
            "shapes[2].v = {l = 4613937818241073152, d = 3}\n",
            "head->pts[1].y + 10 = 11\n",
            "*&shapes[1].origin = {x = 1, y = -1}\n",
            "&shapes[1] = (struct shape *) 0x? <shapes+88>\n",
            "head->pts[1]@2 = {{x = 1, y = 1}, {x = 2, y = 2}}\n",
            "shapes[1].name[0]@6 = \"shape1\"\n",
        ] {
            assert!(got.contains(want), "{v:?}: want {want}in {got}");
        }
        // `print/x`, unmasked.
        for want in [
            "head->pts[3] = {x = 0x3, y = 0x3}\n",
            "head->id + 5 = 0xf\n",
        ] {
            assert!(o.stdout.contains(want), "{v:?}: want {want}in {}", o.stdout);
        }
    }
}

#[test]
fn globals_of_every_module_are_found_wherever_the_process_stopped() {
    let m = Mutatee::new("shapes");
    let out = scratch("shapes-libc");
    let exe = m.path(Variant::O0);
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    let o = gsh_c(
        &format!(
            "break libc.so.6!puts entry; run > {}; print global_sum; print {name}!global_sum; \
             print global_sum * 2; print shapes[0].id",
            out.display()
        ),
        &exe,
    );
    o.assert_code(0);
    let qualified = format!("{name}!global_sum = 232\n");
    for want in [
        "global_sum = 232\n",
        qualified.as_str(),
        "global_sum * 2 = 464\n",
        "shapes[0].id = 10\n",
    ] {
        assert!(o.stdout.contains(want), "want {want}in {}", o.stdout);
    }
    // An unknown name is not something to declare when it is only read.
    let o = gsh_c(
        &format!(
            "break classify entry; run > {}; print no_such_thing",
            out.display()
        ),
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(
        o.stderr.contains("unknown name `no_such_thing`"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("declare it first"), "{}", o.stderr);
    let o = gsh_c(
        &format!(
            "break classify entry; run > {}; print nomodule!x",
            out.display()
        ),
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(
        o.stderr.contains("no loaded module is named `nomodule`"),
        "{}",
        o.stderr
    );
}

#[test]
fn locals_registers_memory_and_literals_of_the_selected_frame() {
    let m = Mutatee::new("shapes");
    for v in [Variant::O0, Variant::O2] {
        let out = scratch(&format!("shapes-locals-{}", v.suffix()));
        // After the call that weighed the third shape (78): the first two weighed 14 + 40,
        // and one of them was a polygon. At -O2 `total`, `count` and `s` live in registers
        // that location lists name.
        let o = gsh_c(
            &format!(
                "break classify call weigh after if ($return == 78); run > {}; print total; \
                 print count; print s->id; print total + 1; print count * 2 + s->id; print s->pts[3]; x/4dw s->pts; print $rip; print $rax * 2; \
                 show registers; print \"hi\\n\"; print 'a'; show locals; up; \
                 print global_sum",
                out.display()
            ),
            &m.path(v),
        );
        o.assert_code(0);
        let got = masked(&o.stdout);
        for want in [
            "total = 54\n",
            "count = 1\n",
            "s->id = 12\n",
            "total + 1 = 55\n",
            "count * 2 + s->id = 14\n",
            "s->pts[3] = {x = 5, y = 9}\n",
            "0x? <shapes+192>:\t2\t0\t3\t3\n",
            "$rip = (void (*)()) 0x? <classify+",
            "$rax * 2 = 156\n",
            "\"hi\\n\" = 0x? \"hi\\n\"\n",
            "'a' = 97\n",
            "global_sum = 100\n",
        ] {
            assert!(got.contains(want), "{v:?}: want {want:?} in {got}");
        }
        assert!(
            o.stdout.lines().any(|l| l.starts_with("rsp ")),
            "{v:?}: {}",
            o.stdout
        );
        // `show locals`: the parameter, the loop's `s`, then the function's own locals.
        assert!(
            got.contains("head = (struct shape *) 0x? <shapes>\ns = (struct shape *) 0x? <shapes+176>\ncount = 1\ntotal = 54\n"),
            "{v:?}: {got}"
        );
    }
    // A caller's locals, by unwinding to its frame: at -O0 in memory there; at -O2 in
    // caller-saved registers (r8-r10) that gcc keeps across the call because it knows
    // `weigh` leaves them alone, which the callee analysis proves too.
    for v in [Variant::O0, Variant::O2] {
        let out = scratch(&format!("shapes-up-{}", v.suffix()));
        let o = gsh_c(
            &format!(
                "break weigh entry if (s->id == 12); run > {}; up; print total; print count; \
                 print s; print head->id",
                out.display()
            ),
            &m.path(v),
        );
        o.assert_code(0);
        let got = masked(&o.stdout);
        for want in [
            "total = 54\n",
            "count = 1\n",
            "s = (struct shape *) 0x? <shapes+176>\n",
            "head->id = 10\n",
        ] {
            assert!(got.contains(want), "{v:?}: want {want:?} in {got}");
        }
    }
}

#[test]
fn entry_values_are_found_at_the_callers_call_site() {
    // At -O2, when classify calls puts, `head` is no longer in any register: its location
    // list says "the value rdi had at entry", which main's call site says is `&shapes[0]`.
    let m = Mutatee::new("shapes");
    let out = scratch("shapes-entry");
    let o = gsh_c(
        &format!(
            "break libc.so.6!puts entry; run > {}; up; print head; print head->id",
            out.display()
        ),
        &m.path(Variant::O2),
    );
    o.assert_code(0);
    let got = masked(&o.stdout);
    for want in ["head = (struct shape *) 0x? <shapes>\n", "head->id = 10\n"] {
        assert!(got.contains(want), "want {want:?} in {got}");
    }
}
