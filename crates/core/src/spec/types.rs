//! Small enums of the task format.

use std::fmt;

/// What a task does: `code` changes files; `explore` and `review` are
/// read-only, their output is the agent's summary (given to the tasks that
/// depend on them); `test` may run commands but changes no project file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Code,
    Explore,
    Review,
    Test,
}

impl Kind {
    pub const NAMES: &'static [&'static str] = &["code", "explore", "review", "test"];

    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "code" => Kind::Code,
            "explore" => Kind::Explore,
            "review" => Kind::Review,
            "test" => Kind::Test,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Code => "code",
            Kind::Explore => "explore",
            Kind::Review => "review",
            Kind::Test => "test",
        }
    }

    /// `explore` and `review` never change files.
    pub fn is_read_only(self) -> bool {
        matches!(self, Kind::Explore | Kind::Review)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sandbox levels, ordered from least to most permissive: `read-only`
/// (no write anywhere but temp folders and the agent's own state),
/// `workspace-write` (writes in the task's workspace copy only), `full`
/// (nothing enforced; only in a project that trusts `full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxLevel {
    ReadOnly,
    WorkspaceWrite,
    Full,
}

impl SandboxLevel {
    pub const NAMES: &'static [&'static str] = &["read-only", "workspace-write", "full"];

    pub fn parse(s: &str) -> Option<SandboxLevel> {
        Some(match s {
            "read-only" => SandboxLevel::ReadOnly,
            "workspace-write" => SandboxLevel::WorkspaceWrite,
            "full" => SandboxLevel::Full,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxLevel::ReadOnly => "read-only",
            SandboxLevel::WorkspaceWrite => "workspace-write",
            SandboxLevel::Full => "full",
        }
    }
}

impl fmt::Display for SandboxLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
