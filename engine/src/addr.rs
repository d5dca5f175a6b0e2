//! Typed addresses. Mixing a file offset with a link address, or a link address with a runtime
//! address, is the classic PIE and shared-library bug; these newtypes make it a type error.

use std::fmt;

/// A virtual address as written in the ELF file, before any load bias is applied.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct LinkAddr(pub u64);

/// An offset from the start of the ELF file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct FileOffset(pub u64);

/// An address in a live process: a [`LinkAddr`] plus the module's load bias.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct RuntimeAddr(pub u64);

impl LinkAddr {
    /// The runtime address of this link address in a module loaded with `bias`.
    pub fn to_runtime(self, bias: u64) -> RuntimeAddr {
        RuntimeAddr(self.0.wrapping_add(bias))
    }

    /// This address moved forward by `delta` bytes.
    pub fn offset(self, delta: u64) -> LinkAddr {
        LinkAddr(self.0.wrapping_add(delta))
    }
}

impl RuntimeAddr {
    /// The link address of this runtime address in a module loaded with `bias`.
    pub fn to_link(self, bias: u64) -> LinkAddr {
        LinkAddr(self.0.wrapping_sub(bias))
    }
}

macro_rules! hex_display {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:#x})", stringify!($t), self.0)
            }
        }
        impl fmt::LowerHex for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    )*};
}
hex_display!(LinkAddr, FileOffset, RuntimeAddr);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_round_trips() {
        let link = LinkAddr(0x1139);
        let rt = link.to_runtime(0x5555_5555_4000);
        assert_eq!(rt, RuntimeAddr(0x5555_5555_5139));
        assert_eq!(rt.to_link(0x5555_5555_4000), link);
        assert_eq!(link.to_string(), "0x1139");
    }
}
