//! The input: pure parsers of the two forms (`KEY<TAB>COMMAND` lines and the TOML manifest)
//! and the items both become.

pub(crate) mod arguments;
pub(crate) mod lines;
pub(crate) mod manifest;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One job as the driver receives it, whatever the input form.
#[derive(Debug, Clone)]
pub(crate) struct JobSpec {
    /// 1-based job number in input order.
    pub seq: u64,
    /// 1-based source line (the `[[job]]` header in a manifest).
    pub line: u64,
    /// The lane.
    pub key: Arc<str>,
    /// The command (or, with `--command`, the argument).
    pub command: String,
    /// Lower runs first within its lane (manifest `rank`).
    pub rank: i64,
    /// The job's own turn timeout (manifest); once admitted, the effective one
    /// ([`crate::config::RunConfig::turn_timeout`]).
    pub timeout: Option<Duration>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// Its weight and named resources; `None` for weight 1 and no resource.
    pub needs: Option<Arc<crate::core::Needs>>,
}

/// What the input thread sends.
#[derive(Debug)]
pub(crate) enum InputItem {
    Job(JobSpec),
    /// A malformed line: recorded as `rejected`/`invalid_input`.
    Invalid {
        seq: u64,
        line: u64,
        key: Option<String>,
        message: String,
    },
    /// The input could not be read to its end; nothing more comes.
    ReadError(String),
}

impl JobSpec {
    /// What the core needs to schedule the job. Under batching its argument's quoted length
    /// counts toward a batch's byte bound (`--batch-bytes`) `copies` times, once for each
    /// argument placeholder of the template (see [`crate::config::RunConfig::batch_copies`]);
    /// 0 without batching.
    pub(crate) fn request(&self, copies: usize) -> crate::core::JobRequest {
        crate::core::JobRequest {
            seq: self.seq,
            key: Arc::clone(&self.key),
            rank: self.rank,
            timeout: self.timeout,
            weight: crate::template::weight(&self.command).saturating_mul(copies),
            needs: self.needs.clone(),
        }
    }
}
