//! cassist's run pipeline: what runs a plan's tasks. [`workspace`] (each
//! task's view of the project, and integration into the user's tree),
//! [`entry`] (one entry of a workspace read safely), [`agent`] (the agent
//! CLIs behind one trait), [`review`], [`accept`] (acceptance commands and
//! test output), [`split`] (recovery of oversized tasks), [`runner`] (one
//! task), [`apply`] (the helper that replays a stored change in a
//! workspace), [`scheduler`] (the batch), and [`session`]: the whole
//! pipeline of a run as one library call, which the CLI and the MCP server
//! both use.
//!
//! Every process starts through `cassist-sandbox`. This crate reaches no
//! network itself: the team cache is handed in by the command layer as a
//! [`cassist_core::team::TeamCache`], and a task's commands reach theirs
//! through `cassist-egress`'s proxy ([`runner::network`]).

pub mod accept;
pub mod agent;
pub mod apply;
pub mod entry;
pub mod review;
pub mod runner;
pub mod scheduler;
pub mod session;
pub mod split;
pub mod workspace;
