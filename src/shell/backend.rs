//! Where a job's process runs: here (`local`: `SHELL -c COMMAND` in a process group of its
//! own) or on a Slurm cluster (`slurm`: the same command under `srun`, which stays attached
//! and streams the job's output back). The core, the report and the exit status never know
//! which backend ran a job.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::config::Backend;
use crate::core::Grant;

impl Backend {
    /// The program and arguments that run `command` for job `seq` of `key`.
    ///
    /// Slurm: `srun --quiet --quit-on-interrupt --job-name=PREFIX.HASH --dependency=singleton
    /// --comment=RUN:SEQ:ATTEMPT [--time=MINUTES] [--licenses=L:1] [--partition/--account/--qos]
    /// [--gres=gpu:N] [--mem=SIZEM] SHELL -c COMMAND`. `--time` is the turn timeout rounded up
    /// to whole minutes, a server-side backstop should lanes go away; `--gres`, `--mem` and
    /// `--licenses` ask the cluster for what the run was granted ([`slurm_resource_args`],
    /// [`slurm_licenses`], joined with `--slurm-license`'s into one list).
    pub(crate) fn argv(
        &self,
        shell: &str,
        command: &str,
        job: JobIdentity<'_>,
        timeout: Option<Duration>,
        grant: Option<&Grant>,
    ) -> (OsString, Vec<OsString>) {
        let JobIdentity { key, seq, attempt } = job;
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
                let licenses = one_list_of_licenses(
                    options.license.as_deref(),
                    grant.map(slurm_licenses).unwrap_or_default(),
                );
                if !licenses.is_empty() {
                    args.push(format!("--licenses={}", licenses.join(",")).into());
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
                if let Some(grant) = grant {
                    args.extend(slurm_resource_args(grant).into_iter().map(OsString::from));
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

    /// The variables of lanes' environment that srun must not see: inside an allocation
    /// (an `sbatch` script, `salloc`: `SLURM_JOB_ID` or `SLURM_JOBID` set), every `SLURM_*`
    /// variable but `SLURM_CONF`. srun reads them as its own options: `SLURM_JOB_ID` makes it
    /// start a step of that allocation instead of a job (no `--dependency=singleton`, no
    /// `--licenses`: one job per key would not hold), and `SLURM_NTASKS` runs the command
    /// once per task. Outside one, and for the local backend, none.
    pub(crate) fn allocation_variables(&self) -> Vec<String> {
        if self.is_local()
            || std::env::var_os("SLURM_JOB_ID").is_none()
                && std::env::var_os("SLURM_JOBID").is_none()
        {
            return Vec::new();
        }
        std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .filter(|name| name.starts_with("SLURM_") && name != "SLURM_CONF")
            .collect()
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
    /// `TIMEOUT`, …), while the cluster still remembers it (slurm.conf `MinJobAge`). A job
    /// still `COMPLETING` (or in any state not final) when srun has ended is asked about again
    /// every [`STATE_POLL`] until it is over, for at most [`STATE_PATIENCE`]: a job cancelled
    /// on the cluster is `COMPLETING` for a moment after its srun exits, and only then
    /// `CANCELLED`. Past that, its last state.
    pub(crate) async fn final_state(&self, seq: u64, attempt: u32) -> Option<String> {
        let Backend::Slurm { run_id, .. } = self else {
            return None;
        };
        let wanted = comment(run_id, seq, attempt);
        let asked = tokio::time::Instant::now();
        loop {
            let state = jobs_of_user()
                .into_iter()
                .find(|job| job.comment == wanted)
                .map(|job| job.state);
            match state {
                Some(state) if is_active(&state) && asked.elapsed() < STATE_PATIENCE => {
                    tokio::time::sleep(STATE_POLL).await;
                }
                state => return state,
            }
        }
    }
}

/// How often a job's state is asked for while the cluster is still finishing it.
const STATE_POLL: Duration = Duration::from_millis(100);

/// How long a job's state is waited for once its srun has ended; a state still not final by
/// then (a job whose processes the node is still ending) is taken as it is.
pub(crate) const STATE_PATIENCE: Duration = Duration::from_secs(10);

/// Which job a process is for: its key, number and try.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobIdentity<'a> {
    /// Its lane.
    pub key: &'a str,
    /// Its number (`LANES_SEQ`).
    pub seq: u64,
    /// Its try (`LANES_ATTEMPT`).
    pub attempt: u32,
}

/// The `srun` arguments that ask the cluster for what a run was granted
/// ([`crate::resources::check_slurm_resources`] allowed only `gpu` and `mem`).
pub(crate) fn slurm_resource_args(grant: &Grant) -> Vec<String> {
    grant
        .parts()
        .filter_map(|part| match part.name {
            "gpu" => Some(format!("--gres=gpu:{}", part.amount)),
            "mem" => Some(format!("--mem={}M", part.amount.div_ceil(1 << 20))),
            _ => None,
        })
        .collect()
}

/// The cluster licenses a run was granted, as `srun --licenses` lists them: `NAME:N` for
/// every resource but `gpu` and `mem` ([`crate::resources::check_slurm_resources`]).
pub(crate) fn slurm_licenses(grant: &Grant) -> Vec<(&str, u64)> {
    grant
        .parts()
        .filter(|part| !matches!(part.name, "gpu" | "mem"))
        .map(|part| (part.name, part.amount))
        .collect()
}

/// `srun --licenses`' list: `--slurm-license`'s `NAME:1` and the run's granted licenses
/// (`NAME:N`), each name once: a name asked both ways takes the larger count, not the sum
/// (both ask for the same cluster license for this job).
fn one_list_of_licenses(slurm_license: Option<&str>, granted: Vec<(&str, u64)>) -> Vec<String> {
    let mut listed: Vec<(&str, u64)> = Vec::new();
    for (name, count) in slurm_license
        .map(|name| (name, 1))
        .into_iter()
        .chain(granted)
    {
        match listed.iter_mut().find(|(listed, _)| *listed == name) {
            Some((_, most)) => *most = (*most).max(count),
            None => listed.push((name, count)),
        }
    }
    listed
        .into_iter()
        .map(|(name, count)| format!("{name}:{count}"))
        .collect()
}

/// Checks that the cluster has a license of each name (`scontrol show licenses NAME`), so
/// that a license it lacks is an error before anything runs rather than every job's. Each
/// name comes with what asks for it, as the message says it (`resource "fluent" is asked of
/// the cluster as a license`).
///
/// # Errors
/// A name the cluster has no license of, or `scontrol` that cannot be run.
pub(crate) fn check_cluster_licenses<'a>(
    names: impl Iterator<Item = (&'a str, String)>,
) -> Result<(), String> {
    for (name, what) in names {
        let out = cluster_command("scontrol")
            .args(["show", "licenses", name])
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("cannot run scontrol to check license {name:?}: {err}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let listed = text
            .split_whitespace()
            .any(|word| word == format!("LicenseName={name}"));
        if !out.status.success() || !listed {
            return Err(format!(
                "{what} (srun --licenses), but the cluster has no license {name:?} (scontrol \
                 show licenses)"
            ));
        }
    }
    Ok(())
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
    let Ok(out) = cluster_command("squeue")
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
    let _ = cluster_command("scancel")
        .args(&ids)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A Slurm command for lanes' own questions to the cluster, without the user's defaults for
/// it (`SQUEUE_PARTITION`, `SQUEUE_NAMES`, `SCANCEL_PARTITION`…, read from the environment):
/// they would narrow what it finds or cancels to other jobs than this run's.
fn cluster_command(program: &str) -> Command {
    let mut command = Command::new(program);
    let prefix = format!("{}_", program.to_ascii_uppercase());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|name| name.starts_with(&prefix)) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether a job in `state` is not over on the cluster.
pub(crate) fn is_active(state: &str) -> bool {
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

    /// What the core grants a lone job needing `needs` of `resources`.
    fn granted(
        resources: Vec<crate::core::Resource>,
        needs: std::sync::Arc<crate::core::Needs>,
    ) -> std::sync::Arc<crate::core::Grant> {
        let mut core = crate::core::Scheduler::new(crate::core::Limits {
            max_concurrent: 4,
            max_queued: 4,
        });
        core.set_resources(resources);
        let request = crate::core::JobRequest {
            seq: 1,
            key: "k".into(),
            rank: 0,
            timeout: None,
            weight: 0,
            needs: Some(needs),
        };
        let _ = core.admit(request, Duration::ZERO);
        core.take(Duration::ZERO).unwrap().grant.unwrap()
    }

    #[test]
    fn a_license_asked_both_ways_is_listed_once_with_the_larger_count() {
        assert_eq!(
            one_list_of_licenses(Some("lanes"), vec![("lanes", 1), ("fluent", 2)]),
            ["lanes:1", "fluent:2"]
        );
        assert_eq!(
            one_list_of_licenses(Some("fluent"), vec![("fluent", 3)]),
            ["fluent:3"]
        );
        assert_eq!(one_list_of_licenses(Some("lic"), Vec::new()), ["lic:1"]);
        assert!(one_list_of_licenses(None, Vec::new()).is_empty());
    }

    #[test]
    fn local_runs_the_shell() {
        let job = JobIdentity {
            key: "k",
            seq: 1,
            attempt: 1,
        };
        let (program, args) = Backend::Local.argv("sh", "echo hi", job, None, None);
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
        let job = JobIdentity {
            key: "api",
            seq: 3,
            attempt: 2,
        };
        let (program, args) =
            backend.argv("bash", "make", job, Some(Duration::from_secs(61)), None);
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
    fn gpus_and_memory_map_to_gres_and_mem() {
        use crate::resources::{parse_needs, parse_resource, resolve};
        let resources = vec![
            parse_resource("gpu=4").unwrap(),
            parse_resource("mem=64G").unwrap(),
        ];
        assert_eq!(crate::resources::check_slurm_resources(&resources), Ok(()));
        let needs = resolve(1, &parse_needs("gpu=2,mem=1500M").unwrap(), &resources, 4)
            .unwrap()
            .unwrap();
        let grant = granted(resources, needs);
        assert_eq!(slurm_resource_args(&grant), ["--gres=gpu:2", "--mem=1500M"]);
        let backend = Backend::Slurm {
            options: SlurmOptions::default(),
            run_id: "r".into(),
        };
        let job = JobIdentity {
            key: "k",
            seq: 1,
            attempt: 1,
        };
        let (_, args) = backend.argv("sh", "x", job, None, Some(&grant));
        let tail: Vec<String> = args[args.len() - 5..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(tail, ["--gres=gpu:2", "--mem=1500M", "sh", "-c", "x"]);
        // Bytes round up to whole mebibytes.
        let odd = |bytes: u64| {
            let needs = std::sync::Arc::new(crate::core::Needs {
                weight: 1,
                resources: vec![(0, bytes)],
            });
            slurm_resource_args(&granted(vec![parse_resource("mem=1G").unwrap()], needs))
        };
        assert_eq!(odd(1), ["--mem=1M"]);
        assert_eq!(odd((1 << 20) + 1), ["--mem=2M"]);
    }

    #[test]
    fn other_counts_are_licenses_and_named_units_cannot_be_mapped() {
        use crate::resources::{parse_needs, parse_resource, resolve};
        let check =
            |spec: &str| crate::resources::check_slurm_resources(&[parse_resource(spec).unwrap()]);
        assert_eq!(check("cpu=8"), Ok(()));
        assert!(check("port=8001,8002").unwrap_err().contains("as a count"));
        assert!(check("gpu=0,1").unwrap_err().contains("as a count"));
        assert!(check("mem=a,b").is_err());
        // A license granted and --slurm-license's make one --licenses list.
        let resources = vec![
            parse_resource("fluent=4").unwrap(),
            parse_resource("gpu=2").unwrap(),
        ];
        let names: Vec<&str> = crate::resources::slurm_license_names(&resources).collect();
        assert_eq!(names, ["fluent"]);
        let needs = resolve(1, &parse_needs("fluent=3,gpu=1").unwrap(), &resources, 4)
            .unwrap()
            .unwrap();
        let grant = granted(resources, needs);
        assert_eq!(slurm_licenses(&grant), [("fluent", 3)]);
        let backend = Backend::Slurm {
            options: SlurmOptions {
                license: Some("lanes".into()),
                ..SlurmOptions::default()
            },
            run_id: "r".into(),
        };
        let job = JobIdentity {
            key: "k",
            seq: 1,
            attempt: 1,
        };
        let (_, args) = backend.argv("sh", "x", job, None, Some(&grant));
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let licenses: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--licenses"))
            .collect();
        assert_eq!(licenses, ["--licenses=lanes:1,fluent:3"]);
        assert!(args.contains(&"--gres=gpu:1".to_owned()));
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
