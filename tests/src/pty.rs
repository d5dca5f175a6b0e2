//! Running gsh at a terminal: a pseudo-terminal for its stdin, stdout and stderr, so tests see
//! what users at a prompt see (`Quit anyway? (y or n)`), with a time limit on every wait.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// gsh at the slave side of a pseudo-terminal; the test holds the master.
pub struct PtyGsh {
    child: Child,
    master: std::fs::File,
    output: mpsc::Receiver<Vec<u8>>,
    /// Everything read so far.
    pub seen: String,
}

impl PtyGsh {
    /// Starts `gsh ARGS` on a new pseudo-terminal (`TERM=dumb`, so the line editor prints
    /// plain text).
    pub fn spawn(args: &[&std::ffi::OsStr]) -> PtyGsh {
        PtyGsh::spawn_on(args, "dumb")
    }

    /// Starts `gsh ARGS` on a new pseudo-terminal of type `term`: `xterm` makes the line
    /// editor use raw mode and its own input buffer, as at a real terminal.
    pub fn spawn_on(args: &[&std::ffi::OsStr], term: &str) -> PtyGsh {
        let (mut master_fd, mut slave_fd) = (-1, -1);
        // SAFETY: openpty writes two new descriptors into the pointed-to ints; the name,
        // termios and winsize pointers may be null.
        let r = unsafe {
            libc::openpty(
                &mut master_fd,
                &mut slave_fd,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened by openpty and are owned by nobody else.
        let (master, slave) = unsafe {
            (
                OwnedFd::from_raw_fd(master_fd),
                OwnedFd::from_raw_fd(slave_fd),
            )
        };
        let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the pty slave"));
        let child = Command::new(crate::Gsh::binary())
            .args(args)
            .env("TERM", term)
            .stdin(stdio(&slave))
            .stdout(stdio(&slave))
            .stderr(stdio(&slave))
            .spawn()
            .expect("start gsh on a pty");
        drop(slave);
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().expect("dup the pty master");
        let (tx, output) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the child closed the slave: the end of its output.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        PtyGsh {
            child,
            master,
            output,
            seen: String::new(),
        }
    }

    /// gsh's process id (to signal it).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Types `text` at the terminal.
    pub fn send(&mut self, text: &str) {
        self.master
            .write_all(text.as_bytes())
            .expect("write to the pty");
    }

    /// Waits until the output since the last `expect` contains `needle`, and returns what
    /// came before it; panics, showing everything seen, after 30 s.
    pub fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(at) = self.seen.find(needle) {
                let before = self.seen[..at].to_owned();
                self.seen.drain(..at + needle.len());
                return before;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!("gsh never printed {needle:?}; it printed:\n{}", self.seen),
            }
        }
    }

    /// Waits for gsh to exit (30 s at most) and returns its exit code.
    pub fn wait(mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for gsh") {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("gsh did not exit; it printed:\n{}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PtyGsh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
