//! The words of a run's settings that the command line and the manifest share: when to use
//! the terminal, how output is shown, what a full queue does, how jobs of a key are merged,
//! and where jobs run. Plain values; `config` resolves them into a run's configuration.

use clap::ValueEnum;

/// `--on-full`: what happens to a job that finds the queue full. In a manifest, one of the
/// words as a string, as on the command line ([`from_word`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum OnFull {
    /// Pause reading input until a queued job starts (nothing is lost).
    Wait,
    /// Record the job as rejected, reason queue_full.
    Reject,
}

/// `--backend`: where jobs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Here, each job in a process group of its own.
    Local,
    /// On a Slurm cluster, each job under `srun`.
    Slurm,
}

/// `--color`, `--progress`: when to use the terminal's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum When {
    /// When the stream is a terminal, NO_COLOR is not set and CI is not true.
    Auto,
    /// Always, whatever the stream.
    Always,
    /// Never.
    Never,
}

/// `--coalesce`: how waiting jobs of one key are merged. In a manifest, one of the words as a
/// string, as on the command line ([`from_word`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Coalesce {
    /// Every job runs.
    Off,
    /// A key has at most one running and one pending job; a newer job replaces the pending one.
    Latest,
}

/// `--output`: how job output reaches lanes' stdout and stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    /// Each line whole, prefixed with the job's key.
    Prefixed,
    /// Each job's whole output in one block when it ends, after a header line.
    Grouped,
    /// Bytes as they come, no prefix.
    Raw,
    /// Discarded.
    None,
}

/// `--containment`: what holds a job's processes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContainmentMode {
    /// A cgroup per job where lanes can create one, else the job's process group.
    Auto,
    /// A cgroup (v2) per job; an error (exit 2) where lanes cannot create one.
    Cgroup,
    /// The job's own process group.
    ProcessGroup,
}

/// The value of `E` named `word` (its command-line word, exactly), for a manifest.
///
/// # Errors
/// Another word: the words there are, for people.
fn from_word<E: ValueEnum>(word: &str) -> Result<E, String> {
    E::from_str(word, false).map_err(|_| {
        let words: Vec<String> = E::value_variants()
            .iter()
            .filter_map(|value| value.to_possible_value())
            .map(|value| format!("\"{}\"", value.get_name()))
            .collect();
        format!("expected {}, not {word:?}", words.join(" or "))
    })
}

impl TryFrom<String> for OnFull {
    type Error = String;
    fn try_from(word: String) -> Result<Self, String> {
        from_word(&word)
    }
}

impl TryFrom<String> for Coalesce {
    type Error = String;
    fn try_from(word: String) -> Result<Self, String> {
        from_word(&word)
    }
}
