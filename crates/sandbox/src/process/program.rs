//! The program a command starts: `argv[0]` looked up in the command's own
//! `PATH` (the one `PATH` lookup of cassist).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Command, RunError};

/// `PATH` used to find the program when the environment has none (glibc's
/// default for `execvp`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The program to execute: `argv[0]` resolved as [`Command::argv`] says.
pub(super) fn resolve_program(cmd: &Command) -> Result<PathBuf, RunError> {
    let Some(prog) = cmd.argv.first() else {
        return Err(RunError::EmptyCommand);
    };
    let path = Path::new(prog);
    if prog.as_bytes().contains(&b'/') {
        let full = if path.is_absolute() { path.to_path_buf() } else { cmd.cwd.join(path) };
        if !full.exists() {
            return Err(RunError::NoSuchProgram { program: prog.to_string_lossy().into_owned(), path: full });
        }
        return absolute(cmd, full);
    }
    let search: &OsStr =
        cmd.env.iter().rev().find(|(k, _)| k == "PATH").map_or(OsStr::new(DEFAULT_PATH), |(_, v)| v.as_os_str());
    let found = find_in_path(prog, search, &cmd.cwd).ok_or_else(|| RunError::NotInPath {
        program: prog.to_string_lossy().into_owned(),
        path: search.to_string_lossy().into_owned(),
    })?;
    absolute(cmd, found)
}

/// `program` as a path that does not depend on the current folder: the
/// child changes folder before its exec, so a relative path (only with a
/// relative `cwd`) would be taken from `cwd` a second time.
fn absolute(cmd: &Command, program: PathBuf) -> Result<PathBuf, RunError> {
    if program.is_absolute() {
        return Ok(program);
    }
    program.canonicalize().map_err(|e| spawn_error(cmd, &program, e))
}

/// The first executable file named `program` in the folders of `path`
/// (`:`-separated, as in `PATH`); empty and relative entries are taken
/// relative to `cwd`. The one `PATH` lookup of cassist.
pub fn find_in_path(program: &OsStr, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    path.as_bytes().split(|b| *b == b':').find_map(|dir| {
        let candidate = cwd.join(OsStr::from_bytes(dir)).join(program);
        is_executable_file(&candidate).then_some(candidate)
    })
}

/// A regular file with an execute bit.
pub fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The kernel would not start `program`, the resolved `argv[0]` of `cmd`.
pub(super) fn spawn_error(cmd: &Command, program: &Path, error: std::io::Error) -> RunError {
    RunError::Start { program: cmd.program(), resolved: program.to_path_buf(), error }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::process::test_support::*;
    use crate::process::*;

    #[test]
    fn relative_program_with_a_slash_is_taken_from_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent.sh");
        std::fs::write(&script, "#!/bin/sh\necho \"agent $0\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new(["./agent.sh"], dir.path());
        c.env = base_env();
        // A script's $0 is the path the kernel was given: the resolved one.
        let expected = format!("agent {}\n", dir.path().join("./agent.sh").display());
        assert_eq!(go(&c).tail, expected);
    }

    #[test]
    fn relative_program_in_a_relative_cwd_is_found_once() {
        // The tests run in the crate's folder: a folder made there is
        // named relative to it (wherever the target folder is).
        let dir = tempfile::Builder::new().prefix(".process-test-").tempdir_in(".").unwrap();
        let rel = PathBuf::from(dir.path().file_name().unwrap());
        std::fs::write(dir.path().join("agent.sh"), "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(dir.path().join("agent.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new(["./agent.sh"], &rel);
        c.env = base_env();
        assert_eq!(go(&c).tail, "ran\n");
        let mut c = Command::new(["agent.sh"], &rel);
        c.env = vec![("PATH".into(), ".".into())];
        assert_eq!(go(&c).tail, "ran\n");
    }

    #[test]
    fn missing_program_is_not_found_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["cassist-no-such-agent"], dir.path());
        c.env = base_env();
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("cassist-no-such-agent"), "{e}");
        assert!(matches!(e, RunError::NotInPath { .. }), "{e:?}");
        // Callers in io::Result keep the kind and the message.
        let as_io = io::Error::from(e);
        assert_eq!(as_io.kind(), io::ErrorKind::NotFound);
        assert!(as_io.to_string().starts_with("program `cassist-no-such-agent` not found in PATH"), "{as_io}");

        let mut c = Command::new(["./bin/missing-agent"], dir.path());
        c.env = base_env();
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("./bin/missing-agent"), "{e}");
        assert!(matches!(e, RunError::NoSuchProgram { .. }), "{e:?}");
    }

    #[test]
    fn program_is_looked_up_in_the_given_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["sh", "-c", "true"], dir.path());
        c.env = vec![("PATH".into(), dir.path().into())];
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("sh is not in that PATH");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn path_lookup_takes_the_first_executable_and_relative_entries_from_cwd() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["a", "b", "c"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("a/tool"), "").unwrap(); // not executable
        for at in ["b/tool", "c/tool", "tool"] {
            std::fs::write(dir.path().join(at), "").unwrap();
            std::fs::set_permissions(dir.path().join(at), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let abs = |s: &str| dir.path().join(s);
        let path = std::env::join_paths([abs("a"), abs("b"), abs("c")]).unwrap();
        assert_eq!(find_in_path("tool".as_ref(), &path, Path::new("/")), Some(abs("b/tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a:c".as_ref(), dir.path()), Some(abs("c/tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a::c".as_ref(), dir.path()), Some(abs("tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a".as_ref(), dir.path()), None);
        assert_eq!(find_in_path("tool".as_ref(), "c".as_ref(), Path::new("")), None, "relative to our own cwd");
    }

    #[test]
    fn missing_interpreter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent");
        std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = Command::new(["./agent"], dir.path());
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("`./agent`"), "{e}");
    }
}
