//! Reading and writing a traced process's memory. Writes go through /proc/PID/mem, which (for
//! the tracer) ignores page protection, so read-only text and read+exec trampoline pools can be
//! patched without ever being made writable; `process_vm_writev` cannot do that. Reads on a
//! running process use `process_vm_readv`, which needs no stop and no tracer thread.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use super::error::ProcessError;

/// An open /proc/PID/mem. Reopened after `exec`, since the old file keeps naming the old
/// address space.
pub(crate) struct MemFile {
    pid: i32,
    file: File,
}

impl MemFile {
    pub(crate) fn open(pid: i32) -> Result<MemFile, ProcessError> {
        let path = format!("/proc/{pid}/mem");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| ProcessError::Io {
                path: path.into(),
                detail: e.to_string(),
            })?;
        Ok(MemFile { pid, file })
    }

    pub(crate) fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, ProcessError> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match self.file.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) => return Err(self.error("read", addr, len, "address not mapped".into())),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error("read", addr, len, describe(&e))),
            }
        }
        Ok(buf)
    }

    pub(crate) fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), ProcessError> {
        let mut done = 0;
        while done < bytes.len() {
            match self.file.write_at(&bytes[done..], addr + done as u64) {
                Ok(0) => {
                    return Err(self.error("write", addr, bytes.len(), "address not mapped".into()))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error("write", addr, bytes.len(), describe(&e))),
            }
        }
        Ok(())
    }

    fn error(&self, op: &'static str, addr: u64, len: usize, detail: String) -> ProcessError {
        ProcessError::Memory {
            op,
            pid: self.pid,
            addr,
            len,
            detail,
        }
    }
}

fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EIO) | Some(libc::EFAULT) => "address not mapped".into(),
        Some(libc::ESRCH) => "the process is gone".into(),
        _ => e.to_string(),
    }
}

/// Reads a process's memory without stopping it and without the tracer thread
/// (`process_vm_readv`), e.g. to print counters while it runs; or, made with
/// [`MemReader::kept`], what gsh kept of a process that is gone. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemReader {
    pid: i32,
    /// Set for a reader of kept memory: it reads only these ranges, never the process.
    kept: Option<std::sync::Arc<Vec<Kept>>>,
}

/// A range of a process's memory that gsh can read without the process: bytes gsh copied, or
/// a file mapped there shared (a memfd gsh holds a descriptor of) that outlives the process.
#[derive(Clone, Debug)]
pub struct Kept {
    /// Where the range was in the process.
    pub addr: u64,
    /// Its bytes.
    pub source: KeptSource,
}

/// What a [`Kept`] range's bytes come from.
#[derive(Clone, Debug)]
pub enum KeptSource {
    /// A copy.
    Bytes(Vec<u8>),
    /// `len` bytes of a file from `offset`, the file mapped at the range's address.
    File {
        /// gsh's descriptor of the file.
        file: std::sync::Arc<File>,
        /// The file offset mapped at the range's address.
        offset: u64,
        /// The range's length.
        len: u64,
    },
}

impl Kept {
    fn len(&self) -> u64 {
        match &self.source {
            KeptSource::Bytes(b) => b.len() as u64,
            KeptSource::File { len, .. } => *len,
        }
    }

    /// The `len` bytes at `addr`, when the range holds all of them.
    fn read(&self, addr: u64, len: usize) -> Option<Result<Vec<u8>, std::io::Error>> {
        let from = addr.checked_sub(self.addr)?;
        if from.checked_add(len as u64)? > self.len() {
            return None;
        }
        Some(match &self.source {
            KeptSource::Bytes(b) => Ok(b[from as usize..from as usize + len].to_vec()),
            KeptSource::File { file, offset, .. } => {
                let mut buf = vec![0u8; len];
                file.read_exact_at(&mut buf, offset + from).map(|()| buf)
            }
        })
    }
}

impl MemReader {
    pub(crate) fn new(pid: i32) -> MemReader {
        MemReader { pid, kept: None }
    }

    /// A reader of what gsh kept of process `pid` (which may be gone): reads outside `kept`
    /// fail.
    pub fn kept(pid: i32, kept: Vec<Kept>) -> MemReader {
        MemReader {
            pid,
            kept: Some(std::sync::Arc::new(kept)),
        }
    }

    /// True for a reader of kept memory ([`MemReader::kept`]).
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// The process this reader reads.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, ProcessError> {
        if let Some(kept) = &self.kept {
            let error = |detail: String| ProcessError::Memory {
                op: "read",
                pid: self.pid,
                addr,
                len,
                detail,
            };
            return match kept.iter().find_map(|k| k.read(addr, len)) {
                Some(Ok(bytes)) => Ok(bytes),
                Some(Err(e)) => Err(error(e.to_string())),
                None => Err(error("the process is gone, and gsh kept no copy".into())),
            };
        }
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let remote = [RemoteIoVec {
                base: (addr + done as u64) as usize,
                len: len - done,
            }];
            let mut local = [std::io::IoSliceMut::new(&mut buf[done..])];
            match process_vm_readv(Pid::from_raw(self.pid), &mut local, &remote) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => {
                    let detail = match e {
                        nix::errno::Errno::EFAULT => "address not mapped".to_owned(),
                        nix::errno::Errno::ESRCH => "the process is gone".to_owned(),
                        e => e.desc().to_owned(),
                    };
                    return Err(ProcessError::Memory {
                        op: "read",
                        pid: self.pid,
                        addr,
                        len,
                        detail,
                    });
                }
            }
        }
        if done < len {
            return Err(ProcessError::Memory {
                op: "read",
                pid: self.pid,
                addr,
                len,
                detail: format!("only {done} bytes are mapped"),
            });
        }
        Ok(buf)
    }
}

/// The memory of a traced fork child, valid while [`super::Hooks::forked`] runs: the hook
/// restores original code in the child before the tracer lets it go.
pub struct ChildMemory {
    /// The child's process id.
    pub pid: i32,
    pub(crate) mem: MemFile,
}

impl ChildMemory {
    /// Writes `bytes` at `addr` in the child (read-only text included).
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), ProcessError> {
        self.mem.write(addr, bytes)
    }

    /// Reads `len` bytes at `addr` in the child.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, ProcessError> {
        self.mem.read(addr, len)
    }
}
