//! The journal file, `.cassist/journal`: written beside and renamed in,
//! read back only when whole (its checksum), removed once what it wrote is
//! on disk.

use std::io::Write;
use std::path::Path;

use super::Journal;
use super::steps::{sync_each, unsafe_path};
use crate::fsx::{ensure_state_dir, state_dir, sync_dir};

/// The journal's name in `.cassist/`.
pub const JOURNAL: &str = "journal";
/// Where an unreadable journal is set aside.
pub(super) const INVALID: &str = "journal.invalid";
/// Where the journal is written before it is renamed in.
pub(super) const JOURNAL_TMP: &str = ".cassist-tmp-journal";
/// The first line of a journal starts with this, then its checksum.
const HEADER: &str = "cassist-journal 1";
pub(super) const FORMAT: u32 = 1;

pub(super) fn write_journal(root: &Path, journal: &Journal) -> std::io::Result<()> {
    let dir = ensure_state_dir(root)?;
    // serde_json's own conversion: an encoding error (there is none for
    // these fields: strings, numbers, lists) as an `InvalidData` one.
    let body = serde_json::to_vec(journal)?;
    let mut text = format!("{HEADER} {}\n", blake3::hash(&body).to_hex()).into_bytes();
    text.extend_from_slice(&body);
    let tmp = dir.join(JOURNAL_TMP);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&text)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(JOURNAL))?;
    sync_dir(&dir)
}

/// Why a journal on disk does not read back whole and sound: it was never
/// acted on.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreadable {
    #[error(transparent)]
    Read(std::io::Error),
    #[error("no header")]
    NoHeader,
    #[error("a bad header")]
    BadHeader,
    #[error("its checksum does not match: it is cut short or damaged")]
    Checksum,
    #[error("it does not parse: {0}")]
    Parse(#[source] serde_json::Error),
    #[error("format {0} is not {FORMAT}")]
    Format(u32),
    #[error("it names `{0}`, which is no path of the project")]
    BadPath(String),
}

/// The journal, if there is one; why not, if it does not read back whole
/// and sound.
pub(super) fn read_journal(root: &Path) -> Result<Option<Journal>, Unreadable> {
    let bytes = match std::fs::read(state_dir(root).join(JOURNAL)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Unreadable::Read(e)),
    };
    let nl = bytes.iter().position(|&b| b == b'\n').ok_or(Unreadable::NoHeader)?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| Unreadable::BadHeader)?;
    let sum = header.strip_prefix(HEADER).and_then(|s| s.strip_prefix(' ')).ok_or(Unreadable::BadHeader)?;
    let body = &bytes[nl + 1..];
    if blake3::hash(body).to_hex().as_str() != sum {
        return Err(Unreadable::Checksum);
    }
    let journal: Journal = serde_json::from_slice(body).map_err(Unreadable::Parse)?;
    if journal.format != FORMAT {
        return Err(Unreadable::Format(journal.format));
    }
    let paths = journal.steps.iter().map(|s| &s.path).chain(&journal.made);
    if let Some(bad) = paths.into_iter().find(|p| unsafe_path(p).is_some()) {
        return Err(Unreadable::BadPath(bad.clone()));
    }
    Ok(Some(journal))
}

/// Removes the journal of a transaction of `paths` paths, once what it
/// wrote is on disk.
pub(super) fn remove_journal(root: &Path, paths: usize) -> std::io::Result<()> {
    let dir = state_dir(root);
    if !sync_each(paths) {
        let f = std::fs::File::open(root)?;
        nix::unistd::syncfs(&f)?;
    }
    match std::fs::remove_file(dir.join(JOURNAL)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    sync_dir(&dir)
}
