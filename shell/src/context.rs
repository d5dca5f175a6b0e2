//! The shell's state between commands: the engine session, how output is printed, the default
//! program arguments, and the running of command text (a script, a `-c` string, a prompt line).

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use engine::{FunctionTable, ModuleId, Session};

use crate::commands;
use crate::output::{json_value, render_text, Output, Style};
use crate::progress::Bar;
use crate::script;

/// How deeply `source` may nest before gsh assumes a script sources itself.
const MAX_SOURCE_DEPTH: usize = 16;

/// Everything a command can read or change.
pub struct Context {
    pub session: Session,
    /// Declared variables and `at` requests, until `save` writes them out.
    pub plan: engine::instrument::Plan,
    /// Print the JSON stream (one object per line per answer or error, see `JSON OUTPUT` in
    /// the man page) instead of tables.
    pub json: bool,
    pub style: Style,
    /// The program arguments given after FILE on the command line (used by `start`/`run`).
    pub program_args: Vec<String>,
    /// Set by `quit`: stop reading commands.
    pub quit: bool,
    /// The live process, when there is one.
    pub target: Option<crate::target::Target>,
    /// What was measured in a process gsh detached from, for `report`.
    pub measured: Option<crate::commands::measure::Results>,
    /// `set thread-events`: print each thread start and exit, not one summary line.
    pub thread_events: bool,
    /// `set attached-mode`: whether gsh lets a running attached process go while nothing
    /// needs the tracer.
    pub attached_mode: engine::instrument::inferior::AttachedMode,
    /// `set attached-mode hands-off` (not `auto`): let go even while declared variables or
    /// coverage count (or a measure's runtime has no arena gsh holds), losing the values a
    /// process that exits meanwhile ends with.
    pub hands_off_while_measuring: bool,
    /// Set by Ctrl-C while a command waits for the process.
    pub interrupt: std::sync::Arc<std::sync::atomic::AtomicBool>,
    depth: usize,
    out: Box<dyn Write>,
    /// The command running now, as typed: what `--json` answers are tagged with.
    command: Option<String>,
}

impl Context {
    /// A context printing to stdout in the style detected for it.
    pub fn new(json: bool) -> Context {
        Context::with_writer(json, Style::detect(), Box::new(std::io::stdout()))
    }

    /// A context printing to `out` (tests capture output this way).
    pub fn with_writer(json: bool, style: Style, out: Box<dyn Write>) -> Context {
        Context {
            session: Session::new(),
            plan: engine::instrument::Plan::default(),
            json,
            style,
            program_args: Vec::new(),
            quit: false,
            target: None,
            measured: None,
            thread_events: false,
            attached_mode: engine::instrument::inferior::AttachedMode::default(),
            hands_off_while_measuring: false,
            interrupt: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
            depth: 0,
            out,
            command: None,
        }
    }

    /// The function table of module `m`, built now (with a progress bar) if it is not yet.
    pub fn functions(&self, m: ModuleId) -> &FunctionTable {
        let module = self.session.module(m);
        if module.functions_ready() {
            return module.functions();
        }
        let bar = Bar::new(format!("analysing {}", module.name));
        module.functions_with(&bar)
    }

    /// The modules a command looks in: the one named by `in MODULE`, else every open module.
    pub fn modules_for(&mut self, module: Option<&str>) -> Result<Vec<ModuleId>> {
        self.session.main()?;
        Ok(match module {
            Some(name) => vec![self.session.find_module(name)?],
            None => self.session.modules().iter().map(|m| m.id).collect(),
        })
    }

    /// Takes the output away for a command that writes as it runs (`watch consult`'s tables
    /// and `--json` lines, written while the search holds the context); give it back with
    /// [`Context::restore_writer`]. Meanwhile the context writes nowhere.
    pub(crate) fn take_writer(&mut self) -> Box<dyn Write> {
        std::mem::replace(&mut self.out, Box::new(std::io::sink()))
    }

    /// Gives back the output [`Context::take_writer`] took.
    pub(crate) fn restore_writer(&mut self, out: Box<dyn Write>) {
        self.out = out;
    }

    /// The command running now, as typed.
    pub(crate) fn command(&self) -> Option<&str> {
        self.command.as_deref()
    }

    /// Prints one command's output: for people, or (`--json`) as one line of the stream,
    /// `{"command": "...", "result": ...}`.
    pub fn emit(&mut self, out: &Output) -> Result<()> {
        let text = if self.json {
            stream_line(self.command.as_deref(), json_value(out))
        } else {
            render_text(out, self.style)
        };
        self.write(&text)
    }

    /// With `--json`, puts an error in the stream as `{"command": "...", "error": "..."}`
    /// (`"command": null` for errors outside any command, such as a FILE that cannot be
    /// opened); without, does nothing (errors go to stderr as `gsh: ...`).
    pub fn emit_error(&mut self, e: &anyhow::Error) {
        if !self.json {
            return;
        }
        let line = serde_json::json!({ "command": self.command, "error": error_line(e) });
        let _ = self.write(&format!("{line}\n"));
    }

    fn write(&mut self, text: &str) -> Result<()> {
        let written = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush());
        match written {
            // The reader went away (`gsh ... | head`): stop quietly, as other tools do.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.quit = true;
                Ok(())
            }
            other => other.context("cannot write output"),
        }
    }

    /// Splits `text` into commands and runs them in order, stopping at the first error or at
    /// `quit`. `origin` names the script file, for error messages (`explore.gsh:3: ...`).
    pub fn run_text(&mut self, text: &str, origin: Option<&Path>) -> Result<()> {
        self.run_text_from(text, origin, 1)
    }

    /// [`Context::run_text`] for text that starts at line `first_line` of `origin` (commands
    /// piped in run a few lines at a time).
    pub fn run_text_from(
        &mut self,
        text: &str,
        origin: Option<&Path>,
        first_line: usize,
    ) -> Result<()> {
        let at = |line: usize| {
            let line = line + first_line - 1;
            match origin {
                Some(p) => format!("{}:{line}", p.display()),
                None => format!("line {line}"),
            }
        };
        let cmds = script::split(text).map_err(|e| match origin {
            Some(p) => anyhow!("{}: {e}", p.display()),
            None => anyhow!("{e}"),
        })?;
        let many = cmds.len() > 1 || origin.is_some();
        let outer = self.command.take();
        let mut result = Ok(());
        for cmd in &cmds {
            if self.quit {
                break;
            }
            self.command = Some(cmd.display());
            let done = commands::run(self, cmd).and_then(|out| self.emit(&out));
            self.print_events();
            if let Err(e) = done {
                let e = if many { e.context(at(cmd.line)) } else { e };
                // A failure inside `source` is the stream's once, tagged with the command
                // that failed, not again with `source`.
                if e.downcast_ref::<Reported>().is_none() {
                    self.emit_error(&e);
                }
                result = Err(if self.json { e.context(Reported) } else { e });
                break;
            }
        }
        self.command = outer;
        result
    }

    /// Prints, on stderr, what happened to the process since the last command (a thread
    /// started, a library was loaded, it exited).
    pub fn print_events(&mut self) {
        if let Some(t) = &mut self.target {
            for e in t.events(self.thread_events) {
                eprintln!("{e}");
            }
            if let Err(e) = t.learn_modules(&mut self.session) {
                eprintln!("gsh: cannot open the libraries the process loaded: {e:#}");
            }
        }
    }

    /// Ends control of the process: detaches one gsh attached to (its code restored) and
    /// kills one gsh started, as gdb does when it exits.
    pub fn finish(&mut self) -> Result<()> {
        match self.target.take() {
            Some(t) => t.finish(),
            None => Ok(()),
        }
    }

    /// Runs the script at `path` (`source FILE`, `gsh -b FILE`).
    pub fn run_file(&mut self, path: &Path) -> Result<()> {
        if self.depth >= MAX_SOURCE_DEPTH {
            return Err(anyhow!(
                "{}: scripts nested more than {MAX_SOURCE_DEPTH} deep; does it source itself?",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read script {}", path.display()))?;
        self.depth += 1;
        let result = self.run_text(&text, Some(path));
        self.depth -= 1;
        result
    }
}

/// Marks an error already put in the `--json` stream.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Empty: it adds nothing to the message, which `error_line` joins.
        f.write_str("")
    }
}

/// An error as the one line users see after `gsh: `: the context chain, outermost first.
/// Snippet diagnostics keep their lines, since their caret points under the source line.
pub fn error_line(e: &anyhow::Error) -> String {
    let diagnostic = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<engine::instrument::RequestError>(),
            Some(engine::instrument::RequestError::Snippet(_))
        )
    });
    let mut line = String::new();
    for part in e.chain().map(|c| c.to_string()).filter(|p| !p.is_empty()) {
        // Engine errors already print their source (`cannot read x: No such file`); don't
        // repeat it.
        if line.ends_with(&part) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&part);
    }
    if diagnostic {
        line.trim_end().to_owned()
    } else {
        line.replace('\n', " ")
    }
}

/// `result` as one line of the `--json` stream for `command`, `{"command": "...", "result":
/// ...}` and a newline.
pub(crate) fn stream_line(command: Option<&str>, result: serde_json::Value) -> String {
    let mut line = serde_json::Map::new();
    line.insert("command".into(), serde_json::json!(command));
    line.insert("result".into(), result);
    let mut s = serde_json::Value::Object(line).to_string();
    s.push('\n');
    s
}
