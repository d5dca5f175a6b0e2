//! `bench-stall [count|coverage] [--runs N]`: how long gsh stops redis-server while it
//! changes its code, as a client pinging it every 1 ms sees it, all in one run against two
//! baselines measured in that run: the reply time the client sees while gsh only stops and
//! resumes the server (the floor), and the 99th percentile of its replies while gsh does
//! nothing at all. The server is Debian's, installed when missing.
//!
//! - `count`: `count '*'` (every function of the executable) inserted into the running
//!   server, with the time per function of a small and of the big request, and how long gsh
//!   kept the server stopped (`Live::paused_for`).
//! - `coverage`: `coverage '*'` (every basic block of the executable, ~74,000 probes on
//!   redis 7) inserted and deleted while a second client runs `SET`/`GET` pairs and checks
//!   every answer; once as gsh writes code now (short pauses of at most
//!   `live::PAUSE_WRITES` writes) and once with all of a module's jumps in one pause, as
//!   before (`Live::pause_writes`). Reported: the longest reply, the longest pause and the
//!   total stopped time, the whole insert's and delete's time, and the `SET`/`GET` rate
//!   meanwhile against its rate while gsh is idle.
//!
//! - `detach`: `count '*'` and `time '*'` (which share every site) inserted into the running
//!   server, then `count '*'` deleted, then `count '*'` inserted again and gsh detached
//!   (`Live::let_go`), each on a fresh attach: the longest reply during the delete and during
//!   the detach, against the longest reply while no gsh is attached, measured first in the
//!   same run; once with the stops that arrive inside a job left for after it, as before
//!   (`Live::hold_stops_in_jobs`), and once served inside it, as gsh does now.
//!
//! `count '*'` is inserted three ways in one run: with at most 256 writes a pause (as
//! before), staged at a lower priority (`Live::polite_staging`), and as gsh does by default.
//! `count` and `detach` are measured twice: with no other client, and with the server under
//! client load (`redis-benchmark`, 16 connections of `SET`/`GET`, from Debian's redis-tools),
//! each against baselines measured under the same load. For the longest pause, where its time
//! went: stopping the threads, serving the stops the halt caught, the change itself (writes,
//! threads moved), resuming (`Live::longest_pause_steps`).
//!
//! - `relay`: with `time '*'` in place, `count '*'` (which shares every site) inserted and
//!   deleted, each laying every shared trampoline out again: once parsing and checking every
//!   snippet at each layout (`Live::recheck_snippets`), once with the patchers' checked
//!   snippets but their code generated at each address tried, as before
//!   (`Live::generate_at_each_address`), once with each snippet's code generated once per
//!   layout and moved and each point's save and restore code assembled at every layout, as
//!   before (`Live::code_per_layout`), and once with both kept across layouts (each snippet's
//!   code generated once and moved, the save code assembled once per save plan), as gsh does
//!   now; alternating in one run.
//!
//! Without a mode, all four. gsh drives the engine as the shell's `count` and `coverage` do: the
//! runtime is loaded (each injected call stops the server while it runs), then the request
//! is inserted while the server runs, stopping it only to write the jumps.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use engine::instrument::coverage;
use engine::instrument::live::PauseSteps;
use engine::instrument::measure::{self, Metric};
use engine::instrument::{Live, Plan};
use engine::process::Tracer;
use engine::Session;

/// The port the benchmark's redis-server listens on.
pub const PORT: u16 = 16399;

/// How long a client waits for one answer before the server counts as hung.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(60);

/// A client sending `PING` every millisecond and keeping every reply time.
pub(crate) struct Pinger {
    stop: Arc<AtomicBool>,
    times: Arc<Mutex<Vec<(Instant, Duration)>>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Pinger {
    pub(crate) fn start() -> Result<Pinger> {
        Pinger::sending(b"PING\r\n", b"+PONG\r\n")
    }

    /// A client sending `command` every millisecond, expecting `answer`.
    pub(crate) fn sending(command: &'static [u8], answer: &'static [u8]) -> Result<Pinger> {
        let stop = Arc::new(AtomicBool::new(false));
        let times = Arc::new(Mutex::new(Vec::new()));
        let mut s = TcpStream::connect(("127.0.0.1", PORT)).context("connecting to redis")?;
        s.set_nodelay(true)?;
        // A server that stopped answering is an error, not a hang.
        s.set_read_timeout(Some(ANSWER_DEADLINE))?;
        let (st, tt) = (stop.clone(), times.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            let mut buf = vec![0u8; answer.len()];
            while !st.load(Ordering::Relaxed) {
                let t = Instant::now();
                s.write_all(command)?;
                s.read_exact(&mut buf)?;
                if buf != answer {
                    bail!("redis answered {:?}", String::from_utf8_lossy(&buf));
                }
                tt.lock().expect("times").push((t, t.elapsed()));
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        });
        Ok(Pinger {
            stop,
            times,
            thread: Some(thread),
        })
    }

    /// The longest reply to a ping sent from `since` on.
    pub(crate) fn longest_since(&self, since: Instant) -> Duration {
        self.times
            .lock()
            .expect("times")
            .iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }

    /// The longest reply answered from `since` on (sent before it, perhaps): what a pause
    /// that began at `since` held a client up.
    pub(crate) fn longest_answered_since(&self, since: Instant) -> Duration {
        self.times
            .lock()
            .expect("times")
            .iter()
            .filter(|(t, d)| *t + *d >= since)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }

    /// Waits (up to [`ANSWER_DEADLINE`]) until a ping sent after `t` has its reply, so that a
    /// reply held up by what happened before `t` is recorded.
    pub(crate) fn settle_after(&self, t: Instant) {
        let deadline = Instant::now() + ANSWER_DEADLINE;
        while Instant::now() < deadline
            && !self
                .times
                .lock()
                .expect("times")
                .iter()
                .any(|(s, _)| *s >= t)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The `q`-quantile (0..1) of the replies to pings sent between `from` and `to`.
    pub(crate) fn quantile(&self, from: Instant, to: Instant, q: f64) -> Duration {
        let mut v: Vec<Duration> = self
            .times
            .lock()
            .expect("times")
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, d)| *d)
            .collect();
        v.sort();
        let i = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
        v.get(i).copied().unwrap_or_default()
    }

    pub(crate) fn finish(mut self) -> Result<usize> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| anyhow::anyhow!("pinger panicked"))??;
        }
        let n = self.times.lock().expect("times").len();
        Ok(n)
    }
}

/// A client running `SET k v` then `GET k` with fresh keys and values as fast as the server
/// answers, checking every answer, and keeping when each pair completed.
pub(crate) struct Loader {
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Vec<Instant>>>,
    thread: Option<std::thread::JoinHandle<Result<u64>>>,
}

impl Loader {
    pub(crate) fn start() -> Result<Loader> {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut s = TcpStream::connect(("127.0.0.1", PORT)).context("connecting to redis")?;
        s.set_nodelay(true)?;
        // A server that stopped answering is an error, not a hang.
        s.set_read_timeout(Some(ANSWER_DEADLINE))?;
        let (st, dn) = (stop.clone(), done.clone());
        let thread = std::thread::spawn(move || -> Result<u64> {
            let mut n = 0u64;
            let mut buf = Vec::new();
            while !st.load(Ordering::Relaxed) {
                let (key, val) = (format!("stall:{}", n % 1000), format!("v{n}"));
                s.write_all(format!("SET {key} {val}\r\n").as_bytes())?;
                buf.resize(5, 0);
                s.read_exact(&mut buf)?;
                if buf != b"+OK\r\n" {
                    bail!(
                        "SET {key}: redis answered {:?}",
                        String::from_utf8_lossy(&buf)
                    );
                }
                s.write_all(format!("GET {key}\r\n").as_bytes())?;
                let want = format!("${}\r\n{val}\r\n", val.len());
                buf.resize(want.len(), 0);
                s.read_exact(&mut buf)?;
                if buf != want.as_bytes() {
                    bail!(
                        "GET {key}: redis answered {:?}, not {val}",
                        String::from_utf8_lossy(&buf)
                    );
                }
                n += 1;
                dn.lock().expect("done").push(Instant::now());
            }
            Ok(n)
        });
        Ok(Loader {
            stop,
            done,
            thread: Some(thread),
        })
    }

    /// `SET`/`GET` pairs per second completed between `from` and `to`.
    fn rate(&self, from: Instant, to: Instant) -> f64 {
        let n = self
            .done
            .lock()
            .expect("done")
            .iter()
            .filter(|t| **t >= from && **t < to)
            .count();
        n as f64 / (to - from).as_secs_f64().max(1e-9)
    }

    /// Stops it; the pairs it ran, every answer right.
    pub(crate) fn finish(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow::anyhow!("loader panicked"))?,
            None => Ok(0),
        }
    }
}

/// `redis-benchmark` running `SET`/`GET` on 16 connections, over and over, against the
/// server: the issue's scenario, a server under client load. Killed when dropped.
pub(crate) struct ClientLoad {
    child: Child,
}

impl ClientLoad {
    pub(crate) fn start() -> Result<ClientLoad> {
        gsh_tests::ensure_package("redis-tools");
        let child = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &PORT.to_string()])
            .args(["-c", "16", "-t", "set,get", "-r", "100000", "-l", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-benchmark")?;
        // Its connections up and its requests flowing before anything is measured.
        std::thread::sleep(Duration::from_millis(300));
        Ok(ClientLoad { child })
    }
}

impl Drop for ClientLoad {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts redis-server on [`PORT`] and waits until it answers.
pub fn start_redis() -> Result<Child> {
    start_redis_on(PORT)
}

/// Starts redis-server on `port` and waits until it answers. A port some other server
/// answers on already is refused: the new server would fail to bind and exit, and the
/// other one's answers be taken for its own.
pub fn start_redis_on(port: u16) -> Result<Child> {
    gsh_tests::ensure_package("redis-server");
    if TcpStream::connect(("127.0.0.1", port)).is_ok() {
        bail!("port {port} is in use: another redis-server (another bench?) answers there");
    }
    let mut child = Command::new("redis-server")
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
        .context("starting redis-server")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut buf = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() {
                return Ok(child);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("redis-server on port {port} ended ({status}) before it answered");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("redis-server did not answer on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const USAGE: &str = "bench-stall [count|coverage|detach|relay] [--runs N]";

pub fn run(args: &[String]) -> Result<()> {
    let (mode, runs) = crate::file_and_runs(args, 5, USAGE)?;
    let (count, coverage, detach, relay) = match mode.as_deref() {
        None => (true, true, true, true),
        Some("count") => (true, false, false, false),
        Some("coverage") => (false, true, false, false),
        Some("detach") => (false, false, true, false),
        Some("relay") => (false, false, false, true),
        Some(f) => bail!("unexpected argument `{f}`; usage: {USAGE}"),
    };
    let mut child = start_redis()?;
    let pid = child.id() as i32;
    let mut result = Ok(());
    if relay {
        result = measure_relay(pid, runs);
    }
    if result.is_ok() && detach {
        result = measure_detach(pid, runs);
    }
    if result.is_ok() && (count || coverage) {
        result = measure_stall(pid, runs, count, coverage);
    }
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// `bench-stall relay`: see the module documentation.
fn measure_relay(pid: i32, runs: usize) -> Result<()> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let mut session = Session::new();
    session.open(&exe)?;
    let tracer = Tracer::attach(pid, Live::default())?;
    {
        let session = &mut session;
        tracer.with(|p, live| -> Result<()> {
            live.learn_modules(session, p)?;
            live.load_runtime(p)?;
            p.resume()?;
            Ok(())
        })??;
    }
    let mut plan = Plan::default();
    let time = measure::add(&mut plan, &mut session, "*", Metric::Time)?.id;
    let (s, pl) = (&session, &plan);
    let sites = tracer.with(|p, live| live.insert(p, s, pl, time))??.len();
    // (recheck, generate at each address, code per layout)
    type How = (bool, bool, bool);
    // (how, delete times, insert times)
    let mut rows: Vec<(How, Vec<Duration>, Vec<Duration>)> = vec![
        ((true, true, true), Vec::new(), Vec::new()),
        ((false, true, true), Vec::new(), Vec::new()),
        ((false, false, true), Vec::new(), Vec::new()),
        ((false, false, false), Vec::new(), Vec::new()),
    ];
    let mut points = 0;
    for _ in 0..runs {
        // Alternating, so that both see the machine alike.
        for row in rows.iter_mut() {
            let (recheck, each, per_layout) = row.0;
            let id = measure::add(&mut plan, &mut session, "*", Metric::Count)?.id;
            let (s, pl) = (&session, &plan);
            let (insert, delete, n) = tracer.with(|p, live| -> Result<_> {
                live.recheck_snippets = recheck;
                live.generate_at_each_address = each;
                live.code_per_layout = per_layout;
                let t = Instant::now();
                let n = live.insert(p, s, pl, id)?.len();
                let insert = t.elapsed();
                let t = Instant::now();
                live.remove(p, id)?;
                let delete = t.elapsed();
                live.recheck_snippets = false;
                live.generate_at_each_address = false;
                live.code_per_layout = false;
                Ok((insert, delete, n))
            })??;
            plan.delete(id)?;
            points = n;
            row.1.push(delete);
            row.2.push(insert);
        }
    }
    tracer.with(|p, live| -> Result<()> {
        Live::paused(p, |p| live.remove_all(p))?;
        p.detach()?;
        Ok(())
    })??;
    gsh_tests::server::text_matches_file(pid as u32, &exe).map_err(anyhow::Error::msg)?;
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut meds = Vec::new();
    for (how, d, i) in rows.iter_mut() {
        meds.push((*how, med(d), med(i)));
    }
    println!(
        "redis-server (pid {pid}): `time '*'` in place ({sites} points), `count '*'` ({points} \
         points, every site shared with `time '*'`) inserted and deleted, each laying out every \
         shared site again; median of {runs} run(s), alternating"
    );
    for (how, d, i) in &meds {
        println!(
            "  {}: insert {} ({:.1} µs per point), delete {} ({:.1} µs per point)",
            match how {
                (true, _, _) => "every snippet parsed, checked and generated at each address",
                (false, true, _) => "checked snippets kept, code generated at each address",
                (false, false, true) =>
                    "code generated once per layout and moved, saves assembled at each layout",
                (false, false, false) =>
                    "code generated once per snippet and moved, saves assembled once, as now",
            },
            ms(*i),
            i.as_secs_f64() * 1e6 / points.max(1) as f64,
            ms(*d),
            d.as_secs_f64() * 1e6 / points.max(1) as f64
        );
    }
    let ratio =
        |after: &(How, Duration, Duration), before: &(How, Duration, Duration), what: &str| {
            println!(
                "  {what}: insert {:.2}x, delete {:.2}x",
                after.2.as_secs_f64() / before.2.as_secs_f64().max(1e-9),
                after.1.as_secs_f64() / before.1.as_secs_f64().max(1e-9)
            );
        };
    ratio(&meds[1], &meds[0], "kept / parsed at each layout");
    ratio(&meds[2], &meds[1], "moved / generated at each address");
    ratio(
        &meds[3],
        &meds[2],
        "kept across layouts / made at each layout",
    );
    Ok(())
}

/// One delete and one detach as the pinging client saw them.
struct DetachRun {
    delete_ping: Duration,
    delete_pause: Duration,
    delete_steps: PauseSteps,
    delete_whole: Duration,
    detach_ping: Duration,
    detach_whole: Duration,
}

/// `bench-stall detach`: see the module documentation.
fn measure_detach(pid: i32, runs: usize) -> Result<()> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let mut session = Session::new();
    session.open(&exe)?;
    // Analysis is no part of any job measured.
    let mut plan = Plan::default();
    let id = measure::add(&mut plan, &mut session, "*", Metric::Count)?.id;
    let all = plan.requests.last().map_or(0, |r| r.funcs.len());
    plan.delete(id)?;
    let pinger = Pinger::start()?;
    std::thread::sleep(Duration::from_millis(50));
    // The baseline: replies while no gsh is attached.
    let idle = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let baseline = pinger.longest_since(idle);
    let mut rows = Vec::new();
    // The floor on this machine now: stopping and resuming every thread, nothing changed.
    let floor = {
        let tracer = Tracer::attach(pid, Live::default())?;
        tracer.with(|p, _| p.resume())??;
        std::thread::sleep(Duration::from_millis(50));
        let since = Instant::now();
        for _ in 0..5 {
            tracer.with(|p, _| -> Result<()> {
                p.halt()?;
                p.resume()?;
                Ok(())
            })??;
            std::thread::sleep(Duration::from_millis(20));
        }
        let floor = pinger.longest_since(since);
        tracer.with(|p, _| p.detach())??;
        floor
    };
    for (label, hold, loaded) in [
        (
            "stops inside a job held until it ends, as before",
            true,
            false,
        ),
        ("stops served inside jobs", false, false),
        (
            "stops served inside jobs, under client load (redis-benchmark)",
            false,
            true,
        ),
    ] {
        let load = loaded.then(ClientLoad::start).transpose()?;
        // The baseline under this load: replies while no gsh is attached.
        let idle = Instant::now();
        std::thread::sleep(Duration::from_millis(1000));
        let base = pinger.longest_since(idle);
        for _ in 0..runs {
            let r = detach_once(pid, &mut session, &pinger, hold)?;
            rows.push((label, base, r));
        }
        drop(load);
    }
    let pings = pinger.finish()?;
    gsh_tests::server::text_matches_file(pid as u32, &exe).map_err(anyhow::Error::msg)?;
    println!(
        "redis-server (pid {pid}, {all} functions), a client pinging every 1 ms ({pings} replies, \
         all +PONG): `count '*'` and `time '*'` inserted, `count '*'` deleted, `count '*'` \
         inserted again and gsh detached; {runs} run(s) each (target: longest reply <= 20 ms)"
    );
    println!(
        "  no gsh attached: longest reply {} (the baseline) ; halt + resume, nothing \
         changed: longest reply {} (the floor)",
        ms(baseline),
        ms(floor)
    );
    for (label, base, r) in rows {
        let ratio = |d: Duration| d.as_secs_f64() / base.as_secs_f64().max(1e-6);
        let st = r.delete_steps;
        println!(
            "  {label}: delete {} whole, longest pause {} (halt {}, serve {}, change {}, \
             resume {}), longest reply {} ({:.1}x the baseline under this load, {}) ; detach \
             {} whole, longest reply {} ({:.1}x)",
            ms(r.delete_whole),
            ms(r.delete_pause),
            ms(st.halt),
            ms(st.serve),
            ms(st.change),
            ms(st.resume),
            ms(r.delete_ping),
            ratio(r.delete_ping),
            ms(base),
            ms(r.detach_whole),
            ms(r.detach_ping),
            ratio(r.detach_ping)
        );
    }
    println!("  after each detach, the server's text is its file's");
    Ok(())
}

/// Attaches, inserts `count '*'` and `time '*'`, deletes `count '*'`, inserts it again and
/// detaches, with stops inside jobs `hold`en as before or served.
fn detach_once(pid: i32, session: &mut Session, pinger: &Pinger, hold: bool) -> Result<DetachRun> {
    let tracer = Tracer::attach(pid, Live::default())?;
    {
        let session = &mut *session;
        tracer.with(|p, live| -> Result<()> {
            live.learn_modules(session, p)?;
            live.hold_stops_in_jobs = hold;
            live.load_runtime(p)?;
            p.resume()?;
            Ok(())
        })??;
    }
    let mut plan = Plan::default();
    let count = measure::add(&mut plan, session, "*", Metric::Count)?.id;
    let time = measure::add(&mut plan, session, "*", Metric::Time)?.id;
    let (s, pl) = (&*session, &plan);
    tracer.with(|p, live| -> Result<()> {
        live.insert(p, s, pl, count)?;
        live.insert(p, s, pl, time)?;
        Ok(())
    })??;
    std::thread::sleep(Duration::from_millis(200));
    let since = Instant::now();
    let (delete_whole, delete_pause, delete_steps) = tracer.with(|p, live| -> Result<_> {
        live.longest_pause = Duration::ZERO;
        let t = Instant::now();
        live.remove(p, count)?;
        Ok((t.elapsed(), live.longest_pause, live.longest_pause_steps))
    })??;
    pinger.settle_after(Instant::now());
    let delete_ping = pinger.longest_answered_since(since);
    plan.delete(count)?;
    let count = measure::add(&mut plan, session, "*", Metric::Count)?.id;
    let (s, pl) = (&*session, &plan);
    tracer.with(|p, live| live.insert(p, s, pl, count))??;
    std::thread::sleep(Duration::from_millis(200));
    let since = Instant::now();
    let detach_whole = tracer.with(|p, live| -> Result<_> {
        let t = Instant::now();
        let left = live.let_go(p)?;
        if left.iter().any(|c| c.kind.is_gsh()) {
            bail!("gsh's changes left after detaching: {left:?}");
        }
        Ok(t.elapsed())
    })??;
    drop(tracer);
    pinger.settle_after(Instant::now());
    let detach_ping = pinger.longest_answered_since(since);
    Ok(DetachRun {
        delete_ping,
        delete_pause,
        delete_steps,
        delete_whole,
        detach_ping,
        detach_whole,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn measure_stall(pid: i32, runs: usize, count: bool, with_coverage: bool) -> Result<()> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let mut session = Session::new();
    session.open(&exe)?;
    let mut plan = Plan::default();
    let tracer = Tracer::attach(pid, Live::default())?;
    {
        let session = &mut session;
        tracer.with(|p, live| -> Result<()> {
            live.learn_modules(session, p)?;
            p.resume()?;
            Ok(())
        })??;
    }
    // Analysis is not part of a pause either way; do it before measuring anything.
    let id = measure::add(&mut plan, &mut session, "*", Metric::Count)?.id;
    let all = plan.requests.last().map_or(0, |r| r.funcs.len());
    plan.delete(id)?;
    let pinger = Pinger::start()?;
    std::thread::sleep(Duration::from_millis(50));
    // The runtime's load: injected dlopen and calls.
    let since = Instant::now();
    tracer.with(|p, live| live.load_runtime(p))??;
    std::thread::sleep(Duration::from_millis(20));
    let load_ping = pinger.longest_since(since);

    // Each figure without client load and then with redis-benchmark running, each against
    // the baselines measured under the same load.
    let mut sections = Vec::new();
    for loaded in [false, true] {
        let load = loaded.then(ClientLoad::start).transpose()?;
        let section = count_section(&tracer, &mut plan, &mut session, &pinger, runs, count)?;
        drop(load);
        sections.push((loaded, section));
    }
    // The coverage figures are taken without client load, against those baselines.
    let (idle_p99, bare_ping) = (sections[0].1.idle_p99, sections[0].1.bare_ping);
    let mut cov = Vec::new();
    if with_coverage {
        let loader = Loader::start()?;
        std::thread::sleep(Duration::from_millis(50));
        let quiet = Instant::now();
        std::thread::sleep(Duration::from_millis(1000));
        let idle_rate = loader.rate(quiet, Instant::now());
        for (label, most) in [
            ("one pause per module, as before", Some(usize::MAX)),
            ("short pauses", None),
        ] {
            for _ in 0..runs {
                let r = coverage_once(&tracer, &mut plan, &mut session, &pinger, &loader, most)?;
                cov.push((label, r, idle_rate));
            }
        }
        loader.finish()?;
    }
    tracer.with(|p, live| -> Result<()> {
        Live::paused(p, |p| live.remove_all(p))?;
        p.detach()?;
        Ok(())
    })??;
    let pings = pinger.finish()?;
    gsh_tests::server::text_matches_file(pid as u32, &exe).map_err(anyhow::Error::msg)?;
    println!(
        "redis-server (pid {pid}, {all} functions), a client pinging every 1 ms ({pings} replies, \
         all +PONG); worst of {runs} runs (target: longest reply <= 20 ms)"
    );
    println!("  loading the runtime: longest reply {}", ms(load_ping));
    for (loaded, c) in sections {
        println!(
            "  {}:",
            if loaded {
                "under client load (redis-benchmark, 16 connections of SET/GET)"
            } else {
                "no other client"
            }
        );
        println!(
            "    gsh idle: 99th percentile of the replies {} ; halt + resume, nothing changed: \
             median {}, longest reply meanwhile {}",
            ms(c.idle_p99),
            ms(c.bare),
            ms(c.bare_ping)
        );
        for r in c.rows {
            let st = r.steps;
            let h = st.halt_timing;
            println!(
                "    count '{}' ({}, {} functions): longest reply {} ({:.1}x the floor's), \
                 stopped {}, longest pause {} (halt {} [{} threads: interrupts {}, first stop \
                 {}, last {} (tid {}), {} sleeps], serve {}, change {}, resume {}) ; whole \
                 insert {} = {:.1} µs per function",
                r.glob,
                r.label,
                r.n,
                ms(r.ping),
                r.ping.as_secs_f64() / c.bare_ping.as_secs_f64().max(1e-6),
                ms(r.paused),
                ms(r.longest),
                ms(st.halt),
                h.threads,
                ms(h.interrupts),
                ms(h.first),
                ms(h.last),
                h.slowest,
                h.sleeps,
                ms(st.serve),
                ms(st.change),
                ms(st.resume),
                ms(r.total),
                r.total.as_secs_f64() * 1e6 / r.n.max(1) as f64
            );
        }
    }
    for (label, r, idle_rate) in cov {
        println!(
            "  coverage '*' ({} blocks, {} probes), {label}:",
            r.blocks, r.probes
        );
        for (what, w) in [("insert", &r.insert), ("delete", &r.delete)] {
            println!(
                "    {what}: whole {} ; longest reply {} ({:.1}x the floor's, {:.1}x the idle \
                 p99) ; longest pause {} ({} writes at most) ; stopped {} in all ; SET/GET \
                 {:.0}/s = {:.2}x the idle rate",
                ms(w.whole),
                ms(w.ping),
                w.ping.as_secs_f64() / bare_ping.as_secs_f64().max(1e-6),
                w.ping.as_secs_f64() / idle_p99.as_secs_f64().max(1e-6),
                ms(w.longest),
                w.writes,
                ms(w.stopped),
                w.rate,
                w.rate / idle_rate.max(1e-9)
            );
        }
    }
    println!("  after detaching, the server's text is its file's");
    Ok(())
}

/// One `count` request size as the pinging client saw it.
struct CountRow {
    label: &'static str,
    glob: &'static str,
    n: usize,
    ping: Duration,
    paused: Duration,
    longest: Duration,
    steps: PauseSteps,
    total: Duration,
}

/// The `count` figures under one load, with that load's baselines.
struct CountSection {
    idle_p99: Duration,
    bare: Duration,
    bare_ping: Duration,
    rows: Vec<CountRow>,
}

/// Measures the idle replies, the halt + resume floor, and (with `count`) `count 'ae*'` and
/// `count '*'` inserted and deleted `runs` times, under whatever load runs now.
fn count_section(
    tracer: &Tracer<Live>,
    plan: &mut Plan,
    session: &mut Session,
    pinger: &Pinger,
    runs: usize,
    count: bool,
) -> Result<CountSection> {
    // Replies while gsh does nothing (attached, the server running).
    let idle = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let idle_p99 = pinger.quantile(idle, Instant::now(), 0.99);

    // The floor: stopping and resuming every thread, nothing changed.
    let since = Instant::now();
    let mut bare = Vec::new();
    for _ in 0..runs.max(5) {
        let d = tracer.with(|p, _| -> Result<Duration> {
            // As a pause does it: the tracer hurried while the server is stopped.
            p.hurry(true);
            let t = Instant::now();
            p.halt()?;
            p.resume()?;
            p.hurry(false);
            Ok(t.elapsed())
        })??;
        bare.push(d);
        std::thread::sleep(Duration::from_millis(20));
    }
    let bare_ping = pinger.longest_since(since);
    bare.sort();
    let bare = bare[bare.len() / 2];

    let mut rows = Vec::new();
    let globs: &[(&str, &str, Option<usize>)] = if count {
        &[
            ("ae*", "small", None),
            ("*", "all, at most 256 writes a pause as before", Some(256)),
            (
                "*",
                "all, staged at the tracer's normal priority as before",
                None,
            ),
            ("*", "all", None),
        ]
    } else {
        &[]
    };
    for &(glob, label, most) in globs {
        let polite = label.contains("lower priority");
        let mut row = CountRow {
            label,
            glob,
            n: 0,
            ping: Duration::ZERO,
            paused: Duration::ZERO,
            longest: Duration::ZERO,
            steps: PauseSteps::default(),
            total: Duration::ZERO,
        };
        let mut totals = Vec::new();
        for _ in 0..runs {
            let id = measure::add(plan, session, glob, Metric::Count)?.id;
            row.n = plan.requests.last().map_or(0, |r| r.funcs.len());
            let since = Instant::now();
            let (s, pl) = (&*session, &*plan);
            let (t, pf, longest, steps) = tracer.with(|p, live| -> Result<_> {
                live.paused_for = Duration::ZERO;
                live.longest_pause = Duration::ZERO;
                live.pause_writes = most;
                live.polite_staging = polite;
                let t = Instant::now();
                live.insert(p, s, pl, id)?;
                live.pause_writes = None;
                live.polite_staging = false;
                Ok((
                    t.elapsed(),
                    live.paused_for,
                    live.longest_pause,
                    live.longest_pause_steps,
                ))
            })??;
            std::thread::sleep(Duration::from_millis(20));
            row.ping = row.ping.max(pinger.longest_since(since));
            row.paused = row.paused.max(pf);
            if longest > row.longest {
                row.longest = longest;
                row.steps = steps;
            }
            totals.push(t);
            tracer.with(|p, live| live.remove(p, id))??;
            plan.delete(id)?;
        }
        totals.sort();
        row.total = totals[totals.len() / 2];
        rows.push(row);
    }
    Ok(CountSection {
        idle_p99,
        bare,
        bare_ping,
        rows,
    })
}

/// One insert or delete as the clients saw it.
struct Step {
    whole: Duration,
    ping: Duration,
    longest: Duration,
    writes: usize,
    stopped: Duration,
    rate: f64,
}

struct CoverageRun {
    blocks: usize,
    probes: usize,
    insert: Step,
    delete: Step,
}

/// Inserts `coverage '*'` into the running server and deletes it again, with at most `most`
/// writes per pause (`None`: gsh's default).
fn coverage_once(
    tracer: &Tracer<Live>,
    plan: &mut Plan,
    session: &mut Session,
    pinger: &Pinger,
    loader: &Loader,
    most: Option<usize>,
) -> Result<CoverageRun> {
    let id = coverage::add(plan, session, "*", false)?.id;
    let blocks: usize = plan.requests.last().map_or(0, |r| {
        r.funcs
            .iter()
            .map(|f| {
                session
                    .module(f.module)
                    .analysis()
                    .function(f.func)
                    .cfg
                    .blocks
                    .len()
            })
            .sum()
    });
    let mut probes = 0;
    let step = |what: &str, probes: &mut usize| -> Result<Step> {
        let since = Instant::now();
        let (whole, longest, writes, stopped) = tracer.with(|p, live| -> Result<_> {
            live.pause_writes = most;
            live.paused_for = Duration::ZERO;
            live.longest_pause = Duration::ZERO;
            live.most_writes_in_a_pause = 0;
            let t = Instant::now();
            if what == "insert" {
                *probes = live.insert(p, session, plan, id)?.len();
            } else {
                live.remove(p, id)?;
            }
            Ok((
                t.elapsed(),
                live.longest_pause,
                live.most_writes_in_a_pause,
                live.paused_for,
            ))
        })??;
        let until = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        Ok(Step {
            whole,
            ping: pinger.longest_since(since),
            longest,
            writes,
            stopped,
            rate: loader.rate(since, until),
        })
    };
    let insert = step("insert", &mut probes)?;
    let delete = step("delete", &mut probes)?;
    plan.delete(id)?;
    tracer.with(|_, live| live.pause_writes = None)?;
    Ok(CoverageRun {
        blocks,
        probes,
        insert,
        delete,
    })
}

// soak-redis keeps one pinger and one loader for all its cycles and reports gsh's RSS per
// cycle: what they keep of each request (32 and 16 bytes, ~1 MiB a cycle) would count as gsh's.
impl Pinger {
    /// Forgets the replies answered before `t`, giving their memory back; how many it forgot.
    pub(crate) fn forget_before(&self, t: Instant) -> usize {
        let mut times = self.times.lock().expect("times");
        let before = times.len();
        times.retain(|(s, d)| *s + *d >= t);
        times.shrink_to_fit();
        before - times.len()
    }
}

impl Loader {
    /// Forgets the pairs completed before `t`, giving their memory back.
    pub(crate) fn forget_before(&self, t: Instant) {
        let mut done = self.done.lock().expect("done");
        done.retain(|d| *d >= t);
        done.shrink_to_fit();
    }
}
