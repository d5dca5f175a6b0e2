//! Process control: `start`, `run`, `attach`, `detach`, `kill`, `halt`, `continue`, `wait`,
//! `status`, `show threads`, `break`, `load library`, `print`, `execute`, `where`, `up`,
//! `down`. The process lives on the engine's tracer thread; these commands send it work and
//! report what happened in one line (`stopped at breakpoint 2 (parse entry) in thread 4242`).

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context as _, Result};
use engine::instrument::inferior::{self, ChangeKind, Launch};
use engine::instrument::{Action, Inferior, PointSpec};

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Record, Table};
use crate::target::{self, Target, TargetSlot};

pub const START: Spec = Spec {
    name: "start",
    aliases: &[],
    usage: "[ARGS...] [< IN] [> OUT]",
    complete: Complete::File,
    summary: "launch the open program, stopped at main",
    help: "Launches the open executable as a new process under gsh's control, with ARGS (or \
the arguments given after FILE on gsh's command line), stdin from IN and stdout to OUT when \
given. Instrumentation and breakpoints requested before are inserted as soon as its libraries \
are mapped, before any of its own code runs past the entry point; the process then stops at \
`main` (or at the entry point when there is no `main`).",
    examples: &[
        ("start", ""),
        ("start -v input.txt > out.txt", "arguments and redirection"),
    ],
    run: start,
};

pub const RUN: Spec = Spec {
    name: "run",
    aliases: &[],
    usage: "[ARGS...] [< IN] [> OUT]",
    complete: Complete::File,
    summary: "launch the open program and let it run",
    help: "`start`, then `continue`: waits until the program exits or stops (a breakpoint, a \
fatal signal, Ctrl-C).",
    examples: &[("run < input.txt", "")],
    run,
};

pub const ATTACH: Spec = Spec {
    name: "attach",
    aliases: &[],
    usage: "[--clean] PID",
    complete: Complete::Nothing,
    summary: "take control of a running process",
    help: "Attaches to process PID and stops all its threads. Opens its executable when no \
file is open. Its code is compared with its files first: what an earlier gsh left there (it \
was killed while attached: an int3 at a breakpoint or at the dynamic linker's hook, jumps into \
trampolines) is reported, and with --clean put back as the files have it; other differences \
are reported only. gsh's runtime library and memory left by an earlier session (one killed \
while attached, or one that detached while a thread was still in them) are reported and \
reused: the runtime's counters are zeroed before they count again, and memory a session \
released when it detached is written over (a killed session's only after --clean). \
Instrumentation and breakpoints requested before are inserted. A process still in its start-up \
(its dynamic linker not done mapping and relocating its libraries, as right after it was \
launched) is first let run until they are linked, at most 10 s, so that its libraries are \
known and gsh's calls into libc work; one that does not get there is let go, running. \
`detach` lets it go again with its code as it was.",
    examples: &[("attach 4242", ""), ("attach --clean 4242", "")],
    run: attach,
};

pub const DETACH: Spec = Spec {
    name: "detach",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "remove all instrumentation and let the process run on",
    help: "Removes every trampoline jump and breakpoint, and what an earlier gsh left in the \
code, then compares the text with the files: it says the code is as the files have it only \
when every byte is, and lists what still differs. When no change of gsh's is left, unloads \
gsh's runtime library (after the values measured are kept for `report`) and unmaps gsh's \
memory, so the process maps what it did before gsh came: what a thread is still in (a \
trampoline, the runtime, or one a thread returns into from a call a snippet made) stays, \
with a note saying so, for a later session to reuse. Then releases the process, which runs \
on without gsh.",
    examples: &[("detach", "")],
    run: detach,
};

pub const KILL: Spec = Spec {
    name: "kill",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "terminate the process",
    help: "Kills the process with SIGKILL.",
    examples: &[("kill", "")],
    run: kill,
};

pub const HALT: Spec = Spec {
    name: "halt",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "stop all threads of the running process",
    help: "Stops every thread; `continue` resumes them. Ctrl-C while gsh waits for the \
process does the same.",
    examples: &[("halt", "")],
    run: halt,
};

pub const CONTINUE: Spec = Spec {
    name: "continue",
    aliases: &["cont", "c"],
    usage: "[&]",
    complete: Complete::Nothing,
    summary: "resume the process",
    help: "Resumes every thread. Without `&`, waits until the process stops (a breakpoint, a \
fatal signal, Ctrl-C) or exits; with `&`, returns at once and the process runs while you type: \
`at`, `delete` and `print` work on it without stopping it for more than the moment a change \
takes. A process gsh attached to runs hands-off while no breakpoint, trap-based \
instrumentation, declared variable or coverage needs gsh (`set attached-mode`; declared \
variables and coverage need gsh to read their final values if the process exits, unless `set \
attached-mode hands-off`; measures do not: their final values outlive the process): gsh detaches from every thread, leaving the instrumentation working, so signals and new threads cost the program nothing, and takes hold \
again when a command needs it stopped. Meanwhile forks, execs, thread events and crashes are not \
seen (a crash shows as the process killed by its signal) and libraries it loads join at that \
next command.",
    examples: &[("continue", ""), ("continue &", "")],
    run: cont,
};

pub const WAIT: Spec = Spec {
    name: "wait",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "wait until the running process stops or exits",
    help: "Blocks until the process stops or exits; Ctrl-C halts it instead. Of a process \
that ended already (during a `consult` or a `sleep`) it says how it ended, so a script ending \
in `wait` lets the program it started finish, where the end of a script kills it.",
    examples: &[("wait", "after `continue &`")],
    run: wait,
};

pub const STATUS: Spec = Spec {
    name: "status",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "what the process is doing: stopped where, running, or exited",
    help: "Says in one sentence what the process is doing, as gdb's `info program` does: stopped \
(where, and in which thread), running, or gone (its exit code or the signal that killed it); \
then its pid, the program, whether gsh started it (`kill` or quitting gsh ends it) or attached \
to it (`detach` or quitting lets it run on, instrumentation removed), and how many threads it \
has; after `attach`, what earlier gsh sessions left in the process (their runtime, reused or \
kept memory pools, code changes), as `attach` said it. Without a process it says how to get one.",
    examples: &[("status", "")],
    run: status,
};

pub const SHOW_THREADS: Spec = Spec {
    name: "show threads",
    aliases: &[],
    usage: "",
    complete: Complete::Nothing,
    summary: "the process's threads",
    help: "One row per thread: its id, name, state and, when stopped, where.",
    examples: &[("show threads", "")],
    run: show_threads,
};

pub const BREAK: Spec = Spec {
    name: "break",
    aliases: &["b"],
    usage: "POINT [if (COND)]",
    complete: Complete::Point,
    summary: "stop the process at a point",
    help: "Stops the process when a thread reaches POINT (as for `at`: `FUNC entry`, `FUNC \
exit`, `FUNC call [CALLEE] before|after`, `FUNC loop LOOP iter-begin`, `FUNC block ADDR`, \
`FUNC insn ADDR before|after`), and only when COND holds if given; COND is a snippet \
expression (`$0 > 4096`, a parameter by name at entry). The point is found now, so a typo or \
a missing point fails at once. Prints the breakpoint's id; `delete ID` removes it; `show \
instrumentation` lists it. May be set before there is a process; one in a library is set when \
the library is loaded.",
    examples: &[
        ("break parse_header entry", ""),
        ("break parse_header entry if ($1 > 4096)", ""),
    ],
    run: brk,
};

pub const LOAD_LIBRARY: Spec = Spec {
    name: "load library",
    aliases: &[],
    usage: "PATH",
    complete: Complete::File,
    summary: "load a shared library into the process",
    help: "Calls the process's own `dlopen(PATH, RTLD_NOW)`; the library's constructors run. \
Instrumentation waiting for the library is inserted as it appears. Ctrl-C stops waiting for a \
slow load: the call finishes in the process on its own, which then runs on.",
    examples: &[("load library ./libextra.so", "")],
    run: load_library,
};

pub const PRINT: Spec = Spec {
    name: "print",
    aliases: &["p"],
    usage: "[/F] EXPR",
    complete: Complete::Nothing,
    summary: "evaluate an expression in the process, as gdb prints it",
    help: "Evaluates EXPR and prints its value as gdb does. Names are the selected frame's \
parameters and locals (located by the debug info at its pc, registers and location lists in \
optimized code included; `<optimized out>` where the debug info does not say where one is), \
declared variables, then the globals of every loaded module, the frame's own module first \
(`MODULE!NAME` names one module's: `libc.so.6!environ`, `prog!count`); `$0..$5` and, at a \
function's entry, its parameters come from the argument registers; `$rip`, `$rsp` and the other \
general registers are the selected frame's. An access path (`*head`, `head->pts[3]`, \
`shapes[1].name`, and gdb's `FIRST@COUNT`: COUNT objects from where FIRST lies) prints whole \
with its debug-info type: structs and unions as `{a = 1, b = {x \
= 2}}`, arrays as `{1, 2, 3}` with runs of more than ten equal elements as `0 <repeats 16 \
times>`, char arrays as strings, enums by name, bit-fields by their bits, pointers with the \
symbol they point into and the string a `char *` points to. Other expressions are snippet \
expressions (arithmetic, calls to the program's functions, `\"...\"` and `'a'` literals, \
quoted as C quotes them). `print/F` shows every integer, character, enum and pointer in the \
value in format F, as gdb's: `x` hex, `z` zero-padded hex, `o` octal, `t` binary, `d` signed, \
`u` unsigned, `c` character, `a` address and symbol. A running process is read without \
stopping it; calls and assignments need it stopped.",
    examples: &[
        ("print hits", "a declared counter, read live"),
        ("print *head", "a whole struct"),
        ("print head->pts[3].x + 1", ""),
        ("print libc.so.6!environ", "a global of one module"),
        ("print $rsp", "a register of the selected frame"),
        ("print/x head->id", "in hex"),
        ("print head->pts[1]@2", "two elements from the second"),
    ],
    run: print,
};

pub const EXECUTE: Spec = Spec {
    name: "execute",
    aliases: &[],
    usage: "{ SNIPPET }",
    complete: Complete::Nothing,
    summary: "run a snippet once, now, in the stopped process",
    help: "Runs SNIPPET's statements once in the stopped process: assignments change its \
memory, calls run its functions on the current thread.",
    examples: &[("execute { debug_level = 2; }", "")],
    run: execute,
};

pub const WHERE: Spec = Spec {
    name: "where",
    aliases: &["backtrace", "bt"],
    usage: "[N]",
    complete: Complete::Nothing,
    summary: "the stack of the stopped thread",
    help: "Walks the current thread's stack with the modules' .eh_frame call-frame \
information (frame pointers and a careful scan only where there is none) and prints one \
frame per line, innermost first; `up` and `down` select a frame.",
    examples: &[("where", "")],
    run: where_,
};

pub const UP: Spec = Spec {
    name: "up",
    aliases: &[],
    usage: "[N]",
    complete: Complete::Nothing,
    summary: "select the caller's frame",
    help: "Moves N (default 1) frames towards the outermost.",
    examples: &[("up", "")],
    run: up,
};

pub const DOWN: Spec = Spec {
    name: "down",
    aliases: &[],
    usage: "[N]",
    complete: Complete::Nothing,
    summary: "select the callee's frame",
    help: "Moves N (default 1) frames towards the innermost.",
    examples: &[("down", "")],
    run: down,
};

fn line(s: String) -> Output {
    Output::Text(s + "\n")
}

/// The program arguments and redirections of `start`/`run`.
fn launch(ctx: &Context, args: &mut Args) -> Result<Launch> {
    let words = args.rest();
    let path = ctx.session.main()?.binary.path();
    // Absolute, so that a bare name is not looked up in PATH; through the path as given, not
    // its link's target: a program is named after the path it was started through (its
    // `comm`, `argv[0]`), and some tell by it what to be (Debian's `redis-server` is a link
    // to `redis-check-rdb`, which checks a dump file when started by its own name).
    let program = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut launch = Launch {
        program,
        args: Vec::new(),
        stdin: None,
        stdout: None,
        env: Vec::new(),
    };
    let mut explicit = false;
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        if let Some(rest) = w.strip_prefix('<') {
            let path = if rest.is_empty() {
                it.next()
            } else {
                Some(rest.to_owned())
            };
            launch.stdin = Some(PathBuf::from(
                path.ok_or_else(|| anyhow!("`<` needs a file"))?,
            ));
        } else if let Some(rest) = w.strip_prefix('>') {
            let path = if rest.is_empty() {
                it.next()
            } else {
                Some(rest.to_owned())
            };
            launch.stdout = Some(PathBuf::from(
                path.ok_or_else(|| anyhow!("`>` needs a file"))?,
            ));
        } else {
            explicit = true;
            launch.args.push(w);
        }
    }
    if !explicit {
        launch.args = ctx.program_args.clone();
    }
    Ok(launch)
}

/// Replaces a finished target with nothing; refuses to replace a live one.
fn make_room(ctx: &mut Context) -> Result<()> {
    if let Some(t) = &mut ctx.target {
        t.events(false);
        if t.gone().is_none() {
            bail!(
                "process {} is still under control; `kill` or `detach` it first",
                t.pid()
            );
        }
    }
    ctx.target = None;
    Ok(())
}

pub(super) fn start_process(ctx: &mut Context, args: &mut Args) -> Result<String> {
    let launch = launch(ctx, args)?;
    make_room(ctx)?;
    let main = ctx.session.main()?;
    if !matches!(
        main.binary.kind(),
        engine::elf::BinaryKind::Executable | engine::elf::BinaryKind::PieExecutable
    ) {
        bail!(
            "{} is not an executable; open the program that loads it",
            main.name
        );
    }
    let main_addr = main.functions().by_name("main").next().map(|f| f.addr);
    let inferior = Inferior::start(&launch)
        .with_context(|| format!("cannot start {}", launch.program.display()))?;
    let mut t = Target::new(inferior);
    let pid = t.pid();
    let (session, plan) = (&mut ctx.session, &ctx.plan);
    let flag = ctx.interrupt.clone();
    let _ctrl_c = target::CtrlC::catch(&flag);
    let result = t.inferior.install_started(session, plan, main_addr, &flag);
    let (notes, early) = match result {
        Ok(x) => x,
        Err(e) => {
            let _ = t.finish();
            return Err(e.into());
        }
    };
    for n in notes {
        eprintln!("{n}");
    }
    let msg = match early {
        Some(stop) => format!("process {pid}: {stop} before reaching main"),
        None if main_addr.is_some() => format!("process {pid} started, stopped at main"),
        None => format!("process {pid} started, stopped at its entry point (no main)"),
    };
    ctx.target = Some(t);
    Ok(msg)
}

fn start(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    Ok(line(start_process(ctx, args)?))
}

fn run(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let started = start_process(ctx, args)?;
    if ctx.target.as_ref().is_some_and(|t| t.gone().is_some()) {
        return Ok(line(started));
    }
    Ok(line(resume_and_wait(ctx, true)?))
}

fn attach(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let clean = args.flag("--clean");
    let pid_text = args.positionals(1, 1)?.remove(0);
    let pid: i32 = pid_text
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| anyhow!("`{pid_text}` is not a process id"))?;
    make_room(ctx)?;
    // A FILE that is not what the process runs would place instrumentation by the wrong
    // addresses: say so before anything is inserted.
    if let Ok(main) = ctx.session.main() {
        let file = main.binary.path();
        if inferior::is_executable_of(pid, file) == Some(false) {
            let runs = inferior::executable_path(pid)
                .map_or_else(|| "another program".into(), |p| p.display().to_string());
            eprintln!(
                "warning: {} is not the program process {pid} runs ({runs}): its functions \
                 and addresses are {}'s; open the process's own (`gsh -p {pid}` alone) to \
                 instrument it",
                file.display(),
                file.display()
            );
        }
    }
    let inferior = Inferior::attach(pid, ctx.attached_mode, ctx.hands_off_while_measuring)?;
    if ctx.session.main().is_err() {
        let exe = inferior::executable_path(pid)
            .with_context(|| format!("cannot find process {pid}'s executable"))?;
        ctx.session.open(&exe)?;
    }
    let mut t = Target::new(inferior);
    for u in t.inferior.unreadable_modules()? {
        eprintln!(
            "note: {} is not a module gsh can instrument: {}",
            u.name, u.reason
        );
    }
    // What an earlier gsh left (it was killed while attached), before anything of ours.
    let changes = t.inferior.text_changes()?;
    let (leftovers, other): (Vec<_>, Vec<_>) = changes.into_iter().partition(|c| c.kind.is_gsh());
    if !leftovers.is_empty() {
        let bytes: usize = leftovers.iter().map(|c| c.file.len()).sum();
        let traps = leftovers
            .iter()
            .filter(|c| c.kind == ChangeKind::Breakpoint)
            .count();
        let what = format!(
            "{} change{} ({bytes} bytes: {traps} int3, {} jump{} into trampolines) that an \
             earlier gsh left in its code",
            leftovers.len(),
            if leftovers.len() == 1 { "" } else { "s" },
            leftovers.len() - traps,
            if leftovers.len() - traps == 1 {
                ""
            } else {
                "s"
            },
        );
        if clean {
            t.inferior.restore_text(&leftovers)?;
            eprintln!("removed {what}");
            t.earlier.push(format!("removed {what} at attach"));
            if other.is_empty() {
                // Nothing jumps into the killed session's memory now: ours to reuse.
                let reclaimed = t.inferior.reclaim_kept_pools()?;
                if reclaimed > 0 {
                    eprintln!(
                        "reusing {reclaimed} memory pool{} the earlier gsh left",
                        if reclaimed == 1 { "" } else { "s" }
                    );
                }
            }
        } else {
            eprintln!(
                "warning: process {pid} has {what}; `attach --clean {pid}` removes them, and \
                 so does `detach`"
            );
            t.earlier.push(format!("{what} (found at attach)"));
        }
    }
    if !other.is_empty() {
        eprintln!("note: {}", target::differences(pid, &other));
    }
    for note in t.inferior.earlier_session()? {
        eprintln!("{note}");
        t.earlier
            .push(note.strip_prefix("note: ").unwrap_or(&note).to_owned());
    }
    let result = t.inferior.install_attached(&mut ctx.session, &ctx.plan);
    let notes = match result {
        Ok(n) => n,
        Err(e) => {
            let _ = t.finish();
            return Err(e.into());
        }
    };
    for n in notes {
        eprintln!("{n}");
    }
    let threads = t.inferior.thread_count()?;
    let mut t = t;
    t.thread = Some(pid);
    ctx.target = Some(t);
    Ok(line(format!(
        "attached to process {pid} ({threads} thread{}), stopped",
        if threads == 1 { "" } else { "s" }
    )))
}

fn detach(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let t = ctx.target.take().ok_or_else(crate::target::no_process)?;
    let pid = t.pid();
    if t.gone().is_some() {
        return Ok(line(format!("process {pid} is gone already")));
    }
    let detached = t.inferior.detach()?;
    for n in &detached.notes {
        eprintln!("{n}");
    }
    if let Some(kept) = detached.kept {
        ctx.measured = Some(super::measure::Results::from_reading(
            format!("process {pid}, values when gsh detached"),
            kept,
        ));
    }
    let left = detached.left?;
    if !left.is_empty() {
        eprintln!("{}", target::differences(pid, &left));
        return Ok(line(format!(
            "detached from process {pid}; gsh's changes are gone from its code"
        )));
    }
    Ok(line(format!(
        "detached from process {pid}; its code is as the files have it"
    )))
}

fn kill(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let t = ctx.target.take().ok_or_else(crate::target::no_process)?;
    let pid = t.pid();
    t.inferior.kill()?;
    Ok(line(format!("process {pid} killed")))
}

fn halt(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let t = ctx.target.present()?;
    let pid = t.pid();
    t.inferior.halt()?;
    Ok(line(format!("process {pid} halted")))
}

/// Resumes (unless `resume` is false: `wait`) and waits for the next stop, reported in one
/// line.
fn resume_and_wait(ctx: &mut Context, resume: bool) -> Result<String> {
    let flag = ctx.interrupt.clone();
    let _ctrl_c = target::CtrlC::catch(&flag);
    let t = ctx.target.present()?;
    // `wait` after the process stopped on its own while running in the background tells that
    // stop (it once said only "process N is stopped").
    let background = if resume { None } else { t.background_stop() };
    let waited = t.inferior.resume_and_wait(resume, background, &flag)?;
    t.frame = 0;
    if waited.tid.is_some() {
        t.thread = waited.tid;
    }
    Ok(waited.text)
}

fn cont(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let words = args.positionals(0, 1)?;
    let background = match words.first().map(String::as_str) {
        None => false,
        Some("&") => true,
        Some(w) => bail!("`continue` takes only `&`, not `{w}`"),
    };
    if !background {
        return Ok(line(resume_and_wait(ctx, true)?));
    }
    let t = ctx.target.present()?;
    let pid = t.pid();
    t.inferior.resume()?;
    t.frame = 0;
    Ok(line(format!("process {pid} running")))
}

fn wait(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    Ok(line(resume_and_wait(ctx, false)?))
}

/// Says in one sentence what the process is doing, as gdb's `info program` does, then the
/// facts: which program, who started it (and so what quitting does), its threads.
fn status(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let program = ctx
        .session
        .main()
        .ok()
        .map(|m| m.binary.path().display().to_string());
    let Some(t) = ctx.target.as_mut() else {
        let how = match &program {
            Some(p) => format!("`start` or `run` starts {p}; `attach PID` takes a running one"),
            None => "`open FILE` then `start`, or `attach PID`".into(),
        };
        return Ok(Output::Record(Record {
            title: Some(format!("There is no process: {how}.")),
            fields: vec![("State", Cell::text("no process"))],
            table: None,
        }));
    };
    t.events(false);
    let pid = t.pid();
    // The thread of the last stop, else the main thread.
    let current = t.thread.unwrap_or(pid);
    let (state, at, threads, hands_off) = match t.gone() {
        Some(why) => (why.to_owned(), None, 0, false),
        None => {
            let s = t.inferior.status(current)?;
            (s.state.to_string(), s.at, s.threads, s.hands_off)
        }
    };
    let sentence = match (t.gone(), &at) {
        (Some(why), _) => format!("Process {pid} is gone: {why}."),
        (None, Some((tid, place))) => {
            format!("Process {pid} is stopped at {place} in thread {tid}.")
        }
        (None, None) if hands_off => format!(
            "Process {pid} is running with gsh hands-off (detached until a command needs it \
             stopped; forks, execs, thread events and crashes are not seen meanwhile, `set \
             attached-mode traced` follows them); `halt` stops it, `wait` waits."
        ),
        (None, None) if state == "running" => format!(
            "Process {pid} is running; `halt` (or Ctrl-C at the prompt) stops it, `wait` waits."
        ),
        (None, None) => format!("Process {pid} is {state}."),
    };
    let control = if t.started() {
        "started by gsh: `kill` or quitting gsh ends it"
    } else {
        "attached: `detach` or quitting gsh lets it run on, instrumentation removed"
    };
    let mut fields = vec![
        ("Process", Cell::Num(pid as u64)),
        ("Program", Cell::opt(program)),
        ("Control", Cell::text(control)),
        (
            "State",
            Cell::text(if hands_off {
                format!("{state} (hands-off)")
            } else {
                state
            }),
        ),
    ];
    if let Some((tid, place)) = at {
        fields.push(("Where", Cell::text(place)));
        fields.push(("Thread", Cell::Num(tid as u64)));
    }
    fields.push(("Threads", Cell::Num(threads as u64)));
    // What an earlier gsh left, as `attach` said it (gsh's own runtime and memory stay).
    if !t.earlier.is_empty() {
        fields.push(("Earlier gsh", Cell::text(t.earlier.join("; "))));
    }
    Ok(Output::Record(Record {
        title: Some(sentence),
        fields,
        table: None,
    }))
}

fn show_threads(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let t = ctx.target.present()?;
    let current = t.thread;
    let threads = t.inferior.threads()?;
    let mut table = Table::new(vec!["", "Thread", "Name", "State", "Where"]);
    for th in threads {
        table.rows.push(vec![
            Cell::text(if Some(th.tid) == current { "*" } else { "" }),
            Cell::Num(th.tid as u64),
            Cell::text(th.name),
            Cell::text(format!("{:?}", th.state).to_lowercase()),
            Cell::opt(th.at),
        ]);
    }
    table.title = Some(format!("{} threads", table.rows.len()));
    Ok(Output::Table(table))
}

/// Parses `POINT [if (COND)]`.
fn point_and_condition(words: Vec<String>) -> Result<(PointSpec, Option<String>)> {
    let mut words = words;
    let mut cond = None;
    if let Some(i) = words.iter().position(|w| w == "if") {
        let c = words
            .get(i + 1)
            .filter(|c| c.starts_with('(') && c.ends_with(')') && i + 2 == words.len())
            .ok_or_else(|| {
                anyhow!("`if` takes a condition in parentheses, last: if ($1 > 4096)")
            })?;
        cond = Some(c[1..c.len() - 1].trim().to_owned());
        words.truncate(i);
    }
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    let spec = PointSpec::parse(&refs).map_err(|e| anyhow!(e))?;
    Ok((spec, cond))
}

fn brk(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let (spec, cond) = point_and_condition(args.rest())?;
    // Resolved and its points found now, so that a typo fails here (and a library named is
    // opened); a plan request like `at`'s, so a process started later gets it too.
    let r = ctx
        .plan
        .add_action(&mut ctx.session, spec, Action::Breakpoint { cond })?;
    let (id, spec, n) = (r.id, r.spec.clone(), r.funcs.len());
    let mut placed = None;
    if let Some(t) = ctx.target.live() {
        let session = &ctx.session;
        let points = ctx
            .plan
            .place(id, |plan| {
                t.inferior.insert(session, plan, id)?;
                anyhow::Ok(t.inferior.with_live(|live| live.points(id))?)
            })
            .map_err(|e| e.context(format!("breakpoint {id} not set")))?;
        placed = Some(points);
    }
    let mut fields = vec![
        ("Breakpoint", Cell::Num(u64::from(id))),
        ("Point", Cell::text(spec.to_string())),
        ("Functions", Cell::Num(n as u64)),
    ];
    if let Some(placed) = placed {
        fields.push(("Placed", Cell::Num(placed as u64)));
    }
    Ok(Output::Record(Record {
        title: None,
        fields,
        table: None,
    }))
}

fn load_library(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let path = args.positionals(1, 1)?.remove(0);
    let path = std::fs::canonicalize(&path).with_context(|| format!("cannot find {path}"))?;
    let t = ctx.target.present()?;
    // Hooks for the new module run as the tracer notices it. Ctrl-C stops the wait; the
    // library's loading then finishes in the process on its own.
    let _ctrl_c = target::CtrlC::catch(&ctx.interrupt);
    let handle = t.inferior.load_library(&path, &ctx.interrupt)?;
    Ok(line(format!(
        "loaded {} (handle {handle:#x})",
        path.display()
    )))
}

fn print(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let mut expr = args.rest_raw();
    let mut format = None;
    // gdb's `print/x EXPR`.
    if let Some(rest) = expr.strip_prefix('/') {
        let (f, e) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let mut letters = f.chars();
        match (letters.next(), letters.next()) {
            (Some(c), None) if engine::instrument::values::FORMATS.contains(c) => format = Some(c),
            _ => bail!(
                "`print/{f}`: a format is one of x z o t d u c a (hex, zero-padded hex, octal, \
                 binary, signed, unsigned, character, address)"
            ),
        }
        expr = e.trim().to_owned();
    }
    if expr.trim().is_empty() {
        return Err(args.usage_error("missing expression"));
    }
    let session = &ctx.session;
    let t = ctx.target.present()?;
    // Once the process is gone, what it left at its exit: the declared variables.
    let printed = t
        .inferior
        .print(session, t.thread, t.frame, format, &expr)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(line(format!("{expr} = {printed}")))
}

fn execute(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let block = args
        .block
        .take()
        .ok_or_else(|| args.usage_error("missing `{ SNIPPET }`"))?;
    args.positionals(0, 0)?;
    let session = &ctx.session;
    let t = ctx.target.present()?;
    let tid = t.thread;
    t.inferior
        .execute(session, tid, &block.text)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(Output::Nothing)
}

/// The frames of the current thread: (pc, description).
fn frames(ctx: &mut Context) -> Result<Vec<(u64, String)>> {
    let t = ctx.target.present()?;
    let tid = t.thread;
    Ok(t.inferior.frames(tid)?)
}

fn show_frames(ctx: &mut Context, only: Option<usize>) -> Result<Output> {
    let frames = frames(ctx)?;
    let t = ctx.target.present()?;
    if t.frame >= frames.len() {
        t.frame = frames.len().saturating_sub(1);
    }
    let selected = t.frame;
    let mut text = String::new();
    for (i, (_, d)) in frames.iter().enumerate() {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mark = if i == selected { "*" } else { " " };
        text.push_str(&format!("{mark}#{i:<3} {d}\n"));
    }
    Ok(Output::Text(text))
}

fn frame_count(args: &mut Args) -> Result<usize> {
    Ok(match args.positionals(0, 1)?.first() {
        Some(n) => super::args::parse_count("frames", n)?,
        None => 1,
    })
}

fn where_(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    show_frames(ctx, None)
}

fn up(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let n = frame_count(args)?;
    let count = frames(ctx)?.len();
    let t = ctx.target.present()?;
    if t.frame + 1 >= count {
        bail!("already at the outermost frame");
    }
    t.frame = (t.frame + n).min(count - 1);
    let f = t.frame;
    show_frames(ctx, Some(f))
}

fn down(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let n = frame_count(args)?;
    let t = ctx.target.present()?;
    if t.frame == 0 {
        bail!("already at the innermost frame");
    }
    t.frame = t.frame.saturating_sub(n);
    let f = t.frame;
    show_frames(ctx, Some(f))
}
