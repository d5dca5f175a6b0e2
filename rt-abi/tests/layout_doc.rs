//! `rt/LAYOUT.md` says what `rt-abi` defines: every struct table (a heading naming the struct
//! and its size, one row per field in order, with offset and type) matches the struct's
//! `FIELDS`, the title's ABI version is `ABI_VERSION`, and the C ABI section names every
//! export. A field moved, added or renamed on one side only fails here.

use gsh_rt_abi::descriptor::{Descriptor, PT_GSH_MEASURE};
use gsh_rt_abi::layout::*;
use gsh_rt_abi::{exports, Field, ABI_VERSION};

fn layout_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../rt/LAYOUT.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The structs the document must show: name, fields, size.
fn structs() -> Vec<(&'static str, &'static [Field], usize)> {
    use std::mem::size_of;
    vec![
        ("Root", Root::FIELDS, size_of::<Root>()),
        ("ArenaHeader", ArenaHeader::FIELDS, size_of::<ArenaHeader>()),
        ("ArenaChunk", ArenaChunk::FIELDS, size_of::<ArenaChunk>()),
        ("UnwindTable", UnwindTable::FIELDS, size_of::<UnwindTable>()),
        ("UnwindEntry", UnwindEntry::FIELDS, size_of::<UnwindEntry>()),
        (
            "ThreadHeader",
            ThreadHeader::FIELDS,
            size_of::<ThreadHeader>(),
        ),
        ("SlotRecord", SlotRecord::FIELDS, size_of::<SlotRecord>()),
        ("ShadowEntry", ShadowEntry::FIELDS, size_of::<ShadowEntry>()),
        ("PathRecord", PathRecord::FIELDS, size_of::<PathRecord>()),
        ("WalkMemo", WalkMemo::FIELDS, size_of::<WalkMemo>()),
        ("Descriptor", Descriptor::FIELDS, size_of::<Descriptor>()),
    ]
}

/// One table of the document: its heading and its rows (offset, type, field name).
struct Table {
    heading: String,
    rows: Vec<(usize, String, String)>,
}

/// Every `| off | type | field |` table, under the heading before it.
fn tables(doc: &str) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut heading = String::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with('#') {
            heading = line.trim_start_matches('#').trim().to_owned();
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if line.starts_with("| off | type | field |") {
            in_table = true;
            out.push(Table {
                heading: heading.clone(),
                rows: Vec::new(),
            });
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || cells.get(1).is_some_and(|c| c.starts_with("---")) {
            continue;
        }
        let offset = cells[1]
            .parse()
            .unwrap_or_else(|_| panic!("{heading}: offset `{}` is not a number", cells[1]));
        let name = cells[3]
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("{heading}: row `{line}` names no field in backquotes"));
        out.last_mut()
            .expect("a table")
            .rows
            .push((offset, cells[2].to_owned(), name.to_owned()));
    }
    out
}

/// Bytes of a type as the document writes it: `u32`, `i64`, `u8[8]`, `UnwindTable[64]`.
fn size_of_doc_type(ty: &str) -> usize {
    if let Some((elem, n)) = ty.strip_suffix(']').and_then(|t| t.split_once('[')) {
        let n: usize = n
            .parse()
            .unwrap_or_else(|_| panic!("array length in `{ty}`"));
        return size_of_doc_type(elem) * n;
    }
    match ty {
        "u8" | "i8" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" => 4,
        "u64" | "i64" => 8,
        other => structs()
            .into_iter()
            .find(|(name, _, _)| *name == other)
            .map(|s| s.2)
            .unwrap_or_else(|| panic!("unknown type `{other}` in rt/LAYOUT.md")),
    }
}

#[test]
fn every_struct_table_matches_its_definition() {
    let doc = layout_md();
    let tables = tables(&doc);
    for (name, fields, size) in structs() {
        let mine: Vec<&Table> = tables
            .iter()
            .filter(|t| t.heading.split_whitespace().next() == Some(name))
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "rt/LAYOUT.md needs one table headed `{name}`"
        );
        let t = mine[0];
        assert!(
            t.heading.contains(&format!("{size} bytes")),
            "rt/LAYOUT.md: `{}` should give the size, {size} bytes",
            t.heading
        );
        let doc_fields: Vec<&str> = t.rows.iter().map(|r| r.2.as_str()).collect();
        let code_fields: Vec<&str> = fields.iter().map(|f| f.name).collect();
        assert_eq!(doc_fields, code_fields, "rt/LAYOUT.md, {name}: fields");
        for ((offset, ty, field), f) in t.rows.iter().zip(fields) {
            assert_eq!(*offset, f.offset, "rt/LAYOUT.md, {name}.{field}: offset");
            assert_eq!(
                size_of_doc_type(ty),
                f.size,
                "rt/LAYOUT.md, {name}.{field}: type `{ty}` has the wrong size"
            );
        }
    }
    for t in &tables {
        let first = t.heading.split_whitespace().next().unwrap_or("");
        assert!(
            structs().iter().any(|s| s.0 == first),
            "rt/LAYOUT.md: the table under `{}` names no struct of rt-abi",
            t.heading
        );
    }
}

#[test]
fn the_title_and_the_c_abi_say_what_the_crate_defines() {
    let doc = layout_md();
    let title = doc.lines().next().expect("a title");
    assert!(
        title.contains(&format!("(ABI_VERSION {ABI_VERSION})")),
        "rt/LAYOUT.md's title `{title}` should name ABI_VERSION {ABI_VERSION}"
    );
    let c_abi = doc
        .split("## C ABI")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a C ABI section");
    for (name, _) in exports::all() {
        assert!(
            c_abi.contains(name),
            "rt/LAYOUT.md's C ABI section does not mention `{name}`"
        );
    }
    let pt = format!("{:#x}", PT_GSH_MEASURE);
    let pt_doc = doc
        .split("PT_GSH_MEASURE = ")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .expect("PT_GSH_MEASURE's value");
    assert_eq!(pt_doc.replace('_', ""), pt);
}
