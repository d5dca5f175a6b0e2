//! Exception landing pads, from the LSDAs (`.gcc_except_table`) that `.eh_frame`'s FDEs point
//! to. A landing pad (a `catch` block, or the cleanup that runs destructors before unwinding
//! goes on) is reached only by the unwinder, never by a branch, so a CFG built by following
//! branches alone would lose it; with these, a call that may throw gets a `catch` edge to its
//! landing pad, as Dyninst's `CATCH` edges.
//!
//! The LSDA layout is GCC's (`libgcc/unwind-c.c`, `parse_lsda_header`): the landing-pad base
//! (`LPStart`, the function's start unless given), the type table's offset, then a table of
//! call-site records `(start, length, landing pad, action)` whose start is relative to the
//! function's start and whose landing pad, when not zero, is relative to `LPStart`.

use gimli::{CieOrFde, Pointer, UnwindSection};

use crate::addr::LinkAddr;
use crate::elf::Binary;

/// Call-site records read from one LSDA at the most: a bound against a corrupt length field.
const MAX_CALL_SITES: usize = 1 << 16;

/// Every call-site range of a module that has a landing pad, sorted by start.
#[derive(Clone, Debug, Default)]
pub struct LandingPads {
    /// `(start, end, landing pad)`.
    ranges: Vec<(u64, u64, u64)>,
}

impl LandingPads {
    /// Reads the landing pads of every FDE with an LSDA in `binary`. Malformed entries are
    /// skipped: what could be read is kept.
    pub fn read(binary: &Binary) -> LandingPads {
        let mut ranges = Vec::new();
        let Some((eh_frame, bases)) = crate::symbols::ehframe::eh_frame(binary) else {
            return LandingPads::default();
        };
        let mut entries = eh_frame.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) = partial.parse(UnwindSection::cie_from_offset) else {
                continue;
            };
            let lsda = match fde.lsda() {
                Some(Pointer::Direct(a)) => a,
                Some(Pointer::Indirect(slot)) => match read_u64(binary, slot) {
                    Some(a) => a,
                    None => continue,
                },
                None => continue,
            };
            parse_lsda(binary, lsda, fde.initial_address(), &mut ranges);
        }
        ranges.sort_unstable();
        ranges.dedup();
        LandingPads { ranges }
    }

    /// The landing pad of a call instruction at `addr`, if the call may throw into one.
    pub fn for_call(&self, addr: LinkAddr) -> Option<LinkAddr> {
        let i = self.ranges.partition_point(|r| r.0 <= addr.0);
        let &(start, end, pad) = self.ranges.get(i.checked_sub(1)?)?;
        (addr.0 >= start && addr.0 < end).then_some(LinkAddr(pad))
    }

    /// True when the binary has no call that may throw into a landing pad (a C program, usually).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

fn read_u64(binary: &Binary, addr: u64) -> Option<u64> {
    let bytes = binary.bytes_at(LinkAddr(addr), 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Appends the call-site ranges with a landing pad of the LSDA at `lsda`, for the code
/// starting at `func_start`.
fn parse_lsda(binary: &Binary, lsda: u64, func_start: u64, out: &mut Vec<(u64, u64, u64)>) {
    let Some(section) = binary.section_at(LinkAddr(lsda)) else {
        return;
    };
    let avail = section.addr.0 + section.size - lsda;
    let Some(bytes) = binary.bytes_at(LinkAddr(lsda), avail) else {
        return;
    };
    let mut r = Reader {
        bytes,
        pos: 0,
        base: lsda,
    };
    let _ = (|| -> Option<()> {
        let lp_enc = r.u8()?;
        let lp_start = if lp_enc == DW_EH_PE_OMIT {
            func_start
        } else {
            r.encoded(lp_enc)?
        };
        let ttype_enc = r.u8()?;
        if ttype_enc != DW_EH_PE_OMIT {
            r.uleb()?;
        }
        let cs_enc = r.u8()?;
        let cs_len = r.uleb()?;
        let end = r.pos.checked_add(usize::try_from(cs_len).ok()?)?;
        let mut n = 0;
        while r.pos < end && n < MAX_CALL_SITES {
            n += 1;
            let start = r.encoded(cs_enc)?;
            let len = r.encoded(cs_enc)?;
            let pad = r.encoded(cs_enc)?;
            r.uleb()?;
            if pad != 0 && len != 0 {
                let from = func_start.wrapping_add(start);
                out.push((from, from.wrapping_add(len), lp_start.wrapping_add(pad)));
            }
        }
        Some(())
    })();
}

const DW_EH_PE_OMIT: u8 = 0xff;

/// A cursor over an LSDA's bytes, reading the DWARF EH pointer encodings.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The LSDA's address, for pc-relative values.
    base: u64,
}

impl Reader<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.bytes.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        b.try_into().ok()
    }

    fn uleb(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn sleb(&mut self) -> Option<i64> {
        let mut v = 0i64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Some(v);
            }
            if shift > 70 {
                return None;
            }
        }
    }

    /// A value in DWARF EH encoding `enc`; only absolute and pc-relative applications occur
    /// in LSDAs, others are refused.
    fn encoded(&mut self, enc: u8) -> Option<u64> {
        // DW_EH_PE_indirect: a pointer to the value; GCC never uses it in call-site tables.
        if enc & 0x80 != 0 {
            return None;
        }
        let at = self.base.wrapping_add(self.pos as u64);
        let raw = match enc & 0x0f {
            0x00 => u64::from_le_bytes(self.fixed::<8>()?),
            0x01 => self.uleb()?,
            0x02 => u64::from(u16::from_le_bytes(self.fixed::<2>()?)),
            0x03 => u64::from(u32::from_le_bytes(self.fixed::<4>()?)),
            0x04 => u64::from_le_bytes(self.fixed::<8>()?),
            0x09 => self.sleb()? as u64,
            0x0a => i16::from_le_bytes(self.fixed::<2>()?) as i64 as u64,
            0x0b => i32::from_le_bytes(self.fixed::<4>()?) as i64 as u64,
            0x0c => u64::from_le_bytes(self.fixed::<8>()?),
            _ => return None,
        };
        match enc & 0x70 {
            0x00 => Some(raw),
            0x10 => Some(at.wrapping_add(raw)),
            _ => None,
        }
    }
}
