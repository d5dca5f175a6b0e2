//! Measuring in rewritten binaries: `count`/`time`/`profile` then `save OUT --results R`. The
//! saved file loads gsh's runtime itself (`DT_NEEDED`), the runtime's constructor finds the
//! measuring descriptor through its `PT_GSH_MEASURE` header, and at exit the runtime writes R.
//! The program's output must be the original's, counts exact with four threads, for PIE and
//! non-PIE builds; a file with no room for the `DT_NEEDED` says to use `LD_PRELOAD`, runs
//! normally without the runtime (measuring nothing), and measures with it preloaded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gsh_tests::{gsh_c, run_program, target_dir, Mutatee, Variant};
use serde_json::Value;

/// A fresh directory for this test's outputs.
fn out_dir(test: &str) -> PathBuf {
    let dir = target_dir()
        .join("rewritten-measure-tests")
        .join(format!("{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Saves `exe` with `commands` then `save OUT --results R`; returns gsh's stdout.
fn save(exe: &Path, commands: &str, out: &Path, results: &Path) -> String {
    let o = gsh_c(
        &format!(
            "{commands}; save {} --results {}",
            out.display(),
            results.display()
        ),
        exe,
    );
    assert!(o.success(), "save failed: {}\n{}", o.stderr, o.stdout);
    o.stdout
}

/// The results file as `function -> (kind, count, ns)`, through the meta JSON's slot table.
fn by_function(results: &Value) -> BTreeMap<String, (String, u64, u64)> {
    let totals: BTreeMap<u64, (u64, u64)> = results["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().expect("number");
            (n("slot"), (n("count"), n("ns")))
        })
        .collect();
    results["meta"]["slots"]
        .as_array()
        .expect("meta slots")
        .iter()
        .map(|s| {
            let slot = s["slot"].as_u64().expect("slot");
            let (count, ns) = totals.get(&slot).copied().unwrap_or((0, 0));
            let name = s["function"].as_str().expect("function").to_owned();
            let kind = s["kind"].as_str().expect("kind").to_owned();
            (name, (kind, count, ns))
        })
        .collect()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no results at {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// Runs `exe` and checks it printed what the mutatee should and exited 0.
fn run_like_original(m: &Mutatee, exe: &Path, env: &[(&str, &Path)]) {
    let o = run_program(exe, &[], env);
    assert!(
        o.status.success(),
        "{} failed: {}",
        exe.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        m.expected_stdout(),
        "{}",
        exe.display()
    );
}

#[test]
fn saved_counts_and_times_are_exact_with_four_threads() {
    let m = Mutatee::new("threads");
    for v in [Variant::O2, Variant::Pie, Variant::NoPie] {
        let exe = m.path(v);
        let dir = out_dir(&format!("exact-{v:?}"));
        let (out, results) = (dir.join("threads.out"), dir.join("r.json"));
        let report = save(&exe, "count work_item; time worker", &out, &results);
        assert!(report.contains("loaded by the file"), "{v:?}: {report}");
        let _ = std::fs::remove_file(&results);
        run_like_original(&m, &out, &[]);
        let r = read_json(&results);
        let f = by_function(&r);
        assert_eq!(f["work_item"].0, "count", "{v:?}: {r}");
        assert_eq!(f["work_item"].1, 4000, "{v:?}: {r}");
        assert_eq!(f["worker"].0, "time", "{v:?}: {r}");
        assert_eq!(f["worker"].1, 4, "{v:?}: {r}");
        assert!(f["worker"].2 > 0, "{v:?}: workers take time: {r}");
        // One entry per thread block: a worker that starts after another ended takes its
        // block, counts and all, so there are at most four, holding every count.
        let threads = r["threads"].as_array().expect("threads");
        assert!((1..=4).contains(&threads.len()), "{v:?}: {r}");
        let counted: u64 = threads
            .iter()
            .filter_map(|t| t["slots"].as_array())
            .flatten()
            .filter(|s| s["slot"] == 0)
            .filter_map(|s| s["count"].as_u64())
            .sum();
        assert_eq!(counted, 4000, "{v:?}: {r}");
        // The first module is the program, by its path; the runtime is loaded too.
        let modules = r["modules"].as_array().expect("modules");
        let first = modules[0]["name"].as_str().expect("name");
        assert_eq!(
            std::fs::canonicalize(first).ok(),
            std::fs::canonicalize(&out).ok(),
            "{v:?}: {r}"
        );
        assert!(
            modules.iter().any(|m| m["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("libgsh_rt.so"))),
            "{v:?}: {r}"
        );
    }
}

#[test]
fn saved_profile_walks_through_the_program() {
    let m = Mutatee::new("threads");
    let exe = m.path(Variant::O2);
    let dir = out_dir("profile");
    let (out, results) = (dir.join("threads.out"), dir.join("r.json"));
    save(&exe, "profile work_item", &out, &results);
    run_like_original(&m, &out, &[]);
    let r = read_json(&results);
    let paths: Vec<&Value> = r["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .flat_map(|t| t["paths"].as_array().expect("paths"))
        .collect();
    let calls: u64 = paths
        .iter()
        .map(|p| p["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(calls, 4000, "{r}");
    // The call-site table in the descriptor lets the walk leave `worker` without frame
    // pointers: every path has its return address in worker and the one into the thread start.
    for p in &paths {
        assert!(p["ras"].as_array().is_some_and(|a| a.len() >= 2), "{r}");
    }
}

#[test]
fn results_default_next_to_the_output_and_gsh_rt_output_overrides() {
    let m = Mutatee::new("threads");
    let exe = m.path(Variant::O2);
    let dir = out_dir("default");
    let out = dir.join("threads.out");
    let o = gsh_c(&format!("count worker; save {}", out.display()), &exe);
    assert!(o.success(), "{}", o.stderr);
    let default = dir.join("threads.out.gsh.json");
    assert!(
        o.stdout.contains(&*default.to_string_lossy()),
        "{}",
        o.stdout
    );
    run_like_original(&m, &out, &[]);
    assert_eq!(by_function(&read_json(&default))["worker"].1, 4);

    let elsewhere = dir.join("elsewhere.json");
    std::fs::remove_file(&default).expect("remove");
    run_like_original(&m, &out, &[("GSH_RT_OUTPUT", &elsewhere)]);
    assert!(!default.exists());
    assert_eq!(by_function(&read_json(&elsewhere))["worker"].1, 4);
}

/// A copy of `exe` whose `PT_DYNAMIC` ends right after its terminating `DT_NULL`: no spare
/// entry for a `DT_NEEDED` (linkers always leave some).
fn without_spare_dynamic_entries(exe: &Path, to: &Path) {
    let mut b = std::fs::read(exe).expect("read");
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u64_at = |b: &[u8], at: usize| {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize
    };
    let (phoff, phnum) = (u64_at(&b, 32), u16_at(&b, 56));
    let ph = (0..phnum)
        .map(|i| phoff + 56 * i)
        .find(|&at| u32::from_le_bytes(b[at..at + 4].try_into().expect("4")) == 2)
        .expect("PT_DYNAMIC");
    let start = u64_at(&b, ph + 8);
    let used = (0..)
        .take_while(|i| u64_at(&b, start + 16 * i) != 0)
        .count();
    let size = ((used + 1) * 16) as u64;
    b[ph + 32..ph + 40].copy_from_slice(&size.to_le_bytes());
    b[ph + 40..ph + 48].copy_from_slice(&size.to_le_bytes());
    std::fs::write(to, &b).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn no_room_for_the_runtime_means_ld_preload_and_without_it_nothing_is_measured() {
    let m = Mutatee::new("threads");
    let dir = out_dir("preload");
    let bare = dir.join("threads-nospare");
    without_spare_dynamic_entries(&m.path(Variant::O2), &bare);
    let (out, results) = (dir.join("threads.out"), dir.join("r.json"));
    let report = save(&bare, "count work_item worker", &out, &results);
    assert!(report.contains("LD_PRELOAD="), "{report}");
    let runtime = report
        .split("LD_PRELOAD=")
        .nth(1)
        .and_then(|s| s.split([')', ' ', '\n']).next())
        .map(PathBuf::from)
        .expect("the runtime's path");

    // Without the runtime: the same output, no results, no crash.
    let _ = std::fs::remove_file(&results);
    run_like_original(&m, &out, &[]);
    assert!(!results.exists(), "nothing measured, nothing written");

    // Preloaded: exact counts.
    run_like_original(&m, &out, &[("LD_PRELOAD", &runtime)]);
    let f = by_function(&read_json(&results));
    assert_eq!((f["work_item"].1, f["worker"].1), (4000, 4));
}

#[test]
fn static_executables_cannot_measure() {
    let dir = out_dir("static");
    let src = gsh_tests::mutatee_source_dir().join("basic.c");
    let exe = dir.join("basic-static");
    let built = std::process::Command::new("gcc")
        .args(["-O1", "-g", "-static", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let o = gsh_c(
        &format!("count main; save {}", dir.join("out").display()),
        &exe,
    );
    assert_ne!(o.code, Some(0), "{}", o.stdout);
    assert!(o.stderr.contains("statically linked"), "{}", o.stderr);
    assert!(!dir.join("out").exists());
}

/// Figures (shown with `--nocapture`): the original and the saved counting program's run time.
#[test]
fn saved_counting_costs_little() {
    let m = Mutatee::new("threads");
    let exe = m.path(Variant::O2);
    let dir = out_dir("cost");
    let (out, results) = (dir.join("threads.out"), dir.join("r.json"));
    save(&exe, "count work_item worker", &out, &results);
    let best = |p: &Path| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                run_like_original(&m, p, &[]);
                t.elapsed()
            })
            .min()
            .expect("runs")
    };
    let (before, after) = (best(&exe), best(&out));
    eprintln!("threads: original {before:?}, saved with counts {after:?} (best of 5)");
}

#[test]
fn a_measuring_file_is_not_measured_again() {
    let m = Mutatee::new("threads");
    let dir = out_dir("again");
    let (out, results) = (dir.join("threads.out"), dir.join("r.json"));
    save(&m.path(Variant::O2), "count worker", &out, &results);
    let o = gsh_c(
        &format!("count work_item; save {}", dir.join("again").display()),
        &out,
    );
    assert_ne!(o.code, Some(0), "{}", o.stdout);
    assert!(o.stderr.contains("already measures"), "{}", o.stderr);
}

#[test]
fn a_saved_shared_library_measures_in_the_program_that_loads_it() {
    let dir = out_dir("shared");
    let (link, saved) = (dir.join("link"), dir.join("saved"));
    for d in [&link, &saved] {
        std::fs::create_dir_all(d).expect("dir");
    }
    let lib = link.join("libshared.so");
    std::fs::copy(Mutatee::new("libshared").path(Variant::O2), &lib).expect("copy");
    let source = dir.join("user.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n\
         int shared_add(int, int); int shared_hash(const char *);\n\
         int main(void) { printf(\"%d %d\\n\", shared_add(2, 3), shared_hash(\"gsh\")); return 0; }\n",
    )
    .expect("write user.c");
    let user = dir.join("user");
    let built = std::process::Command::new("gcc")
        .arg(&source)
        .arg(format!("-L{}", link.display()))
        .args(["-lshared", "-o"])
        .arg(&user)
        .output()
        .expect("gcc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let results = dir.join("r.json");
    save(
        &lib,
        "count mix; count shared_add",
        &saved.join("libshared.so"),
        &results,
    );
    let run = |libs: &Path| run_program(&user, &[], &[("LD_LIBRARY_PATH", libs)]);
    let (original, measured) = (run(&link), run(&saved));
    assert!(
        measured.status.success(),
        "{}",
        String::from_utf8_lossy(&measured.stderr)
    );
    assert_eq!(measured.stdout, original.stdout);
    let f = by_function(&read_json(&results));
    // shared_hash("gsh"): mix per character, then once more in shared_internal.
    assert_eq!((f["mix"].1, f["shared_add"].1), (4, 1), "{f:?}");
}
