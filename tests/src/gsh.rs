//! Running the real `gsh` binary: built once per process with the same cargo and target
//! directory as the tests, run with stdin closed and a time limit so a hang fails the test
//! instead of blocking the suite.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::command::describe;
use crate::paths::{target_dir, workspace_root};

/// How long one gsh run may take before it is killed and the test fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A gsh invocation being put together.
#[derive(Clone, Debug)]
pub struct Gsh {
    args: Vec<OsString>,
    cwd: Option<PathBuf>,
    timeout: Duration,
}

/// What one gsh run did.
#[derive(Clone, Debug)]
pub struct GshOutput {
    /// The command line, for failure messages.
    pub command: String,
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl GshOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Panics, showing everything, unless gsh exited 0.
    pub fn assert_success(&self) -> &GshOutput {
        assert!(self.success(), "gsh did not succeed:\n{self}");
        self
    }

    /// Panics, showing everything, unless gsh exited with `code`.
    pub fn assert_code(&self, code: i32) -> &GshOutput {
        assert_eq!(self.code, Some(code), "unexpected exit status:\n{self}");
        self
    }
}

impl std::fmt::Display for GshOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "command: {}", self.command)?;
        writeln!(f, "exit code: {:?}", self.code)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

impl Default for Gsh {
    fn default() -> Self {
        Gsh::new()
    }
}

impl Gsh {
    /// A gsh run with no arguments yet.
    pub fn new() -> Gsh {
        Gsh {
            args: Vec::new(),
            cwd: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The gsh binary: `GSH_BIN` when set, else built now (once per process) with
    /// `$CARGO build -p gsh --bin gsh` into the tests' own target directory and profile.
    /// Panics with cargo's output when the build fails.
    pub fn binary() -> &'static Path {
        static BINARY: OnceLock<PathBuf> = OnceLock::new();
        BINARY.get_or_init(|| match std::env::var_os("GSH_BIN") {
            Some(path) => PathBuf::from(path),
            None => build_gsh(),
        })
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Gsh {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Gsh {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs gsh in `dir`, so relative file names (and the paths gsh prints) stay short and
    /// stable across machines.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Gsh {
        self.cwd = Some(dir.into());
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Gsh {
        self.timeout = timeout;
        self
    }

    /// Runs gsh to completion with stdin closed. Panics when it cannot start or outlives the
    /// time limit (it is killed first).
    pub fn run(&self) -> GshOutput {
        let mut cmd = Command::new(Gsh::binary());
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Plain, stable output: no colour, no terminal-width guessing.
            .env("NO_COLOR", "1")
            .env_remove("CLICOLOR_FORCE");
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let command = describe(&cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{command}`: {e}"));

        // Drain both pipes on their own threads so a chatty gsh never blocks on a full pipe.
        let (tx, rx) = mpsc::channel();
        for (is_stdout, pipe) in [
            (
                true,
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
            (
                false,
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            ),
        ] {
            let Some(mut pipe) = pipe else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                let _ = tx.send((is_stdout, buf));
            });
        }
        drop(tx);

        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "`{command}` ran longer than {:?} and was killed",
                        self.timeout
                    );
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("cannot wait for `{command}`: {e}"),
            }
        };

        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        for _ in 0..2 {
            // A grandchild that kept the pipes open must not hang the test either.
            let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
            match rx.recv_timeout(left) {
                Ok((true, buf)) => stdout = buf,
                Ok((false, buf)) => stderr = buf,
                Err(_) => panic!(
                    "`{command}` exited ({status}) but something it started still holds its output open"
                ),
            }
        }
        GshOutput {
            command,
            code: status.code(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

/// Builds the gsh binary with the cargo running these tests, into the same target directory and
/// profile, and returns its path as cargo reports it.
fn build_gsh() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"))
        // gsh-rt's cdylib too: gsh loads it from its own directory for `count`.
        .args(["-p", "gsh", "--bin", "gsh", "-p", "gsh-rt", "--lib"])
        .arg("--message-format=json")
        .arg("--target-dir")
        .arg(target_dir());
    if let Some(profile) = current_profile() {
        cmd.args(["--profile", &profile]);
    }
    cmd.stdin(Stdio::null());
    let line = describe(&cmd);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{line}`: {e}"));
    if !out.status.success() {
        panic!(
            "building gsh failed: `{line}` ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The last compiler-artifact message for the gsh binary names the executable.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exe = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "gsh")
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back();
    exe.unwrap_or_else(|| panic!("`{line}` succeeded but reported no gsh executable"))
}

/// The cargo profile the running executable was built with, from its directory under the
/// target directory (`target/debug/deps/it-...` → `dev`).
fn current_profile() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let target = target_dir();
    let rel = exe.strip_prefix(&target).ok()?;
    let dir = rel.components().next()?.as_os_str().to_str()?.to_owned();
    Some(match dir.as_str() {
        "debug" => "dev".to_owned(),
        other => other.to_owned(),
    })
}

/// Runs `gsh -c COMMANDS FILE` in FILE's directory, naming FILE by its file name.
pub fn gsh_c(commands: &str, file: &Path) -> GshOutput {
    gsh_in_dir_of(file)
        .arg("-c")
        .arg(commands)
        .arg(file_name(file))
        .run()
}

/// Runs `gsh --json -c COMMAND FILE`, requires success, and parses stdout as exactly one JSON
/// document. Panics, showing the output, otherwise.
pub fn gsh_json(command: &str, file: &Path) -> serde_json::Value {
    let mut docs = gsh_json_all(command, file);
    assert_eq!(
        docs.len(),
        1,
        "`{command}` printed {} JSON documents, expected one",
        docs.len()
    );
    docs.remove(0)
}

/// Runs `gsh --json -c COMMANDS FILE`, requires success, and returns the `result` of each
/// line of the stream (see [`json_stream`]), one per command (more for `watch`).
pub fn gsh_json_all(commands: &str, file: &Path) -> Vec<serde_json::Value> {
    let out = gsh_in_dir_of(file)
        .args(["--json", "-c", commands])
        .arg(file_name(file))
        .run();
    out.assert_success();
    json_stream(&out)
        .into_iter()
        .map(|mut line| {
            line.get_mut("result")
                .map(serde_json::Value::take)
                .unwrap_or_else(|| panic!("a stream line without a result: {line}\n{out}"))
        })
        .collect()
}

/// The lines of a `--json` run's stdout, each checked to be one JSON object tagged with its
/// command and holding a `result` or an `error`. Panics, showing the output, otherwise.
pub fn json_stream(out: &GshOutput) -> Vec<serde_json::Value> {
    out.stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("gsh --json printed a line that is not one JSON object ({e}): {l:?}\n{out}")
            });
            assert!(
                v.get("command").is_some()
                    && (v.get("result").is_some() != v.get("error").is_some()),
                "not a stream line (command and result or error): {v}\n{out}"
            );
            v
        })
        .collect()
}

fn gsh_in_dir_of(file: &Path) -> Gsh {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => Gsh::new().current_dir(dir),
        _ => Gsh::new(),
    }
}

fn file_name(file: &Path) -> OsString {
    file.file_name()
        .map(ToOwned::to_owned)
        .unwrap_or_else(|| file.as_os_str().to_owned())
}
