//! The user's secrets: the paths every confined command has hidden (in
//! every workspace mode, at every level below `full`), and the variables
//! that lead to the agents and buses those paths hold.
//!
//! With namespaces a hidden folder is an empty read-only tmpfs and a
//! hidden file (or socket) an empty read-only file bound over it: reading
//! gives nothing, connecting is refused, and a tool that reads its config
//! there (`npm` its `~/.npmrc`) finds it empty rather than failing. In
//! copy mode they are left out of what Landlock lets the command read.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Under the user's HOME: keys, cloud and registry credentials, logins of
/// the CLIs that push (`gh`, `docker`), password stores.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".config/gh",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
];

/// The machine's Docker socket (root on the machine to whoever reaches
/// it).
pub const SECRET_SOCKETS: &[&str] = &["/var/run/docker.sock", "/run/docker.sock"];

/// Variables that name a socket of the user's session (the ssh and gpg
/// agents, the session bus, a Docker daemon): never passed to a confined
/// command, whose view has them hidden anyway.
pub const SOCKET_ENV: &[&str] = &["SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "DOCKER_HOST"];

/// The secret paths of a user whose HOME is `home` and whose runtime
/// folder (`$XDG_RUNTIME_DIR`: the session bus, the ssh-agent and
/// gpg-agent sockets) is `runtime_dir`, with `/run/user/UID` besides
/// (where the session's sockets are when the variable is not set): as
/// named, whether they exist or not.
pub fn secret_paths(home: Option<&Path>, runtime_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = home.into_iter().flat_map(|h| HOME_SECRETS.iter().map(move |s| h.join(s))).collect();
    out.extend(runtime_dir.filter(|d| d.is_absolute()).map(Path::to_path_buf));
    out.push(PathBuf::from(format!("/run/user/{}", nix::unistd::getuid())));
    out.extend(SECRET_SOCKETS.iter().map(PathBuf::from));
    out
}

/// The sockets the [`SOCKET_ENV`] variables of cassist's environment
/// (`var`) name, wherever they are (an ssh agent's under `/tmp`, a Docker
/// socket under HOME): `SSH_AUTH_SOCK=PATH`, `GPG_AGENT_INFO=PATH:PID:1`,
/// `DBUS_SESSION_BUS_ADDRESS=unix:path=PATH,…;…`, `DOCKER_HOST=unix://PATH`.
/// Absolute paths only.
pub fn socket_paths(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
    let mut out: Vec<String> = Vec::new();
    out.extend(text("SSH_AUTH_SOCK"));
    out.extend(text("GPG_AGENT_INFO").and_then(|v| v.split(':').next().map(str::to_owned)));
    if let Some(bus) = text("DBUS_SESSION_BUS_ADDRESS") {
        for address in bus.split(';') {
            let Some(params) = address.strip_prefix("unix:") else { continue };
            out.extend(params.split(',').filter_map(|kv| kv.strip_prefix("path=")).map(str::to_owned));
        }
    }
    out.extend(text("DOCKER_HOST").and_then(|v| v.strip_prefix("unix://").map(str::to_owned)));
    out.into_iter().map(PathBuf::from).filter(|p| p.is_absolute()).collect()
}

/// `env` without the [`SOCKET_ENV`] variables.
pub fn without_socket_env(env: &mut Vec<(OsString, OsString)>) {
    env.retain(|(k, _)| !k.to_str().is_some_and(|k| SOCKET_ENV.contains(&k)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secrets_are_under_home_the_runtime_folder_and_the_docker_sockets() {
        let paths = secret_paths(Some(Path::new("/home/u")), Some(Path::new("/run/user/1000")));
        for p in ["/home/u/.ssh", "/home/u/.config/gh", "/home/u/.netrc", "/home/u/.cargo/credentials.toml"] {
            assert!(paths.contains(&PathBuf::from(p)), "{p}: {paths:?}");
        }
        assert!(paths.contains(&PathBuf::from("/run/user/1000")) && paths.contains(&PathBuf::from("/run/docker.sock")));
        // Never HOME itself, nor an agent's state folder.
        for p in ["/home/u", "/home/u/.claude", "/home/u/.cache", "/home/u/.config"] {
            assert!(!paths.contains(&PathBuf::from(p)), "{p}");
        }
        // No HOME: none of its paths; a relative runtime folder is not one.
        let bare = secret_paths(None, Some(Path::new("run")));
        assert!(bare.iter().all(|p| p.is_absolute() && !p.starts_with("/home")), "{bare:?}");

        let mut env: Vec<(OsString, OsString)> =
            [("PATH", "/bin"), ("SSH_AUTH_SOCK", "/run/a"), ("DOCKER_HOST", "unix:///x"), ("HOME", "/home/u")]
                .iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        without_socket_env(&mut env);
        assert_eq!(env, [("PATH".into(), "/bin".into()), ("HOME".into(), "/home/u".into())]);
    }

    #[test]
    fn the_socket_variables_name_the_sockets_to_hide() {
        let vars = [
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("GPG_AGENT_INFO", "/run/user/1/gnupg/S.gpg-agent:0:1"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1/bus,guid=ab;unix:abstract=/tmp/dbus-x;tcp:host=h"),
            ("DOCKER_HOST", "unix:///home/u/.docker/run/docker.sock"),
        ];
        let var = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v));
        assert_eq!(
            socket_paths(var),
            [
                PathBuf::from("/tmp/ssh-x/agent.1"),
                PathBuf::from("/run/user/1/gnupg/S.gpg-agent"),
                PathBuf::from("/run/user/1/bus"),
                PathBuf::from("/home/u/.docker/run/docker.sock"),
            ]
        );
        // A TCP Docker host or a relative path names no socket here.
        let other = |name: &str| match name {
            "DOCKER_HOST" => Some(OsString::from("tcp://10.0.0.1:2375")),
            "SSH_AUTH_SOCK" => Some(OsString::from("agent.sock")),
            _ => None,
        };
        assert_eq!(socket_paths(other), Vec::<PathBuf>::new());
    }
}
