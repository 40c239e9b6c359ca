//! The one way out of a task's network namespace: cassist's egress
//! proxy, and the credential broker behind it.
//!
//! A command of a task below `full` runs in a network namespace of its
//! own with nothing but its loopback; the sandbox wrapper opens the
//! proxy's port there ([`cassist_sandbox::sandbox::PROXY_ADDR`]) and hands
//! the listening socket to cassist over the unix socket of a [`Lease`].
//! The [`Service`] then accepts the command's connections on it and lets
//! each through only to the hosts of the lease's [`Policy`]
//! ([`proxy`]): HTTP CONNECT and plain HTTP, names resolved by the proxy,
//! metadata addresses never, loopback and private addresses only when
//! the user opened them. What it refused is counted per host
//! ([`Lease::refused`]). An agent whose API key cassist holds talks to
//! the proxy as its API ([`broker`]).
//!
//! The service starts on the first lease (a run that starts no command
//! starts no proxy) and ends with its owner.

pub mod broker;
pub mod policy;
mod proxy;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio::sync::Semaphore;

pub use broker::Broker;
pub use policy::{HostRule, Policy};

/// Connections one command may have open through the proxy at once; more
/// wait for one to end.
const CONNECTIONS_PER_COMMAND: usize = 256;

/// The hosts the proxy refused, with how often.
#[derive(Debug, Default)]
pub struct Refused(Mutex<BTreeMap<String, u64>>);

impl Refused {
    fn note(&self, host: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(host.to_owned()).or_default() += 1;
    }

    /// Every refusal so far, by host.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The hosts refused between two snapshots, by host.
pub fn refused_since(before: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .filter_map(|(h, n)| {
            let more = n - before.get(h).copied().unwrap_or(0);
            (more > 0).then(|| (h.clone(), more))
        })
        .collect()
}

/// The proxy: a runtime of its own (two threads), whatever the caller
/// runs on, and a private folder for the leases' sockets.
pub struct Service {
    rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    next: AtomicU64,
}

impl Service {
    /// Starts the proxy. Its sockets live in a new private folder under
    /// `/tmp`: every command with a network namespace has a `/tmp` of its
    /// own, so none of them can reach a lease's socket (and hand it a
    /// listener to get that lease's hosts).
    pub fn start() -> std::io::Result<Service> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cassist-egress")
            .enable_io()
            .enable_time()
            .build()?;
        let dir = tempfile::Builder::new().prefix("cassist-egress-").tempdir_in("/tmp")?;
        Ok(Service { rt, dir, next: AtomicU64::new(0) })
    }

    /// A socket the commands of one policy hand their listeners to: each
    /// command that connects is served as `policy` says until its end of
    /// the socket closes (the command's namespace is gone). `broker`
    /// answers requests sent to the proxy as an API.
    pub fn lease(&self, policy: Policy, broker: Option<Arc<Broker>>) -> std::io::Result<Lease> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("{n}.sock"));
        if !cassist_sandbox::sandbox::socket_path_fits(&path) {
            return Err(std::io::Error::other(format!("{} is too long for a socket", path.display())));
        }
        let refused = Arc::new(Refused::default());
        let served = Arc::new(proxy::Served { policy, broker, refused: refused.clone() });
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let accept = {
            let _guard = self.rt.enter();
            let listener = UnixListener::from_std(listener)?;
            self.rt.spawn(accept_commands(listener, served))
        };
        Ok(Lease { path, refused, accept: accept.abort_handle() })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Its connections end with it; never wait for them here (the
        // owner may be on an async runtime itself).
        let rt = std::mem::replace(
            &mut self.rt,
            tokio::runtime::Builder::new_current_thread().build().expect("an empty runtime"),
        );
        rt.shutdown_background();
    }
}

/// One policy's socket, as long as it is held.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    refused: Arc<Refused>,
    accept: tokio::task::AbortHandle,
}

impl Lease {
    /// The socket the sandbox wrapper hands the command's listener to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The hosts refused so far to the commands of this lease.
    pub fn refused(&self) -> BTreeMap<String, u64> {
        self.refused.snapshot()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // New commands are not taken; those running go on until they end.
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes each command's listener and serves it.
async fn accept_commands(listener: UnixListener, served: Arc<proxy::Served>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(serve_command(stream, served.clone()));
    }
}

/// Receives a command's listener over `stream`, then serves it until
/// `stream` ends.
async fn serve_command(stream: tokio::net::UnixStream, served: Arc<proxy::Served>) {
    use tokio::io::{AsyncReadExt, Interest};
    let fd: OwnedFd = loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_io(Interest::READABLE, || cassist_sandbox::sandbox::receive_fd(&stream)) {
            Ok(Some(fd)) => break fd,
            Ok(None) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    };
    let listener = std::net::TcpListener::from(fd);
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    let slots = Arc::new(Semaphore::new(CONNECTIONS_PER_COMMAND));
    let mut connections = tokio::task::JoinSet::new();
    let mut stream = stream;
    let mut byte = [0u8; 1];
    loop {
        tokio::select! {
            // The wrapper sends nothing more: a read ends when the
            // command's namespace is gone.
            _ = stream.read(&mut byte) => break,
            permit = slots.clone().acquire_owned() => {
                let Ok(permit) = permit else { break };
                tokio::select! {
                    _ = stream.read(&mut byte) => break,
                    accepted = listener.accept() => {
                        if let Ok((conn, _)) = accepted {
                            let served = served.clone();
                            connections.spawn(async move {
                                proxy::serve(conn, served).await;
                                drop(permit);
                            });
                        }
                    }
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Dropping the set ends every connection still open.
}
