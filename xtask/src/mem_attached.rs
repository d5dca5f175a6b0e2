//! `mem-attached [--runs N]`: gsh's peak memory while attached to a server, against the same
//! gsh doing the same work on the server's file alone, measured in one run (issue 13: "gsh's
//! memory while attached to nginx and to a process with shared mappings: bounded and
//! reported").
//!
//! Two programs: an nginx worker (Debian's nginx, installed when missing; nginx keeps its
//! shared zones in a `/dev/zero (deleted)` mapping) and the `live` mutatee started with
//! `shared`, which maps shared anonymous memory and a memfd. For each, two gsh runs, N times,
//! interleaved:
//! - *file*: `gsh -b SCRIPT FILE` with `count '*'`: the analysis and the requests checked,
//!   no process.
//! - *attached*: `gsh -p PID -b SCRIPT` with the same `count '*'`, `report` after the program
//!   ran a moment, and `detach`: every module of the process analysed, trampolines inserted.
//!
//! The figure is each run's peak resident set (`ru_maxrss` of the waited-for gsh), median
//! over the runs, and the ratio attached / file. The program must still answer afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// The port nginx listens on (the stall bench uses redis's).
const PORT: u16 = 18_481;

const USAGE: &str = "mem-attached [--runs N]";

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, 3, USAGE)?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: {USAGE}");
    }
    let gsh = gsh_tests::Gsh::binary();
    let dir = std::env::temp_dir().join(format!("gsh-mem-attached-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure_all(gsh, &dir, runs);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_all(gsh: &Path, dir: &Path, runs: usize) -> Result<()> {
    let scripts = Scripts::write(dir)?;
    println!("gsh: {}", gsh.display());
    println!("peak resident set of gsh, median of {runs} runs (MiB):");
    println!(
        "{:<28} {:>10} {:>10} {:>8}",
        "program", "file", "attached", "ratio"
    );

    let mut nginx = Nginx::start(dir)?;
    let outcome = (|| {
        let worker = nginx.worker()?;
        let exe = exe_of(worker)?;
        let figures = compare(gsh, &scripts, &exe, worker, runs)?;
        nginx.answers().context("nginx after the attached runs")?;
        print_row("nginx worker", figures);
        Ok::<_, anyhow::Error>(())
    })();
    nginx.stop();
    outcome?;

    let live = gsh_tests::Mutatee::new("live").path(gsh_tests::Variant::O0);
    let mut child = Command::new(&live)
        .args(["1", "shared"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("starting the live mutatee")?;
    let outcome = (|| {
        std::thread::sleep(Duration::from_millis(200));
        let figures = compare(gsh, &scripts, &live, child.id() as i32, runs)?;
        if child.try_wait()?.is_some() {
            bail!("the live mutatee died while measured");
        }
        print_row("live (shared mappings)", figures);
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

fn print_row(name: &str, (file, attached): (u64, u64)) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{name:<28} {:>10.1} {:>10.1} {:>7.2}x",
        mib(file),
        mib(attached),
        attached as f64 / file.max(1) as f64
    );
}

/// Median peak RSS (KiB) of the file runs and of the attached runs, interleaved.
fn compare(gsh: &Path, scripts: &Scripts, exe: &Path, pid: i32, runs: usize) -> Result<(u64, u64)> {
    let (mut file, mut attached) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut on_file = Command::new(gsh);
        on_file.arg("-b").arg(&scripts.file).arg(exe);
        file.push(peak_kib(on_file)?);
        let mut on_pid = Command::new(gsh);
        on_pid
            .arg("-p")
            .arg(pid.to_string())
            .arg("-b")
            .arg(&scripts.attached);
        attached.push(peak_kib(on_pid)?);
    }
    Ok((median(file), median(attached)))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Runs `cmd` to its end and returns its peak resident set in KiB (`wait4`'s `ru_maxrss`,
/// which counts this child alone).
fn peak_kib(mut cmd: Command) -> Result<u64> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.context("gsh's stderr")?;
    let mut errors = String::new();
    stderr.read_to_string(&mut errors)?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for (the `Child` handle is not used to
    // wait); both pointers are to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} failed (status {status:#x}):\n{errors}");
    }
    Ok(usage.ru_maxrss as u64)
}

/// The gsh scripts the runs execute.
struct Scripts {
    file: PathBuf,
    attached: PathBuf,
}

impl Scripts {
    fn write(dir: &Path) -> Result<Scripts> {
        let file = dir.join("file.gsh");
        std::fs::write(&file, "count '*'\n")?;
        let attached = dir.join("attached.gsh");
        std::fs::write(
            &attached,
            "count '*'\ncontinue &\nsleep 1\nhalt\nreport\ndetach\n",
        )?;
        Ok(Scripts { file, attached })
    }
}

/// The executable a process runs.
fn exe_of(pid: i32) -> Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("cannot read the executable of process {pid}"))
}

/// An nginx master and one worker, answering on [`PORT`], in the foreground of this process.
struct Nginx {
    master: Child,
}

impl Nginx {
    fn start(dir: &Path) -> Result<Nginx> {
        gsh_tests::ensure_package("nginx");
        let conf = dir.join("nginx.conf");
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log;\nevents {{ worker_connections 64; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {d};\n  \
                 proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  \
                 scgi_temp_path {d};\n  server {{\n    listen 127.0.0.1:{PORT};\n    \
                 location / {{ return 200 \"ok\\n\"; }}\n  }}\n}}\n"
            ),
        )?;
        let master = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting nginx")?;
        let nginx = Nginx { master };
        let deadline = Instant::now() + Duration::from_secs(20);
        while nginx.answers().is_err() {
            if Instant::now() > deadline {
                bail!("nginx did not answer on port {PORT}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }

    /// The worker process (the master's only child).
    fn worker(&self) -> Result<i32> {
        let pid = self.master.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
        children
            .split_whitespace()
            .next()
            .and_then(|w| w.parse().ok())
            .context("nginx has no worker process")
    }

    fn answers(&self) -> Result<()> {
        let mut s = TcpStream::connect(("127.0.0.1", PORT))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        if !reply.starts_with("HTTP/1.1 200") || !reply.ends_with("ok\n") {
            bail!("nginx answered {reply:?}");
        }
        Ok(())
    }

    /// A fast shutdown (SIGTERM), which takes the worker down with the master.
    fn stop(&mut self) {
        // SAFETY: kill takes only integers; the pid is our own child's, not yet waited for.
        unsafe { libc::kill(self.master.id() as i32, libc::SIGTERM) };
        let _ = self.master.wait();
    }
}
