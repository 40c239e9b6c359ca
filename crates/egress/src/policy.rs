//! Which hosts a command may reach: its [`Policy`], rule by rule
//! ([`HostRule`]), and which addresses a name may lead to
//! ([`AddrClass`]).
//!
//! Two sources of rules, trusted differently. The project's files (its
//! `network { allow … }`, an agent's `allow`) may name public hosts only:
//! whatever the name resolves to must be a public address, so a pull
//! request cannot open the CI runner's loopback services or its cloud
//! metadata. The user's own rules (`CASSIST_NETWORK_ALLOW`) may also open
//! loopback and private addresses. Nothing opens a link-local address
//! (169.254.0.0/16, fe80::/10): the cloud metadata services live there.

use std::net::{IpAddr, Ipv6Addr};

use cassist_core::netaddr::{AddrClass, AllowEntry, Host, classify, parse_allow};

/// One allowed host: a name (`api.example.com`), every name below a
/// domain (`*.example.com`), or an address; on every port, or one. Read as
/// the config reads an allow-list entry ([`parse_allow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// Lower case, without the `*.` of a wildcard; an address as text.
    host: String,
    /// The address it names, when it names one.
    ip: Option<IpAddr>,
    wildcard: bool,
    port: Option<u16>,
}

impl HostRule {
    /// Reads `host`, `*.domain`, `host:port`, an IPv4 address with or
    /// without a port, an IPv6 address, or `[v6]:port`; `None` when it is
    /// none of them.
    pub fn parse(text: &str) -> Option<HostRule> {
        let AllowEntry { wildcard, host, port } = parse_allow(text.trim()).ok()?;
        let (host, ip) = match host {
            Host::Name(name) => (name, None),
            Host::Ip(ip) => (ip.to_string(), Some(ip)),
        };
        Some(HostRule { host, ip, wildcard, port })
    }

    /// Whether a connection to `host` (lower case) on `port` is this rule's.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        if self.wildcard {
            host.strip_suffix(self.host.as_str()).is_some_and(|rest| rest.ends_with('.') && rest.len() > 1)
        } else if let Some(ip) = self.ip {
            host.parse::<IpAddr>().is_ok_and(|h| h == ip)
        } else {
            host == self.host
        }
    }

    /// The host or address it names (without a wildcard's `*.`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The address the rule names, when it names one.
    pub fn address(&self) -> Option<IpAddr> {
        self.ip
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        match (self.host.contains(':'), self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            _ => f.write_str(&self.host),
        }
    }
}

/// `host` and its port from `host:port`, `[v6]:port`, a bare IPv6
/// address or a bare host.
pub fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?.parse().ok()?))),
        };
    }
    if text.parse::<Ipv6Addr>().is_ok() {
        return Some((text, None));
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((text, None)),
    }
}

/// The rules of [`HostRule::parse`] in `text`, split at commas and white
/// space (`CASSIST_NETWORK_ALLOW`); the entries that do not read.
pub fn parse_list(text: &str) -> (Vec<HostRule>, Vec<String>) {
    let (mut rules, mut bad) = (Vec::new(), Vec::new());
    for item in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()) {
        match HostRule::parse(item) {
            Some(r) => rules.push(r),
            None => bad.push(item.to_owned()),
        }
    }
    (rules, bad)
}

/// What one command may reach through the proxy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// What the command is, for messages (`setup`, `the agent`, ...).
    pub role: String,
    /// Any public host (setup, when the project names no hosts).
    pub any_public: bool,
    /// Hosts from the project's files: public addresses only.
    pub project: Vec<HostRule>,
    /// Hosts from the user's own settings: any address but link-local.
    pub user: Vec<HostRule>,
}

/// Who opened a host for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// The project: the host must resolve to public addresses.
    Project,
    /// The user: loopback and private addresses too.
    User,
}

impl Policy {
    /// Who opened `host` (lower case) on `port`, if anyone.
    pub fn opened(&self, host: &str, port: u16) -> Option<Opened> {
        if self.user.iter().any(|r| r.matches(host, port)) {
            Some(Opened::User)
        } else if self.any_public || self.project.iter().any(|r| r.matches(host, port)) {
            Some(Opened::Project)
        } else {
            None
        }
    }

    /// Whether a connection opened by `by` may go to `ip` (classed by
    /// [`classify`]).
    pub fn address_allowed(&self, ip: IpAddr, by: Opened) -> bool {
        match classify(ip) {
            AddrClass::Public => true,
            AddrClass::Loopback | AddrClass::Private => by == Opened::User,
            AddrClass::LinkLocal | AddrClass::Metadata | AddrClass::Unspecified => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_hosts_wildcards_addresses_and_ports() {
        let rule = |s: &str| HostRule::parse(s).unwrap_or_else(|| panic!("{s} reads"));
        assert!(rule("Registry.NPMJS.org").matches("registry.npmjs.org", 443));
        assert!(!rule("registry.npmjs.org").matches("evil-registry.npmjs.org", 443));
        let wild = rule("*.example.com");
        assert!(wild.matches("a.example.com", 80) && wild.matches("a.b.example.com", 443));
        assert!(!wild.matches("example.com", 443) && !wild.matches("badexample.com", 443));
        let port = rule("mirror.example.org:8443");
        assert!(port.matches("mirror.example.org", 8443) && !port.matches("mirror.example.org", 443));
        assert_eq!(rule("127.0.0.1:9000").address(), Some(IpAddr::from([127, 0, 0, 1])));
        assert!(rule("[::1]:9000").matches("::1", 9000));
        assert!(rule("::1").matches("::1", 1));
        for bad in ["", "*.", "a..b", "-a.com", "a_b.com", "host:port", "*.1.2.3.4", "[::1", "exa mple.com"] {
            assert_eq!(HostRule::parse(bad), None, "{bad:?}");
        }
        assert_eq!(rule("*.example.com:8080").to_string(), "*.example.com:8080");
        assert_eq!(rule("[::1]:9").to_string(), "[::1]:9");
        let (rules, bad) = parse_list("127.0.0.1:9000, api.local\tnot_valid");
        assert_eq!(rules.len(), 2);
        assert_eq!(bad, ["not_valid"]);
    }

    #[test]
    fn the_project_opens_public_hosts_and_only_the_user_opens_local_ones() {
        let policy = Policy {
            project: vec![HostRule::parse("pkg.example.com").unwrap()],
            user: vec![HostRule::parse("127.0.0.1:9000").unwrap(), HostRule::parse("db.internal").unwrap()],
            ..Policy::default()
        };
        assert_eq!(policy.opened("pkg.example.com", 443), Some(Opened::Project));
        assert_eq!(policy.opened("127.0.0.1", 9000), Some(Opened::User));
        assert_eq!(policy.opened("127.0.0.1", 9001), None);
        assert_eq!(policy.opened("other.example.com", 443), None);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // A project host that resolves to loopback (DNS rebinding) or to
        // the metadata service is not let through.
        assert!(policy.address_allowed(ip("93.184.216.34"), Opened::Project));
        assert!(!policy.address_allowed(ip("127.0.0.1"), Opened::Project));
        assert!(!policy.address_allowed(ip("10.0.0.5"), Opened::Project));
        assert!(policy.address_allowed(ip("10.0.0.5"), Opened::User));
        assert!(policy.address_allowed(ip("127.0.0.1"), Opened::User));
        // Not even the user opens the metadata services, or link-local
        // addresses, or IPv6 forms of them.
        for never in ["169.254.169.254", "169.254.170.2", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0"] {
            assert!(!policy.address_allowed(ip(never), Opened::User), "{never}");
        }
        let open = Policy { any_public: true, ..Policy::default() };
        assert_eq!(open.opened("anything.example", 443), Some(Opened::Project));
        assert!(!open.address_allowed(ip("127.0.0.1"), Opened::Project));
    }
}
