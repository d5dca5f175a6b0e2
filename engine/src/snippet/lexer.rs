//! The snippet lexer: source text to tokens with spans. The small grammars of numbers,
//! identifiers and escapes are written with `nom` combinators; the loop around them never
//! fails — text it cannot read becomes an [`TokenKind::Error`] token and a diagnostic, so the
//! parser still sees the rest of the line (completion and highlighting work on half-typed
//! input).

use nom::branch::alt;
use nom::bytes::complete::{tag, tag_no_case, take_while, take_while1};
use nom::character::complete::{char, digit0, digit1, hex_digit1, one_of};
use nom::combinator::{opt, recognize};
use nom::{IResult, Parser};

use super::ast::{IntLit, Span};
use super::diag::Diagnostic;

#[derive(Clone, Debug, PartialEq)]
/// What a token is.
pub enum TokenKind {
    /// An identifier or keyword (`if`, `int`, ...); the parser tells them apart.
    Ident(String),
    /// `$name` or `$0`, without the `$`.
    Special(String),
    /// An integer literal, with its suffix.
    Int(IntLit),
    /// A floating-point literal.
    Float(f64),
    /// A character literal's byte value (`'a'`, `'\n'`).
    Char(u8),
    /// A string literal's bytes, escapes resolved, without the quotes or a terminating NUL.
    Str(Vec<u8>),
    /// An operator or punctuation, e.g. `<<=` or `{`.
    Punct(&'static str),
    /// Text the lexer could not read.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
/// One token and where it is.
pub struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// Its byte range in the source.
    pub span: Span,
}

/// Longest first, so `<<=` wins over `<<` and `<`.
const PUNCTS: [&str; 46] = [
    "<<=", ">>=", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", "+", "-", "*", "/", "%", "<", ">", "=", "!", "~", "&", "|",
    "^", "?", ":", ";", ",", "(", ")", "{", "}", "[", "]", ".", "#",
];

/// Splits `source` into tokens. Never fails: problems are returned as diagnostics beside
/// `Error` tokens.
pub fn lex(source: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut tokens = Vec::new();
    let mut diags = Vec::new();
    let mut rest = source;
    loop {
        rest = skip_trivia(rest, &mut diags, source);
        if rest.is_empty() {
            break;
        }
        let start = source.len() - rest.len();
        let (next, kind) = match token(rest) {
            Ok((next, Ok(kind))) => (next, kind),
            Ok((next, Err(message))) => {
                let end = source.len() - next.len();
                diags.push(Diagnostic::error(Span::new(start, end), message));
                (next, TokenKind::Error)
            }
            Err(_) => {
                let ch = rest.chars().next().map_or(1, char::len_utf8);
                diags.push(
                    Diagnostic::error(
                        Span::new(start, start + ch),
                        format!("unexpected character `{}`", &rest[..ch]),
                    )
                    .with_hint("snippets are a subset of C"),
                );
                (&rest[ch..], TokenKind::Error)
            }
        };
        let end = source.len() - next.len();
        tokens.push(Token {
            kind,
            span: Span::new(start, end),
        });
        rest = next;
    }
    (tokens, diags)
}

/// Skips whitespace and comments (`//` to end of line, `/* ... */`).
fn skip_trivia<'a>(mut s: &'a str, diags: &mut Vec<Diagnostic>, source: &str) -> &'a str {
    loop {
        let trimmed = s.trim_start();
        if let Some(after) = trimmed.strip_prefix("//") {
            s = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = trimmed.strip_prefix("/*") {
            match after.find("*/") {
                Some(i) => s = &after[i + 2..],
                None => {
                    let start = source.len() - trimmed.len();
                    diags.push(Diagnostic::error(
                        Span::new(start, start + 2),
                        "unterminated comment",
                    ));
                    return "";
                }
            }
        } else {
            return trimmed;
        }
    }
}

type Lexed<'a> = IResult<&'a str, Result<TokenKind, String>>;

fn token(s: &str) -> Lexed<'_> {
    alt((number, ident, special, char_lit, string_lit, punct)).parse(s)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn ident(s: &str) -> Lexed<'_> {
    let (rest, name) =
        recognize((take_while1(is_ident_start), take_while(is_ident_char))).parse(s)?;
    Ok((rest, Ok(TokenKind::Ident(name.to_string()))))
}

fn special(s: &str) -> Lexed<'_> {
    let (rest, name) = recognize((char('$'), take_while(is_ident_char))).parse(s)?;
    if name.len() == 1 {
        return Ok((
            rest,
            Err("`$` must be followed by a name, e.g. `$0` or `$return`".into()),
        ));
    }
    Ok((rest, Ok(TokenKind::Special(name[1..].to_string()))))
}

fn punct(s: &str) -> Lexed<'_> {
    for p in PUNCTS {
        if let Some(rest) = s.strip_prefix(p) {
            return Ok((rest, Ok(TokenKind::Punct(p))));
        }
    }
    Err(nom::Err::Error(nom::error::Error::new(
        s,
        nom::error::ErrorKind::Tag,
    )))
}

/// A floating literal: `1.5`, `.5`, `1.`, `1e3`, `1.5e-3`.
fn float_text(s: &str) -> IResult<&str, &str> {
    let exponent = || (one_of("eE"), opt(one_of("+-")), digit1);
    alt((
        recognize((digit1, char('.'), digit0, opt(exponent()))),
        recognize((char('.'), digit1, opt(exponent()))),
        recognize((digit1, exponent())),
    ))
    .parse(s)
}

fn number(s: &str) -> Lexed<'_> {
    if let Ok((rest, text)) = float_text(s) {
        let (rest, _) = opt(one_of("fFlL")).parse(rest)?;
        return Ok((
            rest,
            text.parse::<f64>()
                .map(TokenKind::Float)
                .map_err(|e| e.to_string()),
        ));
    }
    let (rest, (radix, digits)) = alt((
        (tag_no_case("0x").map(|_| 16), hex_digit1),
        (tag("0").map(|_| 8), digit1),
        (tag("").map(|_| 10), digit1),
    ))
    .parse(s)?;
    let (rest, suffix) = take_while(|c: char| c.is_ascii_alphanumeric() || c == '_').parse(rest)?;
    let value = match u64::from_str_radix(digits, radix) {
        Ok(v) => v,
        Err(_) if radix == 8 && digits.bytes().all(|b| b.is_ascii_digit()) => {
            return Ok((rest, Err(format!("`0{digits}` is not an octal number"))))
        }
        Err(_) => return Ok((rest, Err("integer literal is too large for 64 bits".into()))),
    };
    let lower = suffix.to_ascii_lowercase();
    let (unsigned, long) = match lower.as_str() {
        "" => (false, false),
        "u" => (true, false),
        "l" | "ll" => (false, true),
        "ul" | "lu" | "ull" | "llu" => (true, true),
        _ => return Ok((rest, Err(format!("unknown suffix `{suffix}` on a number")))),
    };
    Ok((
        rest,
        Ok(TokenKind::Int(IntLit {
            value,
            decimal: radix == 10,
            unsigned,
            long,
        })),
    ))
}

fn char_lit(s: &str) -> Lexed<'_> {
    let (mut rest, _) = char('\'').parse(s)?;
    let mut bytes = Vec::new();
    loop {
        match rest.chars().next() {
            None | Some('\n') => return Ok((rest, Err("unterminated character literal".into()))),
            Some('\'') => {
                rest = &rest[1..];
                break;
            }
            Some(_) => match escaped(rest) {
                Ok((r, b)) => {
                    bytes.extend(b);
                    rest = r;
                }
                Err(message) => return Ok((&rest[1..], Err(message))),
            },
        }
    }
    match bytes.as_slice() {
        [b] => Ok((rest, Ok(TokenKind::Char(*b)))),
        [] => Ok((rest, Err("empty character literal".into()))),
        _ => Ok((rest, Err("a character literal holds one character".into()))),
    }
}

fn string_lit(s: &str) -> Lexed<'_> {
    let (mut rest, _) = char('"').parse(s)?;
    let mut bytes = Vec::new();
    loop {
        match rest.chars().next() {
            None | Some('\n') => return Ok((rest, Err("unterminated string literal".into()))),
            Some('"') => return Ok((&rest[1..], Ok(TokenKind::Str(bytes)))),
            Some(_) => match escaped(rest) {
                Ok((r, b)) => {
                    bytes.extend(b);
                    rest = r;
                }
                Err(message) => return Ok((&rest[1..], Err(message))),
            },
        }
    }
}

/// One source character of a literal, with C's escapes, as bytes (UTF-8 for non-ASCII).
fn escaped(s: &str) -> Result<(&str, Vec<u8>), String> {
    let mut chars = s.chars();
    let c = chars.next().ok_or("unexpected end of literal")?;
    if c != '\\' {
        return Ok((chars.as_str(), c.to_string().into_bytes()));
    }
    let e = chars.next().ok_or("unexpected end of literal")?;
    let byte = match e {
        'n' => b'\n',
        't' => b'\t',
        'r' => b'\r',
        '0'..='7' => {
            let digits: String = s[1..]
                .chars()
                .take_while(|c| c.is_digit(8))
                .take(3)
                .collect();
            let v = u32::from_str_radix(&digits, 8).map_err(|e| e.to_string())?;
            let v =
                u8::try_from(v).map_err(|_| format!("octal escape `\\{digits}` is too large"))?;
            return Ok((&s[1 + digits.len()..], vec![v]));
        }
        'x' => {
            let digits: String = chars
                .as_str()
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .take(2)
                .collect();
            if digits.is_empty() {
                return Err("`\\x` needs hex digits".into());
            }
            let v = u8::from_str_radix(&digits, 16).map_err(|e| e.to_string())?;
            return Ok((&s[2 + digits.len()..], vec![v]));
        }
        'a' => 7,
        'b' => 8,
        'f' => 12,
        'v' => 11,
        'e' => 27,
        '\\' | '\'' | '"' | '?' => e as u8,
        other => return Err(format!("unknown escape `\\{other}`")),
    };
    Ok((chars.as_str(), vec![byte]))
}
