//! The network of each command of a task: which hosts it may reach
//! through cassist's egress proxy ([`cassist_egress`]), by role.
//!
//! With namespaces, every command below `full` runs in a network
//! namespace of its own whose one way out is the proxy:
//!
//! | role | reaches |
//! |---|---|
//! | setup | the project's `network { allow … }` hosts; any public host when `cassist.kdl` has no `network` block |
//! | the agent | its model API (a built-in's own hosts, or a custom agent's `allow`) and the project's hosts |
//! | acceptance, project test, build | the project's hosts only |
//! | replay helper | nothing |
//!
//! For every role, the hosts of `CASSIST_NETWORK_ALLOW` (the user's own
//! environment) too; only they may be loopback or private addresses.
//! Link-local addresses (cloud metadata) are never reached. A built-in
//! agent whose API key is in cassist's environment never holds it: it
//! talks to the proxy as its API, which adds the key
//! ([`cassist_egress::Broker`]). In copy mode there is no namespace: the
//! command has the machine's network (said once at the start).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use cassist_core::spec::ProjectConfig;
use cassist_egress::{Broker, HostRule, Lease, Policy, Service};
use cassist_sandbox::sandbox::{Network, PROXY_ADDR};

use super::jail::Role;
use crate::agent::invoke::Invocation;
use crate::agent::{BrokerVars, PLACEHOLDER_KEY};

/// The variable in which the user opens more hosts to every command,
/// loopback and private addresses included.
pub const ALLOW_VAR: &str = cassist_core::netaddr::USER_ALLOW_VAR;

/// `CASSIST_NETWORK=host`: commands keep the machine's network (a machine
/// whose way out is a proxy of its own, which the egress proxy does not
/// chain to; a measurement of what the namespace costs).
pub const MODE_VAR: &str = "CASSIST_NETWORK";

/// The network settings of a run, and its proxy once a command needs it.
#[derive(Default)]
pub struct Egress {
    /// The project's `network { allow … }`; `None` without a `network`
    /// block.
    project: Option<Vec<HostRule>>,
    /// [`ALLOW_VAR`].
    user: Vec<HostRule>,
    /// Started by the first command that needs it.
    service: OnceLock<Result<Service, String>>,
    /// [`MODE_VAR`] is `host`: no network namespace for any command.
    pub host: bool,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").field("project", &self.project).field("user", &self.user).finish()
    }
}

/// What one command gets: the network the wrapper makes, the variables
/// that lead it to the proxy (and, for a brokered agent, the proxy as its
/// API), and the lease that serves it.
pub struct CommandNet {
    pub network: Network,
    pub env: Vec<(String, String)>,
    pub lease: Option<Lease>,
}

impl Egress {
    /// The settings of a project: its `network` block, and the user's
    /// [`ALLOW_VAR`] and [`MODE_VAR`]; what does not read in them.
    pub fn new(config: &ProjectConfig) -> Result<Egress, String> {
        let project = project_hosts(config).map(|hosts| hosts.iter().filter_map(|h| HostRule::parse(h)).collect());
        let (user, bad) = match std::env::var(ALLOW_VAR) {
            Ok(v) => cassist_egress::policy::parse_list(&v),
            Err(_) => (Vec::new(), Vec::new()),
        };
        if !bad.is_empty() {
            return Err(format!("{ALLOW_VAR} holds entries that are not hosts: {}", bad.join(", ")));
        }
        let host = match std::env::var(MODE_VAR) {
            Ok(v) if v == "host" => true,
            Ok(v) if !v.is_empty() => return Err(format!("{MODE_VAR} is `{v}`; the only value it takes is `host`")),
            _ => false,
        };
        Ok(Egress { project, user, service: OnceLock::new(), host })
    }

    /// The proxy, started on first use.
    fn service(&self) -> Result<&Service, String> {
        let service = self.service.get_or_init(|| {
            cassist_core::plan::timing("egress proxy started");
            Service::start().map_err(|e| e.to_string())
        });
        service.as_ref().map_err(|e| format!("cannot start the egress proxy: {e}"))
    }

    /// Starts the proxy ahead of the first command that needs it (on
    /// another thread, while the first workspace is made), unless the
    /// commands keep the machine's network.
    pub fn warm(self: &Arc<Self>) {
        if self.host {
            return;
        }
        let egress = self.clone();
        std::thread::spawn(move || {
            let _ = egress.service();
        });
    }

    /// Whether setup may reach any public host (the project names none).
    pub fn setup_is_open(&self) -> bool {
        self.project.is_none()
    }

    /// What a command of `role` may reach; `inv` is the agent's.
    pub fn policy(&self, role: Role, inv: Option<&Invocation>) -> Policy {
        let mut project = self.project.clone().unwrap_or_default();
        let mut any_public = false;
        let what = match role {
            Role::Setup => {
                any_public = self.project.is_none();
                "setup"
            }
            Role::Agent => {
                if let Some(inv) = inv {
                    project.extend(inv.api_hosts().iter().filter_map(|h| HostRule::parse(h)));
                }
                "the agent"
            }
            Role::Acceptance => "an acceptance or test command",
            Role::Build => "the build command",
            Role::Replay => "the replay helper",
        };
        Policy { role: what.to_owned(), any_public, project, user: self.user.clone() }
    }

    /// The network of a command of `role` (with namespaces, below
    /// `full`): the replay helper's has no way out, the others' lead to a
    /// new lease of the proxy as [`policy`](Self::policy) says.
    pub fn command(&self, role: Role, inv: Option<&Invocation>) -> Result<CommandNet, String> {
        if role == Role::Replay {
            return Ok(CommandNet { network: Network::Isolated, env: Vec::new(), lease: None });
        }
        let service = self.service()?;
        let mut env: Vec<(String, String)> =
            cassist_sandbox::sandbox::proxy_env().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        // A local address the user opened is the machine's, reached
        // through the proxy; the others stay the namespace's own.
        for (name, value) in env.iter_mut() {
            if name.eq_ignore_ascii_case("NO_PROXY") {
                let kept: Vec<&str> = value.split(',').filter(|h| !self.user.iter().any(|r| r.host() == *h)).collect();
                *value = kept.join(",");
            }
        }
        let mut broker = None;
        if let Some(vars) = inv.and_then(|i| i.broker()) {
            let lookup = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            if let Some((b, own)) = brokered(vars, lookup)? {
                broker = Some(Arc::new(b));
                env.extend(own);
            }
        }
        let lease = service
            .lease(self.policy(role, inv), broker)
            .map_err(|e| format!("cannot open the egress proxy for a command: {e}"))?;
        Ok(CommandNet { network: Network::Proxy(lease.path().to_path_buf()), env, lease: Some(lease) })
    }
}

/// Variables a command gets, by name.
type Vars = Vec<(String, String)>;

/// The broker of a CLI whose key `var` finds in cassist's environment,
/// and the variables the CLI gets instead (the proxy as its base URL, a
/// placeholder for each key that is set); `None` when no key is set (a
/// login in its state folder: it reaches its API's hosts itself).
fn brokered(vars: &BrokerVars, var: impl Fn(&str) -> Option<String>) -> Result<Option<(Broker, Vars)>, String> {
    let Some((_, header, bearer, key)) =
        vars.keys.iter().find_map(|(name, header, bearer)| Some((name, header, bearer, var(name)?)))
    else {
        return Ok(None);
    };
    let base = var(vars.base_var).unwrap_or_else(|| vars.default_base.to_owned());
    let value = if *bearer { format!("Bearer {key}") } else { key };
    let broker = Broker::new(&base, header, &value).map_err(|e| format!("{e} (from {})", vars.base_var))?;
    let mut env = vec![(vars.base_var.to_owned(), format!("http://{PROXY_ADDR}"))];
    for (name, ..) in vars.keys {
        if var(name).is_some() {
            env.push(((*name).to_owned(), PLACEHOLDER_KEY.to_owned()));
        }
    }
    Ok(Some((broker, env)))
}

/// `vars` set in `env`, replacing what is there under the same names (the
/// user's own proxy variables, a CLI's real key).
pub fn set_env(env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>, vars: &[(String, String)]) {
    env.retain(|(k, _)| !vars.iter().any(|(name, _)| k == name.as_str()));
    env.extend(vars.iter().map(|(k, v)| (k.into(), v.into())));
}

/// The hosts of the project's `network` block, `None` without one.
fn project_hosts(config: &ProjectConfig) -> Option<Vec<String>> {
    config.network.as_ref().map(|n| n.allow.clone())
}

/// How a command that failed while the proxy refused `refused` is told:
/// "network refused: a.example.com, b.example.com — add …".
pub fn refused_reason(refused: &BTreeMap<String, u64>) -> String {
    let hosts: Vec<&str> = refused.keys().map(String::as_str).collect();
    let first = hosts.first().copied().unwrap_or("");
    format!(
        "network refused: {} — add it to `network {{ allow \"{first}\" }}` in cassist.kdl (or, for a loopback or private address, to {ALLOW_VAR})",
        hosts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_in_the_environment_is_brokered_and_the_cli_gets_a_placeholder() {
        let vars = &crate::agent::claude::BROKER;
        let env: BTreeMap<&str, &str> = [("ANTHROPIC_API_KEY", "sk-real")].into();
        let (broker, own) = brokered(vars, |k| env.get(k).map(|v| v.to_string())).unwrap().unwrap();
        assert_eq!(broker.host(), "api.anthropic.com");
        assert!(!format!("{broker:?}").contains("sk-real"), "the key is never shown");
        assert_eq!(
            own,
            [
                ("ANTHROPIC_BASE_URL".to_owned(), format!("http://{PROXY_ADDR}")),
                ("ANTHROPIC_API_KEY".to_owned(), PLACEHOLDER_KEY.to_owned())
            ]
        );
        // The user's own base URL is where the key goes.
        let env: BTreeMap<&str, &str> =
            [("ANTHROPIC_AUTH_TOKEN", "tok"), ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/api")].into();
        let (broker, own) = brokered(vars, |k| env.get(k).map(|v| v.to_string())).unwrap().unwrap();
        assert_eq!(broker.host(), "127.0.0.1");
        assert!(own.iter().all(|(_, v)| !v.contains("tok")));
        // No key: nothing to broker (a login in the state folder).
        assert!(brokered(vars, |_| None).unwrap().is_none());
        let env: BTreeMap<&str, &str> = [("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "ftp://x")].into();
        assert!(brokered(vars, |k| env.get(k).map(|v| v.to_string())).unwrap_err().contains("ANTHROPIC_BASE_URL"));
    }

    #[test]
    fn refusals_name_the_hosts_and_the_line_to_add() {
        let r: BTreeMap<String, u64> = [("pkg.example.com".to_owned(), 2)].into();
        assert_eq!(
            refused_reason(&r),
            "network refused: pkg.example.com — add it to `network { allow \"pkg.example.com\" }` in cassist.kdl (or, for a loopback or private address, to CASSIST_NETWORK_ALLOW)"
        );
    }
}
