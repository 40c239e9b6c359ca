//! What the tests of the process modules share: commands to run and
//! checks on the processes they leave.

use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::wait::PollSet;
use super::{Cancel, Command, Finished, Redactor, live_group_members, run};

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn base_env() -> Vec<(OsString, OsString)> {
    vec![("PATH".into(), "/usr/bin:/bin".into())]
}

pub(crate) fn sh(dir: &Path, script: &str) -> Command {
    let mut c = Command::new(["sh", "-c", script], dir);
    c.env = base_env();
    c.grace = ms(200);
    c
}

pub(crate) fn go(cmd: &Command) -> Finished {
    run(cmd, &Redactor::default(), &Cancel::new()).expect("run")
}

/// Runs in a thread and fails (instead of hanging) when `run` does not
/// return within `limit`; then kills what the pids file names.
pub(crate) fn go_bounded(cmd: &Command, cancel: &Cancel, limit: Duration, pids: &Path) -> Finished {
    let (tx, rx) = std::sync::mpsc::channel();
    let (cmd2, cancel2) = (cmd.clone(), cancel.clone());
    thread::spawn(move || {
        let _ = tx.send(run(&cmd2, &Redactor::default(), &cancel2));
    });
    match rx.recv_timeout(limit) {
        Ok(result) => result.expect("run"),
        Err(_) => {
            for pid in std::fs::read_to_string(pids).unwrap_or_default().split_whitespace() {
                let pid: i32 = pid.parse().unwrap();
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            panic!("run did not return within {limit:?}");
        }
    }
}

/// Whether a process exists and is not a zombie.
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            !after.starts_with('Z') && !after.starts_with('X')
        }
        Err(_) => false,
    }
}

/// `kill(-pgid, 0)` gives ESRCH within `limit`. Orphans' zombies stay
/// in the group until init reaps them, which this VM's init does only
/// every second or two.
pub(crate) fn group_gone_within(pgid: i32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    loop {
        if kill(Pid::from_raw(-pgid), None) == Err(Errno::ESRCH) {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        thread::sleep(ms(10));
    }
}

pub(crate) fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect()
}

pub(crate) fn assert_tree_gone(f: &Finished, pids_file: &Path) {
    let pgid = f.pid as i32;
    assert_eq!(live_group_members(pgid), Vec::<i32>::new(), "live members of group {pgid}");
    let pids = pids_in(pids_file);
    assert!(pids.len() >= 2, "{pids:?}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} survived");
    }
    assert!(group_gone_within(pgid, Duration::from_secs(10)), "group {pgid} still exists");
}

/// Whether `fd` is readable now (without waiting).
pub(crate) fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut set = PollSet::default();
    set.add(fd, nix::poll::PollFlags::POLLIN);
    set.wait(Some(Instant::now()));
    set.ready(0)
}
