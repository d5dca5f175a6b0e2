//! Diagnostics: what went wrong in a snippet, where, and what to do about it, rendered the way
//! rustc does — the source line, a caret under the span, and a hint.

use std::fmt::Write as _;

use super::ast::Span;

/// How bad a diagnostic is. Only errors stop compilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Stops compilation.
    Error,
    /// Reported; compilation goes on.
    Warning,
}

/// One problem in a snippet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Whether it stops compilation.
    pub severity: Severity,
    /// The byte range of the source at fault, where the caret goes.
    pub span: Span,
    /// What is wrong, naming the thing at fault.
    pub message: String,
    /// What to do about it, shown beside the caret (e.g. "did you mean `count`?").
    pub hint: Option<String>,
}

impl Diagnostic {
    /// An error at `span`, without a hint.
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            span,
            message: message.into(),
            hint: None,
        }
    }

    /// A warning at `span`, without a hint.
    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(span, message)
        }
    }

    /// The same diagnostic with `hint` shown beside the caret.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    /// True when it stops compilation.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The 1-based line and column (in characters) where the span starts.
    pub fn line_col(&self, source: &str) -> (usize, usize) {
        let start = self.span.start.min(source.len());
        let before = &source[..floor_char_boundary(source, start)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    /// Renders the diagnostic against the source it came from:
    ///
    /// ```text
    /// error: unknown name `cuont`
    ///   |
    /// 1 | cuont++;
    ///   | ^^^^^ did you mean `count`?
    /// ```
    pub fn render(&self, source: &str) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{kind}: {}\n", self.message);
        let (line_no, col) = self.line_col(source);
        let line = source.lines().nth(line_no - 1).unwrap_or("");
        let gutter = line_no.to_string().len();
        let start = floor_char_boundary(source, self.span.start.min(source.len()));
        let end = floor_char_boundary(source, self.span.end.min(source.len())).max(start);
        // A span that runs past its first line is underlined to the end of that line.
        let width = source[start..end]
            .split('\n')
            .next()
            .map_or(0, |s| s.chars().count())
            .max(1);
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line_no} | {line}");
        let _ = write!(
            out,
            "{:gutter$} | {}{}",
            "",
            " ".repeat(col - 1),
            "^".repeat(width)
        );
        if let Some(hint) = &self.hint {
            let _ = write!(out, " {hint}");
        }
        out.push('\n');
        out
    }
}

/// Renders every diagnostic, in order.
pub fn render_all(diags: &[Diagnostic], source: &str) -> String {
    diags.iter().map(|d| d.render(source)).collect()
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The known name closest to `name`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    crate::suggest::closest(name, known).map(|k| format!("did you mean `{k}`?"))
}
