//! The spec as the wrapper's arguments ([`ExecSpec::to_args`]) and back
//! ([`ExecSpec::from_args`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Bounds, ExecSpec, Network, Overlay, StateViews, WRAPPER_COMMAND};

/// Why the wrapper's arguments are not a spec [`ExecSpec::to_args`] wrote.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// A flag that is not text.
    #[error("unexpected wrapper argument {0:?}")]
    NotText(OsString),
    #[error("unknown wrapper argument `{0}`")]
    Unknown(String),
    /// The flag is the last argument.
    #[error("`{0}` needs a value")]
    NoValue(String),
    #[error("`--parent` needs a pid")]
    NotAPid,
    /// `--grace-ms`, `--memory` or `--processes` without a number.
    #[error("`{0}` needs a number")]
    NotANumber(String),
    #[error("no `--cwd` given")]
    NoCwd,
    /// Some of `--mount-at`, `--upper`, `--work` (and `--lower`) without
    /// the others.
    #[error("an overlay needs `--mount-at`, `--upper` and `--work`")]
    PartialOverlay,
    #[error("`--state` needs `--state-dir`")]
    StateWithoutDir,
    /// Nothing after `--`, or no `--`.
    #[error("no command given")]
    NoCommand,
}

impl ExecSpec {
    /// The arguments that make `cassist` run this spec.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![WRAPPER_COMMAND.into()];
        let mut push = |flag: &str, path: &Path| {
            args.push(flag.into());
            args.push(path.into());
        };
        if let Some(o) = &self.overlay {
            push("--mount-at", &o.target);
            for l in &o.lowers {
                push("--lower", l);
            }
            push("--upper", &o.upper);
            push("--work", &o.work);
        }
        for p in &self.hide {
            push("--hide", p);
        }
        for p in &self.keep {
            push("--keep", p);
        }
        for p in &self.read_only {
            push("--read-only", p);
        }
        push("--cwd", &self.cwd);
        for p in &self.writable {
            push("--write", p);
        }
        if self.namespaces {
            args.push("--namespaces".into());
        }
        if self.confined {
            args.push("--confined".into());
        }
        if self.landlock {
            args.push("--landlock".into());
        }
        if let Some(g) = self.grace {
            args.push("--grace-ms".into());
            args.push(g.as_millis().to_string().into());
        }
        if let Some(p) = self.parent {
            args.push("--parent".into());
            args.push(p.to_string().into());
        }
        match &self.network {
            Network::Host => {}
            Network::Isolated => args.push("--net-isolated".into()),
            Network::Proxy(p) => {
                args.push("--net-proxy".into());
                args.push(p.into());
            }
        }
        if let Some(s) = &self.state {
            args.push("--state-dir".into());
            args.push(s.dir.clone().into());
            for p in &s.paths {
                args.push("--state".into());
                args.push(p.into());
            }
            for p in &s.shared {
                args.push("--shared".into());
                args.push(p.into());
            }
        }
        let Bounds { cgroups, memory, processes } = &self.bounds;
        for c in cgroups {
            args.push("--cgroup".into());
            args.push(c.into());
        }
        for (flag, value) in [("--memory", memory), ("--processes", processes)] {
            if let Some(v) = value {
                args.push(flag.into());
                args.push(v.to_string().into());
            }
        }
        args.push("--".into());
        args.extend(self.argv.iter().cloned());
        args
    }

    /// The spec [`ExecSpec::to_args`] wrote, from the arguments after
    /// `__sandbox-exec`. Read by hand, not by the command-line parser: the
    /// wrapper starts for every command of a task, and building the whole
    /// command-line definition would be most of its start-up.
    pub fn from_args(args: impl IntoIterator<Item = OsString>) -> Result<ExecSpec, ArgsError> {
        let mut spec = ExecSpec::default();
        let (mut target, mut lowers, mut upper, mut work) = (None, Vec::new(), None, None);
        let (mut state_dir, mut state, mut shared) = (None, Vec::new(), Vec::new());
        let mut cwd = None;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let Some(flag) = flag.to_str().map(str::to_owned) else {
                return Err(ArgsError::NotText(flag));
            };
            match flag.as_str() {
                "--" => {
                    spec.argv = args.collect();
                    break;
                }
                "--namespaces" => spec.namespaces = true,
                "--confined" => spec.confined = true,
                "--landlock" => spec.landlock = true,
                "--net-isolated" => spec.network = Network::Isolated,
                _ => {
                    let value = args.next().ok_or_else(|| ArgsError::NoValue(flag.clone()))?;
                    let path = PathBuf::from(&value);
                    match flag.as_str() {
                        "--mount-at" => target = Some(path),
                        "--lower" => lowers.push(path),
                        "--upper" => upper = Some(path),
                        "--work" => work = Some(path),
                        "--hide" => spec.hide.push(path),
                        "--keep" => spec.keep.push(path),
                        "--read-only" => spec.read_only.push(path),
                        "--cwd" => cwd = Some(path),
                        "--write" => spec.writable.push(path),
                        "--state-dir" => state_dir = Some(path),
                        "--state" => state.push(path),
                        "--shared" => shared.push(path),
                        "--net-proxy" => spec.network = Network::Proxy(path),
                        "--cgroup" => spec.bounds.cgroups.push(path),
                        "--parent" => {
                            let pid = value.to_str().and_then(|v| v.parse().ok()).ok_or(ArgsError::NotAPid)?;
                            spec.parent = Some(pid);
                        }
                        "--grace-ms" => spec.grace = Some(Duration::from_millis(number(&flag, &value)?)),
                        "--memory" => spec.bounds.memory = Some(number(&flag, &value)?),
                        "--processes" => spec.bounds.processes = Some(number(&flag, &value)?),
                        _ => return Err(ArgsError::Unknown(flag)),
                    }
                }
            }
        }
        spec.cwd = cwd.ok_or(ArgsError::NoCwd)?;
        spec.overlay = match (target, upper, work) {
            (Some(target), Some(upper), Some(work)) => Some(Overlay { target, lowers, upper, work }),
            (None, None, None) if lowers.is_empty() => None,
            _ => return Err(ArgsError::PartialOverlay),
        };
        spec.state = match state_dir {
            Some(dir) => Some(StateViews { paths: state, dir, shared }),
            None if state.is_empty() && shared.is_empty() => None,
            None => return Err(ArgsError::StateWithoutDir),
        };
        if spec.argv.is_empty() {
            return Err(ArgsError::NoCommand);
        }
        Ok(spec)
    }
}

/// The number `value` of `flag`.
fn number(flag: &str, value: &std::ffi::OsStr) -> Result<u64, ArgsError> {
    value.to_str().and_then(|v| v.parse().ok()).ok_or_else(|| ArgsError::NotANumber(flag.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_reads_back_every_spec_it_is_given() {
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(b"/p/n\xffot-utf8".to_vec());
        let full = ExecSpec {
            namespaces: true,
            overlay: Some(Overlay {
                target: "/proj".into(),
                lowers: vec!["/ws/setup".into(), PathBuf::from(&odd)],
                upper: "/ws/agent".into(),
                work: "/ws/agent.work".into(),
            }),
            confined: true,
            hide: vec!["/proj/.cassist".into(), "--looks-like-a-flag".into()],
            keep: vec!["/proj".into()],
            read_only: vec!["/proj/.git".into()],
            cwd: "/proj/sub dir".into(),
            writable: vec!["/proj".into(), "/tmp".into()],
            landlock: true,
            grace: Some(Duration::from_millis(1500)),
            state: Some(StateViews {
                paths: vec!["/home/u/.cache".into()],
                dir: "/ws/state".into(),
                shared: vec!["/home/u/.cache/keep".into()],
            }),
            parent: Some(4242),
            network: Network::Proxy("/ws/egress/1.sock".into()),
            bounds: Bounds {
                cgroups: vec!["/sys/fs/cgroup/memory/cassist-1".into(), "/sys/fs/cgroup/pids/cassist-1".into()],
                memory: Some(64 << 20),
                processes: Some(50),
            },
            argv: vec!["sh".into(), "-c".into(), "--".into(), odd.clone(), "--cwd".into()],
        };
        let plain = ExecSpec { cwd: "/w".into(), argv: vec!["true".into()], ..ExecSpec::default() };
        for spec in [full, plain] {
            let args = spec.to_args();
            assert_eq!(args[0], WRAPPER_COMMAND);
            let back = ExecSpec::from_args(args.into_iter().skip(1)).unwrap();
            assert_eq!(format!("{back:?}"), format!("{spec:?}"));
        }
        let bad = |args: &[&str]| ExecSpec::from_args(args.iter().map(OsString::from)).unwrap_err().to_string();
        assert!(bad(&["--", "true"]).contains("--cwd"));
        assert!(bad(&["--cwd", "/w", "--bogus", "x", "--", "true"]).contains("unknown wrapper argument `--bogus`"));
        assert!(bad(&["--cwd", "/w", "--upper", "/u", "--", "true"]).contains("--mount-at"));
        assert!(bad(&["--cwd", "/w", "--state", "/s", "--", "true"]).contains("--state-dir"));
        assert!(bad(&["--cwd", "/w", "--grace-ms", "soon", "--", "true"]).contains("`--grace-ms` needs a number"));
        assert!(bad(&["--cwd", "/w", "--memory", "8GiB", "--", "true"]).contains("`--memory` needs a number"));
        assert!(bad(&["--cwd", "/w", "--processes", "-1", "--", "true"]).contains("`--processes` needs a number"));
        assert!(bad(&["--cwd", "/w", "--parent", "me", "--", "true"]).contains("pid"));
        assert!(bad(&["--cwd", "/w"]).contains("no command"));
        assert!(bad(&["--cwd"]).contains("needs a value"));
    }
}
