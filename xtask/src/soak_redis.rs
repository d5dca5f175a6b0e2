//! `soak-redis [--runs CYCLES] [--separate]`: issue 13's long live soak. redis-server (Debian's, installed
//! when missing) runs under `redis-benchmark -t set,get` load while gsh, driving the engine as
//! the shell does, goes through CYCLES of attach, `count '*'`, `time '*'`, `profile
//! pingCommand`, `coverage '*Command'`, a read of the values, delete, detach. In each cycle a
//! client of ours sends exactly K `PING`s, so `pingCommand`'s count must be K exactly, under
//! `count`, `time` and `coverage` (its entry block), and its profile's calls must sum to K.
//! Meanwhile a second client runs `SET`/`GET` pairs and checks every answer. After each
//! detach the text of every module the server maps must be its file's, and the next session
//! must find every pool gsh mapped in the server released (none still in use) and reuse them,
//! so their number never grows. Printed per cycle: gsh's RSS, the server's mapping count, the
//! pools, the slots in use, and the attach's and the detach's time and pause (the longest
//! reply a third client, pinging every 1 ms, saw meanwhile), with the cycle's baseline: its
//! longest reply in the 300 ms before the attach, gsh not there. At the end, the medians and
//! maxima over the cycles, each also as a ratio to its cycle's baseline.
//!
//! Then a real `gsh` process attaches and runs `count '*'` while the server runs, and is
//! SIGKILLed twice: once mid-insert (once it has written 64 KiB of trampolines), once
//! with its counters in place. Each time a cleaning session (`gsh -c 'attach --clean PID;
//! detach'`) must find what it left, remove it, and say the code is as the files have it; the
//! server must answer meanwhile. A last cycle, on the runtime the killed sessions left, must
//! count exactly again. At the end the server still answers, the text of every module it maps
//! is its file's, and gsh's RSS, its heap in use (malloc's live bytes, after `malloc_trim`) and
//! the server's mapping count over the cycles are printed (first, last, growth per cycle by
//! least squares from the second cycle on). The clients' timings are forgotten once each cycle
//! has read them: kept, they grew this process by ~1 MiB a cycle, which was once taken for gsh's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use engine::instrument::coverage;
use engine::instrument::measure::{self, Metric};
use engine::instrument::{Live, Plan};
use engine::process::Tracer;
use engine::Session;

use crate::bench_stall::{start_redis, Loader, Pinger, ANSWER_DEADLINE, PORT};

/// Pings sent per cycle.
const PINGS: u64 = 500;

fn ping(s: &mut TcpStream) -> Result<()> {
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n")?;
    s.read_exact(&mut buf)?;
    if &buf != b"+PONG\r\n" {
        bail!("redis answered {:?}", String::from_utf8_lossy(&buf));
    }
    Ok(())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes gsh has allocated and not freed (every malloc arena, and chunks mapped on their own),
/// after giving back to the system what malloc holds free: what RSS would be without
/// fragmentation and arenas kept for later, so that a leak shows as steady growth.
fn heap_in_use() -> u64 {
    // SAFETY: malloc_trim and mallinfo2 take no pointers; glibc locks each arena itself.
    let info = unsafe {
        libc::malloc_trim(0);
        libc::mallinfo2()
    };
    (info.uordblks + info.hblkhd) as u64
}

/// The growth per cycle of `v` (one value a cycle), by least squares: a first-to-last
/// difference would be one noisy reading against another.
fn slope(v: &[u64]) -> f64 {
    let n = v.len() as f64;
    if v.len() < 2 {
        return 0.0;
    }
    let mx = (n - 1.0) / 2.0;
    let my = v.iter().map(|&y| y as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, &y) in v.iter().enumerate() {
        sxy += (x as f64 - mx) * (y as f64 - my);
        sxx += (x as f64 - mx) * (x as f64 - mx);
    }
    sxy / sxx
}

fn mappings(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.lines().count())
        .unwrap_or(0)
}

/// The files the process maps executable (the program and its libraries).
fn code_files(pid: i32) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut out: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6 && f[1].contains('x') && f[5].starts_with('/'))
                .then(|| PathBuf::from(f[5]))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Each thread of `pid`: its state, tracer, kernel wait channel and system call, for a
/// server that stopped answering.
fn threads_now(pid: i32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let dir = t.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let status = read("status");
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        out.push(format!(
            "thread {} ({}): {}, tracer {}, wchan {}, syscall {}",
            t.file_name().to_string_lossy(),
            field("Name:"),
            field("State:"),
            field("TracerPid:"),
            read("wchan"),
            read("syscall").trim()
        ));
    }
    out.join("; ")
}

/// Every module's text in `pid` equals its file's.
fn all_text_matches(pid: i32) -> Result<usize> {
    let files = code_files(pid);
    for f in &files {
        gsh_tests::server::text_matches_file(pid as u32, f)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
    }
    Ok(files.len())
}

pub fn run(args: &[String]) -> Result<()> {
    const USAGE: &str = "soak-redis [--runs CYCLES] [--separate]";
    let separate = args.iter().any(|a| a == "--separate");
    let args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--separate")
        .cloned()
        .collect();
    let (file, cycles) = crate::file_and_runs(&args, 50, USAGE)?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: {USAGE}");
    }
    let leave = if separate {
        Leave::Separately
    } else {
        Leave::AtOnce
    };
    gsh_tests::ensure_package("redis-tools");
    // Built before the server starts: the killed sessions are this gsh.
    let gsh = gsh_tests::Gsh::binary().to_owned();
    let mut server = start_redis()?;
    let pid = server.id() as i32;
    let mut load = Command::new("redis-benchmark")
        .args([
            "-p",
            &PORT.to_string(),
            "-t",
            "set,get",
            "-n",
            "100000000",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting redis-benchmark")?;
    let result = soak(pid, cycles, &gsh, leave);
    let _ = load.kill();
    let _ = load.wait();
    let alive = server.try_wait().ok().flatten();
    let _ = server.kill();
    let _ = server.wait();
    if let Some(status) = alive {
        let during = match &result {
            Err(e) => format!("; the soak stopped with: {e:#}"),
            Ok(()) => String::new(),
        };
        bail!("redis-server ended during the soak ({status}){during}");
    }
    result
}

/// What one cycle measured.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    /// Counter slots in use before the delete.
    slots: usize,
    /// The longest reply the 1 ms pinger saw in the window before the attach, gsh not there.
    baseline: Duration,
    /// Attach to a running server, learn its modules, load (or find) the runtime.
    attach: Duration,
    /// The longest reply the pinger saw meanwhile: the attach's pause.
    attach_pause: Duration,
    /// The delete of every request, `Live::let_go` (the code put back and compared with the
    /// files, pools released) and the detach.
    detach: Duration,
    /// The longest reply the pinger saw meanwhile.
    detach_pause: Duration,
    /// gsh pools the session found in the server, all released by the previous one.
    pools: usize,
}

/// How a cycle deletes its requests and detaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    /// Both in one tracer job.
    AtOnce,
    /// As the shell's `delete` then `detach`: two jobs, with [`BETWEEN`] in between, in which
    /// the tracer, needed no more, goes hands-off (no ptrace) in the default attached mode.
    Separately,
}

/// The pause between the delete and the detach with [`Leave::Separately`].
const BETWEEN: Duration = Duration::from_millis(200);

/// How long the pinger runs alone before each attach: the cycle's baseline.
const BASELINE: Duration = Duration::from_millis(300);

/// One session on the engine, as the shell drives it: attach, load the runtime, `count '*'`,
/// `time '*'`, `profile pingCommand`, `coverage '*Command'`, PINGS pings, read and check the
/// values, delete, detach. Then the server's code must be its files' and the next session
/// finds every pool of this one released (nothing left in use).
fn cycle(
    pid: i32,
    cycle: usize,
    session: &mut Session,
    plan: &mut Plan,
    client: &mut TcpStream,
    pinger: &Pinger,
    leave: Leave,
) -> Result<Figures> {
    let mut f = Figures::default();
    let quiet = Instant::now();
    std::thread::sleep(BASELINE);
    let began = Instant::now();
    f.baseline = pinger.quantile(quiet, began, 1.0);
    let tracer = Tracer::attach(pid, Live::default())?;
    let earlier = {
        let session = &mut *session;
        tracer.with(|p, live| -> Result<_> {
            live.learn_modules(session, p)?;
            p.resume()?;
            live.load_runtime(p)?;
            // What the runtime's load found of the previous session's pools.
            Ok(p.earlier_pools()?)
        })??
    };
    f.attach = began.elapsed();
    // A ping the attach held up is answered just after it: let the pinger record it.
    std::thread::sleep(Duration::from_millis(20));
    f.attach_pause = pinger.longest_answered_since(began);
    if earlier.kept != 0 {
        bail!(
            "cycle {cycle}: {} pools ({} bytes) of the previous session are still in use",
            earlier.kept,
            earlier.kept_bytes
        );
    }
    f.pools = earlier.reused;
    let mut ids = Vec::new();
    for (glob, metric) in [
        ("*", Some(Metric::Count)),
        ("*", Some(Metric::Time)),
        ("pingCommand", Some(Metric::Profile)),
        ("*Command", None),
    ] {
        let id = match metric {
            Some(metric) => measure::add(plan, session, glob, metric)?.id,
            None => coverage::add(plan, session, glob, false)?.id,
        };
        let (s, pl) = (&*session, &*plan);
        tracer.with(|p, live| live.insert(p, s, pl, id))??;
        ids.push(id);
    }
    for _ in 0..PINGS {
        ping(client)?;
    }
    let (values, paths, covered, slots) = {
        let session = &*session;
        tracer.with(|p, live| -> Result<_> {
            let r = p.reader();
            let covered = live
                .coverage
                .summarise(Some(&r), |m| Some(session.module(m)))?;
            Ok((
                live.measure.values(&r)?,
                live.measure.paths(&r)?,
                covered,
                live.measure.slots_in_use(),
            ))
        })??
    };
    f.slots = slots;
    let of = |metric: Metric| {
        values
            .iter()
            .find(|v| v.function == "pingCommand" && v.metric == metric)
            .map(|v| v.calls)
    };
    let (c, t) = (of(Metric::Count), of(Metric::Time));
    let profiled: u64 = paths.iter().map(|p| p.calls).sum();
    let entered = covered
        .iter()
        .find(|f| f.function == "pingCommand")
        .map(|f| f.entries);
    // A wrong value is reported once the server is as it was (a tracer dropped with its
    // instrumentation in place would leave it to run into gsh's `int3`s untraced).
    let wrong =
        (c != Some(PINGS) || t != Some(PINGS) || profiled != PINGS || entered != Some(PINGS)).then(
            || {
                format!(
                "cycle {cycle}: {PINGS} pings, pingCommand counted {c:?}, timed {t:?}, profiled \
                 {profiled}, entered {entered:?} by coverage"
            )
            },
        );
    // Delete, then detach: in one job, or in two as the shell's `delete` and `detach` (#13:
    // redis was once reported to stop answering after the detach then, asserting in
    // propagatePendingCommands).
    let leaving = Instant::now();
    let delete = |p: &mut engine::process::Process, live: &mut Live| -> Result<()> {
        for id in &ids {
            live.remove(p, *id)?;
        }
        if live.measure.slots_in_use() != 0 {
            bail!(
                "{} slots still in use after delete",
                live.measure.slots_in_use()
            );
        }
        Ok(())
    };
    let (removed, left) = match leave {
        Leave::AtOnce => tracer.with(|p, live| -> Result<_> {
            let removed = delete(p, live);
            Ok((removed, live.let_go(p)?))
        })??,
        Leave::Separately => {
            let removed = tracer.with(|p, live| delete(p, live))?;
            std::thread::sleep(BETWEEN);
            ping(client).with_context(|| {
                format!(
                    "cycle {cycle}: after the delete; events {:?}; {}",
                    tracer.take_events(),
                    threads_now(pid)
                )
            })?;
            (removed, tracer.with(|p, live| live.let_go(p))??)
        }
    };
    drop(tracer);
    removed?;
    if let Some(wrong) = wrong {
        bail!(wrong);
    }
    f.detach = leaving.elapsed();
    std::thread::sleep(Duration::from_millis(20));
    f.detach_pause = pinger.longest_answered_since(leaving);
    if !left.is_empty() {
        bail!(
            "cycle {cycle}: after detaching, {} places differ from the files",
            left.len()
        );
    }
    all_text_matches(pid).with_context(|| format!("cycle {cycle}, after the detach"))?;
    for id in ids {
        plan.delete(id)?;
    }
    Ok(f)
}

/// `d` in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median and the largest of `v`.
fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        v.get(v.len() / 2).copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

/// Prints the attach and detach figures over `cycles`, each as a ratio to the same cycle's
/// baseline (the pinger's longest reply with gsh not there).
fn print_pauses(cycles: &[Figures]) {
    let ratio = |d: Duration, f: &Figures| ms(d) / ms(f.baseline).max(1e-3);
    type Get = fn(&Figures) -> Duration;
    let rows: [(&str, Get); 4] = [
        ("attach time", |f| f.attach),
        ("attach pause (longest reply)", |f| f.attach_pause),
        ("detach time", |f| f.detach),
        ("detach pause (longest reply)", |f| f.detach_pause),
    ];
    let (base, base_max) = median_max(cycles.iter().map(|f| ms(f.baseline)).collect());
    println!(
        "baseline, gsh not there: longest reply in {} ms of 1 ms pings, median over cycles \
         {base:.2} ms (max {base_max:.2} ms)",
        BASELINE.as_millis()
    );
    println!(
        "{:<30} {:>12} {:>12} {:>14} {:>14}",
        "", "median ms", "max ms", "median ratio", "max ratio"
    );
    for (name, get) in rows {
        let (m, x) = median_max(cycles.iter().map(|f| ms(get(f))).collect());
        let (rm, rx) = median_max(cycles.iter().map(|f| ratio(get(f), f)).collect());
        println!("{name:<30} {m:>12.2} {x:>12.2} {rm:>13.1}x {rx:>13.1}x");
    }
}

/// When the killed gsh dies.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// As soon as gsh has written 64 KiB after `count '*'` began: it is writing its
    /// trampolines into the server.
    MidInsert,
    /// Once `count '*'` has answered: its jumps and counters are in place.
    Inserted,
}

/// Bytes gsh has written so far (`wchar` of /proc/PID/io).
fn written(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Written bytes that mean gsh is inserting: more than any message it prints.
const INSERTING: u64 = 64 << 10;

/// Runs a `gsh` that attaches, lets the server run and counts every function, and SIGKILLs it
/// at `when`. Returns how long it had been running and what the server's text then had.
fn kill_gsh(gsh: &Path, pid: i32, exe: &Path, when: Kill) -> Result<(Duration, bool)> {
    let log = std::env::temp_dir().join(format!("gsh-soak-{}.log", std::process::id()));
    let mut child = Command::new(gsh)
        .args([
            "-c",
            &format!("attach {pid}; continue &; echo counting; count '*'; echo counted; sleep 120"),
        ])
        .arg(exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(&log)
                .context("gsh's log")?
                .try_clone()?,
        ))
        .spawn()
        .context("starting gsh")?;
    let started = Instant::now();
    let mut said = BufReader::new(child.stdout.take().context("gsh's stdout")?);
    let mut line = String::new();
    let wait_for = |said: &mut BufReader<_>, line: &mut String, what: &str| -> Result<()> {
        loop {
            line.clear();
            if said.read_line(line)? == 0 {
                bail!("gsh ended before saying `{what}`");
            }
            if line.trim_end() == what {
                return Ok(());
            }
        }
    };
    let result = (|| -> Result<()> {
        wait_for(&mut said, &mut line, "counting")?;
        match when {
            Kill::MidInsert => {
                // Trampolines go through /proc/PID/mem: gsh's written bytes say it is
                // inserting (in reused pools the bytes may be the same as before).
                let gsh_pid = child.id();
                let before = written(gsh_pid);
                let deadline = Instant::now() + Duration::from_secs(300);
                while written(gsh_pid) < before + INSERTING {
                    if Instant::now() > deadline {
                        bail!("gsh wrote no trampoline within 300 s of `count '*'`");
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            Kill::Inserted => wait_for(&mut said, &mut line, "counted")?,
        }
        Ok(())
    })();
    let lived = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    result.with_context(|| format!("the killed gsh's stderr:\n{said}"))?;
    let dirty = gsh_tests::server::text_matches_file(pid as u32, exe).is_err();
    Ok((lived, dirty))
}

/// `attach --clean PID; detach` in a new gsh: what it removed (its stderr line), and it must
/// end saying the code is as the files have it.
fn clean(gsh: &Path, pid: i32, exe: &Path) -> Result<String> {
    let out = Command::new(gsh)
        .args(["-c", &format!("attach --clean {pid}; detach")])
        .arg(exe)
        .stdin(Stdio::null())
        .output()
        .context("starting the cleaning gsh")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() || !stdout.contains("its code is as the files have it") {
        bail!(
            "the cleaning session failed ({}):\n{stdout}{stderr}",
            out.status
        );
    }
    Ok(stderr
        .lines()
        .find(|l| l.starts_with("removed "))
        .unwrap_or("removed nothing")
        .to_owned())
}

fn soak(pid: i32, cycles: usize, gsh: &Path, leave: Leave) -> Result<()> {
    let began = Instant::now();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let mut session = Session::new();
    session.open(&exe)?;
    let mut plan = Plan::default();
    let mut client = TcpStream::connect(("127.0.0.1", PORT))?;
    client.set_nodelay(true)?;
    client.set_read_timeout(Some(ANSWER_DEADLINE))?;
    // A second client checks every answer; a third pings every 1 ms and times the replies.
    let loader = Loader::start()?;
    // `ECHO`, not `PING`: pingCommand's count must be our client's pings alone.
    let pinger = Pinger::sending(b"ECHO t\r\n", b"$1\r\nt\r\n")?;
    println!(
        "cycle  gsh RSS (KiB)  heap in use (KiB)  server mappings  gsh pools  slots in use  \
         attach ms (pause)  detach ms (pause)  baseline ms"
    );
    let mut figures = Vec::new();
    let mut timings = Vec::new();
    let row = |cycle: usize, f: &Figures| {
        let heap = heap_in_use() / 1024;
        let r = (rss_kib(), mappings(pid), heap);
        println!(
            "{cycle:>5}  {:>13}  {:>17}  {:>15}  {:>9}  {:>12}  {:>9.1} ({:>5.1})  {:>9.1} ({:>5.1})  {:>11.2}",
            r.0,
            r.2,
            r.1,
            f.pools,
            f.slots,
            ms(f.attach),
            ms(f.attach_pause),
            ms(f.detach),
            ms(f.detach_pause),
            ms(f.baseline)
        );
        r
    };
    // The pings and pairs the clients timed, forgotten once read (each cycle reads only its
    // own) so that the RSS read is gsh's, not theirs (~1 MiB a cycle under this load).
    let mut forgotten = 0;
    let mut forget = || {
        let now = Instant::now();
        loader.forget_before(now);
        forgotten += pinger.forget_before(now);
    };
    for c in 0..cycles {
        let f = cycle(pid, c, &mut session, &mut plan, &mut client, &pinger, leave)?;
        forget();
        figures.push(row(c, &f));
        timings.push(f);
    }
    let cycled = began.elapsed();
    print_pauses(&timings);
    // From the second session on, the pools found are the first one's, reused.
    let pools: Vec<usize> = timings.iter().skip(1).map(|f| f.pools).collect();
    if pools.windows(2).any(|w| w[1] > w[0]) {
        bail!("the pools gsh leaves in the server grow from session to session: {pools:?}");
    }

    for when in [Kill::MidInsert, Kill::Inserted] {
        let (lived, dirty) = kill_gsh(gsh, pid, &exe, when)?;
        ping(&mut client).with_context(|| format!("redis after gsh was killed ({when:?})"))?;
        let removed = clean(gsh, pid, &exe)?;
        ping(&mut client).with_context(|| format!("redis after cleaning ({when:?})"))?;
        let files = all_text_matches(pid)?;
        println!(
            "gsh SIGKILLed {when:?} after {:.2} s (program text {}); cleaning session: \
             {removed}; then the text of all {files} code files is theirs",
            lived.as_secs_f64(),
            if dirty { "changed" } else { "unchanged" },
        );
    }
    // The runtime the killed sessions loaded keeps their values: exact again all the same.
    let f = cycle(
        pid,
        cycles,
        &mut session,
        &mut plan,
        &mut client,
        &pinger,
        leave,
    )?;
    forget();
    let last = row(cycles, &f);
    let pairs = loader.finish().context("the checking client")?;
    let pings = pinger.finish().context("the pinger")? + forgotten;

    ping(&mut client)?;
    let files = all_text_matches(pid)?;
    let (first, end) = (figures[0], figures[figures.len() - 1]);
    // From the second cycle on: the first fills the caches of the modules' analyses.
    let per = |get: fn(&(u64, usize, u64)) -> u64| {
        slope(&figures.iter().skip(1).map(get).collect::<Vec<_>>())
    };
    println!(
        "after {cycles} cycles, two killed sessions and one more cycle ({:.1} s, cycles {:.1} s): \
         the server answers and the text of its {files} code files is theirs; {pairs} SET/GET \
         pairs and {pings} pings answered right meanwhile",
        began.elapsed().as_secs_f64(),
        cycled.as_secs_f64()
    );
    println!(
        "gsh RSS: first cycle {} KiB, cycle {} {} KiB ({:+.1} KiB/cycle from cycle 1 on, least \
         squares), after the kills {} KiB",
        first.0,
        cycles - 1,
        end.0,
        per(|f| f.0),
        last.0
    );
    println!(
        "gsh heap in use: first cycle {} KiB, cycle {} {} KiB ({:+.1} KiB/cycle from cycle 1 on, \
         least squares), after the kills {} KiB",
        first.2,
        cycles - 1,
        end.2,
        per(|f| f.2),
        last.2
    );
    println!(
        "server mappings: first cycle {}, cycle {} {} ({:+.2}/cycle), after the kills {}",
        first.1,
        cycles - 1,
        end.1,
        per(|f| f.1 as u64),
        last.1
    );
    Ok(())
}
