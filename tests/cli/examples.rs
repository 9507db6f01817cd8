//! SPEC §7: every example shipped in `examples/` runs as the README documents it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::records::*;
use crate::support::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_deploy_manifest_runs_every_job_in_rank_order() {
    // README: `lanes examples/deploy/deploy.toml`, from the repository's root.
    let out = Run::new()
        .cwd(repo())
        .arg("examples/deploy/deploy.toml")
        .run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.jobs.len(), 5);
    assert_eq!(report.summary.succeeded, 5, "{}", out.dump());
    assert_eq!(
        report.run.max_concurrent, 4,
        "max_concurrent from the manifest"
    );
    // Within a lane, rank order: the api build before its migration, the web build before
    // it goes live.
    for (before, after) in [(1, 2), (3, 4)] {
        assert!(
            out.job(after).start_ms() >= out.job(before).end_ms(),
            "seq {after} started before seq {before} ended\n{}",
            out.dump()
        );
    }
    let stdout = out.stdout();
    for line in [
        "[api] building api (release) for release 2026.11 in api",
        "[api] api migrated",
        "[web] web built",
        "[docs] docs for 2026.11 rendered",
    ] {
        assert!(
            stdout.contains(&format!("{line}\n")),
            "{line}\n{}",
            out.dump()
        );
    }
    let slot = out.job(4).slot.unwrap();
    assert!(stdout.contains(&format!("[web] web 2026.11 is live on slot {slot}\n")));
}

#[test]
fn the_resources_manifest_shares_two_gpus_and_the_memory() {
    // README: `lanes examples/resources/train.toml`, from the repository's root.
    let out = Run::new()
        .cwd(repo())
        .arg("examples/resources/train.toml")
        .run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.summary.succeeded, 5, "{}", out.dump());
    let gpus = |seq: u64| -> Vec<String> {
        out.job(seq)
            .resources
            .as_ref()
            .and_then(|r| r.get("gpu"))
            .and_then(|g| g.units.clone())
            .unwrap_or_default()
    };
    let mem = |seq: u64| -> u64 {
        out.job(seq)
            .resources
            .as_ref()
            .and_then(|r| r.get("mem"))
            .map_or(0, |g| g.amount)
    };
    assert_eq!(gpus(2), ["0", "1"], "the large model holds both GPUs");
    assert_eq!(mem(4), 8 << 30);
    assert_eq!(out.job(4).weight, Some(2));
    // Jobs that ran at the same time held distinct GPUs, at most 16 GiB and 4 of the cap.
    for a in &report.jobs {
        let (mut held, mut memory, mut weight) = (gpus(a.seq), mem(a.seq), a.weight.unwrap_or(1));
        for b in &report.jobs {
            if b.seq != a.seq && b.start_ms() <= a.start_ms() && a.start_ms() < b.end_ms() {
                held.extend(gpus(b.seq));
                memory += mem(b.seq);
                weight += b.weight.unwrap_or(1);
            }
        }
        let distinct: BTreeSet<&String> = held.iter().collect();
        assert_eq!(
            distinct.len(),
            held.len(),
            "a GPU held twice\n{}",
            out.dump()
        );
        assert!(memory <= 16 << 30 && weight <= 4, "{}", out.dump());
    }
    let stdout = out.stdout();
    assert!(
        stdout.contains("[train-large] large model trained on GPUs 0,1\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[link] linked with 8589934592 bytes\n"),
        "{stdout}"
    );
    assert!(stdout.contains("[lint] linted\n"), "{stdout}");
}

#[test]
fn the_jobs_file_runs_every_job_with_three_at_once() {
    // README: `lanes -j 3 examples/jobs.tsv`.
    let out = Run::new()
        .cwd(repo())
        .args(["-j", "3", "examples/jobs.tsv"])
        .run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.jobs.len(), 6);
    assert_eq!(report.summary.succeeded, 6, "{}", out.dump());
    assert_eq!(report.run.max_concurrent, 3);
    let db: Vec<u64> = report.by_key("db").iter().map(|j| j.seq).collect();
    assert_eq!(db, [1, 3, 6]);
    assert_no_overlap_per_key(&report.jobs);
    for pair in [(1, 3), (3, 6), (2, 5)] {
        assert!(out.job(pair.1).start_ms() >= out.job(pair.0).end_ms());
    }
    let stdout = out.stdout();
    let db_lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("[db] ")).collect();
    assert_eq!(
        db_lines,
        [
            "[db] migrating",
            "[db] migrated",
            "[db] seeding",
            "[db] seeded",
            "[db] db job 6 runs after the migration and the seed"
        ]
    );
}

/// The `.gz` files under `dir`, sorted.
fn gz_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let kind = entry.file_type().unwrap();
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "gz") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `gzip -t FILE`'s exit status, run by the test itself.
fn gzip_t(file: &Path) -> i32 {
    Command::new("gzip")
        .arg("-t")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap()
}

/// Runs `examples/gzip-check.sh DIR -j 4 --report R` with `LANES` naming the binary, and
/// checks the report against `gzip -t` run on each file here.
fn gzip_check(dir: &Path) -> Output {
    let files = gz_files(dir);
    assert!(!files.is_empty());
    let out = Run::new()
        .cwd(repo())
        .env("LANES", BIN)
        .env("GZ_DIR", dir)
        // The harness adds `--report R` to the arguments, which the script passes on.
        .wrapper("exec sh examples/gzip-check.sh \"$GZ_DIR\" -j 4 \"$@\"")
        .run();
    let report = out.report();
    assert_eq!(report.jobs.len(), files.len(), "one record per .gz file");
    let mut seen = BTreeMap::new();
    for job in &report.jobs {
        let command = job.command.as_deref().unwrap();
        let quoted = command
            .strip_prefix("gzip -t '")
            .and_then(|c| c.strip_suffix('\''))
            .unwrap_or_else(|| panic!("{command}"));
        let path = PathBuf::from(quoted.replace("'\\''", "'"));
        let key = path
            .strip_prefix(dir)
            .unwrap()
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        assert_eq!(job.key.as_deref(), Some(key.as_str()), "{job:?}");
        assert!(seen.insert(path, job.clone()).is_none(), "{command} twice");
    }
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        files.iter().cloned().collect::<BTreeSet<_>>()
    );
    let mut bad = 0;
    for (path, job) in &seen {
        let status = gzip_t(path);
        if status == 0 {
            assert_eq!(
                job.result(),
                ("succeeded", None),
                "{}: {job:?}",
                path.display()
            );
        } else {
            bad += 1;
            assert_eq!(job.result(), ("failed", Some("exit_status")), "{job:?}");
            assert_eq!(job.exit_code, Some(status), "{}: {job:?}", path.display());
        }
    }
    assert_no_overlap_per_key(&report.jobs);
    out.code(if bad == 0 { 0 } else { 1 });
    assert_eq!(report.run.max_concurrent, 4);
    out
}

#[test]
fn gzip_check_agrees_with_gzip_on_usr_share_doc() {
    let doc = Path::new("/usr/share/doc");
    if gz_files(doc).is_empty() {
        let scratch = Scratch::new();
        fill_gzip_dir(&scratch);
        gzip_check(&scratch.join("doc"));
    } else {
        gzip_check(doc);
    }
}

/// `doc/` in `scratch`: a few packages of gzip files, one corrupt and one truncated, one name
/// with a quote and a space, one file nested deeper, one file that is not `.gz`.
fn fill_gzip_dir(scratch: &Scratch) {
    let gzip = |name: &str, text: &str| {
        let path = scratch.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut child = Command::new("gzip")
            .arg("-c")
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&path).unwrap())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.repeat(100).as_bytes())
            .unwrap();
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        path
    };
    gzip("doc/pkg-a/changelog.gz", "a change\n");
    gzip("doc/pkg-a/NEWS.gz", "news\n");
    gzip("doc/pkg-a/it's a file.gz", "quoted\n");
    gzip("doc/pkg-b/changelog.Debian.gz", "b change\n");
    let whole = gzip(
        "doc/pkg-b/truncated.gz",
        &"some text that compresses\n".repeat(50),
    );
    let bytes = std::fs::read(&whole).unwrap();
    std::fs::write(&whole, &bytes[..bytes.len() / 2]).unwrap();
    scratch.write("doc/pkg-b/corrupt.gz", "this is not gzip data\n");
    gzip("doc/pkg-c/examples/deep.gz", "deep\n");
    scratch.write("doc/pkg-c/README", "not checked\n");
}

#[test]
fn gzip_check_reports_corrupt_files_as_failed() {
    let scratch = Scratch::new();
    fill_gzip_dir(&scratch);
    let out = gzip_check(&scratch.join("doc"));
    let report = out.report();
    assert_eq!(report.jobs.len(), 7);
    assert_eq!(report.summary.failed, 2, "{}", out.dump());
    let keys: BTreeSet<&str> = report
        .jobs
        .iter()
        .map(|j| j.key.as_deref().unwrap())
        .collect();
    assert_eq!(keys, ["pkg-a", "pkg-b", "pkg-c"].into_iter().collect());
}
