//! Tests for output rendering: plain tables are stable and trimmed, JSON is one document with
//! stable keys and `0x` addresses.

use super::*;

fn sample() -> Output {
    let mut t =
        Table::new(vec!["Name", "Address", "Size", "Name source"]).with_title("2 functions");
    t.rows.push(vec![
        Cell::text("main"),
        Cell::Addr(0x401136),
        Cell::Num(42),
        Cell::text("symtab"),
    ]);
    t.rows.push(vec![
        Cell::text("helper"),
        Cell::Addr(0x401000),
        Cell::Num(7),
        Cell::Empty,
    ]);
    Output::Table(t)
}

#[test]
fn plain_table_is_aligned_and_trimmed() {
    let s = render_text(&sample(), Style::PLAIN);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], "2 functions");
    assert!(lines[1].contains("Name") && lines[1].contains("Name source"));
    assert!(lines.iter().all(|l| l == &l.trim_end()));
    assert!(!s.contains('│') && !s.contains('\x1b'));
    // Columns line up: the address column starts at the same place on every row.
    let col = lines[2].find("0x401136").unwrap();
    assert_eq!(lines[3].find("0x401000"), Some(col));
    // Numbers are right-aligned.
    assert_eq!(
        lines[2].find("42").unwrap() + 1,
        lines[3].find('7').unwrap()
    );
    assert!(lines[3].ends_with('-'));
}

#[test]
fn json_table_uses_column_keys() {
    let v: serde_json::Value = serde_json::from_str(&render_json(&sample())).unwrap();
    assert_eq!(v["title"], "2 functions");
    assert_eq!(v["rows"][0]["name"], "main");
    assert_eq!(v["rows"][0]["address"], "0x401136");
    assert_eq!(v["rows"][0]["size"], 42);
    assert_eq!(v["rows"][0]["name_source"], "symtab");
    assert!(v["rows"][1]["name_source"].is_null());
    assert!(!render_json(&sample()).contains('\n'));
}

#[test]
fn record_renders_keys_and_nested_table() {
    let mut members = Table::new(vec!["Offset", "Name"]);
    members.rows.push(vec![Cell::Num(0), Cell::text("x")]);
    let r = Output::Record(Record {
        title: None,
        fields: vec![
            ("Type", Cell::text("struct point")),
            (
                "Found by",
                Cell::List(vec!["symtab".into(), "eh_frame".into()]),
            ),
            ("Target", Cell::Symbol("malloc@plt".into())),
        ],
        table: Some(("members", members)),
    });
    let s = render_text(&r, Style::PLAIN);
    assert!(s.contains("  Type      struct point\n"), "{s}");
    assert!(s.contains("symtab, eh_frame"));
    assert!(s.contains("<malloc@plt>"));
    let v: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(v["found_by"][1], "eh_frame");
    assert_eq!(v["target"], "malloc@plt");
    assert_eq!(v["members"][0]["name"], "x");
}

#[test]
fn text_and_nothing() {
    assert_eq!(
        render_text(&Output::Text("hi".into()), Style::PLAIN),
        "hi\n"
    );
    assert_eq!(render_text(&Output::Nothing, Style::PLAIN), "");
    assert_eq!(render_json(&Output::Nothing), "{}");
    assert_eq!(
        render_json(&Output::Text("a\"b".into())),
        r#"{"text":"a\"b"}"#
    );
}

#[test]
fn empty_table_prints_only_title_and_note() {
    let mut t = Table::new(vec!["Name"]).with_title("0 functions");
    t.note = Some("(none)".into());
    assert_eq!(
        render_text(&Output::Table(t), Style::PLAIN),
        "0 functions\n(none)\n"
    );
}

#[test]
fn sections_print_in_order_and_nest_in_json() {
    let head = Output::Record(Record {
        title: None,
        fields: vec![("Function", Cell::text("main"))],
        table: None,
    });
    let mut edges = Table::new(vec!["From", "To", "Kind"]).with_title("1 edges");
    edges.rows.push(vec![
        Cell::Addr(0x10),
        Cell::Addr(0x20),
        Cell::text("taken"),
    ]);
    let out = Output::Sections(vec![("function", head), ("edges", Output::Table(edges))]);
    let text = render_text(&out, Style::PLAIN);
    assert!(text.starts_with("  Function  main\n\n1 edges\n"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&render_json(&out)).unwrap();
    assert_eq!(v["function"]["function"], "main");
    assert_eq!(v["edges"]["rows"][0]["to"], "0x20");
}
