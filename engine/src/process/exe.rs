//! Which file a process runs and which mapped files gsh cannot read (deleted or replaced
//! since they were mapped, see `maps::stand_ins`). Whether a file is the program a process runs, for `gsh -p PID FILE`: gsh analyses FILE and
//! instruments the process by FILE's addresses, so a different FILE (another build, another
//! program) would put snippets in the wrong places.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::control::Process;
use super::error::ProcessError;
use super::maps::{self, UnreadableModule};
use crate::elf::Binary;

impl Process {
    /// The executable files mapped in the process that were deleted or replaced since they
    /// were mapped and that gsh cannot read through /proc: not modules, each with the reason.
    /// (A deleted file gsh can read is a module named by its /proc path.)
    pub fn unreadable_modules(&self) -> Result<Vec<UnreadableModule>, ProcessError> {
        self.alive("listing modules")?;
        maps::unreadable_modules(self.pid)
    }
}

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

/// The path of process `pid`'s executable, as the kernel names it; `/proc/PID/exe` itself
/// when the file was deleted or replaced since the program started (that reads the file the
/// process runs, where the old path names another file or none).
pub fn executable_path(pid: i32) -> Option<std::path::PathBuf> {
    let link = format!("/proc/{pid}/exe");
    let path = std::fs::read_link(&link).ok()?;
    if path.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") {
        return Some(link.into());
    }
    Some(path)
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
