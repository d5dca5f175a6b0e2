//! [`Process`]: one traced process and the state machine of its threads. Halting interrupts
//! every running thread and collects one stop from each; stops that arrive for another reason
//! meanwhile (a breakpoint, a signal, a fork) are kept as *deferred* events and handled, with
//! the hooks, when the process next runs, so nothing is lost or handled twice. Resuming
//! delivers each thread's kept signals (`signals.rs`); job-control stops are honoured with
//! PTRACE_LISTEN.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::ProcessError;
use super::handsoff::HandsOff;
use super::maps::{self, MappedModule, ModuleCache};
use super::memory::{ChildMemory, MemFile, MemReader};
use super::pools::Pools;
use super::ptrace::{self, WaitEvent, SI_KERNEL};
use super::rendezvous::Rendezvous;
use super::signals::Kept;
use super::wake::Waker;
use super::{AttachedMode, Event, Hooks, State, Stop, ThreadInfo, ThreadState, TrapAction};

/// One thread, as the tracer sees it.
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) state: ThreadState,
    /// Signals it stopped with that must still be delivered, oldest first (`signals.rs`).
    pub(crate) pending: Vec<Kept>,
    /// Kept signals gsh sent it again (`tgkill`), awaited to give them their siginfo back.
    pub(crate) resent: Vec<Kept>,
    /// It is in a job-control stop (SIGSTOP and friends): resuming it re-enters that stop
    /// with PTRACE_LISTEN instead of running it.
    pub(crate) job: bool,
}

impl Thread {
    pub(crate) fn new(state: ThreadState) -> Thread {
        Thread {
            state,
            pending: Vec::new(),
            resent: Vec::new(),
            job: false,
        }
    }
}

/// One traced process.
pub struct Process {
    pub(crate) pid: i32,
    /// We launched it (it is killed, not detached, when gsh lets go).
    pub(crate) started: bool,
    pub(crate) state: State,
    pub(crate) threads: BTreeMap<i32, Thread>,
    /// Stops caught while halting, to handle (with the hooks) when the process runs again.
    pub(crate) deferred: VecDeque<(i32, WaitEvent)>,
    /// Fork children whose first stop arrived before their parent's fork event.
    pub(crate) early_children: HashSet<i32>,
    /// Fork children whose parent a halt caught at its fork event: each is held at its
    /// first stop, its parent run on out of `fork` and stopped again plainly, until hooks are
    /// at hand to give it the files' code ([`Process::release_held_children`]).
    pub(crate) held_children: Vec<i32>,
    /// New threads whose first stop arrived before their creator's clone event: that event
    /// must not list them again (they may have run and exited meanwhile).
    pub(crate) early_threads: HashSet<i32>,
    /// The leader passed its exit stop: once the rest of the process runs on without it (its
    /// main thread called `pthread_exit`), it is a zombie no interrupt stops.
    pub(crate) leader_exiting: bool,
    pub(crate) mem: MemFile,
    pub(crate) events: Arc<Mutex<Vec<Event>>>,
    cache: ModuleCache,
    /// The modules the hooks have been told about.
    known: Vec<MappedModule>,
    /// The dynamic linker reported a change the hooks have not seen yet.
    pub(crate) modules_dirty: bool,
    /// The rendezvous hook's count of link-map changes when the mappings were last compared
    /// (`Process::note_untraced_loads`).
    pub(crate) loads_seen: Option<u64>,
    /// How many times the mappings were read for the modules.
    maps_reads: u64,
    pub(crate) rendezvous: Option<Rendezvous>,
    pub(crate) pools: Pools,
    /// Wakes the tracer thread on SIGCHLD (and on jobs): every wait for a stop blocks on it.
    pub(crate) waker: Arc<Waker>,
    /// Whether a running attached process is let go while nothing needs the tracer.
    pub(crate) mode: AttachedMode,
    /// Set while gsh is hands-off: every thread detached, the process watched by a pidfd.
    pub(crate) hands_off: Option<HandsOff>,
    /// Set while [`Process::serve_in_job`] serves the stops a halt caught: a thread whose
    /// stop is served stays stopped, for the halt's caller to resume with the others.
    holding: bool,
    /// How the last [`Process::halt`] went (benchmarks read it).
    pub last_halt: HaltTiming,
    /// When the running process was last halted whole, until it runs again.
    halted_at: Option<Instant>,
    /// How long gsh has held the whole process, summed ([`Process::held_whole`]).
    held_whole: Duration,
    /// The tracer thread's nice value before [`Process::hurry`] raised its priority.
    hurried: Option<i32>,
    /// The tracer thread's nice value before [`Process::polite`] lowered its priority.
    polite_from: Option<i32>,
}

/// How much [`Process::polite`] lowers the tracer's priority (nice +5: about a third of a
/// default thread's share of a contended CPU).
const POLITE_NICE: i32 = 5;

/// The tracer thread's nice value while it holds a running process stopped.
const HURRIED_NICE: i32 = -15;

/// How one [`Process::halt`] went: when the threads' stops arrived, counted from its start.
#[derive(Clone, Copy, Debug, Default)]
pub struct HaltTiming {
    /// Threads it waited for.
    pub threads: usize,
    /// Sending every interrupt.
    pub interrupts: Duration,
    /// The first stop seen.
    pub first: Duration,
    /// The last stop seen: the halt's whole wait.
    pub last: Duration,
    /// The thread whose stop came last, and whether it is the leader (the main thread).
    pub slowest: i32,
    /// How often the tracer slept waiting for a stop (each a wakeup it needed CPU for).
    pub sleeps: usize,
}

/// Waits for fork child `child`'s first stop (the kernel queues it right after its parent's
/// fork event); false when it ended instead, or is no child of ours.
fn child_stopped(child: i32) -> bool {
    loop {
        match ptrace::wait(child, false) {
            Ok(Some((_, WaitEvent::Exited(_) | WaitEvent::Signaled(_)))) => return false,
            Ok(Some(_)) => return true,
            Ok(None) => continue,
            Err(_) => return false,
        }
    }
}

/// Fault signals: they stop the process and are reported before being delivered.
pub(super) fn is_fault(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGSEGV
            | libc::SIGBUS
            | libc::SIGILL
            | libc::SIGFPE
            | libc::SIGABRT
            | libc::SIGTRAP
            | libc::SIGSYS
    )
}

fn is_stop_signal(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// How long a halt may wait for a thread that neither stops nor dies.
const HALT_DEADLINE: Duration = Duration::from_secs(5);

/// How often `cont_wait` looks at its interrupt flag (Ctrl-C) while nothing happens.
const INTERRUPT_CHECK: Duration = Duration::from_millis(20);

impl Process {
    /// A process whose every thread in `tids` is in a ptrace-stop.
    pub(crate) fn new(
        pid: i32,
        started: bool,
        tids: &[i32],
        events: Arc<Mutex<Vec<Event>>>,
        waker: Arc<Waker>,
    ) -> Result<Process, ProcessError> {
        Ok(Process {
            pid,
            started,
            state: State::Stopped,
            threads: tids
                .iter()
                .map(|&t| (t, Thread::new(ThreadState::Stopped)))
                .collect(),
            deferred: VecDeque::new(),
            early_children: HashSet::new(),
            held_children: Vec::new(),
            early_threads: HashSet::new(),
            mem: MemFile::open(pid)?,
            events,
            cache: ModuleCache::default(),
            known: Vec::new(),
            modules_dirty: false,
            loads_seen: None,
            maps_reads: 0,
            rendezvous: None,
            pools: Pools::default(),
            waker,
            mode: AttachedMode::default(),
            hands_off: None,
            holding: false,
            last_halt: HaltTiming::default(),
            halted_at: None,
            held_whole: Duration::ZERO,
            hurried: None,
            polite_from: None,
            leader_exiting: false,
        })
    }

    /// Executes one instruction on stopped thread `tid`, every other thread staying stopped
    /// (stepping a thread over a breakpoint whose original byte was put back). Signals that
    /// arrive meanwhile are kept for delivery at the next resume.
    ///
    /// The instruction may end the thread (`exit`) or the whole process (`exit_group`, a
    /// fatal signal). Its end is recorded as any wait records one: a thread's exit drops it
    /// from the list (`Ok`, the thread no longer listed), the process's end goes into
    /// [`Process::state`] (`Err(Gone)` telling how), so that it is told once, with its
    /// status. Every tracee is waited for, not `tid` alone: a leader's exit is reported only
    /// after its other threads' exits have been collected, which only a wait for them does
    /// (waiting for the leader alone hung). Other threads' stops met meanwhile are kept as a
    /// halt keeps them (deferred for the tracer, when the others run); a leader's exit stop
    /// met by the stepped leader is deferred, the leader left stopped there, so the hooks
    /// still see the process's last state.
    pub fn step(&mut self, tid: i32) -> Result<(), ProcessError> {
        const DURING: &str = "stepping over a breakpoint";
        if !self.threads.contains_key(&tid) {
            return Err(ProcessError::NotStopped);
        }
        ptrace::step(tid)?;
        loop {
            let (t, ev) = match ptrace::wait(-1, false) {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                Err(nix::errno::Errno::ECHILD) => {
                    self.state = State::Signaled(libc::SIGKILL);
                    self.threads.clear();
                    self.deferred.clear();
                    return Err(self.gone(DURING));
                }
                Err(e) => return Err(ProcessError::ptrace("waitpid", -1, e)),
            };
            if t != tid && self.state == State::Running {
                // The others run meanwhile (a breakpoint whose condition is false): what they
                // met is handled after the step, as the background loop would have.
                if !matches!(ev, WaitEvent::Exited(_) | WaitEvent::Signaled(_)) {
                    if let Some(th) = self.threads.get_mut(&t) {
                        th.state = ThreadState::Stopped;
                    }
                }
                self.deferred.push_back((t, ev));
                continue;
            }
            if t != tid {
                self.note_halt_stop(t, ev)?;
                if !self.state.is_alive() {
                    return Err(self.gone(DURING));
                }
                continue;
            }
            match ev {
                WaitEvent::Signal(libc::SIGTRAP) => return Ok(()),
                WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                    self.thread_gone(tid, ev);
                    return match self.state.is_alive() {
                        true => Ok(()),
                        false => Err(self.gone(DURING)),
                    };
                }
                WaitEvent::Event(libc::PTRACE_EVENT_EXIT) => {
                    self.thread_entry(tid).state = ThreadState::Stopped;
                    self.deferred.push_back((tid, ev));
                    return Ok(());
                }
                WaitEvent::Signal(sig) => {
                    self.keep_signal(tid, sig);
                    ptrace::step(tid)?;
                }
                _ => ptrace::step(tid)?,
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Stopped, running, exited, ...
    pub fn state(&self) -> State {
        self.state
    }

    /// True when gsh launched this process (rather than attaching to it).
    pub fn was_started(&self) -> bool {
        self.started
    }

    /// Its threads, with where each stopped one is.
    pub fn threads(&self) -> Vec<ThreadInfo> {
        if self.hands_off.is_some() {
            return self.untraced_threads();
        }
        self.threads
            .iter()
            .map(|(&tid, t)| ThreadInfo {
                tid,
                state: t.state,
                rip: (t.state == ThreadState::Stopped)
                    .then(|| ptrace::regs(tid).ok().map(|r| r.rip))
                    .flatten(),
                name: std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
                    .map(|s| s.trim_end().to_owned())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// The threads stopped now, by id alone: what a pause moves out of changed code needs
    /// no more (each [`Process::threads`] entry reads a /proc file and the registers).
    pub fn stopped_tids(&self) -> Vec<i32> {
        if self.hands_off.is_some() {
            return Vec::new();
        }
        self.threads
            .iter()
            .filter(|(_, t)| t.state == ThreadState::Stopped)
            .map(|(&tid, _)| tid)
            .collect()
    }

    /// Raises the calling thread's scheduling priority while it holds a running process
    /// stopped for a short change (`on`), and puts it back (`!on`): on a loaded machine the
    /// tracer thread was preempted in the middle of a pause, the whole process waiting on it
    /// (a 5-thread resume took 16 ms). Needs CAP_SYS_NICE; without it nothing changes.
    pub fn hurry(&mut self, on: bool) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        if on {
            // SAFETY: getpriority/setpriority on our own thread id; errors are only returned.
            let now = unsafe {
                *libc::__errno_location() = 0;
                libc::getpriority(libc::PRIO_PROCESS, tid)
            };
            // SAFETY: as above.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, HURRIED_NICE) } == 0 {
                self.hurried = Some(now);
            }
        } else if let Some(nice) = self.hurried.take() {
            // SAFETY: as above; lowering our own priority back needs no privilege.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
        }
    }

    /// Lowers the calling thread's scheduling priority while it works beside a running
    /// process (`on`: staging a change, which takes the CPU for seconds on a large request),
    /// and puts it back (`!on`), so the process's own threads come first; [`Process::hurry`]
    /// still raises it for each pause. Only where the priority can be raised again
    /// (CAP_SYS_NICE): otherwise the tracer would stay slow.
    pub fn polite(&mut self, on: bool) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        if on && self.polite_from.is_none() {
            // SAFETY: getpriority/setpriority on our own thread id; errors are only returned.
            let now = unsafe {
                *libc::__errno_location() = 0;
                libc::getpriority(libc::PRIO_PROCESS, tid)
            };
            // SAFETY: as above. Raising our priority by one tells whether we may go back.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, now - 1) } != 0 {
                return;
            }
            // SAFETY: as above.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, now + POLITE_NICE) };
            self.polite_from = Some(now);
        } else if !on {
            if let Some(nice) = self.polite_from.take() {
                // SAFETY: as above; allowed, since the privilege was checked.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
            }
        }
    }

    /// Every thread's id when every thread is stopped (in a pause), else `None`.
    pub fn all_stopped_tids(&self) -> Option<Vec<i32>> {
        if self.hands_off.is_some() || self.state != State::Stopped {
            return None;
        }
        let all = self
            .threads
            .values()
            .all(|t| t.state == ThreadState::Stopped);
        all.then(|| self.threads.keys().copied().collect())
    }

    /// A reader that works while the process runs, from any thread.
    pub fn reader(&self) -> MemReader {
        MemReader::new(self.pid)
    }

    pub(crate) fn push_event(&self, e: Event) {
        // A poisoned lock only means a reader panicked mid-drain; the list is still valid.
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }

    pub(crate) fn alive(&self, during: &str) -> Result<(), ProcessError> {
        match self.state {
            State::Stopped | State::Running => Ok(()),
            State::Exited(code) => Err(ProcessError::NotRunning(format!(
                " (it exited with code {code}) while {during}"
            ))),
            State::Signaled(sig) => Err(ProcessError::NotRunning(format!(
                " (it was killed by {}) while {during}",
                ptrace::signal_name(sig)
            ))),
            State::Detached => Err(ProcessError::NotRunning(format!(
                " (gsh detached from it) while {during}"
            ))),
            State::Ended => Err(ProcessError::NotRunning(format!(
                " (it ended while gsh was hands-off) while {during}"
            ))),
        }
    }

    /// The error for a process that died under a command, after recording how.
    pub(crate) fn gone(&self, during: &str) -> ProcessError {
        ProcessError::Gone {
            pid: self.pid,
            during: during.to_owned(),
            how: self.state.to_string(),
        }
    }

    // ---- memory and registers ---------------------------------------------------------------

    /// The `len` bytes at `addr` (through /proc/PID/mem: works on read-only text).
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, ProcessError> {
        self.alive("reading memory")?;
        self.mem.read(addr, len)
    }

    /// Writes `bytes` at `addr`, read-only text and read+exec pools included.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), ProcessError> {
        self.alive("writing memory")?;
        self.mem.write(addr, bytes)
    }

    pub(crate) fn read_u64(&self, addr: u64) -> Result<u64, ProcessError> {
        let b = self.mem.read(addr, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// The registers of stopped thread `tid`.
    pub fn regs(&self, tid: i32) -> Result<libc::user_regs_struct, ProcessError> {
        self.stopped_thread(tid)?;
        ptrace::regs(tid)
    }

    /// Sets the registers of stopped thread `tid`.
    pub fn set_regs(&mut self, tid: i32, r: &libc::user_regs_struct) -> Result<(), ProcessError> {
        self.stopped_thread(tid)?;
        ptrace::set_regs(tid, r)
    }

    fn stopped_thread(&self, tid: i32) -> Result<(), ProcessError> {
        self.alive("using registers")?;
        match self.threads.get(&tid) {
            None => Err(ProcessError::NoSuchProcess(tid)),
            Some(t) if t.state == ThreadState::Stopped => Ok(()),
            Some(_) => Err(ProcessError::NotStopped),
        }
    }

    // ---- modules ------------------------------------------------------------------------------

    /// The executable and shared libraries mapped now, from /proc/PID/maps.
    pub fn modules(&mut self) -> Result<Vec<MappedModule>, ProcessError> {
        self.alive("listing modules")?;
        self.maps_reads += 1;
        let maps = maps::read_maps(self.pid)?;
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid)).ok();
        let exe = exe.map(|p| {
            let s = p.to_string_lossy();
            PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s))
        });
        self.cache.modules(&maps, exe.as_deref())
    }

    /// How many times [`Process::modules`] read the mappings, the tracer's own looks for new
    /// libraries included: a process the tracer let go is looked at again only when its
    /// dynamic linker changed the link map, never at each stack sample.
    pub fn maps_reads(&self) -> u64 {
        self.maps_reads
    }

    /// The process's mappings, from /proc/PID/maps.
    pub fn mappings(&self) -> Result<Vec<maps::Mapping>, ProcessError> {
        maps::read_maps(self.pid)
    }

    /// Tells the hooks about modules they have not seen, with every thread stopped.
    pub(crate) fn flush_module_changes(
        &mut self,
        hooks: &mut dyn Hooks,
    ) -> Result<(), ProcessError> {
        self.release_held_children(Some(hooks))?;
        if !self.modules_dirty || !self.state.is_alive() {
            return Ok(());
        }
        self.modules_dirty = false;
        // Before the mappings: a library mapped after this read is counted after it too.
        self.loads_seen = self.link_map_changes();
        let now = self.modules()?;
        let added: Vec<MappedModule> = now
            .iter()
            .filter(|m| {
                !self
                    .known
                    .iter()
                    .any(|k| k.path == m.path && k.base == m.base)
            })
            .cloned()
            .collect();
        // The first report (attached, or at the entry point) tells the modules the process
        // had before gsh came: none was loaded then, and attached to redis-server gsh said
        // "[library loaded: …]" of each of its dozen libraries.
        let first = self.known.is_empty();
        self.known = now;
        if added.is_empty() {
            return Ok(());
        }
        let was_running = self.state == State::Running;
        self.halt()?;
        for m in &added {
            if !m.is_main && !first {
                self.push_event(Event::LibraryLoaded {
                    path: m.path.clone(),
                });
            }
        }
        hooks.modules_changed(self, &added);
        if was_running {
            self.resume()?;
        }
        Ok(())
    }

    /// Forgets which modules the hooks know (after exec) and reports all of them next.
    pub(crate) fn reset_modules(&mut self) {
        self.known.clear();
        self.cache = ModuleCache::default();
        self.modules_dirty = true;
        self.loads_seen = None;
    }

    // ---- halt and resume ----------------------------------------------------------------------

    /// Stops every thread; idempotent. Afterwards every live thread is in a ptrace-stop.
    pub fn halt(&mut self) -> Result<(), ProcessError> {
        self.alive("halting")?;
        self.reseize()?;
        let asked = Instant::now();
        if self.state == State::Running {
            self.halted_at = Some(asked);
        }
        let mut awaiting: HashSet<i32> = HashSet::new();
        let mut vanished = Vec::new();
        for (&tid, t) in &mut self.threads {
            match t.state {
                ThreadState::Stopped => {}
                ThreadState::Starting => {
                    awaiting.insert(tid);
                }
                // A leader past its exit stop whose process runs on is a zombie: no stop
                // comes for it (each halt waited 5 s, then failed); it is gone as a thread,
                // and its exit status comes with the process's end.
                ThreadState::Running
                    if tid == self.pid && self.leader_exiting && is_zombie(tid) =>
                {
                    vanished.push(tid)
                }
                ThreadState::Running | ThreadState::JobStopped => match ptrace::interrupt(tid) {
                    Ok(()) => {
                        awaiting.insert(tid);
                    }
                    // No such thread traced by us: a thread exiting or dead but not collected
                    // is still ours (it is found, and its exit is on its way to `waitpid`),
                    // so this one was released without a word (the thread whose id an
                    // `execve` in another thread took). Recorded as stopped it was read and
                    // resumed as if alive. The leader is released last, after its exit: that
                    // exit, or the loss of every tracee, is what the halt waits for.
                    Err(ProcessError::Ptrace {
                        errno: nix::errno::Errno::ESRCH,
                        ..
                    }) if tid == self.pid => {
                        awaiting.insert(tid);
                    }
                    Err(ProcessError::Ptrace {
                        errno: nix::errno::Errno::ESRCH,
                        ..
                    }) => vanished.push(tid),
                    Err(e) => return Err(e),
                },
            }
        }
        for tid in vanished {
            self.forget_thread(tid);
        }
        let started = Instant::now();
        self.last_halt = HaltTiming {
            threads: awaiting.len(),
            interrupts: started - asked,
            ..HaltTiming::default()
        };
        loop {
            self.await_halt(&mut awaiting, started)?;
            // A creator stopped at its clone event: list the new thread now, so the list is the
            // process's threads when `halt` returns, and wait for the new thread's first stop.
            let mut clones = Vec::new();
            self.deferred.retain(|&(tid, ev)| {
                let clone = ev == WaitEvent::Event(libc::PTRACE_EVENT_CLONE);
                if clone {
                    clones.push(tid);
                }
                !clone
            });
            let forks = self.hold_fork_children()?;
            awaiting.extend(forks.iter().copied());
            if clones.is_empty() && forks.is_empty() {
                break;
            }
            for creator in clones {
                let new = ptrace::event_msg(creator)? as i32;
                // Seen already (its first stop came first): listed then, perhaps gone since.
                if self.early_threads.remove(&new) {
                    continue;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = self.threads.entry(new) {
                    e.insert(Thread::new(ThreadState::Starting));
                    self.push_event(Event::ThreadStarted(new));
                    awaiting.insert(new);
                }
            }
        }
        self.state = State::Stopped;
        Ok(())
    }

    /// Waits until every thread in `awaiting` has stopped or gone.
    fn await_halt(
        &mut self,
        awaiting: &mut HashSet<i32>,
        started: Instant,
    ) -> Result<(), ProcessError> {
        while !awaiting.is_empty() {
            let Some((tid, ev)) = self.poll_wait(-1, started)? else {
                // Deadline: threads that vanished without a word are dropped.
                let before = awaiting.len();
                awaiting.retain(|&tid| self.is_our_thread(tid));
                if awaiting.len() == before {
                    return Err(ProcessError::Inject {
                        what: "halt".into(),
                        tid: awaiting.iter().copied().next().unwrap_or(self.pid),
                        detail: "the thread neither stopped nor exited within 5 s".into(),
                    });
                }
                continue;
            };
            if awaiting.remove(&tid) {
                let at = started.elapsed();
                let h = &mut self.last_halt;
                if h.first.is_zero() {
                    h.first = at;
                }
                h.last = at;
                h.slowest = tid;
            }
            self.note_halt_stop(tid, ev)?;
            if !self.state.is_alive() {
                return Err(self.gone("halting"));
            }
        }
        Ok(())
    }

    /// Records a stop seen while halting.
    pub(super) fn note_halt_stop(&mut self, tid: i32, ev: WaitEvent) -> Result<(), ProcessError> {
        match ev {
            WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                self.thread_gone(tid, ev);
            }
            _ if !self.threads.contains_key(&tid) && !self.is_our_thread(tid) => {
                // A fork child's first stop: kept stopped until the parent's fork event.
                self.early_children.insert(tid);
            }
            _ if !self.threads.contains_key(&tid) => {
                // A new thread's first stop before its creator's clone event.
                self.early_threads.insert(tid);
                self.push_event(Event::ThreadStarted(tid));
                self.note_halt_stop_known(tid, ev);
            }
            _ => self.note_halt_stop_known(tid, ev),
        }
        Ok(())
    }

    /// Records a stop of a listed thread seen while halting.
    fn note_halt_stop_known(&mut self, tid: i32, ev: WaitEvent) {
        if self
            .threads
            .get(&tid)
            .is_none_or(|t| t.state == ThreadState::Starting)
        {
            self.set_thread_options(tid);
        }
        match ev {
            WaitEvent::EventStop(sig) => {
                // A job-stopped thread is stopped for us too; it re-listens on resume.
                let t = self.thread_entry(tid);
                t.state = ThreadState::Stopped;
                t.job = is_stop_signal(sig);
            }
            _ => {
                self.thread_entry(tid).state = ThreadState::Stopped;
                self.deferred.push_back((tid, ev));
            }
        }
    }

    /// Gives a new thread, at its first stop, the options of every thread but the leader: it
    /// inherited the leader's, exit stop included. Set only where the tracer's loop met that
    /// first stop, a thread whose first stop a halt met kept the exit stop, and a step over
    /// its `exit_group` stopped there, leaving it listed (once in eight runs under load).
    fn set_thread_options(&self, tid: i32) {
        if tid == self.pid {
            return;
        }
        let extra = if self.started {
            libc::PTRACE_O_EXITKILL
        } else {
            0
        };
        let _ = ptrace::set_options(tid, ptrace::THREAD_OPTIONS | extra);
    }

    fn thread_entry(&mut self, tid: i32) -> &mut Thread {
        self.threads
            .entry(tid)
            .or_insert(Thread::new(ThreadState::Stopped))
    }

    /// True when `tid` is a thread of this process (not a fork child).
    pub(super) fn is_our_thread(&self, tid: i32) -> bool {
        // One stat rather than reading and parsing /proc/TID/status: this runs for every new
        // thread whose first stop comes before its creator's clone event.
        std::fs::symlink_metadata(format!("/proc/{}/task/{tid}", self.pid)).is_ok()
    }

    /// Waits for the next status of `who` without blocking forever, sleeping until the kernel
    /// reports a stop (SIGCHLD). `Ok(None)` once [`HALT_DEADLINE`] has passed since `since`.
    fn poll_wait(
        &mut self,
        who: i32,
        since: Instant,
    ) -> Result<Option<(i32, WaitEvent)>, ProcessError> {
        loop {
            match ptrace::wait(who, true) {
                Ok(Some(x)) => return Ok(Some(x)),
                Ok(None) => {}
                Err(nix::errno::Errno::ECHILD) => {
                    // No tracee left at all: the process is gone.
                    if self.state.is_alive() {
                        self.state = State::Signaled(libc::SIGKILL);
                        self.threads.clear();
                    }
                    return Err(self.gone("waiting"));
                }
                Err(e) => return Err(ProcessError::ptrace("waitpid", who, e)),
            }
            let waited = since.elapsed();
            if waited > HALT_DEADLINE {
                return Ok(None);
            }
            self.last_halt.sleeps += 1;
            // SIGCHLD's wakeup goes through whichever thread of gsh takes the signal: look
            // again soon without it (see `wake.rs`).
            self.waker
                .wait(Some((HALT_DEADLINE - waited).min(super::wake::HALT_POLL)));
        }
    }

    /// A thread's exit (or the whole process's, for the leader).
    fn thread_gone(&mut self, tid: i32, ev: WaitEvent) -> Option<Stop> {
        if tid == self.pid {
            self.threads.clear();
            self.deferred.clear();
            let stop = match ev {
                WaitEvent::Exited(code) => {
                    self.state = State::Exited(code);
                    Stop::Exited(code)
                }
                WaitEvent::Signaled(sig) => {
                    self.state = State::Signaled(sig);
                    Stop::Killed(sig)
                }
                _ => return None,
            };
            return Some(stop);
        }
        self.forget_thread(tid);
        None
    }

    /// Drops thread `tid` from the list with any stop deferred for it, and tells of its exit;
    /// nothing when it was not listed.
    pub(super) fn forget_thread(&mut self, tid: i32) {
        if self.threads.remove(&tid).is_some() {
            self.deferred.retain(|&(t, _)| t != tid);
            self.push_event(Event::ThreadExited(tid));
        }
    }

    /// Resumes every thread, delivering the signals they stopped with. Threads whose stop is
    /// deferred stay stopped until the tracer handles it (immediately, in `cont_wait` and in
    /// the background loop).
    pub fn resume(&mut self) -> Result<(), ProcessError> {
        self.alive("resuming")?;
        if self.state == State::Running || self.hands_off.is_some() {
            return Ok(());
        }
        let deferred: HashSet<i32> = self.deferred.iter().map(|&(t, _)| t).collect();
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            if deferred.contains(&tid) {
                continue;
            }
            self.resume_thread(tid)?;
        }
        self.runs_again();
        Ok(())
    }

    /// Marks the process running again, ending the hold a halt began.
    pub(crate) fn runs_again(&mut self) {
        self.state = State::Running;
        if let Some(at) = self.halted_at.take() {
            self.held_whole += at.elapsed();
        }
    }

    /// How long gsh has held the whole process, from each halt of it running to its
    /// resume (or its letting go), summed; a hold still going on counts to now. Stops of one
    /// thread at a time ([`Process::hold_each`]) are not in it.
    pub fn held_whole(&self) -> Duration {
        match self.halted_at {
            Some(at) if self.state == State::Stopped => self.held_whole + at.elapsed(),
            _ => self.held_whole,
        }
    }

    /// Resumes one stopped thread with its kept signals: the one whose delivery-stop it is
    /// still in rides `PTRACE_CONT`, the others are sent again (`signals.rs`).
    pub(crate) fn resume_thread(&mut self, tid: i32) -> Result<(), ProcessError> {
        let Some(t) = self.threads.get(&tid) else {
            return Ok(());
        };
        if t.state != ThreadState::Stopped || self.holding {
            return Ok(());
        }
        let job = t.job;
        // A job-control stop is no delivery-stop: every kept signal is sent again, and waits
        // there for SIGCONT as it would untraced.
        let carry = self.signals_out(tid, !job, true);
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let r = if job {
            // It was in a job-control stop: stay stopped there, but keep reporting to us.
            t.state = ThreadState::JobStopped;
            ptrace::listen(tid)
        } else {
            t.state = ThreadState::Running;
            ptrace::cont(tid, carry)
        };
        gone_is_fine(r)
    }

    /// Resumes stopped thread `tid` from the delivery-stop of `signal`, passing it on. With
    /// nothing else kept for the thread (a signal that reaches a running program) this is one
    /// `PTRACE_CONT`, the siginfo never read.
    pub(crate) fn pass_signal(&mut self, tid: i32, signal: i32) -> Result<(), ProcessError> {
        let quick = !self.holding
            && self
                .threads
                .get(&tid)
                .is_some_and(|t| t.state == ThreadState::Stopped && !t.job && t.pending.is_empty());
        if !quick {
            self.keep_signal(tid, signal);
            return self.resume_thread(tid);
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            t.state = ThreadState::Running;
        }
        gone_is_fine(ptrace::cont(tid, signal))
    }

    /// Resumes, then waits until the process stops for a reason the user must see, or until
    /// `interrupt` becomes true (then every thread is halted and the result is `Halted`).
    pub fn cont_wait(
        &mut self,
        hooks: &mut dyn Hooks,
        interrupt: &AtomicBool,
    ) -> Result<Stop, ProcessError> {
        self.alive("continuing")?;
        self.reseize()?;
        self.flush_module_changes(hooks)?;
        if let Some(stop) = self.drain_deferred(hooks)? {
            return self.finish_stop(stop);
        }
        self.resume()?;
        loop {
            if interrupt.load(Ordering::Relaxed) {
                self.halt()?;
                return Ok(Stop::Halted);
            }
            match ptrace::wait(-1, true) {
                Ok(Some((tid, ev))) => {
                    if let Some(stop) = self.handle(tid, ev, hooks)? {
                        return self.finish_stop(stop);
                    }
                    if let Some(stop) = self.drain_deferred(hooks)? {
                        return self.finish_stop(stop);
                    }
                }
                // Sleep until the kernel reports a stop; look at the interrupt flag now and then.
                Ok(None) => self.waker.wait(Some(INTERRUPT_CHECK)),
                Err(nix::errno::Errno::ECHILD) => {
                    self.state = State::Signaled(libc::SIGKILL);
                    self.threads.clear();
                    return Err(self.gone("continuing"));
                }
                Err(e) => return Err(ProcessError::ptrace("waitpid", -1, e)),
            }
        }
    }

    /// Handles deferred stops now that hooks are at hand.
    fn drain_deferred(&mut self, hooks: &mut dyn Hooks) -> Result<Option<Stop>, ProcessError> {
        self.release_held_children(Some(hooks))?;
        while let Some((tid, ev)) = self.deferred.pop_front() {
            if let Some(stop) = self.handle(tid, ev, hooks)? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// Stops everything for a user-visible stop (nothing to stop if the process is gone).
    fn finish_stop(&mut self, stop: Stop) -> Result<Stop, ProcessError> {
        if self.state.is_alive() {
            self.halt()?;
        }
        Ok(stop)
    }

    /// One step of the background loop: handles whatever happened since the last call; on a
    /// user-visible stop halts everything and records it as an event.
    pub(crate) fn poll_background(&mut self, hooks: &mut dyn Hooks) -> Result<(), ProcessError> {
        if self.state != State::Running || self.poll_hands_off_with(hooks) {
            return Ok(());
        }
        let mut found = self.drain_deferred(hooks)?;
        while found.is_none() && self.state == State::Running {
            match ptrace::wait(-1, true) {
                Ok(Some((tid, ev))) => found = self.handle(tid, ev, hooks)?,
                Ok(None) => break,
                Err(nix::errno::Errno::ECHILD) => {
                    self.state = State::Signaled(libc::SIGKILL);
                    self.threads.clear();
                    found = Some(Stop::Killed(libc::SIGKILL));
                }
                Err(e) => return Err(ProcessError::ptrace("waitpid", -1, e)),
            }
            if found.is_none() {
                found = self.drain_deferred(hooks)?;
            }
        }
        if let Some(stop) = found {
            let stop = self.finish_stop(stop)?;
            let event = match stop {
                Stop::Breakpoint { tid, rip } => Event::Breakpoint { tid, rip },
                Stop::Signal { tid, signal } => Event::Signal { tid, signal },
                Stop::Exited(code) => Event::Exited {
                    pid: self.pid,
                    code,
                },
                Stop::Killed(signal) => Event::Killed {
                    pid: self.pid,
                    signal,
                },
                // Exec already recorded its event; Halted does not happen here.
                Stop::Exec | Stop::Halted => return Ok(()),
            };
            self.push_event(event);
        }
        Ok(())
    }

    /// Serves, inside a job, the stops gsh would have served between jobs, so that no thread
    /// is held stopped while a long job (a large insert or delete) stages its changes or
    /// pauses the process many times: a thread at the `int3` of a trap site (`trap_site`
    /// gives where it goes on, from the `int3`'s `rip`), a signal to pass on, a new thread,
    /// an interrupt that came late, a thread's exit. What the user must see (a breakpoint, a
    /// fault, the exit) and what needs the hooks to change the instrumentation (a library
    /// loaded, a fork, an exec) stays deferred, its thread stopped, for the tracer to handle
    /// after the job, as it always did; nothing is handled twice.
    ///
    /// On a running process: every stop `waitpid` has and every deferred one, each served
    /// thread running on at once. On a halted one (inside a pause, before code changes):
    /// the stops the halt caught, each served thread left stopped, at its new `rip`, for
    /// the pause's `resume`. Nothing happens while gsh is hands-off.
    pub fn serve_in_job(
        &mut self,
        trap_site: &dyn Fn(u64) -> Option<u64>,
    ) -> Result<(), ProcessError> {
        /// At most this many stops per call: a storm of signals must not keep a job waiting.
        const MOST: usize = 256;
        if self.hands_off.is_some() || !self.state.is_alive() {
            return Ok(());
        }
        let running = self.state == State::Running;
        self.holding = !running;
        let result = (|| {
            let deferred: Vec<(i32, WaitEvent)> = self.deferred.drain(..).collect();
            let mut kept = VecDeque::new();
            let mut served = Ok(());
            for (tid, ev) in deferred {
                if served.is_ok() {
                    match self.serve_one(tid, ev, trap_site) {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => served = Err(e),
                    }
                }
                kept.push_back((tid, ev));
            }
            // Stops deferred while serving (none today) come after those kept.
            kept.extend(self.deferred.drain(..));
            self.deferred = kept;
            served?;
            let mut n = 0;
            while running && self.state == State::Running && n < MOST {
                n += 1;
                match ptrace::wait(-1, true) {
                    Ok(Some((tid, ev))) => {
                        if !self.serve_one(tid, ev, trap_site)? {
                            // As a halt would have kept it: listed, stopped, deferred.
                            self.note_halt_stop(tid, ev)?;
                        }
                    }
                    Ok(None) => break,
                    Err(nix::errno::Errno::ECHILD) => {
                        self.state = State::Signaled(libc::SIGKILL);
                        self.threads.clear();
                        self.push_event(Event::Killed {
                            pid: self.pid,
                            signal: libc::SIGKILL,
                        });
                    }
                    Err(e) => return Err(ProcessError::ptrace("waitpid", -1, e)),
                }
            }
            Ok(())
        })();
        self.holding = false;
        result
    }

    /// Serves one stop inside a job when it needs neither the user nor the hooks (see
    /// [`Process::serve_in_job`]); false, with nothing done, when it must wait.
    fn serve_one(
        &mut self,
        tid: i32,
        ev: WaitEvent,
        trap_site: &dyn Fn(u64) -> Option<u64>,
    ) -> Result<bool, ProcessError> {
        let servable = match ev {
            WaitEvent::Exited(_) | WaitEvent::Signaled(_) => true,
            WaitEvent::Event(
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_EXEC,
            ) => false,
            // The leader's exit stop is the hooks' last look at the process's memory.
            WaitEvent::Event(libc::PTRACE_EVENT_EXIT) => tid != self.pid,
            WaitEvent::Event(_) | WaitEvent::EventStop(_) => true,
            WaitEvent::Signal(libc::SIGTRAP) => {
                if !self.threads.contains_key(&tid) || ptrace::sig_code(tid)? != SI_KERNEL {
                    return Ok(false);
                }
                let mut r = ptrace::regs(tid)?;
                if self.is_rendezvous_hit(r.rip) {
                    return Ok(false);
                }
                let Some(to) = trap_site(r.rip) else {
                    return Ok(false);
                };
                // The int3 stands for a jump into the trampoline: take it.
                r.rip = to;
                ptrace::set_regs(tid, &r)?;
                self.thread_entry(tid).state = ThreadState::Stopped;
                self.resume_thread(tid)?;
                return Ok(true);
            }
            WaitEvent::Signal(sig) if self.is_rendezvous_signal(tid, sig) => {
                // The dynamic linker's hook: dropped, and the thread runs on, unless the link
                // map is consistent, when the hooks must see the new modules before it goes
                // on (the flush after the job); rare, two per `dlopen`.
                if !self.threads.contains_key(&tid) || self.note_rendezvous()? {
                    return Ok(false);
                }
                self.thread_entry(tid).state = ThreadState::Stopped;
                self.resume_thread(tid)?;
                return Ok(true);
            }
            WaitEvent::Signal(sig) => !is_fault(sig),
        };
        if !servable {
            return Ok(false);
        }
        // Only the leader's death is user-visible here: reported as the background loop would.
        if let Some(stop) = self.handle(tid, ev, &mut super::NoHooks)? {
            match stop {
                Stop::Exited(code) => self.push_event(Event::Exited {
                    pid: self.pid,
                    code,
                }),
                Stop::Killed(signal) => self.push_event(Event::Killed {
                    pid: self.pid,
                    signal,
                }),
                _ => {}
            }
        }
        Ok(true)
    }

    /// True while the tracer thread should poll for events between jobs.
    pub(crate) fn wants_polling(&self) -> bool {
        self.state == State::Running
    }

    /// Handles one stop while the process runs. Internal stops are dealt with and the thread
    /// resumed; a user-visible stop is returned with that thread left stopped.
    pub(crate) fn handle(
        &mut self,
        tid: i32,
        ev: WaitEvent,
        hooks: &mut dyn Hooks,
    ) -> Result<Option<Stop>, ProcessError> {
        if let WaitEvent::Exited(_) | WaitEvent::Signaled(_) = ev {
            if !self.threads.contains_key(&tid) && tid != self.pid {
                // Killed before its first stop: its clone event must not list it.
                self.early_threads.insert(tid);
                return Ok(None);
            }
            return Ok(self.thread_gone(tid, ev));
        }
        let first_stop = match self.threads.get(&tid) {
            Some(t) => t.state == ThreadState::Starting,
            None => true,
        };
        if !self.threads.contains_key(&tid) {
            if !self.is_our_thread(tid) {
                self.early_children.insert(tid);
                return Ok(None);
            }
            self.early_threads.insert(tid);
            self.push_event(Event::ThreadStarted(tid));
        }
        self.thread_entry(tid).state = ThreadState::Stopped;
        match ev {
            WaitEvent::Event(libc::PTRACE_EVENT_CLONE) => {
                let new = ptrace::event_msg(tid)? as i32;
                // Seen already (its first stop came first): listed then, perhaps gone since.
                if !self.early_threads.remove(&new) {
                    if let std::collections::btree_map::Entry::Vacant(e) = self.threads.entry(new) {
                        e.insert(Thread::new(ThreadState::Starting));
                        self.push_event(Event::ThreadStarted(new));
                    }
                }
                self.resume_thread(tid)?;
            }
            WaitEvent::Event(e @ (libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK)) => {
                let child = ptrace::event_msg(tid)? as i32;
                self.release_child(child, e == libc::PTRACE_EVENT_FORK, Some(hooks))?;
                self.resume_thread(tid)?;
            }
            WaitEvent::Event(libc::PTRACE_EVENT_EXEC) => return self.exec_happened(tid, hooks),
            WaitEvent::Event(libc::PTRACE_EVENT_EXIT) => {
                if tid == self.pid {
                    self.leader_exiting = true;
                    hooks.exiting(self, tid);
                }
                self.resume_thread(tid)?
            }
            WaitEvent::Event(_) => self.resume_thread(tid)?,
            WaitEvent::EventStop(sig) if is_stop_signal(sig) => {
                // Entered a job-control stop: stay there until SIGCONT, still traced (held:
                // the resume that ends the pause listens).
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.job = true;
                    if !self.holding {
                        t.state = ThreadState::JobStopped;
                    }
                }
                if !self.holding {
                    ptrace::listen(tid)?;
                }
            }
            // An interrupt that arrived after the thread had stopped for another reason, a
            // new thread's first stop, or the end of a job-control stop: run on.
            WaitEvent::EventStop(_) => {
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.job = false;
                }
                if first_stop {
                    self.set_thread_options(tid);
                }
                self.resume_thread(tid)?
            }
            // A fault gsh reported, kept and sent again (`signals.rs`): passed on.
            WaitEvent::Signal(sig) if self.reported_again(tid, sig) => self.resume_thread(tid)?,
            WaitEvent::Signal(libc::SIGTRAP) => return self.trap(tid, hooks),
            WaitEvent::Signal(sig) if self.is_rendezvous_signal(tid, sig) => {
                self.rendezvous_signal(tid, hooks)?;
            }
            WaitEvent::Signal(sig) if is_fault(sig) => {
                self.keep_reported(tid, sig);
                return Ok(Some(Stop::Signal { tid, signal: sig }));
            }
            WaitEvent::Signal(sig) => {
                if sig == libc::SIGCONT {
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.job = false;
                    }
                }
                self.pass_signal(tid, sig)?;
            }
            WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {}
        }
        Ok(None)
    }

    /// A SIGTRAP: the dynamic linker's rendezvous, a hooked `int3`, or a real signal.
    fn trap(&mut self, tid: i32, hooks: &mut dyn Hooks) -> Result<Option<Stop>, ProcessError> {
        let code = ptrace::sig_code(tid)?;
        if code != SI_KERNEL {
            self.keep_reported(tid, libc::SIGTRAP);
            return Ok(Some(Stop::Signal {
                tid,
                signal: libc::SIGTRAP,
            }));
        }
        let rip = ptrace::regs(tid)?.rip;
        if self.is_rendezvous_hit(rip) {
            self.rendezvous_hit(tid, hooks)?;
            return Ok(None);
        }
        if self.int3_gone(rip) {
            // gsh's, taken out since the thread passed it (`stale.rs`): run what is there now.
            let mut r = ptrace::regs(tid)?;
            r.rip = rip - 1;
            ptrace::set_regs(tid, &r)?;
            self.resume_thread(tid)?;
            return Ok(None);
        }
        let action = hooks.trap(self, tid, rip);
        // The hooks may have stepped the thread over the instruction under the `int3` (a
        // breakpoint whose condition is false) into the process's end, the thread's, or the
        // leader's exit stop: that is what happened, whatever they answer.
        if let Some(end) = self.state.end_stop() {
            return Ok(Some(end));
        }
        if !self.threads.contains_key(&tid) || self.deferred.iter().any(|&(t, _)| t == tid) {
            return Ok(None);
        }
        match action {
            TrapAction::Resume(to) => {
                let mut r = ptrace::regs(tid)?;
                r.rip = to;
                ptrace::set_regs(tid, &r)?;
                self.resume_thread(tid)?;
                Ok(None)
            }
            TrapAction::Report => Ok(Some(Stop::Breakpoint { tid, rip })),
        }
    }

    /// Lets a fork child go: the hooks restore what they patched, we remove our `int3`s.
    pub(crate) fn release_child(
        &mut self,
        child: i32,
        copy: bool,
        hooks: Option<&mut dyn Hooks>,
    ) -> Result<(), ProcessError> {
        if !self.early_children.remove(&child) && !child_stopped(child) {
            return Ok(());
        }
        if copy {
            if let Ok(mem) = MemFile::open(child) {
                let mut cm = ChildMemory { pid: child, mem };
                if let Some(h) = hooks {
                    h.forked(self, &mut cm);
                }
                if let Some(rv) = &self.rendezvous {
                    let _ = rv.remove_from(&cm.mem);
                }
            }
        }
        let _ = ptrace::detach(child, 0);
        self.push_event(Event::Forked {
            parent: self.pid,
            child,
        });
        Ok(())
    }

    /// Holds the children of the threads a halt caught at a fork event (a plain `fork`; a
    /// `vfork` parent waits in the kernel for its child, so it stays at its event): each child
    /// stays at its first stop, in [`Process::held_children`], and its parent is run on out of
    /// `fork` and interrupted, to stop again plainly. A thread stopped inside `fork` can run
    /// no injected code (the kernel writes `fork`'s result over the registers it is given), and
    /// a single-threaded program that forks all the time was caught there by nearly every
    /// halt: no `count` went in, and no detach could unload the runtime (#17). Returns the
    /// parents, for the halt to wait for.
    fn hold_fork_children(&mut self) -> Result<Vec<i32>, ProcessError> {
        let mut parents = Vec::new();
        let mut i = 0;
        while i < self.deferred.len() {
            let (tid, ev) = self.deferred[i];
            if ev != WaitEvent::Event(libc::PTRACE_EVENT_FORK) {
                i += 1;
                continue;
            }
            self.deferred.remove(i);
            let child = ptrace::event_msg(tid)? as i32;
            if self.early_children.remove(&child) || child_stopped(child) {
                self.early_children.insert(child);
                self.held_children.push(child);
            }
            // From its event stop: the signal argument is ignored, kept signals stay kept.
            self.thread_entry(tid).state = ThreadState::Running;
            gone_is_fine(ptrace::cont(tid, 0))?;
            gone_is_fine(ptrace::interrupt(tid))?;
            parents.push(tid);
        }
        Ok(parents)
    }

    /// Lets go of the children [`Process::hold_fork_children`] held, each given the files'
    /// code by `hooks` (without hooks, only gsh's own `int3` at `r_brk` is taken out).
    pub(crate) fn release_held_children(
        &mut self,
        mut hooks: Option<&mut dyn Hooks>,
    ) -> Result<(), ProcessError> {
        for child in std::mem::take(&mut self.held_children) {
            let h = hooks.as_mut().map(|h| &mut **h as &mut dyn Hooks);
            self.release_child(child, true, h)?;
        }
        Ok(())
    }

    /// After `exec`: a new address space. Re-learn everything, run to the new entry point so
    /// the new libraries are mapped, re-install the rendezvous hook, tell the hooks.
    fn exec_happened(
        &mut self,
        tid: i32,
        hooks: &mut dyn Hooks,
    ) -> Result<Option<Stop>, ProcessError> {
        // Every other thread is gone; the exec'ing thread now has the process id.
        let _ = tid;
        self.threads.clear();
        self.deferred.clear();
        self.threads
            .insert(self.pid, Thread::new(ThreadState::Stopped));
        self.leader_exiting = false;
        self.state = State::Stopped;
        self.mem = MemFile::open(self.pid)?;
        self.rendezvous = None;
        self.pools = Pools::default();
        self.reset_modules();
        let path = std::fs::read_link(format!("/proc/{}/exe", self.pid)).unwrap_or_default();
        self.push_event(Event::Exec {
            pid: self.pid,
            path,
        });
        if let Some(stop) = self.run_to_entry(hooks)? {
            return Ok(Some(stop));
        }
        Ok(Some(Stop::Exec))
    }

    /// From just after `exec`, runs to the program's entry point (ld.so has then mapped and
    /// initialised every DT_NEEDED library), installs the rendezvous hook and reports all
    /// modules to the hooks. `Some(stop)` when the process stopped otherwise on the way
    /// (it exited, crashed).
    pub(crate) fn run_to_entry(
        &mut self,
        hooks: &mut dyn Hooks,
    ) -> Result<Option<Stop>, ProcessError> {
        let entry = maps::auxv(self.pid)?
            .get(&(libc::AT_ENTRY))
            .copied()
            .ok_or_else(|| ProcessError::Io {
                path: format!("/proc/{}/auxv", self.pid).into(),
                detail: "no AT_ENTRY".into(),
            })?;
        let orig = self.mem.read(entry, 1)?;
        self.mem.write(entry, &[0xcc])?;
        self.resume()?;
        let reached = loop {
            let (tid, ev) = match ptrace::wait(-1, false) {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                Err(e) => return Err(ProcessError::ptrace("waitpid", self.pid, e)),
            };
            if ev == WaitEvent::Signal(libc::SIGTRAP)
                && ptrace::sig_code(tid).ok() == Some(SI_KERNEL)
                && ptrace::regs(tid).map(|r| r.rip).ok() == Some(entry + 1)
            {
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.state = ThreadState::Stopped;
                }
                let mut r = ptrace::regs(tid)?;
                r.rip = entry;
                ptrace::set_regs(tid, &r)?;
                break None;
            }
            if let Some(stop) = self.handle(tid, ev, hooks)? {
                break Some(stop);
            }
        };
        if !self.state.is_alive() {
            return Ok(reached);
        }
        self.halt()?;
        self.mem.write(entry, &orig)?;
        if reached.is_some() {
            return Ok(reached);
        }
        self.install_rendezvous()?;
        self.modules_dirty = true;
        self.flush_module_changes(hooks)?;
        Ok(None)
    }

    // ---- letting go ---------------------------------------------------------------------------

    /// Removes the tracer's own `int3`s and detaches every thread, delivering pending signals;
    /// the process runs on untraced.
    pub fn detach(&mut self) -> Result<(), ProcessError> {
        self.alive("detaching")?;
        // `halt` lists and stops new threads whose clone event it sees, so every thread is
        // detached.
        self.halt()?;
        if let Some(rv) = self.rendezvous.take() {
            rv.remove_from(&self.mem)?;
        }
        self.release_held_children(None)?;
        let deferred: Vec<(i32, WaitEvent)> = self.deferred.drain(..).collect();
        for (tid, ev) in deferred {
            match ev {
                WaitEvent::Signal(libc::SIGTRAP) => {
                    // A trap caught in passing: if its int3 is gone now (ours, or the hooks
                    // restored the code), back up so the restored instruction runs.
                    if let Ok(mut r) = ptrace::regs(tid) {
                        let at = r.rip.wrapping_sub(1);
                        let still = self.mem.read(at, 1).map(|b| b[0] == 0xcc).unwrap_or(true);
                        if ptrace::sig_code(tid).ok() == Some(SI_KERNEL) && !still {
                            r.rip = at;
                            ptrace::set_regs(tid, &r)?;
                        } else {
                            self.keep_signal(tid, libc::SIGTRAP);
                        }
                    }
                }
                WaitEvent::Signal(sig) => self.keep_signal(tid, sig),
                WaitEvent::Event(e @ (libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK)) => {
                    if let Ok(child) = ptrace::event_msg(tid) {
                        self.release_child(child as i32, e == libc::PTRACE_EVENT_FORK, None)?;
                    }
                }
                _ => {}
            }
        }
        self.detach_threads();
        self.state = State::Detached;
        Ok(())
    }

    /// Detaches every (stopped) thread, each with its kept signals (`signals.rs`), and
    /// forgets them.
    pub(crate) fn detach_threads(&mut self) {
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let carry = self.signals_out(tid, true, false);
            let _ = ptrace::detach(tid, carry);
        }
        self.threads.clear();
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) -> Result<(), ProcessError> {
        self.alive("killing")?;
        self.reseize()?;
        self.release_held_children(None)?;
        // SAFETY: kill takes only integers; `pid` is our tracee, not reused while we trace it.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let since = Instant::now();
        while self.state.is_alive() {
            match ptrace::wait(-1, true) {
                Ok(Some((tid, ev @ (WaitEvent::Exited(_) | WaitEvent::Signaled(_))))) => {
                    self.thread_gone(tid, ev);
                }
                // Exit events and the like on the way out: let the thread finish dying.
                Ok(Some((tid, _))) => {
                    let _ = ptrace::cont(tid, 0);
                }
                Ok(None) if since.elapsed() > HALT_DEADLINE => {
                    return Err(ProcessError::Gone {
                        pid: self.pid,
                        during: "killing".into(),
                        how: "it did not die within 5 s of SIGKILL".into(),
                    })
                }
                Ok(None) => self
                    .waker
                    .wait(Some(HALT_DEADLINE.saturating_sub(since.elapsed()))),
                Err(_) => {
                    self.state = State::Signaled(libc::SIGKILL);
                    self.threads.clear();
                }
            }
        }
        Ok(())
    }
}

/// True when thread `tid` has exited and waits to be collected (`Z` in its `stat`).
pub(super) fn is_zombie(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/stat"))
        .is_ok_and(|s| super::idle::parse_state(&s) == Some('Z'))
}

/// `r`, where a thread that died while stopped (SIGKILL from outside) is no error: its exit
/// status is on its way.
fn gone_is_fine(r: Result<(), ProcessError>) -> Result<(), ProcessError> {
    match r {
        Err(ProcessError::Ptrace {
            errno: nix::errno::Errno::ESRCH,
            ..
        }) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
#[path = "control_tests.rs"]
mod tests;
