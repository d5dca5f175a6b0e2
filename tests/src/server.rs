//! A running mutatee for the live-process tests and benchmarks: `tests/mutatees/server.c`
//! started outside gsh (so gsh can attach to it), its uninstrumented output for comparison,
//! and the check that a process's loaded text is its file's bytes again after gsh let go.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The lines `server THREADS ROUNDS` prints, from an uninstrumented run.
pub fn expected(exe: &Path, threads: u32, rounds: u32) -> String {
    let o = Command::new(exe)
        .args([threads.to_string(), rounds.to_string()])
        .output()
        .expect("run server");
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Starts `server THREADS ROUNDS` outside gsh, its stdout to `out`, and returns once it is
/// the server (not the test's fork on its way to exec).
pub fn spawn(exe: &Path, threads: u32, rounds: u32, out: &Path) -> Child {
    spawn_with(exe, &[threads.to_string(), rounds.to_string()], out)
}

/// [`spawn`], but the server keeps handling requests after its rounds until the file `stop`
/// exists (its output is the same): a test creates `stop` when done with the process, which
/// would otherwise exit under it when the machine is slow.
pub fn spawn_until(exe: &Path, threads: u32, rounds: u32, out: &Path, stop: &Path) -> Child {
    let _ = std::fs::remove_file(stop);
    let args = [threads.to_string(), rounds.to_string()];
    spawn_with(
        exe,
        &[&args[..], &[stop.display().to_string()]].concat(),
        out,
    )
}

fn spawn_with(exe: &Path, args: &[String], out: &Path) -> Child {
    let file = std::fs::File::create(out).expect("stdout file");
    let child = Command::new(exe)
        .args(args)
        .stdout(file)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn server");
    let want = std::fs::canonicalize(exe).expect("exe");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_link(format!("/proc/{}/exe", child.id())).ok() != Some(want.clone()) {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// Waits (at most a minute) for the server to exit 0 and returns what it printed.
pub fn wait_output(mut child: Child, out: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "server ended with {status}");
            break;
        }
        assert!(Instant::now() < deadline, "server did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(out).expect("server output")
}

/// Compares the executable's loaded text in process `pid` with the file `exe`: `Err` names
/// the first mapping that differs (or why it could not be read).
pub fn text_matches_file(pid: u32, exe: &Path) -> Result<(), String> {
    // A process that has ended has no text to compare: say so, rather than only the errno.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("process {pid} cannot be read ({e}): has it ended?"))?;
    let exe = std::fs::canonicalize(exe).map_err(|e| e.to_string())?;
    let file = std::fs::read(&exe).map_err(|e| e.to_string())?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
    let mut checked = 0;
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || Path::new(f[5]) != exe {
            continue;
        }
        let bad = || format!("bad maps line `{line}`");
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let (lo, hi) = f[0].split_once('-').ok_or_else(bad)?;
        let (lo, hi, off) = (hex(lo)?, hex(hi)?, hex(f[2])? as usize);
        let len = ((hi - lo) as usize).min(file.len().saturating_sub(off));
        let mut buf = vec![0u8; len];
        mem.read_exact_at(&mut buf, lo).map_err(|e| e.to_string())?;
        if buf != file[off..off + len] {
            return Err(format!(
                "process {pid}: text at {lo:#x} differs from the file:\n{}",
                differing_runs(&buf, &file[off..off + len], lo, off)
            ));
        }
        checked += len;
    }
    if checked == 0 {
        return Err(format!("no executable mapping of {} found", exe.display()));
    }
    Ok(())
}

/// The runs of bytes where `now` (the process's, mapped at `lo`) differs from `file` (from
/// file offset `off`), a line each with a few bytes around them, so that a failure tells
/// what was left (a jump, an `int3`, half of either) and where.
fn differing_runs(now: &[u8], file: &[u8], lo: u64, off: usize) -> String {
    const SHOWN: usize = 16;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in (0..now.len()).filter(|&i| now[i] != file[i]) {
        match runs.last_mut() {
            Some((_, end)) if i < *end + 8 => *end = i + 1,
            _ => runs.push((i, i + 1)),
        }
    }
    let hex = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!("{} run(s) differ", runs.len());
    for &(start, end) in runs.iter().take(SHOWN) {
        let (from, to) = (start.saturating_sub(4), (end + 4).min(now.len()));
        out.push_str(&format!(
            "\n  {:#x} (file offset {:#x}), {} byte(s) from {:#x}: process [{}] file [{}]",
            lo + start as u64,
            off + start,
            end - start,
            lo + from as u64,
            hex(&now[from..to]),
            hex(&file[from..to])
        ));
    }
    if runs.len() > SHOWN {
        out.push_str(&format!("\n  and {} more", runs.len() - SHOWN));
    }
    out
}

/// What of gsh process `pid` maps, a `/proc/PID/maps` line each: the runtime library, its
/// counter arena's memfd, and memory pools (anonymous mappings that start with the pools'
/// header, `gsh-pool`, or an anonymous executable mapping of any kind: the programs gsh is
/// tested on map none). Empty once a detach left the process as it was.
pub fn gsh_mappings(pid: u32) -> Result<Vec<String>, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("process {pid} cannot be read ({e}): has it ended?"))?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
    let mut found = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let name = f.get(5).copied().unwrap_or("");
        if name.contains("libgsh_rt") || name.contains("gsh-rt-arena") {
            found.push(line.to_owned());
            continue;
        }
        if f.len() < 5 || !name.is_empty() || f[4] != "0" || !f[1].starts_with('r') {
            continue;
        }
        if f[1].contains('x') {
            found.push(line.to_owned());
            continue;
        }
        let start = f[0]
            .split('-')
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("bad maps line `{line}`"))?;
        let mut magic = [0u8; 8];
        if mem.read_exact_at(&mut magic, start).is_ok() && &magic == b"gsh-pool" {
            found.push(line.to_owned());
        }
    }
    Ok(found)
}
