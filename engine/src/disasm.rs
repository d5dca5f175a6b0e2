//! Instruction decoding for display: Intel syntax, with branch and RIP-relative targets named
//! by a caller-supplied symbolizer, as objdump's `<name>` annotations.

#![warn(missing_docs)]

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};

use crate::addr::LinkAddr;

/// One decoded instruction, ready to print.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Line {
    /// Address of its first byte.
    pub addr: LinkAddr,
    /// The instruction's bytes as lowercase hex pairs separated by spaces.
    pub bytes: String,
    /// Its length in bytes (1 to 15).
    pub len: usize,
    /// Its text in Intel syntax, with `0x` numbers (`mov eax, [rip+0x2ee6]`).
    pub text: String,
    /// The name of a branch or call target, or of the data a RIP-relative operand reaches.
    pub target: Option<String>,
}

/// Decodes up to `max` instructions from `bytes`, which start at `addr`. `name_of` names an
/// address (a function, `func+0x12`), for branch targets and RIP-relative operands.
pub fn disassemble(
    bytes: &[u8],
    addr: LinkAddr,
    max: usize,
    name_of: &dyn Fn(LinkAddr) -> Option<String>,
) -> Vec<Line> {
    let mut decoder = Decoder::with_ip(64, bytes, addr.0, DecoderOptions::NONE);
    let mut formatter = IntelFormatter::new();
    formatter.options_mut().set_first_operand_char_index(8);
    formatter.options_mut().set_rip_relative_addresses(false);
    formatter.options_mut().set_show_branch_size(false);
    let options = formatter.options_mut();
    options.set_space_after_operand_separator(true);
    // gdb's and objdump's number style: 0x1dfc8, not 1DFC8h.
    options.set_hex_prefix("0x");
    options.set_hex_suffix("");
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    options.set_leading_zeros(false);
    let mut out = Vec::new();
    let mut text = String::new();
    for insn in decoder.iter().take(max) {
        text.clear();
        formatter.format(&insn, &mut text);
        let start = (insn.ip() - addr.0) as usize;
        let raw = &bytes[start..start + insn.len()];
        let target = branch_or_data_target(&insn).and_then(name_of);
        out.push(Line {
            addr: LinkAddr(insn.ip()),
            bytes: raw
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" "),
            len: insn.len(),
            text: if insn.is_invalid() {
                "(bad)".to_owned()
            } else {
                text.clone()
            },
            target,
        });
    }
    out
}

fn branch_or_data_target(insn: &Instruction) -> Option<LinkAddr> {
    use iced_x86::OpKind;
    if insn.op_count() > 0 && insn.op0_kind() == OpKind::NearBranch64 {
        return Some(LinkAddr(insn.near_branch64()));
    }
    if insn.is_ip_rel_memory_operand() {
        return Some(LinkAddr(insn.ip_rel_memory_address()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_calls_with_names() {
        // call +0 (to 0x1005); ret
        let code = [0xe8, 0x00, 0x00, 0x00, 0x00, 0xc3];
        let name = |a: LinkAddr| (a.0 == 0x1005).then(|| "target".to_owned());
        let lines = disassemble(&code, LinkAddr(0x1000), 10, &name);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].bytes, "e8 00 00 00 00");
        assert_eq!(lines[0].target.as_deref(), Some("target"));
        assert_eq!(lines[1].text.trim(), "ret");
    }
}
