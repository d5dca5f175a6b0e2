//! Whole programs instrumented everywhere (issue 12): every function's entry and every exit of
//! a real program get a counter of their own, the program is saved with `gsh`, and the copy
//! runs a workload beside the original. The copy must produce the original's output, and each
//! function's exits may never outnumber its entries (an exit firing without an entry is a
//! point in the wrong place); functions with more entries than exits are reported, as they
//! are left by `longjmp`, by `exit` or were still running when the counters were written.
//!
//! The counters are written by a snippet at `main`'s exit and at `exit@plt`'s entry,
//! `fwrite`-ing the declared variables (laid out in declaration order, 8 bytes each) to a file,
//! by the process that entered `main` only (forked children inherit the counters).
//! Used by the fast tests (`tests/it/whole_program.rs`) and by `cargo xtask whole-program`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::gsh::Gsh;

/// One function of the program and whether its exits are counted.
#[derive(Clone, Debug)]
pub struct Func {
    pub name: String,
    pub addr: String,
    pub exits: bool,
    /// One of its exits is an unresolved indirect `jmp`, which the analysis counts as an
    /// exit though it may be a switch inside the function (issue 12's analysis half): its
    /// exits can outnumber its entries.
    pub indirect: bool,
    /// Its entry point was skipped (`save` said why): its entries read 0, so its balance says
    /// nothing.
    pub entry_skipped: bool,
}

/// A program saved with a counter at every entry and exit.
#[derive(Debug)]
pub struct Saved {
    pub out: PathBuf,
    /// Where the copy writes its counters.
    pub dump: PathBuf,
    pub funcs: Vec<Func>,
    /// `save`'s report, as printed.
    pub report: String,
    pub took: Duration,
}

impl Saved {
    /// A line of `save`'s report (`Points`, `Tactics`, `Skipped`...), trimmed.
    pub fn field(&self, name: &str) -> String {
        self.report
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map_or_else(|| "-".to_owned(), |v| v.trim().to_owned())
    }
}

/// Entries and exits per function, read back from a run.
#[derive(Debug, Default)]
pub struct Balance {
    /// Functions entered at least once.
    pub called: usize,
    /// Of those with counted exits, how many returned exactly as often as they were entered.
    pub balanced: usize,
    /// `(name, entries, exits)` of functions entered more often than left normally.
    pub open: Vec<(String, u64, u64)>,
    /// `(name, entries, exits)` of functions left more often than entered: wrong points.
    pub extra_exits: Vec<(String, u64, u64)>,
    /// The same, for functions with an unresolved indirect `jmp` among their exits
    /// ([`Func::indirect`]).
    pub extra_exits_indirect: Vec<(String, u64, u64)>,
    /// `(name, entries, exits)` of functions whose entry point was skipped
    /// ([`Func::entry_skipped`]), left exits: not judged.
    pub entry_skipped: Vec<(String, u64, u64)>,
    /// `(name, entries)` of functions entered that have no exit point: they never return
    /// (`abort`-like, or they end in a loop or a no-return call).
    pub no_exits: Vec<(String, u64)>,
}

/// The rows of `gsh --json -c COMMAND FILE` (one command whose result is a table), with a
/// time limit fit for whole programs.
pub fn gsh_json_rows(command: &str, file: &Path) -> Vec<serde_json::Value> {
    let o = Gsh::new()
        .args(["--json", "-c", command])
        .arg(file)
        .timeout(Duration::from_secs(1800))
        .run();
    o.assert_success();
    let doc: serde_json::Value = serde_json::from_str(o.stdout.trim())
        .unwrap_or_else(|e| panic!("`{command}` printed no JSON ({e}): {}", o.stdout));
    doc["result"]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("`{command}` gave no rows"))
        .clone()
}

/// Saves `original` as `out` with a counter at every function's entry and exit.
pub fn save_counted(original: &Path, out: &Path) -> Saved {
    // A cold part (`f.cold`, or `sub_X.cold` found by its parent's jumps) is its parent's
    // code: it is never entered by a call, and its exits are its parent's, counted there.
    let rows: Vec<serde_json::Value> = gsh_json_rows("show functions", original)
        .into_iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains(".cold"))
        .collect();
    let points = gsh_json_rows("show points '*'", original);
    let with_exit: std::collections::HashSet<&str> = points
        .iter()
        .filter(|r| r["point"].as_str().is_some_and(|p| p.starts_with("exit")))
        .filter_map(|r| r["function"].as_str())
        .collect();
    let indirect: std::collections::HashSet<&str> = points
        .iter()
        .filter(|r| r["point"].as_str() == Some("exit (indirect jmp)"))
        .filter_map(|r| r["function"].as_str())
        .collect();
    // By address: the entry is a function's one point there.
    let skipped_entry: std::collections::HashSet<&str> = points
        .iter()
        .filter(|r| r["point"].as_str() == Some("entry"))
        .filter(|r| r["tactic"].as_str() == Some("skipped"))
        .filter_map(|r| r["address"].as_str())
        .collect();
    let mut seen = std::collections::HashMap::new();
    for r in &rows {
        *seen.entry(r["name"].as_str().unwrap_or("")).or_insert(0) += 1;
    }
    let funcs: Vec<Func> = rows
        .iter()
        .map(|r| {
            let name = r["name"].as_str().unwrap_or("").to_owned();
            // Exits are listed by name: a name two functions share cannot say whose.
            let exits = with_exit.contains(name.as_str()) && seen[name.as_str()] == 1;
            let addr = r["address"].as_str().unwrap_or("");
            Func {
                indirect: indirect.contains(name.as_str()),
                entry_skipped: skipped_entry.contains(addr),
                addr: addr.to_owned(),
                name,
                exits,
            }
        })
        .collect();
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    let fopen = fopen_of(original, &names);
    let dump = out.with_extension("counters");
    let mut script = String::new();
    for i in 0..funcs.len() {
        script.push_str(&format!("declare long gsh_e{i}; declare long gsh_x{i}\n"));
    }
    script.push_str("declare void *gsh_fp; declare long gsh_pid\n");
    // Forked children (bash's subshells and pipelines) inherit the counters; only the
    // process that entered main writes them (its main thread's id is its pid).
    script.push_str("at main entry { gsh_pid = $tid; }\n");
    for (i, f) in funcs.iter().enumerate() {
        script.push_str(&format!("at {} entry {{ gsh_e{i}++; }}\n", f.addr));
        if f.exits {
            script.push_str(&format!("at {} exit {{ gsh_x{i}++; }}\n", f.addr));
        }
    }
    let write = dump_snippet(fopen, &dump, "gsh_e0", funcs.len() * 2);
    script.push_str(&at_the_end(&points, &names, &write));
    let (report, took) = run_save(original, out, script);
    Saved {
        out: out.to_owned(),
        dump,
        funcs,
        report,
        took,
    }
}

/// Runs `script` (written beside `out` as `OUT.gsh`), then `save OUT`, on `original`; returns
/// `save`'s report, as printed, and how long it all took. Panics when gsh fails.
pub fn run_save(original: &Path, out: &Path, mut script: String) -> (String, Duration) {
    script.push_str(&format!("save {}\n", out.display()));
    let file = out.with_extension("gsh");
    std::fs::write(&file, script).expect("write the gsh script");
    let start = Instant::now();
    let o = Gsh::new()
        .args(["-c".into(), format!("source {}", file.display())])
        .arg(original)
        .timeout(Duration::from_secs(3600))
        .run();
    let took = start.elapsed();
    o.assert_success();
    let report = o
        .stdout
        .split("  Saved")
        .nth(1)
        .map(|s| format!("  Saved{s}"))
        .unwrap_or(o.stdout.clone());
    (report, took)
}

/// The program's own `fopen` (`fopen64` or `fopen`, through its PLT), for the snippet that
/// writes the counters. Panics when it imports neither.
pub fn fopen_of<'a>(original: &Path, names: &[&'a str]) -> &'a str {
    ["fopen64@plt", "fopen@plt"]
        .into_iter()
        .find_map(|f| names.iter().find(|n| **n == f))
        .and_then(|f| f.strip_suffix("@plt"))
        .unwrap_or_else(|| panic!("{} imports no fopen", original.display()))
}

/// A snippet writing `count` declared `long`s from `first` on (declared one after another,
/// 8 bytes each) to `dump`, in the process that entered `main` only (its main thread's id is
/// `gsh_pid`, which `at main entry { gsh_pid = $tid; }` sets; forked children inherit the
/// counters and must not write them).
pub fn dump_snippet(fopen: &str, dump: &Path, first: &str, count: usize) -> String {
    format!(
        "{{ if ($tid == gsh_pid) {{ gsh_fp = (void *){fopen}(\"{}\", \"w\"); fwrite(&{first}, 8, {count}, gsh_fp); fclose(gsh_fp); }} }}",
        dump.display()
    )
}

/// The commands that run `write` where the program ends normally: at `main`'s exits, or, when
/// `main` only tail-calls (python3's `main` is `jmp Py_BytesMain`), at the exits of the
/// functions it jumps to; and at `exit@plt`'s entry. `points` are `show points` rows holding
/// (at least) `main`'s, `names` the program's function names.
pub fn at_the_end(points: &[serde_json::Value], names: &[&str], write: &str) -> String {
    let mut script = String::new();
    let main_exits: Vec<&serde_json::Value> = points
        .iter()
        .filter(|r| r["function"].as_str() == Some("main"))
        .filter(|r| r["point"].as_str().is_some_and(|p| p.starts_with("exit")))
        .collect();
    let mut ends: Vec<String> = Vec::new();
    if !main_exits.is_empty()
        && main_exits
            .iter()
            .all(|r| r["point"].as_str() == Some("exit (tail call)"))
    {
        for r in &main_exits {
            if let Some(c) = r["callee"].as_str() {
                if !ends.iter().any(|e| e == c) {
                    ends.push(c.to_owned());
                }
            }
        }
    }
    if ends.is_empty() {
        ends.push("main".to_owned());
    }
    for f in &ends {
        script.push_str(&format!("at '{f}' exit {write}\n"));
    }
    if names.contains(&"exit@plt") {
        script.push_str(&format!("at exit@plt entry {write}\n"));
    }
    script
}

/// Reads the counters the last run of `saved.out` wrote.
pub fn balance(saved: &Saved) -> Balance {
    let bytes = std::fs::read(&saved.dump)
        .unwrap_or_else(|e| panic!("{} wrote no counters: {e}", saved.out.display()));
    assert_eq!(bytes.len(), saved.funcs.len() * 16, "counter file size");
    let word = |k: usize| u64::from_le_bytes(bytes[k * 8..k * 8 + 8].try_into().expect("8"));
    let mut b = Balance::default();
    for (i, f) in saved.funcs.iter().enumerate() {
        let (e, x) = (word(2 * i), word(2 * i + 1));
        if e > 0 {
            b.called += 1;
        }
        if !f.exits {
            if e > 0 {
                b.no_exits.push((f.name.clone(), e));
            }
            continue;
        }
        if f.entry_skipped {
            if x > 0 {
                b.entry_skipped.push((f.name.clone(), e, x));
            }
            continue;
        }
        match e.cmp(&x) {
            std::cmp::Ordering::Equal if e > 0 => b.balanced += 1,
            std::cmp::Ordering::Equal => {}
            std::cmp::Ordering::Greater => b.open.push((f.name.clone(), e, x)),
            std::cmp::Ordering::Less if f.indirect => {
                b.extra_exits_indirect.push((f.name.clone(), e, x))
            }
            std::cmp::Ordering::Less => b.extra_exits.push((f.name.clone(), e, x)),
        }
    }
    b
}

/// Runs `exe` with `args`, `input` on stdin; returns its output and wall time.
pub fn run_timed(exe: &Path, args: &[&str], input: &[u8]) -> (Output, Duration) {
    use std::io::Write as _;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .env("TERM", "dumb")
        .env("HOME", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = feeder.join();
    (out, start.elapsed())
}

/// The SQL workload for sqlite3 (in memory): a recursive CTE, grouping, joins, JSON, strings.
pub const SQL: &str = "create table t(a integer primary key, b, c text);
with recursive c(x) as (select 1 union all select x+1 from c where x < 3000)
  insert into t select x, x*x % 97, printf('row-%05d', x) from c;
create index tb on t(b);
select b, count(*), sum(a) from t group by b order by 2 desc, 1 limit 5;
select count(*) from t t1 join t t2 on t1.b = t2.b where t1.a < 200 and t2.a < 200;
select json_object('k', 1, 'v', json_group_array(a)) from (select a from t where a < 12);
select upper(c), length(c), substr(c, 3, 4) from t where a in (7, 700, 2999);
update t set c = c || '!' where b = 3;
delete from t where a % 5 = 0;
select count(*), max(c), min(a), avg(b) from t;
";

/// The interactive bash workload: functions, loops, arithmetic, expansions, traps, here
/// strings, arrays, a subshell and a pipeline.
pub const BASH: &str = r#"f() { local x=$1; echo "f $x $((x * x))"; }
for i in 1 2 3 4 5; do f $i; done
a=(one two three); echo "${#a[@]} ${a[1]} ${a[*]^^}"
s="hello world"; echo "${s/world/there} ${s:0:5} ${#s}"
trap 'echo got usr1' USR1; kill -USR1 $$
x=0; while (( x < 200 )); do x=$((x + 7)); done; echo "x=$x"
case abc in a*) echo starts-with-a;; *) echo other;; esac
read -r w <<< "from a here string"; echo "$w"
(echo in a subshell; exit 3); echo "status $?"
printf '%s\n' c b a | sort | tr a-z A-Z
declare -A m=([k]=v [z]=y); echo "${m[k]}${m[z]}"
echo done
exit
"#;
