//! KDL → typed [`Task`]s and [`ProjectConfig`], with every error a
//! diagnostic that points at the offending node or value.

pub mod cache;
pub mod config;
pub mod diag;
pub mod duration;
pub mod reader;
pub mod remote;
pub mod task;
pub mod types;

pub use config::{
    BUILTIN_AGENTS, CustomAgent, CustomAgentDef, NetworkConfig, ProjectConfig, SandboxConfig, TestSetting, Trust,
    TrustOrigin,
};
pub use diag::{Diagnostics, SourceFile, Spanned, SpecDiagnostic};
pub use task::{Acceptance, Task};
pub use types::{Kind, SandboxLevel};

use std::path::Path;
use std::sync::Arc;

/// Reads a file as a [`SourceFile`], or a diagnostic saying why not.
pub fn read_source(path: &Path, display: String) -> Result<Arc<SourceFile>, SpecDiagnostic> {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Ok(SourceFile::new(display, text)),
            Err(_) => Err(SpecDiagnostic::error("not-utf8", format!("{display} is not valid UTF-8"))
                .help("KDL files must be UTF-8 text")),
        },
        Err(e) => Err(SpecDiagnostic::error("read-failed", format!("cannot read {display}: {e}"))),
    }
}
