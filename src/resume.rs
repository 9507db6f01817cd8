//! `--resume REPORT`: which jobs of an earlier run already succeeded, matched by key, command
//! and occurrence number (the n-th identical key+command pair in input order), so that a run
//! can be repeated without redoing them (SPEC §5.2).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

/// The part of a job record resuming needs.
#[derive(Debug, Deserialize)]
struct PastJob {
    #[serde(rename = "type")]
    kind: String,
    seq: Option<u64>,
    key: Option<String>,
    command: Option<String>,
    outcome: Option<String>,
}

/// Why a report cannot be used to resume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("cannot read the report {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}:{line}: not a lanes report line ({error})")]
    Parse {
        path: String,
        line: usize,
        error: String,
    },
}

/// The jobs that succeeded in an earlier report, and the matching of new jobs against them.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    /// For each key+command pair that succeeded at least once: the occurrence numbers (1-based)
    /// that succeeded.
    succeeded: HashMap<(String, String), Vec<u32>>,
    /// Occurrences seen so far in the new run, for pairs in `succeeded` only (memory is bounded
    /// by the old report, not by the new input).
    seen: HashMap<(String, String), u32>,
}

impl Resume {
    /// Reads an earlier report. A torn (unparsable) last line is ignored, as a crash can leave
    /// one; an unparsable line elsewhere is an error.
    ///
    /// # Errors
    /// The report cannot be read, or holds a line that is not JSON.
    pub(crate) fn load(path: &Path) -> Result<Self, ResumeError> {
        let text = std::fs::read(path).map_err(|error| ResumeError::Read {
            path: path.display().to_string(),
            error,
        })?;
        Self::parse(&path.display().to_string(), &String::from_utf8_lossy(&text))
    }

    /// Parses report `text` (see [`Resume::load`]); `name` is used in errors.
    ///
    /// # Errors
    /// A line other than the last that is not a JSON object.
    pub(crate) fn parse(name: &str, text: &str) -> Result<Self, ResumeError> {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut jobs: Vec<(u64, String, String, bool)> = Vec::new();
        for (index, line) in lines.iter().enumerate() {
            let job: PastJob = match serde_json::from_str(line) {
                Ok(job) => job,
                Err(_) if index + 1 == lines.len() => break,
                Err(error) => {
                    return Err(ResumeError::Parse {
                        path: name.to_owned(),
                        line: index + 1,
                        error: error.to_string(),
                    })
                }
            };
            if job.kind != "job" {
                continue;
            }
            if let (Some(seq), Some(key), Some(command)) = (job.seq, job.key, job.command) {
                let ok = job.outcome.as_deref() == Some("succeeded");
                jobs.push((seq, key, command, ok));
            }
        }
        jobs.sort_by_key(|job| job.0);
        let mut occurrences: HashMap<(String, String), u32> = HashMap::new();
        let mut succeeded: HashMap<(String, String), Vec<u32>> = HashMap::new();
        for (_, key, command, ok) in jobs {
            let pair = (key, command);
            let n = occurrences.entry(pair.clone()).or_default();
            *n += 1;
            if ok {
                succeeded.entry(pair).or_default().push(*n);
            }
        }
        Ok(Resume {
            succeeded,
            seen: HashMap::new(),
        })
    }

    /// Called for every new job in input order: whether it succeeded before and is skipped.
    pub(crate) fn skip(&mut self, key: &str, command: &str) -> bool {
        let pair = (key.to_owned(), command.to_owned());
        let Some(done) = self.succeeded.get(&pair) else {
            return false;
        };
        let n = self.seen.entry(pair).or_default();
        *n += 1;
        done.contains(n)
    }

    /// How many jobs of the earlier report succeeded.
    #[cfg(test)]
    pub(crate) fn succeeded_count(&self) -> usize {
        self.succeeded.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = concat!(
        r#"{"type":"run","version":"0.1.0"}"#,
        "\n",
        r#"{"type":"job","seq":2,"key":"a","command":"echo x","outcome":"failed"}"#,
        "\n",
        r#"{"type":"job","seq":1,"key":"a","command":"echo x","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":3,"key":"a","command":"echo x","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":4,"key":"b","command":"true","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":5,"key":null,"command":null,"outcome":"rejected"}"#,
        "\n",
        r#"{"type":"job","seq":6,"key":"c","comm"#,
    );

    #[test]
    fn matches_by_key_command_and_occurrence() {
        let mut resume = Resume::parse("r.jsonl", REPORT).unwrap();
        assert_eq!(resume.succeeded_count(), 3);
        // a/echo x: occurrence 1 succeeded, 2 failed, 3 succeeded.
        assert!(resume.skip("a", "echo x"));
        assert!(!resume.skip("a", "echo x"));
        assert!(resume.skip("a", "echo x"));
        assert!(!resume.skip("a", "echo x"), "a fourth occurrence is new");
        assert!(resume.skip("b", "true"));
        assert!(!resume.skip("b", "true "), "a changed command is a new job");
        assert!(!resume.skip("c", "anything"));
    }

    #[test]
    fn a_torn_line_elsewhere_is_an_error() {
        let text = "{\"type\":\"run\"}\n{\"type\":\"jo\n{\"type\":\"summary\"}\n";
        let err = Resume::parse("r.jsonl", text).unwrap_err();
        assert!(err.to_string().starts_with("r.jsonl:2:"), "{err}");
    }
}
