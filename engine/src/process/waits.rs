//! The descriptors a thread blocked in `poll`, `select` or `epoll_wait` waits on: read from the
//! process's memory (the `pollfd` array, the `fd_set`s) with `process_vm_readv`, which needs no
//! stop, and from `/proc/PID/fdinfo/EPFD` (the descriptors an epoll instance watches). A thread
//! asleep in such a call keeps its arguments as they were, so they may be read after the stop
//! that saw it there, while it sleeps on.
//!
//! Each reads at most [`MAX_WAITED`] descriptors, and yields none where the memory or the file
//! cannot be read (the thread returned and its array is gone, the process ended).

use super::memory::MemReader;

/// The descriptors a thread of process `pid` asleep in system call `nr` with arguments `args`
/// (the first three) waits on, for the calls that wait on a set of them: a `poll`'s or
/// `ppoll`'s array, a `select`'s or `pselect6`'s read and write sets, the descriptors an
/// `epoll_wait`'s instance watches (the epoll descriptor itself where it watches none that can
/// be read). Empty for any other call. `consult`'s stack samples read them through this
/// ([`crate::consult::stacks::WaitReader`]).
pub fn waited(pid: i32, nr: u64, args: [u64; 3]) -> Vec<i32> {
    match nr {
        // poll, ppoll: (fds, nfds, ...)
        7 | 271 => poll_fds(pid, args[0], args[1]),
        // select, pselect6: (nfds, readfds, writefds, ...)
        23 | 270 => select_fds(pid, args[0], &[args[1], args[2]]),
        // epoll_wait, epoll_pwait, epoll_pwait2: (epfd, ...)
        232 | 281 | 441 => {
            let epfd = args[0] as i32;
            let watched = epoll_fds(pid, epfd);
            if watched.is_empty() {
                vec![epfd]
            } else {
                watched
            }
        }
        _ => Vec::new(),
    }
}

/// The most descriptors read of one wait: a server polling thousands is named by its first.
pub const MAX_WAITED: usize = 64;

/// The size of one `struct pollfd`: `int fd; short events; short revents`.
const POLLFD: usize = 8;

/// The descriptors of the `count` `pollfd`s at `addr` in process `pid` (a `poll` or `ppoll`
/// call's first two arguments), in their order, the negative ones (which `poll` ignores) left
/// out.
pub fn poll_fds(pid: i32, addr: u64, count: u64) -> Vec<i32> {
    let n = (count as usize).min(MAX_WAITED);
    if n == 0 || addr == 0 {
        return Vec::new();
    }
    let Ok(bytes) = MemReader::new(pid).read(addr, n * POLLFD) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(POLLFD)
        .map(|p| i32::from_ne_bytes([p[0], p[1], p[2], p[3]]))
        .filter(|&fd| fd >= 0)
        .collect()
}

/// The descriptors below `nfds` set in any of the `fd_set`s at `sets` in process `pid` (a
/// `select` or `pselect6` call's read and write sets; a null address is no set), ascending.
pub fn select_fds(pid: i32, nfds: u64, sets: &[u64]) -> Vec<i32> {
    // fd_set holds FD_SETSIZE (1024) bits; select refuses more.
    let nfds = nfds.min(1024) as usize;
    let bytes = nfds.div_ceil(64) * 8;
    let mut set = vec![false; nfds];
    for &addr in sets.iter().filter(|&&a| a != 0) {
        let Ok(bits) = MemReader::new(pid).read(addr, bytes) else {
            continue;
        };
        for (fd, on) in set.iter_mut().enumerate() {
            *on |= bits[fd / 8] & (1 << (fd % 8)) != 0;
        }
    }
    set.iter()
        .enumerate()
        .filter(|(_, &on)| on)
        .map(|(fd, _)| fd as i32)
        .take(MAX_WAITED)
        .collect()
}

/// The descriptors epoll instance `epfd` of process `pid` watches, from the `tfd:` lines of
/// its `/proc/PID/fdinfo/EPFD`, in the kernel's order; none when it is not an epoll
/// descriptor or cannot be read.
pub fn epoll_fds(pid: i32, epfd: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}"))
        .map(|text| epoll_watched(&text))
        .unwrap_or_default()
}

/// The `tfd:` descriptors of an epoll descriptor's `fdinfo` text (`tfd:        5 events: 19
/// data: ...`), at most [`MAX_WAITED`], each once.
fn epoll_watched(fdinfo: &str) -> Vec<i32> {
    let mut out: Vec<i32> = Vec::new();
    for line in fdinfo.lines() {
        let Some(rest) = line.strip_prefix("tfd:") else {
            continue;
        };
        let Some(fd) = rest.split_whitespace().next().and_then(|w| w.parse().ok()) else {
            continue;
        };
        if !out.contains(&fd) {
            out.push(fd);
        }
        if out.len() == MAX_WAITED {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn me() -> i32 {
        std::process::id() as i32
    }

    /// A `pollfd` array read back from this process: its descriptors in order, the negative
    /// one left out; a null array or none is nothing.
    #[test]
    fn a_poll_array_gives_its_descriptors() {
        let fds: [libc::pollfd; 3] = [
            libc::pollfd {
                fd: 7,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: -1,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: 3,
                events: libc::POLLOUT,
                revents: 0,
            },
        ];
        let addr = fds.as_ptr() as u64;
        assert_eq!(poll_fds(me(), addr, 3), vec![7, 3]);
        assert_eq!(poll_fds(me(), addr, 1), vec![7]);
        assert_eq!(poll_fds(me(), 0, 3), Vec::<i32>::new());
        assert_eq!(poll_fds(me(), addr, 0), Vec::<i32>::new());
    }

    /// `select`'s read and write sets, merged, below `nfds` only.
    #[test]
    fn select_sets_give_the_descriptors_set_in_either() {
        let mut read = [0u64; 16];
        let mut write = [0u64; 16];
        read[0] = 1 << 4 | 1 << 9;
        write[1] = 1 << 2; // fd 66
        write[0] = 1 << 9;
        let sets = [read.as_ptr() as u64, write.as_ptr() as u64];
        assert_eq!(select_fds(me(), 100, &sets), vec![4, 9, 66]);
        assert_eq!(select_fds(me(), 10, &sets), vec![4, 9]);
        assert_eq!(
            select_fds(me(), 100, &[0, write.as_ptr() as u64]),
            vec![9, 66]
        );
    }

    /// An epoll instance's `fdinfo` names what it watches; a descriptor that is not one
    /// watches nothing.
    #[test]
    fn an_epoll_descriptor_names_what_it_watches() {
        let (r, _w) = std::io::pipe().unwrap();
        // SAFETY: epoll_create1 takes no pointers; the descriptor is closed below.
        let ep = unsafe { libc::epoll_create1(0) };
        assert!(ep >= 0);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: `ep` and the pipe's end are open descriptors; `ev` is a valid event.
        let added = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, r.as_raw_fd(), &mut ev) };
        assert_eq!(added, 0);
        assert_eq!(epoll_fds(me(), ep), vec![r.as_raw_fd()]);
        assert_eq!(epoll_fds(me(), r.as_raw_fd()), Vec::<i32>::new());
        // SAFETY: `ep` is ours and not used after.
        unsafe { libc::close(ep) };
        assert_eq!(
            epoll_watched("pos:\t0\nflags:\t02\ntfd:        5 events:       19 data: 5  pos:0 ino:2a sdev:9\ntfd:        9 events: 19\n"),
            vec![5, 9]
        );
    }
}
