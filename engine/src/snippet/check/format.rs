//! printf-style format strings checked against their arguments, as GCC's `-Wformat` does, for
//! calls to functions whose prototype carries a format (see [`super::super::libc`]). A literal
//! format's conversions are matched with the arguments after it, after C's default argument
//! promotions: a conversion with no argument, or an argument of a kind the conversion cannot
//! read (`%s` given an integer, `%f` an integer, `%ld` an `int` whose upper half is undefined),
//! is an error, since the call would crash or print garbage; a mismatch that still prints the
//! right thing on x86-64 (`%d` given a `long`: its low half) and unused arguments are warnings.

use super::super::ast::{self, ExprKind as A, Span};
use super::super::diag::Diagnostic;
use super::super::ir::{Expr, ExprKind as E};
use super::super::types::{IntKind, Type};
use super::Checker;

/// What one conversion reads from the arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reads {
    /// An integer of this many bytes (`%d` 4, `%ld` 8; `%hd` and `%c` read an `int`).
    Int(u32),
    Double,
    /// `%Lf`: snippets have no `long double`.
    LongDouble,
    /// `%s`: a `char *`.
    Str,
    /// `%p`: any pointer.
    Ptr,
    /// `%n`: a pointer the count is written through.
    WritePtr,
}

/// One argument-reading part of a format: a `*` width or precision, or the conversion itself.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Part {
    /// Byte range of the whole conversion (`%-08.3ld`) in the format.
    at: (usize, usize),
    reads: Reads,
}

/// A format that cannot be right, at a byte range of the format.
#[derive(Debug, PartialEq, Eq)]
struct BadFormat {
    at: (usize, usize),
    message: String,
}

/// The parts of `format` that read arguments, in order; `Ok(None)` when it uses positional
/// arguments (`%1$d`), which are not checked.
fn parse(format: &[u8]) -> Result<Option<Vec<Part>>, BadFormat> {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < format.len() {
        if format[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let digits = |i: &mut usize| {
            while format.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
        };
        // `%1$d`: positional.
        let mut j = i;
        digits(&mut j);
        if j > i && format.get(j) == Some(&b'$') {
            return Ok(None);
        }
        while format.get(i).is_some_and(|c| b"-+ #0'I".contains(c)) {
            i += 1;
        }
        let mut stars = 0;
        if format.get(i) == Some(&b'*') {
            stars += 1;
            i += 1;
        } else {
            digits(&mut i);
        }
        if format.get(i) == Some(&b'.') {
            i += 1;
            if format.get(i) == Some(&b'*') {
                stars += 1;
                i += 1;
            } else {
                digits(&mut i);
            }
        }
        let len_start = i;
        while format.get(i).is_some_and(|c| b"hlLqjzZt".contains(c)) {
            i += 1;
        }
        let length = &format[len_start..i];
        let Some(&conv) = format.get(i) else {
            return Err(BadFormat {
                at: (start, i),
                message: "the format ends in the middle of a conversion".into(),
            });
        };
        i += 1;
        let at = (start, i);
        let long = matches!(length, b"l" | b"ll" | b"q" | b"j" | b"z" | b"Z" | b"t");
        let reads = match conv {
            b'%' if i - start == 2 => None,
            b'm' => None,
            b'd' | b'i' | b'o' | b'u' | b'x' | b'X' => Some(Reads::Int(if long { 8 } else { 4 })),
            b'c' => Some(Reads::Int(4)),
            b'e' | b'E' | b'f' | b'F' | b'g' | b'G' | b'a' | b'A' if length == b"L" => {
                Some(Reads::LongDouble)
            }
            b'e' | b'E' | b'f' | b'F' | b'g' | b'G' | b'a' | b'A' => Some(Reads::Double),
            b's' if length == b"l" => Some(Reads::Ptr),
            b's' => Some(Reads::Str),
            b'p' => Some(Reads::Ptr),
            b'n' => Some(Reads::WritePtr),
            other => {
                let shown = String::from_utf8_lossy(&format[start..i]);
                return Err(BadFormat {
                    at,
                    message: if other == b'%' {
                        format!("`{shown}` is not a conversion")
                    } else {
                        format!("unknown conversion `{shown}`")
                    },
                });
            }
        };
        for _ in 0..stars {
            parts.push(Part {
                at,
                reads: Reads::Int(4),
            });
        }
        if let Some(reads) = reads {
            parts.push(Part { at, reads });
        }
    }
    Ok(Some(parts))
}

/// How well an argument of type `ty` fits what a conversion reads.
enum Fit {
    Good,
    /// Prints something sensible on x86-64, but not what was probably meant.
    Doubtful(String),
    Wrong(String),
}

fn fit(reads: Reads, ty: &Type, conv: &str) -> Fit {
    let is_char = |t: &Type| {
        matches!(
            t,
            Type::Void | Type::Int(IntKind::Char) | Type::Int(IntKind::UChar)
        )
    };
    match (reads, ty) {
        (Reads::Int(n), Type::Int(k)) if k.size() < n => Fit::Wrong(format!(
            "`{conv}` reads a {n}-byte integer, but this is `{ty}`, whose upper half is undefined"
        )),
        (Reads::Int(n), Type::Int(k)) if k.size() > n => Fit::Doubtful(format!(
            "`{conv}` prints only the low {} bits of this `{ty}`",
            8 * n
        )),
        (Reads::Int(_), Type::Int(_)) => Fit::Good,
        (Reads::Int(8), Type::Ptr(_)) => {
            Fit::Doubtful(format!("`{conv}` prints this pointer as an integer"))
        }
        (Reads::Int(_), _) => Fit::Wrong(format!("`{conv}` needs an integer, not `{ty}`")),
        (Reads::Double, Type::Double) => Fit::Good,
        (Reads::Double, _) => Fit::Wrong(format!("`{conv}` needs a `double`, not `{ty}`")),
        (Reads::LongDouble, _) => Fit::Wrong(format!(
            "`{conv}` reads a `long double`, which snippets cannot pass"
        )),
        (Reads::Str, Type::Ptr(p)) if is_char(p) => Fit::Good,
        (Reads::Str, Type::Ptr(_)) => {
            Fit::Doubtful(format!("`{conv}` prints a `char *`, and this is `{ty}`"))
        }
        (Reads::Str, _) => Fit::Wrong(format!("`{conv}` needs a `char *`, not `{ty}`")),
        (Reads::Ptr | Reads::WritePtr, Type::Ptr(_)) => Fit::Good,
        (Reads::Ptr, Type::Int(k)) if k.size() == 8 => {
            Fit::Doubtful(format!("`{conv}` prints a pointer, and this is `{ty}`"))
        }
        (Reads::Ptr | Reads::WritePtr, _) => {
            Fit::Wrong(format!("`{conv}` needs a pointer, not `{ty}`"))
        }
    }
}

/// What to write instead, for a conversion reading `reads` given a `ty`.
fn hint(reads: Reads, ty: &Type) -> String {
    let suggest = match ty {
        Type::Int(k) if k.size() == 8 && k.signed() => "`%ld`",
        Type::Int(k) if k.size() == 8 => "`%lu` or `%lx`",
        Type::Int(_) => "`%d`",
        Type::Double => "`%f`",
        Type::Ptr(p) if matches!(**p, Type::Int(IntKind::Char)) => "`%s`",
        _ => "`%p`",
    };
    match reads {
        Reads::Int(8) if ty.is_int() => format!("use {suggest}, or cast it: `(long)...`"),
        Reads::Double if ty.is_int() => format!("use {suggest}, or cast it: `(double)...`"),
        _ => format!("use {suggest} for this `{ty}`"),
    }
}

impl Checker<'_> {
    /// Checks the arguments of a call to `name`, whose parameter `format_at` is a printf
    /// format, against the format when it is a string constant. `values` are the checked
    /// arguments after promotion, `args` as written.
    pub(super) fn check_printf_format(
        &mut self,
        name: &str,
        format_at: usize,
        values: &[Expr],
        args: &[ast::Expr],
    ) {
        let (Some(fmt), Some(fmt_arg)) = (values.get(format_at), args.get(format_at)) else {
            return;
        };
        let E::Str(idx) = fmt.kind else {
            // A format computed at run time cannot be checked, as with GCC.
            return;
        };
        let Some(format) = self.strings.get(idx).cloned() else {
            return;
        };
        // Where a byte of the format is in the source: exact for a literal without escapes.
        let span_of = |at: (usize, usize)| match &fmt_arg.kind {
            A::Str(s) if fmt_arg.span.end - fmt_arg.span.start == s.len() + 2 => {
                Span::new(fmt_arg.span.start + 1 + at.0, fmt_arg.span.start + 1 + at.1)
            }
            _ => fmt_arg.span,
        };
        let parts = match parse(&format) {
            Ok(Some(parts)) => parts,
            Ok(None) => return,
            Err(bad) => {
                self.diags.push(
                    Diagnostic::error(span_of(bad.at), bad.message)
                        .with_hint("write `%%` for a percent sign"),
                );
                return;
            }
        };
        let rest = &values[format_at + 1..];
        let rest_args = &args[format_at + 1..];
        for (k, part) in parts.iter().enumerate() {
            let conv = String::from_utf8_lossy(&format[part.at.0..part.at.1]).into_owned();
            let (Some(v), Some(a)) = (rest.get(k), rest_args.get(k)) else {
                self.diags.push(
                    Diagnostic::error(
                        span_of(part.at),
                        format!(
                            "`{conv}` has no argument: `{name}` is given {} after its format, \
                             and the format reads {}",
                            rest.len(),
                            parts.len()
                        ),
                    )
                    .with_hint(
                        "pass one argument per conversion, or write `%%` for a percent sign",
                    ),
                );
                return;
            };
            match fit(part.reads, &v.ty, &conv) {
                Fit::Good => {}
                Fit::Doubtful(m) => self
                    .diags
                    .push(Diagnostic::warning(a.span, m).with_hint(hint(part.reads, &v.ty))),
                Fit::Wrong(m) => self
                    .diags
                    .push(Diagnostic::error(a.span, m).with_hint(hint(part.reads, &v.ty))),
            }
        }
        if rest.len() > parts.len() {
            let extra = rest_args[parts.len()]
                .span
                .to(rest_args[rest.len() - 1].span);
            self.diags.push(
                Diagnostic::warning(
                    extra,
                    format!(
                        "the format reads {} argument(s); the rest are not printed",
                        parts.len()
                    ),
                )
                .with_hint("add a conversion for each, or drop them"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(format: &str) -> Vec<Reads> {
        parse(format.as_bytes())
            .expect("parses")
            .expect("not positional")
            .into_iter()
            .map(|p| p.reads)
            .collect()
    }

    #[test]
    fn conversions_read_what_glibc_reads() {
        assert_eq!(reads("plain %% text"), vec![]);
        assert_eq!(
            reads("%d %ld %lld %zu %hhx %c"),
            vec![
                Reads::Int(4),
                Reads::Int(8),
                Reads::Int(8),
                Reads::Int(8),
                Reads::Int(4),
                Reads::Int(4)
            ]
        );
        assert_eq!(
            reads("%-8.3f %e %s %p %n %m"),
            vec![
                Reads::Double,
                Reads::Double,
                Reads::Str,
                Reads::Ptr,
                Reads::WritePtr
            ]
        );
        assert_eq!(
            reads("%*.*s"),
            vec![Reads::Int(4), Reads::Int(4), Reads::Str]
        );
        assert_eq!(reads("%Lf"), vec![Reads::LongDouble]);
        assert_eq!(parse(b"%1$d %1$d"), Ok(None));
    }

    #[test]
    fn broken_formats_say_where() {
        let bad = parse(b"ok %").unwrap_err();
        assert_eq!(bad.at, (3, 4));
        let bad = parse(b"x %y").unwrap_err();
        assert_eq!(
            (bad.at, bad.message.as_str()),
            ((2, 4), "unknown conversion `%y`")
        );
    }
}
