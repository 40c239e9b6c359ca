//! `cassist check`: validate everything, run nothing, write nothing.

use std::path::Path;

use super::{Error, Result};
use crate::cli::TaskArgs;
use crate::report::Output;

pub fn run(cwd: &Path, args: &TaskArgs, out: &Output) -> Result {
    let loaded = cassist_core::plan::load(cwd, &super::load_options(args)).map_err(Error::Invalid)?;
    out.print_diagnostics(&loaded.warnings);
    if !out.quiet {
        let mut files: Vec<&str> = loaded.tasks.iter().map(|t| t.source.name.as_str()).collect();
        files.dedup();
        let n = loaded.tasks.len();
        cassist_core::outln!(
            "{} {n} task{} in {} file{}",
            out.green("ok:"),
            if n == 1 { "" } else { "s" },
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}
