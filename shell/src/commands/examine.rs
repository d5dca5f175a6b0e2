//! Looking at a stopped process as gdb does, beyond `print`: `x` (memory, in gdb's
//! `x/NFU` formats), `show registers` and `show locals`, in the [`Scope`] of the selected
//! frame that the engine builds (`Inferior::frame`, `instrument::inspect`).

use anyhow::{anyhow, bail, Result};
use engine::instrument::inferior::FrameView;
use engine::instrument::scope::{register_number, REGISTERS};

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::{Cell, Output, Table};
use crate::target::TargetSlot;

pub const EXAMINE: Spec = Spec {
    name: "x",
    aliases: &[],
    usage: "[/NFU] ADDR",
    complete: Complete::Nothing,
    summary: "examine memory, as gdb's x",
    help: "Shows N units of memory from ADDR, an expression as for `print`: a pointer or an \
integer is the address, an array or other object is examined where it lies (gdb takes the \
value of an array's first element's address the same way). F is the format: `x` hex (the \
default), `d` signed, `u` unsigned, `o` octal, `t` binary, `c` characters, `a` addresses with \
the symbol they point into, `s` NUL-terminated strings. U is the unit: `b` 1 byte, `h` 2, `w` \
4 (the default), `g` 8. N defaults to 1. Unlike gdb, `x` does not remember the last format or \
address, and has no `i` format (`disas ADDR` shows instructions).",
    examples: &[
        (
            "x/8xg $rsp",
            "eight 8-byte words at the stack pointer, in hex",
        ),
        ("x/s greeting", "the string a `char *` points to"),
        ("x/16xb head->name", "the bytes of an array"),
    ],
    run: examine,
};

pub const SHOW_REGISTERS: Spec = Spec {
    name: "show registers",
    aliases: &["info registers"],
    usage: "",
    complete: Complete::Nothing,
    summary: "the selected frame's registers",
    help: "The general registers of the selected frame (the current thread's, or the frame \
`up`/`down` chose), in hex and in their natural form: an address with the symbol it points \
into for `rip`, a signed number for the others. Above the innermost frame only the registers \
the unwinder recovers (`rip`, `rsp`, `rbp` and the callee-saved ones) are shown. `print $rip` \
reads one.",
    examples: &[("show registers", "")],
    run: show_registers,
};

pub const SHOW_LOCALS: Spec = Spec {
    name: "show locals",
    aliases: &["info locals"],
    usage: "",
    complete: Complete::Nothing,
    summary: "the selected frame's parameters and locals, with their values",
    help: "Prints each parameter, then each local variable in scope at the selected frame's pc \
(innermost block first), as `print NAME` would: located by the debug info, `<optimized out>` \
where it does not say where one is. gdb's `info args` and `info locals` together.",
    examples: &[("show locals", "")],
    run: show_locals,
};

/// gdb's `/NFU`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Format {
    count: usize,
    letter: char,
    unit: usize,
}

fn parse_format(text: &str) -> Result<Format> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let count = if digits.is_empty() {
        1
    } else {
        digits
            .parse::<usize>()
            .ok()
            .filter(|&n| (1..=4096).contains(&n))
            .ok_or_else(|| anyhow!("`x/{text}`: the count is 1 to 4096"))?
    };
    let mut letter = None;
    let mut unit = None;
    for c in text[digits.len()..].chars() {
        match c {
            'x' | 'd' | 'u' | 'o' | 't' | 'c' | 'a' | 's' => letter = Some(c),
            'b' => unit = Some(1),
            'h' => unit = Some(2),
            'w' => unit = Some(4),
            'g' => unit = Some(8),
            'i' => bail!("`x/{text}`: no `i` format; `disas ADDR` shows instructions"),
            other => {
                bail!("`x/{text}`: `{other}` is no format (x d u o t c a s) or unit (b h w g)")
            }
        }
    }
    let letter = letter.unwrap_or('x');
    let unit = unit.unwrap_or(match letter {
        'a' => 8,
        'c' | 's' => 1,
        _ => 4,
    });
    Ok(Format {
        count,
        letter,
        unit,
    })
}

fn examine(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let mut text = args.rest_raw();
    let mut format = Format {
        count: 1,
        letter: 'x',
        unit: 4,
    };
    // `x/8xg ADDR` reaches here as `/8xg ADDR`; `x /8xg ADDR` too.
    if let Some(rest) = text.strip_prefix('/') {
        let (f, addr) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        format = parse_format(f)?;
        text = addr.trim().to_owned();
    }
    if text.is_empty() {
        return Err(args.usage_error("missing address"));
    }
    let session = &ctx.session;
    let t = ctx.target.present()?;
    let tid = t.thread;
    let frame = t.frame;
    // A thread that has exited since is none: globals and declared variables only.
    let out = t.inferior.frame(session, tid, frame, false, |view| {
        let addr = view.address(&text).map_err(|e| anyhow!("{e}"))?;
        dump(view, addr, format)
    })??;
    Ok(Output::Text(out))
}

/// The lines `x` prints: an address column, then the units.
fn dump(view: &FrameView<'_, '_>, addr: u64, f: Format) -> Result<String> {
    let scope = &view.scope;
    let label = |a: u64| match scope.symbol(a) {
        Some(s) => format!("{a:#x} <{s}>:"),
        None => format!("{a:#x}:"),
    };
    let read = |a: u64, n: usize| {
        view.read(a, n)
            .map_err(|_| anyhow!("cannot access memory at address {a:#x}"))
    };
    let mut out = String::new();
    if f.letter == 's' {
        let mut at = addr;
        for _ in 0..f.count {
            let mut bytes = Vec::new();
            loop {
                let b = read(at + bytes.len() as u64, 1)?[0];
                bytes.push(b);
                if b == 0 || bytes.len() >= 200 {
                    break;
                }
            }
            let text = engine::instrument::values::char_array(&bytes);
            out.push_str(&format!("{}\t{text}\n", label(at)));
            at += bytes.len() as u64;
        }
        return Ok(out);
    }
    let per_line = match (f.letter, f.unit) {
        ('a', _) | (_, 8) => 2,
        ('c', _) | (_, 1) => 8,
        (_, 2) => 8,
        _ => 4,
    };
    let bytes = read(addr, f.count * f.unit)?;
    for (i, chunk) in bytes.chunks(f.unit).enumerate() {
        if i % per_line == 0 {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&label(addr + (i * f.unit) as u64));
        }
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        let v = u64::from_le_bytes(b);
        let bits = f.unit as u32 * 8;
        let signed = if bits == 64 {
            v as i64
        } else {
            ((v << (64 - bits)) as i64) >> (64 - bits)
        };
        let cell = match f.letter {
            'x' => format!("{v:#0w$x}", w = f.unit * 2 + 2),
            'd' => signed.to_string(),
            'u' => v.to_string(),
            'o' => format!("0{v:o}"),
            't' => format!("{v:0w$b}", w = bits as usize),
            'c' => engine::instrument::values::char_text(signed, v as u8),
            'a' => match scope.symbol(v) {
                Some(s) => format!("{v:#x} <{s}>"),
                None => format!("{v:#x}"),
            },
            _ => unreachable!("parse_format accepts only these"),
        };
        out.push('\t');
        out.push_str(&cell);
    }
    out.push('\n');
    Ok(out)
}

fn show_locals(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let session = &ctx.session;
    let t = ctx.target.present()?;
    let tid = t.thread;
    let frame = t.frame;
    let text = t.inferior.frame(session, tid, frame, true, |view| {
        if view.scope.frame.is_none() {
            bail!("the selected frame is in no function gsh knows");
        }
        let names: Vec<String> = view
            .scope
            .locals
            .iter()
            .map(|v| v.info.name.clone())
            .collect();
        if names.is_empty() {
            return Ok("no parameters or locals (no debug info for this frame?)\n".to_owned());
        }
        let mut text = String::new();
        for name in names {
            let value = match view.print(&name) {
                Ok(v) => v.to_string(),
                Err(e) => format!("<{e}>"),
            };
            text.push_str(&format!("{name} = {value}\n"));
        }
        Ok(text)
    })??;
    Ok(Output::Text(text))
}

fn show_registers(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    args.positionals(0, 0)?;
    let session = &ctx.session;
    let t = ctx.target.present()?;
    let tid = t.thread;
    let frame = t.frame;
    let table = t.inferior.frame(session, tid, frame, true, |view| {
        let scope = &view.scope;
        let regs = scope
            .regs
            .ok_or_else(|| anyhow!("the current thread's registers cannot be read"))?;
        let mut table = Table::new(vec!["Register", "Value", "Natural"]);
        for name in REGISTERS {
            let Some(v) = register_number(name).and_then(|n| regs.get(n)) else {
                continue;
            };
            let natural = match name {
                "rip" => match scope.symbol(v) {
                    Some(s) => format!("{v:#x} <{s}>"),
                    None => format!("{v:#x}"),
                },
                "rsp" | "rbp" => format!("{v:#x}"),
                _ => (v as i64).to_string(),
            };
            table
                .rows
                .push(vec![Cell::text(name), Cell::Addr(v), Cell::text(natural)]);
        }
        Ok::<_, anyhow::Error>(table)
    })??;
    Ok(Output::Table(table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_as_gdb_reads_them() {
        let f = |t: &str| parse_format(t).unwrap();
        assert_eq!(
            (f("8xg").count, f("8xg").letter, f("8xg").unit),
            (8, 'x', 8)
        );
        assert_eq!((f("s").count, f("s").unit), (1, 1));
        assert_eq!((f("4dw").letter, f("4dw").unit), ('d', 4));
        assert_eq!(f("a").unit, 8);
        assert_eq!(f("").unit, 4);
        assert!(parse_format("8i")
            .unwrap_err()
            .to_string()
            .contains("disas"));
        assert!(parse_format("8q").is_err());
        assert!(parse_format("0x").is_err());
    }
}
