//! The command's network (with namespaces): a network namespace of its
//! own, whose only interface is its own loopback. Its one way out is a
//! listener on that loopback, [`PROXY_ADDR`], which the wrapper makes
//! inside the new namespace and hands to cassist over a unix socket
//! cassist named ([`Network::Proxy`]): cassist accepts the command's
//! connections there and decides, per host, what goes through. No bridge
//! process, no virtual interface, no route: a connection to any other
//! address fails at once (the network is unreachable), a name lookup
//! finds no server, and nothing of the machine's own loopback (its
//! services, their unix sockets in the abstract namespace) is in reach.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::sched::{CloneFlags, unshare};

/// What network a command has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// The machine's own (`full`, copy mode).
    #[default]
    Host,
    /// A namespace of its own with nothing but its loopback.
    Isolated,
    /// [`Network::Isolated`], plus the listener at [`PROXY_ADDR`], handed
    /// to cassist through the unix socket at this path.
    Proxy(PathBuf),
}

/// Where a command with [`Network::Proxy`] reaches cassist's egress
/// proxy, inside its own namespace (a port no tool picks by default).
pub const PROXY_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 38127);

/// Why the command's network could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot create a network namespace: {0}")]
    Namespace(nix::errno::Errno),
    #[error("cannot bring up the loopback interface: {0}")]
    Loopback(io::Error),
    #[error("cannot open the proxy's port in the namespace: {0}")]
    Listen(io::Error),
    #[error("cannot reach cassist's egress proxy at {}: {error}", path.display())]
    Connect { path: PathBuf, error: io::Error },
    #[error("cannot hand the proxy's port to cassist: {0}")]
    Send(io::Error),
}

/// Moves this process (in its new user namespace) into a new network
/// namespace as `net` says. For [`Network::Proxy`], the returned stream
/// is cassist's end of the command: it must stay open as long as the
/// command runs (cassist stops serving the command when it closes).
pub fn enter(net: &Network) -> Result<Option<UnixStream>, NetError> {
    if *net == Network::Host {
        return Ok(None);
    }
    unshare(CloneFlags::CLONE_NEWNET).map_err(NetError::Namespace)?;
    loopback_up().map_err(NetError::Loopback)?;
    let Network::Proxy(path) = net else { return Ok(None) };
    let listener = TcpListener::bind(PROXY_ADDR).map_err(NetError::Listen)?;
    let stream = UnixStream::connect(path).map_err(|error| NetError::Connect { path: path.clone(), error })?;
    send_fd(&stream, &listener).map_err(NetError::Send)?;
    Ok(Some(stream))
}

/// `ioctl(SIOCSIFFLAGS)` raising `lo`: a new network namespace's loopback
/// starts down. The request as the kernel reads it (`struct ifreq`: a
/// 16-byte name, then a union whose first member here is the flags).
fn loopback_up() -> io::Result<()> {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: a plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us.
    let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let mut req = IfReq { name: [0; 16], flags: 0, _pad: [0; 22] };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: the ioctls read and write an `ifreq`-sized buffer.
    unsafe {
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sends `fd` over `stream` (`SCM_RIGHTS`), with one byte of data.
fn send_fd(stream: &UnixStream, fd: &impl AsRawFd) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let fds = [fd.as_raw_fd()];
    let data = [io::IoSlice::new(b"L")];
    sendmsg::<()>(stream.as_raw_fd(), &data, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
        .map_err(io::Error::from)?;
    Ok(())
}

/// Receives one descriptor [`enter`] sent over `stream` (cassist's side);
/// `None` when the stream ended without one.
pub fn receive_fd(stream: &impl AsRawFd) -> io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::FromRawFd;
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut out = None;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: descriptors the kernel just gave this process.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                if out.is_none() {
                    out = Some(owned);
                }
            }
        }
    }
    Ok(out)
}

/// The variables that send a command's HTTP(S) traffic to the proxy at
/// [`PROXY_ADDR`]: the usual ones in both cases (curl reads lower-case
/// `http_proxy` only), Node's switch to honour them in `fetch`, and the
/// JVM's properties. Local addresses go direct: they are the namespace's
/// own loopback.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://{PROXY_ADDR}");
    let (host, port) = (PROXY_ADDR.ip().to_string(), PROXY_ADDR.port());
    let no_proxy = "localhost,127.0.0.1,::1".to_owned();
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name, url.clone()));
    }
    for name in ["http_proxy", "https_proxy", "all_proxy"] {
        env.push((name, url.clone()));
    }
    env.push(("NO_PROXY", no_proxy.clone()));
    env.push(("no_proxy", no_proxy));
    env.push(("NODE_USE_ENV_PROXY", "1".to_owned()));
    env.push((
        "JAVA_TOOL_OPTIONS",
        format!(
            "-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port} \
             -Dhttp.nonProxyHosts=localhost|127.0.0.1"
        ),
    ));
    env
}

/// Whether `path` can be a unix socket's address (at most 107 bytes).
pub fn socket_path_fits(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().len() < 108
}
