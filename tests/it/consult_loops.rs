//! `consult`'s refinement through instrumentation: a function the samples find CPU-bound is
//! refined into its loops by live loop timers, outermost first, each taken out once judged.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use gsh_tests::server::text_matches_file;
use gsh_tests::{json_stream, Gsh, Mutatee, Variant};

/// `hotloop` spends nearly all its time in the second of three loops (`loop_1.2`, around
/// `loop_1.2.1`) inside `phases`' outer loop, little in the first and third and in `decoy`.
/// `phases` is called once, so its outer loop runs since before any timer: its timer sees
/// nothing, and the search times the loops in it instead. Attached to the program as it runs,
/// the search names `phases` and the hot loop, down to the inner one, and no other loop or the
/// decoy; every timer it inserted is gone afterwards (no request left, the code as in the
/// file), and the program runs on to print what it prints alone.
#[test]
fn consult_refines_a_hot_function_into_its_hot_loop_with_live_timers_and_removes_them() {
    let exe = Mutatee::new("hotloop").path(Variant::O2);
    let (gsh, r) = search_attached(&exe, "60", "hotloop", "--watch", false);
    let findings = super::consult::findings(&r);
    // On a loaded machine the thread waits for a CPU as much as it runs: either names it.
    let busy = |h: &str| h == "CPUBound" || h == "RunQueue";
    assert!(
        findings
            .iter()
            .any(|(h, f)| busy(h) && f.ends_with("main > phases > loop_1 > loop_1.2 > loop_1.2.1")),
        "{r:#}"
    );
    // Nothing else below the program (where a RunQueue near its threshold may stand alone,
    // unconfirmed by the thread's later window), and no decoy: on a machine loaded by other
    // tests the thread also waits for a CPU in the functions on the way to the hot loop
    // (`RunQueue … main > phases`), which is true and names no decoy.
    const HOT: &str = "main > phases > loop_1 > loop_1.2";
    for (h, f) in &findings {
        assert!(busy(h), "{r:#}");
        let on_the_way = h == "RunQueue"
            && f.split_once("main > ")
                .is_some_and(|(_, tail)| HOT.starts_with(&format!("main > {tail}")));
        assert!(
            !f.contains(" > ") || f.contains(HOT) || on_the_way,
            "only the hot loop: {r:#}"
        );
    }
    // Every loop below `phases` was tested by a timer, outermost first: the outer one, unseen,
    // was judged false and refined all the same; the first and third inner ones false; the
    // innermost only once its parent held.
    let graph = r["graph"].as_array().unwrap();
    let node = |tail: &str| {
        graph
            .iter()
            .find(|n| {
                n["hypothesis"] == "CPUBound"
                    && n["focus"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(" > ")
                        .ends_with(tail)
            })
            .unwrap_or_else(|| panic!("no node for {tail}: {r:#}"))
    };
    for (tail, state) in [
        ("phases > loop_1", "false"),
        ("loop_1 > loop_1.1", "false"),
        ("loop_1 > loop_1.2", "true"),
        ("loop_1.2 > loop_1.2.1", "true"),
        ("loop_1 > loop_1.3", "false"),
    ] {
        assert_eq!(node(tail)["state"], state, "{tail}: {r:#}");
    }
    assert!(
        node("phases > loop_1")["note"]
            .as_str()
            .is_some_and(|n| n.contains("not entered while timed")),
        "{r:#}"
    );
    for (child, parent) in [
        ("loop_1 > loop_1.2", "phases > loop_1"),
        ("loop_1.2 > loop_1.2.1", "loop_1 > loop_1.2"),
    ] {
        assert_eq!(node(child)["parent"], node(parent)["id"], "{r:#}");
    }
    // --watch told the search as it went: the hot loop judged, then its inner loop tested.
    let line = |what: &str, tail: &str| {
        gsh.stderr
            .lines()
            .position(|l| {
                l.starts_with("[consult ")
                    && l.contains(&format!(" CPUBound     {what}"))
                    && l.ends_with(tail)
            })
            .unwrap_or_else(|| panic!("no `{what}` line for {tail}: {gsh}"))
    };
    assert!(
        line("true", "phases > loop_1 > loop_1.2") < line("testing", "loop_1.2 > loop_1.2.1"),
        "{gsh}"
    );
    line("true", "loop_1.2 > loop_1.2.1");
    let probes = &r["probes"];
    assert!(probes["inserted"].as_u64().unwrap() >= 5, "{r:#}");
    assert_eq!(probes["inserted"], probes["removed"], "{r:#}");
    assert_eq!(probes["errors"], serde_json::json!([]), "{r:#}");
    super::consult::in_time(&r, 20.0);
}

/// `dlhot` computes in `main` until the search has attached and begun, then loads `libdlhot`
/// with dlopen and computes in its `hot` until told to stop. The search learns the library
/// while it runs: stack samples name its frames and walk through it, and its loops are timed,
/// so the search names `hot` in the library and its hot loop, and removes every timer.
#[test]
fn consult_searches_a_library_loaded_after_it_began() {
    let lib = Mutatee::new("libdlhot").path(Variant::O2);
    let exe = Mutatee::new("dlhot").path(Variant::O2);
    let (_, r) = search_attached(&exe, &lib, "dlhot", "", true);
    let name = lib.file_name().unwrap().to_str().unwrap();
    let hot = r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["hypothesis"] == "CPUBound" || f["hypothesis"] == "RunQueue")
        .map(|f| f["focus"].to_string())
        .find(|f| f.contains(&format!("\"main\",\"{name}\",\"hot\"")));
    let hot = hot.unwrap_or_else(|| panic!("no finding in {name}'s hot: {r:#}"));
    assert!(hot.ends_with("\"loop_1\",\"loop_1.2\"]"), "{hot}: {r:#}");
    let probes = &r["probes"];
    assert_eq!(probes["inserted"], probes["removed"], "{r:#}");
    assert_eq!(probes["errors"], serde_json::json!([]), "{r:#}");
}

/// `hotentry` computes in two loops inside `churn`'s outer one: loop_1.1, a few iterations
/// long and entered tens of millions of times a second, whose timer costs more of the
/// program's time than the default 5% `--cost`, and loop_1.2, entered rarely. With that limit,
/// the search measures loop_1.1's timer within a moment of inserting it, removes it and refuses
/// the experiment, saying why; goes on to time loop_1.2; and ends with its overhead estimate
/// under the limit. (It kept such a timer in for its whole experiment, and then its siblings',
/// to an estimate of 14.8% on python3.)
#[test]
fn consult_removes_a_timer_that_costs_more_than_the_limit_and_stays_under_it() {
    let exe = Mutatee::new("hotentry").path(Variant::O2);
    let (_, r) = search_attached(&exe, "120", "hotentry", "--cost 5", false);
    let node = |tail: &str| {
        r["graph"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| {
                n["hypothesis"] == "CPUBound"
                    && n["focus"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(" > ")
                        .ends_with(tail)
            })
            .unwrap_or_else(|| panic!("no node for {tail}: {r:#}"))
            .clone()
    };
    let hot = node("churn > loop_1 > loop_1.1");
    assert_eq!(hot["state"], "refused", "{r:#}");
    let note = hot["note"].as_str().unwrap_or("");
    assert!(
        note.contains("over the 5.0% the cost limit allows"),
        "{r:#}"
    );
    // The search went on beside it.
    let other = node("churn > loop_1 > loop_1.2");
    assert!(
        other["state"] == "true" || other["state"] == "false",
        "{r:#}"
    );
    // What the search paces (its stops and timers) stays under the limit. gsh's own CPU
    // time competing with the program counts in the estimate too, and the stops share the
    // limit with it, but keep their tenth of it: a debug gsh on a loaded machine (load 22)
    // used 6% of a CPU, which took 5% of the program's running by itself.
    let overhead = r["overhead"].as_f64().unwrap();
    let competed = r["competed"].as_f64().unwrap();
    assert!(
        overhead - competed <= 0.05,
        "the search's overhead {overhead}, {competed} of it gsh's competition: {r:#}"
    );
    let probes = &r["probes"];
    assert_eq!(probes["inserted"], probes["removed"], "{r:#}");
    assert!(
        probes["cost"].as_f64().unwrap() < 0.05,
        "the timers' share: {r:#}"
    );
}

/// The stack sampler alone, attached to `dlhot` before it loads `libdlhot`: once the program
/// computes in the library, its samples name `hot` in `libdlhot`, and no frame of the library
/// is a bare address without a module. (The sampler takes the library up itself, at the first
/// stop that shows its code; it used to name such frames with an empty module until the
/// search had learnt the library and restarted it.)
#[test]
fn stack_samples_name_a_library_loaded_after_sampling_began() {
    use engine::consult::stacks::Stacks;
    use engine::instrument::Inferior;
    use engine::process::AttachedMode;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    let lib = Mutatee::new("libdlhot").path(Variant::O2);
    // It computes, as the searches do: one at a time.
    let _turn = super::consult::one_at_a_time();
    let (mut child, mut out) =
        spawn_running(&Mutatee::new("dlhot").path(Variant::O2), &lib, "dlhot");
    let pid = child.id() as i32;
    let inferior = Inferior::attach(pid, AttachedMode::Traced, false).expect("attach");
    inferior.resume_if_stopped().expect("resume");
    let store = Mutex::new(Stacks::new(pid));
    let done = AtomicBool::new(false);
    let lib_name = lib.file_name().unwrap().to_str().unwrap().to_owned();
    let in_hot = || {
        store
            .lock()
            .unwrap()
            .frames()
            .any(|f| f.function == "hot" && f.module == lib_name)
    };
    std::thread::scope(|s| {
        s.spawn(|| inferior.sample_stacks(&store, 0.2, &done));
        let since = Instant::now();
        while !in_hot() && since.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // A few more stops in the library.
        std::thread::sleep(Duration::from_millis(300));
        done.store(true, Ordering::SeqCst);
    });
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    drop(inferior);
    // SAFETY: kill(2) on the child we spawned and have not waited for.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("dlhot's output");
    let status = child.wait().expect("dlhot ends");
    let store = store.into_inner().unwrap();
    assert_eq!(store.error(), None);
    assert!(
        store
            .frames()
            .any(|f| f.function == "hot" && f.module == lib_name),
        "{:?}",
        store.frames().collect::<Vec<_>>()
    );
    // The library's code, from the maps: no frame there is nameless.
    let text: Vec<(u64, u64)> = maps
        .lines()
        .filter(|l| {
            l.ends_with(&lib_name) && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x'))
        })
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect();
    assert!(!text.is_empty(), "{maps}");
    for f in store.frames() {
        let addr = f
            .function
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        if let Some(a) = addr {
            assert!(
                !text.iter().any(|(lo, hi)| (*lo..*hi).contains(&a)),
                "a frame of {lib_name} with no module: {f:?}"
            );
        }
    }
    assert!(status.success(), "{status}");
    assert_eq!(rest, "dlhot done\n");
}

/// Starts `exe` with `arg`, its output piped, and waits for its first line, `NAME running`:
/// the program and the rest of its output.
fn spawn_running(
    exe: &std::path::Path,
    arg: impl AsRef<std::ffi::OsStr>,
    name: &str,
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(exe)
        .arg(arg)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first)
        .unwrap_or_else(|e| panic!("{name} does not say it runs: {e}"));
    assert_eq!(first, format!("{name} running\n"));
    (child, out)
}

/// `consult --for 40 --cost 20 EXTRA; show instrumentation` attached to mutatee `exe` (started
/// with `arg`, announcing itself as `name`), one search at a time. Stack samples may stop the
/// program a fifth of the time: on a loaded machine they wait for its thread to be scheduled,
/// and the search needs a dozen per experiment. (EXTRA may set `--cost` itself.) Checks what every such search must leave: the
/// program's code as in its file, no request in the plan, the program running on to print
/// `NAME done` on SIGUSR1. With `tell`, the program gets SIGUSR2 once gsh has attached (seen
/// from outside: a hands-off search traces it only while it is stopped, so the program may
/// never see it traced itself). Returns gsh's run and the search's result.
fn search_attached(
    exe: &std::path::Path,
    arg: impl AsRef<std::ffi::OsStr>,
    name: &str,
    extra: &str,
    tell: bool,
) -> (gsh_tests::GshOutput, serde_json::Value) {
    let _turn = super::consult::one_at_a_time();
    let (mut child, mut out) = spawn_running(exe, arg, name);
    let pid = child.id();
    if tell {
        std::thread::spawn(move || {
            let since = std::time::Instant::now();
            while since.elapsed() < std::time::Duration::from_secs(40) {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let traced = status
                    .lines()
                    .find_map(|l| l.strip_prefix("TracerPid:"))
                    .is_some_and(|t| t.trim() != "0");
                if traced {
                    // SAFETY: kill(2) on the child we spawned and have not waited for.
                    unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
    }
    let gsh = Gsh::new()
        .args([
            "--json",
            "-p",
            &pid.to_string(),
            "-c",
            &if extra.contains("--cost") {
                format!("consult --for 40 {extra}; show instrumentation")
            } else {
                format!("consult --for 40 --cost 20 {extra}; show instrumentation")
            },
        ])
        .run();
    // Whatever the search found, the program's code is the file's again and it runs on.
    let text = text_matches_file(pid, exe);
    // SAFETY: kill(2) on the child we spawned and have not waited for.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let mut rest = String::new();
    out.read_to_string(&mut rest)
        .unwrap_or_else(|e| panic!("{name}'s output: {e}"));
    let status = child.wait().expect("the program ends");
    gsh.assert_success();
    text.unwrap_or_else(|e| panic!("{e}\n{gsh}"));
    assert!(status.success(), "{status}");
    assert_eq!(rest, format!("{name} done\n"));
    let mut results: Vec<serde_json::Value> = json_stream(&gsh)
        .into_iter()
        .filter_map(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .collect();
    let shown = results.pop().expect("show instrumentation's result");
    assert_eq!(shown["rows"], serde_json::json!([]), "{gsh}");
    let r = results.pop().expect("consult's result");
    (gsh, r)
}
