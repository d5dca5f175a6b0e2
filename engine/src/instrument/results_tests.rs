use super::*;

/// A results file as the runtime writes it (`rt/LAYOUT.md`'s example, two threads), with the
/// meta text `save` writes.
fn sample(clock: &str) -> String {
    let meta = Meta {
        version: META_VERSION,
        slots: vec![
            SavedSlot {
                slot: 0,
                id: 1,
                kind: Metric::Count,
                function: "work_item".into(),
                loop_name: None,
                counted: Counted::Entries,
                spans: Vec::new(),
            },
            SavedSlot {
                slot: 1,
                id: 2,
                kind: Metric::Time,
                function: "worker".into(),
                loop_name: None,
                counted: Counted::Entries,
                spans: Vec::new(),
            },
            SavedSlot {
                slot: 2,
                id: 3,
                kind: Metric::Profile,
                function: "leaf".into(),
                loop_name: None,
                counted: Counted::Entries,
                spans: Vec::new(),
            },
            SavedSlot {
                slot: 3,
                id: 4,
                kind: Metric::Count,
                function: "nested".into(),
                loop_name: Some("loop_1.1".into()),
                counted: Counted::Entries,
                spans: vec![[0x1100, 0x1120], [0x1140, 0x1150]],
            },
            SavedSlot {
                slot: 4,
                id: 4,
                kind: Metric::Count,
                function: "nested".into(),
                loop_name: Some("loop_1.1".into()),
                counted: Counted::Iterations,
                spans: Vec::new(),
            },
        ],
        coverage: Vec::new(),
    };
    let meta = serde_json::to_string(&meta).expect("meta");
    format!(
        r#"{{"abi":{ABI_VERSION},"clock":"{clock}","ns_per_tick":0.5,
 "slots":[{{"slot":0,"count":12,"ns":0}}],
 "threads":[{{"tid":123,"alive":false,
   "slots":[{{"slot":0,"count":5,"ns":0}},{{"slot":1,"count":2,"ns":1000}},{{"slot":3,"count":6,"ns":0}},{{"slot":4,"count":36,"ns":0}}],
   "paths":[{{"slot":2,"count":1,"ns":812,"ras":["0x401234","0x405678"]}}],
   "other":{{"count":0,"ns":0}},"abandoned":0,"unmatched":0,"untimed":0,"bad_slots":0}},
  {{"tid":124,"alive":true,
   "slots":[{{"slot":0,"count":7,"ns":0}},{{"slot":9,"count":1,"ns":0}}],
   "paths":[],
   "other":{{"count":0,"ns":0}},"abandoned":0,"unmatched":0,"untimed":0,"bad_slots":0}}],
 "meta":{meta},
 "modules":[{{"name":"/home/u/app.inst","base":"0x555555554000"}}]}}
"#
    )
}

fn path() -> &'static Path {
    Path::new("run.gsh.json")
}

#[test]
fn a_results_file_sums_threads_per_function() {
    let r = parse(&sample("rdtsc"), path()).expect("reads");
    let calls: Vec<(String, u64, Option<u64>, Option<u64>)> = r
        .values
        .iter()
        .map(|v| (v.what(), v.calls, v.iterations, v.ns))
        .collect();
    // Inline wall timers keep ticks (0.5 ns each); slot 9 is no measured function's; a
    // loop's iterations slot folds into its entries' row.
    assert_eq!(
        calls,
        vec![
            ("work_item".into(), 12, None, None),
            ("worker".into(), 2, None, Some(500)),
            ("leaf".into(), 0, None, None),
            ("nested loop_1.1".into(), 6, Some(36), None),
        ]
    );
    assert_eq!(r.paths.len(), 1);
    assert_eq!(r.paths[0].ras, vec![0x401234, 0x405678]);
    assert_eq!(r.paths[0].id, 3);
    assert_eq!(r.modules[0].base.0, 0x5555_5555_4000);
    // The measured loop's code, for call paths through it.
    let spans = vec![(
        "loop_1.1".to_owned(),
        vec![[0x1100, 0x1120], [0x1140, 0x1150]],
    )];
    assert_eq!(r.loops.get("nested"), Some(&spans));
    // With the monotonic clock the runtime timed in ns.
    let r = parse(&sample("monotonic"), path()).expect("reads");
    assert_eq!(r.values[1].ns, Some(1000));
}

#[test]
fn bad_files_say_what_is_wrong() {
    let good = sample("rdtsc");
    let cut = &good[..good.len() / 2];
    assert!(matches!(
        parse(cut, path()),
        Err(ResultsError::Truncated { .. })
    ));
    assert!(matches!(
        parse("", path()),
        Err(ResultsError::Truncated { .. })
    ));
    let passwd = "root:x:0:0:root:/root:/bin/bash\n";
    let e = parse(passwd, path()).expect_err("foreign");
    assert!(matches!(e, ResultsError::Foreign { .. }), "{e}");
    assert!(e.to_string().contains("not the results file"), "{e}");
    let e = parse(r#"{"name":"x"}"#, path()).expect_err("foreign");
    assert!(e.to_string().contains("`abi`"), "{e}");
    let other = good.replacen(&format!("\"abi\":{ABI_VERSION}"), "\"abi\":99", 1);
    let e = parse(&other, path()).expect_err("other ABI");
    assert!(matches!(e, ResultsError::OtherAbi { found: 99, .. }), "{e}");
    let no_threads = format!(r#"{{"abi":{ABI_VERSION},"clock":"rdtsc"}}"#);
    let e = parse(&no_threads, path()).expect_err("fields missing");
    assert!(matches!(e, ResultsError::Foreign { .. }), "{e}");
    let start = good.find("\"meta\":").expect("meta");
    let end = good.find(",\n \"modules\"").expect("modules");
    let no_meta = format!("{}\"meta\":null{}", &good[..start], &good[end..]);
    assert!(matches!(
        parse(&no_meta, path()),
        Err(ResultsError::NoMeta { .. })
    ));
    let meta_v2 = good.replacen("{\"version\":1,", "{\"version\":2,", 1);
    assert!(matches!(
        parse(&meta_v2, path()),
        Err(ResultsError::OtherMeta { found: 2, .. })
    ));
    let dir = std::env::temp_dir().join(format!("gsh-results-{}", std::process::id()));
    assert!(matches!(
        read(&dir.join("none.json")),
        Err(ResultsError::Missing { .. })
    ));
}

#[test]
fn calls_in_loops_name_them_outermost_first() {
    use super::super::loop_measure::in_spans;
    let loops = vec![
        ("loop_1.1".to_owned(), vec![[0x20, 0x30]]),
        ("loop_1".to_owned(), vec![[0x10, 0x40]]),
        ("loop_2".to_owned(), vec![[0x50, 0x60], [0x70, 0x80]]),
    ];
    assert_eq!(in_spans(&loops, 0x28), vec!["loop_1", "loop_1.1"]);
    assert_eq!(in_spans(&loops, 0x10), vec!["loop_1"]);
    assert_eq!(in_spans(&loops, 0x30), vec!["loop_1"]);
    assert_eq!(in_spans(&loops, 0x7f), vec!["loop_2"]);
    assert!(in_spans(&loops, 0x60).is_empty());
    assert!(in_spans(&loops, 0x40).is_empty());
}
