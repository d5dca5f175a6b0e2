//! Values as gdb prints them, from the bytes of an object and its type as DWARF spells it
//! (`struct shape`, `int [8]`, `const char *`, `enum color`): structs and unions as
//! `{a = 1, b = {x = 2, y = 3}}`, arrays as `{1, 2, 3}` with runs of more than ten equal
//! elements folded into `0 <repeats 16 times>`, `char` arrays as strings (`"basic", '\000'
//! <repeats 10 times>`), enums by their enumerator's name, bit-fields by their bits, `char`
//! as `97 'a'`, pointers in hex with the string a `char *` points to, function pointers with
//! the function's name.
//!
//! Types are resolved by name through the module's DWARF ([`DebugInfo::type_layout`]), so
//! the spelling grammar is the one `dwarf::types` writes. What cannot be resolved (an
//! anonymous aggregate, a type without DWARF) prints as its raw bytes' integer.

#![warn(missing_docs)]

use crate::dwarf::{DebugInfo, Member, TypeKind, TypeLayout};

/// gdb's `print repeats`: runs longer than this are folded.
const REPEAT_THRESHOLD: usize = 10;
/// gdb's `print elements`: at most this many elements (or characters) are shown.
const ELEMENT_LIMIT: usize = 200;
/// Nesting followed at the most (a struct holding itself by value is impossible, but a
/// corrupt type graph is not).
const MAX_DEPTH: usize = 16;

/// The shape of a type, with typedefs and qualifiers peeled off.
#[derive(Clone, Debug)]
pub enum Shape {
    /// `void`: nothing to show.
    Void,
    /// An integer type other than `char`.
    Int {
        /// Size in bytes.
        size: u64,
        /// True for signed types.
        signed: bool,
    },
    /// `char`, `signed char` or `unsigned char`: shown as a number and a quoted character.
    Char {
        /// True for `char` and `signed char`.
        signed: bool,
    },
    /// `_Bool`/`bool`: shown as `true` or `false`.
    Bool {
        /// Size in bytes.
        size: u64,
    },
    /// A floating-point type.
    Float {
        /// Size in bytes (4, 8, or 16 for `long double`).
        size: u64,
    },
    /// A pointer to the type spelled so (`None` for a function).
    Ptr(Option<String>),
    /// An array of `count` elements (`None`: unknown bound) spelled `elem`.
    Array {
        /// The element type's spelling.
        elem: String,
        /// The element count; `None` for an unknown bound (`int[]`).
        count: Option<u64>,
    },
    /// A struct or class, with its members.
    Struct(TypeLayout),
    /// A union, with its members.
    Union(TypeLayout),
    /// An enum, with its enumerators.
    Enum(TypeLayout),
    /// Not resolvable here; `size` when known.
    Unknown,
}

const QUALIFIERS: [&str; 5] = ["const", "volatile", "restrict", "__restrict", "_Atomic"];

/// `spelling` without leading or trailing qualifiers (`const char *const` is `char *`).
fn unqualified(spelling: &str) -> &str {
    let mut s = spelling.trim();
    loop {
        let before = s;
        for q in QUALIFIERS {
            if let Some(rest) = s.strip_prefix(q).filter(|r| r.starts_with(' ')) {
                s = rest.trim_start();
            }
            if let Some(rest) = s.strip_suffix(q).filter(|r| r.ends_with([' ', '*'])) {
                s = rest.trim_end();
            }
        }
        if s == before {
            return s;
        }
    }
}

/// Splits `int [2][3]` into `int` and its dimensions `[2, 3]` (`None` for `[]`). Only
/// top-level brackets count: `int (*)[3]` is a pointer, not an array.
fn split_array(spelling: &str) -> Option<(&str, Vec<Option<u64>>)> {
    if !spelling.ends_with(']') || spelling.contains("(*") || spelling.contains("(&") {
        return None;
    }
    let open = spelling.find('[')?;
    let dims = spelling[open..]
        .split(']')
        .filter_map(|d| d.trim().strip_prefix('['))
        .map(|d| d.trim().parse().ok())
        .collect();
    Some((spelling[..open].trim_end(), dims))
}

/// The type an array of `dims` (outermost first) of `elem` has after one subscript.
fn inner_array(elem: &str, dims: &[Option<u64>]) -> String {
    if dims.len() <= 1 {
        return elem.to_owned();
    }
    let rest: String = dims[1..]
        .iter()
        .map(|d| d.map_or("[]".to_owned(), |n| format!("[{n}]")))
        .collect();
    format!("{elem} {rest}")
}

/// Types of one module's DWARF, by spelling.
pub struct Types<'a> {
    debug: Option<&'a DebugInfo>,
}

impl<'a> Types<'a> {
    /// Types looked up in `debug`; without DWARF only base types and pointers resolve.
    pub fn new(debug: Option<&'a DebugInfo>) -> Types<'a> {
        Types { debug }
    }

    fn layout(&self, name: &str) -> Option<TypeLayout> {
        self.debug?.type_layout(name)
    }

    /// What `spelling` is, typedefs followed.
    pub fn shape(&self, spelling: &str) -> Shape {
        self.shape_at(spelling, 0)
    }

    fn shape_at(&self, spelling: &str, depth: usize) -> Shape {
        let s = unqualified(spelling);
        if depth > MAX_DEPTH {
            return Shape::Unknown;
        }
        if let Some((elem, dims)) = split_array(s) {
            return Shape::Array {
                elem: inner_array(elem, &dims),
                count: dims.first().copied().flatten(),
            };
        }
        // Pointers to functions and to arrays: `int (*)(int)`, `char (*)[4]`.
        if let Some(open) = s.find("(*") {
            let close = s[open..].find(')').map(|i| open + i);
            let after = close.map(|c| s[c + 1..].trim_start()).unwrap_or("");
            let pointee = after
                .starts_with('[')
                .then(|| format!("{} {after}", s[..open].trim_end()));
            return Shape::Ptr(pointee);
        }
        if let Some(inner) = s.strip_suffix('*').or_else(|| s.strip_suffix('&')) {
            return Shape::Ptr(Some(inner.trim_end().to_owned()));
        }
        let int = |size, signed| Shape::Int { size, signed };
        match s {
            "void" => return Shape::Void,
            "char" | "signed char" => return Shape::Char { signed: true },
            "unsigned char" => return Shape::Char { signed: false },
            "_Bool" | "bool" => return Shape::Bool { size: 1 },
            "short" | "short int" => return int(2, true),
            "unsigned short" => return int(2, false),
            "int" | "signed" | "signed int" | "wchar_t" | "char32_t" => return int(4, true),
            "unsigned int" | "unsigned" => return int(4, false),
            "long" | "long long" | "long int" => return int(8, true),
            "unsigned long" | "unsigned long long" => return int(8, false),
            "__int128" => return int(16, true),
            "unsigned __int128" | "__int128 unsigned" => return int(16, false),
            "float" => return Shape::Float { size: 4 },
            "double" => return Shape::Float { size: 8 },
            "long double" => return Shape::Float { size: 16 },
            _ => {}
        }
        let Some(layout) = self.layout(s) else {
            return Shape::Unknown;
        };
        match layout.kind {
            TypeKind::Typedef => match &layout.target {
                Some(t) => self.shape_at(t, depth + 1),
                None => Shape::Unknown,
            },
            TypeKind::Struct | TypeKind::Class => Shape::Struct(layout),
            TypeKind::Union => Shape::Union(layout),
            TypeKind::Enum => Shape::Enum(layout),
            TypeKind::Base => match layout.size {
                Some(size) if s.contains("float") || s.contains("double") => Shape::Float { size },
                Some(size) => int(size, !s.contains("unsigned")),
                None => Shape::Unknown,
            },
        }
    }

    /// The size of an object of type `spelling`.
    pub fn size(&self, spelling: &str) -> Option<u64> {
        self.size_at(spelling, 0)
    }

    fn size_at(&self, spelling: &str, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.shape(spelling) {
            Shape::Void | Shape::Unknown => None,
            Shape::Int { size, .. } | Shape::Bool { size } | Shape::Float { size } => Some(size),
            Shape::Char { .. } => Some(1),
            Shape::Ptr(_) => Some(8),
            Shape::Array { elem, count } => self.size_at(&elem, depth + 1)?.checked_mul(count?),
            Shape::Struct(l) | Shape::Union(l) | Shape::Enum(l) => l.size,
        }
    }
}

/// Reads memory of the process (address, length).
pub type Reader<'r> = dyn FnMut(u64, usize) -> Option<Vec<u8>> + 'r;

/// Formats values of one module's types.
pub struct Printer<'a, 'r> {
    /// The module's types, by spelling.
    pub types: Types<'a>,
    /// Reads the process's memory.
    pub read: &'a mut Reader<'r>,
    /// The function or variable an address is in (`shapes+88`), for pointers.
    pub symbol: &'a dyn Fn(u64) -> Option<String>,
    /// gdb's `print/F`: integers, characters, booleans, enums and pointers shown in format
    /// `F` (`x` hex, `z` zero-padded hex, `o` octal, `t` binary, `d` signed, `u` unsigned,
    /// `c` character, `a` address with its symbol); char arrays then print as arrays.
    pub format: Option<char>,
}

/// The `bits`-bit integer `v` in gdb's format `f`.
pub fn formatted(v: u64, bits: u64, f: char, symbol: &dyn Fn(u64) -> Option<String>) -> String {
    let v = if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    };
    match f {
        'x' => format!("{v:#x}"),
        'z' => format!("0x{v:0w$x}", w = bits.div_ceil(4) as usize),
        'o' if v == 0 => "0".into(),
        'o' => format!("0{v:o}"),
        't' => format!("{v:b}"),
        'd' => sign_extend(v, bits).to_string(),
        'c' => char_text(i64::from(v as u8 as i8), v as u8),
        'a' => match symbol(v) {
            Some(s) => format!("{v:#x} <{s}>"),
            None => format!("{v:#x}"),
        },
        _ => v.to_string(),
    }
}

/// The formats `print/F` accepts.
pub const FORMATS: &str = "xzotduca";

fn le(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

fn sign_extend(v: u64, bits: u64) -> i64 {
    if bits == 0 || bits >= 64 {
        return v as i64;
    }
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// A character as gdb writes it inside quotes (`quote` is `'` or `"`).
fn escape(c: u8, quote: u8, out: &mut String) {
    match c {
        b'\n' => out.push_str("\\n"),
        b'\t' => out.push_str("\\t"),
        b'\r' => out.push_str("\\r"),
        0x07 => out.push_str("\\a"),
        0x08 => out.push_str("\\b"),
        0x0c => out.push_str("\\f"),
        0x0b => out.push_str("\\v"),
        b'\\' => out.push_str("\\\\"),
        c if c == quote => {
            out.push('\\');
            out.push(c as char);
        }
        0x20..=0x7e => out.push(c as char),
        c => out.push_str(&format!("\\{c:03o}")),
    }
}

/// `97 'a'`: a `char`'s value and its character.
pub fn char_text(v: i64, c: u8) -> String {
    let mut s = format!("{v} '");
    escape(c, b'\'', &mut s);
    s.push('\'');
    s
}

/// A character array as gdb prints it: quoted runs, and runs of more than ten equal
/// characters as `'c' <repeats N times>`; one trailing NUL (the terminator) is not shown.
pub fn char_array(bytes: &[u8]) -> String {
    let mut bytes = bytes;
    if let [rest @ .., 0] = bytes {
        bytes = rest;
    }
    let truncated = bytes.len() > ELEMENT_LIMIT;
    let bytes = &bytes[..bytes.len().min(ELEMENT_LIMIT)];
    if bytes.is_empty() {
        return "\"\"".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut quoted = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let run = bytes[i..].iter().take_while(|&&b| b == c).count();
        if run > REPEAT_THRESHOLD {
            if !quoted.is_empty() {
                parts.push(format!("\"{quoted}\""));
                quoted.clear();
            }
            let mut ch = String::from("'");
            escape(c, b'\'', &mut ch);
            parts.push(format!("{ch}' <repeats {run} times>"));
            i += run;
        } else {
            escape(c, b'"', &mut quoted);
            i += 1;
        }
    }
    if !quoted.is_empty() {
        parts.push(format!("\"{quoted}\""));
    }
    let mut s = parts.join(", ");
    if truncated {
        s.push_str("...");
    }
    s
}

impl Printer<'_, '_> {
    /// The value of an object of type `spelling` held in `bytes`, as `print` shows it at the
    /// top level: a pointer other than a `char *` is prefixed with its type, as gdb does.
    pub fn top(&mut self, spelling: &str, bytes: &[u8]) -> String {
        let value = self.value(spelling, bytes, 0);
        match self.types.shape(spelling) {
            _ if self.format.is_some() => value,
            Shape::Ptr(Some(p)) if matches!(self.types.shape(&p), Shape::Char { .. }) => value,
            Shape::Ptr(_) => format!("({}) {value}", unqualified(spelling)),
            _ => value,
        }
    }

    /// The value of a bit-field: `bits` bits from bit `shift` of `bytes`.
    pub fn bitfield(&self, spelling: &str, bytes: &[u8], shift: u64, bits: u64) -> String {
        let raw = le(bytes).checked_shr(shift as u32).unwrap_or(0);
        let raw = if bits >= 64 {
            raw
        } else {
            raw & ((1u64 << bits) - 1)
        };
        if let Some(f) = self.format {
            return formatted(raw, bits, f, self.symbol);
        }
        match self.types.shape(spelling) {
            Shape::Int { signed: true, .. } | Shape::Char { signed: true } => {
                sign_extend(raw, bits).to_string()
            }
            Shape::Bool { .. } => (raw != 0).to_string(),
            Shape::Enum(l) => enum_text(&l, raw as i64),
            _ => raw.to_string(),
        }
    }

    /// The value of an object of type `spelling` held in `bytes`.
    pub fn value(&mut self, spelling: &str, bytes: &[u8], depth: usize) -> String {
        if depth > MAX_DEPTH {
            return "{...}".into();
        }
        let shape = self.types.shape(spelling);
        if let Some(f) = self.format {
            let size = match &shape {
                Shape::Int { size, .. } | Shape::Bool { size } if *size <= 8 => Some(*size),
                Shape::Char { .. } => Some(1),
                Shape::Ptr(_) => Some(8),
                Shape::Enum(l) => Some(l.size.unwrap_or(4).min(8)),
                _ => None,
            };
            if let Some(size) = size {
                return formatted(le(bytes), size * 8, f, self.symbol);
            }
        }
        match shape {
            Shape::Void => "void".into(),
            Shape::Int { size, signed } => {
                if size > 8 {
                    return format!("0x{}", hex_le(bytes));
                }
                let v = le(bytes);
                if signed {
                    sign_extend(v, size * 8).to_string()
                } else {
                    v.to_string()
                }
            }
            Shape::Char { signed } => {
                let c = bytes.first().copied().unwrap_or(0);
                let v = if signed {
                    i64::from(c as i8)
                } else {
                    i64::from(c)
                };
                char_text(v, c)
            }
            Shape::Bool { .. } => (le(bytes) != 0).to_string(),
            Shape::Float { size: 4 } => float_text(f64::from(f32::from_bits(le(bytes) as u32)), 9),
            Shape::Float { size: 8 } => float_text(f64::from_bits(le(bytes)), 17),
            Shape::Float { .. } => x87_text(bytes),
            Shape::Ptr(pointee) => self.pointer(pointee.as_deref(), le(bytes)),
            Shape::Enum(l) => enum_text(&l, sign_extend(le(bytes), l.size.unwrap_or(4) * 8)),
            Shape::Struct(l) | Shape::Union(l) => self.aggregate(&l, bytes, depth),
            Shape::Array { elem, count } => self.array(&elem, count, bytes, depth),
            Shape::Unknown => match bytes.len() {
                1 | 2 | 4 | 8 => le(bytes).to_string(),
                _ => format!("<{} bytes of {spelling}>", bytes.len()),
            },
        }
    }

    /// A pointer as gdb shows it: its value, the symbol it points into, and for a `char *`
    /// the string there.
    fn pointer(&mut self, pointee: Option<&str>, addr: u64) -> String {
        let mut s = format!("{addr:#x}");
        if addr == 0 {
            return s;
        }
        if let Some(name) = (self.symbol)(addr) {
            s.push_str(&format!(" <{name}>"));
        }
        if pointee.is_some_and(|p| matches!(self.types.shape(p), Shape::Char { .. })) {
            match self.c_string(addr) {
                Some(text) => s.push_str(&format!(" {text}")),
                None => s.push_str(&format!(
                    " <error: Cannot access memory at address {addr:#x}>"
                )),
            }
        }
        s
    }

    /// The NUL-terminated string at `addr` (at most [`ELEMENT_LIMIT`] characters), quoted.
    fn c_string(&mut self, addr: u64) -> Option<String> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < ELEMENT_LIMIT {
            // Reads stop at page ends, so a string near an unmapped page is still read.
            let room = 4096 - (at % 4096) as usize;
            let chunk = (self.read)(at, room.min(64))?;
            match chunk.iter().position(|&b| b == 0) {
                Some(n) => {
                    out.extend_from_slice(&chunk[..n]);
                    out.push(0);
                    return Some(char_array(&out));
                }
                None => out.extend_from_slice(&chunk),
            }
            at += chunk.len() as u64;
        }
        out.truncate(ELEMENT_LIMIT);
        Some(format!("{}...", char_array(&out)))
    }

    /// A struct or union of layout `layout` held in `bytes`.
    pub fn aggregate(&mut self, layout: &TypeLayout, bytes: &[u8], depth: usize) -> String {
        let fields: Vec<String> = layout
            .members
            .iter()
            .map(|m| {
                let value = self.member(m, bytes, depth);
                match &m.name {
                    Some(name) => format!("{name} = {value}"),
                    None => value,
                }
            })
            .collect();
        format!("{{{}}}", fields.join(", "))
    }

    fn member(&mut self, m: &Member, bytes: &[u8], depth: usize) -> String {
        if let Some(inner) = &m.inline {
            let start = m.offset as usize;
            let size = inner.size.unwrap_or(0) as usize;
            return match bytes.get(start..start.saturating_add(size)) {
                Some(b) => self.aggregate(inner, b, depth + 1),
                None => "<unavailable>".into(),
            };
        }
        if let Some((bit, bits)) = m.bits {
            let start = (bit / 8) as usize;
            let end = ((bit + bits).div_ceil(8) as usize).min(bytes.len());
            return match bytes.get(start..end) {
                Some(b) => self.bitfield(&m.type_name, b, bit % 8, bits),
                None => "<unavailable>".into(),
            };
        }
        let size = m
            .size
            .or_else(|| self.types.size(&m.type_name))
            .unwrap_or(0);
        let start = m.offset as usize;
        match bytes.get(start..start.saturating_add(size as usize)) {
            Some(b) => self.value(&m.type_name, b, depth + 1),
            None => "<unavailable>".into(),
        }
    }

    fn array(&mut self, elem: &str, count: Option<u64>, bytes: &[u8], depth: usize) -> String {
        let Some(size) = self.types.size(elem).filter(|&s| s > 0) else {
            return "{...}".into();
        };
        let count = count.unwrap_or(0).min(bytes.len() as u64 / size) as usize;
        if self.format.is_none() && matches!(self.types.shape(elem), Shape::Char { .. }) {
            return char_array(&bytes[..count]);
        }
        let size = size as usize;
        let items: Vec<&[u8]> = bytes[..count * size].chunks(size).collect();
        let mut parts = Vec::new();
        let mut i = 0;
        let mut shown = 0;
        while i < items.len() {
            if shown >= ELEMENT_LIMIT {
                parts.push("...".to_owned());
                break;
            }
            let run = items[i..].iter().take_while(|x| **x == items[i]).count();
            let value = self.value(elem, items[i], depth + 1);
            if run > REPEAT_THRESHOLD {
                parts.push(format!("{value} <repeats {run} times>"));
                i += run;
                shown += REPEAT_THRESHOLD;
            } else {
                parts.push(value);
                i += 1;
                shown += 1;
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// A floating-point value as gdb prints it: C's `%.{digits}g` (9 digits for `float`, 17 for
/// `double`, enough to read the same value back).
pub fn float_text(v: f64, digits: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    let sci = format!("{:.*e}", digits - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if x < -4 || x >= digits as i32 {
        let sign = if x < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            trim(mantissa.to_owned()),
            x.unsigned_abs()
        )
    } else {
        trim(format!("{:.*}", (digits as i32 - 1 - x).max(0) as usize, v))
    }
}

fn enum_text(layout: &TypeLayout, v: i64) -> String {
    layout
        .enumerators
        .iter()
        .find(|(_, e)| *e == v)
        .map_or_else(|| v.to_string(), |(name, _)| name.clone())
}

fn hex_le(bytes: &[u8]) -> String {
    bytes.iter().rev().map(|b| format!("{b:02x}")).collect()
}

/// An x87 80-bit extended value (`long double`), converted to the nearest `f64`.
fn x87_text(bytes: &[u8]) -> String {
    if bytes.len() < 10 {
        return format!("0x{}", hex_le(bytes));
    }
    let mantissa = le(&bytes[..8]);
    let se = u16::from_le_bytes([bytes[8], bytes[9]]);
    let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from(se & 0x7fff);
    if exp == 0 && mantissa == 0 {
        return if sign < 0.0 { "-0".into() } else { "0".into() };
    }
    if exp == 0x7fff {
        return if mantissa << 1 == 0 {
            if sign < 0.0 { "-inf" } else { "inf" }.into()
        } else {
            "nan".into()
        };
    }
    let v = sign * (mantissa as f64) * 2f64.powi(exp - 16383 - 63);
    v.to_string()
}

#[cfg(test)]
#[path = "values_tests.rs"]
mod tests;
