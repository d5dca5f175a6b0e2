//! Whether a file is the program a process runs, for `gsh -p PID FILE`: gsh analyses FILE and
//! instruments the process by FILE's addresses, so a different FILE (another build, another
//! program) would put snippets in the wrong places.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::elf::Binary;

/// True when `file` is process `pid`'s executable: the same file (device and inode of
/// `/proc/PID/exe`), or a copy of it (the same build id). `None` when it cannot be told:
/// the process is gone or its `/proc/PID/exe` is not readable (another user's process).
pub fn is_executable_of(pid: i32, file: &Path) -> Option<bool> {
    let exe = format!("/proc/{pid}/exe");
    let running = std::fs::metadata(&exe).ok()?;
    let given = std::fs::metadata(file).ok()?;
    if (running.dev(), running.ino()) == (given.dev(), given.ino()) {
        return Some(true);
    }
    let build_id = |p: &Path| {
        Binary::open(p)
            .ok()
            .and_then(|b| b.build_id().map(<[u8]>::to_vec))
    };
    match (build_id(Path::new(&exe)), build_id(file)) {
        (Some(a), Some(b)) => Some(a == b),
        // Without build ids, a different file is a different program as far as gsh knows.
        _ => Some(false),
    }
}

/// The path of process `pid`'s executable, as the kernel names it.
pub fn executable_path(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_its_own_executable_and_not_bin_true() {
        let me = std::process::id() as i32;
        let exe = std::env::current_exe().expect("current exe");
        assert_eq!(is_executable_of(me, &exe), Some(true));
        assert_eq!(is_executable_of(me, Path::new("/bin/true")), Some(false));
        assert_eq!(is_executable_of(i32::MAX, &exe), None);
        assert_eq!(executable_path(me).as_deref(), Some(exe.as_path()));
    }
}
