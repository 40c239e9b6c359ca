//! The memory and processes a command may use ([`Bounds`]): cgroups where
//! cassist can write them, resource limits of each process where it
//! cannot.
//!
//! cassist's side: [`find`] reads where this process's memory and pids
//! controllers are (`/proc/self/cgroup` and `/proc/self/mountinfo`, nothing
//! written); [`RunCgroups::create`] makes the run's folder under its own
//! cgroup in each hierarchy (cgroup v2: with both controllers passed down
//! to it, which takes this process moving into a leaf of its own first, as
//! a cgroup that passes controllers down may hold no process); after each
//! command, [`RunCgroups::finish`] reads which limit the command went past
//! and removes its cgroups, killing whatever is left in them.
//!
//! The wrapper's side ([`enter`]): before it forks or enters a namespace,
//! it makes a child of each run folder named by its own pid, sets the
//! limits there and moves itself in, so that the command and everything it
//! starts are inside; a limit no cgroup takes becomes a resource limit of
//! each process ([`rlimits`]): `RLIMIT_DATA` for memory (a process's
//! writable private memory: address space only reserved, as runtimes do
//! by the gigabyte, does not count), `RLIMIT_NPROC` for processes (only
//! where it bounds anything: not for root, and counted over every process
//! of the user, so raised by those already running). Neither bounds a
//! whole process tree's memory, and nothing tells afterwards which one a
//! failed command hit.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Bounds;

/// Processes of the wrapper's own in the command's cgroup, not counted in
/// its process limit: the wrapper and the namespace's init.
const OWN_PROCESSES: u64 = 2;

/// The prefix of the folders cassist makes in a cgroup: `cassist-PID` (a
/// run's), `cassist-PID-self` (where a run's cassist moved itself).
const PREFIX: &str = "cassist-";
const SELF_SUFFIX: &str = "-self";

/// A cgroup hierarchy with the memory or the pids controller, and this
/// process's own cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// cgroup v2 (the unified hierarchy).
    pub v2: bool,
    /// This process's own cgroup folder.
    pub own: PathBuf,
    pub memory: bool,
    pub pids: bool,
}

/// Where this process's memory and pids controllers are: one
/// [`Hierarchy`] per folder (cgroup v2: one for both, where its own cgroup
/// may use them; v1: one per hierarchy). Reads, writes nothing.
pub fn find() -> Vec<Hierarchy> {
    let (Ok(cgroup), Ok(mountinfo)) =
        (std::fs::read_to_string("/proc/self/cgroup"), std::fs::read_to_string("/proc/self/mountinfo"))
    else {
        return Vec::new();
    };
    find_in(&cgroup, &mountinfo, |dir| std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default())
}

/// [`find`] from the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`; `controllers` reads a v2 folder's
/// `cgroup.controllers`. A controller of both versions is taken from v2.
fn find_in(cgroup: &str, mountinfo: &str, controllers: impl Fn(&Path) -> String) -> Vec<Hierarchy> {
    let mounts = cgroup_mounts(mountinfo);
    let mut out: Vec<Hierarchy> = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(names), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let v2 = names.is_empty();
        let Some(own) = mounts.iter().find_map(|m| {
            let same = if v2 { m.v2 } else { !m.v2 && names.split(',').all(|n| m.options.iter().any(|o| o == n)) };
            same.then(|| m.own(path)).flatten()
        }) else {
            continue;
        };
        let (memory, pids) = if v2 {
            let available = controllers(&own);
            let has = |c: &str| available.split_ascii_whitespace().any(|a| a == c);
            (has("memory"), has("pids"))
        } else {
            let has = |c: &str| names.split(',').any(|n| n == c);
            (has("memory"), has("pids"))
        };
        if memory || pids {
            out.push(Hierarchy { v2, own, memory, pids });
        }
    }
    // v2 first: a controller bound to both (which the kernel never does)
    // is v2's.
    out.sort_by_key(|h| !h.v2);
    let (mut memory, mut pids) = (false, false);
    out.retain_mut(|h| {
        (h.memory, h.pids) = (h.memory && !memory, h.pids && !pids);
        memory |= h.memory;
        pids |= h.pids;
        h.memory || h.pids
    });
    out
}

/// A cgroup file system mounted here.
#[derive(Debug)]
struct CgroupMount {
    v2: bool,
    /// The cgroup its root is (`/` unless in a cgroup namespace or a
    /// bind mount of a sub-folder).
    root: String,
    point: PathBuf,
    /// Its super options (v1: the controllers it has, among others).
    options: Vec<String>,
}

impl CgroupMount {
    /// The folder of cgroup `path` in this mount, if it shows it.
    fn own(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" { Some(path) } else { path.strip_prefix(self.root.as_str()) }?;
        let rel = rel.trim_start_matches('/');
        if rel.split('/').any(|c| c == "..") {
            return None;
        }
        Some(if rel.is_empty() { self.point.clone() } else { self.point.join(rel) })
    }
}

/// The cgroup mounts of `mountinfo` (`ID PARENT MAJ:MIN ROOT POINT OPTIONS
/// [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS`).
fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(kind), Some(options)) =
            (left.get(3), left.get(4), right.first(), right.get(2))
        else {
            continue;
        };
        let v2 = match *kind {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        out.push(CgroupMount {
            v2,
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
            options: options.split(',').map(str::to_owned).collect(),
        });
    }
    out
}

/// A field of `mountinfo` with its octal escapes (`\040` for a space)
/// undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which limits a command went past.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exceeded {
    /// The memory limit: a process of it was killed for lack of memory (or
    /// an allocation failed at the limit).
    pub memory: bool,
    /// The process limit: a fork failed at it.
    pub processes: bool,
}

impl Exceeded {
    pub fn any(self) -> bool {
        self.memory || self.processes
    }
}

/// One folder of the run's in a hierarchy.
#[derive(Debug)]
struct RunDir {
    path: PathBuf,
    memory: bool,
    pids: bool,
}

/// The run's cgroups: a folder `cassist-PID` under this process's own
/// cgroup in each hierarchy, the commands' cgroups in them. Dropped, they
/// are removed with whatever is left in them.
#[derive(Debug)]
pub struct RunCgroups {
    dirs: Vec<RunDir>,
}

impl RunCgroups {
    /// Makes the run's folder in each of `found` where this process may,
    /// first removing those that runs no longer alive left. `Err` names
    /// each hierarchy where it could not; what was made stands.
    pub fn create(found: &[Hierarchy]) -> (RunCgroups, Vec<String>) {
        let mut dirs = Vec::new();
        let mut errors = Vec::new();
        for h in found {
            remove_stale(&h.own);
            match create_in(h) {
                Ok(path) => dirs.push(RunDir { path, memory: h.memory, pids: h.pids }),
                Err(e) => errors.push(format!("{}: {e}", h.own.display())),
            }
        }
        (RunCgroups { dirs }, errors)
    }

    /// Whether a cgroup bounds the commands' memory.
    pub fn memory(&self) -> bool {
        self.dirs.iter().any(|d| d.memory)
    }

    /// Whether a cgroup bounds the commands' processes.
    pub fn pids(&self) -> bool {
        self.dirs.iter().any(|d| d.pids)
    }

    /// The folders the wrapper is given ([`Bounds::cgroups`]).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// After the command whose wrapper was process `pid`: which limits it
    /// went past. Whatever is left in its cgroups is killed, and they are
    /// removed.
    pub fn finish(&self, pid: u32) -> Exceeded {
        let mut exceeded = Exceeded::default();
        for d in &self.dirs {
            let child = d.path.join(pid.to_string());
            let read = |name: &str| std::fs::read_to_string(child.join(name)).ok();
            if d.memory {
                exceeded.memory |= memory_exceeded(
                    read("memory.events").as_deref(),
                    read("memory.oom_control").as_deref(),
                    read("memory.failcnt").as_deref(),
                );
            }
            if d.pids {
                exceeded.processes |= read("pids.events").is_some_and(|e| event(&e, "max") > 0);
            }
            remove_tree(&child);
        }
        exceeded
    }
}

impl Drop for RunCgroups {
    fn drop(&mut self) {
        for d in &self.dirs {
            remove_tree(&d.path);
        }
    }
}

/// Makes the run's folder under `h.own`: with cgroup v2, the controllers
/// passed down to it and from it to the commands' cgroups.
fn create_in(h: &Hierarchy) -> io::Result<PathBuf> {
    let pid = std::process::id();
    let run = h.own.join(format!("{PREFIX}{pid}"));
    if h.v2 {
        let wanted = wanted_controllers(h);
        pass_down(&h.own, &wanted)?;
        make_dir(&run)?;
        if let Err(e) = write_file(&run.join("cgroup.subtree_control"), &wanted) {
            let _ = std::fs::remove_dir(&run);
            return Err(e);
        }
    } else {
        make_dir(&run)?;
    }
    Ok(run)
}

/// `+memory +pids`, as far as `h` has them.
fn wanted_controllers(h: &Hierarchy) -> String {
    let mut wanted: Vec<&str> = Vec::new();
    if h.memory {
        wanted.push("+memory");
    }
    if h.pids {
        wanted.push("+pids");
    }
    wanted.join(" ")
}

/// Passes the `wanted` controllers (`+memory +pids`) down from the v2
/// cgroup `own`: a cgroup that does may hold no process (but the root), so
/// this process first moves into a leaf of its own, `cassist-PID-self`,
/// and back if they still cannot be passed down (another process is in
/// `own`, or it is not ours to change).
fn pass_down(own: &Path, wanted: &str) -> io::Result<()> {
    let control = own.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control)?;
    let has = |c: &str| enabled.split_ascii_whitespace().any(|e| e == c.trim_start_matches('+'));
    if wanted.split(' ').all(has) {
        return Ok(());
    }
    let pid = std::process::id();
    let leaf = own.join(format!("{PREFIX}{pid}{SELF_SUFFIX}"));
    make_dir(&leaf)?;
    if let Err(e) = write_file(&leaf.join("cgroup.procs"), &pid.to_string()) {
        let _ = std::fs::remove_dir(&leaf);
        return Err(e);
    }
    write_file(&control, wanted).inspect_err(|_| {
        let _ = write_file(&own.join("cgroup.procs"), &pid.to_string());
        let _ = std::fs::remove_dir(&leaf);
    })
}

/// Removes the folders under `own` that runs of cassist no longer alive
/// left (a killed run cannot remove its own).
fn remove_stale(own: &Path) {
    let Ok(entries) = std::fs::read_dir(own) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(run_pid) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&entry.path());
        }
    }
}

/// The pid of the run that named a folder `name` (`cassist-PID`,
/// `cassist-PID-self`).
fn run_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits = rest.strip_suffix(SELF_SUFFIX).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Removes the cgroup `dir` and those below it, killing the processes left
/// in them first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    // The processes of an ended command are usually gone within a fraction
    // of a millisecond (the namespace's init and the command dying with the
    // wrapper): the first waits are short, then up to 10 ms.
    let mut wait = Duration::from_micros(100);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) if Instant::now() < deadline => {}
            Err(_) => return,
        }
        kill_all(dir);
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_millis(10));
    }
}

/// SIGKILL to every process in the cgroup `dir`.
fn kill_all(dir: &Path) {
    // cgroup v2 (Linux 5.14): the kernel kills them all, new forks too.
    if write_file(&dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_ascii_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Whether a memory cgroup's counters say a command went past its limit:
/// cgroup v2's `memory.events` (`oom_kill`, or `oom`: an allocation that
/// could not be met); else v1's `memory.oom_control` (`oom_kill`, Linux
/// 4.13), else v1's `memory.failcnt` (times usage reached the limit).
pub fn memory_exceeded(events: Option<&str>, oom_control: Option<&str>, failcnt: Option<&str>) -> bool {
    if let Some(e) = events {
        return event(e, "oom_kill") > 0 || event(e, "oom") > 0;
    }
    if let Some(c) = oom_control
        && c.lines().any(|l| l.starts_with("oom_kill "))
    {
        return event(c, "oom_kill") > 0;
    }
    failcnt.and_then(|f| f.trim().parse::<u64>().ok()).is_some_and(|n| n > 0)
}

/// The count of `key` in a cgroup's flat keyed file (`key N` lines), 0
/// where it has none.
pub fn event(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Moves this process (`pid`, single-threaded) into the cgroup `dir`. On
/// cgroup v1, by writing `0` (the calling thread) to `tasks`: moving one
/// thread that is the caller skips the lock a whole process's move takes,
/// whose grace period cost 10 to 20 ms per command on every run. On cgroup
/// v2 (no `tasks`), its pid to `cgroup.procs`.
fn join(dir: &Path, pid: u32) -> io::Result<()> {
    let tasks = dir.join("tasks");
    if tasks.exists() { write_file(&tasks, "0") } else { write_file(&dir.join("cgroup.procs"), &pid.to_string()) }
}

/// The wrapper's first step: makes its own cgroup in each of
/// `bounds.cgroups`, sets the limits their controllers take and moves
/// itself in; the limits none takes become resource limits ([`rlimits`]).
pub(super) fn enter(bounds: &Bounds) -> Result<(), String> {
    let pid = std::process::id();
    let (mut memory_set, mut processes_set) = (false, false);
    for dir in &bounds.cgroups {
        let child = dir.join(pid.to_string());
        let cannot = |e: io::Error| format!("cannot set up the command's cgroup {}: {e}", child.display());
        make_dir(&child).map_err(cannot)?;
        if let Some(bytes) = bounds.memory {
            memory_set |= set_memory(&child, bytes).map_err(cannot)?;
        }
        if let Some(n) = bounds.processes
            && child.join("pids.max").exists()
        {
            write_file(&child.join("pids.max"), &(n + OWN_PROCESSES).to_string()).map_err(cannot)?;
            processes_set = true;
        }
        join(&child, pid).map_err(cannot)?;
    }
    let memory = bounds.memory.filter(|_| !memory_set);
    let processes = bounds.processes.filter(|_| !processes_set);
    if memory.is_none() && processes.is_none() {
        return Ok(());
    }
    let uid = nix::unistd::getuid().as_raw();
    let running = if processes.is_some() && uid != 0 { tasks_of(uid) } else { 0 };
    for (resource, value) in rlimits(memory, processes, uid, running) {
        let (_, hard) = nix::sys::resource::getrlimit(resource).map_err(|e| format!("cannot read a limit: {e}"))?;
        let value = value.min(hard);
        nix::sys::resource::setrlimit(resource, value, value).map_err(|e| format!("cannot set a limit: {e}"))?;
    }
    Ok(())
}

/// Sets the memory limit of the cgroup `dir` where it has the memory
/// controller (swap counted in, where the kernel accounts it); whether it
/// has.
fn set_memory(dir: &Path, bytes: u64) -> io::Result<bool> {
    if dir.join("memory.max").exists() {
        write_file(&dir.join("memory.max"), &bytes.to_string())?;
        // No swap: past the limit is past the limit.
        let _ = write_file(&dir.join("memory.swap.max"), "0");
        return Ok(true);
    }
    if dir.join("memory.limit_in_bytes").exists() {
        write_file(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
        // Memory and swap together, where swap is accounted.
        let _ = write_file(&dir.join("memory.memsw.limit_in_bytes"), &bytes.to_string());
        return Ok(true);
    }
    Ok(false)
}

/// The resource limits that stand in for a cgroup, for a user `uid` who
/// runs `running` processes and threads already: `RLIMIT_DATA` at `memory`
/// (per process), and `RLIMIT_NPROC` at `processes` more than `running`
/// (it counts every process and thread of the user; root is not bound by
/// it, so none).
pub fn rlimits(
    memory: Option<u64>,
    processes: Option<u64>,
    uid: u32,
    running: u64,
) -> Vec<(nix::sys::resource::Resource, u64)> {
    use nix::sys::resource::Resource;
    let mut out = Vec::new();
    if let Some(m) = memory {
        out.push((Resource::RLIMIT_DATA, m));
    }
    if let Some(n) = processes
        && uid != 0
    {
        out.push((Resource::RLIMIT_NPROC, running.saturating_add(n).saturating_add(OWN_PROCESSES)));
    }
    out
}

/// The processes and threads of real user `uid` now (what `RLIMIT_NPROC`
/// counts).
fn tasks_of(uid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut n = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_ascii_whitespace().next()?.parse().ok())
        };
        if field("Uid:") == Some(uid) {
            n += u64::from(field("Threads:").unwrap_or(1));
        }
    }
    n
}

/// Makes the folder `dir`; one already there is taken as it is.
fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Writes `value` to the cgroup file `path` (which must exist: nothing is
/// created).
fn write_file(path: &Path, value: &str) -> io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path)?.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
40 35 0:35 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory
41 35 0:36 / /sys/fs/cgroup/pids rw,nosuid shared:15 - cgroup cgroup rw,pids
42 35 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:16 - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn cgroup_v1_controllers_are_found_in_their_own_hierarchies() {
        let cgroup = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/e85\n2:cpu,cpuacct:/\n0::/\n";
        // The v2 hierarchy has neither controller here (hybrid).
        let found = find_in(cgroup, MOUNTINFO, |_| "hugetlb\n".into());
        assert_eq!(
            found,
            [
                Hierarchy { v2: false, own: "/sys/fs/cgroup/pids".into(), memory: false, pids: true },
                Hierarchy { v2: false, own: "/sys/fs/cgroup/memory/process_api/e85".into(), memory: true, pids: false },
            ]
        );
    }

    #[test]
    fn cgroup_v2_is_one_hierarchy_for_both_controllers() {
        let mountinfo = "30 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                         35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
        let cgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n";
        let asked = std::cell::RefCell::new(Vec::new());
        let found = find_in(cgroup, mountinfo, |dir| {
            asked.borrow_mut().push(dir.to_path_buf());
            "cpu memory pids\n".into()
        });
        let own = PathBuf::from("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope");
        assert_eq!(found, [Hierarchy { v2: true, own: own.clone(), memory: true, pids: true }]);
        assert_eq!(*asked.borrow(), [own]);
        // Neither controller delegated: nothing.
        assert_eq!(find_in(cgroup, mountinfo, |_| "cpu io\n".into()), []);
        // Only pids: that one.
        let found = find_in(cgroup, mountinfo, |_| "pids\n".into());
        assert_eq!((found.len(), found[0].memory, found[0].pids), (1, false, true));
    }

    #[test]
    fn a_mount_of_a_sub_cgroup_and_escaped_paths_are_followed() {
        // A cgroup namespace's or container's view: the mount's root is the
        // cgroup itself.
        let mountinfo = "50 35 0:35 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         51 35 0:36 / /mnt/my\\040pids rw - cgroup cgroup rw,pids\n";
        let cgroup = "4:memory:/docker/abc/inner\n8:pids:/x\n";
        let found = find_in(cgroup, mountinfo, |_| String::new());
        assert_eq!(found[0].own, Path::new("/sys/fs/cgroup/memory/inner"));
        assert_eq!(found[1].own, Path::new("/mnt/my pids/x"));
        // A cgroup outside what the mount shows, or no mount at all.
        assert_eq!(find_in("4:memory:/other\n", mountinfo, |_| String::new()), []);
        assert_eq!(find_in("4:memory:/\n", "", |_| String::new()), []);
    }

    #[test]
    fn the_limit_hit_is_read_from_the_events_of_either_version() {
        // cgroup v2.
        let v2_oom = "low 0\nhigh 0\nmax 212\noom 1\noom_kill 1\noom_group_kill 0\n";
        let v2_reclaimed = "low 0\nhigh 0\nmax 40\noom 0\noom_kill 0\noom_group_kill 0\n";
        assert!(memory_exceeded(Some(v2_oom), None, None));
        assert!(!memory_exceeded(Some(v2_reclaimed), None, None), "reaching the limit and reclaiming is no failure");
        // cgroup v1, with and without `oom_kill` (before Linux 4.13).
        let v1_oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        let v1_calm = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
        assert!(memory_exceeded(None, Some(v1_oom), Some("35\n")));
        assert!(!memory_exceeded(None, Some(v1_calm), Some("35\n")), "oom_kill says, not the failcnt");
        let old = "oom_kill_disable 0\nunder_oom 0\n";
        assert!(memory_exceeded(None, Some(old), Some("3\n")));
        assert!(!memory_exceeded(None, Some(old), Some("0\n")));
        assert!(!memory_exceeded(None, None, None));
        // pids, both versions.
        assert_eq!(event("max 17\n", "max"), 17);
        assert_eq!(event("max 0\n", "max"), 0);
        assert_eq!(event("", "max"), 0);
        assert_eq!(event("maximum 3\nmax 2\n", "max"), 2);
    }

    #[test]
    fn without_a_cgroup_the_limits_are_per_process_rlimits() {
        use nix::sys::resource::Resource;
        // A user with 300 processes and threads running already.
        assert_eq!(
            rlimits(Some(64 << 20), Some(50), 1000, 300),
            [(Resource::RLIMIT_DATA, 64 << 20), (Resource::RLIMIT_NPROC, 352)]
        );
        // Root is not bound by RLIMIT_NPROC: only the memory one.
        assert_eq!(rlimits(Some(8 << 30), Some(2048), 0, 300), [(Resource::RLIMIT_DATA, 8 << 30)]);
        // A limit a cgroup took is not given again.
        assert_eq!(rlimits(None, Some(10), 1000, 5), [(Resource::RLIMIT_NPROC, 17)]);
        assert_eq!(rlimits(None, None, 1000, 5), []);
    }

    #[test]
    fn stale_folders_are_known_by_their_name() {
        assert_eq!(run_pid("cassist-123"), Some(123));
        assert_eq!(run_pid("cassist-123-self"), Some(123));
        for other in ["cassist-", "cassist-12a", "cassist-x-self", "other-12", "cassist-1-2"] {
            assert_eq!(run_pid(other), None, "{other}");
        }
    }

    /// The wrapper's side in plain folders standing for cgroups: each
    /// limit goes where its controller's file is.
    #[test]
    fn the_wrapper_sets_each_limit_where_its_controller_is() {
        let dir = tempfile::tempdir().unwrap();
        let (memory, pids) = (dir.path().join("memory"), dir.path().join("pids"));
        let me = std::process::id().to_string();
        for (d, files) in [
            (&memory, &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cgroup.procs", "tasks"][..]),
            (&pids, &["pids.max", "cgroup.procs"][..]),
        ] {
            std::fs::create_dir_all(d.join(&me)).unwrap();
            for f in files {
                std::fs::write(d.join(&me).join(f), "").unwrap();
            }
        }
        let bounds =
            Bounds { cgroups: vec![memory.clone(), pids.clone()], memory: Some(64 << 20), processes: Some(50) };
        enter(&bounds).unwrap();
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(memory.join(&me).join("memory.limit_in_bytes")), (64u64 << 20).to_string());
        assert_eq!(read(memory.join(&me).join("memory.memsw.limit_in_bytes")), (64u64 << 20).to_string());
        assert_eq!(read(pids.join(&me).join("pids.max")), "52");
        // cgroup v1 (a `tasks` file): the calling thread, `0`; else the pid.
        assert_eq!(read(memory.join(&me).join("tasks")), "0");
        assert_eq!(read(memory.join(&me).join("cgroup.procs")), "");
        assert_eq!(read(pids.join(&me).join("cgroup.procs")), me);
        // A folder that is not a cgroup has none of its files: nothing is
        // created there, and the wrapper stops.
        let bogus = Bounds { cgroups: vec![dir.path().join("none")], ..bounds };
        assert!(enter(&bogus).unwrap_err().contains("cannot set up the command's cgroup"));
        assert!(!dir.path().join("none").join(&me).join("pids.max").exists());
    }
}
