//! Function bounds from `.eh_frame`: every FDE covers one contiguous range of code, which for
//! compiled code is a whole function (or its `.cold` part). This is what makes stripped
//! binaries explorable.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, UnwindContext, UnwindSection, X86_64,
};

use crate::addr::LinkAddr;
use crate::elf::Binary;

/// `.eh_frame` with the base addresses its pointer encodings are relative to, or `None`
/// when the binary has no `.eh_frame`.
pub fn eh_frame(
    binary: &Binary,
) -> Option<(EhFrame<gimli::EndianSlice<'_, LittleEndian>>, BaseAddresses)> {
    let section = binary.section(".eh_frame")?;
    let mut eh_frame = EhFrame::new(binary.section_data(section), LittleEndian);
    eh_frame.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(section.addr.0);
    if let Some(hdr) = binary.section(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(hdr.addr.0);
    }
    if let Some(text) = binary.section(".text") {
        bases = bases.set_text(text.addr.0);
    }
    if let Some(got) = binary.section(".got") {
        bases = bases.set_got(got.addr.0);
    }
    Some((eh_frame, bases))
}

/// The `(start, length)` of every FDE in `.eh_frame`. A malformed entry ends the walk: what
/// was read before it is kept.
pub fn fde_ranges(binary: &Binary) -> Vec<(LinkAddr, u64)> {
    let Some((eh_frame, bases)) = eh_frame(binary) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    loop {
        match entries.next() {
            Ok(Some(CieOrFde::Fde(partial))) => {
                if let Ok(fde) = partial.parse(UnwindSection::cie_from_offset) {
                    if fde.len() > 0 {
                        out.push((LinkAddr(fde.initial_address()), fde.len()));
                    }
                }
            }
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    out
}

/// Of the FDE starts in `starts`, those where the call frame is already set up at the first
/// instruction: the CFA is not `rsp + 8`, as it is at every function's entry (the return
/// address just pushed). Such a range is no function but a part of one (a `.cold` part gcc
/// split off after the prologue).
pub fn starts_inside_a_frame(
    binary: &Binary,
    starts: &foldhash::HashSet<u64>,
) -> foldhash::HashSet<u64> {
    let mut out = foldhash::HashSet::default();
    let Some((eh_frame, bases)) = eh_frame(binary) else {
        return out;
    };
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = eh_frame.entries(&bases);
    loop {
        match entries.next() {
            Ok(Some(CieOrFde::Fde(partial))) => {
                let Ok(fde) = partial.parse(UnwindSection::cie_from_offset) else {
                    continue;
                };
                let start = fde.initial_address();
                if !starts.contains(&start) {
                    continue;
                }
                let Ok(row) = fde.unwind_info_for_address(&eh_frame, &bases, &mut ctx, start)
                else {
                    continue;
                };
                let entry = matches!(
                    row.cfa(),
                    CfaRule::RegisterAndOffset { register, offset: 8 } if *register == X86_64::RSP
                );
                if !entry {
                    out.insert(start);
                }
            }
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    out
}
