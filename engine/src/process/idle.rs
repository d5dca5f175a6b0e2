//! Threads that have not run since their last stack sample ([`Looked`]): their registers and
//! stack are what that sample read, so [`Process::hold_each_since`](super::Process::hold_each_since) gives it again without
//! stopping them. Most threads of a real program sleep most of the time (redis-server's
//! background threads in their futex waits, a pool's idle workers); each stop woke one to
//! take it, walked it and let it go back to sleep.
//!
//! A thread is taken as unchanged only when the kernel says so, from `/proc`:
//!
//! - its last stop interrupted a system call it slept in (the call returned one of the
//!   kernel's restart codes, so resuming it restarts the call without running the program's
//!   code): a thread caught running, or in a call that ended at the stop, is stopped again;
//! - after the resume it was scheduled in exactly once (its `schedstat` count of times on a
//!   CPU, read while it was held, went up by one), and `/proc/PID/task/TID/syscall` then shows
//!   it asleep in the same call (number, six arguments, stack pointer, pc, as its registers
//!   were at the stop): the one run the resume gave it restarted the call and slept in it;
//! - since then its `schedstat` has not changed (not scheduled in, no time on a CPU), and its
//!   state is asleep (`S` or `D`), not woken and waiting for a CPU;
//! - its last stop is less than [`RESAMPLE`] old: a thread is stopped again now and then
//!   whatever `/proc` says.
//!
//! Our own stop and resume make a sleeping thread run (it restarts its call), so the counts
//! read at the stop never match a reading after it: the reading the later ones are compared
//! with is the first one taken once the thread is asleep again, at the next batch. What the
//! counts cannot tell is a thread whose wait ended while it was held and that, in the one run
//! the resume gave it, returned to the program and slept again in a call identical in all of
//! the above; the stop after at most [`RESAMPLE`] shows it.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// The longest a thread's sample is given again without stopping it.
pub const RESAMPLE: Duration = Duration::from_secs(1);

/// The kernel's restart codes (`ERESTARTSYS` to `ERESTART_RESTARTBLOCK`, less
/// `ENOIOCTLCMD`, which never reaches a thread's registers): a call stopped while it slept
/// returns one, and is restarted on resuming without returning to the program.
const RESTARTS: [i64; 4] = [512, 513, 514, 516];

/// A system call as its thread's registers show it, and as `/proc/PID/task/TID/syscall` does
/// for a thread asleep in it: its number, its six arguments, the stack pointer and the pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CallSite {
    nr: u64,
    args: [u64; 6],
    sp: u64,
    pc: u64,
}

impl CallSite {
    /// The call registers `r`, read at a stop, show interrupted while it slept (and restarted
    /// on resuming); `None` for a thread stopped anywhere else.
    pub(super) fn interrupted(r: &libc::user_regs_struct) -> Option<CallSite> {
        if (r.orig_rax as i64) < 0 || !RESTARTS.contains(&(r.rax as i64).wrapping_neg()) {
            return None;
        }
        Some(CallSite {
            nr: r.orig_rax,
            args: [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9],
            sp: r.rsp,
            pc: r.rip,
        })
    }

    /// The call a `/proc/PID/task/TID/syscall` line shows its thread asleep in: `NR ARG1 ...
    /// ARG6 SP PC`, the number in decimal, the rest in hex. `None` for `running`, or for a
    /// thread in no system call (`-1 SP PC`).
    fn parse(line: &str) -> Option<CallSite> {
        let mut words = line.split_whitespace();
        let nr: u64 = words.next()?.parse().ok()?;
        let mut hex = [0u64; 8];
        for x in &mut hex {
            *x = u64::from_str_radix(words.next()?.strip_prefix("0x")?, 16).ok()?;
        }
        if words.next().is_some() {
            return None;
        }
        let [a0, a1, a2, a3, a4, a5, sp, pc] = hex;
        Some(CallSite {
            nr,
            args: [a0, a1, a2, a3, a4, a5],
            sp,
            pc,
        })
    }
}

/// A thread's scheduler counts (`/proc/PID/task/TID/schedstat`): nanoseconds on a CPU, and
/// how many times it was scheduled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Runs {
    run_ns: u64,
    pcount: u64,
}

impl Runs {
    /// A `schedstat` line, `RUN_NS WAIT_NS PCOUNT`.
    fn parse(text: &str) -> Option<Runs> {
        let mut words = text.split_whitespace();
        let run_ns = words.next()?.parse().ok()?;
        let _wait_ns: u64 = words.next()?.parse().ok()?;
        let pcount = words.next()?.parse().ok()?;
        Some(Runs { run_ns, pcount })
    }
}

/// The state letter of a `/proc/PID/task/TID/stat` line (after the command name, which is in
/// parentheses and may hold anything, `)` too).
pub(super) fn parse_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether a thread stopped in `site` with counts `at_stop` (read while it was held) was, by
/// the counts `then` and the `/proc` syscall line `line` read after its resume, back asleep in
/// that call after the one run the resume gave it. Counts of 0 are a kernel that keeps none.
pub(super) fn back_asleep(site: &CallSite, at_stop: Runs, then: Runs, line: &str) -> bool {
    at_stop.pcount > 0 && then.pcount == at_stop.pcount + 1 && CallSite::parse(line) == Some(*site)
}

/// Whether a thread seen back asleep with counts `asleep` ([`back_asleep`]) has not run since:
/// its counts `now` (read after its state) are the same and its state `state` is asleep.
pub(super) fn unmoved(asleep: Runs, state: char, now: Runs) -> bool {
    matches!(state, 'S' | 'D') && now == asleep
}

/// What a thread's last stop saw, and what tells whether it still holds.
#[derive(Clone, Debug)]
struct Last<T> {
    seen: T,
    /// When it was stopped.
    stopped: Instant,
    /// The call the stop interrupted, and the thread's counts then.
    site: CallSite,
    at_stop: Runs,
    /// Its counts once seen back asleep in that call after the resume.
    asleep: Option<Runs>,
}

/// What [`Process::hold_each_since`](super::Process::hold_each_since) last saw of each thread, kept by its caller from one
/// batch to the next: a thread that has not run since is given it again, not stopped.
#[derive(Debug)]
pub struct Looked<T> {
    last: HashMap<i32, Last<T>>,
    /// Each thread's `/proc` files, kept open: read again from their start, they tell the
    /// present (an open and a close cost more than the read).
    files: HashMap<i32, TaskFiles>,
}

impl<T> Default for Looked<T> {
    fn default() -> Self {
        Looked {
            last: HashMap::new(),
            files: HashMap::new(),
        }
    }
}

/// A thread's `schedstat`, `syscall` and `stat` files, opened while it is held. A file of a
/// thread that has ended reads nothing, even once its id is another thread's: opened while
/// the thread was stopped, all three are that thread's.
#[derive(Debug)]
struct TaskFiles {
    open: [File; 3],
    buf: Vec<u8>,
}

/// The files of [`TaskFiles`], in its order.
const FILES: [&str; 3] = ["schedstat", "syscall", "stat"];

impl TaskFiles {
    /// The files of thread `tid` of process `pid`.
    fn open(pid: i32, tid: i32) -> Option<TaskFiles> {
        let open = |name: &str| File::open(format!("/proc/{pid}/task/{tid}/{name}")).ok();
        Some(TaskFiles {
            open: [open(FILES[0])?, open(FILES[1])?, open(FILES[2])?],
            buf: vec![0; 1024],
        })
    }

    /// The text of file `name` (one of [`FILES`]) now; `None` when it cannot be read (the
    /// thread ended).
    fn read(&mut self, name: &str) -> Option<&str> {
        let i = FILES.iter().position(|n| *n == name)?;
        let n = self.open[i].read_at(&mut self.buf, 0).ok()?;
        std::str::from_utf8(&self.buf[..n]).ok()
    }
}

impl<T: Clone> Looked<T> {
    /// What the last stop of thread `tid` saw, if the thread has not run since (see the
    /// module's doc), reading its `/proc` files to tell.
    pub(super) fn still(&mut self, tid: i32) -> Option<T> {
        let last = self.last.get_mut(&tid)?;
        if last.stopped.elapsed() >= RESAMPLE {
            return None;
        }
        let files = self.files.get_mut(&tid)?;
        let asleep = match last.asleep {
            Some(a) => a,
            None => {
                let then = Runs::parse(files.read("schedstat")?)?;
                let line = files.read("syscall")?;
                if !back_asleep(&last.site, last.at_stop, then, line) {
                    return None;
                }
                *last.asleep.insert(then)
            }
        };
        let state = parse_state(files.read("stat")?)?;
        let now = Runs::parse(files.read("schedstat")?)?;
        unmoved(asleep, state, now).then(|| last.seen.clone())
    }

    /// Notes what a stop of thread `tid` of process `pid` with registers `r` saw, while the
    /// thread is still held; `ours` false for a stop that came for another reason (a signal,
    /// a breakpoint), never given again.
    pub(super) fn stopped(
        &mut self,
        pid: i32,
        tid: i32,
        r: &libc::user_regs_struct,
        ours: bool,
        seen: &T,
    ) {
        let site = CallSite::interrupted(r).filter(|_| ours);
        let at_stop = site.and_then(|_| {
            let kept = self.files.get_mut(&tid);
            if let Some(runs) = kept.and_then(|f| f.read("schedstat").and_then(Runs::parse)) {
                return Some(runs);
            }
            // First held, or the files kept are those of an earlier thread of this id, ended.
            let mut files = TaskFiles::open(pid, tid)?;
            let runs = files.read("schedstat").and_then(Runs::parse);
            self.files.insert(tid, files);
            runs
        });
        match (site, at_stop) {
            (Some(site), Some(at_stop)) => {
                self.last.insert(
                    tid,
                    Last {
                        seen: seen.clone(),
                        stopped: Instant::now(),
                        site,
                        at_stop,
                        asleep: None,
                    },
                );
            }
            _ => {
                self.last.remove(&tid);
            }
        }
    }

    /// Forgets every thread but `tids` (those of the batch just taken).
    pub(super) fn keep_only(&mut self, tids: &[i32]) {
        let tids: HashSet<i32> = tids.iter().copied().collect();
        self.last.retain(|tid, _| tids.contains(tid));
        self.files.retain(|tid, _| tids.contains(tid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(orig_rax: u64, rax: i64) -> libc::user_regs_struct {
        // SAFETY: `user_regs_struct` is plain integers; all zeroes is a valid value.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        r.orig_rax = orig_rax;
        r.rax = rax as u64;
        r.rdi = 0x5555_0000_1040;
        r.rsi = 0x80;
        r.rdx = 2;
        r.rsp = 0x7ffd_1234_5670;
        r.rip = 0x7f3a_0009_1e2d;
        r
    }

    const LINE: &str = "202 0x555500001040 0x80 0x2 0x0 0x0 0x0 0x7ffd12345670 0x7f3a00091e2d\n";

    fn runs(run_ns: u64, pcount: u64) -> Runs {
        Runs { run_ns, pcount }
    }

    /// Only a call the stop interrupted while it slept (a restart code in rax) is one the
    /// thread can be back asleep in: not code the thread was running, nor a call that ended.
    #[test]
    fn only_an_interrupted_sleeping_call_is_kept() {
        assert!(CallSite::interrupted(&regs(202, -512)).is_some());
        assert!(CallSite::interrupted(&regs(219, -516)).is_some());
        // Running the program's code: no call.
        assert!(CallSite::interrupted(&regs(u64::MAX, 0x1234)).is_none());
        // The call returned at the stop (woken, or EINTR to the program).
        assert!(CallSite::interrupted(&regs(202, 0)).is_none());
        assert!(CallSite::interrupted(&regs(0, 16)).is_none());
        assert!(CallSite::interrupted(&regs(202, -4)).is_none());
    }

    /// The reuse decision over the readings: back asleep in the same call after exactly the
    /// resume's run, then unmoved while asleep with unchanged counts.
    #[test]
    fn a_thread_is_given_its_last_sample_only_while_provably_unmoved() {
        let site = CallSite::interrupted(&regs(202, -512)).unwrap();
        let stop = runs(5_000, 40);
        // The resume's one run restarted the call and it sleeps in it.
        let then = runs(9_000, 41);
        assert!(back_asleep(&site, stop, then, LINE));
        // Still running after the resume, or elsewhere.
        assert!(!back_asleep(&site, stop, then, "running\n"));
        assert!(!back_asleep(
            &site,
            stop,
            then,
            "-1 0x7ffd12345670 0x401000\n"
        ));
        let other_fd = LINE.replace("0x80 ", "0x81 ");
        assert!(!back_asleep(&site, stop, then, &other_fd));
        let other_sp = LINE.replace("0x7ffd12345670", "0x7ffd12345640");
        assert!(!back_asleep(&site, stop, then, &other_sp));
        let restarted = LINE.replacen("202", "219", 1);
        assert!(!back_asleep(&site, stop, then, &restarted));
        // The stop's own run not done yet, or more runs than the resume's (woken meanwhile).
        assert!(!back_asleep(&site, stop, runs(5_000, 40), LINE));
        assert!(!back_asleep(&site, stop, runs(12_000, 42), LINE));
        // A kernel keeping no counts ("0 0 0") tells nothing.
        assert!(!back_asleep(&site, runs(0, 0), runs(0, 1), LINE));
        assert!(!back_asleep(&site, runs(0, 0), runs(0, 0), LINE));

        assert!(unmoved(then, 'S', then));
        assert!(unmoved(then, 'D', then));
        // Woken, waiting for a CPU: the same counts, but about to run.
        assert!(!unmoved(then, 'R', then));
        // Stopped by something else.
        assert!(!unmoved(then, 't', then));
        assert!(!unmoved(then, 'T', then));
        // Scheduled in since, or ran.
        assert!(!unmoved(then, 'S', runs(9_000, 42)));
        assert!(!unmoved(then, 'S', runs(9_100, 41)));
    }

    /// The readings' formats, as the kernel prints them.
    #[test]
    fn proc_lines_parse() {
        assert_eq!(Runs::parse("123456 789 42\n"), Some(runs(123_456, 42)));
        assert_eq!(Runs::parse("garbage"), None);
        assert_eq!(parse_state("1234 (a) b) S 1 2"), Some('S'));
        assert_eq!(
            CallSite::parse(LINE),
            CallSite::interrupted(&regs(202, -512))
        );
        assert_eq!(CallSite::parse("running\n"), None);
        assert_eq!(CallSite::parse("-1 0x7ffd12345670 0x401000\n"), None);
    }

    /// A thread never stopped, or whose last stop was not ours or caught it running, is
    /// never given a sample: the memory holds only interrupted calls.
    #[test]
    fn only_our_stops_in_a_sleeping_call_are_remembered() {
        let mut looked: Looked<u32> = Looked::default();
        let me = std::process::id() as i32;
        assert_eq!(looked.still(me), None);
        looked.stopped(me, me, &regs(202, -512), false, &7);
        assert!(looked.last.is_empty());
        looked.stopped(me, me, &regs(u64::MAX, 0), true, &7);
        assert!(looked.last.is_empty());
        looked.stopped(me, me, &regs(202, -512), true, &7);
        assert_eq!(looked.last.len(), 1);
        // This thread is running (reading its own files), not asleep in that call.
        assert_eq!(looked.still(me), None);
        looked.keep_only(&[]);
        assert!(looked.last.is_empty());
    }
}
