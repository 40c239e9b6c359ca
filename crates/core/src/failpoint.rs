//! Deterministic crash points for the kill tests (tests/it/crash.rs).
//!
//! `CASSIST_FAILPOINT=name:N` makes cassist SIGKILL itself at the N-th
//! call of [`hit`] with that name (counted from 1), exactly as a kill from
//! outside would land at that moment: no destructor, no flush, no
//! cleanup. The variable is read once, at the first call; unset (always,
//! outside tests) every call is a load of a cached `None`.
//!
//! The points are named after the step they follow: `flush-file` comes
//! after each file of an integration, `record-entry` after a store entry
//! was written, and so on (the kill tests list them all). A leaf: it
//! imports nothing of the crate.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that names the point and the hit to die at.
pub const VAR: &str = "CASSIST_FAILPOINT";

/// The point `name` is reached: SIGKILL if it is the chosen one and this is
/// its N-th hit.
pub fn hit(name: &str) {
    static CHOSEN: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let Some((chosen, at)) = CHOSEN.get_or_init(|| std::env::var(VAR).ok().as_deref().and_then(parse)) else {
        return;
    };
    if chosen == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *at {
        // SIGKILL to this very process: nothing after it runs.
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        // The signal is delivered before kill returns to a single-threaded
        // caller; another thread may run on for an instant: it stops here.
        loop {
            std::thread::park();
        }
    }
}

/// `name:N` (N ≥ 1).
fn parse(spec: &str) -> Option<(String, u64)> {
    let (name, n) = spec.rsplit_once(':')?;
    let n: u64 = n.trim().parse().ok()?;
    (!name.is_empty() && n > 0).then(|| (name.to_owned(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_name_and_count() {
        assert_eq!(parse("flush-file:3"), Some(("flush-file".to_owned(), 3)));
        assert_eq!(parse("flush-file:0"), None);
        assert_eq!(parse("flush-file"), None);
        assert_eq!(parse(":2"), None);
        assert_eq!(parse("a:b:2"), Some(("a:b".to_owned(), 2)));
    }

    #[test]
    fn a_point_that_is_not_chosen_does_nothing() {
        // The test process has no CASSIST_FAILPOINT: hitting any point is
        // harmless.
        for _ in 0..3 {
            hit("flush-file");
        }
    }
}
