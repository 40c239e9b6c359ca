//! A cache of parsed task files, keyed by the blake3 hash of their text, so
//! that a re-plan of unchanged files skips the KDL parser (which dominates
//! planning time on large projects). Only files that parsed without any
//! diagnostic are cached; the key includes cassist's version.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::diag::SourceFile;
use super::task::Task;

const FORMAT: &str = concat!("cassist spec cache 2 ", env!("CARGO_PKG_VERSION"));

#[derive(Serialize, Deserialize, Default)]
struct Document {
    format: String,
    files: HashMap<String, Entry>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Entry {
    text_hash: String,
    tasks: Vec<Task>,
}

/// Parsed task files by name and text hash.
#[derive(Default)]
pub struct SpecCache {
    path: PathBuf,
    doc: Document,
    dirty: bool,
}

impl SpecCache {
    /// Loads the cache; a missing, unreadable or older cache is empty.
    pub fn load(path: &Path) -> SpecCache {
        let doc = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Document>(&bytes).ok())
            .filter(|d| d.format == FORMAT)
            .unwrap_or_else(|| Document { format: FORMAT.to_owned(), files: HashMap::new() });
        SpecCache { path: path.to_path_buf(), doc, dirty: false }
    }

    /// The tasks of `src` when its text is unchanged since it was cached.
    pub fn get(&self, src: &Arc<SourceFile>) -> Option<Vec<Task>> {
        let entry = self.doc.files.get(&src.name)?;
        if entry.text_hash != text_hash(src) {
            return None;
        }
        let mut tasks = entry.tasks.clone();
        for t in &mut tasks {
            t.source = Arc::clone(src);
        }
        Some(tasks)
    }

    /// Records the tasks of a file that parsed cleanly.
    pub fn put(&mut self, src: &Arc<SourceFile>, tasks: &[Task]) {
        self.doc.files.insert(src.name.clone(), Entry { text_hash: text_hash(src), tasks: tasks.to_vec() });
        self.dirty = true;
    }

    /// Writes the cache when it changed.
    pub fn save(&mut self) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&self.doc)?;
        crate::fsx::write_cache(&self.path, &bytes)?;
        self.dirty = false;
        Ok(())
    }
}

fn text_hash(src: &SourceFile) -> String {
    blake3::hash(src.text.as_bytes()).to_hex().to_string()
}
