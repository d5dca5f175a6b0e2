//! Threads asleep in a system call, looked at without a stop ([`Looked`]). Most threads of a
//! real program sleep most of the time (redis-server's background threads in their futex
//! waits, its event loop in `epoll_wait` between requests, a pool's idle workers); a stop woke
//! one to take it, walked it and let it go back to sleep, and an `epoll_wait` it woke returned
//! `EINTR` to the program, one more turn of its loop.
//!
//! Two ways spare the stop, both from what the kernel tells in `/proc`:
//!
//! - [`Looked::peek`]: `/proc/PID/task/TID/syscall` shows a thread asleep in a call with its
//!   number, six arguments, stack pointer and pc (the kernel reads them only while the thread
//!   is off every CPU). A look that needs no more (a stack walk whose every step is the call
//!   frame information's, from the stack pointer alone) is taken from that, and kept only
//!   when the thread's `schedstat` (nanoseconds on a CPU, times scheduled in) is the same
//!   before the reading and after the look, and its state still asleep (`S` or `D`): the
//!   stack it read did not change under it.
//! - [`Looked::still`]: a thread that has not run since its last look is given that look
//!   again. A look without a stop left it asleep with its counts then; a stop that interrupted
//!   a call it slept in (the call returned one of the kernel's restart codes, so resuming it
//!   restarts the call without running the program's code) had the thread run once to restart
//!   it, so the counts are those read once it is back asleep: scheduled in exactly once more
//!   than while held, and `/proc`'s syscall line the same call (number, arguments, stack
//!   pointer, pc, as its registers were at the stop). Since then its counts must not have
//!   changed and its state must be asleep, and the look must be less than [`RESAMPLE`] old:
//!   a thread is looked at again now and then whatever `/proc` says.
//!
//! What the counts cannot tell is a thread whose wait ended while it was held and that, in the
//! one run the resume gave it, returned to the program and slept again in a call identical in
//! all of the above; the look after at most [`RESAMPLE`] shows it.

use std::collections::hash_map::Entry;
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
pub struct CallSite {
    /// The call's number.
    pub nr: u64,
    /// Its arguments, in the order the ABI passes them (`rdi rsi rdx r10 r8 r9`).
    pub args: [u64; 6],
    /// The thread's stack pointer in the call.
    pub sp: u64,
    /// Its pc: the instruction after the `syscall`.
    pub pc: u64,
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

/// A thread's scheduler counts (`/proc/PID/task/TID/schedstat`): nanoseconds on a CPU,
/// nanoseconds waiting for one, and how many times it was scheduled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Runs {
    run_ns: u64,
    wait_ns: u64,
    pcount: u64,
}

impl Runs {
    /// A `schedstat` line, `RUN_NS WAIT_NS PCOUNT`.
    fn parse(text: &str) -> Option<Runs> {
        let mut words = text.split_whitespace();
        let run_ns = words.next()?.parse().ok()?;
        let wait_ns = words.next()?.parse().ok()?;
        let pcount = words.next()?.parse().ok()?;
        Some(Runs {
            run_ns,
            wait_ns,
            pcount,
        })
    }

    /// The time the thread waited for a CPU from `self` to `later`.
    pub(super) fn waited_until(&self, later: &Runs) -> Duration {
        Duration::from_nanos(later.wait_ns.saturating_sub(self.wait_ns))
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

/// When a thread's stop began: when it was asked for, `asked`, later by the time the thread
/// then waited for a CPU before it could stop (its counts `before` the ask and `at_stop`), and
/// never after the tracer saw it stopped, `seen`; `seen` where the counts are not known. A
/// thread on a CPU stops at the ask, and is held from then, not only once the tracer, woken
/// by its stop, gets to it (on redis-server under load: 28 us median, 79 us mean, 132 us at
/// the 90th percentile).
pub(super) fn stop_began(
    asked: Instant,
    seen: Instant,
    before: Option<Runs>,
    at_stop: Option<Runs>,
) -> Instant {
    match (before, at_stop) {
        (Some(b), Some(s)) => (asked + b.waited_until(&s)).min(seen),
        _ => seen,
    }
}

/// What a thread's last look saw, and what tells whether it still holds.
#[derive(Clone, Debug)]
struct Last<T> {
    seen: T,
    /// When it was looked at.
    taken: Instant,
    /// The call it was asleep in (the call a stop interrupted), and the thread's counts then.
    site: CallSite,
    at_stop: Runs,
    /// Its counts once seen asleep in that call (after the resume, for a stop; at the look,
    /// for one without a stop).
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

/// A thread's `schedstat`, `syscall` and `stat` files, kept open. A file of a thread that has
/// ended reads nothing, even once its id is another thread's: all three are the files of the
/// thread that had the id when they were opened (reopened when they read nothing).
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
    /// What the last look at thread `tid` saw, if the thread has not run since (see the
    /// module's doc), reading its `/proc` files to tell.
    pub(super) fn still(&mut self, tid: i32) -> Option<T> {
        let last = self.last.get_mut(&tid)?;
        if last.taken.elapsed() >= RESAMPLE {
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

    /// Looks at thread `tid` of process `pid` without stopping it, if `/proc` shows it asleep
    /// in a system call: `look` is given the call as `/proc` shows it (its stack pointer and
    /// pc are all of the thread's registers there is) and returns `None` when that is not
    /// enough. What it saw is given, and kept as a stop's look is, only when the thread
    /// provably did not run from before the `/proc` reading until after `look`: its counts
    /// unchanged across both (not scheduled in, no time on a CPU), its state still asleep.
    /// The kernel reads a thread's call only while it is off every CPU.
    pub(super) fn peek(
        &mut self,
        pid: i32,
        tid: i32,
        look: impl FnOnce(&CallSite) -> Option<T>,
    ) -> Option<T> {
        let files = match self.files.entry(tid) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(TaskFiles::open(pid, tid)?),
        };
        let before = Runs::parse(files.read("schedstat")?)?;
        // Counts of 0: a kernel that keeps none, which could not tell a run.
        if before.pcount == 0 {
            return None;
        }
        let site = CallSite::parse(files.read("syscall")?)?;
        let seen = look(&site)?;
        let state = parse_state(files.read("stat")?)?;
        let now = Runs::parse(files.read("schedstat")?)?;
        if !unmoved(before, state, now) {
            return None;
        }
        self.remember(tid, &seen, site, before, Some(before));
        Some(seen)
    }

    /// Keeps what a look at thread `tid` saw, asleep in `site` (its counts `at_stop` when
    /// looked at, and `asleep` once seen asleep in it).
    fn remember(
        &mut self,
        tid: i32,
        seen: &T,
        site: CallSite,
        at_stop: Runs,
        asleep: Option<Runs>,
    ) {
        let last = Last {
            seen: seen.clone(),
            taken: Instant::now(),
            site,
            at_stop,
            asleep,
        };
        self.last.insert(tid, last);
    }

    /// Thread `tid`'s counts now, from the files kept for it (opened on the first call, and
    /// again when those are of an earlier thread of this id, ended).
    pub(super) fn runs(&mut self, pid: i32, tid: i32) -> Option<Runs> {
        let kept = self.files.get_mut(&tid);
        if let Some(runs) = kept.and_then(|f| f.read("schedstat").and_then(Runs::parse)) {
            return Some(runs);
        }
        let mut files = TaskFiles::open(pid, tid)?;
        let runs = files.read("schedstat").and_then(Runs::parse);
        self.files.insert(tid, files);
        runs
    }

    /// Notes what a stop of thread `tid` of process `pid` with registers `r` saw, while the
    /// thread is still held; `ours` false for a stop that came for another reason (a signal,
    /// a breakpoint), never given again. Returns the thread's counts at our stop.
    pub(super) fn stopped(
        &mut self,
        pid: i32,
        tid: i32,
        r: &libc::user_regs_struct,
        ours: bool,
        seen: &T,
    ) -> Option<Runs> {
        let site = CallSite::interrupted(r).filter(|_| ours);
        let at_stop = if ours { self.runs(pid, tid) } else { None };
        match (site, at_stop) {
            (Some(site), Some(at_stop)) => self.remember(tid, seen, site, at_stop, None),
            _ => {
                self.last.remove(&tid);
            }
        }
        at_stop
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
        Runs {
            run_ns,
            wait_ns: 0,
            pcount,
        }
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

    /// A stop begins at the ask for a thread on a CPU, later by what it waited for one
    /// before it could stop, and never after the tracer saw it; where the counts are not
    /// known, when the tracer saw it.
    #[test]
    fn a_stop_begins_at_the_ask_less_the_wait_for_a_cpu() {
        let asked = Instant::now();
        let seen = asked + Duration::from_micros(300);
        let at = |wait_ns| Runs {
            run_ns: 5,
            wait_ns,
            pcount: 3,
        };
        assert_eq!(
            stop_began(asked, seen, Some(at(1_000)), Some(at(1_000))),
            asked
        );
        let waited = stop_began(asked, seen, Some(at(1_000)), Some(at(201_000)));
        assert_eq!(waited, asked + Duration::from_micros(200));
        assert_eq!(
            stop_began(asked, seen, Some(at(0)), Some(at(900_000))),
            seen
        );
        assert_eq!(stop_began(asked, seen, None, Some(at(0))), seen);
    }

    /// The readings' formats, as the kernel prints them.
    #[test]
    fn proc_lines_parse() {
        let read = Runs::parse("123456 789 42\n").unwrap();
        assert_eq!((read.run_ns, read.wait_ns, read.pcount), (123_456, 789, 42));
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

    /// A thread asleep in a call is looked at from `/proc` (its call and arguments as they
    /// are), kept, and given again while it sleeps on; a running thread (this one, reading
    /// its own files) is not, nor one woken during the look, nor a look that says the call
    /// is not enough.
    #[test]
    fn a_thread_asleep_in_a_call_is_looked_at_without_a_stop() {
        let me = std::process::id() as i32;
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            // SAFETY: gettid takes nothing and returns this thread's id.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let mut b = 0u8;
            // SAFETY: reads one byte into `b`, from the pipe this test owns.
            unsafe { libc::read(fds[0], (&raw mut b).cast(), 1) }
        });
        let tid = rx.recv().unwrap();
        let mut looked: Looked<CallSite> = Looked::default();
        // Until it is asleep in its read.
        let deadline = Instant::now() + Duration::from_secs(5);
        let site = loop {
            if let Some(site) = looked.peek(me, tid, |c| Some(*c)) {
                break site;
            }
            assert!(Instant::now() < deadline, "never seen asleep");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(site.nr, libc::SYS_read as u64);
        assert_eq!(site.args[..3], [fds[0] as u64, site.args[1], 1]);
        assert_ne!((site.sp, site.pc), (0, 0));
        assert_eq!(looked.still(tid), Some(site));
        // Not enough for the look: not kept.
        let mut other: Looked<CallSite> = Looked::default();
        assert_eq!(other.peek(me, tid, |_| None), None);
        assert!(other.last.is_empty());
        // Running: this thread.
        // SAFETY: gettid takes nothing and returns this thread's id.
        let this = unsafe { libc::gettid() };
        assert_eq!(looked.peek(me, this, |c| Some(*c)), None);
        // Woken while it was looked at (the byte arrives during the look): its stack may have
        // changed under the look, which is not kept.
        let mut woken: Looked<CallSite> = Looked::default();
        let seen = woken.peek(me, tid, |c| {
            // SAFETY: writes one byte from a live buffer to the pipe this test owns.
            assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
            Some(*c)
        });
        assert_eq!(seen, None);
        assert!(woken.last.is_empty());
        assert_eq!(reader.join().unwrap(), 1);
        // SAFETY: closes the two descriptors this test opened, used by nothing else now.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
