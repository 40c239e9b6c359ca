//! The memory and processes each command of a task may use (`limits {
//! memory; processes }` of `cassist.kdl`), and what a command that went
//! past them comes to.
//!
//! The run's cgroups are made on the first command that needs them (a run
//! whose tasks are all up to date starts no command and looks for none),
//! and removed with the run. Where none can be written, each process of a
//! command gets resource limits instead, said once: they cannot bound a
//! whole process tree's memory, nor tell which limit a failed command hit.
//! `CASSIST_CGROUPS=off` uses them even where a cgroup could be written.

use std::sync::OnceLock;

use cassist_core::limits::{Limits, format_size};
use cassist_sandbox::sandbox::{Bounds, Exceeded, RunCgroups};

/// The run's limits on memory and processes, and its cgroups once made.
#[derive(Debug)]
pub struct Resources {
    memory: u64,
    processes: u64,
    /// No note on stderr.
    quiet: bool,
    cgroups: OnceLock<RunCgroups>,
}

impl Resources {
    pub fn new(limits: &Limits, quiet: bool) -> Resources {
        Resources { memory: limits.memory, processes: limits.processes, quiet, cgroups: OnceLock::new() }
    }

    /// What bounds a command: the limits, and the run's cgroups (made on
    /// the first call, the fallback said then).
    pub fn bounds(&self) -> Bounds {
        let cgroups = self.cgroups.get_or_init(|| self.create());
        Bounds { cgroups: cgroups.paths(), memory: Some(self.memory), processes: Some(self.processes) }
    }

    fn create(&self) -> RunCgroups {
        let off = std::env::var("CASSIST_CGROUPS").is_ok_and(|v| v == "off");
        let found = if off { Vec::new() } else { cassist_sandbox::sandbox::find_cgroups() };
        let (cgroups, errors) = RunCgroups::create(&found);
        let why = match (off, errors.is_empty()) {
            (true, _) => "CASSIST_CGROUPS=off".to_owned(),
            (false, true) => NONE_FOUND.to_owned(),
            (false, false) => errors.join("; "),
        };
        let root = nix::unistd::getuid().is_root();
        if !self.quiet
            && let Some(note) = fallback_note(cgroups.memory(), cgroups.pids(), root, &why)
        {
            cassist_core::errln!("{note}");
        }
        cgroups
    }

    /// After the command whose wrapper was process `pid`: which limits it
    /// went past (nothing where no cgroup bounds it); its cgroups are
    /// removed.
    pub fn finish(&self, pid: u32) -> Exceeded {
        self.cgroups.get().map(|c| c.finish(pid)).unwrap_or_default()
    }

    /// A failed command that went past `exceeded`, with its output's end.
    pub fn over_limit(&self, exceeded: Exceeded, tail: String) -> OverLimit {
        OverLimit { exceeded, memory: self.memory, processes: self.processes, tail }
    }
}

/// Why no cgroup was found.
const NONE_FOUND: &str = "neither a cgroup v2 subtree delegated to it with the memory and pids controllers nor a writable cgroup v1 hierarchy of them";

/// The note a run without a cgroup for `memory` or `pids` (found for
/// neither: `why`) says once; `root`: cassist runs as root, whom
/// `RLIMIT_NPROC` does not bind.
fn fallback_note(memory: bool, pids: bool, root: bool, why: &str) -> Option<String> {
    if memory && pids {
        return None;
    }
    let which = match (memory, pids) {
        (false, false) => "the memory and processes",
        (false, true) => "the memory",
        _ => "the processes",
    };
    let mut instead = Vec::new();
    if !memory {
        instead.push("each process may use the memory limit on its own (RLIMIT_DATA): a command's processes together are not bounded");
    }
    if !pids && root {
        instead.push("the process limit is not applied (RLIMIT_NPROC does not bind root)");
    } else if !pids {
        instead.push("the process limit counts every process of your user (RLIMIT_NPROC)");
    }
    instead.push("a command that fails at a limit is not told apart from any other failure");
    Some(format!(
        "note: no cgroup can bound {which} of each command here ({why}); instead {}. Run cassist in a cgroup \
         delegated to it to have them (`systemd-run --user --scope -p Delegate=yes cassist run`)",
        instead.join("; ")
    ))
}

/// A command that failed after it went past a limit of `limits`.
#[derive(Debug, Clone)]
pub struct OverLimit {
    pub exceeded: Exceeded,
    memory: u64,
    processes: u64,
    /// The end of its output.
    pub tail: String,
}

/// "went past the memory limit (8 GiB, limits memory in cassist.kdl)".
impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut past = Vec::new();
        if self.exceeded.memory {
            past.push(format!("the memory limit ({}, limits memory in cassist.kdl)", format_size(self.memory)));
        }
        if self.exceeded.processes {
            past.push(format!("the process limit ({}, limits processes in cassist.kdl)", self.processes));
        }
        write!(f, "went past {}", past.join(" and "))
    }
}

impl std::error::Error for OverLimit {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_past_a_limit_is_said_with_the_limit_and_where_it_is_set() {
        let limits = Limits { memory: 64 << 20, processes: 50, ..Limits::DEFAULT };
        let r = Resources::new(&limits, true);
        let memory = r.over_limit(Exceeded { memory: true, processes: false }, "Killed\n".into());
        assert_eq!(memory.to_string(), "went past the memory limit (64 MiB, limits memory in cassist.kdl)");
        assert_eq!(memory.tail, "Killed\n");
        let both = r.over_limit(Exceeded { memory: true, processes: true }, String::new());
        assert_eq!(
            both.to_string(),
            "went past the memory limit (64 MiB, limits memory in cassist.kdl) and the process limit (50, limits processes in cassist.kdl)"
        );
        // No cgroup made: nothing to read after a command.
        assert_eq!(r.finish(1), Exceeded::default());
    }

    #[test]
    fn the_fallback_says_what_it_cannot_bound() {
        assert_eq!(fallback_note(true, true, false, "x"), None);
        let none = fallback_note(false, false, false, "why").unwrap();
        assert_eq!(
            none,
            "note: no cgroup can bound the memory and processes of each command here (why); instead each process \
             may use the memory limit on its own (RLIMIT_DATA): a command's processes together are not bounded; \
             the process limit counts every process of your user (RLIMIT_NPROC); a command that fails at a limit \
             is not told apart from any other failure. Run cassist in a cgroup delegated to it to have them \
             (`systemd-run --user --scope -p Delegate=yes cassist run`)"
        );
        let root = fallback_note(false, false, true, "why").unwrap();
        assert!(root.contains("; the process limit is not applied (RLIMIT_NPROC does not bind root);"), "{root}");
        // One controller missing: only what its fallback lacks.
        let pids_missing = fallback_note(true, false, false, "why").unwrap();
        assert!(pids_missing.starts_with("note: no cgroup can bound the processes of each command"), "{pids_missing}");
        assert!(pids_missing.contains("RLIMIT_NPROC") && !pids_missing.contains("RLIMIT_DATA"), "{pids_missing}");
        let memory_missing = fallback_note(false, true, false, "why").unwrap();
        assert!(memory_missing.starts_with("note: no cgroup can bound the memory of each command"), "{memory_missing}");
        assert!(memory_missing.contains("RLIMIT_DATA") && !memory_missing.contains("RLIMIT_NPROC"), "{memory_missing}");
    }
}
