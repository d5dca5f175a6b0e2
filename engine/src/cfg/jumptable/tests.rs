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

pub(crate) const SWITCHES: &str = include_str!("../../../../tests/corpus/switches.c");

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
        check_access(&m.binary, cfg, table, flags, name);
        for t in &table.targets {
            let block = cfg.block_at(*t).expect("a target starts a block");
            assert!(cfg
                .edges
                .iter()
                .any(|e| e.to == block && e.kind == EdgeKind::JumpTable));
        }
    }
}

/// The table's description says how the jump reads it: the entry size and kind (gcc's PIE
/// offsets are relative to the table itself, and absolute entries are relocated only in a
/// PIE), an index bounded at least as far as the entries read, and an instruction reading
/// `stride` bytes through an index, in the jump's own block (at -O2 the `jmp` itself without
/// PIE).
fn check_access(
    binary: &crate::elf::Binary,
    cfg: &crate::cfg::Cfg,
    table: &crate::cfg::JumpTable,
    flags: &[&str],
    name: &str,
) {
    use crate::cfg::TableEntry;
    let pie = flags.contains(&"-pie");
    assert_eq!(table.stride, if pie { 4 } else { 8 }, "{flags:?} {name}");
    let want = match pie {
        true => TableEntry::Relative { base: table.table },
        false => TableEntry::Absolute { relocated: false },
    };
    assert_eq!(table.entry, want, "{flags:?} {name}");
    assert!(
        table.reach.is_some_and(|n| n >= table.entries),
        "{flags:?} {name}: reach {:?} of {} entries",
        table.reach,
        table.entries
    );
    let bytes = binary.bytes_at(table.load, 15).unwrap();
    let load = iced_x86::Decoder::with_ip(64, bytes, table.load.0, 0).decode();
    assert_eq!(
        load.memory_size().size() as u64,
        table.stride,
        "{flags:?} {name}: {load}"
    );
    assert_ne!(
        load.memory_index(),
        iced_x86::Register::None,
        "{flags:?} {name}: {load}"
    );
    assert_eq!(
        cfg.block_containing(table.load),
        cfg.block_containing(table.jump),
        "{flags:?} {name}: {load} is not in the jump's block"
    );
    if !pie && flags.contains(&"-O2") {
        assert_eq!(table.load, table.jump, "{flags:?} {name}");
    }
}

const GOTOS: &str = include_str!("../../../../tests/corpus/gotos.c");

/// Tables no compare bounds (computed gotos indexed by an `int`) end at the next symbol, here
/// the other table: before, the first read on into the second.
#[test]
fn unbounded_tables_end_at_the_next_symbol() {
    for flags in [
        &["-O2", "-fPIE", "-pie"][..],
        &["-O2", "-fno-pie", "-no-pie"][..],
        &["-O0", "-fPIE", "-pie"][..],
    ] {
        let path = compile("gotos", GOTOS, false, flags);
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let arrays: Vec<(u64, u64)> = file
            .symbols()
            .filter(|s| {
                let n = s.name().unwrap_or_default();
                n.starts_with("ops.") || n.starts_with("alt.")
            })
            .map(|s| (s.address(), s.size() / 8))
            .collect();
        assert_eq!(arrays.len(), 2, "{flags:?}: {arrays:?}");
        let s = open(&path);
        let m = s.main().unwrap();
        let f = m.functions().by_name("run").next().unwrap().clone();
        let cfg = &m.analysis().function(f.id).cfg;
        assert!(!cfg.jump_tables.is_empty(), "{flags:?}");
        for t in &cfg.jump_tables {
            let (_, entries) = arrays
                .iter()
                .find(|a| a.0 == t.table.0)
                .unwrap_or_else(|| panic!("{flags:?}: table {:#x} is no array", t.table));
            assert!(!t.bounded, "{flags:?}: {t:?}");
            // Nothing bounds a computed goto's index: no private copy of such a table is safe.
            assert_eq!(t.reach, None, "{flags:?}: {t:?}");
            assert_eq!(t.entries, *entries, "{flags:?}: {t:?}");
        }
    }
}

const BYTE_TABLES: &str = include_str!("../../../../tests/corpus/bytetables.c");

/// A byte bounds an index below 256, not a table at 256 entries. clang -O2 compares the low
/// byte after zero-extending it (`movzbl %r12b,%ecx; cmp $3,%cl`), or drops the compare when it
/// knows the range; before, both read 256 entries, on into the next function's table, and gave
/// `byte_guarded` 12 targets (8 in other functions) and `byte_only` 8. Likewise a mask bounds
/// the index, not the table: `masked` read 8 entries of a 5-entry table. A table that leads to
/// an unreachable default just past the function runs on past that entry (lua's
/// `luaC_barrierback_` read 4 of 34 entries when it stopped there).
#[test]
fn a_byte_index_reads_only_its_own_table() {
    for opt in ["-O0", "-O2"] {
        let path = compile(
            "bytetables",
            BYTE_TABLES,
            false,
            &[opt, "-fno-pie", "-no-pie"],
        );
        let s = open(&path);
        let m = s.main().unwrap();
        for (name, entries, guarded) in [
            ("byte_guarded", 4, true),
            ("byte_only", 8, false),
            ("masked", 5, true),
        ] {
            let f = m.functions().by_name(name).next().unwrap().clone();
            let cfg = &m.analysis().function(f.id).cfg;
            assert_eq!(
                cfg.jump_tables.len(),
                1,
                "{opt} {name}: {:?}",
                cfg.unresolved
            );
            let t = &cfg.jump_tables[0];
            assert_eq!(t.entries, entries, "{opt} {name}: {t:?}");
            let distinct = match name {
                "masked" => 3,
                "byte_only" => 7,
                _ => entries,
            };
            assert_eq!(t.targets.len() as u64, distinct, "{opt} {name}: {t:?}");
            assert_eq!(t.bounded, guarded, "{opt} {name}: {t:?}");
            let end = f.addr.0 + f.size;
            for target in &t.targets {
                // `byte_only`'s unreachable default is the padding right after it.
                assert!(
                    target.0 >= f.addr.0 && target.0 <= end,
                    "{opt} {name}: target {target:#x} outside the function"
                );
            }
        }
    }
}

const LOOP_BASE: &str = include_str!("../../../../tests/corpus/loopbase.c");

/// A table's base set before a loop whose header has many ways in (sqlite3's
/// `sqlite3_complete` under clang -O2 PIE): its value at the jump comes from the definitions
/// reaching it, not from a path that must reach the `lea`. Before, the walk back from the jump
/// spent its paths on the 30 ways from the default back to the latch and left the jump
/// unresolved.
#[test]
fn a_base_set_before_a_busy_loop_is_found() {
    for flags in [
        &["-O2", "-fPIE", "-pie"][..],
        &["-O0", "-fno-pie", "-no-pie"][..],
    ] {
        let path = compile("loopbase", LOOP_BASE, false, flags);
        let s = open(&path);
        let m = s.main().unwrap();
        let f = m.functions().by_name("classify").next().unwrap().clone();
        let cfg = &m.analysis().function(f.id).cfg;
        assert!(cfg.unresolved.is_empty(), "{flags:?}: {:?}", cfg.unresolved);
        assert_eq!(cfg.jump_tables.len(), 1, "{flags:?}");
        let t = &cfg.jump_tables[0];
        assert_eq!(t.entries, 4, "{flags:?}: {t:?}");
        assert_eq!(t.targets.len(), 4, "{flags:?}: {t:?}");
        assert!(t.bounded, "{flags:?}: {t:?}");
        for target in &t.targets {
            assert!(cfg.block_at(*target).is_some(), "{flags:?}: {target:#x}");
        }
    }
}

const MASKED_PAIR: &str = include_str!("../../../../tests/corpus/maskedpair.c");

/// A masked table followed by another table of the same function, found only through the
/// first one's cases (redis-server's `checkPrefixCollisionsOrReply`): the first ends where the
/// second starts. Before, it read 8 entries, the last 3 from the second table taken from the
/// wrong base: cases inside other instructions, blocks overlapping.
#[test]
fn a_table_ends_at_a_table_found_after_it() {
    let path = compile("maskedpair", MASKED_PAIR, false, &["-O2", "-fPIE", "-pie"]);
    let s = open(&path);
    let m = s.main().unwrap();
    let f = m.functions().by_name("twotables").next().unwrap().clone();
    let cfg = &m.analysis().function(f.id).cfg;
    assert!(cfg.unresolved.is_empty(), "{:?}", cfg.unresolved);
    let mut tables = cfg.jump_tables.clone();
    tables.sort_by_key(|t| t.table);
    let shape: Vec<(u64, usize)> = tables
        .iter()
        .map(|t| (t.entries, t.targets.len()))
        .collect();
    assert_eq!(shape, [(5, 5), (4, 4)], "{tables:?}");
    assert_eq!(tables[0].table.0 + 20, tables[1].table.0);
    // Every block is whole instructions of its own: none starts inside another.
    let mut blocks: Vec<(u64, u64)> = cfg.blocks.iter().map(|b| (b.start.0, b.end.0)).collect();
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "blocks {:#x?} and {:#x?} overlap",
            w[0],
            w[1]
        );
    }
}
