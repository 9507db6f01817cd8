//! `--coordinate`: lanes processes acting as the hosts of a fleet share their key lanes
//! through a real PostgreSQL server, which each test starts itself (`initdb`, `pg_ctl`) on a
//! Unix socket in a temporary directory, without TCP, and stops by the pid in
//! `postmaster.pid`. Without PostgreSQL the tests say that they skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::fleet::*;
use crate::support::*;

/// A PostgreSQL server of one test, stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pid: i32,
}

/// Where `initdb` and `pg_ctl` are: on `PATH`, else Debian's `/usr/lib/postgresql/*/bin`.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        versions.sort();
        versions.pop()
    })
}

/// `command` as the `postgres` user when running as root (the server refuses root).
fn as_server_user(program: &Path) -> Command {
    if nix::unistd::geteuid().is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// A new server, or `None` (said on stderr) when PostgreSQL is not installed.
    fn start(test: &str) -> Option<Postgres> {
        let Some(bin) = postgres_bin() else {
            eprintln!("{test}: skipped: PostgreSQL (initdb, pg_ctl) is not installed");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("lanes-pg-")
            .tempdir()
            .expect("temporary directory");
        if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("a postgres user");
            nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
        }
        let data = dir.path().join("data");
        let init = as_server_user(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .output()
            .expect("initdb");
        assert!(init.status.success(), "initdb: {init:?}");
        let mut pg = Postgres { dir, bin, pid: 0 };
        pg.pg_ctl_start();
        Some(pg)
    }

    /// Starts the server on its data directory (`pg_ctl start`, waiting until it takes
    /// connections), listening on a socket in its directory only; `pid` is its postmaster's.
    fn pg_ctl_start(&mut self) {
        let data = self.dir.path().join("data");
        let options = format!(
            "-k {} -c listen_addresses='' -c max_connections=200 -c fsync=off",
            self.dir.path().display()
        );
        let started = as_server_user(&self.bin.join("pg_ctl"))
            .args(["-w", "-D"])
            .arg(&data)
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .arg("start")
            .output()
            .expect("pg_ctl");
        assert!(started.status.success(), "pg_ctl start: {started:?}");
        let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
        self.pid = pid_file.lines().next().unwrap().trim().parse().unwrap();
    }

    /// Stops the server (its fast shutdown: every session ended), waiting until it is gone.
    fn stop(&mut self) {
        let stopped = as_server_user(&self.bin.join("pg_ctl"))
            .args(["-w", "-m", "fast", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .output()
            .expect("pg_ctl");
        assert!(stopped.status.success(), "pg_ctl stop: {stopped:?}");
    }

    /// The URL lanes is given: the superuser over the socket, trusted.
    fn url(&self) -> String {
        format!(
            "postgres://postgres@/postgres?host={}",
            self.dir.path().display()
        )
    }

    /// The server as lanes names it in messages: its socket, no password.
    fn shown(&self) -> String {
        format!(
            "postgres://postgres@[{}]/postgres",
            self.dir.path().join(".s.PGSQL.5432").display()
        )
    }

    /// Runs `sql` with `psql`; returns its unaligned output.
    fn psql(&self, sql: &str) -> String {
        let psql = [self.bin.join("psql"), PathBuf::from("psql")]
            .into_iter()
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("psql"));
        let out = Command::new(psql)
            .args(["-X", "-q", "-A", "-t", "-d"])
            .arg(self.url())
            .args(["-c", sql])
            .output()
            .expect("psql");
        assert!(out.status.success(), "psql {sql}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// A run of lanes on `scratch` acting as host `host` of the fleet this server coordinates.
    fn host(&self, scratch: &Scratch, host: &str) -> Run {
        Run::new()
            .scratch(scratch)
            .args(["--host-id", host, "--coordinate", &self.url()])
    }

    /// Ends the database session holding `key` (`pg_terminate_backend`), as a lost connection
    /// would; fails unless one was ended.
    fn terminate_holder(&self, key: &str) {
        assert_eq!(
            self.psql(&format!(
                "SELECT pg_terminate_backend(backend_pid) FROM lanes_holds WHERE key = '{key}'"
            )),
            "t\n"
        );
    }

    /// `lanes locks --coordinate`'s output.
    fn locks(&self) -> String {
        let out = Command::new(BIN)
            .args(["locks", "--coordinate", &self.url()])
            .output()
            .expect("lanes locks");
        assert!(out.status.success(), "lanes locks failed: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: the server's fast shutdown.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGINT);
        if !wait_until(Duration::from_secs(30), || !alive(self.pid)) {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn three_hosts_never_run_a_key_twice_at_once_and_migrate_once() {
    let Some(pg) = Postgres::start("three_hosts_never_run_a_key_twice_at_once") else {
        return;
    };
    let scratch = Scratch::new();
    let keys = ["k0", "k1", "k2", "k3"];
    let mut jobs = String::new();
    let mut manifest = format!("coordinate = {:?}\n", pg.url());
    for (key, command) in rounds_of_marked_jobs(&keys) {
        jobs.push_str(&format!("{key}\t{command}\n"));
        manifest.push_str(&format!("[[job]]\nkey = {key:?}\ncmd = {command:?}\n"));
    }
    let input = scratch.write("jobs.tsv", &jobs);
    let manifest = scratch.write("jobs.toml", &manifest);
    // Three hosts, started at once on a database without tables: one by the flag, one by the
    // environment, one by its manifest.
    let runs = vec![
        pg.host(&scratch, "h0")
            .args(["-j", "4", "--coordinate-records"])
            .arg(&input)
            .spawn(),
        Run::new()
            .scratch(&scratch)
            .env("LANES_COORDINATE", pg.url())
            .args(["-j", "4", "--host-id", "h1"])
            .arg(&input)
            .spawn(),
        Run::new()
            .scratch(&scratch)
            .args(["-j", "4", "--host-id", "h2"])
            .arg(&manifest)
            .spawn(),
    ];
    let outputs: Vec<Output> = runs.into_iter().map(Running::wait).collect();
    check_all_ran_and_waited(&outputs, 20);
    for key in keys {
        assert_eq!(intervals(&scratch, key).len(), 15, "{key}");
        check_reports_never_overlap(&outputs, key);
    }
    // Each version applied once, though three hosts started at once.
    assert_eq!(
        pg.psql("SELECT count(*), max(version) FROM lanes_schema"),
        "5|5\n"
    );
    // h0's records are in the fleet's table too, as in its report.
    assert_eq!(
        pg.psql(
            "SELECT host, count(*), count(*) FILTER (WHERE outcome = 'succeeded'), \
             count(DISTINCT seq) FROM lanes_records GROUP BY host"
        ),
        "h0|20|20|20\n"
    );
    let run = &outputs[0].report().run.started_at;
    let first = outputs[0].job(1);
    assert_eq!(
        pg.psql(&format!(
            "SELECT record->>'command', record->>'started_at' FROM lanes_records \
             WHERE run = '{run}' AND seq = 1"
        )),
        format!(
            "{}|{}\n",
            first.command.as_deref().unwrap(),
            first.started_at.as_deref().unwrap()
        )
    );
    assert_eq!(pg.locks(), "no key is held\n");
    // The database named by the environment.
    let listing = Command::new(BIN)
        .arg("locks")
        .env("LANES_COORDINATE", pg.url())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&listing.stdout), "no key is held\n");
    assert_eq!(
        pg.psql("SELECT count(*) FROM lanes_holds"),
        "0\n",
        "every key let go"
    );
}

#[test]
fn jobs_ready_first_start_first_across_hosts_and_locks_lists_the_line() {
    let Some(pg) = Postgres::start("jobs_ready_first_start_first_across_hosts") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let rest = scratch.write("rest.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha").arg(&first),
        "log.k",
        pg.host(&scratch, "hb").arg(&rest),
        || pg.locks(),
        "1 ahead",
    );
    let c = pg.host(&scratch, "hc").arg(&rest).spawn();
    wait_for_listing(|| pg.locks(), "2 ahead");
    let listing = pg.locks();
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(
        lines[0].starts_with(&format!("\"k\": held by host ha pid {} (run ", a.pid())),
        "{listing}"
    );
    assert!(lines[0].ends_with(", seq 1)"), "{listing}");
    assert!(
        lines[1].starts_with(&format!("  waiting: host hb pid {} (run ", b.pid())),
        "{listing}"
    );
    assert!(lines[1].ends_with(", 1 ahead"), "{listing}");
    assert!(
        lines[2].starts_with(&format!("  waiting: host hc pid {} (run ", c.pid())),
        "{listing}"
    );
    let a_pid = u32::try_from(a.pid()).unwrap();
    scratch.write("go", "");
    let (a, b, c) = (a.wait(), b.wait(), c.wait());
    for output in [&a, &b, &c] {
        output.code(0);
    }
    assert_eq!(intervals(&scratch, "k").len(), 3);
    let (b_start, c_start) = (b.job(1).start_ms(), c.job(1).start_ms());
    assert!(a.job(1).end_ms() <= b_start, "b after a");
    assert!(
        b.job(1).end_ms() <= c_start,
        "c after b: first come, first served"
    );
    let holder = b.job(1).lock_holder.clone().expect("b waited for a");
    assert_eq!(
        (holder.pid, holder.run.as_str(), holder.host.as_deref()),
        (a_pid, a.report().run.started_at.as_str(), Some("ha"))
    );
    assert!(b.job(1).lock_wait_ms.is_some_and(|ms| ms > 0));
}

#[test]
fn a_terminated_session_stops_its_job_as_lock_lost_before_another_host_starts_the_key() {
    let Some(pg) = Postgres::start("a_terminated_session_stops_its_job") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let second = scratch.write("second.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha").args(["--grace", "1s"]).arg(&first),
        "log.k",
        pg.host(&scratch, "hb").arg(&second),
        || pg.locks(),
        "1 ahead",
    );
    pg.terminate_holder("k");
    let a = a.wait();
    a.code(1);
    let job = a.job(1);
    assert_eq!(
        (job.outcome.as_str(), job.reason.as_deref()),
        ("interrupted", Some("lock_lost")),
        "{}",
        a.dump()
    );
    assert!(
        job.error
            .as_deref()
            .is_some_and(|e| e.contains("the lock of key \"k\" was lost")),
        "{job:?}"
    );
    assert!(
        a.stderr().contains("lost the lock of key \"k\""),
        "{}",
        a.stderr()
    );
    let b = b.wait();
    b.code(0);
    // b's job started once a's was over, though a's session went at once.
    assert!(
        a.job(1).end_ms() <= b.job(1).start_ms(),
        "{} {}",
        a.job(1).end_ms(),
        b.job(1).start_ms()
    );
    // The key went to b at once, but b's job waited until a's last heartbeat (at most 2 s
    // before the loss) plus a's --grace and the 6 s a's lanes takes at most to notice: a's job
    // was gone first even had it ignored SIGTERM.
    let waited = b.job(1).lock_wait_ms.expect("b waited");
    assert!(waited >= 5000, "{waited}");
    let lines = scratch.lines("log.k");
    assert_eq!(lines.len(), 3, "a started, b started and ended: {lines:#?}");
    assert!(lines[0].starts_with("start") && lines[1].starts_with("start"));
    assert_eq!(pg.locks(), "no key is held\n");
}

#[test]
fn a_key_lost_before_its_job_started_says_no_job_ran_and_its_job_runs_later() {
    // One slot, two keys: one key's job runs, the other's key is granted and its job waits
    // for the slot. That key's session is ended: nothing ran under it, and its job asks for
    // the key again and runs.
    let Some(pg) = Postgres::start("a_key_lost_before_its_job_started") else {
        return;
    };
    let scratch = Scratch::new();
    let input = format!(
        "{}{}",
        marked_job("a", &await_file("go")),
        marked_job("b", &await_file("go"))
    );
    let events = scratch.join("events.jsonl");
    let run = pg
        .host(&scratch, "ha")
        .args(["-j", "1", "--events"])
        .arg(&events)
        .stdin(input)
        .spawn();
    // The tables exist once a job runs.
    assert!(
        wait_until(Duration::from_secs(10), || scratch.exists("log.a")
            || scratch.exists("log.b")),
        "no job started"
    );
    wait_for_listing(|| pg.locks(), "its job not started yet");
    let (running, waiting) = if scratch.exists("log.a") {
        ("a", "b")
    } else {
        ("b", "a")
    };
    assert!(scratch.exists(&format!("log.{running}")));
    pg.terminate_holder(waiting);
    // The loss is seen while its job waits for the slot: the job waits for the key again
    // (`lock` after `cap`), and only then does the slot free.
    let seq = if waiting == "a" { 1 } else { 2 };
    let causes = || -> Vec<String> {
        crate::records::events(&events)
            .iter()
            .filter(|event| event["type"] == "waiting" && event["seq"] == seq)
            .map(|event| event["cause"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(10), || causes()
            .iter()
            .skip_while(|cause| *cause != "cap")
            .any(|cause| cause == "lock")),
        "{:?}",
        causes()
    );
    scratch.write("go", "");
    let out = run.wait();
    out.code(0);
    assert!(
        out.stderr()
            .contains(&format!("lost the lock of key \"{waiting}\" (",))
            && out
                .stderr()
                .contains("; no job of it was running (one waiting asks for the key again)"),
        "{}",
        out.dump()
    );
    assert_eq!(out.report().summary.succeeded, 2, "{}", out.dump());
}

/// A wait for a key that the server cancels (here a `statement_timeout` on the waiter's
/// connection, as a role's setting or a DBA's `pg_cancel_backend` would) takes nothing from the
/// holder: lanes' sessions wait without a time limit, and a claim runs only on a session that
/// holds the lock. Before, the cancelled waiter wrote itself over the holder's row, and once
/// the holder's session was lost the waiter started at once, while the holder's job (within its
/// `--grace`) still ran. The waiter's record names the holder.
#[test]
fn a_cancelled_wait_for_a_key_never_takes_the_holder_s_place() {
    let Some(pg) = Postgres::start("a_cancelled_wait_for_a_key") else {
        return;
    };
    let scratch = Scratch::new();
    // a's job ignores SIGTERM and runs until the SIGKILL that ends its --grace.
    let first = scratch.write(
        "first.tsv",
        marked_job("k", &format!("trap '' TERM; {}", await_file("go"))),
    );
    let second = scratch.write("second.tsv", marked_job("k", ""));
    let limited = format!("{}&options=-c%20statement_timeout%3D500", pg.url());
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha").args(["--grace", "3s"]).arg(&first),
        "log.k",
        Run::new()
            .scratch(&scratch)
            .args(["--host-id", "hb", "--grace", "1s", "--coordinate", &limited])
            .arg(&second),
        || pg.locks(),
        "1 ahead",
    );
    // Long enough for several of the waiter's statement timeouts, had they applied.
    std::thread::sleep(Duration::from_millis(2500));
    // And a cancel of the wait itself (a DBA's): the waiter asks again, in a new wait (known
    // by its start), once what followed the cancelled one has run.
    let waiting = || {
        pg.psql(
            "SELECT pid || ' ' || query_start FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_lock%'",
        )
    };
    let before = waiting();
    assert_eq!(before.lines().count(), 1, "{before}");
    let pid = before.split(' ').next().unwrap();
    assert_eq!(pg.psql(&format!("SELECT pg_cancel_backend({pid})")), "t\n");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let now = waiting();
            now.lines().count() == 1 && now != before
        }),
        "the waiter did not ask again"
    );
    assert_eq!(
        pg.psql("SELECT host FROM lanes_holds WHERE key = 'k'"),
        "ha\n",
        "the holder's row is the holder's"
    );
    assert!(pg.locks().contains("held by host ha"), "{}", pg.locks());
    let a_pid = u32::try_from(a.pid()).unwrap();
    pg.terminate_holder("k");
    let a = a.wait();
    a.code(1);
    assert_eq!(a.job(1).result(), ("interrupted", Some("lock_lost")));
    let b = b.wait();
    b.code(0);
    assert!(
        a.job(1).end_ms() <= b.job(1).start_ms(),
        "b started at {} while a's job ran until {}",
        b.job(1).start_ms(),
        a.job(1).end_ms()
    );
    let holder = b.job(1).lock_holder.clone().expect("b waited for a");
    assert_eq!((holder.pid, holder.host.as_deref()), (a_pid, Some("ha")));
    assert!(!b.stderr().contains("statement timeout"), "{}", b.stderr());
}

/// Tables already current need no right to create tables: a role that may only use them (the
/// usual grant for a fleet; PostgreSQL 15 gives no one but the owner CREATE on `public`) runs
/// jobs. Only the first run, which creates them, needs that right.
#[test]
fn a_role_that_may_only_use_the_tables_runs_jobs_once_they_exist() {
    let Some(pg) = Postgres::start("a_role_that_may_only_use_the_tables") else {
        return;
    };
    let scratch = Scratch::new();
    let limited = pg
        .url()
        .replace("postgres://postgres@", "postgres://fleet@");
    pg.psql("CREATE ROLE fleet LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    let refused = Run::new()
        .scratch(&scratch)
        .args(["--coordinate", &limited])
        .stdin("k\ttrue\n")
        .run();
    refused.code(2);
    assert!(
        refused.stderr().contains("permission denied"),
        "{}",
        refused.stderr()
    );
    pg.host(&scratch, "owner").stdin("k\ttrue\n").run().code(0);
    pg.psql(
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO fleet; \
         GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO fleet",
    );
    let ran = Run::new()
        .scratch(&scratch)
        .args(["--coordinate", &limited, "--coordinate-records"])
        .stdin("k\ttrue\n")
        .run();
    ran.code(0);
    assert_eq!(ran.job(1).result(), ("succeeded", None));
}

/// A job stopped before it got its key (SIGTERM to its lanes) still names, in its record, the
/// host that held the key while it waited; it never started, so it has no lock wait.
#[test]
fn a_job_stopped_while_waiting_for_a_key_names_its_holder() {
    let Some(pg) = Postgres::start("a_job_stopped_while_waiting_for_a_key") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", marked_job("k", &await_file("go")));
    let rest = scratch.write("rest.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha").arg(&first),
        "log.k",
        pg.host(&scratch, "hb").arg(&rest),
        || pg.locks(),
        "1 ahead",
    );
    let a_pid = u32::try_from(a.pid()).unwrap();
    b.signal(Signal::SIGTERM);
    let b = b.wait();
    b.code(143);
    scratch.write("go", "");
    a.wait().code(0);
    let job = b.job(1);
    assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    let holder = job.lock_holder.clone().expect("the holder is named");
    assert_eq!((holder.pid, holder.host.as_deref()), (a_pid, Some("ha")));
    assert_eq!(job.lock_wait_ms, None);
}

/// Two hosts taking turns on one key: a job that waited for the other host's job names that
/// host as the holder, never its own lanes. (The holder was read from the row the new holder
/// writes a moment after its grant: a waiter asking just then read no row, or its own last
/// one; 7 of 11 records in a new user's run.) A wait that began as the key changed hands may
/// name no holder: at most one here.
#[test]
fn hosts_taking_turns_on_a_key_name_each_other_as_holder() {
    let Some(pg) = Postgres::start("hosts_taking_turns_on_a_key") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", "x\tsleep 0.3\n".repeat(5));
    let runs: Vec<Running> = ["ha", "hb"]
        .iter()
        .map(|host| pg.host(&scratch, host).arg(&jobs).spawn())
        .collect();
    let pids: Vec<u32> = runs
        .iter()
        .map(|run| u32::try_from(run.pid()).unwrap())
        .collect();
    let outputs: Vec<Output> = runs.into_iter().map(Running::wait).collect();
    let (mut long_waits, mut unnamed) = (0, 0);
    for (i, output) in outputs.iter().enumerate() {
        output.code(0);
        let (other_pid, other_host) = (pids[1 - i], ["hb", "ha"][i]);
        for seq in 1..=5 {
            let job = output.job(seq);
            let waited = job.lock_wait_ms.unwrap_or(0);
            if let Some(holder) = &job.lock_holder {
                assert_eq!(
                    (holder.pid, holder.host.as_deref()),
                    (other_pid, Some(other_host)),
                    "{job:?}"
                );
            } else if waited >= 200 {
                unnamed += 1;
            }
            long_waits += usize::from(waited >= 200);
        }
    }
    assert!(
        long_waits >= 3,
        "the hosts did not take turns: {long_waits}"
    );
    assert!(
        unnamed <= 1,
        "{unnamed} of {long_waits} long waits name no holder"
    );
}

/// Two holders of key k lost in a row: a (job line `first`, `--grace a_grace`) holds k and
/// loses its session; b (`--grace 1s`) is granted k, waits for a's job (as `lanes locks`
/// says), and loses its own session meanwhile; then c (`--grace 1s`) asks for k. b's and c's
/// jobs are `marked_job("k", body)`. Returns the three runs once all have ended, a stopped
/// `lock_lost` (exit 1), b and c succeeded.
fn lose_two_holders_in_a_row(
    pg: &Postgres,
    first: String,
    a_grace: &str,
    body: &str,
) -> (Output, Output, Output) {
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", first);
    let second = scratch.write("second.tsv", marked_job("k", body));
    let third = scratch.write("third.tsv", marked_job("k", body));
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha")
            .args(["--grace", a_grace])
            .arg(&first),
        "log.k",
        pg.host(&scratch, "hb").args(["--grace", "1s"]).arg(&second),
        || pg.locks(),
        "1 ahead",
    );
    pg.terminate_holder("k");
    wait_for_listing(|| pg.locks(), "held by host hb");
    assert!(
        pg.locks()
            .contains("its job waiting for a lost holder's job to end"),
        "{}",
        pg.locks()
    );
    pg.terminate_holder("k");
    let c = pg
        .host(&scratch, "hc")
        .args(["--grace", "1s"])
        .arg(&third)
        .spawn();
    let (a, b, c) = (a.wait(), b.wait(), c.wait());
    a.code(1);
    assert_eq!(
        a.job(1).reason.as_deref(),
        Some("lock_lost"),
        "{}",
        a.dump()
    );
    b.code(0);
    c.code(0);
    (a, b, c)
}

#[test]
fn a_key_granted_while_it_waits_for_a_lost_holder_is_not_used_once_its_own_session_is_lost() {
    // a holds k and loses its session: b is granted k but must wait out a's grace. b's own
    // session is lost during that wait, and c is granted k and waits out b's. b must not start
    // its job when its wait ends: another host holds the key by then.
    let Some(pg) = Postgres::start("a_key_granted_while_it_waits") else {
        return;
    };
    let (a, b, c) =
        lose_two_holders_in_a_row(&pg, marked_job("k", &await_file("go")), "2s", "sleep 3");
    assert!(
        b.stderr()
            .contains("the session was lost while the key waited"),
        "{}",
        b.stderr()
    );
    let order = check_one_at_a_time(&[("a", &a), ("b", &b), ("c", &c)], "two jobs of k at once");
    assert_eq!(order, ["a", "c", "b"], "c held k first");
}

#[test]
fn a_lost_holder_s_wait_passes_on_to_the_next_holders_whatever_their_grace() {
    // a (--grace 12s) loses its session while its job ignores SIGTERM: that job may run 12 s
    // more. b (--grace 1s) is granted the key and waits for it, and loses its own session
    // meanwhile. c, granted the key next, must still wait for a's job, not only for b's
    // (1 s): b's row keeps a's time.
    let Some(pg) = Postgres::start("a_lost_holder_s_wait_passes_on") else {
        return;
    };
    let first = format!("k\ttrap '' TERM; {}; {}\n", mark("start"), await_file("go"));
    let (a, b, c) = lose_two_holders_in_a_row(&pg, first, "12s", "");
    check_one_at_a_time(&[("a", &a), ("b", &b), ("c", &c)], "two jobs of k at once");
    // a's job was killed after its grace, 12 s after the loss: c waited at least that.
    assert!(
        c.job(1).lock_wait_ms.is_some_and(|ms| ms >= 5000),
        "{:?}",
        c.job(1)
    );
}

#[test]
fn a_lost_slot_holder_s_wait_passes_on_to_the_next_holders_whatever_their_grace() {
    // As for a key, with the fleet's one shared slot: a (--grace 12s) loses its session while
    // its job ignores SIGTERM; whichever of b and c takes the slot next (--grace 1s) loses its
    // session while it waits for a's job; the other must still wait for a's job.
    let Some(pg) = Postgres::start("a_lost_slot_holder_s_wait_passes_on") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write(
        "a.tsv",
        format!("a\ttrap '' TERM; {}; {}\n", mark("start"), await_file("go")),
    );
    let host = |name: &str, grace: &str, input: &Path| {
        pg.host(&scratch, name)
            .args(["--shared-max-concurrent", "1", "--grace", grace])
            .arg(input)
            .spawn()
    };
    let a = host("ha", "12s", &first);
    scratch.wait_for("log.a", Duration::from_secs(10));
    let b = host("hb", "1s", &scratch.write("b.tsv", marked_job("b", "")));
    let c = host("hc", "1s", &scratch.write("c.tsv", marked_job("c", "")));
    wait_for_listing(|| pg.locks(), "\"c\": held by host hc");
    wait_for_listing(|| pg.locks(), "\"b\": held by host hb");
    let slot_holder = || pg.psql("SELECT backend_pid FROM lanes_slot_holds");
    let first_holder = slot_holder();
    pg.terminate_holder("a");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let now = slot_holder();
            !now.is_empty() && now != first_holder
        }),
        "no one took the slot: {}",
        pg.locks()
    );
    // Its key's job waits for a's job, and says so.
    wait_for_listing(
        || pg.locks(),
        "its job waiting for a lost holder's job to end",
    );
    assert_eq!(
        pg.psql("SELECT pg_terminate_backend(backend_pid) FROM lanes_slot_holds"),
        "t\n"
    );
    let (a, b, c) = (a.wait(), b.wait(), c.wait());
    a.code(1);
    b.code(0);
    c.code(0);
    check_one_at_a_time(
        &[("a", &a), ("b", &b), ("c", &c)],
        "two jobs in flight under a cap of 1",
    );
}

#[test]
fn a_key_stays_held_by_the_orphaned_job_of_a_killed_lanes() {
    let Some(pg) = Postgres::start("a_key_stays_held_by_the_orphaned_job") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", orphan_job("k"));
    let second = scratch.write("second.tsv", marked_job("k", ""));
    let (a, b) = hold_then_queue(
        &scratch,
        pg.host(&scratch, "ha")
            .args(["--containment", "process-group", "--grace", "1s"])
            .arg(&first),
        "orphan.pid",
        pg.host(&scratch, "hb").arg(&second),
        || pg.locks(),
        "1 ahead",
    );
    let orphan = scratch.pid("orphan.pid");
    a.signal(Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(10), || !alive(a.pid())));
    assert!(alive(orphan), "the job outlives its lanes");
    // The orphan holds the session, and so the key: b's job does not start.
    assert!(!wait_until(Duration::from_millis(500), || scratch
        .lines("log.k")
        .len()
        > 1));
    let listing = pg.locks();
    assert!(
        listing.starts_with("\"k\": held by host ha") && listing.contains("1 ahead"),
        "{listing}"
    );
    scratch.write("go", "");
    let b = b.wait();
    b.code(0);
    assert!(wait_until(Duration::from_secs(5), || !alive(orphan)));
    let spans = intervals(&scratch, "k");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0].pid, orphan.to_string());
    drop(a);
    assert_eq!(pg.locks(), "no key is held\n");
}

#[test]
fn an_unreachable_database_is_refused_and_no_password_is_shown() {
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", "k\ttouch \"$D/ran\"\n");
    let url = format!(
        "postgres://someone:s3cretpw@/db?host={}",
        scratch.join("nowhere").display()
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--coordinate", &url])
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("--coordinate: cannot connect to postgres://someone@["),
        "{}",
        out.stderr()
    );
    assert!(!out.stderr().contains("s3cretpw"), "{}", out.stderr());
    assert!(!scratch.exists("ran"));
    // The dry run refuses it as the run does.
    let dry = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "--coordinate", &url])
        .arg(&jobs)
        .run();
    dry.code(2);
    assert_eq!(dry.stderr(), out.stderr());
    // A password holding `@`, as pasted: its end was taken for the host, and shown.
    let pasted = format!(
        "postgres://someone:pa@ss_s3cret@/db?host={}",
        scratch.join("nowhere").display()
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--coordinate", &pasted])
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("--coordinate: cannot connect to postgres://someone@[")
            && !out.stderr().contains("s3cret"),
        "{}",
        out.stderr()
    );
    // Nor in --help, with the URL in the environment.
    let help = Command::new(BIN)
        .arg("--help")
        .env("LANES_COORDINATE", &url)
        .env("PGPASSWORD", "s3cretpw")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--coordinate <URL>"), "{help}");
    assert!(!help.contains("s3cretpw"));
    // `lanes locks` needs a directory or a database.
    let out = Command::new(BIN)
        .arg("locks")
        .env_remove("LANES_COORDINATE")
        .env_remove("LANES_LOCK_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("name a lock directory (DIR, or LANES_LOCK_DIR) or a database"),
        "{out:?}"
    );
    // --namespace and --host-id need --coordinate.
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--host-id", "h"])
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("add --coordinate URL"),
        "{}",
        out.stderr()
    );
}

#[test]
fn the_shared_cap_holds_across_hosts() {
    let Some(pg) = Postgres::start("the_shared_cap_holds_across_hosts") else {
        return;
    };
    let scratch = Scratch::new();
    let runs: Vec<Running> = counting_job_files(&scratch, 3)
        .into_iter()
        .enumerate()
        .map(|(p, input)| {
            pg.host(&scratch, &format!("h{p}"))
                .args(["-j", "3", "--shared-max-concurrent", "2"])
                .arg(input)
                .spawn()
        })
        .collect();
    for run in runs {
        run.wait().code(0);
    }
    check_counts_under_a_cap_of_two(&scratch);
    assert_eq!(pg.locks(), "no key is held\n");
}

#[test]
fn tables_of_a_newer_lanes_are_refused_before_anything_runs() {
    let Some(pg) = Postgres::start("tables_of_a_newer_lanes_are_refused") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", "k\ttouch \"$D/ran\"\n");
    // A dry run reads the tables and makes none.
    let dry = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "--coordinate", &pg.url()])
        .arg(&jobs)
        .run();
    dry.code(0);
    assert_eq!(
        pg.psql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'lanes%'")
            .trim(),
        "0"
    );
    pg.psql("CREATE TABLE lanes_schema (version integer NOT NULL); INSERT INTO lanes_schema VALUES (99)");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--coordinate", &pg.url()])
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr().contains(
            "the database's lanes tables are version 99, newer than this lanes knows (5)"
        ),
        "{}",
        out.stderr()
    );
    assert!(!scratch.exists("ran"));
    let dry = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "--coordinate", &pg.url()])
        .arg(&jobs)
        .run();
    dry.code(2);
    assert_eq!(dry.stderr(), out.stderr());
    // `lanes locks` reads the tables: it refuses them too, rather than say nothing is held.
    let locks = Command::new(BIN)
        .args(["locks", "--coordinate", &pg.url()])
        .output()
        .expect("lanes locks");
    assert_eq!(locks.status.code(), Some(2), "{locks:?}");
    let stderr = String::from_utf8_lossy(&locks.stderr);
    assert!(
        stderr.contains("version 99, newer than this lanes knows (5)"),
        "{stderr}"
    );
}

#[test]
fn a_host_name_is_shown_escaped_and_an_empty_one_refused() {
    let Some(pg) = Postgres::start("a_host_name_is_shown_escaped") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", holding_job("k"));
    let holder = pg
        .host(&scratch, "evil\nwaiting: host\u{1b}[31m")
        .arg(&jobs)
        .spawn();
    scratch.wait_for("log.k", Duration::from_secs(10));
    let listing = pg.locks();
    scratch.write("go", "");
    holder.wait().code(0);
    assert!(
        listing.contains("held by host evil\\nwaiting: host\\u{1b}[31m pid"),
        "{listing:?}"
    );
    assert_eq!(listing.lines().count(), 1, "{listing:?}");
    let out = pg.host(&scratch, "").arg(&jobs).no_report().run();
    out.code(2);
    assert!(out.stderr().contains("--host-id"), "{}", out.stderr());
}

/// Continues a stopped process when dropped, whatever the test's end.
struct Continue(i32);

impl Drop for Continue {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

#[test]
fn a_database_that_stops_answering_loses_the_key_within_the_heartbeat_bound() {
    let Some(pg) = Postgres::start("a_database_that_stops_answering") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", marked_job("k", &await_file("go")));
    let a = pg
        .host(&scratch, "ha")
        .args(["--grace", "1s"])
        .arg(&jobs)
        .spawn();
    scratch.wait_for("log.k", Duration::from_secs(10));
    // The holding session's server process stops: the connection stays open, nothing answers
    // (as over a network that drops everything).
    let backend: i32 = pg
        .psql("SELECT backend_pid FROM lanes_holds WHERE key = 'k'")
        .trim()
        .parse()
        .unwrap();
    let stopped_at = std::time::Instant::now();
    kill(Pid::from_raw(backend), Signal::SIGSTOP).unwrap();
    let _continue = Continue(backend);
    let a = a.wait();
    let noticed = stopped_at.elapsed();
    a.code(1);
    assert_eq!(
        (a.job(1).outcome.as_str(), a.job(1).reason.as_deref()),
        ("interrupted", Some("lock_lost")),
        "{}",
        a.dump()
    );
    assert!(
        a.job(1)
            .error
            .as_deref()
            .is_some_and(|e| e.contains("did not answer for 3 s")),
        "{:?}",
        a.job(1).error
    );
    // A heartbeat every 2 s, 3 s to answer, then the stop and --grace: within 5 s + 1 s and
    // lanes' exit.
    assert!(noticed < Duration::from_secs(9), "{noticed:?}");
    assert_eq!(
        scratch.lines("log.k").len(),
        1,
        "the job never ended by itself"
    );
}

/// `--coordinate-records` with a database that stops answering (its server processes stopped,
/// the records' session's and the one that would take a new connection): each try is given
/// up after 5 s, the records are named lost on stderr, and the run ends with status 1 instead
/// of waiting for the database forever. Records that end meanwhile are not each waited for
/// again (30 s each: 5 jobs would hold the run's end for two and a half minutes).
#[test]
fn records_for_a_database_that_stops_answering_are_given_up_on() {
    let Some(pg) = Postgres::start("records_for_a_database_that_stops_answering") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write(
        "jobs.tsv",
        // One key: its jobs start in order (different keys start as the database grants them).
        format!(
            "k\ttrue\n{}{}",
            marked_job("k", &await_file("go")),
            "k\ttrue\n".repeat(4)
        ),
    );
    let run = pg
        .host(&scratch, "ha")
        .args(["-j", "1", "--coordinate-records"])
        .arg(&jobs)
        .spawn();
    scratch.wait_for("log.k", Duration::from_secs(10));
    let Some(_stopped) = stop_the_records_session(&pg) else {
        scratch.write("go", "");
        panic!("no record was written\n{}", run.wait().dump());
    };
    let stopped_at = std::time::Instant::now();
    scratch.write("go", "");
    let out = run.wait();
    let ended = stopped_at.elapsed();
    out.code(1);
    let stderr = out.stderr();
    for seq in 2..=6 {
        let record = format!("--coordinate-records: the record of job {seq} (key \"k\")");
        // A record in a statement sent and not answered (job 2's, first): the server may yet
        // commit it. One only tried to connect for was not written.
        let sent = format!(
            "{record} may not be in lanes_records (given up on: {}: no answer within 5 s; a \
             try of it was sent and not answered, and is there if the server committed it)",
            pg.shown()
        );
        let unsent = format!(
            "{record} was not written into lanes_records: {}: no answer within 5 s",
            pg.shown()
        );
        assert!(
            stderr.contains(&sent) || (seq > 2 && stderr.contains(&unsent)),
            "{}",
            out.dump()
        );
        assert_eq!(out.job(seq).result(), ("succeeded", None));
    }
    assert_eq!(
        out.stderr()
            .matches("did not answer within 5 s; connecting again")
            .count(),
        1,
        "{}",
        out.dump()
    );
    // Tries of 5 s for up to 30 s after the run's end, with growing pauses between them;
    // then one try for what came meanwhile.
    assert!(ended < Duration::from_secs(45), "{ended:?}");
}

#[test]
fn a_killed_or_interrupted_waiter_leaves_the_key_s_queue() {
    let Some(pg) = Postgres::start("a_killed_or_interrupted_waiter_leaves_the_key_s_queue") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("first.tsv", holding_job("k"));
    let rest = scratch.write("rest.tsv", "k\ttrue\n");
    let a = pg.host(&scratch, "ha").arg(&first).spawn();
    scratch.wait_for("log.k", Duration::from_secs(10));
    let b = pg.host(&scratch, "hb").arg(&rest).spawn();
    let c = pg.host(&scratch, "hc").arg(&rest).spawn();
    wait_for_listing(|| pg.locks(), "2 ahead");
    // One waiter killed, the other stopped cleanly: neither stays in the server's queue.
    b.signal(Signal::SIGKILL);
    c.signal(Signal::SIGINT);
    assert!(wait_until(Duration::from_secs(10), || !alive(b.pid())));
    let _ = c.wait();
    assert!(
        wait_until(Duration::from_secs(10), || !pg.locks().contains("waiting:")),
        "{}",
        pg.locks()
    );
    let waiting =
        pg.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
    assert_eq!(waiting.trim(), "0");
    scratch.write("go", "");
    a.wait().code(0);
    // A clean exit leaves no row of its sessions.
    assert!(
        wait_until(Duration::from_secs(10), || pg
            .psql(
                "SELECT count(*) FROM lanes_sessions s WHERE s.backend_pid IN \
                   (SELECT pid FROM pg_stat_activity)"
            )
            .trim()
            == "0"),
        "{}",
        pg.psql("SELECT * FROM lanes_sessions")
    );
}

#[test]
fn a_clean_run_leaves_no_row_in_lanes_sessions() {
    let Some(pg) = Postgres::start("a_clean_run_leaves_no_row_in_lanes_sessions") else {
        return;
    };
    let scratch = Scratch::new();
    Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--coordinate", &pg.url()])
        .args(["--", "true", ":::", "a", "b", "c"])
        .run()
        .code(0);
    assert_eq!(pg.psql("SELECT count(*) FROM lanes_sessions").trim(), "0");
}

#[test]
fn a_record_the_database_refuses_is_lost_alone() {
    let Some(pg) = Postgres::start("a_record_the_database_refuses_is_lost_alone") else {
        return;
    };
    let scratch = Scratch::new();
    // Create the tables, then make the database refuse the record of key `bad`.
    Run::new()
        .scratch(&scratch)
        .args(["--coordinate", &pg.url(), "--", "true"])
        .run()
        .code(0);
    pg.psql("ALTER TABLE lanes_records ADD CONSTRAINT no_bad CHECK (key <> 'bad')");
    let input = scratch.write("jobs.tsv", "a\ttrue\nbad\ttrue\nc\ttrue\n");
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--coordinate", &pg.url(), "--coordinate-records"])
        .arg(input)
        .run();
    out.code(1);
    assert!(
        out.stderr().contains(
            "lanes: --coordinate-records: the record of job 2 (key \"bad\") was not written"
        ),
        "{}",
        out.dump()
    );
    assert_eq!(
        pg.psql("SELECT string_agg(key, ',' ORDER BY seq) FROM lanes_records")
            .trim(),
        "a,c"
    );
}

#[test]
fn records_are_written_again_after_the_session_is_lost() {
    let Some(pg) = Postgres::start("records_are_written_again_after_the_session_is_lost") else {
        return;
    };
    let scratch = Scratch::new();
    // Job 2 ends the records writer's session (the only one not asking for a key) before
    // it ends; its record and job 3's go on a new session.
    let terminate = format!(
        "psql -X -q -d {} -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND datname = current_database() AND pid NOT IN \
         (SELECT backend_pid FROM lanes_sessions)\"",
        sh_quote(&pg.url())
    );
    let input = scratch.write("jobs.tsv", format!("a\ttrue\nb\t{terminate}\nc\ttrue\n"));
    let psql_dir = pg.bin.clone();
    let path = format!(
        "{}:{}",
        psql_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Run::new()
        .scratch(&scratch)
        .env("PATH", path)
        .args(["-j", "1", "--coordinate", &pg.url(), "--coordinate-records"])
        .arg(input)
        .run();
    out.code(0);
    assert_eq!(
        pg.psql("SELECT string_agg(key, ',' ORDER BY seq) FROM lanes_records")
            .trim(),
        "a,b,c",
        "{}",
        out.dump()
    );
}

#[test]
fn a_record_that_ends_while_the_database_restarts_is_written_once_it_is_back() {
    // The run ends with job 2: its record is tried while the server is down, and after.
    record_through_an_outage(
        "a_record_that_ends_while_the_database_restarts_is_written",
        "",
        Duration::from_secs(2),
        "1:succeeded,2:interrupted",
    );
}

#[test]
fn a_record_that_ends_while_the_database_is_down_is_written_however_long_the_outage_while_the_run_goes_on(
) {
    // Job 3, of job 2's key, needs the key again from the database once job 2 lost it (a
    // key of its own could be held already, asked for ahead, and lost with the restart): the
    // run goes on until the server is back, down for more than 20 s, and job 2's record is
    // tried for as long as it takes.
    record_through_an_outage(
        "a_record_that_ends_while_the_database_is_down_however_long",
        "b\ttrue\n",
        Duration::from_secs(20),
        "1:succeeded,2:interrupted,3:succeeded",
    );
}

/// Runs `a true`, then job 2 (key b), which loses its key when the server stops, then
/// `more`; the server stays down `down` after the loss is seen, then starts again. Every
/// record must be in the table (`want`: `seq:outcome` in seq order), none said unwritten.
fn record_through_an_outage(name: &str, more: &str, down: Duration, want: &str) {
    let Some(mut pg) = Postgres::start(name) else {
        return;
    };
    let scratch = Scratch::new();
    let input = scratch.write(
        "jobs.tsv",
        format!("a\ttrue\n{}{more}", marked_job("b", "exec sleep 60")),
    );
    let events = scratch.join("events.jsonl");
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--coordinate", &pg.url(), "--coordinate-records"])
        .arg("--events")
        .arg(&events)
        .arg(input)
        .spawn();
    scratch.wait_for("log.b", Duration::from_secs(10));
    // The restart ends every session: job 2 loses its key, and its record ends while the
    // server is down.
    pg.stop();
    assert!(
        wait_until(Duration::from_secs(15), || crate::records::events(&events)
            .iter()
            .any(|event| event["reason"] == "lock_lost")),
        "job 2 did not lose its key"
    );
    std::thread::sleep(down);
    pg.pg_ctl_start();
    let out = run.wait();
    out.code(1);
    assert_eq!(out.job(2).result(), ("interrupted", Some("lock_lost")));
    // No record given up on, whatever the words.
    assert!(
        !out.stderr().contains("the record of job"),
        "{}",
        out.dump()
    );
    assert_eq!(
        pg.psql("SELECT string_agg(seq || ':' || outcome, ',' ORDER BY seq) FROM lanes_records")
            .trim(),
        want,
        "{}",
        out.dump()
    );
}

#[test]
fn a_record_whose_commit_is_answered_late_is_written_once() {
    // A synchronous standby that is not there holds every commit's answer (the commit is done
    // locally): the records' session gives the insert up after 5 s and tries it again on a new
    // session, and the table must still hold one row per job.
    let Some(pg) = Postgres::start("a_record_whose_commit_is_answered_late_is_written_once") else {
        return;
    };
    let scratch = Scratch::new();
    let input = scratch.write(
        "jobs.tsv",
        format!("{}b\ttrue\n", marked_job("a", &await_file("go"))),
    );
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--coordinate", &pg.url(), "--coordinate-records"])
        .arg(input)
        .spawn();
    scratch.wait_for("log.a", Duration::from_secs(10));
    pg.psql("ALTER SYSTEM SET synchronous_standby_names = 'absent'");
    pg.psql("SELECT pg_reload_conf()");
    scratch.write("go", "");
    // The first insert's answer is held; 5 s later it is given up and tried again on a new
    // session: two inserts of job 1's record are in the server at once.
    let inserts = || {
        pg.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%INSERT INTO lanes_records%' \
             AND pid <> pg_backend_pid()",
        )
        .trim()
        .parse::<u32>()
        .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(30), || inserts() >= 2),
        "the insert was not tried again"
    );
    pg.psql("ALTER SYSTEM RESET synchronous_standby_names");
    pg.psql("SELECT pg_reload_conf()");
    let out = run.wait();
    out.code(0);
    // No record given up on, whatever the words.
    assert!(
        !out.stderr().contains("the record of job"),
        "{}",
        out.dump()
    );
    assert_eq!(
        pg.psql("SELECT string_agg(seq::text, ',' ORDER BY seq) FROM lanes_records")
            .trim(),
        "1,2",
        "{}",
        out.dump()
    );
}

#[test]
fn version_4_tables_are_upgraded_and_copies_of_a_record_written_before_are_removed() {
    let Some(pg) = Postgres::start("version_4_tables_are_upgraded") else {
        return;
    };
    let scratch = Scratch::new();
    let run = |input: &str| {
        Run::new()
            .scratch(&scratch)
            .args(["--coordinate", &pg.url(), "--coordinate-records"])
            .stdin(input)
            .run()
    };
    run("a\ttrue\n").code(0);
    // The tables as version 4 left them, with a record written three times by its tries.
    pg.psql(
        "DROP INDEX lanes_records_once; ALTER TABLE lanes_records DROP COLUMN pid; \
         DELETE FROM lanes_schema WHERE version = 5; \
         INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, record) \
         SELECT namespace, host, run, seq, key, 'copy', record FROM lanes_records, \
         generate_series(1, 2)",
    );
    // And another run's record of the same seq, started in the same millisecond on the same
    // host (another process): not a copy, and kept.
    pg.psql(
        "INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, record) \
         SELECT namespace, host, run, seq, 'other', 'other', record || '{\"key\":\"other\"}' \
         FROM lanes_records LIMIT 1",
    );
    assert_eq!(pg.psql("SELECT count(*) FROM lanes_records").trim(), "4");
    run("b\ttrue\n").code(0);
    assert_eq!(
        pg.psql("SELECT count(*), max(version) FROM lanes_schema"),
        "5|5\n"
    );
    assert_eq!(
        pg.psql("SELECT string_agg(key || ':' || outcome, ',' ORDER BY id) FROM lanes_records")
            .trim(),
        "a:succeeded,other:other,b:succeeded",
        "the first of the copies is kept"
    );
}

/// `lanes_records` whose unique index was dropped by hand (the tables still version 5) would
/// refuse every record's insert: `--coordinate-records` is refused at the start, saying how to
/// make the index again, and runs without it go on.
#[test]
fn records_into_a_table_whose_index_was_dropped_are_refused_at_the_start() {
    let Some(pg) = Postgres::start("records_into_a_table_whose_index_was_dropped") else {
        return;
    };
    let scratch = Scratch::new();
    let run = |args: &[&str]| {
        Run::new()
            .scratch(&scratch)
            .args(["--coordinate", &pg.url()])
            .args(args)
            .stdin("a\ttouch \"$D/ran\"\n")
            .run()
    };
    run(&["--coordinate-records"]).code(0);
    pg.psql("DROP INDEX lanes_records_once");
    std::fs::remove_file(scratch.join("ran")).unwrap();
    let out = run(&["--coordinate-records"]);
    out.code(2);
    assert!(
        out.stderr().contains(
            "--coordinate-records: the table lanes_records has lost its unique index \
             lanes_records_once"
        ),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
    run(&[]).code(0);
    assert!(scratch.exists("ran"));
    // Made again as it says, records are written again.
    pg.psql(
        "CREATE UNIQUE INDEX lanes_records_once ON lanes_records (namespace, host, pid, run, seq)",
    );
    run(&["--coordinate-records"]).code(0);
    assert_eq!(pg.psql("SELECT count(*) FROM lanes_records").trim(), "2");
}

#[test]
fn runs_that_start_in_the_same_millisecond_on_one_host_keep_every_record() {
    // A run is its namespace, host, pid and start: another process's records of the same seqs
    // and start are no copies of this one's.
    let Some(pg) = Postgres::start("runs_that_start_in_the_same_millisecond") else {
        return;
    };
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--coordinate", &pg.url(), "--coordinate-records"])
        .stdin("a\ttrue\nb\ttrue\n")
        .run();
    out.code(0);
    let pid = out.report().run.pid;
    assert_eq!(
        pg.psql("SELECT string_agg(DISTINCT pid::text, ',') FROM lanes_records")
            .trim(),
        pid.to_string(),
        "each row names its writer"
    );
    // Another process (another pid) with the same host and start: both rows kept.
    pg.psql(
        "INSERT INTO lanes_records (namespace, host, pid, run, seq, key, outcome, record) \
         SELECT namespace, host, pid + 1, run, seq, key, outcome, record FROM lanes_records",
    );
    assert_eq!(pg.psql("SELECT count(*) FROM lanes_records").trim(), "4");
    // The same process's record of the same seq again is a copy, which the index refuses.
    let psql = [pg.bin.join("psql"), PathBuf::from("psql")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("psql"));
    let again = Command::new(psql)
        .args(["-X", "-q", "-d", &pg.url(), "-c"])
        .arg(format!(
            "INSERT INTO lanes_records (namespace, host, pid, run, seq, record) \
             SELECT namespace, host, pid, run, seq, record FROM lanes_records WHERE pid = {pid}"
        ))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("lanes_records_once"),
        "{again:?}"
    );
}

#[test]
fn a_database_s_idle_session_timeout_ends_no_session_of_lanes() {
    // Sessions that hold a key sit idle between heartbeats (2 s), and the records' session
    // between records: a database whose idle sessions end after 1 s must not end them.
    let Some(pg) = Postgres::start("a_database_s_idle_session_timeout_ends_no_session") else {
        return;
    };
    pg.psql("ALTER DATABASE postgres SET idle_session_timeout = '1s'");
    let scratch = Scratch::new();
    let out = pg
        .host(&scratch, "ha")
        .args(["-j", "1", "--coordinate-records"])
        .stdin("k\tsleep 4\nk\ttrue\n")
        .run();
    out.code(0);
    assert_eq!(
        pg.psql("SELECT string_agg(seq || ':' || outcome, ',' ORDER BY seq) FROM lanes_records")
            .trim(),
        "1:succeeded,2:succeeded",
        "{}",
        out.dump()
    );
}

#[test]
fn locks_says_a_job_waits_for_a_shared_slot_and_how_many_are_held() {
    let Some(pg) = Postgres::start("locks_says_a_job_waits_for_a_shared_slot") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("x.tsv", holding_job("x"));
    let second = scratch.write("y.tsv", "y\ttrue\n");
    let host = |name: &str, input: &Path| {
        pg.host(&scratch, name)
            .args(["--shared-max-concurrent", "1"])
            .arg(input)
    };
    let (a, b) = hold_then_queue(
        &scratch,
        host("ha", &first),
        "log.x",
        host("hb", &second),
        || pg.locks(),
        "\"y\": held by host hb",
    );
    let listing = pg.locks();
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(lines[0].ends_with(", seq 1)"), "{listing}");
    assert!(
        lines[1].ends_with("), its job waiting for a shared slot"),
        "{listing}"
    );
    assert_eq!(lines[2], "shared slots: 1 held", "{listing}");
    scratch.write("go", "");
    a.wait().code(0);
    b.wait().code(0);
}

#[test]
fn an_empty_database_or_namespace_is_a_usage_error() {
    for args in [
        vec!["--coordinate", "", "--", "true"],
        vec![
            "--coordinate",
            "postgres://u@h/d",
            "--namespace",
            "",
            "--",
            "true",
        ],
        vec!["locks", "--coordinate", ""],
        vec![
            "locks",
            "--coordinate",
            "postgres://u@h/d",
            "--namespace",
            "",
        ],
    ] {
        let out = Command::new(BIN).args(&args).output().expect("lanes");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}

#[test]
fn a_lost_holder_s_row_delays_the_next_holder_only_until_its_job_must_be_gone() {
    let Some(pg) = Postgres::start("a_lost_holder_s_row_delays_the_next_holder_only") else {
        return;
    };
    let scratch = Scratch::new();
    let hold = scratch.write("hold.tsv", holding_job("k"));
    let quick = scratch.write("quick.tsv", "k\ttrue\n");
    let host = |name: &str, input: &Path| {
        pg.host(&scratch, name)
            .args(["--grace", "1s"])
            .arg(input)
            .spawn()
    };
    // `ha` loses its session while its job runs: its row stays.
    let lose = |name: &str, lines: usize| {
        let a = host(name, &hold);
        assert!(wait_until(Duration::from_secs(10), || scratch
            .lines("log.k")
            .len()
            == lines));
        pg.terminate_holder("k");
        let a = a.wait();
        a.code(1);
        assert_eq!(a.job(1).reason.as_deref(), Some("lock_lost"));
        a
    };
    let a = lose("ha", 1);
    // Just after the loss, the next holder waits for the lost holder's job, and names it.
    let b = host("hb", &quick).wait();
    b.code(0);
    let holder = b.job(1).lock_holder.clone().expect("b waited for ha");
    assert_eq!(
        (holder.host.as_deref(), holder.run.as_str()),
        (Some("ha"), a.report().run.started_at.as_str())
    );
    assert!(
        b.job(1).lock_wait_ms.is_some_and(|ms| ms >= 1000),
        "{}",
        b.dump()
    );
    // A row whose holder was last seen long ago (as if an hour had passed) delays no one.
    lose("hc", 2);
    pg.psql("UPDATE lanes_holds SET seen_at = seen_at - interval '1 hour' WHERE key = 'k'");
    let d = host("hd", &quick).wait();
    d.code(0);
    assert!(d.job(1).lock_holder.is_none(), "{}", d.dump());
    assert!(
        d.job(1).lock_wait_ms.is_some_and(|ms| ms < 3000),
        "{}",
        d.dump()
    );
    assert_eq!(pg.locks(), "no key is held\n");
}

/// Host ha runs `first` (key x) in the fleet's one shared slot; host hb's job of key y (which
/// marks its start and end) waits for the slot. Both with `--grace GRACE`.
fn slot_held_then_waited_for(
    pg: &Postgres,
    scratch: &Scratch,
    grace: &str,
    first: &Path,
) -> (Running, Running) {
    let second = scratch.write("y.tsv", marked_job("y", ""));
    let host = |name: &str, input: &Path| {
        pg.host(scratch, name)
            .args(["--grace", grace, "--shared-max-concurrent", "1"])
            .arg(input)
    };
    hold_then_queue(
        scratch,
        host("ha", first),
        "log.x",
        host("hb", &second),
        || pg.locks(),
        "its job waiting for a shared slot",
    )
}

#[test]
fn a_lost_slot_holder_s_job_counts_against_the_cap_until_it_must_be_gone() {
    let Some(pg) = Postgres::start("a_lost_slot_holder_s_job_counts_against_the_cap") else {
        return;
    };
    let scratch = Scratch::new();
    // a's job ignores SIGTERM: it runs on for a's --grace after a's session is lost.
    let first = scratch.write(
        "x.tsv",
        format!(
            "x\ttrap '' TERM; {}; {}; sleep 2; {}\n",
            mark("start"),
            await_file("go"),
            mark("end")
        ),
    );
    let (a, b) = slot_held_then_waited_for(&pg, &scratch, "1s", &first);
    pg.terminate_holder("x");
    scratch.write("go", "");
    let (a, b) = (a.wait(), b.wait());
    a.code(1);
    b.code(0);
    assert_eq!(a.job(1).reason.as_deref(), Some("lock_lost"));
    // a's job, killed after its grace, was over before b's started: never two under a cap of 1.
    let a_start = scratch.lines("log.x")[0].clone();
    let b_start: u128 = scratch.lines("log.y")[0]
        .split(' ')
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    let a_end = a.job(1).end_ms();
    assert!(
        i128::from(a_end) * 1_000_000 <= b_start as i128,
        "{a_start} {a_end} {b_start}"
    );
}

#[test]
fn a_lanes_stopped_while_its_key_waits_for_a_shared_slot_leaves_no_wait_behind() {
    // a holds the fleet's one shared slot. b holds key y and waits for the slot when it is
    // stopped (SIGINT): no job of b ran, so the next holder of y must not wait out b's
    // --grace (30 s) as for a lost holder.
    let Some(pg) = Postgres::start("a_lanes_stopped_while_its_key_waits") else {
        return;
    };
    let scratch = Scratch::new();
    let first = scratch.write("x.tsv", holding_job("x"));
    let (a, b) = slot_held_then_waited_for(&pg, &scratch, "30s", &first);
    b.signal(Signal::SIGINT);
    let b = b.wait();
    b.code(130);
    assert_eq!(b.job(1).result(), ("interrupted", Some("shutdown")));
    let third = scratch.write("y2.tsv", marked_job("y", ""));
    let c = pg.host(&scratch, "hc").arg(&third).run();
    c.code(0);
    let waited = c.job(1).lock_wait_ms.unwrap_or_default();
    assert!(waited < 10_000, "{:?}\n{}", c.job(1), c.dump());
    assert_eq!(c.job(1).lock_holder, None, "{:?}", c.job(1));
    scratch.write("go", "");
    a.wait().code(0);
}

/// Once job 1's record is in (the only row; the records' session is the one that inserted
/// it), stops that session and the server with SIGSTOP until the guards returned are
/// dropped: the key's session still answers, nothing new connects. `None` when no record
/// came within 10 s.
fn stop_the_records_session(pg: &Postgres) -> Option<(Continue, Continue)> {
    let inserted = || {
        pg.psql(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE '%INSERT INTO lanes_records%' \
             AND pid <> pg_backend_pid()",
        )
    };
    let in_table = || pg.psql("SELECT count(*) FROM lanes_records").trim() == "1";
    if !wait_until(Duration::from_secs(10), || {
        !inserted().trim().is_empty() && in_table()
    }) {
        return None;
    }
    let records: i32 = inserted().trim().parse().unwrap();
    kill(Pid::from_raw(records), Signal::SIGSTOP).unwrap();
    let records = Continue(records);
    kill(Pid::from_raw(pg.pid), Signal::SIGSTOP).unwrap();
    Some((records, Continue(pg.pid)))
}

/// The server's processes (the postmaster and its children) stopped with SIGSTOP until
/// dropped: a server that takes connections and never answers.
struct Hung(Vec<i32>);

impl Hung {
    fn stop(pg: &Postgres) -> Hung {
        let mut pids = vec![pg.pid];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent's pid is the second field after the command's closing parenthesis.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if ppid == Some(pg.pid) {
                pids.push(pid);
            }
        }
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        Hung(pids)
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

#[test]
fn a_database_that_never_answers_is_a_usage_error_not_a_hang() {
    let Some(pg) = Postgres::start("a_database_that_never_answers") else {
        return;
    };
    let scratch = Scratch::new();
    let hung = Hung::stop(&pg);
    let out = pg
        .host(&scratch, "ha")
        .no_report()
        .stdin("k\ttouch \"$D/ran\"\n")
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("the database did not answer within 10 s"),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
    let locks = Command::new(BIN)
        .args(["locks", "--coordinate", &pg.url()])
        .output()
        .expect("lanes locks");
    assert_eq!(locks.status.code(), Some(2), "{locks:?}");
    drop(hung);
    // Answering again, the same database serves a run.
    pg.host(&scratch, "ha")
        .no_report()
        .stdin("k\ttouch \"$D/ran\"\n")
        .run()
        .code(0);
    assert!(scratch.exists("ran"));
}

/// Whether process `pid` has a socket open (lanes connected to the server, and waits for its
/// answer).
fn has_a_socket(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|to| to.to_string_lossy().starts_with("socket:"))
        })
    })
}

/// A stop signal while lanes waits for a database that does not answer at start ends the wait
/// at once, with the status of the signal and a report of no jobs, not a usage error 10 s on.
#[test]
fn a_stop_signal_ends_the_wait_for_a_database_that_does_not_answer() {
    let Some(pg) = Postgres::start("a_stop_signal_ends_the_wait_for_a_database") else {
        return;
    };
    let scratch = Scratch::new();
    let hung = Hung::stop(&pg);
    let running = pg
        .host(&scratch, "ha")
        .stdin("k\ttouch \"$D/ran\"\n")
        .spawn();
    // Connected to the server, and waiting for its answer.
    let pid = running.pid();
    assert!(wait_until(Duration::from_secs(5), || has_a_socket(pid)));
    // The wait is part of the run's time (its clock started after it: 0 ms).
    std::thread::sleep(Duration::from_millis(300));
    running.signal(Signal::SIGINT);
    let out = running.wait();
    drop(hung);
    out.code(130);
    assert!(
        out.stderr()
            .contains("SIGINT while waiting for the database at start (--coordinate)"),
        "{}",
        out.dump()
    );
    assert!(out.report().jobs.is_empty());
    assert!(
        out.report().summary.duration_ms >= 300,
        "{:?}",
        out.report().summary
    );
    assert!(!scratch.exists("ran"));
}

/// A stop signal while the run's end waits for records the database does not take ends that
/// wait at once (within the half second a forced stop gives each file), names the records
/// given up on, and changes no job's outcome.
#[test]
fn a_stop_signal_while_the_end_waits_for_records_ends_the_wait_at_once() {
    let Some(pg) = Postgres::start("a_stop_signal_while_the_end_waits_for_records") else {
        return;
    };
    let scratch = Scratch::new();
    let jobs = scratch.write(
        "jobs.tsv",
        format!(
            "k\ttrue\n{}k\ttrue\nk\ttouch \"$D/last\"; {}\n",
            marked_job("k", &await_file("go")),
            await_file("go2"),
        ),
    );
    let run = pg
        .host(&scratch, "ha")
        .args(["-j", "1", "--coordinate-records"])
        .arg(&jobs)
        .spawn();
    scratch.wait_for("log.k", Duration::from_secs(10));
    // Job 1's record is in. The records' session and the server stopped; the key's session
    // answers still.
    let Some(stopped) = stop_the_records_session(&pg) else {
        scratch.write("go", "");
        panic!("no record was written\n{}", run.wait().dump());
    };
    scratch.write("go", "");
    scratch.wait_for("last", Duration::from_secs(10));
    // Every session of the server stopped as the last job ends: the key is let go into it.
    let hung = Hung::stop(&pg);
    scratch.write("go2", "");
    // The run's end is under way (its last job has ended), its records held by the database.
    std::thread::sleep(Duration::from_millis(1500));
    let signalled = std::time::Instant::now();
    run.signal(Signal::SIGINT);
    let out = run.wait();
    let ended = signalled.elapsed();
    drop((hung, stopped));
    out.code(1);
    for seq in 1..=4 {
        assert_eq!(out.job(seq).result(), ("succeeded", None), "{}", out.dump());
    }
    assert!(
        ended < Duration::from_millis(1500),
        "{ended:?}\n{}",
        out.dump()
    );
    let stderr = out.stderr();
    assert!(
        stderr.contains("--coordinate-records: the records of jobs 2, 3, 4 were given up on"),
        "{}",
        out.dump()
    );
    assert!(
        ended < Duration::from_millis(1500),
        "{ended:?}\n{}",
        out.dump()
    );
}

/// A key that cannot be asked for (the database refuses connections) is tried again, and its
/// errors are said once per 30 s for the key, not once for each of its jobs that asks.
#[test]
fn a_key_s_errors_are_said_once_per_30_s_whichever_of_its_jobs_asks() {
    use std::io::Write as _;
    let Some(pg) = Postgres::start("a_key_s_errors_are_said_once") else {
        return;
    };
    pg.psql("CREATE DATABASE fleet");
    let url = pg.url().replace("/postgres?", "/fleet?");
    let refuse = || {
        pg.psql(
            "ALTER DATABASE fleet ALLOW_CONNECTIONS false; \
             SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = 'fleet'",
        )
    };
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["--coordinate", &url, "-j", "1", "--grace", "0.1"])
        .stdin_piped()
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || !running
        .report_so_far()
        .is_empty()));
    // Job 1 asks while the database refuses (said once), then gets the key.
    refuse();
    running
        .stdin()
        .write_all(format!("k\ttouch \"$D/one\"; {}\nk\ttrue\n", await_file("go")).as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    pg.psql("ALTER DATABASE fleet ALLOW_CONNECTIONS true");
    scratch.wait_for("one", Duration::from_secs(10));
    // Job 2 asks while it refuses again, within 30 s of the first error: not said again.
    refuse();
    std::thread::sleep(Duration::from_secs(2));
    pg.psql("ALTER DATABASE fleet ALLOW_CONNECTIONS true");
    scratch.write("go", "");
    running.close_stdin();
    let out = running.wait();
    assert_eq!(
        out.stderr().matches("cannot lock key \"k\" in").count(),
        1,
        "{}",
        out.dump()
    );
    assert_eq!(out.job(2).result(), ("succeeded", None), "{}", out.dump());
}

/// `--dry-run` connects to the database too: a stop signal while it waits for one that does
/// not answer ends it at once, by that signal, as any program.
#[test]
fn a_stop_signal_ends_a_dry_run_s_wait_for_a_database_that_does_not_answer() {
    let Some(pg) = Postgres::start("a_stop_signal_ends_a_dry_run_s_wait") else {
        return;
    };
    let scratch = Scratch::new();
    let hung = Hung::stop(&pg);
    let running = pg
        .host(&scratch, "ha")
        .no_report()
        .arg("--dry-run")
        .stdin("k\ttrue\n")
        .spawn();
    let pid = running.pid();
    assert!(wait_until(Duration::from_secs(5), || has_a_socket(pid)));
    let signalled = std::time::Instant::now();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    let took = signalled.elapsed();
    drop(hung);
    out.code(130);
    assert!(took < Duration::from_secs(2), "{took:?}\n{}", out.dump());
    assert!(out.stdout().is_empty(), "{}", out.dump());
}
