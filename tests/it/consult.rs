//! `consult`: the automated search on a started program, its JSON shape, its graph file and
//! its refusals.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gsh_tests::{ensure_package, gsh_c, json_stream, Gsh, Mutatee, Variant};

/// A worker computing and the main thread polling: the search names the main thread waiting
/// outside and the program (or its worker, never the poller) CPU-bound or waiting for a CPU on
/// a loaded machine, nothing else, within seconds, and writes the graph it says it writes.
#[test]
fn consult_finds_the_computing_thread_and_the_waiting_one() {
    let m = Mutatee::new("bottleneck");
    let exe = m.path(Variant::O2);
    let dot = std::env::temp_dir().join(format!("gsh-consult-{}.dot", std::process::id()));
    // The program computes for 60 s, longer than the search may take (it times the loops of
    // `crunch` too): the session ends it, rather than it ending under the session.
    let _turn = one_at_a_time();
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args([
            "--json",
            "-c",
            &format!("consult --for 40 --dot {}", dot.display()),
        ])
        .arg(exe.file_name().unwrap())
        .arg("60")
        .run();
    out.assert_success();
    let r = &json_stream(&out)
        .pop()
        .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let findings = r["findings"].as_array().expect("findings");
    // The threads each hypothesis was found for; `None` for a finding at the program that no
    // single thread's later window confirmed (a busy thread near a threshold on a loaded box).
    let threads = |h: &str| {
        findings
            .iter()
            .filter(|f| f["hypothesis"] == h)
            .map(|f| f["thread"].as_u64())
            .collect::<Vec<_>>()
    };
    let waiting = threads("ExternalWait");
    assert_eq!(waiting.len(), 1, "{r:#}");
    // At the function and the call it waits in.
    assert!(
        found(&self::findings(r), &["ExternalWait"], &["main", "poll"]),
        "{r:#}"
    );
    let poller = waiting[0].expect("the poller is named");
    let busy: Vec<Option<u64>> = threads("CPUBound")
        .into_iter()
        .chain(threads("RunQueue"))
        .collect();
    assert!(!busy.is_empty(), "{r:#}");
    assert!(
        !busy.contains(&Some(poller)),
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
    in_time(r, 20.0);
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

/// The searches on programs that compute take turns (here and in `consult_loops`): each
/// program keeps a CPU busy, and two at once on a 2-core machine starve each other's stack
/// samples.
pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Checks that the search `r` ended by itself within `limit` seconds, as it does on this
/// 2-core machine; unless the machine is overloaded (a load average above twice its CPUs: the
/// rest of the suite building and searching at once), where stack samples come slowly and the
/// search waits for them (its `--for` leaves it the time), which is no fault of the search's.
/// The time its cost limit held gsh's own work (`held`: on a loaded machine, gsh's CPU time
/// takes the program's) is left out: the limit, not the search, asked for it.
pub(crate) fn in_time(r: &serde_json::Value, limit: f64) {
    let seconds = r["seconds"].as_f64().unwrap() - r["held"].as_f64().unwrap();
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
    assert!(
        seconds < limit || load > 2.0 * cpus,
        "the search took {seconds} s at a load of {load}: {r:#}"
    );
}

/// `consult` (with `extra` options) on `planted MODE`, which runs longer than the search: the
/// findings as (hypothesis, focus joined by " > "), and the whole result.
///
/// These tests run one at a time, each with a larger sampling budget (20%) than the default:
/// on a machine loaded by the rest of the suite a stop for a stack sample waits for the
/// program's threads to be scheduled, and the search needs a dozen samples per experiment.
fn planted(mode: &str, extra: &str) -> (Vec<(String, String)>, serde_json::Value) {
    search_started("planted", &[mode, "60"], extra)
}

/// `consult --for 40 --cost 20 EXTRA` on mutatee `name` started with `args` (one at a time,
/// as [`planted`]): the findings as (hypothesis, focus joined by " > "), and the whole result.
fn search_started(
    name: &str,
    args: &[&str],
    extra: &str,
) -> (Vec<(String, String)>, serde_json::Value) {
    let _turn = one_at_a_time();
    let exe = Mutatee::new(name).path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args([
            "--json",
            "-c",
            &format!("consult --for 40 --cost 20 {extra}"),
        ])
        .arg(exe.file_name().unwrap())
        .args(args)
        .run();
    out.assert_success();
    let r = json_stream(&out)
        .pop()
        .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let findings = findings(&r);
    in_time(&r, 20.0);
    // The program is stopped for stack samples about as long as the 20% allows (a stop that
    // overruns the budget is counted when it ends); gsh's own competition for the CPUs counts
    // beside it, and is not paced below the stops' tenth.
    let paced = r["overhead"].as_f64().unwrap() - r["competed"].as_f64().unwrap();
    assert!(paced <= 0.25, "{r:#}");
    assert!(r["stack_samples"].as_u64().unwrap() > 0, "{r:#}");
    (findings, r)
}

/// A search result's findings as (hypothesis, focus joined by " > ").
pub(crate) fn findings(r: &serde_json::Value) -> Vec<(String, String)> {
    r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let focus: Vec<&str> = f["focus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            (
                f["hypothesis"].as_str().unwrap().to_owned(),
                focus.join(" > "),
            )
        })
        .collect()
}

/// True when some finding is for one of `hs` and its focus contains every one of `parts`,
/// read with or without the loops a callee was found inside (`main > loop_1 > crunch` is a
/// call from `main` to `crunch`).
fn found(findings: &[(String, String)], hs: &[&str], parts: &[&str]) -> bool {
    findings.iter().any(|(h, f)| {
        let calls: Vec<&str> = f.split(" > ").filter(|x| !x.starts_with("loop_")).collect();
        let calls = calls.join(" > ");
        hs.contains(&h.as_str())
            && (parts.iter().all(|p| f.contains(p)) || parts.iter().all(|p| calls.contains(p)))
    })
}

/// CPU in `crunch`'s call of `work` (the decoy calls `work` too, for a twentieth of the
/// time): the search names the path through `crunch`, and never the decoy. The deepest
/// CPU-bound conclusion names `crunch` with `work`: `work > loop_1` alone (the loop wherever
/// `work` is called from, the decoy's calls included) does not say which caller is hot.
#[test]
fn consult_names_the_function_a_cpu_bound_program_computes_in() {
    let (findings, r) = planted("cpu", "");
    // On a loaded machine (the suite runs tests in parallel on 2 cores) the same thread is
    // runnable more than it runs, and RunQueue is the true answer for the same code.
    assert!(
        found(&findings, &["CPUBound", "RunQueue"], &["main > crunch"]),
        "{r:#}"
    );
    assert!(!findings.iter().any(|(_, f)| f.contains("decoy")), "{r:#}");
    let deepest = findings
        .iter()
        .filter(|(h, _)| h == "CPUBound")
        .max_by_key(|(_, f)| f.split(" > ").count())
        .unwrap_or_else(|| panic!("no CPUBound finding: {r:#}"));
    assert!(
        deepest.1.contains("crunch > work"),
        "the deepest finding names the path: {r:#}"
    );
}

/// Three threads contending for `hot_lock` in `contend`: the search names the wait, the
/// function and the lock by its symbol, and never the uncontended `cold_lock` in `tidy`, nor
/// the main thread parked in `pthread_join`. At SyncWait's own threshold: on a loaded machine
/// the waiters wait for a CPU most of the time, and a wait is a share of the time a thread did
/// not (at a load of 15 on 2 CPUs they were seen waiting for the lock about a fifth of their
/// wall time, at the threshold, and the search named the lock in one search of ten; the test
/// lowered the threshold to 0.1).
#[test]
fn consult_names_the_contended_lock_and_the_function_waiting_for_it() {
    let (findings, r) = planted("lock", "");
    assert!(
        found(&findings, &["SyncWait"], &["contend", "lock hot_lock (0x"]),
        "{r:#}"
    );
    for decoy in ["cold_lock", "tidy", "main", "pthread_clockjoin"] {
        assert!(
            !findings
                .iter()
                .any(|(h, f)| h == "SyncWait" && f.contains(decoy)),
            "{decoy}: {r:#}"
        );
    }
}

/// 16-byte writes in `log_small`: SmallIO, at the function and the file it writes.
#[test]
fn consult_names_small_writes_with_their_function_and_file() {
    let (findings, r) = planted("smallio", "");
    assert!(
        found(
            &findings,
            &["SmallIO"],
            &["log_small", "pwrite", " (/tmp/gsh-planted-"]
        ),
        "{r:#}"
    );
    assert!(!findings.iter().any(|(h, _)| h == "SyncWait"), "{r:#}");
}

/// A thread blocked reading a pipe in `drain`: a wait for the outside (the pipe's writer),
/// named with the function and the pipe.
#[test]
fn consult_names_a_blocking_pipe_read_with_its_function_and_pipe() {
    let (findings, r) = planted("pipe", "");
    assert!(
        found(&findings, &["ExternalWait"], &["drain", "read", " (pipe:["]),
        "{r:#}"
    );
    assert!(
        !findings
            .iter()
            .any(|(h, _)| h == "IOBlocking" || h == "SyncWait"),
        "{r:#}"
    );
}

/// `main` waits in poll() on a pipe in `await_input` (fed a byte every 50 ms by a thread that
/// sleeps between bytes): the search names the wait, the function and call it waits in, and
/// the descriptor polled with what it is.
#[test]
fn consult_names_a_poll_wait_with_its_function_and_descriptor() {
    let (findings, r) = planted("poll", "");
    assert!(
        found(
            &findings,
            &["ExternalWait"],
            &["main > await_input", "poll > fd ", " (pipe:["]
        ),
        "{r:#}"
    );
    assert!(
        !findings
            .iter()
            .any(|(h, _)| h == "IOBlocking" || h == "SyncWait"),
        "{r:#}"
    );
}

/// A thread asleep in a system call is walked from the stack pointer and pc /proc shows it
/// with, not stopped: a stop made the event loop's `epoll_wait` return EINTR to the program,
/// one more turn of its loop per sample (126 times in a search of 126 samples, before). Both
/// threads of `planted epoll` sleep nearly always (main in `epoll_wait`, the feeder in
/// `usleep`), so nearly every sample of them is taken without a stop, fresh or given again.
#[test]
fn consult_walks_threads_asleep_in_a_call_without_stopping_them() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("planted").path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args(["--json", "-c", "consult --for 8 --cost 5; wait"])
        .arg(exe.file_name().unwrap())
        .args(["epoll", "6"])
        .run();
    out.assert_success();
    let r = json_stream(&out)
        .into_iter()
        .find_map(|mut l| {
            l.get_mut("result")
                .filter(|r| r.get("stack_samples").is_some())
                .map(serde_json::Value::take)
        })
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let eintr: u64 = out
        .stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("epoll_wait returned EINTR ")?
                .strip_suffix(" times")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the program did not say:\n{out}"));
    let batches = r["stack_samples"].as_u64().unwrap();
    let unstopped = r["asleep"].as_u64().unwrap() + r["reused"].as_u64().unwrap();
    eprintln!("{batches} batches, {unstopped} samples not stopped, {eintr} EINTRs");
    assert!(batches >= 20, "{r:#}");
    assert!(r["asleep"].as_u64().unwrap() > 0, "{r:#}");
    assert!(
        4 * unstopped >= 3 * 2 * batches,
        "{unstopped} of {batches} batches: {r:#}"
    );
    assert!(
        4 * eintr <= batches,
        "{eintr} EINTRs in {batches} batches: {r:#}"
    );
    let findings = findings(&r);
    assert!(
        found(
            &findings,
            &["ExternalWait"],
            &["main > await_events", "epoll_wait"]
        ),
        "{r:#}"
    );
}

/// `main` waits in epoll_wait() in `await_events` on an instance watching a listening socket
/// and three pipes (fed a byte every 50 ms, each in turn): the search names the wait once, at
/// the function and call it waits in, with the epoll descriptor and what it watches, not once
/// per watched descriptor (redis-server under redis-benchmark had a finding per client); the
/// JSON lists each watched descriptor with what it is.
#[test]
fn consult_names_an_epoll_wait_once_with_what_it_watches() {
    let (findings, r) = planted("epoll", "");
    // (`feed_events`, asleep between bytes, waits outside too, in `usleep`.)
    let waits: Vec<&(String, String)> = findings
        .iter()
        .filter(|(h, f)| h == "ExternalWait" && f.contains("epoll_wait"))
        .collect();
    assert_eq!(waits.len(), 1, "{r:#}");
    assert!(
        found(
            &findings,
            &["ExternalWait"],
            &[
                "main > await_events",
                "epoll_wait > epoll fd ",
                " watching 4 fds: listening socket 127.0.0.1:",
                ", 3 pipes"
            ]
        ),
        "{r:#}"
    );
    let wait = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["hypothesis"] == "ExternalWait" && f["waits_on"].is_object())
        .unwrap();
    assert_eq!(wait["waits_on"]["call"], "epoll_wait", "{r:#}");
    assert!(wait["waits_on"]["epfd"].is_i64(), "{r:#}");
    let kinds: Vec<&str> = wait["waits_on"]["fds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["listening socket", "pipe", "pipe", "pipe"], "{r:#}");
    assert!(
        !findings
            .iter()
            .any(|(h, _)| h == "IOBlocking" || h == "SyncWait"),
        "{r:#}"
    );
}

/// `hot` computes, called from `hot_caller` (85% of the time) and `cold_caller` (15%): the
/// search finds `hot` wherever it is called from, refines it into the two call paths reaching
/// it, judges the hot one true, naming the module, the function and the path, and concludes
/// along it (the path goes on as the chain of calls it is, into `hot`'s loop); the cold path
/// is tested and judged false, and named by no finding. Both paths are measured by timers of
/// their whole path (one profile of `hot`), not by the samples that proposed them.
#[test]
fn consult_refines_a_hot_function_into_the_call_path_that_is_hot() {
    let (findings, r) = search_started("twopaths", &["60"], "");
    let busy = ["CPUBound", "RunQueue"];
    let hot_path = r["graph"].as_array().unwrap().iter().find(|n| {
        let focus = n["focus"].as_array().unwrap();
        busy.contains(&n["hypothesis"].as_str().unwrap())
            && n["state"] == "true"
            && focus.len() == 5
            && focus[0] == "twopaths-O2"
            && focus[2..]
                == serde_json::json!(["twopaths-O2", "hot", "main > hot_caller > hot"])
                    .as_array()
                    .unwrap()[..]
    });
    assert!(hot_path.is_some(), "{r:#}");
    // `hot` is profiled: each path is timed by its whole length, not sampled.
    assert_eq!(hot_path.unwrap()["measured"], "path-probe", "{r:#}");
    assert!(
        findings
            .iter()
            .any(|(h, f)| busy.contains(&h.as_str()) && f.contains("hot_caller > hot")),
        "the conclusion names the hot path: {r:#}"
    );
    assert!(r["probes"]["path_timers"].as_u64() >= Some(2), "{r:#}");
    assert!(
        !findings.iter().any(|(_, f)| f.contains("cold_caller")),
        "{r:#}"
    );
    let cold = r["graph"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            n["hypothesis"] == "CPUBound"
                && n["focus"].as_array().unwrap().last()
                    == Some(&serde_json::json!("main > cold_caller > hot"))
        })
        .unwrap_or_else(|| panic!("the cold path was not tested: {r:#}"));
    assert_eq!(cold["state"], "false", "{r:#}");
    assert_eq!(cold["measured"], "path-probe", "{r:#}");
    // `main` calls both callers inside its loop: they are tested below the loop, not beside.
    let cpu_nodes: Vec<String> = r["graph"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["hypothesis"] == "CPUBound")
        .map(|n| {
            let focus: Vec<&str> = n["focus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            focus.join(" > ")
        })
        .collect();
    assert!(
        cpu_nodes
            .iter()
            .any(|f| f.ends_with("> main > loop_1 > hot_caller")),
        "{r:#}"
    );
    assert!(
        !cpu_nodes.iter().any(|f| f.ends_with("> main > hot_caller")),
        "{r:#}"
    );
}

/// `watch 0.5 consult ...` shows the running search: tables of its experiments, half a second
/// apart, the first with experiments being tested, later ones with the root judged and deeper
/// foci, each with its fraction and history; then the search's own report. `watch`'s own
/// `--for` is refused with a search, before anything starts.
#[test]
fn watch_shows_the_running_search_then_its_report() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("twopaths").path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args(["-c", "watch 0.5 consult --for 20 --cost 20"])
        .arg(exe.file_name().unwrap())
        .arg("40")
        .run();
    out.assert_success();
    let tables: Vec<&str> = out.stdout.split("consult, ").skip(1).collect();
    assert!(tables.len() >= 3, "{out}");
    let header = "Hypothesis    Focus";
    assert!(tables.iter().all(|t| t.contains(header)), "{out}");
    assert!(
        tables
            .iter()
            .any(|t| t.lines().any(|l| l.contains(" testing "))),
        "{out}"
    );
    // Later tables go below the thread, with each experiment's fraction and its history.
    let last = tables.last().unwrap();
    assert!(
        last.lines()
            .any(|l| l.starts_with("CPUBound") && l.contains("> main") && l.contains(" true ")),
        "{out}"
    );
    // The report follows the last table: the conclusions, then the graph.
    assert!(out.stdout.contains("experiments in "), "{out}");
    assert!(out.stdout.contains("main > hot_caller > hot"), "{out}");
    let refused = gsh_c("watch --for 3 consult", &exe);
    assert!(!refused.success(), "{refused}");
    assert!(refused.stderr.contains("watch's own"), "{refused}");
    assert!(!refused.stderr.contains("started"), "{refused}");
}

/// `watch 0.5 consult --json` streams the running search: one JSON line per redraw (the
/// search so far, with its graph growing and its seconds rising), then `consult`'s result as
/// the last line. It used to print the result alone.
#[test]
fn watch_consult_json_streams_one_line_per_redraw() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("twopaths").path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args(["--json", "-c", "watch 0.5 consult --for 4 --cost 20"])
        .arg(exe.file_name().unwrap())
        .arg("20")
        .run();
    out.assert_success();
    let mut lines: Vec<serde_json::Value> = json_stream(&out)
        .into_iter()
        .map(|mut l| {
            assert_eq!(l["command"], "watch 0.5 consult --for 4 --cost 20", "{out}");
            l["result"].take()
        })
        .collect();
    let last = lines.pop().unwrap_or_else(|| panic!("no result: {out}"));
    assert!(last["overhead"].is_number(), "the report comes last: {out}");
    assert!(lines.len() >= 4, "one line per half second: {out}");
    let mut seconds = 0.0;
    for l in &lines {
        assert_eq!(l["search"], "running", "{out}");
        let s = l["seconds"].as_f64().unwrap();
        assert!(s > seconds, "{out}");
        seconds = s;
        assert!(l["findings"].is_array() && l["tested"].is_u64(), "{out}");
        assert!(!l["graph"].as_array().unwrap().is_empty(), "{out}");
    }
    // The search goes on between redraws: later lines have judged what the first had not.
    assert!(
        lines.last().unwrap()["tested"].as_u64() > lines[0]["tested"].as_u64(),
        "{out}"
    );
}

/// Three spinning threads per CPU: each waits for a CPU most of the time, in `spin`.
#[test]
fn consult_finds_threads_waiting_for_a_cpu_and_where_they_spin() {
    let (findings, r) = planted("runq", "");
    let threads: std::collections::BTreeSet<u64> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["hypothesis"] == "RunQueue")
        .filter_map(|f| f["thread"].as_u64())
        .collect();
    assert!(threads.len() >= 2, "{r:#}");
    assert!(found(&findings, &["RunQueue"], &["spin"]), "{r:#}");
}

/// A redis server on a free port, killed when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    fn start() -> Redis {
        ensure_package("redis-server");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let r = Redis { child, port };
        // Ready when it answers.
        let since = Instant::now();
        while r.command("PING").as_deref() != Some("+PONG") {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "redis never answered"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn connect(&self) -> Option<TcpStream> {
        TcpStream::connect(("127.0.0.1", self.port)).ok()
    }

    /// One inline command's one-line reply.
    fn command(&self, cmd: &str) -> Option<String> {
        let mut c = self.connect()?;
        c.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
        let mut line = String::new();
        BufReader::new(c).read_line(&mut line).ok()?;
        Some(line.trim_end().to_owned())
    }
}

/// A redis server kept busy by a client while the search runs: its background (bio) threads
/// sit parked in condition waits the whole time, which slows nothing, so the search reports no
/// SyncWait; it finds where the main thread's time goes; and the server answers every request
/// correctly throughout and after. The search ends by itself (it times loops of the functions
/// it finds hot too, which takes a few more seconds on a loaded machine than samples alone).
#[test]
fn consult_on_a_loaded_redis_names_no_parked_thread_and_the_server_answers_throughout() {
    let redis = Redis::start();
    let stop = AtomicBool::new(false);
    let (findings, r, answered) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let mut c = redis.connect().expect("a connection");
            let mut replies = BufReader::new(c.try_clone().unwrap());
            let mut answered = 0u64;
            let mut line = String::new();
            while !stop.load(Ordering::Relaxed) {
                // 32 commands at a time, each answered in order.
                let batch: String = (0..32)
                    .map(|i| format!("SET key{i} {answered}\r\n"))
                    .collect();
                c.write_all(batch.as_bytes()).expect("redis takes requests");
                for _ in 0..32 {
                    line.clear();
                    replies.read_line(&mut line).expect("redis replies");
                    assert_eq!(line, "+OK\r\n", "after {answered} replies");
                    answered += 1;
                }
            }
            answered
        });
        let out = Gsh::new()
            .args([
                "--json",
                "-p",
                &redis.child.id().to_string(),
                "-c",
                "consult --for 30",
            ])
            .run();
        stop.store(true, Ordering::Relaxed);
        let answered = client.join().expect("the client saw only right answers");
        out.assert_success();
        let r = json_stream(&out)
            .pop()
            .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
            .unwrap_or_else(|| panic!("no result:\n{out}"));
        let findings: Vec<(String, String)> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["hypothesis"].as_str().unwrap().to_owned(),
                    f["focus"].to_string(),
                )
            })
            .collect();
        (findings, r, answered)
    });
    assert!(answered > 0);
    assert!(
        !findings.iter().any(|(h, _)| h == "SyncWait"),
        "parked threads reported: {r:#}"
    );
    // The main thread serves the client: computing, or waiting for it (and when the stack
    // samples come fast enough, below `main`).
    let pid = u64::from(redis.child.id());
    assert!(
        r["findings"].as_array().unwrap().iter().any(|f| {
            matches!(f["hypothesis"].as_str(), Some("CPUBound" | "ExternalWait"))
                && f["thread"].as_u64() == Some(pid)
        }),
        "{r:#}"
    );
    in_time(&r, 30.0);
    assert_eq!(redis.command("PING").as_deref(), Some("+PONG"));
    assert_eq!(
        redis
            .command("GET key0")
            .as_deref()
            .map(|l| l.starts_with('$')),
        Some(true)
    );
}

/// `time CALLER call CALLEE` times CALLEE when CALLER calls it: in `twopaths`, hot_caller
/// calls `hot` with six times cold_caller's work, as often, and the two together take `hot`'s
/// own time. The timer consult tests a call path with, as users can ask for it.
#[test]
fn time_caller_call_callee_times_the_callee_from_that_caller() {
    let exe = Mutatee::new("twopaths").path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args([
            "--json",
            "-c",
            "time hot_caller call hot; time cold_caller call hot; time hot; run 2; report",
        ])
        .arg(exe.file_name().unwrap())
        .run();
    out.assert_success();
    let report = json_stream(&out)
        .into_iter()
        .find(|l| l["command"] == "report")
        .unwrap_or_else(|| panic!("no report: {out}"));
    let rows = report["result"]["values"]
        .as_array()
        .or_else(|| report["result"].as_array())
        .unwrap_or_else(|| panic!("{report:#}"))
        .clone();
    // A call's value names its callee as `call`, and no loop.
    let row = |function: &str, call: Option<&str>| {
        rows.iter()
            .find(|r| {
                r["function"] == function && r["call"].as_str() == call && r["loop"].is_null()
            })
            .unwrap_or_else(|| panic!("no {function} {call:?}: {report:#}"))
            .clone()
    };
    let hot = row("hot_caller", Some("hot"));
    let cold = row("cold_caller", Some("hot"));
    let all = row("hot", None);
    let ns = |r: &serde_json::Value| r["ns"].as_f64().unwrap();
    let calls = |r: &serde_json::Value| r["calls"].as_u64().unwrap();
    assert!(calls(&hot) > 10, "{report:#}");
    assert!(calls(&hot).abs_diff(calls(&cold)) <= 1, "{report:#}");
    assert_eq!(calls(&hot) + calls(&cold), calls(&all), "{report:#}");
    // Six times the work; wall time on a loaded machine adds preemptions to either side.
    let ratio = ns(&hot) / ns(&cold);
    assert!((2.5..15.0).contains(&ratio), "{ratio}: {report:#}");
    let sum = (ns(&hot) + ns(&cold)) / ns(&all);
    assert!((0.95..1.05).contains(&sum), "{sum}: {report:#}");
    // The program ran to its end, unchanged (its output goes beside gsh's JSON).
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("twopaths done"),
        "{out}"
    );
}

/// `leaf` computes, always called from `common`, which `heavy` calls with six times the work
/// `light` does: the two paths end in the same call, `common > leaf`, so a timer of that call
/// alone measures both as hot. The search tests each path by its whole length (a profile of
/// `leaf` whose activations are told apart by their return addresses), judges the hot path
/// true and concludes along it; the decoy path is tested, judged false, and named by no
/// finding.
#[test]
fn consult_tells_apart_two_call_paths_ending_in_the_same_call() {
    let (findings, r) = search_started("decoypaths", &["60"], "");
    let busy = ["CPUBound", "RunQueue"];
    let hot_path = r["graph"].as_array().unwrap().iter().find(|n| {
        let focus = n["focus"].as_array().unwrap();
        busy.contains(&n["hypothesis"].as_str().unwrap())
            && n["state"] == "true"
            && focus.len() == 5
            && focus[0] == "decoypaths-O2"
            && focus[2..]
                == serde_json::json!(["decoypaths-O2", "leaf", "main > heavy > common > leaf"])
                    .as_array()
                    .unwrap()[..]
    });
    let hot_path = hot_path.unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(hot_path["measured"], "path-probe", "{r:#}");
    assert!(hot_path.get("timed_call").is_none(), "{r:#}");
    assert!(
        findings
            .iter()
            .any(|(h, f)| busy.contains(&h.as_str()) && f.contains("heavy > common > leaf")),
        "the conclusion names the hot path: {r:#}"
    );
    assert!(r["probes"]["path_timers"].as_u64() >= Some(1), "{r:#}");
    assert!(!findings.iter().any(|(_, f)| f.contains("light")), "{r:#}");
    let decoy = r["graph"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            n["hypothesis"] == "CPUBound"
                && n["focus"].as_array().unwrap().last()
                    == Some(&serde_json::json!("main > light > common > leaf"))
        })
        .unwrap_or_else(|| panic!("the decoy path was not tested: {r:#}"));
    assert_eq!(decoy["state"], "false", "{r:#}");
    assert_eq!(decoy["measured"], "path-probe", "{r:#}");
    // Within the cost limit the search was given (20%), probes and stops together.
    assert!(r["probes"]["cost"].as_f64().unwrap() <= 0.2, "{r:#}");
}

/// `work`'s one loop computes, called from `crunch` with five times the work `cold` gives it:
/// the search finds `work` reached by both, goes on along the hot path and into its loop, and
/// times that loop along `main > crunch > work` alone (a profile of `work` and the loop timed
/// by its activations' call paths): the path's loop reads the hot path's share, about 0.83,
/// not the loop's share from every caller, about 1 (which it read with the loop's timer from
/// every caller, the decoy's sixth in it). The fractions are of the thread's CPU demand, so a
/// load does not change them much; the decoy's path is named by no finding.
#[test]
fn consult_times_a_loop_along_a_call_path_without_the_decoy_callers_time() {
    let (findings, r) = search_started("looppaths", &["60"], "");
    let graph = r["graph"].as_array().unwrap();
    let node = |along: bool| {
        graph.iter().find(|n| {
            let focus = n["focus"].as_array().unwrap();
            n["hypothesis"] == "CPUBound"
                && focus.last() == Some(&serde_json::json!("loop_1"))
                && focus.contains(&serde_json::json!("crunch")) == along
                && focus.iter().any(|f| f == "work")
                && matches!(n["state"].as_str(), Some("true" | "false"))
        })
    };
    let along = node(true).unwrap_or_else(|| panic!("the loop along the path: {r:#}"));
    assert_eq!(along["measured"], "probe", "{r:#}");
    let fraction = along["fraction"].as_f64().unwrap();
    assert!(
        (0.45..0.93).contains(&fraction),
        "the hot path's share, without the decoy's: {fraction}: {r:#}"
    );
    // Timed from every caller, the same loop reads more.
    if let Some(anywhere) = node(false) {
        let every = anywhere["fraction"].as_f64().unwrap();
        assert!(every > fraction + 0.05, "{every} vs {fraction}: {r:#}");
    }
    assert!(
        findings
            .iter()
            .any(|(_, f)| f.contains("main > crunch > work > loop_1")),
        "{r:#}"
    );
    assert!(!findings.iter().any(|(_, f)| f.contains("cold")), "{r:#}");
    assert!(r["probes"]["path_timers"].as_u64() >= Some(1), "{r:#}");
    assert!(
        r["probes"]["errors"].as_array().is_none_or(Vec::is_empty),
        "{r:#}"
    );
}

/// A program started through a symbolic link (as Debian's `redis-server`, a link to
/// `redis-check-rdb`, which checks a dump file when started by its own name) runs as the link:
/// started by gsh, its `argv[0]` is the link's path, as from a shell; and a search attached to
/// it names the program by the link (its name longer than the kernel's 15-character `comm`,
/// whole), and its module by the file's own name.
#[test]
fn a_program_started_through_a_link_runs_and_is_named_as_the_link() {
    let exe = Mutatee::new("decoypaths").path(Variant::O2);
    let dir = std::env::temp_dir().join(format!("gsh-consult-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("decoy-through-a-long-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&exe, &link).unwrap();
    let out = Gsh::new()
        .current_dir(&dir)
        .args(["-c", "run"])
        .arg("./decoy-through-a-long-link")
        .arg("0")
        .run();
    out.assert_success();
    assert!(
        format!("{}{}", out.stdout, out.stderr)
            .contains("decoypaths done as decoy-through-a-long-link\n"),
        "{out}"
    );
    let _turn = one_at_a_time();
    let mut child = Command::new(&link)
        .arg("60")
        .stdout(Stdio::piped())
        .spawn()
        .expect("decoypaths starts");
    let mut running = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut running)
        .expect("decoypaths says it runs");
    let out = Gsh::new()
        .args(["--json", "-p", &child.id().to_string()])
        .args(["-c", "consult --for 6 --cost 20"])
        .run();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(running, "decoypaths running\n");
    out.assert_success();
    let r = json_stream(&out)
        .into_iter()
        .find(|l| {
            l["command"]
                .as_str()
                .is_some_and(|c| c.starts_with("consult"))
        })
        .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let graph = r["graph"].as_array().unwrap();
    assert_eq!(graph[0]["focus"][0], "decoy-through-a-long-link", "{r:#}");
    // Below the thread, the module is the file's.
    let modules: Vec<&serde_json::Value> = graph
        .iter()
        .filter_map(|n| n["focus"].as_array()?.get(2))
        .collect();
    assert!(!modules.is_empty(), "{r:#}");
    assert!(modules.iter().all(|m| *m == "decoypaths-O2"), "{r:#}");
}

/// A program that ends during the search ends it: the search's findings are printed (one valid
/// JSON line with `--json`), the end is told once, no error is said about the gone process,
/// and gsh exits 0 as after any search. The stack sampler's stop could meet the exit and the
/// end went untold, so gsh then listed the modules of, and killed, a gone process ("the
/// process is not running ... while listing modules", "... while killing") and exited 1, in
/// one run of about ten; a few short runs here, and `instrument::inferior`'s unit tests for
/// the deterministic case.
#[test]
fn a_program_ending_during_the_search_ends_it_with_its_findings() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("decoypaths").path(Variant::O2);
    for json in [true, true, true, false] {
        let mut g = Gsh::new().current_dir(exe.parent().unwrap());
        if json {
            g = g.arg("--json");
        }
        let out = g
            .args(["-c", "consult --for 30"])
            .arg(exe.file_name().unwrap())
            .arg("2")
            .run();
        out.assert_success();
        assert!(!out.stderr.lines().any(|l| l.starts_with("gsh:")), "{out}");
        assert_eq!(
            out.stderr.matches("exited with code 0]").count(),
            1,
            "the end told once:\n{out}"
        );
        if json {
            let r = json_stream(&out)
                .pop()
                .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
                .unwrap_or_else(|| panic!("no result:\n{out}"));
            assert!(r["findings"].is_array(), "{r:#}");
            // It ended with the program, long before --for.
            assert!(r["seconds"].as_f64().unwrap() < 25.0, "{r:#}");
        } else {
            assert!(out.stdout.contains("CPUBound decoypaths-O2"), "{out}");
        }
        // Nothing about the gone process in the result either.
        for gone in [
            "No such file",
            "not running",
            "sampling stopped",
            "probe error",
        ] {
            assert!(!out.stdout.contains(gone), "{gone}:\n{out}");
        }
    }
}

/// A program that ends while experiments run: each one that ran long enough is judged on what
/// it read (started the settle time before the end, with a reading of at least half of it),
/// and each says the program ended; none is left untested without a word. They all were: a
/// thread read at 0.98 CPU-bound was left `untested`, and the search concluded at the program.
#[test]
fn experiments_running_when_the_program_ends_are_judged_or_say_why_not() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("decoypaths").path(Variant::O2);
    let out = Gsh::new()
        .current_dir(exe.parent().unwrap())
        .args(["--json", "-c", "consult --for 30"])
        .arg(exe.file_name().unwrap())
        .arg("3")
        .run();
    out.assert_success();
    let r = json_stream(&out)
        .pop()
        .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let graph = r["graph"].as_array().expect("graph");
    let mut at_the_end = 0;
    for n in graph {
        if n["note"]
            .as_str()
            .is_some_and(|x| x.contains("the program ended"))
        {
            at_the_end += 1;
            // Judged at the end, or untested for a reason it says.
            assert!(
                matches!(n["state"].as_str(), Some("true" | "false" | "untested")),
                "{n:#}"
            );
            if n["state"] == "true" || n["state"] == "false" {
                assert!(n["judged"].as_f64().is_some(), "{n:#}");
            }
        } else if !n["measured"].is_null() {
            // Started, and not running when the program ended: judged by then.
            assert!(
                matches!(
                    n["state"].as_str(),
                    Some("true" | "false" | "failed" | "refused")
                ),
                "started and left without a word: {n:#}\n{r:#}"
            );
        }
    }
    assert!(at_the_end >= 1, "nothing ran when the program ended: {r:#}");
    // A 3-second program: the search ended with it.
    assert!(r["seconds"].as_f64().unwrap() < 25.0, "{r:#}");
    assert!(!r["findings"].as_array().unwrap().is_empty(), "{r:#}");
}

/// Attached to `planted lock` as it runs (`gsh -p PID`), the search names the contended lock
/// and the function waiting for it, and no decoy; afterwards the program's code is its file's
/// and it runs on to print what it prints alone. (The started searches above and the attached
/// loop search in `consult_loops` leave the other lines: this one is attached and waits.)
#[test]
fn consult_attached_names_the_contended_lock_and_leaves_the_program_as_it_was() {
    let _turn = one_at_a_time();
    let exe = Mutatee::new("planted").path(Variant::O2);
    let mut child = Command::new(&exe)
        .args(["lock", "24"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("planted starts");
    let pid = child.id();
    let out = Gsh::new()
        .args([
            "--json",
            "-p",
            &pid.to_string(),
            "-c",
            "consult --for 20 --cost 20",
        ])
        .run();
    let text = gsh_tests::server::text_matches_file(pid, &exe);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut rest)
        .expect("planted's output");
    let status = child.wait().expect("planted ends");
    out.assert_success();
    text.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(status.success(), "{status}");
    assert_eq!(rest, "planted lock done\n");
    let r = json_stream(&out)
        .pop()
        .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .unwrap_or_else(|| panic!("no result:\n{out}"));
    let findings = findings(&r);
    assert!(
        found(&findings, &["SyncWait"], &["contend", "lock hot_lock (0x"]),
        "{r:#}"
    );
    for decoy in ["cold_lock", "tidy", "pthread_clockjoin"] {
        assert!(
            !findings
                .iter()
                .any(|(h, f)| h == "SyncWait" && f.contains(decoy)),
            "{decoy}: {r:#}"
        );
    }
    in_time(&r, 20.0);
}

/// `planted cpu` pinned to CPU 0 (`taskset -c 0`), searched attached: while the search runs,
/// every thread of gsh's runs on the other CPUs alone, where it takes nothing from the program
/// (left to the scheduler it ran mostly beside the thread it stopped: a pinned redis-server
/// lost 6% to 16% of its throughput); the report says so; and after the search, still
/// attached, gsh's threads may run anywhere again. The program prints what it prints alone.
#[test]
fn consult_keeps_gsh_off_the_cpus_of_a_pinned_program_while_it_searches() {
    if std::thread::available_parallelism().map_or(1, std::num::NonZero::get) < 2 {
        eprintln!("skipped: one CPU, nowhere else for gsh to run");
        return;
    }
    let _turn = one_at_a_time();
    let exe = Mutatee::new("planted").path(Variant::O2);
    let mut child = Command::new("taskset")
        .args(["-c", "0"])
        .arg(&exe)
        .args(["cpu", "14"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("taskset starts planted");
    let pid = child.id();
    let done = AtomicBool::new(false);
    // What gsh's threads may run on, read every 20 ms through the program's tracer: for
    // each reading, whether every thread of gsh's (its `Cpus_allowed_list`s) keeps off CPU
    // 0, and whether every one may run there.
    let readings = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut readings: Vec<(bool, bool)> = Vec::new();
            // Found through the program's tracer, then kept: gsh may let go of the threads
            // when the search ends (hands-off), and the program then has no tracer.
            let mut gsh = None;
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                gsh = gsh.or_else(|| tracer_of(pid));
                let Some(lists) = gsh.and_then(cpu_lists) else {
                    continue;
                };
                let zero = |l: &String| {
                    l.split(',')
                        .any(|r| r.split('-').next().and_then(|a| a.parse::<u32>().ok()) == Some(0))
                };
                readings.push((lists.iter().all(|l| !zero(l)), lists.iter().all(zero)));
            }
            readings
        });
        let out = Gsh::new()
            .args([
                "--json",
                "-p",
                &pid.to_string(),
                "-c",
                "consult --for 6; sleep 2",
            ])
            .run();
        done.store(true, Ordering::SeqCst);
        (out, watcher.join().expect("the watcher"))
    });
    let (out, readings) = readings;
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut rest)
        .expect("planted's output");
    let status = child.wait().expect("planted ends");
    out.assert_success();
    assert!(status.success(), "{status}");
    assert_eq!(rest, "planted cpu done\n");
    let r = json_stream(&out)
        .into_iter()
        .filter_map(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .find(|r| r.get("findings").is_some())
        .unwrap_or_else(|| panic!("no search result:\n{out}"));
    assert_eq!(r["kept_off"]["program"], "0", "{r:#}");
    let gsh = r["kept_off"]["gsh"].as_str().expect("gsh's CPUs");
    assert!(!gsh.is_empty() && !gsh.starts_with('0'), "{r:#}");
    // The search still finds the program computing (how deep it gets in 6 s at the default
    // cost is for the tests above).
    assert!(
        found(&findings(&r), &["CPUBound", "RunQueue"], &[]),
        "{r:#}"
    );
    // Kept off while it searched, then free again while still attached (the `sleep`).
    let off = readings.iter().position(|&(off, _)| off);
    let off = off.unwrap_or_else(|| panic!("gsh never kept off CPU 0: {readings:?}"));
    assert!(
        readings[off..].iter().any(|&(_, free)| free),
        "gsh's threads stayed off CPU 0 after the search: {readings:?}"
    );
}

/// The process tracing `pid` (its tracer thread's process), if it is traced.
fn tracer_of(pid: u32) -> Option<u32> {
    let tracer = status_field(&format!("/proc/{pid}/status"), "TracerPid:")?;
    let tgid = status_field(&format!("/proc/{tracer}/status"), "Tgid:")?;
    tgid.parse().ok().filter(|&t| t != 0)
}

/// The `Cpus_allowed_list` of every thread of process `pid`, while it lives.
fn cpu_lists(pid: u32) -> Option<Vec<String>> {
    let lists: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|t| {
            let t = t.ok()?.path();
            status_field(&format!("{}/status", t.display()), "Cpus_allowed_list:")
        })
        .collect();
    (!lists.is_empty()).then_some(lists)
}

/// A field of a `/proc` status file.
fn status_field(path: &str, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(name))?;
    Some(line.trim().to_owned())
}

/// The threads of process `pid` named `names` (by `pthread_setname_np`), with how many times
/// each was scheduled in so far (its `schedstat`'s third count), once every one of them is
/// asleep; in the order of their ids.
fn asleep_threads(pid: u32, names: &[&str]) -> Vec<(u32, String, u64)> {
    let read = |tid: &str, file: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/{file}")).unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut out = Vec::new();
        let mut all_asleep = true;
        for e in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the program's threads") {
            let tid = e.unwrap().file_name().into_string().unwrap();
            let name = read(&tid, "comm").trim().to_owned();
            if !names.contains(&name.as_str()) {
                continue;
            }
            let state = read(&tid, "stat");
            all_asleep &= state
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'));
            let pcount = read(&tid, "schedstat")
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            out.push((tid.parse().unwrap(), name, pcount));
        }
        if all_asleep && out.len() == names.len() {
            out.sort();
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "the threads never slept: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `planted idle` (one thread computing, five asleep throughout: two waiting to take a lock
/// held till the end, one reading a pipe, two parked on a condition), searched attached, traced
/// and hands-off: a sleeping thread is stopped for a stack sample only when it may have run
/// since its last one (and once a second whatever it did), not in every batch. Before, each
/// batch stopped every thread, and each stop scheduled each sleeper in at least once (its
/// `schedstat` count rose by more than the batches). The samples given again say what fresh
/// ones would: the search names the lock wait and the pipe read with their functions, lock and
/// pipe, and the parked threads slow nothing.
#[test]
fn consult_leaves_sleeping_threads_alone_and_still_names_their_waits() {
    // Built before the program starts, which runs for its 60 s only.
    Gsh::binary();
    for mode in ["traced", "hands-off"] {
        let _turn = one_at_a_time();
        let exe = Mutatee::new("planted").path(Variant::O2);
        let child = Command::new(&exe)
            .args(["idle", "60"])
            .stdout(Stdio::null())
            .spawn()
            .expect("planted starts");
        struct Kill(Child);
        impl Drop for Kill {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Kill(child);
        let pid = child.0.id();
        let names = ["waiter", "waiter", "listener", "parked", "parked"];
        let before = asleep_threads(pid, &names);
        let out = Gsh::new()
            .args([
                "--json",
                "-p",
                &pid.to_string(),
                "-c",
                &format!("set attached-mode {mode}; consult --for 12 --cost 20"),
            ])
            .run();
        let after = asleep_threads(pid, &names);
        drop(child);
        out.assert_success();
        let r = json_stream(&out)
            .pop()
            .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
            .unwrap_or_else(|| panic!("no result:\n{out}"));
        let batches = r["stack_samples"].as_u64().unwrap();
        let runs: Vec<(String, u64)> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a.1.clone(), a.2 - b.2))
            .collect();
        // Given again, not stopped: most of the five sleepers' samples. (Each halt of the
        // whole process that puts a probe in or takes one out wakes them too: they are stopped
        // at the next batch.)
        let reused = r["reused"].as_u64().unwrap_or(0);
        eprintln!("{mode}: {batches} batches, {reused} given again, sleepers ran {runs:?}");
        assert!(batches >= 20, "{mode}: {batches} batches: {r:#}");
        assert!(
            2 * reused > 5 * batches,
            "{mode}: {reused} samples given again in {batches} batches"
        );
        // Each stop of a sleeping thread schedules it in twice (the interrupt wakes it, the
        // resume again): before, they ran at least twice a batch.
        for (name, n) in &runs {
            assert!(
                *n < 2 * batches,
                "{mode}: {name} was scheduled in {n} times in {batches} batches: {runs:?}"
            );
        }
        let findings = findings(&r);
        assert!(
            found(
                &findings,
                &["SyncWait"],
                &["wait_lock", "lock held_lock (0x"]
            ),
            "{mode}: {r:#}"
        );
        assert!(
            found(
                &findings,
                &["ExternalWait"],
                &["listen_pipe", "read", " (pipe:["]
            ),
            "{mode}: {r:#}"
        );
        assert!(
            !findings.iter().any(|(_, f)| f.contains("park")),
            "{mode}: {r:#}"
        );
    }
}
