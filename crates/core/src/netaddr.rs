//! The hosts of a network allow-list (`network { allow … }`, a custom
//! agent's `allow`): how one entry is written ([`parse_allow`]), what kind
//! of address an IP is ([`classify`]), and which entries a project's own
//! files may name ([`host_allowed_in_project`]).
//!
//! A project's files are written by whoever can open a pull request: they
//! may name public hosts only. Loopback, private, link-local, unspecified
//! and cloud metadata addresses (and names for them, `localhost`,
//! `metadata.google.internal`) can only be allowed by the user, through the
//! environment ([`USER_ALLOW_VAR`]); otherwise a pull request could open
//! the CI runner's metadata service, or a database on its network, to the
//! commands of its tasks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The variable through which the user (never the project) allows hosts
/// the project's files may not name.
pub const USER_ALLOW_VAR: &str = "CASSIST_NETWORK_ALLOW";

/// What kind of address an IP is, for the allow-lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    /// Reachable on the internet: a project may allow it.
    Public,
    /// `127.0.0.0/8`, `::1`: the machine itself.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, the shared `100.64/10`,
    /// `fc00::/7`, the old site-local `fec0::/10`: a private network.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// A cloud provider's metadata service (`169.254.169.254`, AWS's
    /// `fd00:ec2::254`, Alibaba's `100.100.100.200`, Azure's
    /// `168.63.129.16`): the machine's cloud credentials.
    Metadata,
    /// `0.0.0.0/8`, `::`: "this host" to most stacks.
    Unspecified,
}

impl AddrClass {
    /// In words, for messages: "a loopback address".
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Public => "a public address",
            AddrClass::Loopback => "a loopback address",
            AddrClass::Private => "a private address",
            AddrClass::LinkLocal => "a link-local address",
            AddrClass::Metadata => "a cloud metadata address",
            AddrClass::Unspecified => "an unspecified address",
        }
    }
}

/// Cloud metadata services by address.
const METADATA_V4: [Ipv4Addr; 3] =
    [Ipv4Addr::new(169, 254, 169, 254), Ipv4Addr::new(100, 100, 100, 200), Ipv4Addr::new(168, 63, 129, 16)];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Cloud metadata services by name: these and every name below them.
const METADATA_NAMES: [&str; 2] = ["metadata.google.internal", "metadata.goog"];

/// What kind of address `ip` is. An IPv6 address that carries an IPv4
/// one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64
/// `64:ff9b::/96`, 6to4 `2002::/16`) is what the IPv4 one is: the same
/// host is reached either way.
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let [a, b, ..] = ip.octets();
    if METADATA_V4.contains(&ip) {
        AddrClass::Metadata
    } else if a == 0 {
        AddrClass::Unspecified
    } else if a == 127 {
        AddrClass::Loopback
    } else if a == 169 && b == 254 {
        AddrClass::LinkLocal
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) || (a == 100 && b & 0xc0 == 64) {
        AddrClass::Private
    } else {
        AddrClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    let first = ip.segments()[0];
    if ip == METADATA_V6 {
        AddrClass::Metadata
    } else if ip.is_unspecified() {
        AddrClass::Unspecified
    } else if ip.is_loopback() {
        AddrClass::Loopback
    } else if first & 0xffc0 == 0xfe80 {
        AddrClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
        AddrClass::Private
    } else {
        AddrClass::Public
    }
}

/// The IPv4 address an IPv6 one carries, where it carries one.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    // `::a.b.c.d` (deprecated, still routed by some stacks); `::` and
    // `::1` are IPv6's own.
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low());
    }
    // NAT64: the well-known and the local-use prefix.
    if (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]) || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(low());
    }
    // 6to4: the IPv4 address in the second and third segments.
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

/// The host of an allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A host name, lower-case, without a trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// One entry of an allow-list: `host`, `*.host` (any name below `host`,
/// not `host` itself), either with `:port` (any port without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    pub wildcard: bool,
    pub host: Host,
    pub port: Option<u16>,
}

/// Why an allow-list entry cannot stand in a project's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowError {
    /// Not a host name, `*.name` or IP address, with an optional port:
    /// what is wrong with it.
    Malformed(String),
    /// A host only the user may allow: what kind it is.
    NotPublic(AddrClass),
}

impl std::fmt::Display for AllowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowError::Malformed(why) => f.write_str(why),
            AllowError::NotPublic(class) => write!(f, "{}", class.describe()),
        }
    }
}

/// Reads one allow-list entry: a host name (ASCII letters, digits, `-`,
/// `.`), optionally `*.` before it, or an IP address (an IPv6 one in
/// brackets when a port follows), optionally `:port` after it. The syntax
/// only: [`host_allowed_in_project`] also checks what it names.
pub fn parse_allow(entry: &str) -> Result<AllowEntry, AllowError> {
    let bad = |why: &str| Err(AllowError::Malformed(why.to_owned()));
    if entry.is_empty() {
        return bad("an empty host");
    }
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else { return bad("`[` without its `]`") };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return bad("only `:port` may follow `]`"),
            },
        };
        match v6.parse::<Ipv6Addr>() {
            Ok(ip) => (Host::Ip(IpAddr::V6(ip)), port),
            Err(_) => return bad("not an IPv6 address between the brackets"),
        }
    } else if entry.matches(':').count() > 1 {
        // A bare IPv6 address: no port can follow it.
        match entry.parse::<Ipv6Addr>() {
            Ok(ip) => (Host::Ip(IpAddr::V6(ip)), None),
            Err(_) => return bad("not an IPv6 address (write one with a port as `[::1]:443`)"),
        }
    } else {
        let (host, port) = match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        };
        (read_host(host)?, port)
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return bad("the port must be a number from 1 to 65535"),
        },
    };
    let wildcard = matches!(&host, Host::Name(n) if n.starts_with("*."));
    let host = match host {
        Host::Name(n) if wildcard => Host::Name(n[2..].to_owned()),
        h => h,
    };
    Ok(AllowEntry { wildcard, host, port })
}

/// A host name (`*.` kept in front) or IPv4 address.
fn read_host(host: &str) -> Result<Host, AllowError> {
    let bad = |why: &str| Err(AllowError::Malformed(why.to_owned()));
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let bare = name.strip_prefix("*.").unwrap_or(&name);
    if bare.is_empty() {
        return bad("an empty host name");
    }
    if bare.contains('*') {
        return bad("`*` may only stand first, as in `*.example.com`");
    }
    if let Some(c) = bare.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.')) {
        return Err(AllowError::Malformed(format!(
            "`{}` cannot stand in a host name (letters, digits, `-` and `.` only)",
            c.escape_debug()
        )));
    }
    let labels: Vec<&str> = bare.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return bad("an empty part between dots");
    }
    if labels.iter().any(|l| l.starts_with('-') || l.ends_with('-')) {
        return bad("a part of a host name cannot begin or end with `-`");
    }
    // No top-level domain is a number: `2852039166`, `0xa9fea9fe` and
    // `0251.0376.0251.0376` are IPv4 addresses to the C library, which
    // reads them as 169.254.169.254.
    let last = labels[labels.len() - 1];
    if last.bytes().all(|b| b.is_ascii_digit()) || (last.starts_with("0x") && last.len() > 2) {
        return bad("not a host name, nor an IPv4 address in dotted decimal (`93.184.215.14`)");
    }
    Ok(Host::Name(name))
}

/// Whether a project's files may allow `entry`: it is well written
/// ([`parse_allow`]) and names a public host. `localhost` (and names below
/// it), the metadata services' names, and IP addresses that are not
/// [`AddrClass::Public`] are for the user alone ([`USER_ALLOW_VAR`]). A
/// wildcard that would match a metadata name (`*.internal`) is refused as
/// that name is.
pub fn host_allowed_in_project(entry: &str) -> Result<AllowEntry, AllowError> {
    let parsed = parse_allow(entry)?;
    let class = match &parsed.host {
        Host::Ip(ip) => classify(*ip),
        Host::Name(name) => name_class(name, parsed.wildcard),
    };
    match class {
        AddrClass::Public => Ok(parsed),
        class => Err(AllowError::NotPublic(class)),
    }
}

/// What a name (`wildcard`: any name below it) may lead to, as far as the
/// name alone tells.
fn name_class(name: &str, wildcard: bool) -> AddrClass {
    let below = |n: &str, base: &str| n == base || n.ends_with(&format!(".{base}"));
    if below(name, "localhost") {
        return AddrClass::Loopback;
    }
    let metadata = METADATA_NAMES.iter().any(|m| below(name, m) || (wildcard && below(m, name)));
    if metadata { AddrClass::Metadata } else { AddrClass::Public }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> AddrClass {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn addresses_are_classified_by_their_ranges() {
        for (ip, want) in [
            ("93.184.215.14", AddrClass::Public),
            ("8.8.8.8", AddrClass::Public),
            ("172.32.0.1", AddrClass::Public),
            ("100.128.0.1", AddrClass::Public),
            ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", AddrClass::Public),
            ("127.0.0.1", AddrClass::Loopback),
            ("127.255.1.2", AddrClass::Loopback),
            ("::1", AddrClass::Loopback),
            ("10.0.0.5", AddrClass::Private),
            ("172.16.0.1", AddrClass::Private),
            ("172.31.255.255", AddrClass::Private),
            ("192.168.1.1", AddrClass::Private),
            ("100.64.0.1", AddrClass::Private),
            ("fc00::1", AddrClass::Private),
            ("fd12:3456::1", AddrClass::Private),
            ("169.254.1.1", AddrClass::LinkLocal),
            ("fe80::1", AddrClass::LinkLocal),
            ("febf::1", AddrClass::LinkLocal),
            ("169.254.169.254", AddrClass::Metadata),
            ("fd00:ec2::254", AddrClass::Metadata),
            ("100.100.100.200", AddrClass::Metadata),
            ("168.63.129.16", AddrClass::Metadata),
            ("0.0.0.0", AddrClass::Unspecified),
            ("0.1.2.3", AddrClass::Unspecified),
            ("::", AddrClass::Unspecified),
        ] {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn an_ipv6_address_carrying_an_ipv4_one_is_what_that_one_is() {
        for (ip, want) in [
            ("::ffff:127.0.0.1", AddrClass::Loopback),
            ("::ffff:169.254.169.254", AddrClass::Metadata),
            ("::10.0.0.1", AddrClass::Private),
            ("64:ff9b::a9fe:a9fe", AddrClass::Metadata),
            ("64:ff9b:1::7f00:1", AddrClass::Loopback),
            ("2002:a9fe:a9fe::1", AddrClass::Metadata),
            ("2002:5db8:d70e::1", AddrClass::Public),
            ("::ffff:8.8.8.8", AddrClass::Public),
        ] {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn entries_are_names_wildcards_or_addresses_with_an_optional_port() {
        let name = |n: &str| Host::Name(n.to_owned());
        let ok = |e: &str| parse_allow(e).unwrap_or_else(|err| panic!("{e}: {err}"));
        assert_eq!(
            ok("Packages.Example.com."),
            AllowEntry { wildcard: false, host: name("packages.example.com"), port: None }
        );
        assert_eq!(ok("*.example.com:443"), AllowEntry { wildcard: true, host: name("example.com"), port: Some(443) });
        assert_eq!(ok("93.184.215.14:80").host, Host::Ip("93.184.215.14".parse().unwrap()));
        assert_eq!(ok("[2606:2800::1]:8443").port, Some(8443));
        assert_eq!(ok("2606:2800::1").host, Host::Ip("2606:2800::1".parse().unwrap()));
        for bad in [
            "",
            "*",
            "*.",
            "a.*.com",
            "exa_mple.com",
            "https://example.com",
            "example.com/path",
            "example..com",
            "-example.com",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+80",
            "[::1",
            "[::1]x",
            "[example.com]",
            "2852039166",
            "0xa9fea9fe",
            "0251.0376.0251.0376",
            "169.254.169.254.",
        ] {
            assert!(matches!(parse_allow(bad), Err(AllowError::Malformed(_))), "{bad:?} was taken");
        }
    }

    #[test]
    fn a_project_may_allow_only_public_hosts() {
        for good in
            ["packages.example.com", "*.example.org:443", "93.184.215.14", "[2606:2800::1]:443", "internal.example.com"]
        {
            assert!(host_allowed_in_project(good).is_ok(), "{good} was refused");
        }
        for (bad, class) in [
            ("localhost", AddrClass::Loopback),
            ("LOCALHOST:8080", AddrClass::Loopback),
            ("db.localhost", AddrClass::Loopback),
            ("127.0.0.1", AddrClass::Loopback),
            ("[::1]:80", AddrClass::Loopback),
            ("[::ffff:127.0.0.1]", AddrClass::Loopback),
            ("10.0.0.5", AddrClass::Private),
            ("192.168.0.10:5432", AddrClass::Private),
            ("169.254.169.254", AddrClass::Metadata),
            ("metadata.google.internal", AddrClass::Metadata),
            ("*.internal", AddrClass::Metadata),
            ("*.google.internal", AddrClass::Metadata),
            ("169.254.10.1", AddrClass::LinkLocal),
            ("0.0.0.0", AddrClass::Unspecified),
        ] {
            assert_eq!(host_allowed_in_project(bad), Err(AllowError::NotPublic(class)), "{bad}");
        }
    }
}
