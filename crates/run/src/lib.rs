//! cassist's run pipeline: what runs a plan's tasks. [`workspace`] (each
//! task's view of the project, and integration into the user's tree),
//! [`entry`] (one entry of a workspace read safely), [`agent`] (the agent
//! CLIs behind one trait), [`review`], [`accept`] (acceptance commands and
//! test output), [`split`] (recovery of oversized tasks), [`runner`] (one
//! task), [`cache`] (recording and replaying results), [`scheduler`] (the
//! batch).
//!
//! Every process starts through `cassist-sandbox`; this crate reaches no
//! network (the team cache is the command layer's).

pub mod accept;
pub mod agent;
pub mod cache;
pub mod entry;
pub mod review;
pub mod runner;
pub mod scheduler;
pub mod split;
pub mod workspace;
