//! Which `cassist-sandbox` program is this build's own: [`build_id`].

/// What identifies this build's wrapper: the version, and a hash of the
/// wrapper's sources and of the dependencies' exact versions
/// (`Cargo.lock`). A `cassist-sandbox` that answers anything else is not
/// used.
pub fn build_id() -> String {
    format!("{}-{BUILD_HASH:016x}", env!("CARGO_PKG_VERSION"))
}

/// The files the wrapper is built from, paths relative to this file: every
/// source file of this crate (a test checks that none is missing), the
/// `cassist-sandbox` program's own, the crate's manifest and the
/// workspace's `Cargo.lock`.
macro_rules! sources {
    ($($path:literal),* $(,)?) => {
        #[cfg(test)]
        const SOURCE_PATHS: &[&str] = &[$($path),*];
        const SOURCES: &[&[u8]] = &[$(include_bytes!($path)),*];
    };
}

sources![
    "../lib.rs",
    "../process/cancel.rs",
    "../process/capture.rs",
    "../process/command.rs",
    "../process/error.rs",
    "../process/group.rs",
    "../process/kill_scan.rs",
    "../process/mod.rs",
    "../process/program.rs",
    "../process/redact.rs",
    "../process/runner.rs",
    "../process/runner/tests.rs",
    "../process/test_support.rs",
    "../process/transcript.rs",
    "../process/wait.rs",
    "args.rs",
    "build_id.rs",
    "cgroup.rs",
    "confine.rs",
    "exec.rs",
    "host.rs",
    "mod.rs",
    "mounts.rs",
    "net.rs",
    "secrets.rs",
    "spec.rs",
    "supervise.rs",
    "../../../../src/bin/cassist-sandbox.rs",
    "../../Cargo.toml",
    "../../../../Cargo.lock",
];

const BUILD_HASH: u64 = fnv1a(SOURCES);

/// FNV-1a over `parts`, at compile time.
const fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < parts.len() {
        let part = parts[i];
        let mut j = 0;
        while j < part.len() {
            hash ^= part[j] as u64;
            hash = hash.wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    hash
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    #[test]
    fn the_build_id_is_the_version_and_a_hash() {
        let id = build_id();
        let (version, hash) = id.split_once('-').unwrap();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        assert!(hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(fnv1a(&[b"a", b"b"]), fnv1a(&[b"ab"]), "over the bytes, whatever their parts");
        assert_ne!(fnv1a(&[b"ab"]), fnv1a(&[b"ba"]));
    }

    /// Every source file of the crate is hashed: a change to one that is
    /// not would leave an outdated `cassist-sandbox` looking like this
    /// build's own.
    #[test]
    fn the_build_id_covers_every_source_file() {
        fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    rust_files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let here = src.join("sandbox");
        let hashed: Vec<PathBuf> =
            SOURCE_PATHS.iter().map(|p| here.join(p).canonicalize().expect("a hashed file exists")).collect();
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(files.len() > 20, "{files:?}");
        for file in files {
            assert!(hashed.contains(&file.canonicalize().unwrap()), "{} is not in the build id", file.display());
        }
    }
}
