//! `soak-redis [--runs CYCLES]`: issue 13's long live soak. redis-server (Debian's, installed
//! when missing) runs under `redis-benchmark -t set,get` load while gsh, driving the engine as
//! the shell does, goes through CYCLES of attach, `count '*'`, `time '*'`, `profile
//! pingCommand`, a read of the values, delete, detach. In each cycle a client of ours sends
//! exactly K `PING`s, so `pingCommand`'s count must be K exactly, under both `count` and
//! `time`, and its profile's calls must sum to K. Printed per cycle: gsh's RSS, the server's
//! mapping count and the slots in use; at the end the server must still answer and its text
//! must be its file's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use engine::instrument::measure::{self, Metric};
use engine::instrument::{Live, Plan};
use engine::process::Tracer;
use engine::Session;

use crate::bench_stall::{start_redis, PORT};

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

fn mappings(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.lines().count())
        .unwrap_or(0)
}

pub fn run(args: &[String]) -> Result<()> {
    let (file, cycles) = crate::file_and_runs(args, 50, "soak-redis [--runs CYCLES]")?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: soak-redis [--runs CYCLES]");
    }
    gsh_tests::ensure_package("redis-tools");
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
    let result = soak(pid, cycles);
    let _ = load.kill();
    let _ = load.wait();
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn soak(pid: i32, cycles: usize) -> Result<()> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let mut session = Session::new();
    session.open(&exe)?;
    let mut plan = Plan::default();
    let mut client = TcpStream::connect(("127.0.0.1", PORT))?;
    client.set_nodelay(true)?;
    println!("cycle  gsh RSS (KiB)  server mappings  slots in use  pingCommand count/time/profile");
    for cycle in 0..cycles {
        let tracer = Tracer::attach(pid, Live::default())?;
        {
            let session = &mut session;
            tracer.with(|p, live| -> Result<()> {
                live.learn_modules(session, p)?;
                p.resume()?;
                live.load_runtime(p)?;
                Ok(())
            })??;
        }
        let mut ids = Vec::new();
        for (glob, metric) in [
            ("*", Metric::Count),
            ("*", Metric::Time),
            ("pingCommand", Metric::Profile),
        ] {
            let id = measure::add(&mut plan, &mut session, glob, metric)?.id;
            let (s, pl) = (&session, &plan);
            tracer.with(|p, live| live.insert(p, s, pl, id))??;
            ids.push(id);
        }
        for _ in 0..PINGS {
            ping(&mut client)?;
        }
        let (values, paths, slots) = tracer.with(|p, live| -> Result<_> {
            let r = p.reader();
            Ok((
                live.measure.values(&r)?,
                live.measure.paths(&r)?,
                live.measure.slots_in_use(),
            ))
        })??;
        let of = |metric: Metric| {
            values
                .iter()
                .find(|v| v.function == "pingCommand" && v.metric == metric)
                .map(|v| v.calls)
        };
        let (c, t) = (of(Metric::Count), of(Metric::Time));
        let profiled: u64 = paths.iter().map(|p| p.calls).sum();
        if c != Some(PINGS) || t != Some(PINGS) || profiled != PINGS {
            bail!("cycle {cycle}: {PINGS} pings, pingCommand counted {c:?}, timed {t:?}, profiled {profiled}");
        }
        tracer.with(|p, live| -> Result<()> {
            for id in &ids {
                live.remove(p, *id)?;
            }
            if live.measure.slots_in_use() != 0 {
                bail!(
                    "{} slots still in use after delete",
                    live.measure.slots_in_use()
                );
            }
            Live::paused(p, |p| live.remove_all(p))?;
            p.detach()?;
            Ok(())
        })??;
        for id in ids {
            plan.delete(id)?;
        }
        drop(tracer);
        println!(
            "{cycle:>5}  {:>13}  {:>15}  {slots:>12}  {PINGS}/{PINGS}/{PINGS}",
            rss_kib(),
            mappings(pid)
        );
    }
    ping(&mut client)?;
    gsh_tests::server::text_matches_file(pid as u32, &exe).map_err(anyhow::Error::msg)?;
    println!("after {cycles} cycles the server answers and its text is its file's");
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}
