//! Where a job's process runs: here (`local`: `SHELL -c COMMAND` in a process group of its
//! own) or on a Slurm cluster (`slurm`: the same command under `srun`, which stays attached
//! and streams the job's output back). The core, the report and the exit status never know
//! which backend ran a job.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::config::Backend;

impl Backend {
    /// The program and arguments that run `command` for job `seq` of `key`.
    ///
    /// Slurm: `srun --quiet --quit-on-interrupt --job-name=PREFIX.HASH --dependency=singleton
    /// --comment=RUN:SEQ:ATTEMPT [--time=MINUTES] [--licenses=L:1] [--partition/--account/--qos]
    /// SHELL -c COMMAND`. `--time` is the turn timeout rounded up to whole minutes, a
    /// server-side backstop should lanes go away.
    pub(crate) fn argv(
        &self,
        shell: &str,
        command: &str,
        key: &str,
        seq: u64,
        attempt: u32,
        timeout: Option<Duration>,
    ) -> (OsString, Vec<OsString>) {
        match self {
            Backend::Local => (shell.into(), vec!["-c".into(), command.into()]),
            Backend::Slurm { options, run_id } => {
                let mut args: Vec<OsString> = vec![
                    "--quiet".into(),
                    "--quit-on-interrupt".into(),
                    format!("--job-name={}", job_name(&options.name_prefix, key)).into(),
                    "--dependency=singleton".into(),
                    format!("--comment={}", comment(run_id, seq, attempt)).into(),
                ];
                if let Some(timeout) = timeout {
                    let minutes = timeout.as_secs().div_ceil(60).max(1);
                    args.push(format!("--time={minutes}").into());
                }
                if let Some(license) = &options.license {
                    args.push(format!("--licenses={license}:1").into());
                }
                for (flag, value) in [
                    ("partition", &options.partition),
                    ("account", &options.account),
                    ("qos", &options.qos),
                ] {
                    if let Some(value) = value {
                        args.push(format!("--{flag}={value}").into());
                    }
                }
                args.extend([shell.into(), "-c".into(), command.into()]);
                ("srun".into(), args)
            }
        }
    }

    /// Whether stop signals go to the job's whole process group (local), or only as SIGINT to
    /// `srun` (Slurm: `--quit-on-interrupt` makes one SIGINT cancel the job; SIGKILL to `srun`'s
    /// group would leave the job running on the cluster).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Backend::Local)
    }

    /// The signal sent for a stop that would send `wanted` locally.
    pub(crate) fn stop_signal(&self, wanted: Signal) -> Signal {
        match self {
            Backend::Local => wanted,
            Backend::Slurm { .. } => Signal::SIGINT,
        }
    }

    /// Cancels job `seq`'s try `attempt` on the cluster (`scancel`), where SIGKILL would be sent
    /// locally. Blocks for the `squeue`/`scancel` calls.
    pub(crate) fn cancel(&self, seq: u64, attempt: u32) {
        if let Backend::Slurm { run_id, .. } = self {
            let wanted = comment(run_id, seq, attempt);
            cancel_where(|c| c == wanted);
        }
    }

    /// Cancels every job of this run still known to the cluster: the fallback before lanes
    /// exits.
    pub(crate) fn cancel_run(&self) {
        if let Backend::Slurm { run_id, .. } = self {
            let prefix = format!("{run_id}:");
            cancel_where(|c| c.starts_with(&prefix));
        }
    }

    /// The cluster's final state of job `seq`'s try `attempt` (`COMPLETED`, `CANCELLED`,
    /// `TIMEOUT`, …), while the cluster still remembers it (slurm.conf `MinJobAge`).
    pub(crate) fn final_state(&self, seq: u64, attempt: u32) -> Option<String> {
        let Backend::Slurm { run_id, .. } = self else {
            return None;
        };
        let wanted = comment(run_id, seq, attempt);
        jobs_of_user()
            .into_iter()
            .find(|job| job.comment == wanted)
            .map(|job| job.state)
    }
}

/// `PREFIX.HASH`: the key's FNV-1a hash in hex, so that any key makes a valid job name.
pub(crate) fn job_name(prefix: &str, key: &str) -> String {
    let hash = crate::output::framing::stable_hash(key);
    format!("{prefix}.{hash:016x}")
}

fn comment(run_id: &str, seq: u64, attempt: u32) -> String {
    format!("{run_id}:{seq}:{attempt}")
}

struct ClusterJob {
    id: String,
    state: String,
    comment: String,
}

/// This user's jobs the cluster knows, finished ones included (`squeue -t all`).
fn jobs_of_user() -> Vec<ClusterJob> {
    let uid = nix::unistd::getuid().to_string();
    let Ok(out) = Command::new("squeue")
        .args([
            "--noheader",
            "--states=all",
            "--user",
            &uid,
            "--format=%i|%T|%k",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut parts = line.trim().splitn(3, '|');
            Some(ClusterJob {
                id: parts.next()?.to_owned(),
                state: parts.next()?.to_owned(),
                comment: parts.next()?.to_owned(),
            })
        })
        .collect()
}

fn cancel_where(matches: impl Fn(&str) -> bool) {
    let ids: Vec<String> = jobs_of_user()
        .into_iter()
        .filter(|job| matches(&job.comment) && is_active(&job.state))
        .map(|job| job.id)
        .collect();
    if ids.is_empty() {
        return;
    }
    let _ = Command::new("scancel")
        .args(&ids)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn is_active(state: &str) -> bool {
    matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "SUSPENDED"
            | "CONFIGURING"
            | "COMPLETING"
            | "REQUEUED"
            | "RESIZING"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SlurmOptions;

    #[test]
    fn local_runs_the_shell() {
        let (program, args) = Backend::Local.argv("sh", "echo hi", "k", 1, 1, None);
        assert_eq!(program, "sh");
        assert_eq!(args, ["-c", "echo hi"]);
    }

    #[test]
    fn slurm_wraps_the_shell_in_srun() {
        let backend = Backend::Slurm {
            options: SlurmOptions {
                name_prefix: "lanes".into(),
                license: Some("lanes".into()),
                partition: Some("debug".into()),
                ..SlurmOptions::default()
            },
            run_id: "lanes-1-2".into(),
        };
        let (program, args) =
            backend.argv("bash", "make", "api", 3, 2, Some(Duration::from_secs(61)));
        assert_eq!(program, "srun");
        let args: Vec<String> = args.into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--quiet",
                "--quit-on-interrupt",
                &format!("--job-name={}", job_name("lanes", "api")),
                "--dependency=singleton",
                "--comment=lanes-1-2:3:2",
                "--time=2",
                "--licenses=lanes:1",
                "--partition=debug",
                "bash",
                "-c",
                "make",
            ]
        );
        assert_eq!(backend.stop_signal(Signal::SIGTERM), Signal::SIGINT);
    }

    #[test]
    fn job_names_are_stable_and_safe() {
        let name = job_name("lanes", "a key/with ünicode");
        assert_eq!(name, job_name("lanes", "a key/with ünicode"));
        assert_ne!(name, job_name("lanes", "another"));
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'));
        assert_eq!(name.len(), "lanes.".len() + 16);
    }
}
