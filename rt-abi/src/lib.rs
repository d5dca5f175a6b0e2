//! The ABI between gsh and its runtime library `libgsh_rt.so`, defined once: the memory the
//! mutator reads from outside and generated code reaches into ([`layout`]), the measuring
//! descriptor a saved file carries ([`descriptor`]), the symbols the runtime exports and how
//! generated code calls them ([`exports`]), and, behind the `serde` feature, the results file
//! the runtime writes at exit ([`results`]).
//!
//! The runtime (`rt/`) uses these structs as its own, and the engine reads and writes by their
//! `offset_of!`s, so neither side can drift from the other; `rt/LAYOUT.md` documents them, and
//! a test parses its tables against [`Field`] lists here so the document cannot drift either.
//! Changing anything here that generated code or the mutator depends on means bumping
//! [`layout::ABI_VERSION`] (or the descriptor's [`descriptor::VERSION`]).
//!
//! `no_std` and without dependencies (`alloc` and `serde` are features for the engine), so the runtime carries nothing
//! it does not need. x86-64 Linux only, like the rest of gsh.

#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

/// One field of an ABI struct, as `rt/LAYOUT.md` must list it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The Rust field name, as the document writes it (in backquotes).
    pub name: &'static str,
    /// Byte offset from the start of the struct.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// Defines a `#[repr(C)]` struct and its `FIELDS` list (name, offset, size of every field,
/// from `offset_of!`), so the document test sees exactly the fields the code has.
macro_rules! abi_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// Every field with its offset and size, in order.
            pub const FIELDS: &'static [$crate::Field] = &[
                $( $crate::Field {
                    name: stringify!($field),
                    offset: core::mem::offset_of!($name, $field),
                    size: core::mem::size_of::<$ty>(),
                }, )*
            ];
        }
    };
}

pub mod descriptor;
pub mod exports;
pub mod layout;
#[cfg(feature = "serde")]
pub mod results;

pub use descriptor::PT_GSH_MEASURE;
pub use layout::ABI_VERSION;
