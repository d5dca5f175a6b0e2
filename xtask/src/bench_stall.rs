//! `bench-stall [--runs N]`: the longest reply a client pinging redis-server every 1 ms sees
//! while gsh inserts `count '*'` into it (every function of the executable), next to the
//! longest reply it sees while gsh only stops and resumes the server (the floor), all in one
//! run. Also the time per function of a small and of the big request, and how long gsh kept
//! the server stopped (`Live::paused_for`). The server is Debian's, installed when missing.
//!
//! gsh drives the engine as the shell's `count` does: the runtime is loaded (each injected
//! call stops the server while it runs), then the request is inserted while the server
//! runs, stopping it only to write the jumps.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use engine::instrument::measure::{self, Metric};
use engine::instrument::{Live, Plan};
use engine::process::Tracer;
use engine::Session;

/// The port the benchmark's redis-server listens on.
pub const PORT: u16 = 16399;

/// A client sending `PING` every millisecond and keeping every reply time.
struct Pinger {
    stop: Arc<AtomicBool>,
    times: Arc<Mutex<Vec<(Instant, Duration)>>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Pinger {
    fn start() -> Result<Pinger> {
        let stop = Arc::new(AtomicBool::new(false));
        let times = Arc::new(Mutex::new(Vec::new()));
        let mut s = TcpStream::connect(("127.0.0.1", PORT)).context("connecting to redis")?;
        s.set_nodelay(true)?;
        let (st, tt) = (stop.clone(), times.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            let mut buf = [0u8; 7];
            while !st.load(Ordering::Relaxed) {
                let t = Instant::now();
                s.write_all(b"PING\r\n")?;
                s.read_exact(&mut buf)?;
                if &buf != b"+PONG\r\n" {
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
    fn longest_since(&self, since: Instant) -> Duration {
        self.times
            .lock()
            .expect("times")
            .iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }

    fn finish(mut self) -> Result<usize> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| anyhow::anyhow!("pinger panicked"))??;
        }
        let n = self.times.lock().expect("times").len();
        Ok(n)
    }
}

/// Starts redis-server on [`PORT`] and waits until it answers.
pub fn start_redis() -> Result<Child> {
    gsh_tests::ensure_package("redis-server");
    let child = Command::new("redis-server")
        .args([
            "--port",
            &PORT.to_string(),
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
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", PORT)) {
            let mut buf = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() {
                return Ok(child);
            }
        }
        if Instant::now() > deadline {
            bail!("redis-server did not answer on port {PORT}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, 5, "bench-stall [--runs N]")?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: bench-stall [--runs N]");
    }
    let mut child = start_redis()?;
    let result = measure_stall(child.id() as i32, runs);
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn measure_stall(pid: i32, runs: usize) -> Result<()> {
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

    // The floor: stopping and resuming every thread, nothing changed.
    let since = Instant::now();
    let mut bare = Vec::new();
    for _ in 0..runs.max(5) {
        let d = tracer.with(|p, _| -> Result<Duration> {
            let t = Instant::now();
            p.halt()?;
            p.resume()?;
            Ok(t.elapsed())
        })??;
        bare.push(d);
        std::thread::sleep(Duration::from_millis(20));
    }
    let bare_ping = pinger.longest_since(since);
    bare.sort();
    let bare = bare[bare.len() / 2];

    // The runtime's load: injected dlopen and calls.
    let since = Instant::now();
    tracer.with(|p, live| live.load_runtime(p))??;
    std::thread::sleep(Duration::from_millis(20));
    let load_ping = pinger.longest_since(since);

    let mut rows = Vec::new();
    for (glob, label) in [("ae*", "small"), ("*", "all")] {
        let (mut ping, mut paused, mut total, mut n) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let id = measure::add(&mut plan, &mut session, glob, Metric::Count)?.id;
            n = plan.requests.last().map_or(0, |r| r.funcs.len());
            let since = Instant::now();
            let (s, pl) = (&session, &plan);
            let (t, pf) = tracer.with(|p, live| -> Result<(Duration, Duration)> {
                live.paused_for = Duration::ZERO;
                let t = Instant::now();
                live.insert(p, s, pl, id)?;
                Ok((t.elapsed(), live.paused_for))
            })??;
            std::thread::sleep(Duration::from_millis(20));
            ping.push(pinger.longest_since(since));
            paused.push(pf);
            total.push(t);
            tracer.with(|p, live| live.remove(p, id))??;
            plan.delete(id)?;
        }
        let max = |v: &Vec<Duration>| v.iter().copied().max().unwrap_or_default();
        let med = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        rows.push((label, glob, n, max(&ping), max(&paused), med(&mut total)));
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
    println!(
        "  halt + resume, nothing changed: median {} ; longest reply meanwhile {}",
        ms(bare),
        ms(bare_ping)
    );
    println!("  loading the runtime: longest reply {}", ms(load_ping));
    for (label, glob, n, ping, paused, total) in rows {
        println!(
            "  count '{glob}' ({label}, {n} functions): longest reply {} ({:.1}x the floor's), \
             stopped {} ; whole insert {} = {:.1} µs per function",
            ms(ping),
            ping.as_secs_f64() / bare_ping.as_secs_f64().max(1e-6),
            ms(paused),
            ms(total),
            total.as_secs_f64() * 1e6 / n.max(1) as f64
        );
    }
    println!("  after detaching, the server's text is its file's");
    Ok(())
}
