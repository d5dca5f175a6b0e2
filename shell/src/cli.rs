//! The command line: `gsh [FILE]`, `gsh -b SCRIPT [FILE [ARGS...]]`, `gsh -c 'CMDS' [FILE
//! [ARGS...]]`, `--json`, `-p PID`. Parses with clap, opens FILE, then runs the batch or the
//! prompt, and turns the first error into `gsh: ...` and exit status 1.

use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Parser, ValueHint};

use crate::context::{error_line, Context};
use crate::repl;

/// gsh: an interactive binary-instrumentation shell for x86-64 Linux.
#[derive(Debug, Parser)]
#[command(
    name = "gsh",
    version,
    about = "An interactive binary-instrumentation shell for x86-64 Linux",
    long_about = "gsh opens a 64-bit x86-64 ELF file and answers questions about it: its \
functions, variables, libraries and code. Without -b or -c it reads commands at a prompt; \
`help` there lists them."
)]
pub struct Cli {
    /// Run the commands in SCRIPT, then exit
    #[arg(
        short = 'b',
        value_name = "SCRIPT",
        value_hint = ValueHint::FilePath,
        conflicts_with = "commands"
    )]
    pub batch: Option<PathBuf>,

    /// Run COMMANDS (separated by `;` or newlines), then exit
    #[arg(short = 'c', value_name = "COMMANDS")]
    pub commands: Option<String>,

    /// Attach to the running process PID
    #[arg(short = 'p', value_name = "PID")]
    pub pid: Option<u32>,

    /// Print a JSON stream instead of tables: one object per line, {"command": ..., "result":
    /// ...} or {"command": ..., "error": ...}; the program's own output goes to stderr
    #[arg(long)]
    pub json: bool,

    /// The ELF file to open
    #[arg(value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub file: Option<PathBuf>,

    /// Default arguments for the program when it is started
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        requires = "file"
    )]
    pub args: Vec<String>,
}

/// Runs gsh with the process's arguments; returns the exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gsh: {}", error_line(&e));
            1
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let mut ctx = if cli.json {
        Context::with_writer(true, crate::output::Style::PLAIN, json_stream()?)
    } else {
        Context::new(false)
    };
    let result = session(&mut ctx, cli);
    // Whatever happened, a process gsh started dies with it and one it attached to runs on
    // with its code restored.
    let finished = ctx.finish();
    let result = result.and(finished);
    if let Err(e) = &result {
        // Errors outside any command (a FILE that cannot be opened) join the stream too.
        if e.downcast_ref::<crate::context::Reported>().is_none() {
            ctx.emit_error(e);
        }
    }
    result
}

/// Where `--json` writes: the original standard output, which from now on holds only the
/// stream. gsh's own descriptor 1 becomes a copy of stderr, so a program gsh starts (which
/// inherits it unless `start > FILE` says otherwise) writes its output there, never into
/// the stream.
fn json_stream() -> Result<Box<dyn std::io::Write>> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup(1) returns a new descriptor (or -1) for gsh's stdout; nothing else owns it.
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot set up the JSON stream");
    }
    // SAFETY: dup2(2, 1) makes descriptor 1 a copy of 2; both are gsh's own, and Rust's
    // stdout handle keeps writing to descriptor 1, now stderr.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot set up the JSON stream");
    }
    // SAFETY: `fd` is a fresh descriptor from dup, owned by the File from here on.
    Ok(Box::new(unsafe { std::fs::File::from_raw_fd(fd) }))
}

fn session(ctx: &mut Context, cli: Cli) -> Result<()> {
    ctx.program_args = cli.args;
    if let Some(file) = &cli.file {
        ctx.session.open(file)?;
    }
    if let Some(pid) = cli.pid {
        ctx.run_text(&format!("attach {pid}"), None)?;
    }
    if let Some(script) = &cli.batch {
        return ctx.run_file(script);
    }
    if let Some(text) = &cli.commands {
        return ctx.run_text(text, None);
    }
    if std::io::stdin().is_terminal() {
        return repl::run(ctx);
    }
    // Commands piped in: a script on stdin, each command run as soon as its line (or the
    // last line of its `{ ... }` block) arrives, so a live process is never kept waiting
    // for the writer to send more or to close the pipe.
    let origin = Some(Path::new("<stdin>"));
    let mut stdin = std::io::stdin().lock();
    let (mut pending, mut first, mut next) = (String::new(), 1, 1);
    loop {
        let n = stdin
            .read_line(&mut pending)
            .context("cannot read commands from stdin")?;
        if n > 0 {
            next += 1;
            if crate::script::needs_more(&pending) {
                continue;
            }
        }
        if !pending.trim().is_empty() {
            ctx.run_text_from(&pending, origin, first)?;
        }
        if n == 0 || ctx.quit {
            return Ok(());
        }
        pending.clear();
        first = next;
    }
}
