//! `bench-live [--runs N]`: how long a running 4-thread program is paused while gsh inserts an
//! entry counter into 1, 100 and 1,000 of its functions, and while it deletes them again,
//! next to the bare cost of stopping and resuming its threads, all measured in one run.
//!
//! The program is generated: 1,000 small functions `f0000`..`f0999`, called in turn by four
//! threads forever. gsh attaches through the engine (as `attach` does), and each measurement
//! is one `Live::paused` section: halt every thread, insert (or remove), resume.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use engine::instrument::{Live, Plan, PointSpec};
use engine::process::Tracer;
use engine::Session;

const FUNCTIONS: usize = 1000;

fn program() -> String {
    let mut c = String::from(
        "#include <pthread.h>\n#define N __attribute__((noinline, noclone))\n\
         volatile long sink;\n",
    );
    for i in 0..FUNCTIONS {
        c.push_str(&format!(
            "N long f{i:04}(long x) {{ return x * {} + 1; }}\n",
            i + 3
        ));
    }
    c.push_str("static void *spin(void *arg) {\n  long x = (long)arg;\n  for (;;) {\n");
    for i in 0..FUNCTIONS {
        c.push_str(&format!("    x = f{i:04}(x);\n"));
    }
    c.push_str(
        "    sink = x;\n  }\n  return 0;\n}\n\
         int main(void) {\n  pthread_t t[3];\n  for (long i = 0; i < 3; i++)\n\
         pthread_create(&t[i], 0, spin, (void *)i);\n  spin((void *)3);\n  return 0;\n}\n",
    );
    c
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, 5, "bench-live [--runs N]")?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: bench-live [--runs N]");
    }
    let dir = gsh_tests::target_dir().join("bench-live");
    let exe = crate::cprogram::build(&dir, "many", &program())?;
    let mut child = Command::new(&exe)
        .stdout(Stdio::null())
        .spawn()
        .context("starting the benchmark program")?;
    let result = measure(&exe, child.id() as i32, runs);
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn measure(exe: &Path, pid: i32, runs: usize) -> Result<()> {
    std::thread::sleep(Duration::from_millis(200));
    let mut session = Session::new();
    session.open(exe)?;
    let mut plan = Plan::default();
    plan.declare(&session, "long hits")?;
    let tracer = Tracer::attach(pid, Live::default())?;
    {
        let session = &mut session;
        let plan = &plan;
        tracer.with(|p, live| -> Result<()> {
            live.learn_modules(session, p)?;
            live.sync_declared(p, plan)?;
            p.resume()?;
            Ok(())
        })??;
    }
    let mut rows: Vec<(String, Duration)> = Vec::new();
    let bare: Vec<Duration> = (0..runs.max(5))
        .map(|_| {
            tracer.with(|p, _| -> Result<Duration> {
                let t = Instant::now();
                p.halt()?;
                p.resume()?;
                Ok(t.elapsed())
            })?
        })
        .collect::<Result<_>>()?;
    let bare = median(bare);
    rows.push(("halt + resume, nothing changed".into(), bare));
    for (n, glob) in [(1, "f0000"), (100, "f00??"), (1000, "f0???")] {
        let (mut ins, mut del, mut ins_total, mut del_total) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let spec = PointSpec::parse(&[glob, "entry"]).map_err(anyhow::Error::msg)?;
            let id = plan.add(&mut session, spec, None, "hits++;".into())?.id;
            if plan.requests.last().map(|r| r.funcs.len()) != Some(n) {
                bail!("{glob} selected the wrong number of functions");
            }
            let (s, pl) = (&session, &plan);
            let (t, paused) = tracer.with(|p, live| -> Result<(Duration, Duration)> {
                let t = Instant::now();
                live.paused_for = Duration::ZERO;
                let reports = live.insert(p, s, pl, id)?;
                let d = t.elapsed();
                if reports.len() != n {
                    bail!("{} points inserted, not {n}", reports.len());
                }
                Ok((d, live.paused_for))
            })??;
            ins.push(paused);
            ins_total.push(t);
            std::thread::sleep(Duration::from_millis(50));
            let (t, paused) = tracer.with(|p, live| -> Result<(Duration, Duration)> {
                let t = Instant::now();
                live.paused_for = Duration::ZERO;
                live.remove(p, id)?;
                Ok((t.elapsed(), live.paused_for))
            })??;
            del.push(paused);
            del_total.push(t);
            plan.delete(id)?;
        }
        rows.push((format!("insert into {n} function(s): paused"), median(ins)));
        rows.push((
            "  the whole insert, mostly running".into(),
            median(ins_total),
        ));
        rows.push((format!("delete from {n} function(s): paused"), median(del)));
        rows.push(("  the whole delete".into(), median(del_total)));
    }
    let hits = {
        let addr = tracer.with(|_, live| live.declared().first().map(|d| d.addr))?;
        let bytes = tracer
            .reader()
            .read(addr.context("no declared variable")?, 8)?;
        u64::from_le_bytes(
            bytes
                .try_into()
                .map_err(|_| anyhow::anyhow!("short read"))?,
        )
    };
    // The soak: many insert/delete cycles on the running program, then detach, then its
    // text must be the file's and it must still be running.
    let cycles = 2000;
    let t = Instant::now();
    for i in 0..cycles {
        let glob = ["f00??", "f0?00", "f01??", "f0000", "f09??"][i % 5];
        let at = if i % 2 == 0 { "entry" } else { "exit" };
        let spec = PointSpec::parse(&[glob, at]).map_err(anyhow::Error::msg)?;
        let id = plan.add(&mut session, spec, None, "hits++;".into())?.id;
        let (s, pl) = (&session, &plan);
        tracer.with(|p, live| -> Result<()> {
            live.insert(p, s, pl, id)?;
            live.remove(p, id)?;
            Ok(())
        })??;
        plan.delete(id)?;
    }
    let soak = t.elapsed();
    tracer.with(|p, live| -> Result<()> {
        Live::paused(p, |p| live.remove_all(p))?;
        p.detach()?;
        Ok(())
    })??;
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = status.split(") ").nth(1).and_then(|r| r.chars().next());
    if !matches!(state, Some('R' | 'S')) {
        bail!("after the soak the program is not running (state {state:?})");
    }
    gsh_tests::server::text_matches_file(pid as u32, exe).map_err(anyhow::Error::msg)?;
    println!(
        "pause of a running 4-thread program, median of {runs} runs (target: < 20 ms for 1,000)\n\
         (the machine's cores are shared with the program's 4 busy threads, so stopping them\n\
         waits for the scheduler: the bare halt + resume below is that floor)"
    );
    for (what, d) in &rows {
        println!(
            "  {what:<40} {:>12}  ({:.1}x halt + resume)",
            ms(*d),
            d.as_secs_f64() / bare.as_secs_f64()
        );
    }
    println!("  (the counters counted {hits} calls meanwhile)");
    println!(
        "soak: {cycles} insert/delete cycles of 1-100 counters in {:.1} s while it ran; \
         afterwards it runs on and its text is the file's",
        soak.as_secs_f64()
    );
    Ok(())
}
