//! Commands about the shell itself: `source`, `echo`, `sleep`, `set`, `help`, `quit`.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use engine::instrument::inferior::AttachedMode;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::docgen;
use crate::output::{Cell, Output};
use crate::target::TargetSlot;

/// The longest `sleep` accepted: a day. Longer is surely a typo.
const MAX_SLEEP_SECONDS: f64 = 86_400.0;

pub const SOURCE: Spec = Spec {
    name: "source",
    aliases: &[],
    usage: "FILE",
    complete: Complete::File,
    summary: "run the commands in a script file",
    help: "Runs FILE's commands in order, stopping at the first that fails. A script has one \
command per line (or several separated by `;`), `#` comments, and `{ ... }` blocks that may \
span lines. With --json each command in it prints its own document, then `source` prints `{}`.",
    examples: &[("source scripts/explore-ls.gsh", "")],
    run: source,
};

pub const ECHO: Spec = Spec {
    name: "echo",
    aliases: &[],
    usage: "[TEXT...]",
    complete: Complete::Nothing,
    summary: "print text",
    help: "Prints its words separated by single spaces; quote to keep several spaces.",
    examples: &[("echo '== functions =='", "")],
    run: echo,
};

pub const SLEEP: Spec = Spec {
    name: "sleep",
    aliases: &[],
    usage: "SECONDS",
    complete: Complete::Nothing,
    summary: "wait, e.g. while a live mutatee runs",
    help: "Waits SECONDS (a decimal number such as 0.5, at most a day) before the next command.",
    examples: &[("sleep 0.5", "")],
    run: sleep,
};

pub const SET: Spec = Spec {
    name: "set",
    aliases: &["set print"],
    usage: "[thread-events on|off | attached-mode auto|hands-off|traced]",
    complete: Complete::Nothing,
    summary: "show or change a shell setting",
    help: "Without arguments, lists the settings and their values. `thread-events` (off by \
default) says whether each thread a live process starts or ends is printed as `[new thread \
TID]` / `[thread TID exited]`; when off, the shell prints one summary line instead, such as \
`[1900 threads started, 1898 exited]`. gdb's spelling `set print thread-events off` works too. \
`attached-mode` says how gsh follows a process it attached to while it runs. `auto` (the \
default) runs it hands-off while nothing needs gsh: no breakpoint, no trap-based \
instrumentation, no declared variable or coverage whose final value gsh must read when the \
process exits. Measures (`count`, `time`, `profile`) need no tracer: their counters live in \
memory gsh holds a handle of, so `report` gives the exact final values of a process that \
exited while let go. Hands-off, every thread is detached (instrumentation and the runtime stay and \
keep working) and taken hold of again when a command needs the process stopped, so signals and \
new threads cost the program nothing; forks, execs, thread events and crashes are not seen \
meanwhile (a crash shows as the process killed by its signal), and libraries it loads join at \
the next command that stops it. `hands-off` lets go while declared variables or coverage \
count too (and while measuring with a runtime gsh could not take that handle of): they keep \
counting and `report` reads them, but a process that exits while let go takes their final \
values with it. `traced` keeps every thread traced, as gdb does: each signal and thread creation stops in gsh, \
and a fault signal stops the process where it happened. A process gsh started is always traced.",
    examples: &[
        ("set thread-events on", ""),
        ("set attached-mode traced", ""),
    ],
    run: set,
};

pub const HELP: Spec = Spec {
    name: "help",
    aliases: &["?"],
    usage: "[COMMAND]",
    complete: Complete::Command,
    summary: "list the commands, or describe one",
    help: "Without an argument, lists every command with a one-line summary. With COMMAND \
(`help whatis`, `help show functions`, `help show`), shows its usage, description and examples.",
    examples: &[("help", ""), ("help show functions", "")],
    run: help,
};

pub const QUIT: Spec = Spec {
    name: "quit",
    aliases: &["exit", "q"],
    usage: "",
    complete: Complete::Nothing,
    summary: "leave gsh",
    help: "Stops reading commands and leaves gsh: a process gsh started is killed, one it \
attached to is detached with its instrumentation removed. At the prompt, with such a process \
alive, it first asks `Quit anyway? (y or n)` as gdb does; Ctrl-D does the same as `quit`. \
Scripts, `-c` and piped commands never ask.",
    examples: &[("quit", "")],
    run: quit,
};

fn source(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let path = args.positionals(1, 1)?.remove(0);
    ctx.run_file(Path::new(&path))?;
    Ok(Output::Nothing)
}

fn echo(_: &mut Context, args: &mut Args) -> Result<Output> {
    if args.block.is_some() {
        return Err(args.usage_error("`echo` takes no `{ ... }` block"));
    }
    Ok(Output::Text(args.rest_joined()))
}

fn sleep(_: &mut Context, args: &mut Args) -> Result<Output> {
    let s = args.positionals(1, 1)?.remove(0);
    let secs: f64 = s
        .parse()
        .map_err(|_| anyhow!("sleep takes a number of seconds, not `{s}`"))?;
    if !(0.0..=MAX_SLEEP_SECONDS).contains(&secs) {
        bail!("sleep takes 0 to {MAX_SLEEP_SECONDS} seconds, not `{s}`");
    }
    // In slices, so Ctrl-C at the prompt (which sets `progress::CANCEL`) ends it.
    let due = std::time::Instant::now() + Duration::from_secs_f64(secs);
    loop {
        let left = due.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(Output::Nothing);
        }
        if crate::progress::CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("sleep interrupted");
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

fn set(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let words = args.positionals(0, 2)?;
    let on_off = |b: bool| if b { "on" } else { "off" };
    match words.as_slice() {
        [] => {
            let mut t = crate::output::Table::new(vec!["Setting", "Value"]);
            t.rows.push(vec![
                Cell::Text("thread-events".into()),
                Cell::Text(on_off(ctx.thread_events).into()),
            ]);
            t.rows.push(vec![
                Cell::Text("attached-mode".into()),
                Cell::Text(attached_setting(ctx).into()),
            ]);
            Ok(Output::Table(t))
        }
        [name, value] if name == "attached-mode" => {
            let (mode, measuring) = match value.as_str() {
                "auto" => (AttachedMode::HandsOff, false),
                "hands-off" => (AttachedMode::HandsOff, true),
                "traced" => (AttachedMode::Traced, false),
                v => bail!("attached-mode is `auto`, `hands-off` or `traced`, not `{v}`"),
            };
            ctx.attached_mode = mode;
            ctx.hands_off_while_measuring = measuring;
            if let Some(t) = ctx.target.live() {
                t.inferior.set_attached_mode(mode, measuring)?;
            }
            Ok(Output::Nothing)
        }
        [name] if name == "attached-mode" => {
            bail!("say `set attached-mode auto`, `hands-off` or `traced`")
        }
        [name, value] if name == "thread-events" => {
            ctx.thread_events = match value.as_str() {
                "on" => true,
                "off" => false,
                v => bail!("thread-events is `on` or `off`, not `{v}`"),
            };
            Ok(Output::Nothing)
        }
        [name] if name == "thread-events" => bail!("say `set thread-events on` or `off`"),
        [name, ..] => match super::closest(name, ["thread-events", "attached-mode"].into_iter()) {
            Some(s) => bail!("no setting named `{name}`; did you mean `{s}`?"),
            None => {
                bail!("no setting named `{name}`; the settings are: thread-events, attached-mode")
            }
        },
    }
}

fn help(_: &mut Context, args: &mut Args) -> Result<Output> {
    let words = args.positionals(0, 3)?;
    if words.is_empty() {
        return Ok(Output::Text(docgen::help_overview()));
    }
    let name = words.join(" ");
    if name == "snippets" || name == "snippet" {
        return Ok(Output::Text(engine::snippet::GRAMMAR.to_owned()));
    }
    if let Some(spec) = super::find(&name) {
        return Ok(Output::Text(docgen::help_command(spec)));
    }
    // `help show`: every command starting with that word.
    let group: Vec<&Spec> = super::COMMANDS
        .iter()
        .filter(|s| s.name.split(' ').next() == Some(name.as_str()))
        .collect();
    if !group.is_empty() {
        return Ok(Output::Text(docgen::help_list(&group)));
    }
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    Err(super::unknown(&refs))
}

fn quit(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    ctx.quit = true;
    Ok(Output::Nothing)
}

/// The `attached-mode` setting's name.
fn attached_setting(ctx: &Context) -> &'static str {
    match (ctx.attached_mode, ctx.hands_off_while_measuring) {
        (AttachedMode::Traced, _) => "traced",
        (AttachedMode::HandsOff, true) => "hands-off",
        (AttachedMode::HandsOff, false) => "auto",
    }
}
