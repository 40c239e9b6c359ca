//! The process groups of the commands running now: a registry a signal
//! handler can read ([`kill_all_groups`]), the guard that kills a group if
//! a run leaves early, and the wait for killed members to be gone.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

#[cfg(doc)]
use super::run;
use super::wait::{PollSet, pidfd_open};

/// How long [`run`] waits for killed members of the group to be gone.
const VANISH_LIMIT: Duration = Duration::from_secs(1);

/// Kills the group if `run` leaves early (a failed spawn of a thread, a
/// panic); lists the group for [`kill_all_groups`] while it runs.
pub(super) struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl GroupGuard {
    pub(super) fn register(pgid: i32) -> GroupGuard {
        register_group(pgid);
        GroupGuard { pgid, armed: true }
    }

    /// The child is reaped: its group id may be reused from now on, so it
    /// must not be signalled any more.
    pub(super) fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            unregister_group(self.pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
            unregister_group(self.pgid);
        }
    }
}

/// Process groups of the commands running now, for [`kill_all_groups`]
/// (a fixed table of atomics: it is read from a signal handler).
static GROUPS: [std::sync::atomic::AtomicI32; 256] = [const { std::sync::atomic::AtomicI32::new(0) }; 256];

fn register_group(pgid: i32) {
    for slot in &GROUPS {
        if slot.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return;
        }
    }
}

fn unregister_group(pgid: i32) {
    for slot in &GROUPS {
        let _ = slot.compare_exchange(pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// SIGKILL to the process group of every command running now. Only
/// async-signal-safe calls: usable from a signal handler (a second
/// Ctrl-C).
pub fn kill_all_groups() {
    for slot in &GROUPS {
        let pgid = slot.load(Ordering::SeqCst);
        if pgid > 0 {
            // kill(2) is async-signal-safe, and nix's wrapper adds only
            // the errno check.
            let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
        }
    }
}

pub(super) fn signal_group(pgid: i32, signal: Signal) {
    // ESRCH (nothing left) is fine; nothing else can reasonably happen.
    let _ = killpg(Pid::from_raw(pgid), signal);
}

fn group_exists(pgid: i32) -> bool {
    !matches!(kill(Pid::from_raw(-pgid), None), Err(Errno::ESRCH))
}

/// Members of process group `pgid` that are not zombies (from `/proc`;
/// empty where there is no `/proc`).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
        let Some(close) = stat.rfind(')') else { continue };
        let mut fields = stat[close + 1..].split_ascii_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            found.push(pid);
        }
    }
    found
}

/// SIGKILL takes effect asynchronously: waits until the killed members of
/// group `pgid` have let go of their files and folders (a zombie has), so
/// the caller may remove the workspace at once; at most [`VANISH_LIMIT`].
/// Zombies are left to their new parent (init reaps orphans in its own
/// time). Each member is watched through a pidfd; only where the kernel has
/// no pidfds is `/proc` looked at again every 5 ms (the one tick left, and
/// bounded by [`VANISH_LIMIT`]: the kernel gives no other event for the
/// death of a process that is not our child).
pub(super) fn wait_until_members_gone(pgid: i32) {
    if !group_exists(pgid) {
        return;
    }
    let end = Instant::now() + VANISH_LIMIT;
    let mut watched = Vec::new();
    for pid in live_group_members(pgid) {
        match pidfd_open(pid) {
            Ok(fd) => watched.push(fd),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => {
                while !live_group_members(pgid).is_empty() && Instant::now() < end {
                    thread::sleep(Duration::from_millis(5));
                }
                return;
            }
        }
    }
    while !watched.is_empty() && Instant::now() < end {
        let gone: Vec<bool> = {
            let mut set = PollSet::default();
            for fd in &watched {
                set.add(fd.as_fd(), PollFlags::POLLIN);
            }
            set.wait(Some(end));
            (0..watched.len()).map(|i| set.ready(i)).collect()
        };
        let mut i = 0;
        watched.retain(|_| {
            i += 1;
            !gone[i - 1]
        });
    }
}
