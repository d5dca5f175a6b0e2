//! What a live process has mapped, read from /proc: the mappings (`/proc/PID/maps`), the
//! modules they make up with their load biases, the auxiliary vector (`/proc/PID/auxv`), and
//! the free gaps where new memory can go within rel32 reach of some code.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::error::ProcessError;

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The first address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Offset into the mapped file.
    pub offset: u64,
    /// The mapped file's inode, 0 for anonymous memory.
    pub inode: u64,
    /// The file path, or a pseudo-name (`[heap]`, `[stack]`, `[vdso]`), or empty. For a
    /// module file deleted or replaced since it was mapped, the path gsh reads the mapped
    /// file through instead (`/proc/PID/exe`, `/proc/PID/map_files/START-END`).
    pub name: String,
    /// The name /proc/PID/maps gives when `name` is such a stand-in (`/usr/bin/x (deleted)`).
    pub deleted: Option<String>,
    /// The mapped file's device (`makedev(major, minor)`).
    pub dev: u64,
}

/// A module whose file was deleted or replaced since it was mapped, and that gsh cannot read
/// through /proc either: not a module, for the reason given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableModule {
    /// As /proc/PID/maps names it.
    pub name: String,
    /// Why gsh cannot read the mapped file.
    pub reason: String,
}

/// One ELF object mapped into the process: the executable or a shared library. When its
/// file was deleted or replaced since, `path` is a /proc path that reads the mapped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedModule {
    /// The file as /proc/PID/maps names it: a regular file still on disk, never a device, a
    /// deleted or replaced file, a memfd or a socket.
    pub path: PathBuf,
    /// Runtime address minus link address.
    pub bias: u64,
    /// The lowest address any of its mappings starts at.
    pub base: u64,
    /// Its executable mappings.
    pub text: Vec<Range<u64>>,
    /// True for the program's executable (/proc/PID/exe).
    pub is_main: bool,
}

/// Reads and parses /proc/PID/maps; a deleted or replaced module file is named by a path
/// that reads the mapped file (see [`stand_ins`]).
pub(crate) fn read_maps(pid: i32) -> Result<Vec<Mapping>, ProcessError> {
    let mut maps = read_raw_maps(pid)?;
    stand_ins(pid, &mut maps);
    Ok(maps)
}

/// True when a mapping's name is a file that was deleted (or replaced: renamed over) since it
/// was mapped, and was an ordinary file that could be a module: never a device, a memfd or
/// System V shared memory (`/dev/zero (deleted)` is a shared anonymous mapping).
fn deleted_file(m: &Mapping) -> bool {
    m.inode != 0
        && m.name.starts_with('/')
        && m.name.ends_with(" (deleted)")
        && !["/dev/", "/memfd:", "/SYSV"]
            .iter()
            .any(|p| m.name.starts_with(p))
}

/// Renames the mappings of each deleted or replaced file to a path that reads the very file
/// mapped (same device and inode): `/proc/PID/exe` for the executable, else
/// `/proc/PID/map_files/START-END` of its first mapping (readable with CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE only). Files with neither keep their `(deleted)` name and are not
/// modules ([`unreadable_modules`] says why). Only ELF files are renamed.
fn stand_ins(pid: i32, maps: &mut [Mapping]) {
    use std::os::unix::fs::MetadataExt;
    let mut found: HashMap<String, Option<String>> = HashMap::new();
    for i in 0..maps.len() {
        if !deleted_file(&maps[i]) {
            continue;
        }
        let name = maps[i].name.clone();
        let stand_in = found
            .entry(name.clone())
            .or_insert_with(|| {
                let (dev, inode) = (maps[i].dev, maps[i].inode);
                let first = maps.iter().find(|m| m.name == name)?;
                let candidates = [
                    format!("/proc/{pid}/exe"),
                    format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end),
                ];
                candidates.into_iter().find(|c| {
                    std::fs::metadata(c).is_ok_and(|md| {
                        md.file_type().is_file() && md.ino() == inode && md.dev() == dev
                    }) && is_elf(Path::new(c))
                })
            })
            .clone();
        if let Some(path) = stand_in {
            maps[i].deleted = Some(std::mem::replace(&mut maps[i].name, path));
        }
    }
}

/// True when the file at `path` starts with the ELF magic (4 bytes read).
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok())
        && magic == *b"\x7fELF"
}

/// The executable files mapped in process `pid` that were deleted or replaced since and that
/// gsh cannot read (see [`stand_ins`]), with the reason.
pub(crate) fn unreadable_modules(pid: i32) -> Result<Vec<UnreadableModule>, ProcessError> {
    let maps = read_maps(pid)?;
    let mut out: Vec<UnreadableModule> = Vec::new();
    for m in maps.iter().filter(|m| m.exec && deleted_file(m)) {
        if out.iter().any(|u| u.name == m.name) {
            continue;
        }
        let probe = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
        let why = match std::fs::metadata(&probe) {
            Err(e) => format!(
                "its file was deleted or replaced after the program mapped it, and gsh cannot \
                 read the mapped file through {probe} ({e}; that needs CAP_SYS_ADMIN or \
                 CAP_CHECKPOINT_RESTORE)"
            ),
            Ok(_) => "its file was deleted or replaced after the program mapped it, and what \
                      /proc reads of it is not an ELF file"
                .into(),
        };
        out.push(UnreadableModule {
            name: m.name.clone(),
            reason: why,
        });
    }
    Ok(out)
}

/// Reads and parses /proc/PID/maps as the kernel writes it.
fn read_raw_maps(pid: i32) -> Result<Vec<Mapping>, ProcessError> {
    let path = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NoSuchProcess(pid)
        } else {
            ProcessError::Io {
                path: path.clone().into(),
                detail: e.to_string(),
            }
        }
    })?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// One maps line: `start-end perms offset dev inode   name`.
fn parse_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms, offset, dev, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let name = fields.next().unwrap_or("").trim_start().to_owned();
    let (start, end) = range.split_once('-')?;
    let perms = perms.as_bytes();
    let (major, minor) = dev.split_once(':')?;
    let dev = libc::makedev(
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        read: perms.first() == Some(&b'r'),
        write: perms.get(1) == Some(&b'w'),
        exec: perms.get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        name,
        deleted: None,
        dev,
    })
}

/// Caches each module file's first `PT_LOAD` link address, so re-reading the modules after
/// every library load does not re-parse every ELF file.
#[derive(Default)]
pub(crate) struct ModuleCache {
    first_load: HashMap<PathBuf, u64>,
}

impl ModuleCache {
    /// The modules in `maps` (see [`may_be_module`]); `exe` is /proc/PID/exe's target.
    pub(crate) fn modules(
        &mut self,
        maps: &[Mapping],
        exe: Option<&Path>,
    ) -> Result<Vec<MappedModule>, ProcessError> {
        let mut order: Vec<PathBuf> = Vec::new();
        let mut by_path: HashMap<PathBuf, Vec<&Mapping>> = HashMap::new();
        for m in maps.iter().filter(|m| may_be_module(m)) {
            let path = PathBuf::from(&m.name);
            by_path
                .entry(path.clone())
                .or_insert_with(|| {
                    order.push(path);
                    Vec::new()
                })
                .push(m);
        }
        let mut out = Vec::new();
        for path in order {
            let ms = &by_path[&path];
            // The mapping of file offset 0 holds the ELF header and the first PT_LOAD; files
            // mapped without it (data files someone mmapped) are not modules.
            let Some(head) = ms.iter().find(|m| m.offset == 0) else {
                continue;
            };
            let Some(first) = self.first_load(&path)? else {
                continue;
            };
            let bias = head.start.wrapping_sub(first & !0xfff);
            // A deleted executable is read through /proc/PID/exe.
            let through_exe = head.deleted.is_some()
                && path.starts_with("/proc")
                && path.file_name().is_some_and(|f| f == "exe");
            out.push(MappedModule {
                is_main: exe == Some(path.as_path()) || through_exe,
                bias,
                base: ms.iter().map(|m| m.start).min().unwrap_or(head.start),
                text: ms
                    .iter()
                    .filter(|m| m.exec)
                    .map(|m| m.start..m.end)
                    .collect(),
                path,
            });
        }
        Ok(out)
    }

    /// The link address of `path`'s first `PT_LOAD`, or `None` when it is not an ELF file.
    /// Only the headers are read (at most [`HEADER_LIMIT`] bytes), never the whole file.
    fn first_load(&mut self, path: &Path) -> Result<Option<u64>, ProcessError> {
        if let Some(&v) = self.first_load.get(path) {
            return Ok(Some(v));
        }
        let Some(addr) = first_load_address(path) else {
            return Ok(None);
        };
        self.first_load.insert(path.to_owned(), addr);
        Ok(Some(addr))
    }
}

/// The most of a module file read to find its load address: the ELF header and its program
/// header table, which real files keep in their first page or two.
const HEADER_LIMIT: u64 = 64 << 10;

/// True when mapping `m` may belong to a module: a file still present at the path the kernel
/// names, and a regular one with the mapped inode. Never a device (`/dev/zero` behind a shared
/// anonymous mapping shows as `/dev/zero (deleted)`), a deleted or replaced file, a memfd,
/// System V shared memory, a socket or a pipe: reading one of those as a module could block or
/// never end.
pub(crate) fn may_be_module(m: &Mapping) -> bool {
    use std::os::unix::fs::MetadataExt;
    if m.inode == 0
        || !m.name.starts_with('/')
        || m.name.ends_with(" (deleted)")
        || m.name.starts_with("/memfd:")
        || m.name.starts_with("/SYSV")
    {
        return false;
    }
    // `metadata` follows symlinks, as the kernel did when it mapped the file.
    std::fs::metadata(&m.name).is_ok_and(|md| md.file_type().is_file() && md.ino() == m.inode)
}

/// The lowest `PT_LOAD` virtual address of the ELF file at `path`, reading its headers only.
fn first_load_address(path: &Path) -> Option<u64> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut head = Vec::new();
    file.take(HEADER_LIMIT).read_to_end(&mut head).ok()?;
    elf_first_load(&head)
}

/// The lowest `PT_LOAD` virtual address in a 64-bit little-endian ELF file's first bytes.
fn elf_first_load(head: &[u8]) -> Option<u64> {
    const PT_LOAD: u32 = 1;
    let u16_at = |at: usize| Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?));
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    if phentsize < 56 || phoff.checked_add(phnum.checked_mul(phentsize)?)? > head.len() {
        return None;
    }
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&e| u32_at(e) == Some(PT_LOAD))
        .map(|e| u64_at(e + 0x10))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .min()
}

/// The auxiliary vector: `AT_*` key to value.
pub(crate) fn auxv(pid: i32) -> Result<HashMap<u64, u64>, ProcessError> {
    let path = format!("/proc/{pid}/auxv");
    let bytes = std::fs::read(&path).map_err(|e| ProcessError::Io {
        path: path.into(),
        detail: e.to_string(),
    })?;
    Ok(bytes
        .chunks_exact(16)
        .map(|c| {
            let k = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
            let v = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
            (k, v)
        })
        .take_while(|&(k, _)| k != 0)
        .collect())
}

/// Reach of a rel32 operand, less a margin for instruction lengths.
const REACH: u64 = (1 << 31) - (1 << 20);
/// Gaps this close below the stack are left for the stack to grow into.
const STACK_GUARD: u64 = 64 << 20;
/// Nothing is placed below this (mmap_min_addr is usually 64 KiB).
const LOWEST: u64 = 0x10_0000;

/// A page-aligned start for `size` bytes in a free gap with the whole range within rel32 reach
/// of `near`. Candidates sit at the top of each gap, right below the next mapping, so they never
/// block the heap (`brk` grows up from below) nor the stack (skipped); the closest wins.
pub(crate) fn free_gap(maps: &[Mapping], near: u64, size: u64) -> Option<u64> {
    let size = size.div_ceil(0x1000) * 0x1000;
    let lo_limit = near.saturating_sub(REACH).max(LOWEST);
    let hi_limit = near.saturating_add(REACH);
    let mut sorted: Vec<&Mapping> = maps.iter().collect();
    sorted.sort_by_key(|m| m.start);
    let mut best: Option<(u64, u64)> = None;
    let mut prev_end = 0u64;
    for m in sorted.iter().copied() {
        let gap_lo = prev_end.max(lo_limit);
        let mut gap_hi = m.start.min(hi_limit);
        if m.name == "[stack]" {
            gap_hi = gap_hi.min(m.start.saturating_sub(STACK_GUARD));
        }
        prev_end = prev_end.max(m.end);
        if gap_hi < gap_lo + size {
            continue;
        }
        let start = (gap_hi - size) & !0xfff;
        if start < gap_lo {
            continue;
        }
        let dist = start.abs_diff(near).max((start + size).abs_diff(near));
        if dist < REACH && best.is_none_or(|(_, d)| dist < d) {
            best = Some((start, dist));
        }
    }
    best.map(|(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, name: &str) -> Mapping {
        Mapping {
            start,
            end,
            read: true,
            write: false,
            exec: false,
            offset: 0,
            inode: 0,
            name: name.into(),
            deleted: None,
            dev: 0,
        }
    }

    #[test]
    fn parses_a_maps_line() {
        let m = parse_line(
            "55d0c6a00000-55d0c6a01000 r-xp 00001000 fd:01 1234                       /usr/bin/cat",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x55d0c6a00000, 0x55d0c6a01000, 0x1000, 1234)
        );
        assert!(m.read && !m.write && m.exec);
        assert_eq!(m.name, "/usr/bin/cat");
        let anon = parse_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.name, "");
    }

    #[test]
    fn gap_sits_right_below_the_next_mapping_and_within_reach() {
        let maps = [
            map(0x5555_5555_4000, 0x5555_5555_9000, "/a.out"),
            map(0x5555_5600_0000, 0x5555_5602_0000, "[heap]"),
            map(0x7fff_f7d0_0000, 0x7fff_f7f0_0000, "/libc"),
            map(0x7fff_fffd_e000, 0x7fff_ffff_f000, "[stack]"),
        ];
        let at = free_gap(&maps, 0x5555_5555_5000, 0x10000).unwrap();
        assert_eq!(at, 0x5555_5555_4000 - 0x10000);
        let lib = free_gap(&maps, 0x7fff_f7d0_1000, 0x1000).unwrap();
        assert_eq!(lib, 0x7fff_f7d0_0000 - 0x1000);
        assert!(free_gap(&[map(LOWEST, u64::MAX - 1, "x")], 0x5000_0000, 0x1000).is_none());
    }
}
