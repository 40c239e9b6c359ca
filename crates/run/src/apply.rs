//! `cassist __apply-changes SPEC`: the helper that writes a stored change
//! into the folder it is started in. The runner starts it inside a task's
//! sandbox to replay a recorded change onto the task's workspace, so the
//! write happens with the task's own confinement, never cassist's.

use std::path::Path;

use cassist_core::changes::{Change, ChangeKind};
use cassist_core::store::{Store, StoredChange};

/// Why the helper wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The SPEC file does not say what it must.
    #[error("{0}")]
    Spec(&'static str),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A change names what is never written (checked before anything is).
    #[error("refused to write {path}: {why}")]
    Refused { path: String, why: String },
    /// A stored object cannot be read.
    #[error("{0}")]
    Object(cassist_core::store::ObjectError),
    #[error("{0}")]
    Os(std::io::Error),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// `cassist __apply-changes SPEC`: writes a stored change into the current
/// folder. SPEC is `{"store": DIR, "changes": [StoredChange]}`.
pub fn apply_changes(spec: &Path) -> Result<(), ApplyError> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read(spec).map_err(|e| ApplyError::Io(format!("cannot read {}", spec.display()), e))?;
    let v: serde_json::Value = serde_json::from_slice(&text)?;
    let store_dir = v["store"].as_str().ok_or(ApplyError::Spec("no store"))?;
    let changes: Vec<StoredChange> = serde_json::from_value(v["changes"].clone())?;
    // The store lives under the project: `.cassist/store` → its root.
    let root = Path::new(store_dir).parent().and_then(Path::parent).ok_or(ApplyError::Spec("bad store path"))?;
    let store = Store::open(root);
    // What is never written, whatever an entry says (it may come from a
    // remote store): checked before anything is.
    for c in &changes {
        let symlink = c.mode & cassist_core::changes::S_IFMT == cassist_core::changes::S_IFLNK;
        let new = match &c.new {
            Some(h) if symlink => Some(store.get_object(h).map_err(ApplyError::Object)?),
            Some(_) => Some(Vec::new()),
            None => None,
        };
        let check = Change {
            path: c.path.clone(),
            kind: c.kind.clone(),
            old: None,
            new,
            mode: c.mode,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        };
        if let Some(why) = crate::workspace::never_written(&check) {
            return Err(ApplyError::Refused { path: c.path.clone(), why });
        }
    }
    for c in &changes {
        if let ChangeKind::Renamed { from } = &c.kind {
            let _ = std::fs::remove_file(from);
        }
        if c.new.is_none() {
            match std::fs::remove_file(&c.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ApplyError::Io(format!("cannot delete {}", c.path), e)),
            }
            // Folders left empty go too (a folder may give way to a file).
            let mut dir = Path::new(&c.path).parent();
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
        }
    }
    for c in &changes {
        let Some(h) = &c.new else { continue };
        let bytes = store.get_object(h).map_err(ApplyError::Object)?;
        if let Some(parent) = Path::new(&c.path).parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(ApplyError::Os)?;
        }
        // Never write through what is there now (a symlink would lead the
        // write elsewhere): replace it.
        match std::fs::symlink_metadata(&c.path) {
            Ok(m) if !m.is_dir() => {
                std::fs::remove_file(&c.path).map_err(|e| ApplyError::Io(format!("cannot replace {}", c.path), e))?
            }
            _ => {}
        }
        if c.mode & libc::S_IFMT == libc::S_IFLNK {
            std::os::unix::fs::symlink(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes), &c.path)
                .map_err(ApplyError::Os)?;
        } else {
            std::fs::write(&c.path, &bytes).map_err(|e| ApplyError::Io(format!("cannot write {}", c.path), e))?;
            std::fs::set_permissions(&c.path, std::fs::Permissions::from_mode(c.mode & 0o777))
                .map_err(ApplyError::Os)?;
        }
    }
    Ok(())
}
