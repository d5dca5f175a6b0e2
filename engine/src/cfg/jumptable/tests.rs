//! Jump tables against the linker's own record of them: switches of every shape gcc emits
//! (biased, negative, masked, 64-bit, in a loop over calls, char-typed) compiled at -O0..-O3,
//! PIE and non-PIE, with `-Wl,--emit-relocs` (every table entry is a relocation in the output)
//! and `-Wa,-L` (every table's label is a symbol). Each table gsh finds must start at a table's
//! label, read exactly its entries (up to the next label, or the first word no relocation
//! fills), and give every target a block.

use std::collections::BTreeSet;

use object::{Object, ObjectSection, ObjectSymbol};

use crate::addr::LinkAddr;
use crate::cfg::EdgeKind;
use crate::testutil::{compile, open};

pub(crate) const SWITCHES: &str = r#"
volatile int sink;
__attribute__((noinline)) int f(int k) { sink = k; return k * 3 + 1; }

/* Biased by 'a': `sub eax, 0x61` (or `lea eax, [rdi-0x61]`) before the compare. */
__attribute__((noinline)) int letters(int c) {
    switch (c) {
    case 'a': return f(1);  case 'c': return f(2);  case 'd': return f(3);
    case 'f': return f(4);  case 'h': return f(5);  case 'k': return f(6);
    case 'm': return f(7);  case 'p': return f(8);  case 's': return f(9);
    case 'x': return f(10); default: return -1;
    }
}

/* A large bias. */
__attribute__((noinline)) int big(int c) {
    switch (c) {
    case 1000: return f(11); case 1001: return f(12); case 1002: return f(13);
    case 1003: return f(14); case 1005: return f(15); case 1006: return f(16);
    case 1008: return f(17); case 1011: return f(18); default: return 0;
    }
}

/* Negative cases: the bias is added. */
__attribute__((noinline)) int negative(int c) {
    switch (c) {
    case -6: return f(21); case -5: return f(22); case -3: return f(23);
    case -1: return f(24); case 0: return f(25);  case 2: return f(26);
    case 4: return f(27);  case 5: return f(28);  default: return 7;
    }
}

/* Every value of a masked index has a case: no compare at all. */
__attribute__((noinline)) int masked(unsigned x) {
    switch (x & 7) {
    case 0: return f(31); case 1: return f(32); case 2: return f(33); case 3: return f(34);
    case 4: return f(35); case 5: return f(36); case 6: return f(37); default: return f(38);
    }
}

/* A 64-bit index with a bias. */
__attribute__((noinline)) long wide(long c) {
    switch (c) {
    case 100: return f(41); case 101: return f(42); case 103: return f(43);
    case 104: return f(44); case 106: return f(45); case 109: return f(46);
    case 110: return f(47); default: return 3;
    }
}

/* A character from memory, in a loop that calls out between switches: the table's base can
   wait in a callee-saved register across the calls. */
__attribute__((noinline)) int next(const char **p) { return **p ? *(*p)++ : -1; }
__attribute__((noinline)) int options(const char *s) {
    int c, n = 0;
    while ((c = next(&s)) != -1) {
        switch (c) {
        case '+': n += f(51); break; case '-': n -= f(52); break;
        case '0': n ^= f(53); break; case '9': n |= f(54); break;
        case '=': n += f(55) * 2; break; case '@': n -= f(56) * 3; break;
        case 'Z': n = f(n); break; default: n++; break;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    (void)argv;
    return letters(argc + 96) + big(argc + 999) + negative(argc - 3) + masked(argc)
        + (int)wide(argc + 99) + options("+-09=@Zq");
}
"#;

pub(crate) const SWITCH_FUNCTIONS: &[&str] =
    &["letters", "big", "negative", "masked", "wide", "options"];

/// The addresses of the relocated words and of the symbols in the binary's read-only data.
fn truth(path: &std::path::Path) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut relocs = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for section in file.sections() {
        if section.kind() != object::SectionKind::ReadOnlyData {
            continue;
        }
        relocs.extend(section.relocations().map(|(offset, _)| offset));
        let range = section.address()..section.address() + section.size();
        labels.extend(
            file.symbols()
                .map(|s| s.address())
                .filter(|a| range.contains(a)),
        );
    }
    assert!(!relocs.is_empty(), "no relocations kept in {path:?}");
    (relocs, labels)
}

#[test]
fn tables_match_the_relocations() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        for pie in [&["-fPIE", "-pie"][..], &["-fno-pie", "-no-pie"][..]] {
            let mut flags = vec![opt, "-Wl,--emit-relocs", "-Wa,-L"];
            flags.extend_from_slice(pie);
            let path = compile("switches", SWITCHES, false, &flags);
            check(&path, &flags);
        }
    }
}

/// Checks every switch function of the binary at `path` (built with `flags`, for messages).
pub(crate) fn check(path: &std::path::Path, flags: &[&str]) {
    let s = open(path);
    let m = s.main().unwrap();
    let (relocs, labels) = truth(path);
    let stride = if flags.contains(&"-pie") { 4 } else { 8 };
    for name in SWITCH_FUNCTIONS {
        let f = m.functions().by_name(name).next().unwrap().clone();
        let cfg = &m.analysis().function(f.id).cfg;
        assert!(
            cfg.unresolved.is_empty(),
            "{flags:?} {name}: {:?}",
            cfg.unresolved
        );
        assert_eq!(cfg.jump_tables.len(), 1, "{flags:?} {name}");
        let table = &cfg.jump_tables[0];
        let target = |at: u64| -> Option<u64> {
            let bytes = m.binary.bytes_at(LinkAddr(at), stride)?;
            Some(if stride == 8 {
                u64::from_le_bytes(bytes.try_into().ok()?)
            } else {
                table
                    .table
                    .0
                    .wrapping_add(i32::from_le_bytes(bytes.try_into().ok()?) as i64 as u64)
            })
        };
        // The assembler's table: relocated words from its label to the next.
        let start = table.table.0;
        assert!(
            labels.contains(&start),
            "{flags:?} {name}: no table's label at {start:#x}"
        );
        let end = labels
            .range(start + 1..)
            .next()
            .copied()
            .unwrap_or(u64::MAX);
        let mut expected = BTreeSet::new();
        let mut at = start;
        while at < end && relocs.contains(&at) {
            expected.insert(target(at).unwrap());
            at += stride;
        }
        assert_eq!(
            table.entries,
            (at - start) / stride,
            "{flags:?} {name}: entries of the table at {start:#x}"
        );
        let found: BTreeSet<u64> = table.targets.iter().map(|t| t.0).collect();
        assert_eq!(found, expected, "{flags:?} {name}: targets");
        for t in &table.targets {
            let block = cfg.block_at(*t).expect("a target starts a block");
            assert!(cfg
                .edges
                .iter()
                .any(|e| e.to == block && e.kind == EdgeKind::JumpTable));
        }
    }
}
