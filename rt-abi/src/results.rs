//! The results file the runtime writes at exit (`rt/LAYOUT.md`, "Exit output"): one JSON
//! object. The runtime writes it by hand (it carries no serde); these types are the reader's,
//! and the runtime's tests parse its output with them and write it back, so a field added or
//! renamed on one side only fails there.
//!
//! `meta` is the measuring descriptor's JSON text, copied verbatim: its type is the writer's
//! (the engine's), a parameter here.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output<Meta> {
    /// `layout::ABI_VERSION` of the runtime that wrote it.
    pub abi: u32,
    /// Where wall times came from.
    pub clock: Clock,
    /// Nanoseconds per TSC tick (`tsc_mult` / 2^32): inline timers keep ticks.
    pub ns_per_tick: f64,
    /// Totals over all threads, non-zero slots only.
    pub slots: Vec<SlotTotal>,
    /// Every thread block, newest first.
    pub threads: Vec<Thread>,
    /// The served descriptor's meta JSON, `null` without one.
    pub meta: Option<Meta>,
    /// Every loaded object in `dl_iterate_phdr` order, the program first.
    #[serde(default)]
    pub modules: Vec<Module>,
    /// The served descriptor's block-coverage counters that are not zero, as `[index,
    /// count]` pairs in index order (absent when it has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<(u32, u64)>,
}

/// `Output::clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// `layout::CLOCK_RDTSC`.
    Rdtsc,
    /// `layout::CLOCK_MONOTONIC`.
    Monotonic,
}

/// One slot's values (in a thread, or summed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTotal {
    /// The slot.
    pub slot: u32,
    /// Calls (entries).
    pub count: u64,
    /// Nanoseconds, or TSC ticks for a slot timed inline.
    pub ns: u64,
}

/// One thread block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// Kernel thread id.
    pub tid: u32,
    /// False once the thread exited.
    pub alive: bool,
    /// Its non-zero slots.
    pub slots: Vec<SlotTotal>,
    /// Its call-path records.
    #[serde(default)]
    pub paths: Vec<Path>,
    /// Path activations that found the table full.
    pub other: Other,
    /// `ThreadHeader::abandoned_frames`.
    pub abandoned: u64,
    /// `ThreadHeader::unmatched_exits`.
    pub unmatched: u64,
    /// `ThreadHeader::untimed`.
    pub untimed: u64,
    /// `ThreadHeader::bad_slots`.
    pub bad_slots: u64,
}

/// One call-path record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Path {
    /// The slot (profiled function) the path ends in.
    pub slot: u32,
    /// Activations along the path.
    pub count: u64,
    /// Their inclusive nanoseconds.
    pub ns: u64,
    /// Return addresses, innermost first.
    pub ras: Vec<Hex>,
}

/// `ThreadHeader::other_count` and `other_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Other {
    /// Activations.
    pub count: u64,
    /// Their inclusive nanoseconds.
    pub ns: u64,
}

/// A loaded object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// Its path (the program's from `/proc/self/exe`).
    pub name: String,
    /// Its load bias: runtime address = link address + base.
    pub base: Hex,
}

/// An address written as a `0x`-prefixed hexadecimal string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Hex, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Hex;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address as a string such as \"0x401234\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Hex, E> {
                v.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .map(Hex)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(Visit)
    }
}
