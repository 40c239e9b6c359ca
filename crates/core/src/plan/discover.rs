//! Finding task files: files and folders from the command line (default
//! `tasks/` under the project root), folders walked for `*.kdl`, hidden
//! folders and `.cassist/` skipped, sorted.

use std::path::{Path, PathBuf};

use crate::spec::SpecDiagnostic;

pub fn task_files(cwd: &Path, root: &Path, given_paths: &[PathBuf]) -> Result<Vec<PathBuf>, SpecDiagnostic> {
    let defaulted = given_paths.is_empty();
    let paths: Vec<PathBuf> =
        if defaulted { vec![root.join("tasks")] } else { given_paths.iter().map(|p| cwd.join(p)).collect() };
    let mut out = Vec::new();
    let shown: Vec<PathBuf> = if defaulted { vec![PathBuf::from("tasks/")] } else { given_paths.to_vec() };
    for (given, path) in shown.iter().zip(&paths) {
        if path.is_file() {
            out.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            let mut d = SpecDiagnostic::error("no-such-path", format!("{} does not exist", given.display()));
            d = d.help(if defaulted {
                format!("cassist looks for task files in tasks/ under the project root ({}); pass a folder or file, or run `cassist init`", root.display())
            } else {
                "pass task files or folders that hold them".to_owned()
            });
            return Err(d);
        }
        let before = out.len();
        let walker = walkdir::WalkDir::new(path).sort_by_file_name().into_iter().filter_entry(|e| {
            e.depth() == 0 || !(e.file_type().is_dir() && e.file_name().to_str().is_some_and(|n| n.starts_with('.')))
        });
        for entry in walker.flatten() {
            if entry.file_type().is_file() && entry.path().extension().is_some_and(|x| x == "kdl") {
                out.push(entry.into_path());
            }
        }
        if out.len() == before {
            return Err(SpecDiagnostic::error(
                "no-task-files",
                format!("no task files (*.kdl) in {}", given.display()),
            )
            .help(
                "write tasks as `task \"name\" { goal \"...\" }` in .kdl files, or run `cassist init` for an example",
            ));
        }
    }
    // The config is not a task file, even when a folder walk meets it.
    out.retain(|p| p.file_name().is_none_or(|n| n != crate::project::CONFIG_FILE) || p.parent() != Some(root));
    out.sort();
    out.dedup();
    Ok(out)
}
