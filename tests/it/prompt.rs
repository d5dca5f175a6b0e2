//! gsh at a terminal, on a pseudo-terminal as users have it: what the prompt asks and says.

use gsh_tests::pty::PtyGsh;
use gsh_tests::{gsh_c, Mutatee, Variant};

/// `quit` with a process gsh started asks first, as gdb does ("A debugging session is
/// active... Quit anyway? (y or n)"): it used to kill the process without a word.
#[test]
fn quit_at_the_prompt_asks_before_killing_a_started_process() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    let mut gsh = PtyGsh::spawn(&[exe.as_os_str()]);
    gsh.expect("(gsh) ");
    gsh.send("start\n");
    gsh.expect("process ");
    let pid: i32 = gsh
        .expect(" started, stopped at main")
        .trim()
        .parse()
        .expect("the pid");
    gsh.expect("(gsh) ");
    gsh.send("quit\n");
    gsh.expect("A debugging session is active.");
    gsh.expect(&format!("Process {pid} will be killed."));
    gsh.expect("Quit anyway? (y or n) ");
    gsh.send("maybe\n");
    gsh.expect("Please answer y or n.");
    gsh.send("n\n");
    gsh.expect("Not confirmed.");
    gsh.expect("(gsh) ");
    // Still there, still stopped at main.
    gsh.send("status\n");
    gsh.expect(&format!("Process {pid} is stopped at main"));
    gsh.expect("(gsh) ");
    gsh.send("quit\n");
    gsh.expect("Quit anyway? (y or n) ");
    gsh.send("y\n");
    assert_eq!(gsh.wait(), Some(0));
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} outlived gsh"
    );
}

/// Without a process, or in a batch, `quit` just quits.
#[test]
fn quit_asks_nothing_without_a_process_or_in_a_batch() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    let mut gsh = PtyGsh::spawn(&[exe.as_os_str()]);
    gsh.expect("(gsh) ");
    gsh.send("quit\n");
    assert_eq!(gsh.wait(), Some(0));

    let o = gsh_c("start; quit", &exe);
    o.assert_code(0);
    assert!(!o.stderr.contains("Quit anyway"), "{o}");
}

/// Ctrl-C during a long analysis (`stats` on gcc's cc1) cancels the command and leaves the
/// prompt alive (it ended gsh, losing the session); the analysis runs again when asked.
#[test]
fn ctrl_c_during_a_long_analysis_cancels_the_command_not_gsh() {
    let cc1 = gsh_tests::run_tool("gcc", &["-print-prog-name=cc1"]);
    let cc1 = std::path::PathBuf::from(cc1.trim());
    assert!(
        cc1.is_file(),
        "this test analyses gcc's cc1, which `gcc -print-prog-name=cc1` does not find"
    );
    let mut gsh = PtyGsh::spawn(&[cc1.as_os_str()]);
    gsh.expect("(gsh) ");
    gsh.send("stats\n");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill takes only integers; the pid is our own child's.
    unsafe { libc::kill(gsh.pid(), libc::SIGINT) };
    gsh.expect("gsh: interrupted");
    gsh.expect("(gsh) ");
    gsh.send("echo alive\n");
    gsh.expect("alive");
    gsh.send("quit\n");
    assert_eq!(gsh.wait(), Some(0));
}
