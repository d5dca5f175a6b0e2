//! A snippet's machine code generated once and moved to each address a trampoline's layout
//! tries, instead of generated again there.
//!
//! A trampoline is laid out at least four times (once to learn its size and once at the
//! address it got, each in two rounds until its addresses are stable), and each layout placed
//! each snippet at two addresses (to learn the registers it clobbers, then after the saves):
//! generating the code (iced's block encoder, mostly) was three quarters of laying a shared
//! site out again (`xtask bench-stall relay`).
//!
//! Code generated at `A` differs from the code generated at `B` only where the generator asked
//! whether an address is within RIP-relative reach of the snippet's start
//! (`Gen::is_near`): a near one is reached by a 4-byte distance (a `rip`-relative operand, a
//! `call rel32`), a far one through an immediate (`mov r11, imm64`, `mov eax, imm32`).
//! Branches within the snippet and its string data keep their distances wherever it goes. So
//! the code moves from `A` to `B` by taking `B - A` off each distance to an address outside
//! it, as long as every answer stays the same at `B`: each address reached by distance is
//! still near, and no immediate far from `A` comes near `B` (any immediate counts, constants
//! too: a constant only makes the check stricter). When an answer would change, or an
//! instruction is not understood, the code is generated afresh at `B` as before. Debug builds
//! check every moved copy against the code generated at its address.

use iced_x86::{Decoder, DecoderOptions, OpKind};

use crate::snippet::codegen::Code;
use crate::snippet::ir::Program;
use crate::snippet::{self, Diagnostic};

/// One snippet's code kept through a trampoline's layouts, and through every later layout of
/// any site that holds the same checked program (the patcher keeps it beside the program, see
/// `Patcher::memos`): empty until first generated, then the code to move (or `None` when it
/// cannot move). Shared between a patcher and its snapshots: the code depends only on the
/// program and the address.
pub type Memo = std::sync::OnceLock<Option<Movable>>;

/// The code of `program` (checked from `source`) at `addr`: `memo`'s code moved there when
/// it can be, else generated there (and kept in `memo` when it holds none yet).
pub fn code_at(
    memo: &Memo,
    program: &Program,
    source: &str,
    addr: u64,
) -> Result<Code, Vec<Diagnostic>> {
    if let Some(Some(m)) = memo.get() {
        if let Some(c) = m.at(addr) {
            match m.checked.get().copied() {
                Some(true) => {
                    debug_assert_eq!(
                        Some(&c),
                        snippet::generate(program, source, addr).ok().as_ref(),
                        "moved code differs from the code generated at {addr:#x}"
                    );
                    return Ok(c);
                }
                Some(false) => {}
                None => {
                    // The first move is checked against the code generated there. A target
                    // outside the code that lay within the code's range where it was first
                    // generated is taken for one inside and not moved (seen saving bash with
                    // counters everywhere): one check at another address finds any such
                    // target, since its distance would have to change.
                    let fresh = snippet::generate(program, source, addr)?;
                    let _ = m.checked.set(fresh == c);
                    return Ok(fresh);
                }
            }
        }
    }
    let c = snippet::generate(program, source, addr)?;
    if memo.get().is_none() {
        let _ = memo.set(Movable::new(&c));
    }
    Ok(c)
}

/// How far from a snippet's start an address may be and still be reached RIP-relatively:
/// the generator's rule (`Gen::is_near`), which leaves room for the snippet's own length.
const REACH: i128 = 0x7000_0000;

fn near(from: u64, to: u64) -> bool {
    (to as i128 - from as i128).abs() < REACH
}

/// Code generated at one address, ready to move to another.
#[derive(Debug)]
pub struct Movable {
    code: Code,
    /// Each 4-byte distance to an address outside the code: its offset in `code.bytes` and
    /// the address it reaches.
    distances: Vec<(usize, u64)>,
    /// Every immediate operand (and absolute memory operand) far from `code.addr`: moved
    /// where one of them is near, the generator would have reached it by distance instead.
    far: Vec<u64>,
    /// Whether a move was checked against the code generated at its address: `None` until
    /// the first move, then whether the two were the same ([`code_at`] moves only then).
    checked: std::sync::OnceLock<bool>,
}

impl Movable {
    /// `None` when the code holds an instruction whose reach to outside addresses is not
    /// understood (it is then always generated afresh).
    pub fn new(code: &Code) -> Option<Movable> {
        let start = code.addr;
        let end = start.checked_add(code.bytes.len() as u64)?;
        let inside = |a: u64| (start..end).contains(&a);
        let mut distances = Vec::new();
        let mut far = Vec::new();
        // The string data is no code; the instruction after it is.
        let len = code.bytes.len();
        let ranges = match &code.data {
            Some(r) => [0..r.start, r.end..len],
            None => [0..len, len..len],
        };
        for r in ranges {
            let bytes = code.bytes.get(r.clone())?;
            let mut d = Decoder::with_ip(64, bytes, start + r.start as u64, DecoderOptions::NONE);
            while d.can_decode() {
                let at = r.start + d.position();
                let insn = d.decode();
                if insn.is_invalid() {
                    return None;
                }
                let offsets = d.get_constant_offsets(&insn);
                if insn.is_ip_rel_memory_operand() {
                    let to = insn.ip_rel_memory_address();
                    if !inside(to) {
                        if offsets.displacement_size() != 4 {
                            return None;
                        }
                        distances.push((at + offsets.displacement_offset(), to));
                    }
                } else if insn.op_kinds().any(|k| k == OpKind::Memory)
                    && insn.memory_base() == iced_x86::Register::None
                    && insn.memory_index() == iced_x86::Register::None
                    && insn.segment_prefix() == iced_x86::Register::None
                {
                    // An absolute address (the generator writes none; counted as far).
                    let a = insn.memory_displacement64();
                    if near(start, a) {
                        return None;
                    }
                    far.push(a);
                }
                for (i, kind) in insn.op_kinds().enumerate() {
                    match kind {
                        OpKind::NearBranch64 => {
                            let to = insn.near_branch_target();
                            if !inside(to) {
                                if offsets.immediate_size() != 4 {
                                    return None;
                                }
                                distances.push((at + offsets.immediate_offset(), to));
                            }
                        }
                        OpKind::NearBranch16
                        | OpKind::NearBranch32
                        | OpKind::FarBranch16
                        | OpKind::FarBranch32 => return None,
                        OpKind::Immediate8
                        | OpKind::Immediate8_2nd
                        | OpKind::Immediate16
                        | OpKind::Immediate32
                        | OpKind::Immediate64
                        | OpKind::Immediate8to16
                        | OpKind::Immediate8to32
                        | OpKind::Immediate8to64
                        | OpKind::Immediate32to64 => {
                            let v = insn.try_immediate(i as u32).ok()?;
                            if !near(start, v) {
                                far.push(v);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Some(Movable {
            code: code.clone(),
            distances,
            far,
            checked: std::sync::OnceLock::new(),
        })
    }

    /// The code moved to run at `addr`, exactly as generated there; `None` when the
    /// generator would decide differently there (generate it afresh).
    pub fn at(&self, addr: u64) -> Option<Code> {
        if addr == self.code.addr {
            return Some(self.code.clone());
        }
        if !self.distances.iter().all(|&(_, to)| near(addr, to))
            || self.far.iter().any(|&v| near(addr, v))
        {
            return None;
        }
        let delta = addr.wrapping_sub(self.code.addr) as i64;
        let mut bytes = self.code.bytes.clone();
        for &(at, _) in &self.distances {
            let field: &mut [u8; 4] = bytes.get_mut(at..at + 4)?.try_into().ok()?;
            let moved = i64::from(i32::from_le_bytes(*field)).checked_sub(delta)?;
            *field = i32::try_from(moved).ok()?.to_le_bytes();
        }
        Some(Code {
            bytes,
            addr,
            ..self.code.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snippet::compile;
    use crate::snippet::env::{MapEnv, PointInfo, VarPlace};
    use crate::snippet::types::{FnSig, Type};

    const AT: u64 = 0x5555_0000_0000;

    fn env() -> MapEnv {
        let sig = |params| FnSig {
            ret: Type::INT,
            params: Some(params),
            variadic: false,
            printf_format: None,
        };
        MapEnv {
            point: PointInfo {
                internal: true,
                ..PointInfo::default()
            },
            ..MapEnv::default()
        }
        .var("n", Type::LONG, VarPlace::Absolute(AT + 0x1000))
        .var("k", Type::INT, VarPlace::Absolute(AT - 0x6fff_0000))
        .var("far", Type::LONG, VarPlace::Absolute(AT + 0x1_0000_0000))
        .var("low", Type::LONG, VarPlace::Absolute(0x60_1000))
        .func("near_f", AT + 0x4000_0000, sig(vec![]))
        .func("puts", AT - 0x2_0000_0000, sig(vec![Type::char_ptr()]))
    }

    /// Snippets reaching variables and functions near and far, the runtime's counter and
    /// timers, string data and branches within the code.
    const SNIPPETS: &[&str] = &[
        "n++;",
        "far++;",
        "low = 2;",
        "puts(\"far\");",
        "k += 3; far = n;",
        "if (n < 0 || k == 3) { n++; far--; } else low = 2;",
        "near_f(); n = (long)&k; low = (long)&far;",
        "puts(\"moved\"); near_f(); low++;",
        "__gsh_rt_count(3, 0xffffffffffffffc0, 0x555500004000);",
        "__gsh_rt_count(1, 0, 0, 0x555510005000);",
        "__gsh_rt_time_enter(2, 0xffffffffffffffc0, 0x555500004000);",
        "__gsh_rt_time_exit(2, 0xffffffffffffffc0, 0x555500004000);",
    ];

    /// A call to a function that lies within the code's own range where it was first
    /// generated (a layout's first try may put it anywhere) looks like a branch inside the
    /// code: moving it would keep its distance. The first move is checked, and the code is
    /// then generated wherever it goes.
    #[test]
    fn a_target_inside_the_first_codes_range_is_not_moved_wrong() {
        let env = MapEnv {
            point: PointInfo {
                internal: true,
                ..PointInfo::default()
            },
            ..MapEnv::default()
        }
        .func(
            "inner_f",
            AT + 8,
            FnSig {
                ret: Type::INT,
                params: Some(vec![]),
                variadic: false,
                printf_format: None,
            },
        );
        let src = "inner_f(); inner_f();";
        let (program, diags) = crate::snippet::check_source(src, &env);
        let program = program.unwrap_or_else(|| panic!("{diags:?}"));
        let memo = Memo::new();
        code_at(&memo, &program, src, AT).expect("at AT");
        for to in [AT + 0x1000, AT + 0x2000, AT - 0x500] {
            let got = code_at(&memo, &program, src, to).expect("moved");
            let fresh = compile(src, &env, to).expect("fresh").code;
            assert_eq!(got, fresh, "at {to:#x}");
        }
    }

    /// Moving code generated at one address gives exactly the code generated at the other,
    /// or nothing where the generator would reach something differently there.
    #[test]
    fn moved_code_is_the_code_generated_there() {
        let env = env();
        let targets = [
            AT + 1,
            AT + 0x1234,
            AT - 0x7777,
            AT + 0x3fff_ffff,
            AT - 0x6ff0_0000,
            AT + 0x7000_1000,
            AT + 0x8000_0000,
            AT + 0xf000_0000,
            AT - 0x1_8000_0000,
            AT - 0x1_c000_0000,
            0x40_0000,
            0x7fff_f000_0000,
        ];
        let (mut moved, mut refused) = (0, 0);
        for src in SNIPPETS {
            let code = compile(src, &env, AT)
                .unwrap_or_else(|d| panic!("{src}: {d:?}"))
                .code;
            let m = Movable::new(&code).unwrap_or_else(|| panic!("{src}: not movable"));
            assert_eq!(m.at(AT).as_ref(), Some(&code), "{src}");
            for &to in &targets {
                let fresh = compile(src, &env, to).map(|c| c.code);
                match m.at(to) {
                    Some(c) => {
                        assert_eq!(Ok(c), fresh, "{src} moved to {to:#x}");
                        moved += 1;
                    }
                    None => refused += 1,
                }
            }
            // Nearby, where every answer is the same, it always moves.
            assert!(m.at(AT + 0x100).is_some(), "{src}");
        }
        assert!(moved > SNIPPETS.len() * 3, "only {moved} moves");
        assert!(
            refused > 0,
            "no answer ever changed: the test reaches nothing far"
        );
    }
}
