//! The script tokenizer: splits the text of a script, a `-c` argument or a prompt line into
//! commands and their words.
//!
//! Commands end at a newline or `;`. `#` at the start of a word begins a comment that runs to the
//! end of the line. `'...'` and `"..."` group words (so `'parse_*'` reaches the command as one
//! word, unexpanded); a `(...)` group is one word even with spaces inside (`if (n > 3)`). A
//! `{ ... }` block may span lines and contain `;`; it belongs whole to the command it follows and
//! its text is handed over raw. The tokenizer works on `char`s with no recursion, so it cannot
//! panic or loop, whatever the input (a fuzz target checks that).

use std::fmt;

/// One word of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The word with its quotes removed.
    pub text: String,
    /// True when any part of the word was quoted (`'*'` is a pattern, not a keyword).
    pub quoted: bool,
    /// The word as written, quotes and escapes kept: `print` hands `"a\n"` and `'a'` to
    /// the snippet language, whose literals they are.
    pub raw: String,
}

/// A `{ ... }` block: the raw text between the braces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub text: String,
    /// The 1-based line the `{` is on.
    pub line: usize,
}

/// One command: its words and the block that follows them, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub words: Vec<Word>,
    pub block: Option<Block>,
    /// The 1-based line the command starts on.
    pub line: usize,
}

impl Command {
    /// The words as plain strings.
    pub fn texts(&self) -> Vec<&str> {
        self.words.iter().map(|w| w.text.as_str()).collect()
    }

    /// The command as it could be typed again: words (quoted where they were quoted or hold
    /// spaces) and the block. `--json` tags each answer with it.
    pub fn display(&self) -> String {
        let mut out: Vec<String> = self
            .words
            .iter()
            .map(|w| {
                if w.quoted || w.text.is_empty() || w.text.contains(char::is_whitespace) {
                    format!("'{}'", w.text.replace('\'', "'\\''"))
                } else {
                    w.text.clone()
                }
            })
            .collect();
        if let Some(b) = &self.block {
            out.push(format!("{{ {} }}", b.text.trim()));
        }
        out.join(" ")
    }
}

/// Why a text does not split into commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// A `'` or `"` with no closing partner.
    UnterminatedQuote { quote: char, line: usize },
    /// A `{` with no closing `}`.
    UnclosedBlock { line: usize },
    /// A `(` with no closing `)` on its line.
    UnclosedParen { line: usize },
    /// A `}` with no `{` before it.
    UnexpectedClose { line: usize },
    /// A block with no command before it.
    BlockWithoutCommand { line: usize },
    /// Words after a command's block, before the command ends.
    TextAfterBlock { line: usize },
}

impl ParseError {
    /// The 1-based line at fault.
    pub fn line(&self) -> usize {
        match *self {
            ParseError::UnterminatedQuote { line, .. }
            | ParseError::UnclosedBlock { line }
            | ParseError::UnclosedParen { line }
            | ParseError::UnexpectedClose { line }
            | ParseError::BlockWithoutCommand { line }
            | ParseError::TextAfterBlock { line } => line,
        }
    }

    /// True when more input could complete the text (the REPL then asks for another line).
    pub fn is_incomplete(&self) -> bool {
        matches!(
            self,
            ParseError::UnclosedBlock { .. } | ParseError::UnterminatedQuote { .. }
        )
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::UnterminatedQuote { quote, line } => {
                write!(f, "line {line}: unterminated {quote} quote")
            }
            ParseError::UnclosedBlock { line } => {
                write!(f, "line {line}: `{{` is never closed by `}}`")
            }
            ParseError::UnclosedParen { line } => {
                write!(f, "line {line}: `(` is never closed by `)`")
            }
            ParseError::UnexpectedClose { line } => {
                write!(f, "line {line}: `}}` without a `{{` before it")
            }
            ParseError::BlockWithoutCommand { line } => {
                write!(f, "line {line}: a `{{ ... }}` block must follow a command")
            }
            ParseError::TextAfterBlock { line } => write!(
                f,
                "line {line}: text after a `}}`; end the command with `;` or a newline first"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// Splits `text` into commands. Empty commands (blank lines, comments, `;;`) are dropped.
pub fn split(text: &str) -> Result<Vec<Command>, ParseError> {
    Splitter::new(text).run()
}

/// True when `text` is unfinished (an open block or quote), so a prompt should read on.
pub fn needs_more(text: &str) -> bool {
    matches!(split(text), Err(e) if e.is_incomplete())
}

/// The text of a quoted string whose raw inside (between the quotes) is `inner`: in
/// `"..."`, `\"` and `\\` stand for `"` and `\`; `'...'` is literal.
fn unquote(quote: char, inner: &str) -> String {
    if quote != '"' {
        return inner.to_owned();
    }
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

struct Splitter<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    commands: Vec<Command>,
    words: Vec<Word>,
    block: Option<Block>,
    start_line: usize,
}

impl<'a> Splitter<'a> {
    fn new(text: &'a str) -> Self {
        Splitter {
            chars: text.chars().peekable(),
            line: 1,
            commands: Vec::new(),
            words: Vec::new(),
            block: None,
            start_line: 1,
        }
    }

    fn run(mut self) -> Result<Vec<Command>, ParseError> {
        while let Some(c) = self.chars.next() {
            match c {
                '\n' => {
                    self.end_command();
                    self.line += 1;
                }
                ';' => self.end_command(),
                c if c.is_whitespace() => {}
                '#' => self.skip_comment(),
                '{' => self.read_block()?,
                '}' => return Err(ParseError::UnexpectedClose { line: self.line }),
                c => {
                    if self.block.is_some() {
                        return Err(ParseError::TextAfterBlock { line: self.line });
                    }
                    let word = self.read_word(c)?;
                    if self.words.is_empty() {
                        self.start_line = self.line;
                    }
                    self.words.push(word);
                }
            }
        }
        self.end_command();
        Ok(self.commands)
    }

    fn end_command(&mut self) {
        if !self.words.is_empty() {
            self.commands.push(Command {
                words: std::mem::take(&mut self.words),
                block: self.block.take(),
                line: self.start_line,
            });
        }
        self.block = None;
    }

    fn skip_comment(&mut self) {
        while let Some(&c) = self.chars.peek() {
            if c == '\n' {
                break;
            }
            self.chars.next();
        }
    }

    /// Reads one word starting with `first`, up to unquoted whitespace, `;`, `{` or `}`.
    fn read_word(&mut self, first: char) -> Result<Word, ParseError> {
        let mut text = String::new();
        let mut raw = String::new();
        let mut quoted = false;
        let mut next = Some(first);
        while let Some(c) = next {
            match c {
                '\'' | '"' => {
                    quoted = true;
                    let line = self.line;
                    raw.push(c);
                    let inner = if c == '"' {
                        self.read_raw_quoted(c)
                    } else {
                        self.read_literal_quoted(c)
                    }
                    .map_err(|_| ParseError::UnterminatedQuote { quote: c, line })?;
                    text.push_str(&unquote(c, &inner[..inner.len() - c.len_utf8()]));
                    raw.push_str(&inner);
                }
                '(' => {
                    let start = text.len();
                    self.read_parens(&mut text)?;
                    raw.push_str(&text[start..]);
                }
                c => {
                    text.push(c);
                    raw.push(c);
                }
            }
            next = match self.chars.peek() {
                Some(&c) if c.is_whitespace() || matches!(c, ';' | '{' | '}') => None,
                Some(_) => self.chars.next(),
                None => None,
            };
        }
        Ok(Word { text, quoted, raw })
    }

    /// Reads the rest of a `'...'` string, which has no escapes, closing quote included.
    fn read_literal_quoted(&mut self, quote: char) -> Result<String, ()> {
        let mut s = String::new();
        loop {
            let c = self.chars.next().ok_or(())?;
            if c == '\n' {
                self.line += 1;
            }
            s.push(c);
            if c == quote {
                return Ok(s);
            }
        }
    }

    /// Reads a parenthesised group, parentheses included, into `out`; it may hold spaces and
    /// quotes but not a newline.
    fn read_parens(&mut self, out: &mut String) -> Result<(), ParseError> {
        let line = self.line;
        let mut depth = 1usize;
        out.push('(');
        while depth > 0 {
            let Some(c) = self.chars.next() else {
                return Err(ParseError::UnclosedParen { line });
            };
            match c {
                '\n' => return Err(ParseError::UnclosedParen { line }),
                '(' => depth += 1,
                ')' => depth -= 1,
                '\'' | '"' => {
                    out.push(c);
                    self.read_raw_quoted(c)
                        .map(|s| out.push_str(&s))
                        .map_err(|_| ParseError::UnterminatedQuote { quote: c, line })?;
                    continue;
                }
                _ => {}
            }
            out.push(c);
        }
        Ok(())
    }

    /// Reads a quoted string inside a block or parentheses, keeping its quotes and escapes as
    /// written (the block's own language interprets them).
    fn read_raw_quoted(&mut self, quote: char) -> Result<String, ()> {
        let mut s = String::new();
        loop {
            let c = self.chars.next().ok_or(())?;
            s.push(c);
            match c {
                '\n' => self.line += 1,
                '\\' => {
                    let e = self.chars.next().ok_or(())?;
                    if e == '\n' {
                        self.line += 1;
                    }
                    s.push(e);
                }
                c if c == quote => return Ok(s),
                _ => {}
            }
        }
    }

    /// Reads a `{ ... }` block (the `{` already consumed), nested braces and quotes included.
    fn read_block(&mut self) -> Result<(), ParseError> {
        let line = self.line;
        if self.words.is_empty() {
            return Err(ParseError::BlockWithoutCommand { line });
        }
        if self.block.is_some() {
            return Err(ParseError::TextAfterBlock { line });
        }
        let mut depth = 1usize;
        let mut text = String::new();
        loop {
            let Some(c) = self.chars.next() else {
                return Err(ParseError::UnclosedBlock { line });
            };
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                '\n' => self.line += 1,
                '\'' | '"' => {
                    text.push(c);
                    let quote_line = self.line;
                    let rest =
                        self.read_raw_quoted(c)
                            .map_err(|_| ParseError::UnterminatedQuote {
                                quote: c,
                                line: quote_line,
                            })?;
                    text.push_str(&rest);
                    continue;
                }
                _ => {}
            }
            text.push(c);
        }
        self.block = Some(Block {
            text: text.trim().to_owned(),
            line,
        });
        Ok(())
    }
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
