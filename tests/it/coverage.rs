//! Block coverage (`coverage FUNC...`, `report`, `report --lcov`), graded against gcov: the
//! mutatee `tests/mutatees/coverage.c` is built at -O0 twice, plainly and with `--coverage`;
//! the `--coverage` build runs and gcov says which lines ran, the plain build runs under
//! `coverage '*'` with the same input, and the two sets of executed lines must be equal.
//! Also: exact block counts of a small function, live and in a saved file; the lcov
//! tracefile is accepted by genhtml; the program's output is unchanged; an unknown function
//! is a clear error.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gsh_tests::{
    ensure_package, gsh_c, gsh_json_all, mutatee_source_dir, run_program, run_tool, target_dir,
};
use serde_json::Value;

/// The input both builds run with.
const INPUT: &str = "a1b2";
/// What the mutatee prints for it.
const OUTPUT: &str = "weight 203 odd 3 steps 52 tail 1\n";

/// The mutatee built in a fresh directory of this test: `plain` (-O0 -g) and, with `gcov`,
/// `cov` (-O0 -g --coverage, writing its `.gcda` beside it).
struct Build {
    dir: PathBuf,
    plain: PathBuf,
    source: PathBuf,
}

fn build(test: &str, gcov: bool) -> Build {
    let dir = target_dir()
        .join("coverage-tests")
        .join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let source = dir.join("coverage.c");
    std::fs::copy(mutatee_source_dir().join("coverage.c"), &source).expect("copy the source");
    let gcc = |out: &str, extra: &[&str]| {
        let mut args = vec!["-O0", "-g", "-o", out, "coverage.c"];
        args.extend_from_slice(extra);
        let o = Command::new("gcc")
            .args(&args)
            .current_dir(&dir)
            .output()
            .expect("run gcc");
        assert!(
            o.status.success(),
            "gcc {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    gcc("plain", &[]);
    if gcov {
        gcc("cov", &["--coverage"]);
    }
    Build {
        plain: dir.join("plain"),
        dir,
        source,
    }
}

/// The `report` result of a `--json` run of `commands` on `exe` (the last document).
fn report(commands: &str, exe: &Path) -> Value {
    gsh_json_all(commands, exe)
        .pop()
        .expect("report printed a document")
}

/// One function's entry of a report's `coverage`.
fn function<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["coverage"]
        .as_array()
        .expect("coverage")
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

/// (executable, executed) lines of the mutatee's source in a report.
fn gsh_lines(report: &Value) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut all, mut ran) = (BTreeSet::new(), BTreeSet::new());
    for f in report["coverage"].as_array().expect("coverage") {
        assert_eq!(
            f["unprobed"], 0,
            "every block of {} has a probe",
            f["function"]
        );
        for l in f["lines"].as_array().into_iter().flatten() {
            if !l["file"].as_str().expect("file").ends_with("/coverage.c") {
                continue;
            }
            let line = l["line"].as_u64().expect("line");
            all.insert(line);
            if l["count"].as_u64().expect("count") > 0 {
                ran.insert(line);
            }
        }
    }
    (all, ran)
}

/// (executable, executed) lines of `coverage.c` as gcov reports them after the `--coverage`
/// build ran.
fn gcov_lines(b: &Build) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let o = run_program(&b.dir.join("cov"), &[INPUT], &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), OUTPUT);
    let o = Command::new("gcov")
        .args(["--json-format", "--stdout", "cov-coverage.gcda"])
        .current_dir(&b.dir)
        .output()
        .expect("run gcov");
    assert!(
        o.status.success(),
        "gcov: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: Value = serde_json::from_slice(&o.stdout).expect("gcov's JSON");
    let (mut all, mut ran) = (BTreeSet::new(), BTreeSet::new());
    for f in doc["files"].as_array().expect("files") {
        if !f["file"].as_str().expect("file").ends_with("coverage.c") {
            continue;
        }
        for l in f["lines"].as_array().expect("lines") {
            let line = l["line_number"].as_u64().expect("line");
            all.insert(line);
            if l["count"].as_u64().expect("count") > 0 {
                ran.insert(line);
            }
        }
    }
    (all, ran)
}

#[test]
fn executed_lines_agree_with_gcov() {
    let b = build("gcov", true);
    let (gcov_all, gcov_ran) = gcov_lines(&b);
    let r = report(&format!("coverage '*'; run {INPUT}; report"), &b.plain);
    let (gsh_all, gsh_ran) = gsh_lines(&r);
    let text = std::fs::read_to_string(&b.source).expect("source");
    let src: Vec<&str> = text.lines().collect();
    let at = |l: u64| src[l as usize - 1].trim();
    // Principled exclusions, each checked to be only what it claims: gcov counts lines that
    // have no machine code of their own in gcc's line table (a function's declarator line,
    // which gcov gives the entry block where the line table puts the prologue on `{`; and
    // `case`/`default` labels), and the line table has rows for lines gcov does not list (a
    // function's opening `{` and closing `}`, the prologue and epilogue). Only lines both
    // call executable are compared.
    for l in gcov_all.difference(&gsh_all) {
        let declarator = at(l + 1) == "{" && at(*l).ends_with(')');
        let label = at(*l).starts_with("case ") || at(*l) == "default:";
        assert!(
            declarator || label,
            "gcov's line {l} `{}` has no code in the line table, and is neither a function's \
             declarator nor a case label",
            at(*l)
        );
    }
    for l in gsh_all.difference(&gcov_all) {
        assert!(
            at(*l) == "{" || at(*l) == "}",
            "line {l} `{}` has code but gcov does not call it executable",
            at(*l)
        );
    }
    let both: BTreeSet<u64> = gcov_all.intersection(&gsh_all).copied().collect();
    assert!(both.len() > 30, "compared only {} lines", both.len());
    let gcov_ran: BTreeSet<u64> = gcov_ran.intersection(&both).copied().collect();
    let gsh_ran: BTreeSet<u64> = gsh_ran.intersection(&both).copied().collect();
    assert_eq!(
        gsh_ran, gcov_ran,
        "executed lines: gsh (left) and gcov (right) differ"
    );
    // Both sides saw code that did not run (never_called, the default arm, the abort).
    assert!(both.len() > gcov_ran.len() + 5);
}

#[test]
fn a_small_function_counts_exactly_live_and_saved() {
    let b = build("exact", false);
    // parity(0..7), then parity(203) and parity(52) at -O0: the test block runs 9 times, the
    // odd arm 4, the even arm 5, the join 9.
    let expect = |f: &Value| {
        assert_eq!(f["blocks"], 4, "{f}");
        assert_eq!(f["covered"], 4, "{f}");
        assert_eq!(f["unprobed"], 0, "{f}");
        assert_eq!(f["entries"], 9, "{f}");
        let counts: Vec<u64> = f["block_counts"]
            .as_array()
            .expect("block_counts")
            .iter()
            .map(|b| b["count"].as_u64().expect("count"))
            .collect();
        assert_eq!(counts, [9, 4, 5, 9], "{f}");
        let (covered, total) = f["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .fold((0, 0), |(c, t), l| {
                (c + u64::from(l["count"].as_u64() > Some(0)), t + 1)
            });
        assert_eq!((covered, total), (6, 6), "{f}");
    };
    let live = report(&format!("coverage parity; run {INPUT}; report"), &b.plain);
    expect(function(&live, "parity"));

    let saved = b.dir.join("saved");
    let results = b.dir.join("saved.json");
    let o = gsh_c(
        &format!(
            "coverage parity weigh; save {} --results {}",
            saved.display(),
            results.display()
        ),
        &b.plain,
    );
    assert!(o.success(), "save: {}", o.stderr);
    // The program computes what the original computes.
    let run = run_program(&saved, &[INPUT], &[]);
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), OUTPUT);
    let r = report(&format!("report {}", results.display()), &b.plain);
    expect(function(&r, "parity"));
    let weigh = function(&r, "weigh");
    assert_eq!(weigh["entries"], 1);
    assert_eq!(weigh["unprobed"], 0);
    // The default arm (`total -= 1`) never runs for "a1b2": one block of weigh is not covered
    // (and the switch's unreachable fall-through, at -O0, another).
    assert!(
        weigh["covered"].as_u64() < weigh["blocks"].as_u64(),
        "{weigh}"
    );
}

/// A block's counts, in address order.
fn block_counts(f: &Value) -> Vec<u64> {
    f["block_counts"]
        .as_array()
        .expect("block_counts")
        .iter()
        .map(|b| b["count"].as_u64().expect("count"))
        .collect()
}

#[test]
fn once_takes_out_the_probes_of_blocks_seen() {
    let b = build("once", false);
    // Stopped in count_down, parity has run 7 times (its blocks 7, 3, 4, 7); `report` takes
    // its probes out, so the two calls after count_down are not counted.
    let out = gsh_json_all(
        &format!(
            "coverage parity --once; break count_down entry; run {INPUT}; report; continue; report"
        ),
        &b.plain,
    );
    let first = function(&out[3], "parity");
    assert_eq!(block_counts(first), [7, 3, 4, 7], "{first}");
    let last = function(&out[5], "parity");
    assert_eq!(block_counts(last), [7, 3, 4, 7], "{last}");
    // Without --once the same run counts them.
    let out = gsh_json_all(
        &format!("coverage parity; break count_down entry; run {INPUT}; report; continue; report"),
        &b.plain,
    );
    assert_eq!(block_counts(function(&out[5], "parity")), [9, 4, 5, 9]);
    // A saved file has no gsh to take probes out.
    let o = gsh_c("coverage parity --once; save once.out", &b.plain);
    assert!(!o.success());
    assert!(o.stderr.contains("--once"), "{}", o.stderr);
}

#[test]
fn lcov_tracefile_is_accepted_by_genhtml() {
    ensure_package("lcov");
    let b = build("lcov", false);
    let info = b.dir.join("cov.info");
    let o = gsh_c(
        &format!(
            "coverage '*'; run {INPUT}; report --lcov {}",
            info.display()
        ),
        &b.plain,
    );
    assert!(o.success(), "{}", o.stderr);
    assert!(
        o.stdout.contains(OUTPUT),
        "the program's output: {}",
        o.stdout
    );
    let text = std::fs::read_to_string(&info).expect("tracefile");
    assert!(
        text.contains(&format!("SF:{}", b.source.display())),
        "{text}"
    );
    assert!(text.contains("FNDA:9,parity"), "{text}");
    assert!(text.contains("FNDA:0,never_called"), "{text}");
    assert!(text.trim_end().ends_with("end_of_record"), "{text}");
    let html = b.dir.join("html");
    let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
    run_tool("genhtml", &["--quiet", "-o", &path(&html), &path(&info)]);
    assert!(html.join("index.html").is_file(), "genhtml wrote no index");
}

#[test]
fn an_unknown_function_is_a_clear_error() {
    let b = build("unknown", false);
    let o = gsh_c("coverage no_such_function", &b.plain);
    assert!(!o.success());
    assert!(
        o.stderr.contains("gsh: ") && o.stderr.contains("no_such_function"),
        "{}",
        o.stderr
    );
}

#[test]
fn blocks_without_a_probe_are_reported_unprobed() {
    // `ls` has blocks too small for a jump in functions that cannot be relocated (indirect
    // jumps): only a trap reaches them, and coverage takes none. Whatever this machine's ls
    // has, every block `save` left out is reported unprobed (count null), none is dropped,
    // and the saved ls lists a directory as the original does.
    let b = build("unprobed", false);
    let ls = Path::new("/usr/bin/ls");
    let saved = b.dir.join("ls.cov");
    let results = b.dir.join("ls.json");
    let out = gsh_json_all(
        &format!(
            "coverage '*'; save {} --results {}",
            saved.display(),
            results.display()
        ),
        ls,
    );
    let save = out.last().expect("save's record");
    let skipped = save["skipped"].as_u64().unwrap_or(0);
    let counters = save["coverage"].clone();
    let dir = b.dir.to_str().expect("UTF-8").to_owned();
    let original = run_program(ls, &["-la", "/usr/lib"], &[]);
    let run = run_program(&saved, &["-la", "/usr/lib"], &[]);
    assert!(run.status.success());
    assert_eq!(run.stdout, original.stdout);
    let r = report(&format!("report {}", results.display()), ls);
    let functions = r["coverage"].as_array().expect("coverage");
    let (blocks, unprobed, null) = functions.iter().fold((0, 0, 0), |(b, u, n), f| {
        let nulls = f["block_counts"]
            .as_array()
            .expect("block_counts")
            .iter()
            .filter(|b| b["count"].is_null())
            .count() as u64;
        (
            b + f["blocks"].as_u64().expect("blocks"),
            u + f["unprobed"].as_u64().expect("unprobed"),
            n + nulls,
        )
    });
    assert_eq!(
        unprobed, skipped,
        "save skipped {skipped}, report says {unprobed} ({dir})"
    );
    assert_eq!(null, unprobed);
    assert_eq!(counters, format!("{blocks} block counters"), "{save}");
}

/// A function whose only way to a probe is bytes a neighbour planned before it would take
/// (`crowded.c`: crowd_a's first block evicts the only plain bytes in reach, crowd_b's, which
/// crowd_b's own small first block needs): planning crowd_b first gives every block of both
/// a probe, live and saved, and both still compute what they did. Before, crowd_b's first
/// block was unprobed ("part of it is patched already").
#[test]
fn a_neighbours_eviction_leaves_no_block_unprobed() {
    let m = gsh_tests::Mutatee::new("crowded");
    let exe = m.path(gsh_tests::Variant::O2);
    let expect = |r: &Value, how: &str| {
        for (name, entries) in [("crowd_a", 3), ("crowd_b", 3)] {
            let f = function(r, name);
            assert_eq!(f["unprobed"], 0, "{how} {name}: {f}");
            assert_eq!(f["blocks"], 3, "{how} {name}: {f}");
            assert_eq!(f["entries"], entries, "{how} {name}: {f}");
        }
        // crowd_a(0) takes the je, crowd_a(1), crowd_a(2) fall through; crowd_b likewise.
        assert_eq!(block_counts(function(r, "crowd_a")), [3, 2, 1], "{how}");
        assert_eq!(block_counts(function(r, "crowd_b")), [3, 2, 1], "{how}");
    };
    let dir = target_dir()
        .join("coverage-tests")
        .join(format!("crowded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let out = dir.join("live.out");
    let live = report(
        &format!("coverage 'crowd_*'; run > {}; report", out.display()),
        &exe,
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("live output"),
        m.expected_stdout()
    );
    expect(&live, "live");
    let (saved, results) = (dir.join("saved"), dir.join("saved.json"));
    let o = gsh_c(
        &format!(
            "coverage 'crowd_*'; save {} --results {}",
            saved.display(),
            results.display()
        ),
        &exe,
    );
    assert!(o.success(), "save: {}", o.stderr);
    assert!(!o.stdout.contains("skipped"), "{}", o.stdout);
    let run = run_program(&saved, &[], &[]);
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), m.expected_stdout());
    expect(
        &report(&format!("report {}", results.display()), &exe),
        "saved",
    );
}

/// A function split into a hot part and a cold part far from it, with another function's
/// sites between them (`crowded.c`'s split_fn and split_wall): its small first block needs
/// the function copied whole, and the copy needs only its own blocks, so it is copied, live
/// with split_wall inserted before it and saved with both at once. Before, the span from its
/// lowest block to its highest counted as its own and the copy was refused as "patched
/// already", leaving that block unprobed.
#[test]
fn a_function_split_around_other_sites_is_copied_whole() {
    let m = gsh_tests::Mutatee::new("crowded");
    let exe = m.path(gsh_tests::Variant::O2);
    let expect = |r: &Value, how: &str| {
        let f = function(r, "split_fn");
        assert_eq!(f["unprobed"], 0, "{how}: {f}");
        assert_eq!(f["blocks"], 5, "{how}: {f}");
        assert_eq!(f["entries"], 3, "{how}: {f}");
        // split_fn(0) takes its first je; split_fn(2) the jump to its cold block.
        assert_eq!(block_counts(f), [1, 3, 2, 1, 1], "{how}");
        assert_eq!(function(r, "split_wall")["unprobed"], 0, "{how}");
    };
    let live = report(
        "coverage split_wall; coverage split_fn; run > /dev/null; report",
        &exe,
    );
    expect(&live, "live");
    let dir = target_dir()
        .join("coverage-tests")
        .join(format!("split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let (saved, results) = (dir.join("saved"), dir.join("saved.json"));
    let o = gsh_c(
        &format!(
            "coverage 'split_*'; save {} --results {}",
            saved.display(),
            results.display()
        ),
        &exe,
    );
    assert!(o.success(), "save: {}", o.stderr);
    let run = run_program(&saved, &[], &[]);
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), m.expected_stdout());
    expect(
        &report(&format!("report {}", results.display()), &exe),
        "saved",
    );
}
