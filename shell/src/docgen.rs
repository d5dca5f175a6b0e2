//! Documentation generated from the one command table and the clap definition of the command
//! line: `help` text, the man page `man/gsh.1`, and the bash, zsh and fish completions under
//! `completions/`. A test (`docgen_tests.rs`) fails when a checked-in file is stale and rewrites
//! them all when `GSH_BLESS=1` is set.

use clap::builder::ValueHint;
use clap::{Arg, CommandFactory};

use crate::cli::Cli;
use crate::commands::{Spec, COMMANDS};

/// The line every generated file carries, so nobody edits one by hand.
const GENERATED: &str = "generated from shell/src/docgen.rs; regenerate with \
`GSH_BLESS=1 cargo test -p gsh docgen`, do not edit";

/// Width `help` text is wrapped to.
const WIDTH: usize = 78;

/// What `help` prints: every command with its summary.
pub fn help_overview() -> String {
    let mut s = String::from("Commands (`help COMMAND` for details):\n");
    s.push_str(&help_list(&COMMANDS.iter().collect::<Vec<_>>()));
    s.push_str(
        "\nCommands are separated by newlines or `;`; `#` starts a comment. Quote patterns so\n\
         they reach the command whole: show functions 'parse_*'. A function may be named\n\
         NAME, MODULE!NAME (libc.so.6!malloc) or by address (0x401136). `help snippets`\n\
         describes the C subset that `at` and `execute` take.\n",
    );
    s
}

/// A synopsis without its `[--option]` parts, short enough for a list.
fn short_synopsis(spec: &Spec) -> String {
    let syn = spec.synopsis();
    match syn.find(" [--") {
        Some(i) => format!("{} ...", &syn[..i]),
        None => syn,
    }
}

/// One line per command: short synopsis, then summary.
pub fn help_list(specs: &[&Spec]) -> String {
    let width = specs
        .iter()
        .map(|s| short_synopsis(s).len())
        .filter(|&n| n <= 40)
        .max()
        .unwrap_or(0);
    let mut s = String::new();
    for spec in specs {
        let syn = short_synopsis(spec);
        if syn.len() > width {
            s.push_str(&format!("  {syn}\n  {:width$}  {}\n", "", spec.summary));
        } else {
            s.push_str(&format!("  {syn:width$}  {}\n", spec.summary));
        }
    }
    s
}

/// What `help CMD` prints.
pub fn help_command(spec: &Spec) -> String {
    let mut s = format!("{}\n  {}\n", spec.synopsis(), spec.summary);
    if !spec.aliases.is_empty() {
        s.push_str(&format!("  aliases: {}\n", spec.aliases.join(", ")));
    }
    s.push('\n');
    for line in wrap(spec.help, WIDTH - 2) {
        s.push_str(&format!("  {line}\n"));
    }
    if !spec.examples.is_empty() {
        s.push_str("\nExamples:\n");
        let width = spec
            .examples
            .iter()
            .map(|(c, _)| c.len())
            .max()
            .unwrap_or(0);
        for (cmd, what) in spec.examples {
            let line = format!("  {cmd:width$}  {what}");
            s.push_str(line.trim_end());
            s.push('\n');
        }
    }
    s
}

/// Greedy word wrap.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The command-line options (not positionals), `--help` and `--version` included.
fn options() -> Vec<Arg> {
    let mut cmd = Cli::command();
    cmd.build();
    cmd.get_arguments()
        .filter(|a| !a.is_positional())
        .cloned()
        .collect()
}

fn takes_value(a: &Arg) -> bool {
    a.get_num_args().is_some_and(|n| n.takes_values())
}

fn help_of(a: &Arg) -> String {
    a.get_help().map(|h| h.to_string()).unwrap_or_default()
}

fn value_name(a: &Arg) -> String {
    a.get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| "VALUE".into())
}

/// `-b`, `--json`, `-h, --help`.
fn flag_spellings(a: &Arg) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(c) = a.get_short() {
        v.push(format!("-{c}"));
    }
    if let Some(l) = a.get_long() {
        v.push(format!("--{l}"));
    }
    v
}

/// How an option's value completes.
enum ValueKind {
    File,
    Pid,
    Free,
}

fn value_kind(a: &Arg) -> ValueKind {
    if a.get_value_hint() == ValueHint::FilePath {
        ValueKind::File
    } else if value_name(a) == "PID" {
        ValueKind::Pid
    } else {
        ValueKind::Free
    }
}

/// Escapes text for roff: backslashes, hyphens, and a leading `.` or `'`.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// What `--json` prints, for the man page.
pub const JSON_STREAM: &str = "With --json, standard output carries only a stream of JSON \
objects, one per line, in the order commands run. Each command's answer is \
{\"command\": C, \"result\": R}, where C is the command as typed (words re-quoted, its { ... } \
block included) and R its output: a table as {\"title\", \"rows\": [...], \"note\"} with one \
object per row keyed by the lower-cased column names, a record as one object, text as \
{\"text\": ...}, nothing as {}. Addresses are \"0x...\" strings, sizes and counts numbers. A \
command that prints several times (watch) gives one line per print, each tagged with it. A \
failing command gives {\"command\": C, \"error\": MESSAGE} (also printed on standard error) \
and ends a batch with status 1; an error outside any command (a FILE that cannot be opened) \
has \"command\": null. A program gsh starts writes its standard output to gsh's standard error \
(unless start > FILE sends it elsewhere), so it never mixes with the stream; gsh's notes \
(libraries loaded, threads started, instrumentation waiting for main) are on standard error \
too.";

/// A `--json` transcript, for the man page.
const JSON_EXAMPLE: &str = r#"$ gsh --json -c 'count mix; run; report; bogus' ./a.out 2>/dev/null
{"command":"count mix","result":{"note":"inserted when the process reaches main (`start` or `run`); `report` shows the values","rows":[{"function":"mix","instrumentation":1,"measure":"count","points":null}]}}
{"command":"run","result":{"text":"exited with code 0\n"}}
{"command":"report","result":{"paths":[],"title":"process 4242 has exited: its final values","values":[{"calls":1,"deleted":false,"function":"mix","id":1,"metric":"count"}]}}
{"command":"bogus","error":"line 1: unknown command `bogus`; `help` lists the commands"}"#;

/// The man page, `man/gsh.1`.
pub fn man_page() -> String {
    let mut m = String::new();
    m.push_str(&format!(".\\\" {GENERATED}\n"));
    m.push_str(".TH GSH 1 \"\" \"gsh\" \"User Commands\"\n");
    m.push_str(
        ".SH NAME\ngsh \\- an interactive binary\\-instrumentation shell for x86\\-64 Linux\n",
    );
    m.push_str(".SH SYNOPSIS\n");
    for syn in [
        "[\\fIFILE\\fR]",
        "\\fB\\-b\\fR \\fISCRIPT\\fR [\\fIFILE\\fR [\\fIARGS\\fR...]]",
        "\\fB\\-c\\fR \\fICOMMANDS\\fR [\\fIFILE\\fR [\\fIARGS\\fR...]]",
        "\\fB\\-p\\fR \\fIPID\\fR",
    ] {
        m.push_str(&format!(".B gsh\n{syn}\n.br\n"));
    }
    m.push_str(".SH DESCRIPTION\n");
    m.push_str(&roff(
        "gsh opens a 64-bit x86-64 ELF executable or shared library and answers questions \
about it: its functions (found even in stripped binaries, from .eh_frame, PLT relocations and \
call targets), variables, libraries and code. Without -b or -c it reads commands at a prompt \
with history and tab completion. Tables go to standard output, diagnostics to standard error; \
with --json standard output is a JSON stream instead (see JSON OUTPUT).",
    ));
    m.push('\n');
    m.push_str(".SH OPTIONS\n");
    for a in options() {
        let mut head: Vec<String> = flag_spellings(&a)
            .iter()
            .map(|f| format!("\\fB{}\\fR", roff(f)))
            .collect();
        if takes_value(&a) {
            if let Some(first) = head.last_mut() {
                first.push_str(&format!(" \\fI{}\\fR", value_name(&a)));
            }
        }
        m.push_str(&format!(
            ".TP\n{}\n{}\n",
            head.join(", "),
            roff(&help_of(&a))
        ));
    }
    m.push_str(".SH COMMANDS\n");
    m.push_str(&roff(
        "Commands are separated by newlines or ;. A # at the start of a word begins a comment. \
'...' and \"...\" group words, so quote glob patterns. A { ... } block may span lines and \
belongs whole to the command before it. A function may be named NAME, MODULE!NAME or 0xADDR.",
    ));
    m.push('\n');
    for spec in COMMANDS {
        m.push_str(&format!(
            ".TP\n\\fB{}\\fR {}\n{}.\n",
            roff(spec.name),
            roff(spec.usage),
            roff(spec.summary)
        ));
        if !spec.aliases.is_empty() {
            m.push_str(&format!("Aliases: {}.\n", roff(&spec.aliases.join(", "))));
        }
        m.push_str(&format!(".IP\n{}\n", roff(spec.help)));
        if !spec.examples.is_empty() {
            m.push_str(".IP\n.nf\n");
            for (cmd, _) in spec.examples {
                m.push_str(&format!("{}\n", roff(cmd)));
            }
            m.push_str(".fi\n");
        }
    }
    m.push_str(".SH SNIPPETS\n.nf\n");
    for line in engine::snippet::GRAMMAR.lines() {
        m.push_str(&roff(line));
        m.push('\n');
    }
    m.push_str(".fi\n");
    m.push_str(".SH JSON OUTPUT\n");
    m.push_str(&roff(JSON_STREAM));
    m.push('\n');
    m.push_str(".IP\n.nf\n");
    for line in JSON_EXAMPLE.lines() {
        m.push_str(&roff(line));
        m.push('\n');
    }
    m.push_str(".fi\n");
    m.push_str(".SH EXIT STATUS\n");
    m.push_str(&roff(
        "With -b or -c: 0 when every command succeeded; otherwise the first failing command's \
error is printed on standard error as one line starting with gsh: and the status is 1. A FILE \
that cannot be opened is such an error too.",
    ));
    m.push('\n');
    m.push_str(".SH ENVIRONMENT\n");
    for (var, what) in [
        ("NO_COLOR", "When set and not empty, output is never coloured."),
        (
            "GSH_DEBUG_DIRS",
            "Colon-separated directories searched for separate debug files (default: /usr/lib/debug).",
        ),
    ] {
        m.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(var), roff(what)));
    }
    m.push_str(".SH FILES\n.TP\n");
    m.push_str(&roff("$XDG_STATE_HOME/gsh/history"));
    m.push_str(&format!(
        "\n{}\n",
        roff("Command history of the interactive prompt (~/.local/state/gsh/history by default).")
    ));
    m.push_str(".SH EXAMPLES\n.nf\n");
    m.push_str(&roff("gsh -b scripts/explore-ls.gsh /bin/ls"));
    m.push('\n');
    m.push_str(&roff(
        "gsh -c \"show functions 'mall*' in libc.so.6\" /bin/ls",
    ));
    m.push('\n');
    m.push_str(&roff(
        "gsh --json -c 'whatis main' ./a.out | python3 -m json.tool",
    ));
    m.push_str("\n.fi\n");
    m
}

/// `completions/gsh.bash`.
pub fn bash() -> String {
    let opts = options();
    let mut s = format!("# bash completion for gsh; {GENERATED}.\n");
    s.push_str("_gsh() {\n    local cur prev\n");
    s.push_str("    cur=\"${COMP_WORDS[COMP_CWORD]}\"\n    prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n");
    s.push_str("    case \"$prev\" in\n");
    for a in opts.iter().filter(|a| takes_value(a)) {
        let action = match value_kind(a) {
            ValueKind::File => "COMPREPLY=($(compgen -f -- \"$cur\")); return ;;",
            ValueKind::Pid => {
                "COMPREPLY=($(compgen -W \"$(ps -e -o pid= 2>/dev/null)\" -- \"$cur\")); return ;;"
            }
            ValueKind::Free => "return ;;",
        };
        s.push_str(&format!(
            "        {}) {action}\n",
            flag_spellings(a).join("|")
        ));
    }
    s.push_str("    esac\n");
    let all: Vec<String> = opts.iter().flat_map(flag_spellings).collect();
    s.push_str("    if [[ \"$cur\" == -* ]]; then\n");
    s.push_str(&format!(
        "        COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))\n",
        all.join(" ")
    ));
    s.push_str("    else\n        COMPREPLY=($(compgen -f -- \"$cur\"))\n    fi\n}\n");
    s.push_str("complete -o filenames -o bashdefault -F _gsh gsh\n");
    s
}

fn zsh_escape(s: &str) -> String {
    s.replace('\'', "'\\''")
        .replace('[', "\\[")
        .replace(']', "\\]")
        .replace(':', "\\:")
}

/// `completions/_gsh`.
pub fn zsh() -> String {
    let mut s = format!("#compdef gsh\n# zsh completion for gsh; {GENERATED}.\n\n");
    s.push_str("_arguments -s -S \\\n");
    for a in options() {
        let help = zsh_escape(&help_of(&a));
        let flags = flag_spellings(&a);
        let exclusive = matches!(a.get_id().as_str(), "help" | "version");
        let names = if flags.len() == 1 {
            flags[0].clone()
        } else {
            format!("{{{}}}", flags.join(","))
        };
        let prefix = if exclusive { "'(- *)'" } else { "" };
        let value = if takes_value(&a) {
            let action = match value_kind(&a) {
                ValueKind::File => "_files",
                ValueKind::Pid => "_pids",
                ValueKind::Free => " ",
            };
            format!(":{}:{action}", value_name(&a))
        } else {
            String::new()
        };
        s.push_str(&format!("  {prefix}{names}'[{help}]{value}' \\\n"));
    }
    s.push_str("  '1:FILE:_files' \\\n  '*::ARGS:_files'\n");
    s
}

/// `completions/gsh.fish`.
pub fn fish() -> String {
    let mut s = format!("# fish completion for gsh; {GENERATED}.\n");
    for a in options() {
        let mut line = String::from("complete -c gsh");
        if let Some(c) = a.get_short() {
            line.push_str(&format!(" -s {c}"));
        }
        if let Some(l) = a.get_long() {
            line.push_str(&format!(" -l {l}"));
        }
        if takes_value(&a) {
            line.push_str(match value_kind(&a) {
                ValueKind::File => " -r -F",
                ValueKind::Pid => " -x -a '(__fish_complete_pids)'",
                ValueKind::Free => " -x",
            });
        }
        line.push_str(&format!(
            " -d '{}'",
            help_of(&a).replace('\\', "\\\\").replace('\'', "\\'")
        ));
        s.push_str(&line);
        s.push('\n');
    }
    s
}

#[cfg(test)]
#[path = "docgen_tests.rs"]
mod tests;
