//! A command's arguments, taken apart the way each command asks: `--flag VALUE` options,
//! `in MODULE` keywords, then positionals. Every misuse names the command and its usage.

use anyhow::{anyhow, bail, Result};

use super::Spec;
use crate::script::{Block, Word};

/// The words after a command's name, consumed as the command reads them.
pub struct Args {
    spec: &'static Spec,
    words: Vec<Word>,
    pub block: Option<Block>,
}

impl Args {
    pub fn new(spec: &'static Spec, words: Vec<Word>, block: Option<Block>) -> Args {
        Args { spec, words, block }
    }

    /// An error about this command's arguments, with its usage appended.
    pub fn usage_error(&self, msg: impl std::fmt::Display) -> anyhow::Error {
        anyhow!("{msg}; usage: {}", self.spec.synopsis())
    }

    /// Removes `--name VALUE` (or `--name=VALUE`) and returns the value.
    pub fn option(&mut self, name: &str) -> Result<Option<String>> {
        let prefix = format!("{name}=");
        for i in 0..self.words.len() {
            let w = &self.words[i];
            if w.quoted {
                continue;
            }
            if let Some(v) = w.text.strip_prefix(&prefix) {
                let v = v.to_owned();
                self.words.remove(i);
                return Ok(Some(v));
            }
            if w.text == name {
                if i + 1 >= self.words.len() {
                    return Err(self.usage_error(format_args!("`{name}` needs a value")));
                }
                let v = self.words.remove(i + 1).text;
                self.words.remove(i);
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Removes an unquoted `--name` flag and says whether it was there.
    pub fn flag(&mut self, name: &str) -> bool {
        match self.words.iter().position(|w| !w.quoted && w.text == name) {
            Some(i) => {
                self.words.remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes an unquoted `KEYWORD VALUE` pair (`in libc.so.6`) and returns the value.
    pub fn keyword(&mut self, keyword: &str) -> Result<Option<String>> {
        let Some(i) = self
            .words
            .iter()
            .position(|w| !w.quoted && w.text == keyword)
        else {
            return Ok(None);
        };
        if i + 1 >= self.words.len() {
            return Err(self.usage_error(format_args!("`{keyword}` needs a name after it")));
        }
        let v = self.words.remove(i + 1).text;
        self.words.remove(i);
        Ok(Some(v))
    }

    /// The remaining words, after checking there are between `min` and `max` of them and that
    /// none is an option this command does not know.
    pub fn positionals(&mut self, min: usize, max: usize) -> Result<Vec<String>> {
        if let Some(w) = self
            .words
            .iter()
            .find(|w| !w.quoted && w.text.starts_with("--"))
        {
            return Err(self.usage_error(format_args!("unknown option `{}`", w.text)));
        }
        let n = self.words.len();
        if n < min {
            return Err(self.usage_error("missing argument"));
        }
        if n > max {
            let extra = &self.words[max].text;
            return Err(self.usage_error(format_args!("unexpected argument `{extra}`")));
        }
        if self.block.is_some() {
            return Err(self.usage_error("this command takes no `{ ... }` block"));
        }
        Ok(std::mem::take(&mut self.words)
            .into_iter()
            .map(|w| w.text)
            .collect())
    }

    /// The words after the first unquoted `word`, taken out as the arguments of `spec` (`watch
    /// consult --for 20`: the words of the command `watch` runs); `None` without it.
    pub fn split_off(&mut self, word: &str, spec: &'static Spec) -> Option<Args> {
        let i = self
            .words
            .iter()
            .position(|w| !w.quoted && w.text == word)?;
        let rest = self.words.split_off(i + 1);
        self.words.pop();
        Some(Args::new(spec, rest, self.block.take()))
    }

    /// All remaining words, unchecked (`at`, `declare`: their own grammar reads them).
    pub fn rest(&mut self) -> Vec<String> {
        std::mem::take(&mut self.words)
            .into_iter()
            .map(|w| w.text)
            .collect()
    }

    /// All remaining words, joined by single spaces (`echo`).
    /// The remaining words as written, quotes kept (for text in another language: `print`'s
    /// expression keeps its `"..."` and `'a'` literals).
    pub fn rest_raw(&mut self) -> String {
        std::mem::take(&mut self.words)
            .into_iter()
            .map(|w| w.raw)
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn rest_joined(&mut self) -> String {
        std::mem::take(&mut self.words)
            .into_iter()
            .map(|w| w.text)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Parses a count such as `--limit 20` or `disas f 10`.
pub fn parse_count(what: &str, s: &str) -> Result<usize> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => usize::from_str_radix(hex, 16),
        None => s.parse::<usize>(),
    };
    match parsed {
        Ok(n) => Ok(n),
        Err(_) => bail!("{what} must be a whole number, not `{s}`"),
    }
}
