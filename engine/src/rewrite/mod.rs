//! Writing a new ELF file: the original binary plus new code and data segments and patches over
//! existing code bytes. Trampolines and snippets are built elsewhere; this layer only places
//! bytes and keeps the file loadable.
//!
//! # Layout
//!
//! A [`Rewrite`] fixes its layout when it is created, so [`Rewrite::alloc_code`] and
//! [`Rewrite::alloc_data`] hand out final link addresses that callers can assemble rel32 jumps
//! and RIP-relative operands against. After the last existing segment come, each page-aligned:
//!
//! 1. a read-only `PT_LOAD` (only when needed, see below);
//! 2. the `R E` code segment (`.gsh.text`), with a *code reserve* of address space (256 MiB by
//!    default; address space only, never file bytes) so code can keep growing after data has
//!    been allocated;
//! 3. the `RW` data segment (`.gsh.data`), right after the reserve.
//!
//! No segment is ever writable and executable. Everything must end within 2 GiB of the lowest
//! code address, or allocation fails. Original bytes never move except as described next, so
//! PIE stays PIE (`ET_DYN`, addresses relative), `ET_EXEC` stays `ET_EXEC`, and `PT_GNU_RELRO`,
//! `PT_GNU_STACK`, `PT_TLS`, `PT_DYNAMIC`, `PT_GNU_EH_FRAME` keep their values.
//!
//! # Room for program headers
//!
//! The kernel and `ld.so` find the program headers through `e_phoff`/`AT_PHDR` and `PT_PHDR`,
//! and conventionally the table sits right after the ELF header inside the first segment. New
//! segments need new entries, so the table must grow. Three tactics, tried in order:
//!
//! - [`Room::Free`]: the bytes after the table are unused (a file gsh rewrote before).
//! - [`Room::Move`] (preferred, and what linkers' own layouts allow): the sections right after
//!   the table — `.interp`, `.note.*`, and if needed `.gnu.hash`, `.dynsym`, `.dynstr`,
//!   version and dynamic relocation tables — move unchanged into the new read-only segment, and
//!   every reference to them follows: `PT_INTERP`, `PT_NOTE`, `PT_GNU_PROPERTY`, the dynamic
//!   tags (`DT_GNU_HASH`, `DT_SYMTAB`, ...), section headers and symbols. Only sections that
//!   nothing but headers and dynamic tags refer to move; code never points at them. This keeps
//!   the table at offset 64 in the first segment, which every kernel and loader accepts.
//! - [`Room::Relocate`] (fallback: no section headers, or something unmovable such as a static
//!   executable's IRELATIVE table sits after the table): the table itself moves into the new
//!   read-only segment and `e_phoff`/`PT_PHDR` point there. Linux 5.18 and later derive
//!   `AT_PHDR` from the segment that holds the table, and glibc's `ld.so` finds a library's
//!   table the same way; older kernels compute `AT_PHDR` as the first segment's load address
//!   plus `e_phoff`, so the segment is placed where that sum is right (its `vaddr - offset`
//!   equals the first segment's) whenever this costs under 64 MiB of padding.
//!
//! Beyond the new segments, a rewrite created with [`Options::extra_headers`] may add that many
//! non-loadable headers ([`Rewrite::add_phdr`]); they go at the end of the table.
//!
//! # Libraries to load
//!
//! [`Rewrite::add_needed`] makes `ld.so` load one more library: `.dynstr` is copied into the
//! new data segment with the library's name appended, `DT_STRTAB`/`DT_STRSZ` point at the
//! copy (the original stays, unchanged, for the section headers and anything else that reads
//! it), and a spare `DT_NULL` after the table's terminator becomes the `DT_NEEDED`. Linkers
//! leave such spares; one `DT_NULL` always stays to end the table. The same spares give a
//! library without `DT_INIT` its load-time hook ([`Rewrite::init`]); each is used once.
//!
//! The `PT_NOTE`-to-`PT_LOAD` trick was not used: it loses the notes that tools and `ld.so`
//! read (build id, `.note.gnu.property` for CET).
//!
//! # Sections
//!
//! When the input has section headers, the output has them too: moved sections get their new
//! addresses, and `.gsh.text`/`.gsh.data` describe the new segments, so `readelf`, `objdump`
//! and `gdb` read the result. The section header table and its name table are written anew at
//! the end of the file.

#![warn(missing_docs)]

mod emit;
mod plan;
mod raw;

use std::path::{Path, PathBuf};

use crate::addr::LinkAddr;
use crate::elf::{Binary, BinaryKind};

pub use plan::{Block, Room, DEFAULT_CODE_RESERVE};

/// The page size new segments are aligned to (x86-64's base page).
pub const PAGE: u64 = 0x1000;

/// Errors from rewriting a binary.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is an object file, core file or other non-loadable ELF.
    #[error("{path}: only executables and shared libraries can be rewritten, not {kind} files")]
    NotLoadable {
        /// The input file.
        path: PathBuf,
        /// What it is (`object`, `other`).
        kind: &'static str,
    },
    /// The input has no `PT_LOAD` segment.
    #[error("the file has no loadable segment")]
    NoLoadSegments,
    /// The file's headers are inconsistent in a way the rewriter cannot work around.
    #[error("malformed ELF: {detail}")]
    Malformed {
        /// Which header is wrong, and how.
        detail: String,
    },
    /// New code or data would lie beyond rel32 reach of the original code.
    #[error("out of reach: {detail}")]
    OutOfReach {
        /// What would be placed, and the limit it would cross.
        detail: String,
    },
    /// The code reserve is exhausted.
    #[error("the code reserve of {reserve:#x} bytes is full ({wanted:#x} more bytes asked for); create the rewrite with a larger reserve")]
    CodeReserveFull {
        /// The reserve's size in bytes ([`Options::code_reserve`]).
        reserve: u64,
        /// Bytes asked for beyond it.
        wanted: u64,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlign(u64),
    /// A write to bytes the rewriter cannot change.
    #[error("cannot write {len} bytes at {addr}: {why}")]
    BadWrite {
        /// Link address of the first byte to write.
        addr: LinkAddr,
        /// Bytes to write.
        len: usize,
        /// Why they cannot be written (outside every segment, in bytes the file does not hold...).
        why: String,
    },
    /// A shared library's initializer cannot be hooked (see [`Rewrite::init`]).
    #[error("cannot run code at load time: {detail}")]
    NoInitHook {
        /// What the file lacks.
        detail: String,
    },
    /// The dynamic table has no spare entry left for a new tag (see [`Rewrite::add_needed`]).
    #[error("no room for a new dynamic entry: {detail}")]
    NoDynamicRoom {
        /// What the table lacks.
        detail: String,
    },
    /// More program headers than the rewrite was created with room for.
    #[error("no room for another program header: the rewrite was created with room for {0} extra")]
    NoHeaderRoom(usize),
    /// The output file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The output file.
        path: PathBuf,
        #[source]
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// Result with the rewriter's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A rewrite in progress: new code, new data and patches over one binary's existing bytes.
pub struct Rewrite<'a> {
    binary: &'a Binary,
    orig: plan::Original,
    plan: plan::Plan,
    code: Vec<u8>,
    data: Vec<u8>,
    /// Patches over original bytes, applied in order: `(file offset, bytes)`.
    patches: Vec<(u64, Vec<u8>)>,
    /// A new `e_entry`, when [`Rewrite::set_entry`] was called.
    entry: Option<u64>,
    /// Non-loadable headers to append ([`Rewrite::add_phdr`]).
    extra_phdrs: Vec<raw::Phdr>,
    extra_headers: usize,
    /// File offsets of the spare dynamic entries already given a tag.
    claimed: Vec<u64>,
}

/// How a [`Rewrite`] is laid out; fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Address space for new code (see [`DEFAULT_CODE_RESERVE`]).
    pub code_reserve: u64,
    /// Program headers [`Rewrite::add_phdr`] may add.
    pub extra_headers: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            code_reserve: DEFAULT_CODE_RESERVE,
            extra_headers: 0,
        }
    }
}

/// Where a shared library's load-time hook goes ([`Rewrite::init`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitHook {
    /// `DT_INIT` exists: the hook replaces it and must call (or jump to) the old function.
    Chain {
        /// The initializer `DT_INIT` names now.
        old: LinkAddr,
        /// File offset of the `DT_INIT` entry in the dynamic table.
        entry_offset: u64,
    },
    /// No `DT_INIT`, but the dynamic table has a spare `DT_NULL` after its terminator: the
    /// terminator becomes `DT_INIT`, and the spare one ends the table.
    Spare {
        /// File offset of the terminating `DT_NULL` entry that becomes `DT_INIT`.
        entry_offset: u64,
    },
}

/// What [`Rewrite::save`] did, for reports and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// How the program header table got room: `copy` (nothing new), `free`, `move`, `relocate`.
    pub tactic: &'static str,
    /// Program headers in the input.
    pub phdrs_before: usize,
    /// Program headers in the output.
    pub phdrs_after: usize,
    /// Sections that moved to the new read-only segment.
    pub moved_sections: Vec<String>,
    /// The input file's size in bytes.
    pub size_before: u64,
    /// The output file's size in bytes.
    pub size_after: u64,
}

impl<'a> Rewrite<'a> {
    /// Starts a rewrite of `binary` with the default code reserve.
    pub fn new(binary: &'a Binary) -> Result<Rewrite<'a>> {
        Rewrite::with_code_reserve(binary, DEFAULT_CODE_RESERVE)
    }

    /// Starts a rewrite whose code segment may grow to `reserve` bytes (rounded up to a page,
    /// and shrunk if the binary is so large that the reserve would break rel32 reach).
    pub fn with_code_reserve(binary: &'a Binary, reserve: u64) -> Result<Rewrite<'a>> {
        Rewrite::with_options(
            binary,
            Options {
                code_reserve: reserve,
                ..Options::default()
            },
        )
    }

    /// Starts a rewrite laid out as `options` says.
    pub fn with_options(binary: &'a Binary, options: Options) -> Result<Rewrite<'a>> {
        let kind = match binary.kind() {
            BinaryKind::Executable | BinaryKind::PieExecutable | BinaryKind::SharedLibrary => None,
            BinaryKind::Relocatable => Some("relocatable object"),
            BinaryKind::Other => Some("core or unknown-type"),
        };
        if let Some(kind) = kind {
            return Err(Error::NotLoadable {
                path: binary.path().to_owned(),
                kind,
            });
        }
        let orig = plan::Original::read(binary)?;
        let plan = plan::make_plan(binary, &orig, options.code_reserve, options.extra_headers)?;
        Ok(Rewrite {
            binary,
            orig,
            plan,
            code: Vec::new(),
            data: Vec::new(),
            patches: Vec::new(),
            entry: None,
            extra_phdrs: Vec::new(),
            extra_headers: options.extra_headers,
            claimed: Vec::new(),
        })
    }

    /// Adds a non-loadable program header of type `p_type` describing `size` bytes at `addr`
    /// (its file offset is derived from the segment holding `addr`: new data, new code, or an
    /// original segment). Goes at the end of the table. Fails beyond
    /// [`Options::extra_headers`], or for a `PT_LOAD` (new segments come from allocation).
    pub fn add_phdr(&mut self, p_type: u32, addr: LinkAddr, size: u64) -> Result<()> {
        if self.extra_phdrs.len() >= self.extra_headers {
            return Err(Error::NoHeaderRoom(self.extra_headers));
        }
        if p_type == object::elf::PT_LOAD {
            return Err(Error::Malformed {
                detail: "add_phdr adds only non-loadable headers".into(),
            });
        }
        self.extra_phdrs.push(raw::Phdr {
            p_type,
            flags: object::elf::PF_R,
            // Filled in when the segments' offsets are known (emit).
            offset: 0,
            vaddr: addr.0,
            paddr: addr.0,
            filesz: size,
            memsz: size,
            align: 8,
        });
        Ok(())
    }

    /// Makes `ld.so` load the library `name` (normally an absolute path) with the output, as a
    /// `DT_NEEDED` after the existing ones. Allocates a copy of `.dynstr` in the data segment.
    /// Fails with [`Error::NoDynamicRoom`] when the file has no dynamic string table or no
    /// spare `DT_NULL`; then nothing changed.
    pub fn add_needed(&mut self, name: &[u8]) -> Result<()> {
        let no_room = |detail: &str| Error::NoDynamicRoom {
            detail: detail.to_owned(),
        };
        if name.is_empty() || name.contains(&0) {
            return Err(no_room(
                "a library name must be non-empty and hold no NUL byte",
            ));
        }
        let entries = self.orig.dynamic(self.binary.data());
        let tag = |want: u32| {
            entries
                .iter()
                .find(|&&(_, t, _)| t == i64::from(want))
                .map(|&(at, _, v)| (at, v))
        };
        let (Some((strtab_at, strtab)), Some((strsz_at, strsz))) =
            (tag(object::elf::DT_STRTAB), tag(object::elf::DT_STRSZ))
        else {
            return Err(no_room("the file has no dynamic string table"));
        };
        let spare = self
            .spare_dynamic_entry()
            .ok_or_else(|| no_room("the dynamic table has no spare DT_NULL entry"))?;
        let old = self
            .binary
            .bytes_at(LinkAddr(strtab), strsz)
            .filter(|b| b.len() as u64 == strsz)
            .ok_or_else(|| Error::Malformed {
                detail: format!(
                    "DT_STRTAB {strtab:#x} with DT_STRSZ {strsz:#x} is not in the file's bytes"
                ),
            })?;
        let mut table = old.to_vec();
        table.extend_from_slice(name);
        table.push(0);
        let at = self.alloc_data_with(&table, 8)?;
        let le = |v: u64| v.to_le_bytes().to_vec();
        self.patches.push((strtab_at + 8, le(at.0)));
        self.patches.push((strsz_at + 8, le(table.len() as u64)));
        self.patches
            .push((spare, le(u64::from(object::elf::DT_NEEDED))));
        self.patches.push((spare + 8, le(strsz)));
        self.claimed.push(spare);
        Ok(())
    }

    /// The file offset of the next unused `DT_NULL` after the table's terminator that has
    /// another `DT_NULL` after it (the one that stays the terminator).
    fn spare_dynamic_entry(&self) -> Option<u64> {
        let data = self.binary.data();
        let dynamic = self
            .orig
            .phdrs
            .iter()
            .find(|p| p.p_type == object::elf::PT_DYNAMIC)?;
        let used = self.orig.dynamic(data).len() as u64;
        let end = dynamic.offset + dynamic.filesz;
        let is_null = |at: u64| {
            at + raw::DYN_SIZE <= end
                && raw::slice(data, at, raw::DYN_SIZE, "the dynamic table")
                    .is_ok_and(|b| raw::u64_at(b, 0) == u64::from(object::elf::DT_NULL))
        };
        (used..)
            .map(|i| dynamic.offset + i * raw::DYN_SIZE)
            .take_while(|&at| is_null(at))
            .find(|&at| !self.claimed.contains(&at) && is_null(at + raw::DYN_SIZE))
    }

    /// Makes the output start at `addr` (`e_entry`) instead of the original entry point.
    pub fn set_entry(&mut self, addr: LinkAddr) {
        self.entry = Some(addr.0);
    }

    /// How a function can be made to run when the output is loaded as a library: through
    /// `DT_INIT`, which `ld.so` calls before `DT_INIT_ARRAY`. Fails when the file has no
    /// dynamic table, or has no `DT_INIT` and no spare `DT_NULL` to turn into one.
    pub fn init(&self) -> Result<InitHook> {
        let data = self.binary.data();
        let entries = self.orig.dynamic(data);
        if let Some(&(at, _, v)) = entries
            .iter()
            .find(|&&(_, t, _)| t == i64::from(object::elf::DT_INIT))
        {
            return Ok(InitHook::Chain {
                old: LinkAddr(v),
                entry_offset: at,
            });
        }
        if !self
            .orig
            .phdrs
            .iter()
            .any(|p| p.p_type == object::elf::PT_DYNAMIC)
        {
            return Err(Error::NoInitHook {
                detail: "the file has no dynamic table".into(),
            });
        }
        let Some(entry_offset) = self.spare_dynamic_entry() else {
            return Err(Error::NoInitHook {
                detail:
                    "the library has no DT_INIT and its dynamic table has no spare entry for one"
                        .into(),
            });
        };
        Ok(InitHook::Spare { entry_offset })
    }

    /// Points `DT_INIT` at `addr`, as `hook` (from [`Rewrite::init`]) says.
    pub fn set_init(&mut self, hook: InitHook, addr: LinkAddr) {
        let (at, tag) = match hook {
            InitHook::Chain { entry_offset, .. } => (entry_offset, None),
            InitHook::Spare { entry_offset } => (entry_offset, Some(object::elf::DT_INIT)),
        };
        if let Some(tag) = tag {
            self.patches
                .push((at, u64::from(tag).to_le_bytes().to_vec()));
            self.claimed.push(at);
        }
        self.patches.push((at + 8, addr.0.to_le_bytes().to_vec()));
    }

    /// True when the input already has a program header of type `p_type`.
    pub fn has_phdr(&self, p_type: u32) -> bool {
        self.orig.phdrs.iter().any(|p| p.p_type == p_type)
    }

    /// The binary being rewritten.
    pub fn binary(&self) -> &'a Binary {
        self.binary
    }

    /// How the program header table will get room for the new segments.
    pub fn room(&self) -> &Room {
        &self.plan.room
    }

    /// The address of the code segment and the size of its reserve.
    pub fn code_region(&self) -> (LinkAddr, u64) {
        (LinkAddr(self.plan.code_vaddr), self.plan.code_reserve)
    }

    /// The address of the data segment.
    pub fn data_base(&self) -> LinkAddr {
        LinkAddr(self.plan.data_vaddr)
    }

    /// Reserves `size` bytes of code (filled with `int3` until written) aligned to `align`, in
    /// the new `R E` segment, and returns their final link address.
    pub fn alloc_code(&mut self, size: u64, align: u64) -> Result<LinkAddr> {
        let start = align_up(self.plan.code_vaddr + self.code.len() as u64, align)?;
        let end = start.checked_add(size).ok_or(Error::CodeReserveFull {
            reserve: self.plan.code_reserve,
            wanted: size,
        })?;
        if end > self.plan.code_vaddr + self.plan.code_reserve {
            return Err(Error::CodeReserveFull {
                reserve: self.plan.code_reserve,
                wanted: size,
            });
        }
        // int3 in the padding and unwritten space: a stray jump traps instead of sliding.
        self.code
            .resize((end - self.plan.code_vaddr) as usize, 0xcc);
        Ok(LinkAddr(start))
    }

    /// Reserves `size` zeroed bytes aligned to `align` in the new `RW` segment and returns
    /// their final link address.
    pub fn alloc_data(&mut self, size: u64, align: u64) -> Result<LinkAddr> {
        let start = align_up(self.plan.data_vaddr + self.data.len() as u64, align)?;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= self.plan.reach_end);
        let Some(end) = end else {
            return Err(Error::OutOfReach {
                detail: format!(
                    "{size:#x} more bytes of data would end past {:#x}",
                    self.plan.reach_end
                ),
            });
        };
        self.data.resize((end - self.plan.data_vaddr) as usize, 0);
        Ok(LinkAddr(start))
    }

    /// Allocates data holding `bytes` (see [`Rewrite::alloc_data`]).
    pub fn alloc_data_with(&mut self, bytes: &[u8], align: u64) -> Result<LinkAddr> {
        let addr = self.alloc_data(bytes.len() as u64, align)?;
        self.write(addr, bytes)?;
        Ok(addr)
    }

    /// Writes `bytes` at `addr`: inside allocated code or data, or over original bytes backed
    /// by the file (code patches). A later write over the same bytes wins.
    pub fn write(&mut self, addr: LinkAddr, bytes: &[u8]) -> Result<()> {
        let len = bytes.len() as u64;
        let bad = |why: &str| Error::BadWrite {
            addr,
            len: bytes.len(),
            why: why.to_owned(),
        };
        let end = addr
            .0
            .checked_add(len)
            .ok_or_else(|| bad("the range wraps around"))?;
        for (base, buf) in [
            (self.plan.code_vaddr, &mut self.code),
            (self.plan.data_vaddr, &mut self.data),
        ] {
            let reserved_end = base + buf.len() as u64;
            if addr.0 >= base && addr.0 < base.max(reserved_end) {
                if end > reserved_end {
                    return Err(bad("it runs past the end of what was allocated"));
                }
                let at = (addr.0 - base) as usize;
                buf[at..at + bytes.len()].copy_from_slice(bytes);
                return Ok(());
            }
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let segment = self
            .orig
            .loads()
            .find(|p| addr.0 >= p.vaddr && addr.0 - p.vaddr < p.filesz);
        let Some(segment) = segment else {
            return Err(bad(
                "it is neither allocated by this rewrite nor backed by the file's bytes",
            ));
        };
        if end - segment.vaddr > segment.filesz {
            return Err(bad("it runs past the end of the segment's file bytes"));
        }
        let offset = segment.offset + (addr.0 - segment.vaddr);
        if offset + len > self.binary.data().len() as u64 {
            return Err(bad("the segment claims bytes past the end of the file"));
        }
        if offset < self.protected_end() {
            return Err(bad(
                "it overlaps the ELF or program headers or the sections moved to make room for them",
            ));
        }
        self.patches.push((offset, bytes.to_vec()));
        Ok(())
    }

    /// File offsets below this hold headers or bytes that move; patches may not touch them.
    fn protected_end(&self) -> u64 {
        let table_end = self.orig.phoff + self.plan.max_phnum as u64 * raw::PHDR_SIZE;
        match &self.plan.room {
            Room::Move(block) => table_end.max(block.old_offset + block.len),
            _ => table_end.max(raw::EHDR_SIZE),
        }
    }

    /// True when nothing was allocated: the output is the input plus patches.
    fn only_patches(&self) -> bool {
        self.code.is_empty()
            && self.data.is_empty()
            && self.entry.is_none()
            && self.extra_phdrs.is_empty()
    }

    /// Writes the new ELF to `out` (mode 0755), replacing any file there. The file is written
    /// beside `out` and renamed into place, so a running copy of `out` is never modified.
    pub fn save(&self, out: &Path) -> Result<Summary> {
        let (bytes, summary) = emit::emit(self)?;
        write_executable(out, &bytes)?;
        Ok(summary)
    }

    /// The bytes [`Rewrite::save`] would write.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        emit::emit(self).map(|(bytes, _)| bytes)
    }
}

fn align_up(x: u64, align: u64) -> Result<u64> {
    if !align.is_power_of_two() {
        return Err(Error::BadAlign(align));
    }
    x.checked_add(align - 1)
        .map(|v| v & !(align - 1))
        .ok_or(Error::BadAlign(align))
}

fn write_executable(out: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let name = out.file_name().ok_or_else(|| Error::Io {
        path: out.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".gsh-{}.tmp", std::process::id()));
    let tmp = out.with_file_name(tmp_name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&tmp)
            .map_err(io(out))?;
        file.write_all(bytes).map_err(io(out))?;
        // The mode given to open is masked by the umask; the output must be executable.
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(io(out))?;
        drop(file);
        std::fs::rename(&tmp, out).map_err(io(out))
    })();
    if result.is_err() {
        // Best effort: the temporary file is ours, and may not even exist.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests;
