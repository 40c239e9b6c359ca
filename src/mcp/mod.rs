//! `cassist mcp [PATH...]`: the project's tasks served to a
//! coordinating agent over the Model Context Protocol on stdio, through
//! `rmcp` (the official Rust SDK). Every call goes through the same
//! planner, scheduler, runner, store and lock as `cassist run` (a
//! [`cassist_run::session::Session`], as `run` uses); inline tasks are read
//! as a task file named `<mcp>`, hashed and recorded in the store like any
//! task, but never written to `cassist.lock`.
//!
//! - [`io`]: the standard streams (only protocol messages on stdout; a
//!   parse error for a line that is not JSON; the end of stdin).
//! - [`server`]: the tools, their schemas, progress and cancellation.
//! - [`call`]: what the tools do, on blocking threads.
//! - [`inline`]: inline tasks as task-file text.

mod call;
mod inline;
mod io;
mod server;

use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt as _;

use crate::cli::TaskArgs;
use crate::cmd::{Error, Result};
use cassist_sandbox::process::Cancel;

/// Serves MCP on stdio until the client closes stdin or a signal ends it;
/// calls in progress then stop as after Ctrl-C (agents stopped,
/// workspaces removed) before the server exits.
pub fn main(dir: Option<&Path>, args: &TaskArgs) -> Result {
    let cwd = crate::cmd::enter(dir)?;
    // From here on, nothing but the protocol reaches the real stdout.
    let stdout = io::protocol_stdout().map_err(|e| Error::Internal(format!("cannot set up stdout: {e}")))?;
    let serving = call::Serving { cwd, options: crate::cmd::load_options(args) };
    // SIGINT and SIGTERM as in `run`: the first stops the server and its
    // calls as Ctrl-C stops a run, the second kills what still runs, a
    // third exits at once.
    let stop = Cancel::default();
    let (_, _told) = crate::cmd::run::install_ctrl_c(stop.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))?;
    let calls = Arc::new(server::Calls::default());
    let (lines, writer) = io::writer(stdout);
    let served = rt.block_on(serve(serving, calls.clone(), lines, stop.clone()));
    // Whatever ended the server, the calls in progress end as after Ctrl-C.
    calls.cancel_all();
    calls.wait_idle();
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    let _ = writer.join();
    served?;
    if stop.is_cancelled() { Err(Error::Interrupted) } else { Ok(()) }
}

async fn serve(
    serving: call::Serving,
    calls: Arc<server::Calls>,
    lines: std::sync::mpsc::Sender<Vec<u8>>,
    stop: Cancel,
) -> Result {
    let (to_server, server_in) = tokio::io::duplex(1 << 20);
    let (server_out, from_server) = tokio::io::duplex(1 << 20);
    let ended = calls.clone();
    tokio::spawn(io::pump_in(to_server, lines.clone(), move || ended.cancel_all()));
    let out = tokio::spawn(io::pump_out(from_server, lines));
    let server = server::Server::new(serving, calls.clone());
    let service = server
        .serve((server_in, server_out))
        .await
        .map_err(|e| Error::Internal(format!("MCP initialization failed: {e}")))?;
    let cancel = service.cancellation_token();
    tokio::select! {
        _ = service.waiting() => {}
        () = stop.cancelled() => {
            calls.cancel_all();
            cancel.cancel();
        }
    }
    let _ = out.await;
    Ok(())
}
