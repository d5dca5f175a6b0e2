//! `watch` on live processes: the counts of a running server sampled on schedule without
//! disturbing it (its output is unchanged), the history growing one bucket per sample, the
//! watch ending with the final values when the process exits and on Ctrl-C, and clear errors.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gsh_tests::server::{expected, spawn, wait_output};
use gsh_tests::{gsh_c, gsh_json_all, Gsh, Mutatee, Variant};
use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let dir = gsh_tests::target_dir().join("watch-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

/// The `watch` tables of a `--json` transcript: the documents whose title names a sample.
fn samples(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| d["title"].as_str().is_some_and(|t| t.contains(", sample ")))
        .collect()
}

/// The row of `metric` in one `watch` table.
fn row<'a>(table: &'a Value, metric: &str) -> &'a Value {
    table["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["metric"] == metric))
        .unwrap_or_else(|| panic!("no `{metric}` row in {table}"))
}

#[test]
fn watch_samples_an_attached_server_without_disturbing_it() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let (threads, rounds) = (2, 3000);
    let out = scratch("attach");
    let child = spawn(&exe, threads, rounds, &out);
    let pid = child.id();
    let docs = gsh_json_all(
        &format!(
            "attach {pid}; count handle_request; continue &; watch 0.2 --samples 5; delete 1; \
             detach"
        ),
        &exe,
    );
    let tables = samples(&docs);
    assert_eq!(tables.len(), 5, "{docs:#?}");
    let mut previous: Option<u64> = None;
    for (i, t) in tables.iter().enumerate() {
        let k = i + 1;
        assert!(
            t["title"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("sample {k} of 5"))),
            "{t}"
        );
        let r = row(t, "handle_request calls");
        assert_eq!(r["instrumentation"], 1, "{t}");
        let total = r["total"].as_u64().expect("total");
        let rate = r["per_second"].as_u64().expect("a rate");
        // The server never idles: two threads each take a request per millisecond or so.
        assert!(rate > 0 && rate < 10_000, "implausible rate: {t}");
        if let Some(before) = previous {
            assert!(total >= before, "the total went down: {docs:#?}");
            // The rate is the growth over the 0.2 s interval, rounded.
            let grew = (total - before) as f64;
            assert!(
                (rate as f64 * 0.2 - grew).abs() <= 1.0,
                "{rate}/s vs {grew}: {t}"
            );
        }
        previous = Some(total);
        // Samples on schedule fill one bucket each, all busy.
        let history = r["history"].as_str().expect("history");
        assert_eq!(history.chars().count(), k, "{t}");
        assert!(history.chars().all(|c| c != ' '), "an idle bucket: {t}");
        assert_eq!(r["bucket"], "200ms", "{t}");
    }
    assert!(previous.is_some_and(|t| t > 0), "{docs:#?}");
    assert_eq!(wait_output(child, &out), expected(&exe, threads, rounds));
}

#[test]
fn a_long_watch_folds_its_history_into_wider_buckets() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("folds");
    // 80 samples of 50 ms outgrow the 64 buckets once: 40 buckets of 100 ms.
    let docs = gsh_json_all(
        &format!(
            "count handle_request; start 1 20000 > {}; continue &; watch 0.05 --for 4; kill",
            out.display()
        ),
        &exe,
    );
    let tables = samples(&docs);
    assert_eq!(tables.len(), 80, "{:#?}", tables.last());
    let at = |k: usize| row(tables[k - 1], "handle_request calls");
    assert_eq!(at(64)["bucket"], "50ms");
    assert_eq!(
        at(64)["history"].as_str().map(|h| h.chars().count()),
        Some(64)
    );
    assert_eq!(at(65)["bucket"], "100ms");
    assert_eq!(
        at(65)["history"].as_str().map(|h| h.chars().count()),
        Some(33)
    );
    assert_eq!(
        at(80)["history"].as_str().map(|h| h.chars().count()),
        Some(40)
    );
}

#[test]
fn watch_ends_with_the_final_values_when_the_process_exits() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("exits");
    let begun = Instant::now();
    let docs = gsh_json_all(
        &format!(
            "count handle_request; start 1 300 > {}; continue &; watch 0.1 --for 30",
            out.display()
        ),
        &exe,
    );
    // 300 requests take about a third of a second, not the 30 s asked for.
    assert!(begun.elapsed() < Duration::from_secs(20), "{docs:#?}");
    let tables = samples(&docs);
    let last = tables.last().expect("at least one table");
    assert!(
        last["note"]
            .as_str()
            .is_some_and(|n| n.contains("exited with code 0: these are its final values")),
        "{last}"
    );
    assert_eq!(row(last, "handle_request calls")["total"], 300, "{last}");
    assert!(tables.len() < 300, "{docs:#?}");
}

#[test]
fn watch_shows_a_stopped_process_once_and_does_not_resume_it() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("stopped");
    let docs = gsh_json_all(
        &format!(
            "count handle_request; start > {}; watch 0.1 --samples 3; status",
            out.display()
        ),
        &exe,
    );
    let watch = &docs[docs.len() - 2];
    assert!(
        watch["note"]
            .as_str()
            .is_some_and(|n| n.contains("is stopped")),
        "{watch}"
    );
    let r = row(watch, "handle_request calls");
    assert_eq!(r["total"], 0, "{watch}");
    assert_eq!(r["history"], "", "{watch}");
    assert_eq!(
        docs.last().expect("status")["state"],
        "stopped",
        "{docs:#?}"
    );
}

#[test]
fn watch_ends_when_a_breakpoint_stops_the_process() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("breakpoint");
    // checksum's argument passes 4500 a few hundred requests in (tests/mutatees/server.c).
    let docs = gsh_json_all(
        &format!(
            "count handle_request; break checksum entry if ($0 > 4500); start 1 3000 > {}; \
             continue &; watch 0.1 --for 30; report; kill",
            out.display()
        ),
        &exe,
    );
    let tables = samples(&docs);
    let last = tables.last().expect("at least one table");
    assert!(
        last["note"]
            .as_str()
            .is_some_and(|n| n.contains("is stopped")),
        "{last}"
    );
    let report = &docs[docs.len() - 2];
    assert_eq!(
        row(last, "handle_request calls")["total"],
        report["values"][0]["calls"],
        "{docs:#?}"
    );
}

#[test]
fn watch_prints_one_plain_table_per_sample_off_a_terminal() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("plain");
    let o = gsh_c(
        &format!(
            "count handle_request; start 1 2000 > {}; continue &; watch 0.1 --samples 2; kill",
            out.display()
        ),
        &exe,
    );
    o.assert_success();
    assert!(o.stdout.contains("sample 1 of 2"), "{o}");
    assert!(o.stdout.contains("sample 2 of 2"), "{o}");
    assert_eq!(o.stdout.matches("Per second").count(), 2, "{o}");
    assert!(
        !o.stdout.contains('\x1b'),
        "no cursor movement in a pipe: {o}"
    );
}

#[test]
fn ctrl_c_ends_the_watch_and_the_process_runs_on() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("ctrl-c");
    let mut gsh = Command::new(Gsh::binary())
        .arg("-c")
        .arg(format!(
            "count handle_request; start 1 20000 > {}; continue &; watch 0.1; status; kill",
            out.display()
        ))
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("NO_COLOR", "1")
        .spawn()
        .expect("run gsh");
    let stdout = gsh.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // The handshake: the second table is out, so the watch is under way.
    for line in lines.by_ref() {
        let line = line.expect("gsh output");
        let second = line.contains(", sample 2,");
        seen.push(line);
        if second {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains(", sample 2,")),
        "no second table: {seen:#?}"
    );
    // SAFETY: kill takes only integers; the pid is our own child, not yet waited for.
    unsafe { libc::kill(gsh.id() as i32, libc::SIGINT) };
    seen.extend(lines.map(|l| l.expect("gsh output")));
    let status = gsh.wait().expect("wait for gsh");
    let text = seen.join("\n");
    assert!(status.success(), "{status}: {text}");
    assert!(text.contains("watch interrupted"), "{text}");
    assert!(text.contains("State    running"), "{text}");
    assert!(text.contains("killed"), "{text}");
}

#[test]
fn watch_errors_explain() {
    let exe = Mutatee::new("server").path(Variant::O2);
    let out = scratch("errors");
    let started = format!("count handle_request; start > {}", out.display());
    for (commands, message) in [
        ("watch".to_owned(), "there is no process to watch"),
        (
            format!("start > {}; continue &; watch 0.1", out.display()),
            "nothing is measured",
        ),
        (
            format!("{started}; watch 0.01"),
            "from 0.05 to 86400, not `0.01`",
        ),
        (format!("{started}; watch abc"), "not `abc`"),
        (format!("{started}; watch 1e9"), "not `1e9`"),
        (
            format!("{started}; watch --samples 0"),
            "--samples must be at least 1",
        ),
        (format!("{started}; watch --samples x"), "whole number"),
        (format!("{started}; watch --for nan"), "--for must be"),
        (format!("{started}; watch 1 2"), "unexpected argument `2`"),
        (format!("{started}; watch --every 1"), "unknown option"),
    ] {
        let o = gsh_c(&commands, &exe);
        assert_ne!(o.code, Some(0), "{o}");
        assert!(o.stderr.contains(message), "`{commands}`: {o}");
        assert!(!o.stderr.contains("panicked"), "{o}");
    }
}
