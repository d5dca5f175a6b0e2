//! Finding a separate debug file, the way gdb does: `DIR/.build-id/xx/rest.debug` by build id,
//! then `.gnu_debuglink` next to the binary, in its `.debug/` folder, and under each debug
//! directory followed by the binary's own directory. A debuglink candidate must match its CRC.

use std::path::{Path, PathBuf};

use crate::elf::Binary;

/// The debug directories used when the user names none: gdb's default.
pub fn default_debug_dirs() -> Vec<PathBuf> {
    vec![PathBuf::from("/usr/lib/debug")]
}

/// The separate debug file for `binary`, if one is found.
pub fn separate_debug_file(binary: &Binary, debug_dirs: &[PathBuf]) -> Option<PathBuf> {
    if let Some(id) = binary.build_id() {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            for dir in debug_dirs {
                let p = dir
                    .join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]));
                if p.is_file() {
                    return Some(p);
                }
            }
        }
    }
    let (name, crc) = binary.debuglink()?;
    let bin_dir = binary
        .path()
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_else(|| PathBuf::from("."));
    let mut candidates = vec![bin_dir.join(name), bin_dir.join(".debug").join(name)];
    for dir in debug_dirs {
        let rel = bin_dir.strip_prefix("/").unwrap_or(&bin_dir);
        candidates.push(dir.join(rel).join(name));
    }
    candidates
        .into_iter()
        .filter(|p| p.as_path() != binary.path())
        .find(|p| p.is_file() && crc32_of(p) == Some(crc))
}

/// The CRC32 (IEEE, as `.gnu_debuglink` uses) of the file at `path`.
fn crc32_of(path: &Path) -> Option<u32> {
    let bytes = std::fs::read(path).ok()?;
    Some(crc32(&bytes))
}

/// CRC32 (IEEE), as `.gnu_debuglink` uses.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_matches_known_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
