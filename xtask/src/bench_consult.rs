//! `bench-consult [--runs N] [--cost PERCENT] [--threads N]`: how much `consult` slows the
//! program it searches. A CPU-bound program (one thread per CPU by default, so the machine is
//! saturated and gsh's own CPU counts too) prints how much work it has done every 100 ms; each
//! run measures its progress rate for 5 s alone, then while `gsh -p PID -c 'consult'` searches
//! it, then for 5 s alone again. The slowdown is the rate during the search over the mean of
//! the rates before and after, in the same run; beside it, the overhead `consult` itself
//! reported (the fraction of the time it kept the program stopped).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use gsh_tests::{json_stream, target_dir, Gsh};

/// Each thread adds its finished work units to one counter; main prints it every 100 ms.
const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long done;
static void *crunch(void *arg) {
    (void)arg;
    for (;;) {
        unsigned long x = 1;
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        if (x == 42) puts("");
        __atomic_add_fetch(&done, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, crunch, NULL);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        printf("%lu\n", __atomic_load_n(&done, __ATOMIC_RELAXED));
    }
}
"#;

/// How long each phase without the search lasts.
const ALONE: Duration = Duration::from_secs(5);

fn usage() -> &'static str {
    "bench-consult [--runs N] [--cost PERCENT] [--threads N]"
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut runs, mut cost, mut threads) = (3usize, 5.0f64, None::<usize>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| -> Result<f64> {
            let v = it
                .next()
                .with_context(|| format!("{what} needs a number"))?;
            v.parse()
                .with_context(|| format!("{what}: `{v}` is not a number"))
        };
        match a.as_str() {
            "--runs" => runs = value("--runs")? as usize,
            "--cost" => cost = value("--cost")?,
            "--threads" => threads = Some(value("--threads")? as usize),
            other => bail!("unexpected argument `{other}`; usage: {}", usage()),
        }
    }
    if runs == 0 || !(cost > 0.0 && cost <= 100.0) {
        bail!("usage: {}", usage());
    }
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let dir = target_dir().join("bench-consult");
    std::fs::create_dir_all(&dir)?;
    let (src, exe) = (dir.join("crunch.c"), dir.join("crunch"));
    std::fs::write(&src, PROGRAM)?;
    let ok = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .context("running gcc")?
        .success();
    if !ok {
        bail!("gcc failed on {}", src.display());
    }
    println!(
        "consult --cost {cost} on a program computing in {threads} thread(s): its progress \
         rate during the search over its rate alone before and after, same run"
    );
    let mut slowdowns = Vec::new();
    for run in 1..=runs {
        let (slowdown, reported, seconds) = one_run(&exe, threads, cost)?;
        println!(
            "run {run}: rate during the search {:.3} of the rate alone ({:.1}% slower); \
             consult reported the program stopped {:.1}% of {seconds:.1} s",
            slowdown,
            (1.0 - slowdown) * 100.0,
            reported * 100.0
        );
        slowdowns.push(slowdown);
    }
    slowdowns.sort_by(f64::total_cmp);
    println!(
        "median: {:.3} of the rate alone ({:.1}% slower)",
        slowdowns[slowdowns.len() / 2],
        (1.0 - slowdowns[slowdowns.len() / 2]) * 100.0
    );
    Ok(())
}

/// One run: (rate during the search / rate alone, the overhead consult reported, seconds it
/// searched).
fn one_run(exe: &std::path::Path, threads: usize, cost: f64) -> Result<(f64, f64, f64)> {
    let mut child = Command::new(exe)
        .arg(threads.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the program")?;
    let pid = child.id();
    let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let out = child.stdout.take().context("the program's output")?;
    let s = samples.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Ok(n) = line.trim().parse::<u64>() {
                s.lock().expect("samples").push((Instant::now(), n));
            }
        }
    });
    let result = (|| -> Result<(f64, f64, f64)> {
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        std::thread::sleep(ALONE);
        let t1 = Instant::now();
        let o = Gsh::new()
            .args([
                "--json",
                "-p",
                &pid.to_string(),
                "-c",
                &format!("consult --for 30 --cost {cost}"),
            ])
            .timeout(Duration::from_secs(90))
            .run();
        let t2 = Instant::now();
        if !o.success() {
            bail!("gsh failed:\n{o}");
        }
        std::thread::sleep(ALONE);
        let t3 = Instant::now();
        let r = json_stream(&o)
            .pop()
            .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take))
            .context("consult printed no result")?;
        let rate = |a: Instant, b: Instant| -> Result<f64> {
            let s = samples.lock().expect("samples");
            let inside: Vec<&(Instant, u64)> =
                s.iter().filter(|(t, _)| *t >= a && *t <= b).collect();
            let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
                bail!("the program printed no progress");
            };
            Ok((last.1 - first.1) as f64 / last.0.duration_since(first.0).as_secs_f64())
        };
        // gsh's own start (opening the modules, attaching) is inside t1..t2 but before the
        // search; the search's seconds are the last part of it.
        let seconds = r["seconds"].as_f64().unwrap_or(0.0);
        let searching = t2
            .checked_sub(Duration::from_secs_f64(seconds))
            .unwrap_or(t1)
            .max(t1);
        let alone = (rate(t0, t1)? + rate(t2, t3)?) / 2.0;
        let during = rate(searching, t2)?;
        Ok((
            during / alone,
            r["overhead"].as_f64().unwrap_or(f64::NAN),
            seconds,
        ))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    result
}
