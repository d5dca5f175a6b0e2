//! The command table: every shell command defined once, with its name, aliases, argument
//! shapes, help and run function. Dispatch, `help`, tab completion, the man page and the
//! generated docs all read [`COMMANDS`], so they cannot disagree.

mod analysed;
mod args;
mod calls;
mod cfg;
mod consult;
mod coverage;
mod disas;
mod examine;
mod files;
mod instrument;
mod loops;
pub mod measure;
mod misc;
pub mod process;
mod stats;
mod symbols;
mod watch;
mod whatis;

use anyhow::{anyhow, Result};

pub use args::Args;

use crate::context::Context;
use crate::output::Output;
use crate::script;

/// What a command's arguments complete to at the prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Complete {
    Nothing,
    /// File paths (`open`, `source`).
    File,
    /// Function names of the open module.
    Function,
    /// A point: a function, then `entry`, `exit`, `call [CALLEE] before|after` or `loop LOOP
    /// entry|...`, with the function's callees and loops offered.
    Point,
    /// Command names (`help`).
    Command,
}

/// One command's definition.
pub struct Spec {
    /// The words that invoke it: `whatis`, `show functions`.
    pub name: &'static str,
    /// Other spellings, each a complete name (`exit` for `quit`).
    pub aliases: &'static [&'static str],
    /// The arguments after the name, in usage notation: `[PATTERN] [in MODULE]`.
    pub usage: &'static str,
    pub complete: Complete,
    /// One line, no final period.
    pub summary: &'static str,
    /// Paragraphs of plain text, for `help CMD` and the man page.
    pub help: &'static str,
    /// (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
    pub run: fn(&mut Context, &mut Args) -> Result<Output>,
}

impl Spec {
    /// `show functions [PATTERN] [in MODULE]`.
    pub fn synopsis(&self) -> String {
        if self.usage.is_empty() {
            self.name.to_owned()
        } else {
            format!("{} {}", self.name, self.usage)
        }
    }

    /// The name and aliases, each split into words.
    fn spellings(&self) -> impl Iterator<Item = Vec<&'static str>> + '_ {
        std::iter::once(self.name)
            .chain(self.aliases.iter().copied())
            .map(|n| n.split(' ').collect())
    }
}

/// Every command, in the order `help` lists them.
pub static COMMANDS: &[Spec] = &[
    files::OPEN,
    symbols::SHOW_FUNCTIONS,
    files::SHOW_MODULES,
    files::SHOW_LIBRARIES,
    symbols::SHOW_VARIABLES,
    symbols::FIND_FUNCTION,
    symbols::FIND_VARIABLE,
    whatis::WHATIS,
    disas::DISAS,
    loops::LOOPS,
    cfg::CFG,
    calls::CALLERS,
    calls::CALLEES,
    stats::STATS,
    instrument::DECLARE,
    instrument::AT,
    instrument::SHOW_INSTRUMENTATION,
    instrument::DELETE,
    instrument::SHOW_POINTS,
    instrument::SAVE,
    measure::COUNT,
    measure::TIME,
    measure::PROFILE,
    measure::REPORT,
    coverage::COVERAGE,
    watch::WATCH,
    consult::CONSULT,
    process::START,
    process::RUN,
    process::ATTACH,
    process::DETACH,
    process::KILL,
    process::HALT,
    process::CONTINUE,
    process::WAIT,
    process::STATUS,
    process::SHOW_THREADS,
    process::BREAK,
    process::LOAD_LIBRARY,
    process::PRINT,
    examine::EXAMINE,
    examine::SHOW_REGISTERS,
    examine::SHOW_LOCALS,
    process::EXECUTE,
    process::WHERE,
    process::UP,
    process::DOWN,
    misc::SOURCE,
    misc::ECHO,
    misc::SLEEP,
    misc::SET,
    misc::HELP,
    misc::QUIT,
];

/// The command a sequence of words invokes, and how many words its name took.
pub fn lookup(words: &[&str]) -> Option<(&'static Spec, usize)> {
    let mut best: Option<(&'static Spec, usize)> = None;
    for spec in COMMANDS {
        for spelling in spec.spellings() {
            let n = spelling.len();
            if words.len() >= n
                && spelling.iter().zip(words).all(|(a, b)| a == b)
                && best.is_none_or(|(_, m)| n > m)
            {
                best = Some((spec, n));
            }
        }
    }
    best
}

/// The command named exactly `name` (or by an alias), e.g. for `help show functions`.
pub fn find(name: &str) -> Option<&'static Spec> {
    let words: Vec<&str> = name.split_whitespace().collect();
    lookup(&words)
        .filter(|(_, n)| *n == words.len())
        .map(|(s, _)| s)
}

/// The first words of every command: `open`, `show`, `find`, ...
pub fn first_words() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = COMMANDS
        .iter()
        .flat_map(|s| s.spellings())
        .filter_map(|w| w.first().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The second words of commands starting with `first` (`show` → `functions`, `modules`, ...).
pub fn second_words(first: &str) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = COMMANDS
        .iter()
        .flat_map(|s| s.spellings())
        .filter(|w| w.len() > 1 && w[0] == first)
        .map(|w| w[1])
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The error for words that name no command, with a suggestion when one is close.
pub fn unknown(words: &[&str]) -> anyhow::Error {
    let first = words.first().copied().unwrap_or("");
    let subs = second_words(first);
    if !subs.is_empty() {
        let Some(second) = words.get(1) else {
            return anyhow!("`{first}` needs one of: {}", subs.join(", "));
        };
        let typed = format!("{first} {second}");
        return match closest(second, subs.iter().copied()) {
            Some(s) => anyhow!("unknown command `{typed}`; did you mean `{first} {s}`?"),
            None => anyhow!(
                "unknown command `{typed}`; `{first}` takes one of: {}",
                subs.join(", ")
            ),
        };
    }
    match closest(first, first_words().into_iter()) {
        Some(s) => anyhow!("unknown command `{first}`; did you mean `{s}`?"),
        None => anyhow!("unknown command `{first}`; `help` lists the commands"),
    }
}

/// The candidate most like `typed`, if any is like it enough to be a plausible typo (the
/// engine's one rule: a few edits, never a one-letter alias for a longer word).
pub fn closest<'a>(typed: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    engine::suggest::closest(typed, candidates)
}

/// gdb's `x/8xg ADDR` and `print/x EXPR`: the format glued to the command's name becomes
/// a word of its own, `x /8xg ADDR`.
pub fn glued_format(cmd: &script::Command) -> script::Command {
    let mut cmd = cmd.clone();
    if let Some(first) = cmd.words.first().filter(|w| !w.quoted) {
        if let Some((name, format)) = first.text.split_once('/') {
            if name == examine::EXAMINE.name || process::PRINT.spellings().any(|w| w == [name]) {
                let slash = format!("/{format}");
                let word = |text: &str| script::Word {
                    text: text.to_owned(),
                    quoted: false,
                    raw: text.to_owned(),
                };
                cmd.words.splice(0..1, [word(name), word(&slash)]);
            }
        }
    }
    cmd
}

/// Runs one parsed command.
pub fn run(ctx: &mut Context, cmd: &script::Command) -> Result<Output> {
    let cmd = &glued_format(cmd);
    // Only unquoted words can name a command: `'show' functions` is not `show functions`.
    let names: Vec<&str> = cmd
        .words
        .iter()
        .take_while(|w| !w.quoted)
        .map(|w| w.text.as_str())
        .collect();
    let Some((spec, n)) = lookup(&names) else {
        let all: Vec<&str> = cmd.words.iter().map(|w| w.text.as_str()).collect();
        return Err(unknown(&all));
    };
    let mut args = Args::new(spec, cmd.words[n..].to_vec(), cmd.block.clone());
    (spec.run)(ctx, &mut args)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
