//! The integration suite: one test binary (`cargo test --test it`), one
//! module per area, and the shared [`support`] (the fixture builder, the
//! command runner, the sandbox check).
//!
//! Run one area with `cargo test --test it AREA::`, e.g. `cargo test --test
//! it agents::` for the end-to-end suite of the four agent CLIs.

// The tests print as tests do; the rule of clippy.toml is for cassist.
#![allow(clippy::disallowed_macros)]

mod support;

mod agents;
mod attacks;
mod cache;
mod ci;
mod cli;
mod compat;
mod crash;
mod demo;
mod edits;
mod fanout;
mod fuzz;
mod hash;
mod limits;
mod mcp;
mod network;
mod outputs;
mod parallel;
mod remote;
mod replay;
mod review;
mod run;
mod sandbox;
mod secrets;
mod serial;
mod servers;
mod snapshot;
mod specs;
mod split;
mod stale;
mod verify;
mod workspace;
