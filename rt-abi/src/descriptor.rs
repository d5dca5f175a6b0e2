//! The measuring descriptor: how a binary that gsh rewrote (`save`) finds the runtime.
//!
//! `save` puts a descriptor in the file's new data segment, [`ALIGN`]-aligned, and points a
//! [`PT_GSH_MEASURE`] program header at it (header, strings and table); the runtime's
//! constructor fills in the fields it owns and generated code reads them RIP-relatively
//! ([`TLS_OFFSET_AT`], [`THREAD_FN_AT`], [`fn_at`]). All offsets inside are relative to the
//! descriptor, never pointers, so a PIE needs no relocations. [`encode`] (feature `alloc`) is
//! the one writer; `rt/LAYOUT.md` ("Measuring descriptor") documents the layout.

use core::mem::offset_of;
use core::sync::atomic::{AtomicI64, AtomicU64};

use crate::exports::Event;

/// The program header type marking a descriptor (in the OS-specific range; `readelf` shows
/// `LOOS+0x4736801`).
pub const PT_GSH_MEASURE: u32 = 0x6473_6801;
/// The descriptor's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"GSHMEAS\0";
/// The layout version.
pub const VERSION: u32 = 1;
/// Bytes of the fixed part ([`Descriptor`]); strings follow.
pub const HEADER_SIZE: usize = 128;
/// Alignment of the descriptor in the data segment.
pub const ALIGN: u64 = 64;
/// Alignment of the unwind table inside the descriptor.
pub const UNWIND_ALIGN: usize = 16;
/// Version of the meta JSON text (`{"version":1,"slots":[...]}`).
pub const META_VERSION: u32 = 1;

abi_struct! {
    /// The descriptor's fixed part. Fields the runtime writes are atomics: generated code in
    /// other threads may read them.
    pub struct Descriptor {
        /// [`MAGIC`].
        pub magic: [u8; 8],
        /// [`VERSION`].
        pub version: u32,
        /// The saved code uses slots `0..slots`.
        pub slots: u32,
        /// Written by the runtime, last (release): `fs`-relative offset of its TLS word; 0 =
        /// no runtime, and generated code does nothing.
        pub tls_offset: AtomicI64,
        /// Written by the runtime: `gsh_rt_thread`.
        pub thread_fn: AtomicU64,
        /// Written by the runtime: the event functions, in [`Event::ALL`] order.
        pub fns: [AtomicU64; 8],
        /// Descriptor-relative offset of the results path (NUL-terminated; 0 = none).
        pub output_off: u32,
        /// Its length, without the NUL.
        pub output_len: u32,
        /// Descriptor-relative offset of the meta JSON text (NUL-terminated): what each slot
        /// measures.
        pub meta_off: u32,
        /// Its length, without the NUL.
        pub meta_len: u32,
        /// Descriptor-relative offset of `UnwindEntry[unwind_count]` ([`UNWIND_ALIGN`]-aligned)
        /// of the object's call sites, with link-time return addresses; 0 = none.
        pub unwind_off: u32,
        /// Entries in that table.
        pub unwind_count: u32,
        /// Descriptor-relative offset of `u64[coverage_count]` (8-aligned): block coverage
        /// counters, one per probed block, that generated code increments in place; 0 = none.
        pub coverage_off: u32,
        /// Counters in that array.
        pub coverage_count: u32,
    }
}

const _: () = {
    use core::mem::size_of;
    assert!(size_of::<Descriptor>() == HEADER_SIZE);
    assert!(offset_of!(Descriptor, tls_offset) == 16);
    assert!(offset_of!(Descriptor, thread_fn) == 24);
    assert!(offset_of!(Descriptor, fns) == 32);
    assert!(offset_of!(Descriptor, output_off) == 96);
    assert!(offset_of!(Descriptor, meta_off) == 104);
    assert!(offset_of!(Descriptor, unwind_off) == 112);
    assert!(offset_of!(Descriptor, coverage_off) == 120);
    assert!(Event::ALL.len() * 8 == offset_of!(Descriptor, output_off) - 32);
};

/// Where generated code finds the runtime's TLS offset: `[descriptor + TLS_OFFSET_AT]`.
pub const TLS_OFFSET_AT: u64 = offset_of!(Descriptor, tls_offset) as u64;
/// Where generated code finds `gsh_rt_thread`: `[descriptor + THREAD_FN_AT]`.
pub const THREAD_FN_AT: u64 = offset_of!(Descriptor, thread_fn) as u64;

/// A coverage counter whose value says its block has no probe (the patcher could not place
/// one): `save` writes it as the counter's initial value, and readers report the block as
/// unprobed rather than unexecuted.
pub const UNPROBED: u64 = u64::MAX;

/// The descriptor-relative offset of the coverage counters in descriptor bytes `d` that
/// [`encode_with_coverage`] wrote (0 when there are none).
pub fn coverage_off(d: &[u8]) -> u32 {
    let at = offset_of!(Descriptor, coverage_off);
    d.get(at..at + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Where generated code finds event function `e`: `[descriptor + fn_at(e)]`.
pub const fn fn_at(e: Event) -> u64 {
    offset_of!(Descriptor, fns) as u64 + 8 * e.index() as u64
}

/// The descriptor's bytes, as `save` writes them: the header, the results path and the meta
/// JSON (each NUL-terminated; the lengths do not count the NUL), then the unwind table
/// ([`UNWIND_ALIGN`]-aligned; `unwind` holds whole `UnwindEntry`s). `None` when it would not
/// fit the 32-bit offsets.
#[cfg(feature = "alloc")]
pub fn encode(
    slots: u32,
    output: &[u8],
    meta: &[u8],
    unwind: &[u8],
) -> Option<alloc::vec::Vec<u8>> {
    encode_with_coverage(slots, output, meta, unwind, 0)
}

/// [`encode`], then `coverage` zeroed block-coverage counters (8-aligned, after everything
/// else; [`coverage_off`] finds them).
#[cfg(feature = "alloc")]
pub fn encode_with_coverage(
    slots: u32,
    output: &[u8],
    meta: &[u8],
    unwind: &[u8],
    coverage: u32,
) -> Option<alloc::vec::Vec<u8>> {
    let put = |d: &mut [u8], at: usize, v: u32| d[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let mut d = alloc::vec![0u8; HEADER_SIZE];
    d[..8].copy_from_slice(&MAGIC);
    put(&mut d, offset_of!(Descriptor, version), VERSION);
    put(&mut d, offset_of!(Descriptor, slots), slots);
    let strings = [
        (
            offset_of!(Descriptor, output_off),
            offset_of!(Descriptor, output_len),
            output,
        ),
        (
            offset_of!(Descriptor, meta_off),
            offset_of!(Descriptor, meta_len),
            meta,
        ),
    ];
    for (off, len, text) in strings {
        let at = u32::try_from(d.len()).ok()?;
        put(&mut d, off, at);
        put(&mut d, len, u32::try_from(text.len()).ok()?);
        d.extend_from_slice(text);
        d.push(0);
    }
    if !unwind.is_empty() {
        d.resize(d.len().next_multiple_of(UNWIND_ALIGN), 0);
        let at = u32::try_from(d.len()).ok()?;
        let entry = core::mem::size_of::<crate::layout::UnwindEntry>();
        let count = u32::try_from(unwind.len() / entry).ok()?;
        put(&mut d, offset_of!(Descriptor, unwind_off), at);
        put(&mut d, offset_of!(Descriptor, unwind_count), count);
        d.extend_from_slice(unwind);
    }
    if coverage > 0 {
        d.resize(d.len().next_multiple_of(8), 0);
        let at = u32::try_from(d.len()).ok()?;
        put(&mut d, offset_of!(Descriptor, coverage_off), at);
        put(&mut d, offset_of!(Descriptor, coverage_count), coverage);
        d.resize(d.len().checked_add(8 * coverage as usize)?, 0);
    }
    u32::try_from(d.len()).ok()?;
    Some(d)
}
