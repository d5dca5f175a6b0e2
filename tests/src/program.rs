//! Running a program gsh wrote (a rewritten or instrumented binary) the way a user would:
//! empty environment, no stdin, output captured.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `exe` with `args` and an empty environment plus `env`.
///
/// Another test thread forking while this one still held a just-written file open leaves a
/// copy of that descriptor in its child until the child execs: executing the file in that
/// window fails with ETXTBSY. That passes, so this retries briefly.
pub fn run_program(exe: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args).env_clear().stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut tries = 0;
    loop {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => {
                return result.unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
            }
        }
    }
}
