//! The team cache as a run sees it: a store behind the local one, which
//! fills the local store with the entries it holds and takes the entries of
//! what passed. The run pipeline (`cassist-run`) calls only this trait; its
//! implementation (`cassist-remote`) is the one that reaches the network,
//! and the command layer hands it in. So no runner, agent or task command
//! links network code, and planning never waits on a remote.

use std::time::Duration;

use crate::store::Store;

/// A fetch from the team cache: the entries written into the local store
/// (by input hash), and the warnings to show.
#[derive(Debug, Default)]
pub struct Fill {
    pub fetched: Vec<String>,
    pub warnings: Vec<String>,
}

/// A store behind the local one, shared by a team.
pub trait TeamCache: Send + Sync {
    /// Fetches the entries of `wanted` (task, input hash) that the team
    /// cache holds and trusts into `store`, objects first and the entry
    /// last; every refusal is a warning and the task stays to be run.
    fn fill(&self, store: &Store, wanted: &[(String, String)]) -> Fill;

    /// Uploads the entry recorded for `before` (task `task`) in the
    /// background; [`TeamCache::finish_uploads`] waits for it. Does nothing
    /// where the cache is read-only.
    fn spawn_upload(&self, store: &Store, task: &str, before: &str);

    /// Waits for the uploads started so far, at most `bound` in all.
    /// Returns the count of entries uploaded, and a warning for each that
    /// did not go up.
    fn finish_uploads(&self, bound: Duration) -> (usize, Vec<String>);
}
