//! A part of a split task (an oversized task is cut into parts rather
//! than retried whole) as the store records it and reports name it: a
//! file, a piece (header / impl / test), the round that made it. A leaf:
//! imports nothing of the crate. What replaces a part that was killed, and
//! the rest of the splitting policy, is in cassist-run's `split.rs`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Each round's timeout is the previous one's times this.
pub const TIMEOUT_GROWTH: f64 = 1.5;

/// A slice of one file (or of the whole task) by layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Piece {
    Header,
    Impl,
    Test,
}

impl Piece {
    pub const ALL: [Piece; 3] = [Piece::Header, Piece::Impl, Piece::Test];

    pub fn as_str(self) -> &'static str {
        match self {
            Piece::Header => "header",
            Piece::Impl => "impl",
            Piece::Test => "test",
        }
    }
}

/// One part of a split task. Neither a file nor a piece: the whole task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<Piece>,
    /// The round of splitting that made this part (0: the task itself).
    pub round: u32,
}

impl Part {
    pub fn whole() -> Part {
        Part { file: None, piece: None, round: 0 }
    }

    pub fn is_whole(&self) -> bool {
        self.file.is_none() && self.piece.is_none()
    }

    /// The part's name after `parent/`: `src/a.py`, `src/a.py:impl`,
    /// `impl`; empty for the whole task.
    pub fn label(&self) -> String {
        match (&self.file, self.piece) {
            (Some(f), Some(p)) => format!("{f}:{}", p.as_str()),
            (Some(f), None) => f.clone(),
            (None, Some(p)) => p.as_str().to_owned(),
            (None, None) => String::new(),
        }
    }

    /// The subtask's name, as reports show it: `parent/part` (the task's
    /// own name when it is whole).
    pub fn name(&self, parent: &str) -> String {
        if self.is_whole() { parent.to_owned() } else { format!("{parent}/{}", self.label()) }
    }

    /// `CASSIST_PART`: empty, `file:<path>`, `header`, `impl` or `test`.
    pub fn env(&self) -> String {
        match (&self.file, self.piece) {
            (_, Some(p)) => p.as_str().to_owned(),
            (Some(f), None) => format!("file:{f}"),
            (None, None) => String::new(),
        }
    }

    /// The part in a sentence: "part impl of src/big.rs".
    pub fn describe(&self) -> String {
        match (&self.file, self.piece) {
            (Some(f), Some(p)) => format!("part {} of {f}", p.as_str()),
            (Some(f), None) => format!("part {f}"),
            (None, Some(p)) => format!("part {}", p.as_str()),
            (None, None) => "the whole task".to_owned(),
        }
    }

    /// This part's timeout: the task's, times 1.5 per round.
    pub fn timeout(&self, base: Duration) -> Duration {
        base.mul_f64(TIMEOUT_GROWTH.powi(self.round as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_part_variables() {
        let f = Part { file: Some("src/a.py".into()), piece: None, round: 1 };
        assert_eq!(f.name("two"), "two/src/a.py");
        assert_eq!(f.env(), "file:src/a.py");
        let i = Part { file: Some("src/lib.rs".into()), piece: Some(Piece::Impl), round: 2 };
        assert_eq!(i.name("big"), "big/src/lib.rs:impl");
        assert_eq!(i.env(), "impl");
        assert_eq!(i.describe(), "part impl of src/lib.rs");
        let w = Part { file: None, piece: Some(Piece::Header), round: 1 };
        assert_eq!(w.name("t"), "t/header");
        assert_eq!(Part::whole().name("t"), "t");
        assert_eq!(Part::whole().env(), "");
    }

    #[test]
    fn timeouts_grow_by_half_each_round() {
        let base = Duration::from_secs(120);
        let at = |round| Part { file: None, piece: Some(Piece::Impl), round }.timeout(base);
        assert_eq!(at(0), Duration::from_secs(120));
        assert_eq!(at(1), Duration::from_secs(180));
        assert_eq!(at(2), Duration::from_secs(270));
        assert_eq!(at(3), Duration::from_secs(405));
    }
}
