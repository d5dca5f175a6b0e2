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

/// Lines typed while a command runs all run afterwards, in order. Only the first did:
/// rustyline read every typed-ahead byte into a buffer of the line editor it makes for each
/// prompt and dropped that buffer with the rest when the first line ended.
#[test]
fn lines_typed_ahead_during_a_command_all_run() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    // A dumb terminal reads whole lines without the line editor's buffer.
    let mut gsh = PtyGsh::spawn_on(&[exe.as_os_str()], "xterm");
    gsh.expect("(gsh) ");
    // All four lines arrive while the first is read, as keys typed ahead do. The quotes keep
    // the terminal's echo of each line from matching what `echo` prints.
    gsh.send("stats\necho 'ahead' 1\necho 'ahead' 2\necho 'ahead' 3\n");
    gsh.expect("ahead 1");
    gsh.expect("ahead 2");
    gsh.expect("ahead 3");
    gsh.send("quit\n");
    assert_eq!(gsh.wait(), Some(0));
}
