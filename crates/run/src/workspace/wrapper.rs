//! The program that runs the sandbox wrapper for every command of a task
//! ([`wrapper_program`]).

use std::path::{Path, PathBuf};

use cassist_core::paths::Stamp;
use cassist_sandbox::process;

/// The program that runs the sandbox wrapper for every command of a task:
/// [`cassist_sandbox::sandbox::WRAPPER_PROGRAM`] beside cassist (`exe`) when it is
/// of this very build (it answers `--build-id` with
/// [`cassist_sandbox::sandbox::build_id`]), else cassist itself (then said once,
/// unless `quiet`: a wrapper of another build may behave otherwise, so it
/// is never used). The answer is remembered in
/// `.cassist/cache/sandbox-wrapper` by the program's path, size and times.
pub fn wrapper_program(exe: &Path, root: &Path, quiet: bool) -> PathBuf {
    let candidate = exe.with_file_name(cassist_sandbox::sandbox::WRAPPER_PROGRAM);
    let Ok(meta) = std::fs::metadata(&candidate) else { return exe.to_path_buf() };
    let id = cassist_sandbox::sandbox::build_id();
    let s = Stamp::of(&meta);
    let key = format!("{} {} {} {} {id}\n", candidate.display(), s.size, s.mtime_ns, s.ctime_ns);
    let cache = cassist_core::fsx::state_dir(root).join("cache").join("sandbox-wrapper");
    if std::fs::read_to_string(&cache).is_ok_and(|k| k == key) {
        return candidate;
    }
    let mut ask = process::Command::inheriting([candidate.as_os_str(), "--build-id".as_ref()]);
    ask.timeout = Some(std::time::Duration::from_secs(10));
    let answer = process::run(&ask, &process::Redactor::default(), &process::Cancel::new());
    match answer {
        Ok(done) if done.success() && done.tail.trim() == id => {
            if cassist_core::fsx::ensure_state_dir(root).is_ok() {
                let _ = cassist_core::fsx::write_cache(&cache, key.as_bytes());
            }
            candidate
        }
        _ => {
            if !quiet {
                cassist_core::errln!(
                    "note: {} is not of this cassist's build (reinstall both): cassist runs its sandbox wrapper itself, which starts slower",
                    candidate.display()
                );
            }
            exe.to_path_buf()
        }
    }
}
