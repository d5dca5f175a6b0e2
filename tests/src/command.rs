//! Running the machine's tools (gcc, strip, objcopy, nm, objdump) with failures that name the
//! command line and its stderr.

use std::process::{Command, Stdio};

/// Runs `program args...` to completion and returns its stdout. Panics, naming the command and
/// showing its stderr, when it cannot start or exits unsuccessfully.
pub fn run_tool<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    let line = describe(&cmd);
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => panic!("cannot run `{line}`: {e} (is {program} installed?)"),
    };
    if !out.status.success() {
        panic!(
            "`{line}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command as a user could paste it into a shell.
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| {
        let a = a.to_string_lossy();
        if a.contains(' ') {
            format!("'{a}'")
        } else {
            a.into_owned()
        }
    }));
    parts.join(" ")
}
