//! Measuring through the shell: `count` and `report` on live processes, with gsh's runtime
//! library loaded into them. Counts must be exact with several threads (no lost updates, no
//! event dropped while a thread gets its block), readable while the process runs, and the
//! program's output must be unchanged.

use std::time::{Duration, Instant};

use gsh_tests::server::{expected, spawn};
use gsh_tests::{gsh_c, gsh_json_all, Mutatee, Variant};

/// The `Calls` of `function` in every `report` table of a plain-text transcript, in order.
fn calls(stdout: &str, function: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [_, name, n] if name == function => n.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn four_threads_count_exactly_with_run() {
    for v in [Variant::O2, Variant::O0, Variant::NoPie] {
        let m = Mutatee::new("threads");
        let exe = m.path(v);
        let o = gsh_c("count work_item worker; run; report", &exe);
        o.assert_code(0);
        assert!(
            o.stdout.contains("exited with code 0"),
            "{v:?}: {}",
            o.stdout
        );
        assert!(o.stdout.contains("final counts"), "{v:?}: {}", o.stdout);
        assert_eq!(calls(&o.stdout, "work_item"), [4000], "{v:?}: {}", o.stdout);
        assert_eq!(calls(&o.stdout, "worker"), [4], "{v:?}: {}", o.stdout);
        // The program's own output is untouched.
        for line in m.expected_stdout().lines() {
            assert!(
                o.stdout.contains(line),
                "{v:?}: missing {line:?}: {}",
                o.stdout
            );
        }
    }
}

#[test]
fn report_as_json_and_counting_started_at_main() {
    let exe = Mutatee::new("threads").path(Variant::O2);
    let dir = gsh_tests::target_dir().join("measure-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let out = dir.join("json");
    // The program's output goes to a file, so stdout is only gsh's JSON.
    let docs = gsh_json_all(
        &format!(
            "count 'work_*'; start > {}; continue; report",
            out.display()
        ),
        &exe,
    );
    let report = docs.last().expect("a report");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["function"], "work_item", "{report}");
    assert_eq!(rows[0]["calls"], 4000, "{report}");
}

#[test]
fn user_snippets_cannot_use_the_runtime_counter() {
    let exe = Mutatee::new("threads").path(Variant::O2);
    let o = gsh_c("at work_item entry { __gsh_rt_count(0, 0, 0); }", &exe);
    assert_ne!(o.code, Some(0), "{}", o.stdout);
    assert!(o.stderr.contains("reserved for gsh"), "{}", o.stderr);
}

#[test]
fn report_without_counts_or_process_explains() {
    let exe = Mutatee::new("threads").path(Variant::O2);
    let o = gsh_c("report", &exe);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("no process"), "{}", o.stderr);
    let o = gsh_c("count no_such_function_here", &exe);
    assert_ne!(o.code, Some(0));
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn count_on_an_attached_server_while_it_runs() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let (threads, rounds) = (4, 1500);
    let dir = gsh_tests::target_dir().join("measure-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let out = dir.join("attach");
    let mut child = spawn(&exe, threads, rounds, &out);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(100));
    let o = gsh_c(
        &format!(
            "attach {pid}; count handle_request; continue &; sleep 0.3; report; sleep 0.3; \
             report; delete 1; detach"
        ),
        &exe,
    );
    if !o.success() {
        let status = child.wait();
        panic!("gsh failed: {}\nserver: {status:?}", o.stderr);
    }
    let seen = calls(&o.stdout, "handle_request");
    assert_eq!(seen.len(), 2, "{}", o.stdout);
    assert!(seen[0] > 0, "counted while running: {}", o.stdout);
    assert!(seen[1] > seen[0], "still counting: {}", o.stdout);
    assert!(o.stdout.contains("detached"), "{}", o.stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "server ended with {status}");
            break;
        }
        assert!(Instant::now() < deadline, "server did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = std::fs::read_to_string(&out).expect("server output");
    assert_eq!(got, expected(&exe, threads, rounds));
}
