//! The project config `cassist.kdl` at the project root (optional: trust,
//! defaults, cache, limits, the network allow-list, the sandbox's extra
//! paths, setup/test/build commands, the prompt template, instructions,
//! custom agents), and the fallback trust source `.agents/config.toml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kdl::{KdlDocument, KdlNode, KdlValue};
use miette::SourceSpan;

use super::diag::{Diagnostics, SourceFile, Spanned, SpecDiagnostic, parse_source, suggestion};
use super::reader::{DiagExt, Once, Reader, type_name};
use super::task::{check_path_pattern, read_max_cost, read_model, read_positive_int};
use super::types::SandboxLevel;
use crate::limits::Limits;

/// The names of the built-in agents the task format accepts, in the order
/// they are listed. Their adapters are cassist-run's agent registry, which
/// a test there holds to these names.
pub const BUILTIN_AGENTS: &[&str] = &["claude", "codex", "droid", "gemini"];

pub const CONFIG_NODES: &[&str] = &[
    "trust",
    "defaults",
    "cache",
    "limits",
    "network",
    "sandbox",
    "setup",
    "test",
    "build",
    "prompt-template",
    "instructions",
    "agent",
];
const DEFAULTS_NODES: &[&str] = &["agent", "model", "timeout", "max-iterations", "max-cost"];
const LIMITS_NODES: &[&str] = &["file-size", "change-size", "files", "transcript", "memory", "processes"];
const NETWORK_NODES: &[&str] = &["allow"];
const SANDBOX_NODES: &[&str] = &["read", "hide"];
const AGENT_NODES: &[&str] = &["command", "pass-env", "try", "allow"];
/// Placeholders a custom agent's command may use.
pub const COMMAND_PLACEHOLDERS: &[&str] = &["prompt", "prompt_file", "workdir", "task", "model"];

/// Where the trust level came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustOrigin {
    Config,
    AgentsToml,
}

#[derive(Debug, Clone, Copy)]
pub struct Trust {
    pub level: SandboxLevel,
    pub origin: TrustOrigin,
}

/// The project's test commands, run after a changing task's acceptance:
/// `test` in `cassist.kdl`, `test off`, or detected when not set.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum TestSetting {
    /// Not set: detected from the project's files.
    #[default]
    Detect,
    /// `test #false`.
    Off,
    Commands(Vec<String>),
}

#[derive(Debug, Clone)]
pub enum CustomAgentDef {
    Command { argv: Vec<String> },
    Try(Vec<Spanned<String>>),
}

#[derive(Debug, Clone)]
pub struct CustomAgent {
    pub name: String,
    pub def: CustomAgentDef,
    pub pass_env: Vec<String>,
    /// `allow "api.example.com"`: the hosts this agent may reach (its model
    /// API), each checked as [`crate::netaddr::host_allowed_in_project`].
    pub allow: Vec<String>,
}

/// `network { allow … }`: the hosts the commands of every task may reach,
/// each checked as [`crate::netaddr::host_allowed_in_project`], as
/// written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    pub allow: Vec<String>,
}

/// `sandbox { read …; hide … }`: host paths every command of a task may
/// read (read-only), and paths hidden from every one of them. Each is
/// absolute or starts with `~/` (the user's HOME, taken when a command
/// runs: [`expand_home`]); kept as written, which is what the tasks' input
/// hash sees. A path both read and hidden is hidden.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub read: Vec<Spanned<String>>,
    pub hide: Vec<Spanned<String>>,
}

impl SandboxConfig {
    /// Whether neither `read` nor `hide` is given.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.hide.is_empty()
    }

    /// The `read` paths, `~/` taken against `home` (one starting with `~/`
    /// is left out when there is no HOME).
    pub fn read_paths(&self, home: Option<&Path>) -> Vec<PathBuf> {
        self.read.iter().filter_map(|p| expand_home(&p.value, home)).collect()
    }

    /// The `hide` paths, as [`SandboxConfig::read_paths`].
    pub fn hide_paths(&self, home: Option<&Path>) -> Vec<PathBuf> {
        self.hide.iter().filter_map(|p| expand_home(&p.value, home)).collect()
    }
}

/// A path of `sandbox { … }` on this machine: `~` is `home` and `~/rest`
/// is `home/rest` (`None` without a HOME), an absolute path is itself,
/// anything else is `None` (the config's diagnostics refuse it).
pub fn expand_home(path: &str, home: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home.map(Path::to_path_buf);
    }
    match path.strip_prefix("~/") {
        Some(rest) => home.map(|h| h.join(rest)),
        None => Path::new(path).is_absolute().then(|| PathBuf::from(path)),
    }
}

#[derive(Debug, Clone, Default)]
pub struct Defaults {
    pub agent: Option<Spanned<String>>,
    pub model: Option<Spanned<String>>,
    pub timeout: Option<Duration>,
    pub max_iterations: Option<u32>,
    pub max_cost: Option<f64>,
}

/// `cassist.kdl`, parsed. An absent file gives the default config.
#[derive(Debug, Clone, Default)]
pub struct ProjectConfig {
    pub source: Option<Arc<SourceFile>>,
    pub trust: Option<Trust>,
    pub defaults: Defaults,
    /// `cache { remote …; trusted-key … }`.
    pub cache: super::remote::CacheConfig,
    /// `limits { … }`, defaults filled in.
    pub limits: Limits,
    /// `network { allow … }`; `None` without the block (then setup may
    /// reach any host), `Some` even when it allows nothing.
    pub network: Option<NetworkConfig>,
    /// `sandbox { read …; hide … }`.
    pub sandbox: SandboxConfig,
    pub setup: Vec<String>,
    pub test: TestSetting,
    pub build: Vec<String>,
    pub prompt_template: Option<Spanned<String>>,
    pub instructions: Option<Spanned<String>>,
    pub agents: BTreeMap<String, CustomAgent>,
    /// `cassist.kdl` exists but is not valid KDL: what it defines (custom
    /// agents) is unknown, not absent.
    pub unreadable: bool,
}

impl ProjectConfig {
    /// Whether `name` is a built-in or custom agent.
    pub fn knows_agent(&self, name: &str) -> bool {
        BUILTIN_AGENTS.contains(&name) || self.agents.contains_key(name)
    }

    /// Whether `name` may be an agent: a known one, or any name while
    /// `cassist.kdl` cannot be read (it may define it; its syntax error is
    /// the one to report, not an "unknown agent" for every task using it).
    pub fn may_know_agent(&self, name: &str) -> bool {
        self.unreadable || self.knows_agent(name)
    }

    /// Every agent name, built-in first.
    pub fn agent_names(&self) -> Vec<&str> {
        BUILTIN_AGENTS.iter().copied().chain(self.agents.keys().map(String::as_str)).collect()
    }

    /// The agents to try for `name`, in order: the agent itself, or the
    /// members of its `try` chain (recursively).
    pub fn candidates(&self, name: &str) -> Vec<String> {
        fn walk(config: &ProjectConfig, name: &str, out: &mut Vec<String>, depth: usize) {
            if depth > 16 || out.iter().any(|n| n == name) {
                return;
            }
            match config.agents.get(name).map(|a| &a.def) {
                Some(CustomAgentDef::Try(list)) => {
                    for n in list {
                        walk(config, &n.value, out, depth + 1);
                    }
                }
                _ => out.push(name.to_owned()),
            }
        }
        let mut out = Vec::new();
        walk(self, name, &mut out, 0);
        out
    }
}

/// Reads `cassist.kdl` (when `src` is given) and `.agents/config.toml` under
/// `root`.
pub fn parse_config(root: &Path, src: Option<&Arc<SourceFile>>, diags: &mut Diagnostics) -> ProjectConfig {
    let mut config = ProjectConfig { source: src.cloned(), ..ProjectConfig::default() };
    if let Some(src) = src {
        match parse_source(src, diags) {
            Some(doc) => read_config(&mut Reader::new(src, diags), &doc, &mut config, root),
            None => config.unreadable = true,
        }
    }
    if config.trust.is_none() {
        config.trust = read_agents_toml(root, diags);
    }
    config
}

fn read_config(r: &mut Reader<'_>, doc: &KdlDocument, config: &mut ProjectConfig, root: &Path) {
    let mut once = Once::default();
    let mut test_nodes: Vec<&KdlNode> = Vec::new();
    for node in doc.nodes() {
        let name = Reader::name(node);
        if matches!(
            name,
            "trust" | "defaults" | "cache" | "limits" | "network" | "sandbox" | "prompt-template" | "instructions"
        ) && !once.first(r, node)
        {
            continue;
        }
        match name {
            "trust" => {
                if let Some(level) = r.single_string(node, "trust \"workspace-write\"") {
                    match SandboxLevel::parse(&level.value) {
                        Some(l) => config.trust = Some(Trust { level: l, origin: TrustOrigin::Config }),
                        None => {
                            r.error(
                                "unknown-sandbox",
                                format!("unknown trust level `{}`", level.value),
                                level.span,
                                "unknown level",
                            )
                            .set_help(suggestion(&level.value, SandboxLevel::NAMES));
                        }
                    }
                }
            }
            "defaults" => read_defaults(r, node, &mut config.defaults),
            "cache" => super::remote::read_cache(r, node, &mut config.cache),
            "limits" => read_limits(r, node, &mut config.limits),
            "network" => config.network = Some(read_network(r, node)),
            "sandbox" => read_sandbox(r, node, &mut config.sandbox),
            "setup" => config.setup.extend(commands(r, node, "setup \"npm ci\"")),
            "build" => config.build.extend(commands(r, node, "build \"cargo build\"")),
            "test" => test_nodes.push(node),
            "prompt-template" | "instructions" => {
                let example = format!("{name} \"docs/file.md\"");
                if let Some(p) = r.single_string(node, &example) {
                    if let Err((why, help)) = check_path_pattern(&p.value) {
                        r.error("bad-path", why, p.span, "here").set_help(help);
                    } else if !root.join(&p.value).is_file() {
                        r.error(
                            "missing-file",
                            format!("{name} file `{}` does not exist", p.value),
                            p.span,
                            "no such file",
                        )
                        .set_help("the path is relative to the project root");
                    } else if let Some(target) = outside_root(root, &p.value) {
                        r.error(
                            "path-escapes",
                            format!("`{}` leads outside the project (to {})", p.value, target.display()),
                            p.span,
                            "symlink out of the project",
                        )
                        .set_help(
                            "agents work on a copy of the project; files outside it cannot be used: copy the file into the project instead",
                        );
                    } else if name == "instructions" {
                        config.instructions = Some(p);
                    } else {
                        config.prompt_template = Some(p);
                    }
                }
            }
            "agent" => {
                if let Some(agent) = read_agent(r, node) {
                    if let Some(prev) = config.agents.get(&agent.0.name) {
                        let _ = prev;
                        r.error(
                            "duplicate-agent",
                            format!("agent `{}` is defined twice", agent.0.name),
                            agent.1,
                            "defined again",
                        )
                        .set_help("give each custom agent a unique name");
                    } else {
                        config.agents.insert(agent.0.name.clone(), agent.0);
                    }
                }
            }
            _ => r.unknown_node(node, "in cassist.kdl", CONFIG_NODES),
        }
    }
    config.test = read_test(r, &test_nodes);
    check_agent_names(r, config);
}

fn commands(r: &mut Reader<'_>, node: &KdlNode, example: &str) -> Vec<String> {
    r.string_list(node, example)
        .into_iter()
        .filter(|s| {
            let empty = s.value.trim().is_empty();
            if empty {
                r.error("empty-value", "empty command", s.span, "empty").set_help("give a shell command");
            }
            !empty
        })
        .map(|s| s.value)
        .collect()
}

fn read_test(r: &mut Reader<'_>, nodes: &[&KdlNode]) -> TestSetting {
    let mut cmds = Vec::new();
    let mut off: Option<SourceSpan> = None;
    for node in nodes {
        r.check_props(node, &[]);
        r.check_no_children(node);
        let args = Reader::positional(node);
        if args.is_empty() {
            r.error("missing-value", "`test` needs a command or #false", Reader::name_span(node), "no value")
                .set_help("write `test \"cargo test\"`, or `test #false` to turn the project tests off");
        }
        for e in args {
            match e.value() {
                KdlValue::String(s) if !s.trim().is_empty() => cmds.push((s.clone(), e.span())),
                KdlValue::Bool(false) => off = Some(e.span()),
                other => {
                    let found = if matches!(other, KdlValue::String(_)) { "an empty string" } else { type_name(other) };
                    r.error(
                        "wrong-type",
                        format!("`test` expects a command string or #false, found {found}"),
                        e.span(),
                        "expected a command",
                    )
                    .set_help("write `test \"cargo test\"`, or `test #false` to turn the project tests off");
                }
            }
        }
    }
    match (off, cmds.is_empty()) {
        (Some(span), false) => {
            r.error(
                "conflicting-test",
                "`test #false` turns the tests off, yet test commands are given",
                span,
                "turned off here",
            )
            .set_help("keep either the commands or `test #false`");
            TestSetting::Off
        }
        (Some(_), true) => TestSetting::Off,
        (None, true) => TestSetting::Detect,
        (None, false) => TestSetting::Commands(cmds.into_iter().map(|c| c.0).collect()),
    }
}

fn read_defaults(r: &mut Reader<'_>, node: &KdlNode, d: &mut Defaults) {
    let mut once = Once::default();
    for child in r.block(node, "defaults { agent \"claude\" }") {
        let name = Reader::name(child);
        if DEFAULTS_NODES.contains(&name) && !once.first(r, child) {
            continue;
        }
        match name {
            "agent" => d.agent = r.single_string(child, "agent \"claude\""),
            "model" => d.model = read_model(r, child),
            "timeout" => {
                if let Some(e) = r.single(child, "timeout \"3m\"") {
                    d.timeout = r.duration("timeout", e).map(|s| s.value);
                }
            }
            "max-iterations" => d.max_iterations = read_positive_int(r, child, "max-iterations 3"),
            "max-cost" => d.max_cost = read_max_cost(r, child),
            _ => r.unknown_node(child, "in `defaults`", DEFAULTS_NODES),
        }
    }
}

fn read_limits(r: &mut Reader<'_>, node: &KdlNode, limits: &mut Limits) {
    let mut once = Once::default();
    for child in r.block(node, "limits { file-size \"16MiB\" }") {
        let name = Reader::name(child);
        if LIMITS_NODES.contains(&name) && !once.first(r, child) {
            continue;
        }
        let count = match name {
            "files" => Some((&mut limits.files, "how many entries one change may add, change or remove")),
            "processes" => Some((&mut limits.processes, "how many processes one command of a task may run at once")),
            _ => None,
        };
        if let Some((field, what)) = count {
            if let Some(n) = read_count(r, child, what) {
                *field = n;
            }
            continue;
        }
        let field = match name {
            "file-size" => &mut limits.file_size,
            "change-size" => &mut limits.change_size,
            "transcript" => &mut limits.transcript,
            "memory" => &mut limits.memory,
            _ => {
                r.unknown_node(child, "in `limits`", LIMITS_NODES);
                continue;
            }
        };
        let example = format!("{name} \"16MiB\"");
        let Some(entry) = r.single(child, &example) else { continue };
        if let Some(size) = r.size(name, entry) {
            *field = size;
        }
    }
}

/// `network { allow "a.example.com" "b.example.org" }`: `allow` may be
/// given more than once.
fn read_network(r: &mut Reader<'_>, node: &KdlNode) -> NetworkConfig {
    let mut network = NetworkConfig::default();
    for child in r.block(node, "network { allow \"packages.example.com\" }") {
        match Reader::name(child) {
            "allow" => network.allow.extend(read_allow(r, child)),
            _ => r.unknown_node(child, "in `network`", NETWORK_NODES),
        }
    }
    network
}

/// The hosts of an `allow` node, each one a project may name
/// ([`crate::netaddr::host_allowed_in_project`]); a diagnostic for each
/// other one.
fn read_allow(r: &mut Reader<'_>, node: &KdlNode) -> Vec<String> {
    use crate::netaddr::{AllowError, USER_ALLOW_VAR, host_allowed_in_project};
    let mut hosts = Vec::new();
    for host in r.string_list(node, "allow \"packages.example.com\"") {
        match host_allowed_in_project(&host.value) {
            Ok(_) => hosts.push(host.value),
            Err(AllowError::Malformed(why)) => {
                r.error("bad-host", format!("`{}` is not a host to allow: {why}", host.value), host.span, "here")
                    .set_help(
                        "write a host name (`packages.example.com`), optionally with `*.` before it and `:443` after it, or a public IP address",
                    );
            }
            Err(AllowError::NotPublic(class)) => {
                r.error(
                    "local-host",
                    format!("`{}` is {}: a project's files cannot allow it", host.value, class.describe()),
                    host.span,
                    class.describe(),
                )
                .set_help(format!(
                    "localhost, loopback, private, link-local, unspecified and cloud metadata addresses (169.254.169.254) can only be allowed by the user, through the environment variable {USER_ALLOW_VAR}, never by the project's files: a pull request could otherwise open the CI runner's metadata service or its network"
                ));
            }
        }
    }
    hosts
}

/// `sandbox { read "/opt/toolchains"; hide "~/work-secrets" }`: each node
/// may be given more than once, with several paths.
fn read_sandbox(r: &mut Reader<'_>, node: &KdlNode, sandbox: &mut SandboxConfig) {
    for child in r.block(node, "sandbox { read \"/opt/toolchains\" }") {
        let name = Reader::name(child);
        let (example, absolute, in_home) = match name {
            "read" => ("read \"/opt/toolchains\"", "/opt/toolchains", "~/sdk"),
            "hide" => ("hide \"~/work-secrets\"", "/srv/secrets", "~/work-secrets"),
            _ => {
                r.unknown_node(child, "in `sandbox`", SANDBOX_NODES);
                continue;
            }
        };
        for p in r.string_list(child, example) {
            let whole = p.value.trim_end_matches('/').is_empty() || p.value.trim_end_matches('/') == "~";
            if whole && name == "hide" {
                r.error("hide-everything", format!("`{}` cannot be hidden", p.value), p.span, "too wide").set_help(
                    "commands need the machine's root and your home folder: hide the folders in them that hold secrets",
                );
            } else if expand_home(&p.value, Some(Path::new("/"))).is_none() {
                r.error("relative-path", format!("`{}` is not an absolute path", p.value), p.span, "relative path")
                    .set_help(format!(
                        "sandbox paths are host paths outside the project: write an absolute path (`{name} \"{absolute}\"`) or one under your home folder (`{name} \"{in_home}\"`)"
                    ));
            } else if name == "read" {
                sandbox.read.push(p);
            } else {
                sandbox.hide.push(p);
            }
        }
    }
}

/// `files N` or `processes N` in `limits` (`what` it counts, for the
/// help): a whole number from 1.
fn read_count(r: &mut Reader<'_>, node: &KdlNode, what: &str) -> Option<u64> {
    let name = Reader::name(node);
    let default = match name {
        "processes" => Limits::DEFAULT.processes,
        _ => Limits::DEFAULT.files,
    };
    let example = format!("{name} {default}");
    let e = r.single(node, &example)?;
    let (message, label) = match e.value() {
        KdlValue::Integer(n) if *n >= 1 => match u64::try_from(*n) {
            Ok(n) => return Some(n),
            Err(_) => (format!("`{name}` is too large: {n}"), "too large"),
        },
        KdlValue::Integer(n) => (format!("`{name}` must be at least 1, found {n}"), "out of range"),
        KdlValue::Float(f) => {
            (format!("`{name}` expects a whole number, found the fraction {f}"), "not a whole number")
        }
        other => (format!("`{name}` expects a whole number, found {}", type_name(other)), "expected a whole number"),
    };
    r.error("bad-number", message, e.span(), label).set_help(format!("write {what}, as `{example}`"));
    None
}

fn read_agent(r: &mut Reader<'_>, node: &KdlNode) -> Option<(CustomAgent, SourceSpan)> {
    const EXAMPLE: &str = "agent \"aider\" { command \"aider\" \"--message-file\" \"{prompt_file}\" }";
    r.check_props(node, &[]);
    let args = Reader::positional(node);
    let [name_entry] = args.as_slice() else {
        r.error("missing-value", "a custom agent needs one name", Reader::name_span(node), "expected one name")
            .set_help(format!("write it as `{EXAMPLE}`"));
        return None;
    };
    let name = r.string(node, name_entry, EXAMPLE)?;
    if BUILTIN_AGENTS.contains(&name.value.as_str()) {
        r.error(
            "shadows-builtin",
            format!("custom agent `{}` has the name of a built-in agent", name.value),
            name.span,
            "built-in name",
        )
        .set_help(format!(
            "choose another name, e.g. `my-{}`; built-in agents: {}",
            name.value,
            BUILTIN_AGENTS.join(", ")
        ));
        return None;
    }
    if !super::task::valid_task_name(&name.value) {
        r.error("bad-agent-name", format!("invalid agent name `{}`", name.value), name.span, "invalid name")
            .set_help("agent names use only letters, digits, `.`, `_` and `-`");
        return None;
    }
    let mut command: Option<Vec<String>> = None;
    let mut tries: Option<Vec<Spanned<String>>> = None;
    let mut pass_env = Vec::new();
    let mut allow = Vec::new();
    let mut once = Once::default();
    let children = node.children().map(|d| d.nodes()).unwrap_or(&[]);
    for child in children {
        let cname = Reader::name(child);
        if matches!(cname, "command" | "try") && !once.first(r, child) {
            continue;
        }
        match cname {
            "command" => {
                let argv = r.string_list(child, "command \"aider\" \"--message-file\" \"{prompt_file}\"");
                for arg in &argv {
                    for (range, ph) in crate::template::scan_placeholders(&arg.value) {
                        if !COMMAND_PLACEHOLDERS.contains(&ph.as_str()) {
                            // Point inside the quoted string: +1 for the opening quote
                            // when the literal is a plain quoted string.
                            let base = arg.span.offset() + 1;
                            let span = SourceSpan::from(base + range.start..base + range.end);
                            let span = if quoted_plain(&r.src.text, arg.span, &arg.value) { span } else { arg.span };
                            r.error(
                                "unknown-placeholder",
                                format!("unknown placeholder `{{{ph}}}` in the command of agent `{}`", name.value),
                                span,
                                "unknown placeholder",
                            )
                            .set_help(format!(
                                "{}; write `{{{{` and `}}}}` for literal braces",
                                super::diag::suggestion_with(&ph, COMMAND_PLACEHOLDERS, |c| format!("{{{c}}}"))
                            ));
                        }
                    }
                }
                if argv.first().is_some_and(|a| a.value.trim().is_empty()) {
                    r.error("empty-value", "the command's program is empty", argv[0].span, "empty")
                        .set_help("name the program to run first");
                }
                command = Some(argv.into_iter().map(|a| a.value).collect());
                if command.as_ref().is_some_and(Vec::is_empty) {
                    command = None;
                }
            }
            "try" => tries = Some(r.string_list(child, "try \"claude\" \"codex\"")),
            "pass-env" => {
                for v in r.string_list(child, "pass-env \"OPENAI_API_KEY\"") {
                    if v.value.is_empty() || v.value.contains('=') || v.value.contains('\0') {
                        r.error(
                            "bad-env-name",
                            format!("invalid environment variable name `{}`", v.value),
                            v.span,
                            "invalid name",
                        )
                        .set_help("give variable names only, e.g. `pass-env \"OPENAI_API_KEY\"`");
                    } else {
                        pass_env.push(v.value);
                    }
                }
            }
            "allow" => allow.extend(read_allow(r, child)),
            _ => r.unknown_node(child, "in a custom agent", AGENT_NODES),
        }
    }
    let def = match (command, tries) {
        (Some(argv), None) => CustomAgentDef::Command { argv },
        (None, Some(list)) => CustomAgentDef::Try(list),
        (Some(_), Some(_)) => {
            r.error(
                "agent-command-and-try",
                format!("agent `{}` has both `command` and `try`", name.value),
                name.span,
                "this agent",
            )
            .set_help("an agent either runs a command or fails over between agents (`try`); split it into two agents");
            return None;
        }
        (None, None) => {
            // A command given but empty already has its own diagnostic.
            if children.iter().all(|c| Reader::name(c) != "command") {
                r.error(
                    "agent-without-command",
                    format!("agent `{}` has neither `command` nor `try`", name.value),
                    name.span,
                    "this agent",
                )
                .set_help(format!("write it as `{EXAMPLE}`, or `agent \"fast\" {{ try \"claude\" \"codex\" }}`"));
            }
            return None;
        }
    };
    Some((CustomAgent { name: name.value, def, pass_env, allow }, name.span))
}

/// Where `rel` really is when a symlink on its way leads out of `root`.
fn outside_root(root: &Path, rel: &str) -> Option<std::path::PathBuf> {
    let root = root.canonicalize().ok()?;
    let real = root.join(rel).canonicalize().ok()?;
    (!real.starts_with(&root)).then_some(real)
}

/// Whether the entry at `span` is written as a plain `"..."` string whose
/// content equals `value` byte for byte (no escapes), so offsets inside the
/// value map to the file.
fn quoted_plain(text: &str, span: SourceSpan, value: &str) -> bool {
    let end = span.offset() + span.len();
    text.get(span.offset()..end).is_some_and(|raw| raw.len() == value.len() + 2 && &raw[1..raw.len() - 1] == value)
}

/// Agent names in `defaults` and `try` must exist; `try` chains must not
/// loop.
fn check_agent_names(r: &mut Reader<'_>, config: &ProjectConfig) {
    let names = config.agent_names();
    if let Some(a) = &config.defaults.agent
        && !config.knows_agent(&a.value)
    {
        r.error("unknown-agent", format!("unknown agent `{}`", a.value), a.span, "unknown agent")
            .set_help(suggestion(&a.value, &names));
    }
    for agent in config.agents.values() {
        if let CustomAgentDef::Try(list) = &agent.def {
            for t in list {
                if t.value == agent.name {
                    r.error("try-self", format!("agent `{}` tries itself", agent.name), t.span, "itself")
                        .set_help("list other agents in `try`");
                } else if !config.knows_agent(&t.value) {
                    r.error("unknown-agent", format!("unknown agent `{}` in `try`", t.value), t.span, "unknown agent")
                        .set_help(suggestion(&t.value, &names));
                } else if let Some(cycle) = try_cycle(config, &agent.name, &t.value) {
                    r.error("try-cycle", format!("failover chains loop: {cycle}"), t.span, "loops back")
                        .set_help("a `try` chain must end in agents that run a command");
                }
            }
        }
    }
}

fn try_cycle(config: &ProjectConfig, start: &str, next: &str) -> Option<String> {
    let mut path = vec![start.to_owned()];
    fn walk(config: &ProjectConfig, start: &str, cur: &str, path: &mut Vec<String>) -> bool {
        path.push(cur.to_owned());
        if cur == start {
            return true;
        }
        if path.len() > 64 {
            path.pop();
            return false;
        }
        if let Some(CustomAgent { def: CustomAgentDef::Try(list), .. }) = config.agents.get(cur) {
            for n in list {
                if path[1..].contains(&n.value) && n.value != start {
                    continue;
                }
                if walk(config, start, &n.value, path) {
                    return true;
                }
            }
        }
        path.pop();
        false
    }
    walk(config, start, next, &mut path).then(|| path.join(" -> "))
}

/// `.agents/config.toml` with `trust_level = "trusted"` counts as
/// `trust "workspace-write"`.
fn read_agents_toml(root: &Path, diags: &mut Diagnostics) -> Option<Trust> {
    let path = root.join(".agents").join("config.toml");
    let text = std::fs::read_to_string(&path).ok()?;
    let src = SourceFile::new(".agents/config.toml", text);
    match src.text.parse::<toml::Table>() {
        Ok(table) => match table.get("trust_level") {
            Some(toml::Value::String(s)) if s == "trusted" => {
                Some(Trust { level: SandboxLevel::WorkspaceWrite, origin: TrustOrigin::AgentsToml })
            }
            _ => None,
        },
        Err(e) => {
            let span = e.span().map_or(SourceSpan::from(0..0), SourceSpan::from);
            let message = e.message().to_owned();
            diags.push(
                SpecDiagnostic::error("bad-toml", format!("invalid TOML in .agents/config.toml: {message}"))
                    .at(&src, span, "here")
                    .help("cassist reads `trust_level = \"trusted\"` from this file when cassist.kdl sets no `trust`"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (ProjectConfig, Vec<String>) {
        let mut diags = Diagnostics::default();
        let src = SourceFile::new("cassist.kdl", text);
        let config = parse_config(Path::new("/nonexistent"), Some(&src), &mut diags);
        let errors = diags.sorted().into_iter().map(|d| d.message.clone()).collect();
        (config, errors)
    }

    #[test]
    fn the_files_limit_is_a_whole_number_from_one() {
        let (config, errors) = read("");
        assert_eq!((config.limits.files, errors.len()), (10_000, 0));
        let (config, errors) = read("limits {\n    files 5\n}\n");
        assert_eq!((config.limits.files, errors.len()), (5, 0));
        for (value, said) in [
            ("0", "`files` must be at least 1, found 0"),
            ("-3", "`files` must be at least 1, found -3"),
            ("1.5", "`files` expects a whole number, found the fraction 1.5"),
            ("\"10000\"", "`files` expects a whole number, found a string"),
        ] {
            let (config, errors) = read(&format!("limits {{\n    files {value}\n}}\n"));
            assert_eq!(errors, [said], "files {value}");
            assert_eq!(config.limits.files, 10_000, "a bad value leaves the default");
        }
    }

    #[test]
    fn memory_is_a_size_and_processes_a_whole_number_from_one() {
        let (config, errors) = read("");
        assert_eq!((config.limits.memory, config.limits.processes, errors.len()), (8 << 30, 2048, 0));
        let (config, errors) = read("limits {\n    memory \"64MiB\"\n    processes 50\n}\n");
        assert_eq!((config.limits.memory, config.limits.processes, errors.len()), (64 << 20, 50, 0));
        for (body, said) in [
            (
                "memory \"8 GiB\"",
                "invalid size `8 GiB` for `memory`: no spaces: write the unit right after the number, e.g. \"8MiB\"",
            ),
            ("memory 8", "`memory` expects a size string, found the number 8"),
            ("processes 0", "`processes` must be at least 1, found 0"),
            ("processes 2.5", "`processes` expects a whole number, found the fraction 2.5"),
            ("processes \"2048\"", "`processes` expects a whole number, found a string"),
        ] {
            let (config, errors) = read(&format!("limits {{\n    {body}\n}}\n"));
            assert_eq!(errors, [said], "{body}");
            assert_eq!(
                (config.limits.memory, config.limits.processes),
                (8 << 30, 2048),
                "a bad value leaves the default"
            );
        }
    }

    #[test]
    fn the_network_block_and_an_agents_allow_list_their_hosts() {
        let (config, errors) = read("");
        assert!(config.network.is_none() && errors.is_empty());
        let (config, errors) = read("network {\n}\n");
        assert_eq!((config.network, errors.len()), (Some(NetworkConfig::default()), 0));
        let (config, errors) = read(
            "network {\n    allow \"packages.example.com\" \"mirror.example.org:443\"\n    allow \"*.pkg.dev\"\n}\nagent \"aider\" {\n    command \"aider\"\n    allow \"api.example.com\"\n}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.network.unwrap().allow, ["packages.example.com", "mirror.example.org:443", "*.pkg.dev"]);
        assert_eq!(config.agents["aider"].allow, ["api.example.com"]);
    }

    #[test]
    fn a_project_cannot_allow_local_or_metadata_hosts() {
        for (host, kind) in [
            ("localhost", "a loopback address"),
            ("127.0.0.1", "a loopback address"),
            ("10.0.0.5", "a private address"),
            ("169.254.169.254", "a cloud metadata address"),
            ("fe80::1", "a link-local address"),
            ("0.0.0.0", "an unspecified address"),
        ] {
            for text in [
                format!("network {{\n    allow \"ok.example.com\" {host:?}\n}}\n"),
                format!("agent \"a\" {{\n    command \"a\"\n    allow {host:?}\n}}\n"),
            ] {
                let (config, errors) = read(&text);
                assert_eq!(errors, [format!("`{host}` is {kind}: a project's files cannot allow it")], "{text}");
                let allowed = config.network.map(|n| n.allow).or(config.agents.get("a").map(|a| a.allow.clone()));
                assert!(!allowed.unwrap_or_default().contains(&host.to_owned()));
            }
        }
        let (_, errors) = read("network {\n    allow \"https://example.com\"\n}\n");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("`https://example.com` is not a host to allow"), "{errors:?}");
    }

    #[test]
    fn sandbox_paths_are_absolute_or_under_home() {
        let (config, errors) = read(
            "sandbox {\n    read \"/opt/toolchains\" \"~/sdk\"\n    hide \"~/work-secrets\"\n    read \"/tmp/venv\"\n}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let home = Path::new("/home/u");
        assert_eq!(
            config.sandbox.read_paths(Some(home)),
            [PathBuf::from("/opt/toolchains"), home.join("sdk"), PathBuf::from("/tmp/venv")]
        );
        assert_eq!(config.sandbox.hide_paths(Some(home)), [home.join("work-secrets")]);
        assert_eq!(config.sandbox.hide_paths(None), Vec::<PathBuf>::new(), "no HOME: no `~/` path");
        let (config, errors) =
            read("sandbox {\n    read \"venv\"\n    hide \"~\" \"./x\" \"/\"\n    write \"/x\"\n}\n");
        assert_eq!(
            errors,
            [
                "`venv` is not an absolute path",
                "`~` cannot be hidden",
                "`./x` is not an absolute path",
                "`/` cannot be hidden",
                "unknown node `write` in `sandbox`"
            ]
        );
        assert!(config.sandbox.is_empty());
    }
}
