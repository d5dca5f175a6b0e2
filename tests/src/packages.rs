//! Debian packages some tests need (`libc6-dbg` for libc's own names): installed with apt when
//! missing, as CI (a fresh Debian machine, as root) needs, once per test process and one
//! install at a time, since apt takes a lock.

use std::process::Command;
use std::sync::Mutex;

/// Makes sure the Debian package `name` is installed, installing it with `apt-get` when it is
/// not. Panics, saying why, when it cannot be installed: the test needs it.
pub fn ensure_package(name: &str) {
    static APT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = APT.lock().unwrap_or_else(|e| e.into_inner());
    if installed(name) {
        return;
    }
    let apt = |args: &[&str]| {
        let o = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("cannot run apt-get to install {name}: {e}"));
        assert!(
            o.status.success(),
            "apt-get {} failed (the test needs {name}; CI runs as root):\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    apt(&["update", "-q"]);
    apt(&["install", "-y", "-q", name]);
    assert!(
        installed(name),
        "{name} is still not installed after apt-get install"
    );
}

fn installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}
