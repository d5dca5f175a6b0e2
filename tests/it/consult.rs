//! `consult`: the automated search on a started program, its JSON shape, its graph file and
//! its refusals.

use gsh_tests::{gsh_c, gsh_json_all, Mutatee, Variant};

/// A worker computing and the main thread polling: the search names the worker CPU-bound (or
/// waiting for a CPU, on a loaded machine) and the main thread waiting outside, nothing else,
/// within seconds, and writes the graph it says it writes.
#[test]
fn consult_finds_the_computing_thread_and_the_waiting_one() {
    let m = Mutatee::new("bottleneck");
    let exe = m.path(Variant::O2);
    let dot = std::env::temp_dir().join(format!("gsh-consult-{}.dot", std::process::id()));
    let docs = gsh_json_all(&format!("consult --for 20 --dot {}", dot.display()), &exe);
    let r = docs.last().expect("a result");
    let findings = r["findings"].as_array().expect("findings");
    let pid_thread = |h: &str| {
        findings
            .iter()
            .filter(|f| f["hypothesis"] == h)
            .map(|f| f["thread"].as_u64().expect("a thread"))
            .collect::<Vec<_>>()
    };
    let waiting = pid_thread("ExternalWait");
    assert_eq!(waiting.len(), 1, "{r:#}");
    let busy: Vec<u64> = pid_thread("CPUBound")
        .into_iter()
        .chain(pid_thread("RunQueue"))
        .collect();
    assert!(!busy.is_empty(), "{r:#}");
    assert!(
        !busy.contains(&waiting[0]),
        "the poller is not the cruncher: {r:#}"
    );
    for f in findings {
        assert!(
            matches!(
                f["hypothesis"].as_str(),
                Some("CPUBound" | "RunQueue" | "ExternalWait")
            ),
            "{r:#}"
        );
        assert_eq!(f["focus"][0], "bottleneck-O2", "{r:#}");
        let x = f["fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{r:#}");
    }
    assert!(r["seconds"].as_f64().unwrap() < 20.0, "{r:#}");
    assert!(r["tested"].as_u64().unwrap() >= 5, "{r:#}");
    assert!(r["overhead"].as_f64().unwrap() < 0.5, "{r:#}");
    assert!(r["graph"].as_array().unwrap().len() >= 7, "{r:#}");
    let graph = std::fs::read_to_string(&dot).expect("the --dot file");
    let _ = std::fs::remove_file(&dot);
    assert!(graph.starts_with("digraph consult {"), "{graph}");
    assert!(graph.contains("ExternalWait"), "{graph}");
}

#[test]
fn consult_refuses_bad_settings_before_starting_anything() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    for (cmd, says) in [
        (
            "consult --threshold Slow=0.2",
            "no hypothesis is named `Slow`",
        ),
        (
            "consult --threshold CPUBound=2",
            "must be a fraction from 0 to 1",
        ),
        ("consult --cost 0", "--cost must be a percentage"),
        ("consult --for -1", "--for must be a number of seconds"),
        ("consult now", "consult"),
    ] {
        let out = gsh_c(cmd, &exe);
        assert!(!out.success(), "{cmd}: {out}");
        assert!(out.stderr.contains(says), "{cmd}: {out}");
        assert!(
            !out.stderr.contains("started"),
            "{cmd} started the program: {out}"
        );
    }
}
