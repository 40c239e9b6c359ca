//! Command-line definitions (clap), nothing else.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "cassist",
    version,
    about = "A declarative, reproducible task runner for coding agents",
    propagate_version = true
)]
pub struct Cli {
    /// Run as if started in DIR (the project root is found from there).
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// When to use colours (NO_COLOR is honoured by `auto`).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
    /// Print only failures and the summary.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more detail.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputLogs {
    #[default]
    Summary,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run tasks: agent, review, acceptance, integration.
    Run(RunArgs),
    /// Validate task files and the config; exit 0 or 2.
    Check(TaskArgs),
    /// Show the run order, hashes and states.
    Plan {
        #[command(flatten)]
        tasks: TaskArgs,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print the prompt the agent would get.
    Prompt {
        /// The task's name.
        task: String,
        #[command(flatten)]
        tasks: TaskArgs,
    },
    /// Show a task's inputs and their hashes: why it is in its state.
    Explain {
        /// The task's name.
        task: String,
        #[command(flatten)]
        tasks: TaskArgs,
        /// Print the whole hash key document as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List built-in and custom agents: installed?, version.
    Agents,
    /// The store of recorded results (.cassist/store) and the remote cache.
    #[command(
        subcommand,
        after_help = "The remote cache: `cache { remote \"s3://bucket/prefix\" endpoint=… region=…; trusted-key \"cassist-ed25519:…\" }` \
                      in cassist.kdl (or `remote \"turbo+https://host\" team=…`). CASSIST_REMOTE overrides the URL \
                      (`off`: none). CASSIST_CACHE_SIGNING_KEY (the `secret` line of `cache keygen`) signs what \
                      is uploaded; without it the remote is read-only. S3 credentials come from AWS_ACCESS_KEY_ID, \
                      AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL; a Turborepo server's \
                      token from TURBO_TOKEN."
    )]
    Cache(CacheCommand),
    /// Write a commented cassist.kdl and tasks/example.kdl.
    Init,
    /// Write the bundled demo into a new folder and run it there.
    Demo {
        /// The folder to create (must be new or empty).
        #[arg(value_name = "DIR", default_value = "cassist-demo")]
        folder: PathBuf,
    },
    /// Serve the project's tasks to a coordinating agent over MCP (stdio).
    Mcp {
        #[command(flatten)]
        tasks: TaskArgs,
    },
    /// Print a shell completion script (it completes task names too).
    Completions { shell: clap_complete::Shell },
    /// Internal: write a stored change into the current folder (a
    /// workspace), for replays.
    #[command(name = "__apply-changes", hide = true)]
    ApplyChanges { spec: PathBuf },
    /// Internal: check that copy-on-write workspaces work here.
    #[command(name = "__sandbox-probe", hide = true)]
    SandboxProbe { dir: PathBuf, lower: Option<PathBuf> },
}

/// `cassist cache`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Entries with their size and age.
    Ls,
    /// Remove entries the lock does not reference, beyond the newest N.
    Gc {
        /// How many of the newest entries to keep besides the locked ones.
        #[arg(long, default_value_t = 20)]
        keep: usize,
    },
    /// Remove the whole store (never the remote cache).
    Clean,
    /// Upload every local entry to the remote cache (needs
    /// CASSIST_CACHE_SIGNING_KEY).
    Push,
    /// Fetch the entries of the tasks in PATH that are not local from the
    /// remote cache.
    Pull(TaskArgs),
    /// Print a new signing key pair for the remote cache: `public …` (for
    /// `trusted-key`) and `secret …` (for CASSIST_CACHE_SIGNING_KEY).
    Keygen,
}

/// `cassist run`.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub tasks: TaskArgs,
    /// Only these tasks (and the tasks they depend on); repeatable.
    #[arg(long, value_name = "NAME")]
    pub filter: Vec<String>,
    /// Run what does not depend on a failed task.
    #[arg(long)]
    pub keep_going: bool,
    /// Keep the workspace of a failed task for inspection.
    #[arg(long)]
    pub keep_workspace: bool,
    /// Never call an agent: exit 3 naming each task that would need one.
    #[arg(long)]
    pub locked: bool,
    /// Ignore recorded results: call the agent for every task.
    #[arg(long)]
    pub no_cache: bool,
    /// Run these tasks' agents again, ignoring their cache, but not what
    /// they depend on; repeatable. It selects nothing: each must be among
    /// the tasks run.
    #[arg(long, value_name = "NAME", conflicts_with = "locked")]
    pub force: Vec<String>,
    /// Write machine-readable results here.
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// For tasks taken from the cache: `summary` (one line) or `full`
    /// (the stored transcript too).
    #[arg(long, value_enum, default_value_t = OutputLogs::Summary, value_name = "WHAT")]
    pub output_logs: OutputLogs,
    /// Tasks run at once (default: the number of CPUs); dependencies are
    /// respected.
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,
    /// Run the K-th of N slices of the tasks (a stable partition by name).
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Stop starting agents once their reported spend reaches USD.
    #[arg(long, value_name = "USD", value_parser = parse_cost)]
    pub max_cost: Option<f64>,
    /// Write a JUnit XML report here (one testcase per task).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `--shard K/N`: the K-th (1-based) of N slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub k: u64,
    pub n: u64,
}

impl Shard {
    /// Whether task `name` is in this slice: a hash of the name alone, so
    /// adding or removing a task never moves another.
    pub fn contains(&self, name: &str) -> bool {
        let h = blake3::hash(name.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&h.as_bytes()[..8]);
        u64::from_le_bytes(first) % self.n == self.k - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    let (k, n) = s.split_once('/').ok_or_else(|| format!("`{s}` is not K/N (for example 2/3)"))?;
    let k: u64 = k.trim().parse().map_err(|_| format!("`{k}` is not a whole number (K/N, for example 2/3)"))?;
    let n: u64 = n.trim().parse().map_err(|_| format!("`{n}` is not a whole number (K/N, for example 2/3)"))?;
    if n == 0 || k == 0 || k > n {
        return Err(format!("K/N needs 1 <= K <= N, got {k}/{n}"));
    }
    Ok(Shard { k, n })
}

fn parse_cost(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().trim_start_matches('$').parse().map_err(|_| format!("`{s}` is not an amount in USD"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}` is not an amount in USD (0 or more)"));
    }
    Ok(v)
}

/// Where the tasks are, and what the command line adds to them.
#[derive(Debug, Args, Default)]
pub struct TaskArgs {
    /// Task files or folders (default: tasks/ under the project root).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Agent for every task that names none.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Model for every task that names none (else `defaults { model }`,
    /// else the agent CLI's own default).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_names_and_adding_one_moves_no_other() {
        let names: Vec<String> = (0..300).map(|i| format!("task-{i}")).collect();
        let shard_of = |name: &str| (1..=4).filter(|&k| Shard { k, n: 4 }.contains(name)).collect::<Vec<_>>();
        let before: Vec<Vec<u64>> = names.iter().map(|n| shard_of(n)).collect();
        assert!(before.iter().all(|s| s.len() == 1), "every name in exactly one shard");
        for k in 1..=4 {
            let size = before.iter().filter(|s| s[0] == k).count();
            assert!((40..=110).contains(&size), "shard {k} holds {size} of 300");
        }
        // A name's shard depends on that name alone.
        let again: Vec<Vec<u64>> = names.iter().map(|n| shard_of(n)).collect();
        assert_eq!(before, again);
        assert_eq!(parse_shard(" 2 / 3 ").unwrap(), Shard { k: 2, n: 3 });
        assert_eq!(parse_cost("$1.50").unwrap(), 1.5);
    }
}
