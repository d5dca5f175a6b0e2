//! The interactive prompt: thin glue over rustyline. History lives in the XDG state directory;
//! completion comes from the command table (command and subcommand words), the open module's
//! function names (once its table is built), and file paths; an unclosed `{` or quote
//! continues the input on the next line.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{CompletionType, Config, Editor, Helper, Highlighter, Hinter};

use engine::{FuncId, Module};

use crate::commands::{self, Complete};
use crate::context::{error_line, Context};
use crate::script;
use crate::target::TargetSlot;

/// What the prompt looks like, as Dyner's `(dyner) ` and gdb's `(gdb) `.
pub const PROMPT: &str = "(gsh) ";

/// Most function names offered at once; more would scroll the terminal away.
const MAX_CANDIDATES: usize = 200;

/// Code size up to which the prompt discovers functions eagerly, for completion.
const CHEAP_CODE_BYTES: u64 = 4 << 20;

/// rustyline's view of gsh.
#[derive(Helper, Highlighter, Hinter)]
struct GshHelper {
    files: FilenameCompleter,
    /// Function names of the main module, sorted; empty until its table is built.
    functions: Vec<String>,
    /// Which table `functions` came from: (module path, function count).
    functions_of: Option<(PathBuf, usize)>,
    /// The main module, for a function's callees and loops.
    module: Option<Arc<Module>>,
}

/// What completion offers beyond the command table: names from the open binary.
pub trait Known {
    /// Function names, sorted.
    fn functions(&self) -> &[String];
    /// The functions `func` calls, as `at FUNC call CALLEE` names them.
    fn callees(&self, func: &str) -> Vec<String>;
    /// `func`'s loops (`loop_1`, `loop_1.1`).
    fn loops(&self, func: &str) -> Vec<String>;
}

/// Function names alone (no analysis to ask about callees or loops).
impl Known for Vec<String> {
    fn functions(&self) -> &[String] {
        self
    }

    fn callees(&self, _: &str) -> Vec<String> {
        Vec::new()
    }

    fn loops(&self, _: &str) -> Vec<String> {
        Vec::new()
    }
}

impl GshHelper {
    /// The analysis of `func` in the main module, if analysing is cheap or already done: a
    /// tab press must not start minutes of work on cc1.
    fn with_analysis<T>(&self, func: &str, f: impl FnOnce(&Module, FuncId) -> T) -> Option<T> {
        let module = self.module.as_deref()?;
        if !module.analysis_ready() {
            let code: u64 = module.binary.code_sections().map(|s| s.size).sum();
            if code > CHEAP_CODE_BYTES {
                return None;
            }
        }
        let id = module.functions().by_name(func).next()?.id;
        Some(f(module, id))
    }
}

impl Known for GshHelper {
    fn functions(&self) -> &[String] {
        &self.functions
    }

    fn callees(&self, func: &str) -> Vec<String> {
        self.with_analysis(func, |m, id| {
            let table = m.functions();
            let mut names: Vec<String> = m
                .analysis()
                .function(id)
                .cfg
                .calls()
                .filter_map(|c| table.at(c.target?))
                .map(|f| f.name.trim_end_matches("@plt").to_owned())
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        })
        .unwrap_or_default()
    }

    fn loops(&self, func: &str) -> Vec<String> {
        self.with_analysis(func, |m, id| {
            let a = m.analysis().function(id);
            a.loops.loops.iter().map(|l| l.name.clone()).collect()
        })
        .unwrap_or_default()
    }
}

impl Completer for GshHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = line.get(..pos).unwrap_or(line);
        match complete_words(before, self) {
            Completion::Words(start, words) => Ok((
                start,
                words
                    .into_iter()
                    .map(|w| Pair {
                        display: w.clone(),
                        replacement: w,
                    })
                    .collect(),
            )),
            Completion::Files => self.files.complete_path(line, pos),
        }
    }
}

impl Validator for GshHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if script::needs_more(ctx.input()) {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

/// What to offer at the cursor.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// Replace from byte `start` with one of these words.
    Words(usize, Vec<String>),
    /// Complete a file path.
    Files,
}

/// Completion for the text before the cursor: command words first, then what the command's
/// arguments take.
pub fn complete_words(before: &str, known: &dyn Known) -> Completion {
    // Only the command being typed matters: the text after the last separator.
    let seg_start = before.rfind([';', '\n']).map_or(0, |i| i + 1);
    let segment = &before[seg_start..];
    let words: Vec<&str> = segment.split_whitespace().collect();
    let typing = !segment.is_empty() && !segment.ends_with(char::is_whitespace);
    let (done, prefix) = match (typing, words.split_last()) {
        (true, Some((last, rest))) => (rest, *last),
        _ => (&words[..], ""),
    };
    let start = before.len() - prefix.len();
    let pick = |cands: Vec<&str>| {
        Completion::Words(
            start,
            cands
                .into_iter()
                .filter(|c| c.starts_with(prefix))
                .map(|c| format!("{c} "))
                .collect(),
        )
    };
    match done {
        [] => return pick(commands::first_words()),
        [first] if !commands::second_words(first).is_empty() => {
            return pick(commands::second_words(first))
        }
        _ => {}
    }
    let Some((spec, used)) = commands::lookup(done) else {
        return Completion::Words(start, Vec::new());
    };
    match spec.complete {
        Complete::Nothing => Completion::Words(start, Vec::new()),
        Complete::File => Completion::Files,
        Complete::Command => match &done[used..] {
            [] => pick(commands::first_words()),
            [first] => pick(commands::second_words(first)),
            _ => Completion::Words(start, Vec::new()),
        },
        Complete::Point => {
            let after_func = |func: &str, rest: &[&str]| -> Vec<String> {
                let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
                match rest {
                    [] => words(&["entry", "exit", "call", "loop", "block", "insn", "edge"]),
                    ["call"] => {
                        let mut v = known.callees(func);
                        v.extend(words(&["before", "after"]));
                        v
                    }
                    ["call", _] => words(&["before", "after"]),
                    ["loop"] => known.loops(func),
                    ["loop", _] => words(&["entry", "exit", "iter-begin", "iter-end"]),
                    ["insn", _] => words(&["before", "after"]),
                    _ => Vec::new(),
                }
            };
            match &done[used..] {
                [] => function_names(known.functions(), prefix, start),
                [func, rest @ ..] => {
                    let func = func.trim_matches(['\'', '"']);
                    let cands = after_func(func, rest);
                    pick(cands.iter().map(String::as_str).collect())
                }
            }
        }
        Complete::Function => {
            if done.last() == Some(&"in") {
                return Completion::Words(start, Vec::new());
            }
            function_names(known.functions(), prefix, start)
        }
    }
}

/// Function names starting with `prefix` (after a quote, which stays), from `start`.
fn function_names(functions: &[String], prefix: &str, start: usize) -> Completion {
    let bare = prefix.trim_start_matches(['\'', '"']);
    let from = functions.partition_point(|f| f.as_str() < bare);
    let names = functions[from..]
        .iter()
        .take_while(|f| f.starts_with(bare))
        .take(MAX_CANDIDATES)
        .cloned()
        .collect();
    Completion::Words(start + (prefix.len() - bare.len()), names)
}

/// Refreshes the helper's function names when the main module's table is built or changed.
fn refresh_functions(helper: &mut GshHelper, ctx: &Context) {
    let Ok(main) = ctx.session.main() else {
        helper.functions.clear();
        helper.functions_of = None;
        helper.module = None;
        return;
    };
    helper.module = Some(ctx.session.module_arc(main.id));
    if !main.functions_ready() {
        // Discovering a small module's functions takes milliseconds: worth it for completion.
        // A big one (cc1's 20 MB of code) waits until a command needs its table.
        let code: u64 = main.binary.code_sections().map(|s| s.size).sum();
        if code > CHEAP_CODE_BYTES {
            return;
        }
    }
    let table = main.functions();
    let key = (main.binary.path().to_owned(), table.functions().len());
    if helper.functions_of.as_ref() == Some(&key) {
        return;
    }
    let mut names: Vec<String> = table
        .functions()
        .iter()
        .map(|f| {
            let name = f.demangled.as_deref().unwrap_or(&f.name);
            engine::symbols::strip_params(name).to_owned()
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    helper.functions = names;
    helper.functions_of = Some(key);
}

/// `$XDG_STATE_HOME/gsh/history`, its directory created; `None` when there is no home.
fn history_path() -> Option<PathBuf> {
    let dir = dirs::state_dir()?.join("gsh");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("history"))
}

/// Runs one line typed at the prompt. Ctrl-C meanwhile cancels the command, not gsh: it
/// halts a process being waited for (the command's own `CtrlC`), and long analysis stops at
/// its next progress report, unwinding back here with [`crate::progress::Cancelled`].
fn run_cancellable(ctx: &mut Context, line: &str) {
    use std::sync::atomic::Ordering;
    crate::progress::CANCEL.store(false, Ordering::SeqCst);
    // While registered, SIGINT no longer ends gsh (signal-hook's handler replaces the
    // default action).
    // SAFETY: the action only stores to an atomic, which is async-signal-safe.
    let id = unsafe {
        signal_hook::low_level::register(signal_hook::consts::SIGINT, || {
            crate::progress::CANCEL.store(true, Ordering::SeqCst)
        })
    }
    .ok();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.run_text(line, None)));
    if let Some(id) = id {
        signal_hook::low_level::unregister(id);
    }
    crate::progress::CANCEL.store(false, Ordering::SeqCst);
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("gsh: {}", error_line(&e)),
        Err(p) if p.is::<crate::progress::Cancelled>() => eprintln!("gsh: interrupted"),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Keeps the default panic message for real panics only: a cancelled command unwinds with
/// [`crate::progress::Cancelled`] and says `gsh: interrupted` instead.
fn quiet_cancel_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<crate::progress::Cancelled>() {
            previous(info);
        }
    }));
}

/// Reads and runs commands until `quit` or Ctrl-D. Errors are printed and the prompt goes on.
pub fn run(ctx: &mut Context) -> Result<()> {
    let config = Config::builder()
        .auto_add_history(false)
        .completion_type(CompletionType::List)
        .build();
    quiet_cancel_panics();
    let mut rl: Editor<GshHelper, DefaultHistory> = Editor::with_config(config)?;
    let mut helper = GshHelper {
        files: FilenameCompleter::new(),
        functions: Vec::new(),
        functions_of: None,
        module: None,
    };
    refresh_functions(&mut helper, ctx);
    rl.set_helper(Some(helper));
    let history = history_path();
    if let Some(p) = &history {
        // A missing history file is normal on first use.
        let _ = rl.load_history(p);
    }
    loop {
        ctx.print_events();
        match rl.readline(PROMPT) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    rl.add_history_entry(line.as_str())?;
                }
                run_cancellable(ctx, &line);
                if let Some(h) = rl.helper_mut() {
                    refresh_functions(h, ctx);
                }
                if ctx.quit {
                    if confirm_quit(&mut rl, ctx)? {
                        break;
                    }
                    ctx.quit = false;
                }
            }
            // Ctrl-C abandons the line being typed and halts a running process, as Dyner did.
            Err(ReadlineError::Interrupted) => {
                if let Some(t) = ctx.target.live() {
                    let halted = t.inferior.halt_if_running();
                    match halted {
                        Ok(true) => eprintln!("[process {} halted]", t.pid()),
                        Ok(false) => {}
                        Err(e) => eprintln!("gsh: {}", error_line(&e.into())),
                    }
                }
                continue;
            }
            Err(ReadlineError::Eof) => {
                if confirm_quit(&mut rl, ctx)? {
                    break;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(p) = &history {
        if let Err(e) = rl.append_history(p) {
            eprintln!("gsh: cannot save history to {}: {e}", p.display());
        }
    }
    Ok(())
}

/// Before leaving with a live process, asks as gdb does, since leaving kills a process gsh
/// started (and detaches one it attached to). True when gsh should quit. End of input
/// answers yes, as in gdb; Ctrl-C answers no.
fn confirm_quit(rl: &mut Editor<GshHelper, DefaultHistory>, ctx: &mut Context) -> Result<bool> {
    let Some(t) = ctx.target.as_mut() else {
        return Ok(true);
    };
    t.events(false);
    if t.gone().is_some() {
        return Ok(true);
    }
    let fate = if t.started() {
        "will be killed"
    } else {
        "will be detached (its instrumentation removed)"
    };
    eprintln!(
        "A debugging session is active.\n\n\tProcess {} {fate}.\n",
        t.pid()
    );
    loop {
        match rl.readline("Quit anyway? (y or n) ") {
            Ok(answer) => match answer.trim() {
                "y" | "Y" | "yes" => return Ok(true),
                "n" | "N" | "no" => {
                    eprintln!("Not confirmed.");
                    return Ok(false);
                }
                _ => eprintln!("Please answer y or n."),
            },
            Err(ReadlineError::Eof) => return Ok(true),
            Err(ReadlineError::Interrupted) => {
                eprintln!("Not confirmed.");
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
#[path = "repl_tests.rs"]
mod tests;
