//! `--lock-dir`: several lanes processes sharing one directory share their key lanes: per key
//! one job in flight across all of them, first come first served, under a shared cap, and a
//! key held for as long as its job lives, even after its lanes was SIGKILLed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::fleet::*;
use crate::support::*;

/// `lanes locks DIR`'s output.
fn locks(dir: &Path) -> String {
    let out = Command::new(BIN)
        .arg("locks")
        .arg(dir)
        .output()
        .expect("lanes locks");
    assert!(out.status.success(), "lanes locks failed: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A run of lanes sharing its keys through `dir`.
fn member(scratch: &Scratch, dir: &Path) -> Run {
    Run::new().scratch(scratch).arg("--lock-dir").arg(dir)
}

#[test]
fn two_and_three_processes_never_run_a_key_twice_at_once() {
    for processes in [2, 3] {
        let scratch = Scratch::new();
        let dir = scratch.join("locks");
        let keys = ["k0", "k1", "k2", "k3"];
        let jobs: String = rounds_of_marked_jobs(&keys)
            .into_iter()
            .map(|(key, command)| format!("{key}\t{command}\n"))
            .collect();
        let input = scratch.write("jobs.tsv", &jobs);
        let runs: Vec<Running> = (0..processes)
            .map(|_| member(&scratch, &dir).args(["-j", "4"]).arg(&input).spawn())
            .collect();
        let outputs: Vec<Output> = runs.into_iter().map(Running::wait).collect();
        check_all_ran_and_waited(&outputs, 20);
        for key in keys {
            assert_eq!(intervals(&scratch, key).len(), 5 * processes, "{key}");
            check_reports_never_overlap(&outputs, key);
        }
        assert_eq!(locks(&dir), "no key is held\n");
    }
    // `LANES_LOCK_DIR` names the directory to `lanes locks` too, as it does to a run.
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    member(&scratch, &dir)
        .arg("--")
        .arg("true")
        .stdin("k\n")
        .run()
        .code(0);
    let out = Command::new(BIN)
        .arg("locks")
        .env("LANES_LOCK_DIR", &dir)
        .env_remove("LANES_COORDINATE")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no key is held\n",
        "{out:?}"
    );
}

/// Process a holds key k (its job waits for the file `go`), then process b, given `waiter`'s
/// extra arguments, waits for k behind it. Returns (a, b, `rest.tsv`: a job file of key k).
fn k_held_and_waited_for(
    scratch: &Scratch,
    dir: &Path,
    waiter: &[&std::ffi::OsStr],
) -> (Running, Running, std::path::PathBuf) {
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let rest = scratch.write("rest.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        scratch,
        member(scratch, dir).arg(&first),
        "log.k",
        member(scratch, dir).arg(&rest).args(waiter),
        || locks(dir),
        "1 ahead",
    );
    (a, b, rest)
}

#[test]
fn jobs_ready_first_start_first_across_processes_and_locks_lists_the_line() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let events = scratch.join("b.events");
    let (a, b, rest) =
        k_held_and_waited_for(&scratch, &dir, &["--events".as_ref(), events.as_os_str()]);
    let c = member(&scratch, &dir).arg(&rest).spawn();
    wait_for_listing(|| locks(&dir), "2 ahead");
    let listing = locks(&dir);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(
        lines[0].starts_with(&format!("\"k\": held by pid {} (run ", a.pid())),
        "{listing}"
    );
    assert!(
        lines[1].starts_with(&format!("  waiting: pid {} (run ", b.pid())),
        "{listing}"
    );
    assert!(lines[1].ends_with(", 1 ahead"), "{listing}");
    assert!(
        lines[2].starts_with(&format!("  waiting: pid {} (run ", c.pid())),
        "{listing}"
    );
    let a_pid = u32::try_from(a.pid()).unwrap();
    scratch.write("go", "");
    let (a, b, c) = (a.wait(), b.wait(), c.wait());
    for output in [&a, &b, &c] {
        output.code(0);
    }
    assert_eq!(intervals(&scratch, "k").len(), 3);
    // The jobs of b and c started in the order they began to wait.
    let a_start = a.job(1).start_ms();
    let (b_start, c_start) = (b.job(1).start_ms(), c.job(1).start_ms());
    assert!(
        a_start <= b_start && b_start <= c_start,
        "{a_start} {b_start} {c_start}"
    );
    assert!(b.job(1).end_ms() <= c_start);
    // b's record and its queued event name the holder: a's lanes, and its run.
    let holder = b.job(1).lock_holder.clone().expect("b waited for a");
    assert_eq!(
        (holder.pid, holder.run.as_str()),
        (a_pid, a.report().run.started_at.as_str())
    );
    assert_eq!(
        u64::from(holder.pid),
        a.report().run.pid,
        "a's run record names it"
    );
    assert!(b.job(1).lock_wait_ms.is_some_and(|ms| ms > 0));
    let events = scratch.read("b.events");
    let queued = events
        .lines()
        .find(|line| line.contains("\"type\":\"queued\""))
        .expect("a queued event");
    assert!(
        queued.contains(&format!(
            "\"held_by\":{{\"pid\":{},\"run\":\"{}\"}}",
            holder.pid, holder.run
        )),
        "{queued}"
    );
}

/// A job stopped before it got its key (SIGTERM to its lanes) still names, in its record, the
/// process that held the key when it began to wait; it never started, so it has no lock wait.
#[test]
fn a_job_stopped_while_waiting_for_a_key_names_its_holder() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let (a, b, _) = k_held_and_waited_for(&scratch, &dir, &[]);
    let a_pid = u32::try_from(a.pid()).unwrap();
    b.signal(Signal::SIGTERM);
    let b = b.wait();
    b.code(143);
    scratch.write("go", "");
    let a = a.wait();
    a.code(0);
    let job = b.job(1);
    assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    assert!(!job.started);
    let holder = job.lock_holder.clone().expect("the holder is named");
    assert_eq!(
        (holder.pid, holder.run.as_str()),
        (a_pid, a.report().run.started_at.as_str())
    );
    assert_eq!(job.lock_wait_ms, None);
}

#[test]
fn the_shared_cap_holds_across_processes() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let runs: Vec<Running> = counting_job_files(&scratch, 3)
        .into_iter()
        .map(|input| {
            member(&scratch, &dir)
                .args(["-j", "3", "--shared-max-concurrent", "2"])
                .arg(input)
                .spawn()
        })
        .collect();
    for run in runs {
        run.wait().code(0);
    }
    check_counts_under_a_cap_of_two(&scratch);
    assert!(locks(&dir).ends_with("shared slots: 0 of 2 held\n"));
}

/// A lanes that let a key go leaves its line in the lock file marked so: a program other than
/// lanes that takes the lock afterwards (an outside `flock`) is not shown as that lanes.
#[test]
fn a_key_an_outside_flock_holds_after_lanes_let_it_go_names_no_lanes_as_its_holder() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    member(&scratch, &dir).stdin("k\ttrue\n").run().code(0);
    let lock_files: Vec<_> = std::fs::read_dir(dir.join("keys"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lock"))
        .collect();
    assert_eq!(lock_files.len(), 1, "{lock_files:?}");
    let mut outside = Command::new("flock")
        .arg(&lock_files[0])
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1)");
    assert!(wait_until(Duration::from_secs(10), || locks(&dir)
        != "no key is held\n"));
    let listed = locks(&dir);
    outside.kill().unwrap();
    outside.wait().unwrap();
    assert!(
        listed.contains("\"k\": held, but not by a lanes: the last one to hold it, pid ")
            && listed.contains("let it go"),
        "{listed}"
    );
    assert!(!listed.contains("which has exited"), "{listed}");
}

#[test]
fn a_key_stays_held_by_the_orphaned_job_of_a_killed_lanes() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let first = scratch.write("first.tsv", orphan_job("k"));
    let second = scratch.write("second.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        member(&scratch, &dir)
            .args(["--containment", "process-group"])
            .arg(&first),
        "orphan.pid",
        member(&scratch, &dir).arg(&second),
        || locks(&dir),
        "1 ahead",
    );
    let orphan = scratch.pid("orphan.pid");
    a.signal(Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(10), || !alive(a.pid())));
    assert!(alive(orphan), "the job outlives its lanes");
    // The orphan still holds the key: b's job does not start.
    assert!(!wait_until(Duration::from_millis(500), || scratch
        .lines("log.k")
        .len()
        > 1));
    let listed = locks(&dir);
    assert!(listed.contains("1 ahead"), "{listed}");
    assert!(
        listed.contains(&format!("held by pid {} (run ", a.pid()))
            && listed.contains("which has exited: a process it left holds the key"),
        "{listed}"
    );
    scratch.write("go", "");
    let b = b.wait();
    b.code(0);
    assert!(
        wait_until(Duration::from_secs(5), || !alive(orphan)),
        "the orphan ended"
    );
    let spans = intervals(&scratch, "k");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0].pid, orphan.to_string());
    drop(a);
    assert_eq!(locks(&dir), "no key is held\n");
}

#[test]
fn an_unusable_lock_dir_is_refused_before_anything_runs() {
    let scratch = Scratch::new();
    let file = scratch.write("not-a-dir", "");
    let jobs = scratch.write("jobs.tsv", "k\ttouch \"$D/ran\"\n");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--lock-dir")
        .arg(&file)
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains(&format!("--lock-dir {}: not a directory", file.display())),
        "{}",
        out.stderr()
    );
    assert!(!scratch.exists("ran"));
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--shared-max-concurrent", "2"])
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("add --lock-dir DIR"),
        "{}",
        out.stderr()
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--backend", "slurm", "--lock-dir"])
        .arg(scratch.join("locks"))
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(out.stderr().contains("cluster-wide"), "{}", out.stderr());
    assert!(!scratch.exists("ran"));
}

#[test]
fn a_missing_lock_dir_is_created_from_the_environment_or_the_manifest() {
    let scratch = Scratch::new();
    let jobs = scratch.write(
        "jobs.tsv",
        "k\techo \"$LANES_LOCK_FD\" > \"$D/fd\"\nno tab here\n",
    );
    let from_env = scratch.join("a/b/locks");
    let out = Run::new()
        .scratch(&scratch)
        .env("LANES_LOCK_DIR", &from_env)
        .arg(&jobs)
        .run();
    out.code(1);
    // Every record of the run has the lock fields, an invalid line's too.
    let text = out.report_text.as_deref().expect("a report");
    for line in text.lines().filter(|l| l.contains("\"type\":\"job\"")) {
        assert!(line.contains("\"lock_wait_ms\":"), "{line}");
        assert!(line.contains("\"lock_holder\":null"), "{line}");
    }
    assert!(from_env.join("keys").is_dir());
    assert_eq!(scratch.read("fd").trim(), "3");
    let manifest = scratch.write(
        "m/run.toml",
        "lock_dir = \"locks\"\nshared_max_concurrent = 1\n[[job]]\nkey = \"k\"\n\
         cmd = \"echo $LANES_SLOT_LOCK_FD > \\\"$D/slot-fd\\\"\"\n",
    );
    let out = Run::new().scratch(&scratch).arg(&manifest).run();
    out.code(0);
    assert!(scratch.join("m/locks/slots/0.lock").is_file());
    assert_eq!(scratch.read("slot-fd").trim(), "4");
    assert_eq!(out.job(1).lock_wait_ms.map(|_| ()), Some(()));
}

#[test]
fn a_lock_dir_the_user_cannot_write_is_refused() {
    // Root writes anywhere: the run drops to user nobody (setpriv), where that is possible.
    let root = nix::unistd::Uid::effective().is_root();
    let setpriv = Path::new("/usr/bin/setpriv").exists();
    if !root || !setpriv {
        eprintln!("skipped: needs root and /usr/bin/setpriv to run lanes as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = scratch.mkdir("locks");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let jobs = scratch.write("jobs.tsv", "k\ttouch \"$D/ran\"\n");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$0\" \"$@\"")
        .args(["--containment", "process-group", "--lock-dir"])
        .arg(&dir)
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains(&format!("--lock-dir {}: ", dir.display()))
            && out.stderr().contains("Permission denied"),
        "{}",
        out.stderr()
    );
    assert!(!scratch.exists("ran"));
}

#[test]
fn users_sharing_a_lock_dir_use_each_others_keys() {
    // Root runs first and creates the key's files; then user nobody runs a job of the same key
    // (and a new key) in the same world-writable DIR: it must run, not retry for ever.
    let root = nix::unistd::Uid::effective().is_root();
    let setpriv = Path::new("/usr/bin/setpriv").exists();
    if !root || !setpriv {
        eprintln!("skipped: needs root and /usr/bin/setpriv to run lanes as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = scratch.mkdir("locks");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let first = Run::new()
        .scratch(&scratch)
        .args(["--containment", "process-group", "--lock-dir"])
        .arg(&dir)
        .stdin("k\ttrue\n")
        .run();
    first.code(0);
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$0\" \"$@\"")
        .args([
            "--containment",
            "process-group",
            "--timeout",
            "10",
            "--lock-dir",
        ])
        .arg(&dir)
        .stdin("k\ttouch \"$D/k-ran\"\nnew\ttouch \"$D/new-ran\"\n")
        .run();
    out.code(0);
    assert!(
        scratch.exists("k-ran") && scratch.exists("new-ran"),
        "{}",
        out.dump()
    );
    assert!(!out.stderr().contains("trying again"), "{}", out.dump());
}

/// `--lock-dir` and `--coordinate` given at different levels: the flag wins over the variable
/// (as each does alone); at one level they are a usage error.
#[test]
fn a_lock_dir_flag_wins_over_a_coordinate_variable_and_the_other_way_round() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let nowhere = format!(
        "postgres://nobody@/db?host={}",
        scratch.join("no-server").display()
    );
    let ran = member(&scratch, &dir)
        .env("LANES_COORDINATE", &nowhere)
        .stdin("k\ttrue\n")
        .run();
    ran.code(0);
    assert!(dir.join("keys").exists(), "the lock directory was used");
    let refused = Run::new()
        .scratch(&scratch)
        .env("LANES_LOCK_DIR", &dir)
        .args(["--coordinate", &nowhere])
        .stdin("k\ttrue\n")
        .run();
    refused.code(2);
    assert!(
        refused.stderr().contains("no-server"),
        "the database was used: {}",
        refused.stderr()
    );
    let both = member(&scratch, &dir)
        .args(["--coordinate", &nowhere])
        .stdin("k\ttrue\n")
        .run();
    both.code(2);
    assert!(
        both.stderr().contains("cannot be used with"),
        "{}",
        both.stderr()
    );
}

#[test]
fn a_job_stopped_while_waiting_only_for_a_shared_slot_names_no_holder() {
    // a holds the one shared slot; b's key is free, so b holds it and waits for the slot
    // alone: stopped, its record names no holder of its key (least of all its own lanes).
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let first = scratch.write("first.tsv", marked_job("a", &await_file("go")));
    let second = scratch.write("second.tsv", marked_job("b", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        member(&scratch, &dir)
            .args(["--shared-max-concurrent", "1"])
            .arg(&first),
        "log.a",
        member(&scratch, &dir)
            .args(["--shared-max-concurrent", "1"])
            .arg(&second),
        || locks(&dir),
        "\"b\"",
    );
    // Give b's lanes the moment it takes to hold its free key while it waits for the slot.
    assert!(
        wait_until(Duration::from_secs(10), || {
            locks(&dir).contains("\"b\": held")
        }),
        "{}",
        locks(&dir)
    );
    // The listing tells the key whose job runs from the one held while it waits.
    let listing = locks(&dir);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(
        lines[0].starts_with(&format!("\"a\": held by pid {} (run ", a.pid()))
            && lines[0].ends_with(')'),
        "{listing}"
    );
    assert!(
        lines[1].starts_with(&format!("\"b\": held by pid {} (run ", b.pid()))
            && lines[1].ends_with("), its job waiting for a shared slot"),
        "{listing}"
    );
    assert_eq!(lines[2], "shared slots: 1 of 1 held", "{listing}");
    b.signal(Signal::SIGTERM);
    let b = b.wait();
    b.code(143);
    scratch.write("go", "");
    a.wait().code(0);
    let job = b.job(1);
    assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    assert_eq!(job.lock_holder, None, "{job:?}");
}

/// A key held by a lanes that takes no shared slot is listed as held, whatever slot files an
/// earlier run with `--shared-max-concurrent` left in DIR: its job does not wait for one.
#[test]
fn a_holder_without_shared_slots_is_not_said_to_wait_for_one() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    // An earlier run that took shared slots leaves their files.
    member(&scratch, &dir)
        .no_report()
        .args(["--shared-max-concurrent", "2"])
        .stdin("x\ttrue\n")
        .run()
        .code(0);
    let running = member(&scratch, &dir)
        .stdin(format!("a\ttouch \"$D/up\"; {}\n", await_file("go")))
        .spawn();
    scratch.wait_for("up", Duration::from_secs(10));
    let listing = locks(&dir);
    let first = listing.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("\"a\": held by pid {} (run ", running.pid()))
            && first.ends_with(')'),
        "{listing}"
    );
    scratch.write("go", "");
    running.wait().code(0);
}

/// `locks` in `scratch`, made by a run that held a key in it.
fn lock_dir_made(scratch: &Scratch) -> std::path::PathBuf {
    let dir = scratch.join("locks");
    Run::new()
        .no_report()
        .arg("--lock-dir")
        .arg(&dir)
        .stdin("other\ttrue\n")
        .run()
        .code(0);
    dir
}

/// `DIR/keys/<sha256(key) in hex>`, the stem of a key's lock file and ticket directory.
fn key_stem(dir: &Path, key: &str) -> std::path::PathBuf {
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join("keys").join(hex)
}

#[test]
fn a_link_planted_in_a_shared_lock_directory_is_never_followed() {
    planted_lock_file_is_never_written(
        |victim, at| std::os::unix::fs::symlink(victim, at),
        "symbolic link",
    );
}

#[test]
fn a_hard_link_planted_in_a_shared_lock_directory_is_never_written() {
    planted_lock_file_is_never_written(|victim, at| std::fs::hard_link(victim, at), "hard links");
}

/// Another user of a shared lock directory makes key k's lock file a link (by `plant`) to a
/// file of ours outside it: lanes says `said` and waits, and the file is left as it was.
fn planted_lock_file_is_never_written(
    plant: impl Fn(&Path, &Path) -> std::io::Result<()>,
    said_of_it: &str,
) {
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    let scratch = Scratch::new();
    let dir = lock_dir_made(&scratch);
    let victim = scratch.write("victim", "secret\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    plant(&victim, &key_stem(&dir, "k").with_extension("lock")).unwrap();
    let mut lanes = Spawned::start(
        Command::new(BIN)
            .arg("--lock-dir")
            .arg(&dir)
            .args(["--output", "none"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    {
        use std::io::Write as _;
        let mut stdin = lanes.stdin.take().unwrap();
        stdin.write_all(b"k\techo ran\n").unwrap();
    }
    // lanes says why it cannot take the key, and waits.
    let mut said = String::new();
    for line in std::io::BufReader::new(lanes.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains(said_of_it) {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(lanes.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = lanes.wait().unwrap();
    assert!(said.contains(said_of_it), "{said}");
    assert_eq!(status.code(), Some(143), "{said}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "the file the link points at was re-permissioned"
    );
}

#[test]
fn a_directory_named_like_a_ticket_in_a_keys_line_blocks_nobody() {
    let scratch = Scratch::new();
    let dir = lock_dir_made(&scratch);
    std::fs::create_dir_all(
        key_stem(&dir, "k")
            .with_extension("q")
            .join("00000000000000000000-0000000001-0000000000"),
    )
    .unwrap();
    // A holder and a waiter behind it: the junk is nobody's ticket.
    let holder = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--lock-dir")
        .arg(&dir)
        .stdin("k\ttouch \"$D/held\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done\n")
        .spawn();
    scratch.wait_for("held", Duration::from_secs(10));
    let waiter = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--lock-dir")
        .arg(&dir)
        .stdin("k\ttouch \"$D/second\"\n")
        .spawn();
    scratch.write("go", "");
    holder.wait().code(0);
    waiter.wait().code(0);
    assert!(scratch.exists("second"));
}

#[test]
fn a_lock_dir_given_over_a_fleet_manifest_runs_it_whatever_namespace_the_manifest_names() {
    let scratch = Scratch::new();
    let manifest = scratch.write(
        "fleet.toml",
        "coordinate = \"postgres://nobody@/nowhere?host=/nonexistent\"\n\
         namespace = \"deploys\"\n\
         [[job]]\nkey = \"k\"\ncmd = \"echo \\\"$LANES_LOCK_FD\\\" > \\\"$D/fd\\\"\"\n",
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--lock-dir")
        .arg(scratch.join("locks"))
        .arg(&manifest)
        .run();
    out.code(0);
    assert_eq!(scratch.read("fd").trim(), "3", "{}", out.dump());
}

#[test]
fn lanes_serve_refuses_a_lock_dir_from_the_environment_as_from_the_flag() {
    let scratch = Scratch::new();
    let out = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(scratch.join("s.sock"))
        .env("LANES_LOCK_DIR", scratch.join("locks"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--lock-dir (or LANES_LOCK_DIR) does not go with `lanes serve`"),
        "{out:?}"
    );
    assert!(!scratch.exists("s.sock"));
    // Nor does the hint of a shared cap without a place to share it name the lock directory.
    let out = Command::new(BIN)
        .args(["serve", "--shared-max-concurrent", "2", "--socket"])
        .arg(scratch.join("s.sock"))
        .env_remove("LANES_LOCK_DIR")
        .env_remove("LANES_COORDINATE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("`lanes serve` shares its keys with no other process"),
        "{said}"
    );
    assert!(!said.contains("add --"), "{said}");
    // Nor does it take LANES_COORDINATE (refused as --coordinate is); empty, it asks for
    // nothing.
    let out = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(scratch.join("s.sock"))
        .env_remove("LANES_LOCK_DIR")
        .env("LANES_COORDINATE", "postgres://nobody@/nowhere")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--coordinate (or LANES_COORDINATE) does not go with `lanes serve`"),
        "{out:?}"
    );
    assert!(!scratch.exists("s.sock"));
    let socket = scratch.join("empty.sock");
    let mut server = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&socket)
        .env_remove("LANES_LOCK_DIR")
        .env("LANES_COORDINATE", "")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || socket.exists()),
        "the server did not start"
    );
    let closed = Command::new(BIN)
        .args(["close", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(closed.status.code(), Some(0), "{closed:?}");
    assert_eq!(server.wait().unwrap().code(), Some(0));
    assert!(!scratch.exists("s.sock"));
}

#[test]
fn keys_swapped_for_a_link_while_lanes_runs_is_not_followed() {
    use std::io::{BufRead as _, Write as _};
    let scratch = Scratch::new();
    let dir = lock_dir_made(&scratch);
    let outside = scratch.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mut lanes = Spawned::start(
        Command::new(BIN)
            .arg("--lock-dir")
            .arg(&dir)
            .args(["--output", "none"])
            .env("D", scratch.path())
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    let mut stdin = lanes.stdin.take().unwrap();
    stdin.write_all(b"a\ttouch \"$D/a-ran\"\n").unwrap();
    stdin.flush().unwrap();
    scratch.wait_for("a-ran", Duration::from_secs(10));
    // Another user of the directory swaps keys/ for a link to a directory outside it.
    std::fs::rename(dir.join("keys"), dir.join("keys.old")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("keys")).unwrap();
    stdin.write_all(b"b\ttouch \"$D/b-ran\"\n").unwrap();
    stdin.flush().unwrap();
    // What lanes says, read on a thread: a lanes that never says it is stopped all the same.
    let stderr = lanes.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = String::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(20)) {
        said.push_str(&line);
        said.push('\n');
        if line.contains("symbolic link") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(lanes.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    drop(stdin);
    lanes.wait().unwrap();
    assert!(said.contains("keys is a symbolic link"), "{said}");
    let made: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert!(made.is_empty(), "lanes made files outside DIR: {made:?}");
    assert!(!scratch.exists("b-ran"));
}

#[test]
fn a_job_that_writes_to_its_descriptor_3_cannot_hide_who_holds_its_key() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let run = member(&scratch, &dir)
        .stdin(format!(
            "k\tif echo junk >&3; then touch \"$D/written\"; fi 2>/dev/null; \
             touch \"$D/tried\"; {}\n",
            await_file("go")
        ))
        .spawn();
    scratch.wait_for("tried", Duration::from_secs(10));
    assert!(
        !scratch.exists("written"),
        "the key's lock is read-only to its job"
    );
    let listing = locks(&dir);
    assert!(
        listing.starts_with(&format!("\"k\": held by pid {} (run ", run.pid())),
        "{listing}"
    );
    scratch.write("go", "");
    run.wait().code(0);
    assert_eq!(locks(&dir), "no key is held\n");
}

#[test]
fn a_lock_file_of_any_size_is_read_in_bounded_memory() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    member(&scratch, &dir).stdin("k\ttrue\n").run().code(0);
    let lock = std::fs::read_dir(dir.join("keys"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "lock"))
        .expect("the key's lock file");
    // 512 MiB of zeros without a newline (sparse: no disk), held as another process would.
    std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(&lock)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    let mut holder = Spawned::start(
        Command::new("flock")
            .arg(&lock)
            .args(["sh", "-c"])
            .arg(format!("touch \"$D/held\"; {}", await_file("go")))
            .env("D", scratch.path()),
    );
    scratch.wait_for("held", Duration::from_secs(10));
    // Under a 256 MiB address space, reading the whole line would fail.
    let out = Command::new("prlimit")
        .arg("--as=268435456")
        .arg(BIN)
        .arg("locks")
        .arg(&dir)
        .output()
        .unwrap();
    scratch.write("go", "");
    let _ = holder.wait();
    assert!(out.status.success(), "{out:?}");
    // The line is no holder's: who holds the key is not known, but that it is held is.
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.starts_with("the key of ")
            && listing.contains(": held by a process that did not write who it is"),
        "{listing}"
    );
}

#[test]
fn under_a_small_descriptor_limit_key_requests_leave_the_jobs_theirs() {
    // At `ulimit -n 40`, the requests of -j 8 + 16 keys would hold every descriptor, and jobs
    // failed to start for want of one that no running job would give back.
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let jobs: String = (0..200).map(|i| format!("k{i}\tsleep 0.01\n")).collect();
    let input = scratch.write("jobs.tsv", jobs);
    let out = member(&scratch, &dir)
        .wrapper("ulimit -n 40")
        .args(["-j", "8", "--output", "none"])
        .arg(&input)
        .run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.summary.succeeded, 200, "{}", out.dump());
    let said = out.stderr();
    assert!(
        said.matches("Too many open files").count() <= 1,
        "a shortage of descriptors is said once for all keys\n{said}"
    );
}

#[test]
fn a_job_that_supersedes_one_waiting_for_its_key_waited_for_it_no_longer_than_it_waited() {
    use std::io::Write as _;
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let holder = member(&scratch, &dir)
        .stdin(format!("k\ttouch \"$D/held\"; {}\n", await_file("go")))
        .spawn();
    scratch.wait_for("held", Duration::from_secs(10));
    let report = scratch.join("waiter.jsonl");
    let mut waiter = member(&scratch, &dir)
        .no_report()
        .arg("--report")
        .arg(&report)
        .args(["--coalesce", "latest"])
        .stdin_piped()
        .spawn();
    waiter.stdin().write_all(b"k\techo first\n").unwrap();
    wait_for_listing(|| locks(&dir), "1 ahead");
    // The newer job comes a while after its lanes asked for the key.
    std::thread::sleep(Duration::from_millis(400));
    waiter.stdin().write_all(b"k\techo second\n").unwrap();
    waiter.close_stdin();
    wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&report).is_ok_and(|text| text.contains("\"superseded_by\":2"))
    });
    scratch.write("go", "");
    holder.wait().code(0);
    waiter.wait();
    // Read as plain JSON: the report has the --lock-dir fields.
    let records = crate::records::events(&report);
    let second = records
        .iter()
        .find(|r| r["type"] == "job" && r["seq"] == 2)
        .expect("job 2");
    assert_eq!(second["outcome"], "succeeded", "{second}");
    let (lock_wait, wait) = (
        second["lock_wait_ms"].as_u64().unwrap(),
        second["wait_ms"].as_u64().unwrap(),
    );
    assert!(
        lock_wait <= wait,
        "waited {lock_wait} ms for its key of {wait} ms\n{second}"
    );
}

#[test]
fn a_key_held_by_its_own_lanes_is_held_by_no_other_process() {
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let events = scratch.join("events.jsonl");
    member(&scratch, &dir)
        .arg("--events")
        .arg(&events)
        .stdin("a\tsleep 0.2\na\tsleep 0.2\n")
        .run()
        .code(0);
    let queued: Vec<serde_json::Value> = crate::records::events(&events)
        .into_iter()
        .filter(|e| e["type"] == "queued")
        .collect();
    assert_eq!(queued.len(), 2);
    // Job 2 waits behind job 1 of its own lanes, which holds the key: no other holder.
    assert!(
        queued
            .iter()
            .all(|e| e.get("held_by").is_none_or(|h| h.is_null())),
        "{queued:?}"
    );
}

/// Two lanes, each the first process of a PID namespace of its own (pid 1 in both), sharing a
/// lock directory: the one that waits names the other as the key's holder (the same pid is
/// not itself), and `lanes locks`, outside both, says whose namespace the pids are numbers in.
#[test]
fn lanes_of_two_pid_namespaces_with_the_same_pid_tell_each_other_apart() {
    if !pid_namespaces("lanes_of_two_pid_namespaces_with_the_same_pid_tell_each_other_apart") {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let rest = scratch.write("rest.tsv", marked_job("k", ""));
    let events = scratch.join("b.events");
    let (a, b) = hold_then_queue(
        &scratch,
        member(&scratch, &dir)
            .wrapper(IN_A_PID_NAMESPACE)
            .arg(&first),
        "log.k",
        member(&scratch, &dir)
            .wrapper(IN_A_PID_NAMESPACE)
            .arg(&rest)
            .arg("--events")
            .arg(&events),
        || locks(&dir),
        "1 ahead",
    );
    let listing = locks(&dir);
    assert!(
        listing.starts_with("\"k\": held by pid 1 of another PID namespace (run ")
            && listing.contains("\n  waiting: pid 1 of another PID namespace (run "),
        "{listing}"
    );
    scratch.write("go", "");
    let (a, b) = (a.wait(), b.wait());
    a.code(0);
    b.code(0);
    assert_eq!((a.report().run.pid, b.report().run.pid), (1, 1));
    assert_eq!(intervals(&scratch, "k").len(), 2);
    let holder = b.job(1).lock_holder.clone().expect("b waited for a");
    assert_eq!(
        (holder.pid, holder.run.as_str()),
        (1, a.report().run.started_at.as_str())
    );
    let queued = scratch.read("b.events");
    assert!(
        queued.contains(&format!(
            "\"held_by\":{{\"pid\":1,\"run\":\"{}\"}}",
            holder.run
        )),
        "{queued}"
    );
}

/// `lanes locks` run in a PID namespace of its own does not take the holder, a lanes of the
/// host's namespace that it cannot see, for one that has exited.
#[test]
fn a_holder_of_another_pid_namespace_is_not_said_to_have_exited() {
    if !pid_namespaces("a_holder_of_another_pid_namespace_is_not_said_to_have_exited") {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let a = member(&scratch, &dir).arg(&first).spawn();
    let a_pid = a.pid();
    scratch.wait_for("log.k", Duration::from_secs(10));
    let inside = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            BIN,
            "locks",
        ])
        .arg(&dir)
        .output()
        .expect("lanes locks in a PID namespace");
    scratch.write("go", "");
    a.wait().code(0);
    assert!(inside.status.success(), "{inside:?}");
    let listing = String::from_utf8(inside.stdout).unwrap();
    assert!(
        listing.starts_with(&format!(
            "\"k\": held by pid {a_pid} of another PID namespace (run "
        )) && !listing.contains("exited"),
        "{listing}"
    );
}

/// Named resources are per process, keys are shared: a run given both says so, as the
/// README does (two pipelines each given `--resource gpu=0,1` handed GPU 0 to a job each).
#[test]
fn resources_beside_a_lock_dir_are_said_to_be_this_process_s_own() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--lock-dir"])
        .arg(scratch.join("locks"))
        .args(["--resource", "gpu=0,1", "--needs", "gpu=1"])
        .stdin("a\ttrue\n")
        .run();
    out.code(0);
    assert!(
        out.stderr()
            .contains("named resources are handed out by this lanes alone"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["--lock-dir"])
        .arg(scratch.join("locks"))
        .stdin("a\ttrue\n")
        .run();
    out.code(0);
    assert!(!out.stderr().contains("named resources"), "{}", out.dump());
}

#[test]
fn an_empty_variable_is_refused_where_it_would_be_taken_and_an_unusable_one_is_named() {
    // `LANES_LOCK_DIR=$LOCKS lanes …` with LOCKS unset: a run meant to share its keys must not
    // run alone without a word.
    let scratch = Scratch::new();
    for name in ["LANES_LOCK_DIR", "LANES_COORDINATE"] {
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .env(name, "")
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        out.code(2);
        assert!(
            out.stderr().contains(&format!("{name} is set but empty")),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"));
    }
    // A flag given wins over an empty variable, either one, as over a set one.
    let locks = scratch.join("locks");
    for empty in ["LANES_LOCK_DIR", "LANES_COORDINATE"] {
        let out = Run::new()
            .scratch(&scratch)
            .env(empty, "")
            .arg("--lock-dir")
            .arg(&locks)
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        out.code(0);
        assert!(scratch.exists("ran") && locks.join("keys").is_dir());
        std::fs::remove_file(scratch.join("ran")).unwrap();
    }
    // `lanes locks` says why it found no directory.
    let out = Command::new(BIN)
        .arg("locks")
        .env("LANES_LOCK_DIR", "")
        .env_remove("LANES_COORDINATE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("LANES_LOCK_DIR is set but empty"),
        "{out:?}"
    );
    // A directory from the variable that cannot be used is said to come from it.
    let file = scratch.write("a-file", "");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .env("LANES_LOCK_DIR", &file)
        .stdin("k\ttrue\n")
        .run();
    out.code(2);
    assert!(
        out.stderr().contains(&format!(
            "LANES_LOCK_DIR {}: not a directory",
            file.display()
        )),
        "{}",
        out.dump()
    );
}

/// A database's connection string given as the lock directory (`--coordinate` meant) is
/// refused, without quoting it (it may hold a password): made as a directory it would have
/// written the password to disk and shared no key with another host.
#[test]
fn a_database_url_given_as_the_lock_directory_is_refused_unquoted() {
    let scratch = Scratch::new();
    for (flag, env) in [
        (Some("postgres://u:Secret9pw@localhost/db"), None),
        (None, Some("POSTGRESQL://u:Secret9pw@localhost/db")),
        (Some("host=localhost user=u password=Secret9pw"), None),
    ] {
        let mut run = Run::new().no_report().cwd(scratch.path());
        if let Some(url) = flag {
            run = run.args(["--lock-dir", url]);
        }
        if let Some(url) = env {
            run = run.env("LANES_LOCK_DIR", url);
        }
        let out = run.stdin("k\ttrue\n").run();
        out.code(2);
        let stderr = out.stderr();
        assert!(!stderr.contains("Secret9pw"), "{stderr}");
        assert!(
            stderr.contains("is a database's connection string, not a directory"),
            "{stderr}"
        );
    }
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "nothing was made"
    );
}
