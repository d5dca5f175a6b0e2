//! What a process's descriptors are, as `/proc` tells: the link of `/proc/PID/fd/FD` (a path,
//! `pipe:[…]`, `anon_inode:[eventfd]`) and, for a socket, its line in the process's own network
//! tables (`/proc/PID/net/tcp`, `tcp6`, `udp`, `udp6`, `unix`): a listening TCP socket and its
//! address, a connection a client made to one of the process's listening ports, a connection
//! the process made, a UDP or Unix socket.
//!
//! `consult` names the descriptors a `poll`, `select` or `epoll_wait` waits on with these
//! ([`crate::consult::stacks::Describer`]), many of them summarised by [`Described::kind`] and
//! [`Described::at`] (`20 client connections to 127.0.0.1:6379`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

/// What one descriptor is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// The descriptor.
    pub fd: i32,
    /// What kind of thing it is, singular (`listening socket`, `client connection`, `pipe`,
    /// `file`, `eventfd`, `closed fd`): descriptors of one kind and [`Described::at`] are
    /// summarised together.
    pub kind: String,
    /// Where, among its kind, with its leading word (` to 127.0.0.1:6379` for a client
    /// connection, ` /var/log/x` for a file); empty for kinds that have no place (pipes).
    pub at: String,
    /// It alone, in full (`client connection to 127.0.0.1:6379 from 127.0.0.1:41234`,
    /// `pipe:[1234]`).
    pub what: String,
}

/// What each of `fds` of process `pid` is, in their order; a descriptor not open (any more)
/// is a `closed fd`. The network tables are read once, and only when a socket is among them.
pub fn describe(pid: i32, fds: &[i32]) -> Vec<Described> {
    let links: Vec<Option<String>> = fds
        .iter()
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .collect();
    let sockets = if links.iter().flatten().any(|l| socket_inode(l).is_some()) {
        Sockets::of(pid)
    } else {
        Sockets::default()
    };
    fds.iter()
        .zip(&links)
        .map(|(&fd, link)| sockets.describe(fd, link.as_deref()))
        .collect()
}

/// The inode of a `socket:[INODE]` link.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// A socket's line in a network table.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Socket {
    Tcp {
        local: String,
        remote: String,
        port: u16,
        listening: bool,
    },
    Udp {
        local: String,
        remote: Option<String>,
    },
    Unix {
        path: Option<String>,
        listening: bool,
    },
}

/// The sockets of a process's network namespace, by inode, and the TCP ports it listens on.
#[derive(Default)]
struct Sockets {
    by_inode: BTreeMap<u64, Socket>,
    listening: BTreeSet<u16>,
}

impl Sockets {
    /// The tables of process `pid`'s network namespace; those that cannot be read are none.
    fn of(pid: i32) -> Sockets {
        let read = |table: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default()
        };
        let mut s = Sockets::default();
        for table in ["tcp", "tcp6"] {
            s.add(inet_lines(&read(table), true));
        }
        for table in ["udp", "udp6"] {
            s.add(inet_lines(&read(table), false));
        }
        s.add(unix_lines(&read("unix")));
        s
    }

    fn add(&mut self, lines: Vec<(u64, Socket)>) {
        for (inode, socket) in lines {
            if let Socket::Tcp {
                port,
                listening: true,
                ..
            } = socket
            {
                self.listening.insert(port);
            }
            self.by_inode.insert(inode, socket);
        }
    }

    /// What descriptor `fd`, linking to `link` (`None`: not open), is.
    fn describe(&self, fd: i32, link: Option<&str>) -> Described {
        let d = |kind: &str, at: String, what: String| Described {
            fd,
            kind: kind.into(),
            at,
            what,
        };
        let Some(link) = link else {
            return d("closed fd", String::new(), "closed".into());
        };
        if let Some(inode) = socket_inode(link) {
            return match self.by_inode.get(&inode) {
                Some(Socket::Tcp {
                    local,
                    listening: true,
                    ..
                }) => d(
                    "listening socket",
                    format!(" {local}"),
                    format!("listening socket {local}"),
                ),
                // A connection to a port the process listens on was made by a client.
                Some(Socket::Tcp {
                    local,
                    remote,
                    port,
                    ..
                }) if self.listening.contains(port) => d(
                    "client connection",
                    format!(" to {local}"),
                    format!("client connection to {local} from {remote}"),
                ),
                Some(Socket::Tcp { local, remote, .. }) => d(
                    "connection",
                    format!(" to {remote}"),
                    format!("connection to {remote} from {local}"),
                ),
                Some(Socket::Udp { local, remote }) => d(
                    "udp socket",
                    format!(" {local}"),
                    match remote {
                        Some(r) => format!("udp socket {local} to {r}"),
                        None => format!("udp socket {local}"),
                    },
                ),
                Some(Socket::Unix { path, listening }) => {
                    let kind = if *listening {
                        "listening unix socket"
                    } else {
                        "unix socket"
                    };
                    let at = path.as_ref().map(|p| format!(" {p}")).unwrap_or_default();
                    d(kind, at.clone(), format!("{kind}{at}"))
                }
                None => d("socket", String::new(), link.into()),
            };
        }
        if link.starts_with("pipe:") {
            return d("pipe", String::new(), link.into());
        }
        if let Some(anon) = link.strip_prefix("anon_inode:") {
            let name = anon.trim_start_matches('[').trim_end_matches(']');
            let kind = match name {
                "eventpoll" => "epoll instance",
                other => other,
            };
            return d(kind, String::new(), kind.into());
        }
        if link.starts_with("/dev/pts/") || link.starts_with("/dev/tty") {
            return d("terminal", format!(" {link}"), format!("terminal {link}"));
        }
        d("file", format!(" {link}"), link.into())
    }
}

/// The TCP (`tcp` true) or UDP sockets of a `/proc/net/tcp`, `tcp6`, `udp` or `udp6` table:
/// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode`,
/// addresses as the kernel prints them (`0100007F:18EB`).
fn inet_lines(text: &str, tcp: bool) -> Vec<(u64, Socket)> {
    const LISTEN: &str = "0A";
    // A UDP socket with a peer is in state ESTABLISHED.
    const ESTABLISHED: &str = "01";
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (local, port) = inet_address(w.get(1)?)?;
            let (remote, remote_port) = inet_address(w.get(2)?)?;
            let state = *w.get(3)?;
            let inode: u64 = w.get(9)?.parse().ok()?;
            let socket = if tcp {
                Socket::Tcp {
                    local,
                    remote,
                    port,
                    listening: state == LISTEN,
                }
            } else {
                Socket::Udp {
                    local,
                    remote: (state == ESTABLISHED && remote_port != 0).then_some(remote),
                }
            };
            Some((inode, socket))
        })
        .collect()
}

/// A network table's `ADDRESS:PORT` in hexadecimal (the address as the kernel holds it, in
/// 32-bit words of the machine's byte order: 8 digits for IPv4, 32 for IPv6) as users write
/// it (`127.0.0.1:6379`, `[::1]:6379`; an unspecified address is `*`, or `[::]`), and the port.
fn inet_address(hex: &str) -> Option<(String, u16)> {
    let (addr, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for word in addr.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let text = match bytes.len() {
        4 => {
            let ip = Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
            if ip.is_unspecified() {
                format!("*:{port}")
            } else {
                format!("{ip}:{port}")
            }
        }
        16 => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            match ip.to_ipv4_mapped() {
                Some(v4) => format!("{v4}:{port}"),
                None => format!("[{ip}]:{port}"),
            }
        }
        _ => return None,
    };
    Some((text, port))
}

/// The Unix sockets of a `/proc/net/unix` table: `Num RefCount Protocol Flags Type St Inode
/// Path`, the path absent for an unnamed socket; a listening one has `__SO_ACCEPTCON`
/// (0x10000) in its flags.
fn unix_lines(text: &str) -> Vec<(u64, Socket)> {
    const ACCEPTCON: u32 = 0x10000;
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(w.get(3)?, 16).ok()?;
            let inode: u64 = w.get(6)?.parse().ok()?;
            let path = w.get(7).map(|p| (*p).to_owned());
            Some((
                inode,
                Socket::Unix {
                    path,
                    listening: flags & ACCEPTCON != 0,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Lines as the kernel writes them (a little-endian machine's): 127.0.0.1 is `0100007F`.
    #[test]
    fn network_tables_read_as_users_write_addresses() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 341495 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:18EB 0100007F:A0B2 01 00000000:00000000 00:00000000 00000000   100        0 341722 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(
            inet_lines(tcp, true),
            vec![
                (
                    341495,
                    Socket::Tcp {
                        local: "*:6379".into(),
                        remote: "*:0".into(),
                        port: 6379,
                        listening: true
                    }
                ),
                (
                    341722,
                    Socket::Tcp {
                        local: "127.0.0.1:6379".into(),
                        remote: "127.0.0.1:41138".into(),
                        port: 6379,
                        listening: false
                    }
                )
            ]
        );
        assert_eq!(
            inet_address("00000000000000000000000000000000:18EB"),
            Some(("[::]:6379".into(), 6379))
        );
        assert_eq!(
            inet_address("00000000000000000000000001000000:18EB"),
            Some(("[::1]:6379".into(), 6379))
        );
        assert_eq!(
            inet_address("0000000000000000FFFF00000100007F:0035"),
            Some(("127.0.0.1:53".into(), 53))
        );
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 2001 /run/x.sock\n0000000000000000: 00000003 00000000 00000000 0001 03 2002\n";
        assert_eq!(
            unix_lines(unix),
            vec![
                (
                    2001,
                    Socket::Unix {
                        path: Some("/run/x.sock".into()),
                        listening: true
                    }
                ),
                (
                    2002,
                    Socket::Unix {
                        path: None,
                        listening: false
                    }
                )
            ]
        );
    }

    /// This process's own descriptors: a listening socket, a client's connection to it as
    /// accepted (a client connection, summarised by the address it came to), the client's
    /// end (a connection the process made), a pipe, a file and a closed descriptor.
    #[test]
    fn a_processs_descriptors_say_what_they_are() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, from) = listener.accept().unwrap();
        let (r, _w) = std::io::pipe().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let fds = [
            listener.as_raw_fd(),
            accepted.as_raw_fd(),
            client.as_raw_fd(),
            r.as_raw_fd(),
            file.as_raw_fd(),
            -5,
        ];
        let d = describe(std::process::id() as i32, &fds);
        let got: Vec<(&str, &str, &str)> = d
            .iter()
            .map(|d| (d.kind.as_str(), d.at.as_str(), d.what.as_str()))
            .collect();
        let here = format!("127.0.0.1:{port}");
        let pipe = std::fs::read_link(format!("/proc/self/fd/{}", r.as_raw_fd())).unwrap();
        assert_eq!(
            got,
            [
                (
                    "listening socket",
                    &*format!(" {here}"),
                    &*format!("listening socket {here}")
                ),
                (
                    "client connection",
                    &*format!(" to {here}"),
                    &*format!("client connection to {here} from {from}")
                ),
                (
                    "connection",
                    &*format!(" to {here}"),
                    &*format!("connection to {here} from {from}")
                ),
                ("pipe", "", &*pipe.to_string_lossy()),
                (
                    "file",
                    &*format!(" {}", exe.display()),
                    &*exe.to_string_lossy()
                ),
                ("closed fd", "", "closed"),
            ]
        );
        assert_eq!(d.iter().map(|d| d.fd).collect::<Vec<_>>(), fds);
    }
}
