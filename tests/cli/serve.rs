//! `lanes serve` and its clients (`submit`, `cancel`, `status`, `set`, `drain`, `close`): the
//! answers and their exit statuses, per-key order under concurrent clients, cancel of a job
//! that ignores SIGTERM, the socket's protection (mode 0600, another uid refused), malformed
//! and oversized requests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::support::*;

/// A running `lanes serve` on a socket in a scratch directory, its report beside it.
struct Server {
    running: Running,
    socket: PathBuf,
    report: PathBuf,
}

fn serve(scratch: &Scratch, args: &[&str]) -> Server {
    let socket = scratch.join("lanes.sock");
    let report = scratch.join("report.jsonl");
    let running = Run::new()
        .no_report()
        .scratch(scratch)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg("--report")
        .arg(&report)
        .args(args)
        .spawn();
    assert!(listening(&socket), "the socket did not appear");
    Server {
        running,
        socket,
        report,
    }
}

/// Ends the process group led by `pid` (a job of a server killed outright, which the test
/// started) with SIGKILL, and waits until its leader is gone.
fn kill_group_and_wait(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)));
}

/// Kills the first server of a test outright (SIGKILL) and waits for it, then ends the job it
/// left running, whose pid is in `pid`.
fn kill_server_and_its_job(first: &mut Spawned, scratch: &Scratch) {
    first.kill().unwrap();
    first.wait().unwrap();
    kill_group_and_wait(scratch.pid("pid"));
}

/// The second server of a test whose first server was killed outright
/// ([`kill_server_and_its_job`]): `second` written (a job run again ends at once), then `lanes
/// serve` on `journal` with `args`, drained.
fn second_server(scratch: &Scratch, journal: &Path, args: &[&str]) -> Server {
    scratch.write("second", "");
    let journal = journal.to_str().unwrap();
    let args: Vec<&str> = ["--journal", journal]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let server = serve(scratch, &args);
    assert_eq!(server.client("drain", &[]).code, 0);
    server
}

/// `lanes serve ARGS` on `lanes.sock` in `scratch`, spawned apart (to be killed outright by
/// the test), `D` the scratch directory, its output let go; returned once it listens.
fn serve_spawned(scratch: &Scratch, args: &[&str]) -> Spawned {
    let socket = scratch.join("lanes.sock");
    let server = Spawned::start(
        Command::new(BIN)
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .env("D", scratch.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(listening(&socket));
    server
}

/// Waits until a server accepts connections on `socket` (the file exists from the `bind`, a
/// moment before the `listen`).
fn listening(socket: &Path) -> bool {
    wait_until(Duration::from_secs(20), || {
        UnixStream::connect(socket).is_ok()
    })
}

impl Server {
    /// Runs a client command (`submit`, `cancel`, ...) against this server.
    fn client(&self, task: &str, args: &[&str]) -> Client {
        client_at(&self.socket, task, args, None)
    }

    /// Waits for the server to end; returns its exit status and report.
    fn end(self) -> (Output, Report) {
        let out = self.running.wait();
        let text = std::fs::read_to_string(&self.report).expect("the report");
        (out, Report::must_parse(&text))
    }
}

/// `lanes submit --json` against `socket`, its stdin, stdout and stderr pipes.
fn piped_submit(socket: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(["submit", "--json", "--socket"])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a client command left.
struct Client {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Client {
    /// Its stdout's lines, each decoded as an answer.
    fn answers(&self) -> Vec<Answer> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    fn answer(&self) -> Answer {
        let answers = self.answers();
        assert_eq!(answers.len(), 1, "{}\n{}", self.stdout, self.stderr);
        answers.into_iter().next().unwrap()
    }
}

fn client_at(socket: &Path, task: &str, args: &[&str], stdin: Option<&str>) -> Client {
    let mut child = Command::new(BIN)
        .arg(task)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lanes client");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Client {
        code: out.status.code().expect("the client exited"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One answer line, decoded strictly (protocol version 1).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    v: u32,
    answer: String,
    seq: Option<u64>,
    key: Option<String>,
    slot: Option<u32>,
    ahead: Option<usize>,
    replaced: Option<u64>,
    reason: Option<String>,
    why: Option<String>,
    dropped: Option<Vec<u64>>,
    stopped: Option<u64>,
    stopping: Option<Value>,
    max_concurrent: Option<usize>,
    previous: Option<usize>,
    admitting: Option<bool>,
    running: Option<Value>,
    waiting: Option<Value>,
    submitted: Option<u64>,
    ended: Option<u64>,
    record: Option<Value>,
    error: Option<String>,
    exit_code: Option<u8>,
    from_job: Option<u64>,
}

/// A job that ignores SIGTERM and runs until killed, its pid in `$D/pid`.
const STUBBORN: &str = "trap '' TERM; echo $$ > \"$D/pid\"; while :; do sleep 0.05; done";

/// Submits [`STUBBORN`] under `key` and waits until it runs.
fn start_stubborn(server: &Server, scratch: &Scratch, key: &str) {
    assert_eq!(server.client("submit", &[key, "--", STUBBORN]).code, 0);
    scratch.wait_for("pid", Duration::from_secs(20));
}

/// A job that waits for `$D/NAME`, then succeeds.
fn blocked_on(name: &str) -> String {
    await_file(name)
}

#[test]
fn concurrent_clients_get_correct_answers_and_every_key_keeps_its_order() {
    let scratch = Scratch::new();
    // Ten keys, twenty jobs each, submitted by twenty clients at once. Every job waits for
    // `go`, so that each answer is exactly predictable: the first job of a key starts (ten
    // slots for ten keys), every later one waits behind the jobs of its key before it.
    scratch.write(
        "job.sh",
        format!(
            "{}\necho \"$LANES_SEQ\" >> \"$D/order.$LANES_KEY\"\n",
            blocked_on("go")
        ),
    );
    let server = serve(&scratch, &["-j", "10"]);
    scratch.write(
        "submit.sh",
        "out=$(\"$L\" submit --socket \"$S\" --json \"$1\" -- 'sh \"$D/job.sh\"')\n\
         echo \"$? $out\" >> \"$D/answers\"\n",
    );
    let keys: String = (0..200).map(|i| format!("k{}\n", i % 10)).collect();
    let mut xargs = Command::new("xargs")
        .args(["-P", "20", "-n", "1", "sh"])
        .arg(scratch.join("submit.sh"))
        .env("L", BIN)
        .env("S", &server.socket)
        .env("D", scratch.path())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    xargs
        .stdin
        .take()
        .unwrap()
        .write_all(keys.as_bytes())
        .unwrap();
    assert!(xargs.wait().unwrap().success());
    let mut by_key: BTreeMap<String, Vec<(u64, i32, Answer)>> = BTreeMap::new();
    let lines = scratch.lines("answers");
    assert_eq!(lines.len(), 200);
    for line in &lines {
        let (code, json) = line.split_once(' ').unwrap();
        let answer: Answer = serde_json::from_str(json).unwrap();
        assert_eq!(answer.v, 1);
        let key = answer.key.clone().unwrap();
        by_key
            .entry(key)
            .or_default()
            .push((answer.seq.unwrap(), code.parse().unwrap(), answer));
    }
    let mut seqs: Vec<u64> = by_key.values().flatten().map(|(seq, _, _)| *seq).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=200).collect::<Vec<_>>(),
        "one seq per submission"
    );
    for (key, answers) in &mut by_key {
        answers.sort_by_key(|(seq, _, _)| *seq);
        assert_eq!(answers.len(), 20, "{key}");
        for (i, (seq, code, answer)) in answers.iter().enumerate() {
            if i == 0 {
                assert_eq!(
                    (answer.answer.as_str(), *code),
                    ("started", 0),
                    "{answer:?}"
                );
                assert!(answer.slot.is_some_and(|s| (1..=10).contains(&s)));
            } else {
                assert_eq!(
                    (answer.answer.as_str(), *code),
                    ("queued", 10),
                    "{answer:?}"
                );
                assert_eq!(answer.ahead, Some(i), "seq {seq} of {key}");
            }
        }
    }
    scratch.write("go", "");
    let drain = server.client("drain", &[]);
    assert_eq!(drain.code, 0, "{}", drain.stderr);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 200, "one record each");
    for (key, answers) in &by_key {
        let expected: Vec<String> = answers.iter().map(|(seq, _, _)| seq.to_string()).collect();
        assert_eq!(
            scratch.lines(&format!("order.{key}")),
            expected,
            "{key} ran in order"
        );
        let records = report.by_key(key);
        for pair in records.windows(2) {
            assert!(
                pair[1].start_ms() >= pair[0].end_ms(),
                "{key}: one at a time"
            );
        }
        assert!(records.iter().all(|r| r.outcome == "succeeded"));
    }
}

#[test]
fn cancel_stops_a_job_that_ignores_sigterm_and_drops_the_keys_waiting_jobs() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--grace", "300ms"]);
    let first = server.client("submit", &["--json", "a", "--", STUBBORN]);
    assert_eq!((first.code, first.answer().answer.as_str()), (0, "started"));
    for _ in 0..2 {
        let queued = server.client("submit", &["a", "--", "echo never"]);
        assert_eq!(queued.code, 10, "{}", queued.stdout);
    }
    let other = server.client("submit", &["--json", "b", "--", &blocked_on("go")]);
    assert_eq!(other.answer().answer, "started");
    scratch.wait_for("pid", Duration::from_secs(20));
    let pid = scratch.pid("pid");
    let asked = Instant::now();
    let cancel = server.client("cancel", &["--json", "a"]);
    let took = asked.elapsed();
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let answer = cancel.answer();
    assert_eq!(answer.answer, "cancelled");
    assert_eq!(answer.dropped, Some(vec![2, 3]));
    assert_eq!(answer.stopped, Some(1));
    assert!(
        took >= Duration::from_millis(300),
        "returned after the grace: {took:?}"
    );
    assert!(!alive(pid), "the job's process is gone when cancel returns");
    // The key takes new jobs at once.
    let next = server.client("submit", &["--json", "a", "--", "echo next"]);
    assert_eq!((next.code, next.answer().answer.as_str()), (0, "started"));
    scratch.write("go", "");
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    // A cancelled job does not make the exit status 1 (it was asked for).
    out.code(0);
    assert_eq!(report.job(1).result(), ("interrupted", Some("cancelled")));
    assert_eq!(report.job(1).signal.as_deref(), Some("SIGKILL"));
    for seq in [2, 3] {
        assert_eq!(report.job(seq).result(), ("interrupted", Some("cancelled")));
        assert!(!report.job(seq).started);
    }
    assert_eq!(report.job(4).result(), ("succeeded", None));
    assert_eq!(report.job(5).result(), ("succeeded", None));
}

#[test]
fn status_set_and_close() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    for key in ["a", "a", "b", "c"] {
        let _ = server.client("submit", &[key, "--", &blocked_on("never")]);
    }
    let status = server.client("status", &["--json"]).answer();
    assert_eq!(status.answer, "status");
    assert_eq!(status.max_concurrent, Some(2));
    assert_eq!(status.admitting, Some(true));
    assert_eq!((status.submitted, status.ended), (Some(4), Some(0)));
    let running: Vec<(u64, String, u64)> = status
        .running
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["seq"].as_u64().unwrap(),
                r["key"].as_str().unwrap().to_owned(),
                r["slot"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        running,
        vec![(1, "a".to_owned(), 1), (3, "b".to_owned(), 2)]
    );
    assert_eq!(
        status.waiting.unwrap(),
        serde_json::json!([
            {"key": "a", "jobs": [{"seq": 2, "ahead": 1}]},
            {"key": "c", "jobs": [{"seq": 4, "ahead": 0}]},
        ])
    );
    let human = server.client("status", &[]);
    assert!(
        human.stdout.contains("waiting (key a): seq 2 (1 ahead)"),
        "{}",
        human.stdout
    );
    // Lowering the cap stops nothing.
    let set = server.client("set", &["--json", "-j", "1"]).answer();
    assert_eq!((set.max_concurrent, set.previous), (Some(1), Some(2)));
    let status = server.client("status", &["--json"]).answer();
    assert_eq!(status.running.unwrap().as_array().unwrap().len(), 2);
    // close: every job stopped, the connection held until the report is written.
    let close = server.client("close", &["--json"]);
    assert_eq!(close.code, 0, "{}", close.stderr);
    let answers = close.answers();
    let told: Vec<(&str, Option<u8>)> = answers
        .iter()
        .map(|answer| (answer.answer.as_str(), answer.exit_code))
        .collect();
    // Its jobs were stopped (interrupted): the server's exit status is 1.
    assert_eq!(told, [("ending", None), ("ended", Some(1))]);
    let text = std::fs::read_to_string(&server.report).unwrap();
    assert!(
        text.contains("\"type\":\"summary\""),
        "the report is whole when close returns"
    );
    let (out, report) = server.end();
    out.code(1);
    for seq in 1..=4 {
        assert_eq!(report.job(seq).result(), ("interrupted", Some("shutdown")));
    }
    assert!(!server_socket_exists(&scratch));
}

/// A shell command that runs `lanes TASK ARGS… --socket SOCKET` from inside a job, its stdout
/// to `$D/NAME.out`, its stderr to `$D/NAME.err` and its exit status to `$D/NAME.code`.
fn client_in_job(socket: &Path, task: &str, args: &str, name: &str) -> String {
    // The status is written aside and renamed into place: `NAME.code` appears whole, never
    // empty between its creation and its write.
    format!(
        "{} {task} --socket {} {args} > \"$D/{name}.out\" 2> \"$D/{name}.err\"; \
         echo $? > \"$D/{name}.code.new\"; mv \"$D/{name}.code.new\" \"$D/{name}.code\"",
        sh_quote(BIN),
        sh_quote(socket.to_str().unwrap()),
    )
}

#[test]
fn a_job_that_drains_its_own_server_is_answered_at_once_and_the_server_ends_after_it() {
    // The job's `lanes drain` used to wait for the server's end, which waited for the job.
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    let drain = client_in_job(&server.socket, "drain", "--json", "drain");
    assert_eq!(server.client("submit", &["a", "--", &drain]).code, 0);
    scratch.wait_for("drain.code", Duration::from_secs(20));
    assert_eq!(
        scratch.read("drain.code").trim(),
        "0",
        "{}",
        scratch.read("drain.err")
    );
    let answers: Vec<Answer> = scratch
        .lines("drain.out")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 1, "no `ended`: {answers:?}");
    assert_eq!(answers[0].answer, "ending");
    assert_eq!(answers[0].why.as_deref(), Some("draining"));
    assert_eq!(answers[0].from_job, Some(1));
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 1);
    assert_eq!(report.job(1).result(), ("succeeded", None));
    // Asked from a job of another server, `drain` waits for that server's end as from
    // outside: only the server's own jobs are told apart. For people, the answer says why it
    // does not wait.
    let (other, third) = (Scratch::new(), Scratch::new());
    let second = serve(&other, &["-j", "1"]);
    let first_again = serve(&third, &["-j", "1"]);
    let across = format!(
        "{}; {}",
        client_in_job(&second.socket, "drain", "", "across"),
        client_in_job(&first_again.socket, "drain", "", "own")
    );
    assert_eq!(first_again.client("submit", &["a", "--", &across]).code, 0);
    third.wait_for("own.code", Duration::from_secs(20));
    assert_eq!(third.read("across.code").trim(), "0");
    assert!(
        third
            .read("across.out")
            .contains("ended: its report is written"),
        "{}",
        third.read("across.out")
    );
    assert!(
        third
            .read("own.out")
            .contains("asked from inside job 1, which the server's end waits for"),
        "{}",
        third.read("own.out")
    );
    second.end().0.code(0);
    first_again.end().0.code(0);
}

#[test]
fn a_server_s_jobs_reach_it_by_default_and_a_run_inside_one_is_told_by_that_job() {
    // The server was started with --socket and a LANES_SOCKET naming another server: its jobs'
    // clients reach their own server all the same (LANES_SOCKET is set for them). A `lanes` run
    // inside job 2 numbers its own job 1: the `drain` from there is told to come from job 2.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let report = scratch.join("report.jsonl");
    let elsewhere = scratch.join("elsewhere.sock");
    let running = Run::new()
        .no_report()
        .scratch(&scratch)
        .env("LANES_SOCKET", &elsewhere)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg("--report")
        .arg(&report)
        .args(["-j", "2"])
        .spawn();
    assert!(listening(&socket), "the socket did not appear");
    let server = Server {
        running,
        socket,
        report,
    };
    assert_eq!(
        server
            .client("submit", &["--wait", "first", "--", "true"])
            .code,
        0
    );
    let drain = format!(
        "{} drain --json > \"$D/drain.out\" 2> \"$D/drain.err\"; \
         echo $? > \"$D/drain.code.new\"; mv \"$D/drain.code.new\" \"$D/drain.code\"",
        sh_quote(BIN)
    );
    let job = format!(
        "echo \"$LANES_SOCKET\" > \"$D/told\"; {} --output none ::: {}",
        sh_quote(BIN),
        sh_quote(&drain)
    );
    assert_eq!(server.client("submit", &["b", "--", &job]).code, 0);
    scratch.wait_for("drain.code", Duration::from_secs(20));
    assert_eq!(
        scratch.read("told").trim(),
        server.socket.to_str().unwrap(),
        "the job's LANES_SOCKET"
    );
    assert_eq!(
        scratch.read("drain.code").trim(),
        "0",
        "{}",
        scratch.read("drain.err")
    );
    let answer: Answer = serde_json::from_str(scratch.read("drain.out").trim()).unwrap();
    assert_eq!(
        (answer.answer.as_str(), answer.from_job),
        ("ending", Some(2))
    );
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 2);
}

#[test]
fn a_wait_that_comes_back_through_another_key_to_the_job_asking_is_refused() {
    // Job 1 (key a) waits for job 2 (key b), which asks to wait for a new job of key a: that
    // job would wait behind job 1, which waits for job 2. Slots are free: only the waits loop.
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "3"]);
    let inner = client_in_job(&server.socket, "submit", "--wait a -- true", "inner");
    let middle = client_in_job(
        &server.socket,
        "submit",
        &format!("--wait b -- {}", sh_quote(&inner)),
        "middle",
    );
    assert_eq!(server.client("submit", &["a", "--", &middle]).code, 0);
    scratch.wait_for("middle.code", Duration::from_secs(20));
    assert_eq!(scratch.read("inner.code").trim(), "2");
    let said = scratch.read("inner.err");
    assert!(
        said.contains(
            "`submit --wait` of key a from inside job 2: the job would wait for job 1, then \
             job 2, each waiting for the next"
        ),
        "{said}"
    );
    // Job 2 went on to its end (its command's last word succeeded), and job 1's wait with it.
    assert_eq!(scratch.read("middle.code").trim(), "0");
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(
        report.jobs.len(),
        2,
        "nothing admitted for the refused wait"
    );
}

#[test]
fn waiting_clients_never_take_the_connections_status_cancel_and_close_need() {
    // 64 descriptors: the server serves 16 connections at once, of which 14 may wait for a
    // record. With those 14 waiting, the next --wait is refused, and status and cancel (which
    // ends every wait) still get through. Then, under a cap that lets every waited job start,
    // the jobs never take the descriptors the connections need.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let report = scratch.join("report.jsonl");
    let report = ["--report", report.to_str().unwrap()];
    let _server = server_under(
        64,
        &socket,
        &[&["-j", "1"][..], &report].concat(),
        Stdio::null(),
    );
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", &blocked_on("never")], None).code,
        0
    );
    let mut waiters: Vec<std::process::Child> = (0..14)
        .map(|_| spawn_client(&socket, "submit", &["--json", "--wait", "a", "--", "true"]))
        .collect();
    for waiter in &mut waiters {
        let (answer, _) = first_answer(waiter);
        assert_eq!(answer.answer, "queued");
    }
    let refused = client_at(&socket, "submit", &["--wait", "a", "--", "true"], None);
    assert_eq!(refused.code, 2);
    assert!(
        refused
            .stderr
            .contains("14 clients wait for their jobs' records already"),
        "{}",
        refused.stderr
    );
    assert_eq!(client_at(&socket, "status", &[], None).code, 0);
    assert_eq!(client_at(&socket, "cancel", &["a"], None).code, 0);
    for waiter in &mut waiters {
        // Its job was dropped by the cancel: interrupted, exit status 1.
        assert_eq!(ended_by(waiter, "submit --wait").code(), Some(1));
    }
    assert_eq!(client_at(&socket, "set", &["-j", "100"], None).code, 0);
    let mut waiters: Vec<std::process::Child> = (1..=14)
        .map(|i| {
            let key = format!("k{i}");
            spawn_client(
                &socket,
                "submit",
                &["--json", "--wait", &key, "--", &blocked_on("never")],
            )
        })
        .collect();
    for waiter in &mut waiters {
        let _ = first_answer(waiter);
    }
    for (task, args) in [
        ("status", &[][..]),
        ("cancel", &["k1"][..]),
        ("close", &[][..]),
    ] {
        let mut client = spawn_client(&socket, task, args);
        assert_eq!(ended_by(&mut client, task).code(), Some(0), "{task}");
    }
    for waiter in &mut waiters {
        assert_eq!(ended_by(waiter, "submit --wait").code(), Some(1));
    }
}

#[test]
fn a_server_with_no_descriptors_for_jobs_fails_them_and_says_so_instead_of_holding_them() {
    // Under `ulimit -n 26` the server's own descriptors and those it keeps for connections
    // leave none for a job: it says so as it starts, and a job fails (`spawn_error`) instead
    // of waiting for ever, `queued`.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let err = scratch.join("server.err");
    let mut server = server_under(
        26,
        &socket,
        &[],
        std::fs::File::create(&err).unwrap().into(),
    );
    // Said as it starts serving (a connection may be made a moment before).
    let says = || std::fs::read_to_string(&err).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || says()
            .contains("jobs will fail to start for want of them")),
        "{}",
        says()
    );
    // Its answer is its failure, not `queued` (exit 10) for a job that will never start: the
    // start is tried once more, and the answer waits for that try.
    let answered = client_at(&socket, "submit", &["j", "--", "true"], None);
    assert_eq!(answered.code, 1, "{}{}", answered.stdout, answered.stderr);
    assert!(
        answered.stdout.contains("failed seq 1 (key j)") && answered.stdout.contains("spawn_error"),
        "{}",
        answered.stdout
    );
    let waited = client_at(&socket, "submit", &["--wait", "k", "--", "true"], None);
    assert_eq!(waited.code, 1, "{}", waited.stderr);
    let said = format!("{}{}", waited.stdout, waited.stderr);
    assert!(
        said.contains("seq 2 (key k) failed (spawn_error)"),
        "{said}"
    );
    assert_eq!(client_at(&socket, "close", &[], None).code, 0);
    // A job failed: the server's exit status says so.
    assert_eq!(ended_by(&mut server, "the server").code(), Some(1));
}

#[test]
fn under_a_tiny_descriptor_limit_fewer_clients_may_wait_and_status_cancel_close_get_through() {
    // `ulimit -n 19`: spares for two connections only beside the server's own, so one client
    // may wait for its record; the others are refused, and status, cancel and close are
    // still served. The batch delay keeps the waiting job waiting.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let batching = [
        "--batch-size",
        "5",
        "--batch-delay",
        "60s",
        "--command",
        "echo {}",
    ];
    let _server = server_under(19, &socket, &batching, Stdio::null());
    let mut waiters: Vec<std::process::Child> = (0..4)
        .map(|i| {
            spawn_client(
                &socket,
                "submit",
                &["--json", "--wait", "a", "--", &format!("x{i}")],
            )
        })
        .collect();
    let mut waiting = 0;
    let mut refused = 0;
    for waiter in &mut waiters {
        let mut line = String::new();
        BufReader::new(waiter.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.contains("\"error\"") {
            assert!(
                line.contains("already, the most that may wait at once"),
                "{line}"
            );
            assert_eq!(ended_by(waiter, "a refused waiter").code(), Some(2));
            refused += 1;
        } else {
            assert!(line.contains("\"queued\""), "{line}");
            waiting += 1;
        }
    }
    assert!(
        waiting >= 1 && refused >= 1,
        "{waiting} waiting, {refused} refused"
    );
    for (task, args) in [
        ("status", &[][..]),
        ("cancel", &["a"][..]),
        ("close", &[][..]),
    ] {
        let mut client = spawn_client(&socket, task, args);
        assert_eq!(ended_by(&mut client, task).code(), Some(0), "{task}");
    }
    for waiter in &mut waiters {
        let _ = ended_by(waiter, "submit --wait");
    }
}

#[test]
fn a_waiting_client_holds_one_descriptor_of_the_server() {
    // The server watches a waiting client for a hang-up on the connection's own descriptor,
    // not on a second one: the spares it keeps for connections count one each, and a second
    // descriptor per waiter would take those the listener needs to accept `cancel`.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let server = Spawned::start(
        Command::new(BIN)
            .args(["serve", "-j", "1", "--socket"])
            .arg(&socket)
            .arg("--report")
            .arg(scratch.join("report.jsonl"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(listening(&socket));
    let sockets = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.id()))
            .expect("the server's descriptors")
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    };
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", &blocked_on("never")], None).code,
        0
    );
    // The connections of the clients that ended close a moment after them.
    let samples = |n| {
        (0..n).map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            sockets()
        })
    };
    let idle = samples(50).min().unwrap();
    let mut waiters: Vec<std::process::Child> = (0..14)
        .map(|_| spawn_client(&socket, "submit", &["--json", "--wait", "a", "--", "true"]))
        .collect();
    for waiter in &mut waiters {
        assert_eq!(first_answer(waiter).0.answer, "queued");
    }
    let most = samples(50).max().unwrap();
    assert_eq!(most, idle + 14, "{idle} sockets idle");
    assert_eq!(client_at(&socket, "cancel", &["a"], None).code, 0);
    for waiter in &mut waiters {
        assert_eq!(ended_by(waiter, "submit --wait").code(), Some(1));
    }
}

#[test]
fn a_drain_runs_a_batch_waiting_out_its_delay_at_once() {
    // Draining is the server's end of input: nothing can join the batch any more.
    let scratch = Scratch::new();
    let server = serve(
        &scratch,
        &[
            "-j",
            "2",
            "--batch-size",
            "5",
            "--batch-delay",
            "60s",
            "--command",
            "echo {} >> \"$D/ran\"",
        ],
    );
    for arg in ["one", "two"] {
        assert_eq!(server.client("submit", &["a", "--", arg]).code, 10);
    }
    let asked = Instant::now();
    assert_eq!(server.client("drain", &[]).code, 0);
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "drain took {:?}",
        asked.elapsed()
    );
    let report_path = server.report.clone();
    server.running.wait().code(0);
    assert_eq!(scratch.lines("ran"), ["one two"]);
    // Read as plain JSON: the records have `batch` set.
    let outcomes: Vec<(u64, String)> = crate::records::events(&report_path)
        .iter()
        .filter(|r| r["type"] == "job")
        .map(|r| (r["batch"].as_u64().unwrap(), r["outcome"].to_string()))
        .collect();
    assert_eq!(outcomes.len(), 2);
    assert!(
        outcomes
            .iter()
            .all(|(batch, outcome)| *batch == 1 && outcome == "\"succeeded\""),
        "{outcomes:?}"
    );
}

#[test]
fn a_job_that_closes_its_own_server_is_stopped_with_the_rest_and_the_server_ends() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    assert_eq!(
        server
            .client("submit", &["b", "--", &blocked_on("never")])
            .code,
        0
    );
    let close = client_in_job(&server.socket, "close", "", "close");
    assert_eq!(server.client("submit", &["a", "--", &close]).code, 0);
    let (out, report) = server.end();
    out.code(1);
    assert_eq!(report.jobs.len(), 2);
    for seq in [1, 2] {
        assert_eq!(report.job(seq).result(), ("interrupted", Some("shutdown")));
    }
}

#[test]
fn submit_wait_of_its_own_key_from_inside_a_job_is_refused_and_of_another_key_waits() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    let job = format!(
        "{}; {}",
        client_in_job(&server.socket, "submit", "--wait b -- 'exit 7'", "other"),
        client_in_job(&server.socket, "submit", "--wait a -- true", "own")
    );
    assert_eq!(server.client("submit", &["a", "--", &job]).code, 0);
    scratch.wait_for("own.code", Duration::from_secs(20));
    assert_eq!(
        scratch.read("other.code").trim(),
        "7",
        "the job of key b ran and was waited for"
    );
    assert_eq!(scratch.read("own.code").trim(), "2");
    let said = scratch.read("own.err");
    assert!(
        said.contains("`submit --wait` of key a from inside job 1, of the same key")
            && said.contains("submit it without --wait"),
        "{said}"
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(1);
    // Nothing was admitted for the refused submission.
    let mut seqs: Vec<(u64, String)> = report
        .jobs
        .iter()
        .map(|job| (job.seq, job.key.clone().unwrap()))
        .collect();
    seqs.sort();
    assert_eq!(seqs, [(1, "a".to_owned()), (2, "b".to_owned())]);
    // Under --cancel-in-progress the new job would stop the job waiting for it: refused, and
    // said so.
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--cancel-in-progress"]);
    let job = client_in_job(&server.socket, "submit", "--wait a -- true", "own");
    assert_eq!(server.client("submit", &["a", "--", &job]).code, 0);
    scratch.wait_for("own.code", Duration::from_secs(20));
    assert_eq!(scratch.read("own.code").trim(), "2");
    let said = scratch.read("own.err");
    assert!(
        said.contains("under --cancel-in-progress the job would stop job 1, which waits for it"),
        "{said}"
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 1);
}

fn server_socket_exists(scratch: &Scratch) -> bool {
    scratch.join("lanes.sock").exists()
}

#[test]
fn drain_runs_what_was_admitted_and_refuses_the_rest() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    assert_eq!(
        server
            .client("submit", &["a", "--", &blocked_on("go")])
            .code,
        0
    );
    assert_eq!(server.client("submit", &["b", "--", "echo b"]).code, 10);
    let mut drain = Command::new(BIN)
        .args(["drain", "--json", "--socket"])
        .arg(&server.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(drain.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"answer\":\"ending\""), "{first}");
    let refused = server.client("submit", &["--json", "c", "--", "echo c"]);
    assert_eq!(refused.code, 13);
    assert_eq!(refused.answer().why.as_deref(), Some("draining"));
    scratch.write("go", "");
    assert!(drain.wait().unwrap().success());
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 2);
    assert!(report.jobs.iter().all(|job| job.outcome == "succeeded"));
}

#[test]
fn submit_wait_exits_as_the_job_did_and_lines_on_stdin_are_answered_in_order() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "4"]);
    let waited = server.client(
        "submit",
        &["--wait", "--json", "w", "--", "echo out; exit 3"],
    );
    assert_eq!(waited.code, 3, "{}", waited.stderr);
    let lines: Vec<&str> = waited.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "the answer, then the record: {}",
        waited.stdout
    );
    let answer: Answer = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(answer.answer, "started");
    let record: JobRecord = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(record.exit_code, Some(3));
    assert_eq!(record.result(), ("failed", Some("exit_status")));
    // Human: the record's summary on stderr, the exit status the job's.
    let plain = server.client("submit", &["--wait", "w", "--", "exit 0"]);
    assert_eq!(plain.code, 0);
    assert!(plain.stderr.contains("succeeded"), "{}", plain.stderr);
    // A failure says its exit status, as a run's summary does; a key past 80 characters is
    // cut there (the report and --json have it whole).
    let long_key = "k".repeat(200);
    let failed = server.client("submit", &["--wait", &long_key, "--", "exit 7"]);
    assert_eq!(failed.code, 7);
    assert_eq!(
        failed.stderr,
        format!(
            "seq 3 (key {}…) failed (exit_status, exit 7)\n",
            "k".repeat(80)
        ),
        "one line, written whole"
    );
    let batch = client_at(
        &server.socket,
        "submit",
        &["--json"],
        Some("x\techo 1\nx\techo 2\n\n# comment\ny\techo 3\n"),
    );
    let answers: Vec<(String, u64)> = batch
        .answers()
        .into_iter()
        .map(|a| (a.answer, a.seq.unwrap()))
        .collect();
    assert_eq!(answers[0].1 + 1, answers[1].1);
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0].0, "started");
    let bad = client_at(&server.socket, "submit", &[], Some("no tab here\n"));
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("stdin line 1"), "{}", bad.stderr);
    // Bytes that are not UTF-8 are refused, not changed; a byte order mark is no part of the
    // first key; an empty command is named as such. Only the good line is sent.
    let mut child = piped_submit(&server.socket);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"\xEF\xBB\xBFbom\techo bom\na\t\xff\xfe\nc\t\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("stdin line 2") && stderr.contains("UTF-8"),
        "{stderr}"
    );
    assert!(stderr.contains("stdin line 3: empty command"), "{stderr}");
    let sent: Vec<Answer> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].key.as_deref(), Some("bom"));
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert_eq!(report.jobs.len(), 7);
}

#[test]
fn coalesced_answers_name_the_job_replaced() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1", "--coalesce", "latest"]);
    assert_eq!(
        server
            .client("submit", &["a", "--", &blocked_on("go")])
            .code,
        0
    );
    assert_eq!(server.client("submit", &["a", "--", "echo 2"]).code, 10);
    let coalesced = server.client("submit", &["--json", "a", "--", "echo 3"]);
    assert_eq!(coalesced.code, 11);
    let answer = coalesced.answer();
    assert_eq!(
        (answer.answer.as_str(), answer.replaced, answer.ahead),
        ("coalesced", Some(2), Some(1))
    );
    // The supersede is journaled before the record's end: a server started after a crash
    // records job 2 superseded, never runs it.
    let journal = scratch.read("lanes.journal");
    let superseded = journal.find("{\"p\":2,\"b\":3}");
    assert!(superseded.is_some(), "{journal}");
    assert!(
        journal
            .find("{\"e\":2}")
            .is_none_or(|ended| superseded < Some(ended)),
        "{journal}"
    );
    scratch.write("go", "");
    assert_eq!(server.client("drain", &[]).code, 0);
    let out = server.running.wait();
    out.code(0);
    let records: Vec<Value> = crate::records::events(&server.report)
        .into_iter()
        .filter(|r| r["type"] == "job")
        .collect();
    let second = records.iter().find(|r| r["seq"] == 2).unwrap();
    assert_eq!(second["reason"], "superseded");
    assert_eq!(second["superseded_by"], 3);
}

#[test]
fn a_malformed_request_gets_an_error_and_the_connection_goes_on() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &[]);
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut ask = |line: &[u8]| -> Answer {
        stream.write_all(line).unwrap();
        let mut answer = String::new();
        reader.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    };
    let bad = ask(b"not json\n");
    assert_eq!(bad.answer, "error");
    assert!(bad.error.unwrap().contains("not a valid JSON object"));
    let old = ask(b"{\"v\":9,\"op\":\"status\"}\n");
    assert!(old.error.unwrap().contains("version 9"));
    let good = ask(b"{\"v\":1,\"op\":\"status\"}\n");
    assert_eq!(good.answer, "status");
    // Blank lines are no requests (no answer); a byte order mark is no part of one.
    let after_blanks = ask(b"\n  \r\n\t\n\xef\xbb\xbf{\"v\":1,\"op\":\"status\"}\n");
    assert_eq!(after_blanks.answer, "status", "{after_blanks:?}");
    let submitted = server.client("submit", &["k", "--", "true"]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 1);
}

/// A client that ends its writing mid-request (killed, or a bug) admits nothing: the cut-off
/// line gets an `error` answer. A last request that is whole but has no newline is a request.
#[test]
fn a_request_cut_off_by_the_clients_end_admits_nothing_and_a_whole_last_line_is_read() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &[]);
    let send_and_end = |bytes: &[u8]| -> Vec<Answer> {
        let mut stream = UnixStream::connect(&server.socket).unwrap();
        stream.write_all(bytes).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answers = String::new();
        stream.read_to_string(&mut answers).unwrap();
        answers
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    };
    let cut = send_and_end(br#"{"v":1,"op":"submit","key":"cut","command":"touch cut"#);
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0].answer, "error");
    assert!(
        cut[0]
            .error
            .as_deref()
            .unwrap()
            .contains("not a valid JSON object"),
        "{cut:?}"
    );
    let whole = send_and_end(br#"{"v":1,"op":"submit","key":"whole","command":"true"}"#);
    assert_eq!(whole.len(), 1, "{whole:?}");
    assert_eq!(whole[0].answer, "started", "{whole:?}");
    // Blank lines between requests are no requests: one answer for each request.
    let spaced =
        send_and_end(b"\n{\"v\":1,\"op\":\"status\"}\n \r\n\t\n{\"v\":1,\"op\":\"status\"}\n\n");
    let answers: Vec<&str> = spaced.iter().map(|a| a.answer.as_str()).collect();
    assert_eq!(answers, ["status", "status"], "{spaced:?}");
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    let keys: Vec<&str> = report
        .jobs
        .iter()
        .filter_map(|job| job.key.as_deref())
        .collect();
    assert_eq!(keys, ["whole"]);
    assert!(!scratch.join("cut").exists());
}

/// A server that serves at most 16 connections at once: with 64 descriptors (`ulimit -n`), a
/// quarter.
fn serve_16_at_once(scratch: &Scratch, options: &[&str]) -> Server {
    let socket = scratch.join("lanes.sock");
    let report = scratch.join("report.jsonl");
    let running = Run::new()
        .no_report()
        .scratch(scratch)
        .wrapper("ulimit -n 64")
        .arg("serve")
        .args(options)
        .arg("--socket")
        .arg(&socket)
        .arg("--report")
        .arg(&report)
        .spawn();
    assert!(listening(&socket), "the socket did not appear");
    Server {
        running,
        socket,
        report,
    }
}

/// Connects to `socket` until `places` connections are held, each sent `request` and answered
/// with an answer containing `served`. A probe of `listening` may still hold a place for a
/// moment: a connection refused for it is tried again.
fn take_places(socket: &Path, places: usize, request: &str, served: &str) -> Vec<UnixStream> {
    let mut held = Vec::new();
    while held.len() < places {
        let mut stream = UnixStream::connect(socket).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let answer = answer_line(&mut stream);
        if answer.contains(served) {
            held.push(stream);
        } else {
            assert!(answer.contains("connections already"), "{answer}");
        }
    }
    held
}

/// One more connection to `socket`, whose every place is taken, is refused with an error.
fn assert_refused(socket: &Path, places: usize) {
    let mut refused = UnixStream::connect(socket).unwrap();
    let mut answer = String::new();
    refused.read_to_string(&mut answer).unwrap();
    assert!(
        answer.contains(&format!("the server serves {places} connections already")),
        "{answer}"
    );
}

#[test]
fn connections_beyond_the_most_served_at_once_are_refused_and_the_rest_go_on() {
    // With 64 descriptors the server serves at most 16 connections at once (a quarter), so
    // that idle clients cannot take the descriptors its jobs need.
    let scratch = Scratch::new();
    let server = serve_16_at_once(&scratch, &[]);
    // Sixteen clients that stay connected, each served once.
    let status = "{\"v\":1,\"op\":\"status\"}\n";
    let mut open = take_places(&server.socket, 16, status, "\"answer\":\"status\"");
    // None of them idle for seconds (which would let a new connection take its place).
    for stream in &mut open {
        stream.write_all(status.as_bytes()).unwrap();
        assert!(answer_line(stream).contains("\"answer\":\"status\""));
    }
    assert_refused(&server.socket, 16);
    let client = server.client("status", &[]);
    assert_eq!(client.code, 2, "{}", client.stderr);
    // One leaves: a client is served again.
    drop(open.pop());
    assert!(wait_until(Duration::from_secs(10), || server
        .client("status", &[])
        .code
        == 0));
    // The connections still open were not disturbed.
    open[0].write_all(status.as_bytes()).unwrap();
    assert!(answer_line(&mut open[0]).contains("\"answer\":\"status\""));
    drop(open);
    assert_eq!(server.client("drain", &[]).code, 0);
    server.end().0.code(0);
}

#[test]
fn when_every_place_is_taken_the_connection_idle_longest_makes_room_for_a_new_one() {
    // Sixteen clients that connected and went quiet hold every place: after a few seconds
    // idle, the one idle longest is closed for a new client instead of the new one being
    // refused until the idle timeout (a minute).
    let scratch = Scratch::new();
    let server = serve_16_at_once(&scratch, &["--grace", "20s"]);
    let status = "{\"v\":1,\"op\":\"status\"}\n";
    // The first connection, idle longest, owes its client an answer: a `cancel` that waits
    // out the grace period of a job ignoring SIGTERM. It is never closed to make room.
    let mut owing = take_places(&server.socket, 1, status, "\"answer\":\"status\"");
    let stubborn = "{\"v\":1,\"op\":\"submit\",\"key\":\"x\",\"command\":\"trap '' TERM; \
                    touch \\\"$D/up\\\"; sleep 60\"}\n";
    owing[0].write_all(stubborn.as_bytes()).unwrap();
    assert!(answer_line(&mut owing[0]).contains("\"answer\":\"started\""));
    scratch.wait_for("up", Duration::from_secs(10));
    owing[0]
        .write_all(b"{\"v\":1,\"op\":\"cancel\",\"key\":\"x\"}\n")
        .unwrap();
    let mut open = take_places(&server.socket, 15, status, "\"answer\":\"status\"");
    // The others stay busy now and then; the first of them says nothing more.
    let mut refused = 0;
    let served = wait_until(Duration::from_secs(30), || {
        for stream in &mut open[1..] {
            stream.write_all(status.as_bytes()).unwrap();
            assert!(answer_line(stream).contains("\"answer\":\"status\""));
        }
        let client = server.client("status", &[]);
        if client.code != 0 {
            assert!(
                client.stderr.contains("connections already"),
                "{}",
                client.stderr
            );
            refused += 1;
        }
        client.code == 0
    });
    assert!(served, "no client was served while a connection sat idle");
    assert!(refused > 0, "served before the idle one had been idle long");
    // The one owing an answer is open still: its cancel's answer comes once the job is gone.
    owing[0].set_nonblocking(true).unwrap();
    let mut byte = [0u8];
    assert!(
        matches!(owing[0].read(&mut byte), Err(ref err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "the connection owing an answer was closed"
    );
    owing[0].set_nonblocking(false).unwrap();
    // The idle one was closed (its read ends), and only it.
    open[0]
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(open[0].read_to_end(&mut rest).unwrap(), 0);
    for stream in &mut open[1..] {
        stream.write_all(status.as_bytes()).unwrap();
        assert!(answer_line(stream).contains("\"answer\":\"status\""));
    }
    drop(open);
    // It still reads requests: one sent now is answered after the cancel's answer.
    owing[0].write_all(status.as_bytes()).unwrap();
    let cancelled = answer_line(&mut owing[0]);
    assert!(
        cancelled.contains("\"answer\":\"cancelled\""),
        "{cancelled}"
    );
    let then = answer_line(&mut owing[0]);
    assert!(then.contains("\"answer\":\"status\""), "{then:?}");
    drop(owing);
    assert_eq!(server.client("drain", &[]).code, 0);
    server.end().0.code(0);
}

#[test]
fn an_oversized_request_is_answered_with_an_error() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &[]);
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let writer = {
        let mut stream = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = stream.write_all(&vec![b'x'; (1 << 20) + 10]);
        })
    };
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    writer.join().unwrap();
    assert!(answer.contains("\"answer\":\"error\""), "{answer}");
    assert!(answer.contains("longer than"), "{answer}");
    assert_eq!(answer.lines().count(), 1);
    assert_eq!(server.client("drain", &[]).code, 0);
    server.end().0.code(0);
}

#[test]
fn the_socket_is_0600_in_a_private_directory_and_another_uid_is_refused() {
    let scratch = Scratch::new();
    // The default socket: under $XDG_RUNTIME_DIR, in a directory made 0700.
    let runtime = scratch.mkdir("run");
    let running = Run::new()
        .no_report()
        .env("XDG_RUNTIME_DIR", &runtime)
        .arg("serve")
        .spawn();
    let socket = runtime.join("lanes/lanes.sock");
    assert!(listening(&socket));
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(&runtime.join("lanes")), 0o700);
    let status = Command::new(BIN)
        .args(["status", "--json"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("\"answer\":\"status\""));
    // A second server on the same socket is refused.
    let second = Run::new()
        .no_report()
        .env("XDG_RUNTIME_DIR", &runtime)
        .arg("serve")
        .run();
    second.code(2);
    assert!(
        second.stderr().contains("already listens"),
        "{}",
        second.stderr()
    );
    let other_uid = other_uid_client(&socket, &runtime);
    let close = Command::new(BIN)
        .args(["close"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(close.status.success());
    running.wait().code(0);
    if let Some((code, stderr)) = other_uid {
        // lanes' own client sees whose server it is before it sends anything.
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("is served by uid 0, not by this user (uid 65534)"),
            "{stderr}"
        );
    }
    // A directory open to others is refused.
    let loose = scratch.mkdir("loose/lanes");
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
    let refused = Run::new()
        .no_report()
        .env("XDG_RUNTIME_DIR", scratch.join("loose"))
        .arg("serve")
        .run();
    refused.code(2);
    assert!(
        refused.stderr().contains("mode 755"),
        "{}",
        refused.stderr()
    );
    // A directory another user made is refused, whatever its mode.
    if nix::unistd::Uid::effective().is_root() {
        let theirs = scratch.mkdir("theirs/lanes");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let refused = Run::new()
            .no_report()
            .env("XDG_RUNTIME_DIR", scratch.join("theirs"))
            .arg("serve")
            .run();
        refused.code(2);
        assert!(
            refused.stderr().contains("belongs to uid 65534"),
            "{}",
            refused.stderr()
        );
    } else {
        eprintln!("skipped: a directory of another user needs root to make");
    }
}

/// As root: loosens the socket and its directories for everyone, then submits as `nobody`
/// (`setpriv`); returns the client's exit status and stderr. `None` (said) when not root or
/// without `setpriv`.
fn other_uid_client(socket: &Path, runtime: &Path) -> Option<(i32, String)> {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: the other-uid check needs root (setpriv --reuid nobody)");
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: the other-uid check needs setpriv (util-linux)");
        return None;
    }
    // The binary where nobody can run it, the path to the socket open to everyone.
    let dir = tempfile::Builder::new()
        .prefix("lanes-it-bin-")
        .tempdir()
        .unwrap();
    let bin = dir.path().join("lanes");
    std::fs::copy(BIN, &bin).unwrap();
    for path in [
        dir.path(),
        runtime,
        &runtime.join("lanes"),
        runtime.parent().unwrap(),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The copy's write descriptor may live on for a moment in another test's child, between
    // its fork and its exec: running the copy then fails with ETXTBSY, and is tried again.
    let mut tries = 0;
    let out = loop {
        let out = Command::new("setpriv")
            .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
            .arg(&bin)
            .args(["submit", "--socket"])
            .arg(socket)
            .args(["k", "--", "touch /tmp/lanes-it-should-not-run"])
            .output()
            .unwrap();
        tries += 1;
        if tries < 50 && String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        break out;
    };
    // The server's own check, met by a client that does not check the server first (not
    // lanes'): it is answered why, and nothing else.
    let probe = Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .arg("/usr/bin/python3")
        .arg("-c")
        .arg(
            "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.connect(sys.argv[1])\n\
             try:\n\
             \x20   s.sendall(b'{\"v\":1,\"op\":\"submit\",\"key\":\"k\",\"command\":\"touch /tmp/lanes-it-should-not-run\"}\\n')\n\
             except OSError:\n\
             \x20   pass\n\
             print(s.makefile().readline())\n",
        )
        .arg(socket)
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&probe.stdout);
    assert!(
        answer.contains("permission denied") && answer.contains("uid 65534"),
        "{answer}{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A server started directly (it is to die of SIGKILL) on `lanes.sock` in `scratch`, its report
/// in `first.jsonl`, its output in `first.out` and `first.err`; `$D` is the scratch directory.
/// Returns it once it listens, with its socket.
fn first_server(scratch: &Scratch, args: &[&str]) -> (Spawned, PathBuf) {
    let socket = scratch.join("lanes.sock");
    let first = Spawned::start(
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--report")
            .arg(scratch.join("first.jsonl"))
            .args(args)
            .env("D", scratch.path())
            .stdout(std::fs::File::create(scratch.join("first.out")).unwrap())
            .stderr(std::fs::File::create(scratch.join("first.err")).unwrap()),
    );
    assert!(listening(&socket));
    (first, socket)
}

/// The seqs of the job records of a first server (`first`) and of the `second`, sorted.
fn seqs_across(first: &[u64], second: &Report) -> Vec<u64> {
    let mut all: Vec<u64> = first
        .iter()
        .copied()
        .chain(second.jobs.iter().map(|job| job.seq))
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn after_kill_9_a_restarted_server_gives_every_job_exactly_one_record() {
    let scratch = Scratch::new();
    let first_report = scratch.join("first.jsonl");
    let (mut first, socket) = first_server(&scratch, &["-j", "1"]);
    let submit =
        |key: &str, command: &str| client_at(&socket, "submit", &[key, "--", command], None);
    let run = "echo \"$LANES_SEQ\" >> \"$D/order\"";
    assert_eq!(submit("z", run).code, 0);
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(
            &first_report
        )
        .is_ok_and(|text| text.contains("\"seq\":1,"))),
        "seq 1's record is in the first report"
    );
    let stuck = format!("echo $$ > \"$D/pid\"; {}", blocked_on("never"));
    assert_eq!(submit("a", &stuck).code, 0);
    for key in ["a", "b", "a", "b"] {
        assert_eq!(submit(key, run).code, 10);
    }
    scratch.wait_for("pid", Duration::from_secs(20));
    let pid = scratch.pid("pid");
    first.kill().unwrap();
    first.wait().unwrap();
    // The job that ran under the dead server: its group is killed here, by its pid.
    kill_group_and_wait(pid);
    std::fs::remove_file(scratch.join("order")).unwrap();
    // The second server, on the same socket and (default) journal.
    let server = serve(&scratch, &["-j", "1"]);
    let later = server.client("submit", &["--json", "c", "--", "true"]);
    assert_eq!(
        later.answer().seq,
        Some(7),
        "new jobs are numbered after the old ones"
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, second) = server.end();
    out.code(1);
    assert_eq!(
        second.job(2).result(),
        ("interrupted", Some("server_lost")),
        "{:#?}",
        second.jobs
    );
    assert!(!second.job(2).started);
    assert_eq!(
        scratch.lines("order"),
        ["3", "4", "5", "6"],
        "the waiting ones ran in order"
    );
    let first_text = std::fs::read_to_string(&first_report).unwrap();
    let first_seqs: Vec<u64> = first_text
        .lines()
        .filter(|line| line.contains("\"type\":\"job\""))
        .map(|line| serde_json::from_str::<JobRecord>(line).unwrap().seq)
        .collect();
    assert_eq!(
        seqs_across(&first_seqs, &second),
        (1..=7).collect::<Vec<_>>(),
        "one record per job across the two reports"
    );
    // A clean end leaves an empty journal: a third server has nothing to recover.
    let journal = std::fs::read_to_string(scratch.join("lanes.journal")).unwrap();
    assert_eq!(journal.lines().count(), 1, "{journal}");
}

#[test]
fn a_record_the_report_file_could_not_hold_leaves_its_job_to_the_next_server() {
    // The first server's report file stops at 2 KiB (`ulimit -f 4`): past it a record is torn
    // or not written at all. Those jobs' ends must stay out of the journal, so that the server
    // started after a kill -9 records them: every job has one whole record across the two
    // reports. (The ends were journaled once the writer had tried, and those jobs were left
    // with no record anywhere.)
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let first_report = scratch.join("first.jsonl");
    let mut first = Spawned::start(
        Command::new("sh")
            .arg("-c")
            .arg("ulimit -f 4; exec \"$@\"")
            .arg("sh")
            .arg(BIN)
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--report")
            .arg(&first_report)
            .args(["-j", "1"])
            .stdout(std::fs::File::create(scratch.join("first.out")).unwrap())
            .stderr(std::fs::File::create(scratch.join("first.err")).unwrap()),
    );
    assert!(listening(&socket));
    let jobs = 12;
    for i in 1..=jobs {
        let key = format!("k{}", i % 2);
        let waited = client_at(
            &socket,
            "submit",
            &["--wait", &key, "--", "echo padding-padding-padding-padding"],
            None,
        );
        assert_eq!(waited.code, 0, "{}", waited.stderr);
    }
    // Answered after the loop has journaled the ends of every record handed over before.
    assert_eq!(client_at(&socket, "status", &[], None).code, 0);
    let said = std::fs::read_to_string(scratch.join("first.err")).unwrap();
    assert!(
        said.contains("the report is incomplete: from now on the journal keeps every job"),
        "{said}"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let first_text = std::fs::read(&first_report).unwrap();
    assert!(first_text.len() <= 2048, "the limit held");
    let whole_in_first: Vec<u64> = String::from_utf8_lossy(&first_text)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["type"] == "job")
        .filter_map(|record| record["seq"].as_u64())
        .collect();
    assert!(
        (whole_in_first.len() as u64) < jobs,
        "some records must have missed the first report: {whole_in_first:?}"
    );
    let server = serve(&scratch, &["-j", "1"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, second) = server.end();
    assert_eq!(
        seqs_across(&whole_in_first, &second),
        (1..=jobs).collect::<Vec<_>>(),
        "one whole record per job across the two reports; second: {:#?}",
        second.jobs
    );
}

#[test]
fn a_server_killed_while_jobs_start_journaled_each_one_that_ran_and_none_runs_twice() {
    // 40 jobs of 40 keys admitted at once; the server is killed as soon as one of them runs,
    // while the other spawns are under way. A job whose process ran must be journaled as
    // started, so that the next server records it `server_lost` instead of running it again.
    let scratch = Scratch::new();
    let first_report = scratch.join("first.jsonl");
    let (mut first, socket) = first_server(&scratch, &["-j", "40"]);
    let lines: String = (1..=40)
        .map(|i| format!("k{i}\techo \"$LANES_SEQ\" >> \"$D/ran\"\n"))
        .collect();
    let mut batch = Command::new(BIN)
        .args(["submit", "--socket"])
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    batch
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    scratch.wait_for("ran", Duration::from_secs(20));
    first.kill().unwrap();
    first.wait().unwrap();
    let _ = batch.wait();
    let journal = std::fs::read_to_string(scratch.join("lanes.journal")).unwrap();
    let (mut admitted, mut journaled) = (Vec::new(), std::collections::BTreeSet::new());
    for line in journal.lines().skip(1) {
        let Ok(line) = serde_json::from_str::<Value>(line) else {
            continue; // a line torn by the kill
        };
        if let Some(seq) = line.get("a").and_then(Value::as_u64) {
            admitted.push(seq);
        } else if let Some(seq) = line.get("s").and_then(Value::as_u64) {
            journaled.insert(seq);
        } else if let Some(seq) = line.get("u").and_then(Value::as_u64) {
            journaled.remove(&seq);
        }
    }
    let ran_before: Vec<u64> = scratch
        .lines("ran")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    for seq in &ran_before {
        assert!(
            journaled.contains(seq),
            "seq {seq} ran but is not journaled as started: {journaled:?}\n{journal}"
        );
    }
    // The next server, on the same journal: what ran is recorded, the rest runs once.
    let server = serve(&scratch, &["-j", "40"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, second) = server.end();
    let mut ran: Vec<u64> = scratch
        .lines("ran")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    ran.sort_unstable();
    let mut once = ran.clone();
    once.dedup();
    assert_eq!(ran, once, "no job ran twice");
    let first_text = std::fs::read_to_string(&first_report).unwrap_or_default();
    let mut recorded: Vec<u64> = first_text
        .lines()
        .filter(|line| line.contains("\"type\":\"job\""))
        .filter_map(|line| serde_json::from_str::<JobRecord>(line).ok())
        .map(|job| job.seq)
        .chain(second.jobs.iter().map(|job| job.seq))
        .collect();
    recorded.sort_unstable();
    assert!(!admitted.is_empty());
    assert_eq!(
        recorded, admitted,
        "one record per admitted job across the two reports"
    );
}

#[test]
fn a_seq_handed_to_a_rejected_submission_is_not_handed_out_by_the_next_server() {
    let scratch = Scratch::new();
    let (mut first, socket) = first_server(&scratch, &["-j", "1", "--max-queued", "1"]);
    let submit = |key: &str, command: &str| {
        client_at(&socket, "submit", &["--json", key, "--", command], None).answer()
    };
    let held = format!("touch \"$D/up\"; {}", blocked_on("never"));
    assert_eq!(submit("a", &held).seq, Some(1));
    scratch.wait_for("up", Duration::from_secs(20));
    assert_eq!(submit("a", "true").answer, "queued");
    let rejected = submit("a", "true");
    assert_eq!(
        (rejected.answer.as_str(), rejected.seq),
        ("rejected", Some(3))
    );
    first.kill().unwrap();
    first.wait().unwrap();
    scratch.write("never", "");
    let server = serve(&scratch, &["-j", "1"]);
    let next = server.client("submit", &["--json", "b", "--", "true"]);
    assert_eq!(next.answer().seq, Some(4), "seq 3 numbered a rejected job");
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert!(
        report.jobs.iter().all(|job| job.seq != 3),
        "{:#?}",
        report.jobs
    );
}

#[test]
fn the_webhook_example_submits_one_lane_per_service() {
    // README "Service mode": examples/serve/deploy-hook.cgi, run as a web server runs a CGI
    // script, against a server on the default socket.
    let scratch = Scratch::new();
    let runtime = scratch.mkdir("run");
    let server = Run::new()
        .no_report()
        .scratch(&scratch)
        .env("XDG_RUNTIME_DIR", &runtime)
        .args(["serve", "-j", "4", "--report"])
        .arg(scratch.join("report.jsonl"))
        .spawn();
    assert!(listening(&runtime.join("lanes/lanes.sock")));
    let deploy = scratch.write(
        "deploy.sh",
        format!(
            "#!/bin/sh\n{}\necho \"$1 $LANES_SEQ\" >> \"$D/deployed\"\n",
            blocked_on("go")
        ),
    );
    std::fs::set_permissions(&deploy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook = |query: &str| {
        let out = Command::new(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/serve/deploy-hook.cgi"),
        )
        .env("QUERY_STRING", query)
        .env("LANES", BIN)
        .env("LANES_SOCKET", runtime.join("lanes/lanes.sock"))
        .env("DEPLOY", &deploy)
        .output()
        .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let first = hook("service=api");
    assert!(first.starts_with("Status: 202 Accepted\r\n"), "{first}");
    assert!(first.contains("\"answer\":\"started\""), "{first}");
    let second = hook("ref=main&service=api");
    assert!(
        second.contains("\"answer\":\"queued\"") && second.contains("\"ahead\":1"),
        "{second}"
    );
    let other = hook("service=web");
    assert!(other.contains("\"answer\":\"started\""), "{other}");
    let bad = hook("service=x;rm");
    assert!(bad.starts_with("Status: 400"), "{bad}");
    scratch.write("go", "");
    let drain = Command::new(BIN)
        .arg("drain")
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(drain.status.success());
    server.wait().code(0);
    let mut deployed = scratch.lines("deployed");
    deployed.sort();
    assert_eq!(deployed, ["api 1", "api 2", "web 3"]);
    let report = Report::must_parse(&scratch.read("report.jsonl"));
    let api = report.by_key("deploy-api");
    assert!(
        api[1].start_ms() >= api[0].end_ms(),
        "one deploy of a service at a time"
    );
}

/// Starts a server with its journal in `scratch/j.journal` (and `args`) on `lanes.sock`, has it
/// start job `a`, whose first try blocks and whose next try runs `then` and succeeds, lets
/// `meanwhile` submit to it, and kills it with SIGKILL, and the blocked try's process group
/// too: what a crash of the server leaves.
fn killed_while_a_job_runs(
    scratch: &Scratch,
    args: &[&str],
    then: &str,
    meanwhile: impl FnOnce(&Path),
) {
    let socket = scratch.join("lanes.sock");
    let mut first = Spawned::start(
        Command::new(BIN)
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .arg("--journal")
            .arg(scratch.join("j.journal"))
            .env("D", scratch.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(listening(&socket));
    let job = format!(
        "if [ -e \"$D/tried\" ]; then {then}; exit 0; fi; \
         touch \"$D/tried\"; echo $$ > \"$D/pid\"; {}",
        blocked_on("never")
    );
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", &job], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    meanwhile(&socket);
    let pid = scratch.pid("pid");
    first.kill().unwrap();
    first.wait().unwrap();
    kill_group_and_wait(pid);
}

#[test]
fn requeue_lost_runs_again_the_job_that_was_running_when_the_server_died() {
    let scratch = Scratch::new();
    killed_while_a_job_runs(&scratch, &[], "echo again > \"$D/again\"", |_| {});
    let server = serve(
        &scratch,
        &[
            "--journal",
            scratch.join("j.journal").to_str().unwrap(),
            "--requeue-lost",
        ],
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 1);
    assert_eq!(report.job(1).result(), ("succeeded", None));
    assert_eq!(scratch.read("again"), "again\n");
}

/// Jobs an earlier server answered `queued` were promised a run: a restarted server admits
/// them again even where its queue's bounds are already taken by the lost jobs put back before
/// them (`--requeue-lost`), or are smaller than what the journal holds.
#[test]
fn a_restarted_server_runs_every_job_it_had_answered_queued_whatever_its_queue_bound() {
    let scratch = Scratch::new();
    let journal = scratch.join("j.journal");
    killed_while_a_job_runs(
        &scratch,
        &["-j", "1", "--max-queued", "2"],
        "true",
        |socket| {
            for key in ["b", "c"] {
                let answer = client_at(socket, "submit", &[key, "--", "true"], None);
                assert_eq!(answer.code, 10, "{key}: {}{}", answer.stdout, answer.stderr);
            }
        },
    );
    let server = serve(
        &scratch,
        &[
            "-j",
            "1",
            "--max-queued",
            "1",
            "--journal",
            journal.to_str().unwrap(),
            "--requeue-lost",
        ],
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    let outcomes: Vec<(u64, &str)> = report
        .jobs
        .iter()
        .map(|job| (job.seq, job.result().0))
        .collect();
    assert_eq!(
        outcomes,
        [(1, "succeeded"), (2, "succeeded"), (3, "succeeded")],
        "{}",
        out.dump()
    );
}

#[test]
fn raising_the_cap_starts_a_waiting_job_and_a_stop_signal_ends_the_server() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    let lowered = server.client("set", &["--json", "-j", "1"]).answer();
    assert_eq!(
        (lowered.max_concurrent, lowered.previous),
        (Some(1), Some(2))
    );
    let hold = format!("touch \"$D/started.$LANES_KEY\"; {}", blocked_on("never"));
    assert_eq!(server.client("submit", &["a", "--", &hold]).code, 0);
    let waiting = server.client("submit", &["--json", "b", "--", &hold]);
    assert_eq!(waiting.code, 10);
    assert_eq!(
        waiting.answer().ahead,
        Some(0),
        "only the cap holds it back"
    );
    assert!(!scratch.exists("started.b"));
    let raised = server.client("set", &["--json", "-j", "2"]).answer();
    assert_eq!((raised.max_concurrent, raised.previous), (Some(2), Some(1)));
    scratch.wait_for("started.b", Duration::from_secs(20));
    let status = server.client("status", &["--json"]).answer();
    assert_eq!(status.running.unwrap().as_array().unwrap().len(), 2);
    // SIGTERM ends a server as it ends a run: every job stopped, exit 143.
    server.running.signal(nix::sys::signal::Signal::SIGTERM);
    let (out, report) = server.end();
    out.code(143);
    for seq in [1, 2] {
        assert_eq!(report.job(seq).result(), ("interrupted", Some("shutdown")));
    }
    assert_eq!(report.job(2).slot, Some(2));
    let journal = scratch.read("lanes.journal");
    assert_eq!(
        journal.lines().count(),
        1,
        "every job recorded: nothing to recover"
    );
}

/// A server on `socket` under `prlimit --nofile=NOFILE`, with `args`, its stderr to `stderr`,
/// once it accepts connections.
fn server_under(nofile: u32, socket: &Path, args: &[&str], stderr: Stdio) -> Spawned {
    let server = Spawned::start(
        Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg("--")
            .arg(BIN)
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(socket)
            .stdout(Stdio::null())
            .stderr(stderr),
    );
    assert!(listening(socket));
    server
}

/// Spawns a client command against `socket`, its stdout and stderr piped, not waited for.
fn spawn_client(socket: &Path, task: &str, args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg(task)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lanes client")
}

/// The first answer of a `--json` client still running (`drain`, `close`), and its line.
fn first_answer(client: &mut std::process::Child) -> (Answer, String) {
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let answer = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (answer, line)
}

/// Waits (bounded) for `child` to end; kills it and fails when it does not.
fn ended_by(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = child.try_wait().expect("wait for the client");
        status.is_some()
    });
    status.unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: the client did not end")
    })
}

#[test]
fn a_client_waiting_for_its_answer_dies_on_a_stop_signal() {
    use nix::sys::signal::{kill, Signal};
    use std::os::unix::process::ExitStatusExt as _;
    let scratch = Scratch::new();
    // A server that reads each request and never answers.
    let socket = scratch.join("mute.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let cases: [(&str, &[&str], Signal); 6] = [
        ("submit", &["--wait", "k", "--", "true"], Signal::SIGINT),
        ("status", &[], Signal::SIGTERM),
        ("cancel", &["k"], Signal::SIGHUP),
        ("set", &["-j", "2"], Signal::SIGQUIT),
        ("drain", &[], Signal::SIGUSR1),
        ("close", &[], Signal::SIGTERM),
    ];
    for (task, args, signal) in cases {
        let mut child = spawn_client(&socket, task, args);
        let (stream, _) = listener.accept().unwrap();
        // Its request read, the client waits for the answer.
        let mut request = String::new();
        BufReader::new(&stream).read_line(&mut request).unwrap();
        assert!(request.contains("\"op\""), "{request}");
        kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = ended_by(&mut child, task);
        assert_eq!(
            status.signal(),
            Some(signal as i32),
            "lanes {task} ended by {signal}: {status:?}"
        );
    }
}

#[test]
fn a_client_whose_stdout_is_closed_ends_quietly() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2"]);
    for args in [&[][..], &["--json"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .arg("status")
            .arg("--socket")
            .arg(&server.socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.is_empty(), "{stderr}");
    }
    assert_eq!(server.client("drain", &[]).code, 0);
    server.end();
}

#[test]
fn submit_wait_exits_1_for_a_job_lanes_stopped() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--grace", "5s"]);
    let waiting = spawn_client(
        &server.socket,
        "submit",
        &[
            "--wait",
            "a",
            "--",
            &format!("echo $$ > \"$D/pid\"; {}", blocked_on("go")),
        ],
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    assert_eq!(server.client("cancel", &["a"]).code, 0);
    let out = waiting.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("interrupted (cancelled, SIGTERM)"),
        "{stderr}"
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    assert_eq!(report.job(1).signal.as_deref(), Some("SIGTERM"));
    // The summary lists the cancelled job (it does not make the exit status 1).
    out.code(0);
    let summary = out.stderr();
    assert!(
        summary
            .lines()
            .any(|line| line.contains("seq 1") && line.contains("cancelled")),
        "{summary}"
    );
}

#[test]
fn a_record_written_before_a_kill_9_is_not_recorded_again() {
    let scratch = Scratch::new();
    // What `kill -9` leaves when it comes after seq 1's record reached the first report and
    // before its end reached the journal: seq 1 journaled as running, its record in the report.
    let first = scratch.write(
        "first.jsonl",
        "{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"true\",\"outcome\":\"succeeded\"}\n",
    );
    scratch.write(
        "lanes.journal",
        format!(
            "{{\"journal\":1,\"last\":2,\"report\":{}}}\n\
             {{\"a\":1,\"k\":\"a\",\"c\":\"true\"}}\n{{\"s\":1}}\n\
             {{\"a\":2,\"k\":\"a\",\"c\":\"echo second\"}}\n",
            serde_json::to_string(&first).unwrap()
        ),
    );
    let server = serve(&scratch, &["-j", "1"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    let seqs: Vec<u64> = report.jobs.iter().map(|job| job.seq).collect();
    assert_eq!(
        seqs,
        [2],
        "seq 1 has its record in the first report already"
    );
    assert_eq!(report.job(2).result(), ("succeeded", None));
}

#[test]
fn a_corrupt_journal_is_refused_naming_its_file_and_line() {
    let scratch = Scratch::new();
    scratch.write(
        "lanes.journal",
        "{\"journal\":1,\"last\":2}\n{\"a\":1,\"k\":\"a\",\"c\":\"true\"}\n\
         {\"a\":1,\"k\":\"b\",\"c\":\"true\"}\n",
    );
    let out = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("serve")
        .arg("--socket")
        .arg(scratch.join("lanes.sock"))
        .run();
    out.code(2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lanes.journal") && stderr.contains("line 3"),
        "{stderr}"
    );
    assert!(!scratch.exists("lanes.sock"), "no socket is left behind");
}

#[test]
fn a_second_server_refused_by_the_journal_lock_leaves_no_socket() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    // The first server's socket file is gone (removed by hand): a second server binds nothing
    // before it finds the journal taken.
    std::fs::remove_file(&server.socket).unwrap();
    let second = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("serve")
        .arg("--socket")
        .arg(&server.socket)
        .run();
    second.code(2);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another lanes serve"), "{stderr}");
    assert!(
        !server.socket.exists(),
        "the refused server left its socket"
    );
    server.running.signal(nix::sys::signal::Signal::SIGTERM);
    server.running.wait();
}

#[test]
fn a_server_waiting_to_open_a_fifo_report_binds_nothing_and_dies_on_sigterm() {
    use std::os::unix::process::ExitStatusExt as _;
    let scratch = Scratch::new();
    let fifo = scratch.join("report.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let socket = scratch.join("lanes.sock");
    let mut child = Spawned::start(
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--report")
            .arg(&fifo)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let pid = child.id();
    // Blocked in the FIFO's open, waiting for a reader.
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(
            format!("/proc/{pid}/wchan")
        )
        .is_ok_and(|wchan| wchan.contains("partner") || wchan.contains("fifo"))),
        "lanes never waited for the FIFO's reader"
    );
    assert!(!socket.exists(), "no socket while the outputs are not open");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = ended_by(&mut child, "serve");
    assert_eq!(
        status.signal(),
        Some(nix::sys::signal::Signal::SIGTERM as i32),
        "{status:?}"
    );
    assert!(!socket.exists());
}

#[test]
fn a_job_that_cannot_start_is_answered_failed_and_an_over_long_one_rejected() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--shell", "/nonexistent/sh"]);
    let failed = server.client("submit", &["--json", "a", "--", "true"]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    let answer = failed.answer();
    assert_eq!(
        (
            answer.answer.as_str(),
            answer.reason.as_deref(),
            answer.slot
        ),
        ("failed", Some("spawn_error"), None)
    );
    let waited = server.client("submit", &["--wait", "a", "--", "true"]);
    assert_eq!(waited.code, 1, "{}", waited.stderr);
    assert!(
        waited.stdout.starts_with("failed seq 2"),
        "{}",
        waited.stdout
    );
    // A command one argument cannot hold: refused at admission, as a run refuses the line.
    let long = format!("b\techo {}\n", "x".repeat(200 * 1024));
    let refused = client_at(&server.socket, "submit", &["--json"], Some(&long));
    assert_eq!(refused.code, 12, "{}", refused.stderr);
    let answer = refused.answer();
    assert_eq!(
        (answer.answer.as_str(), answer.reason.as_deref()),
        ("rejected", Some("invalid_input"))
    );
    let why = answer.error.unwrap();
    assert!(
        why.starts_with("the command is 204805 bytes, more than"),
        "{why}"
    );
    // For a person, the answer says why too.
    let refused = client_at(&server.socket, "submit", &[], Some(&long));
    assert_eq!(refused.code, 12, "{}", refused.stderr);
    assert_eq!(
        refused.stdout,
        format!("rejected seq 4 (key b): invalid_input: {why}\n")
    );
    let status = server.client("status", &["--json"]).answer();
    assert_eq!(
        (status.submitted, status.ended),
        (Some(4), Some(4)),
        "every seq handed out is submitted, every record ended"
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert_eq!(report.job(1).result(), ("failed", Some("spawn_error")));
    assert_eq!(report.job(3).result(), ("rejected", Some("invalid_input")));
    assert!(!report.job(3).started);
}

#[test]
fn a_drain_during_a_close_says_closing_and_status_exits_13_while_the_server_ends() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1", "--grace", "60s"]);
    start_stubborn(&server, &scratch, "a");
    let status = server.client("status", &["--json"]);
    assert_eq!(status.code, 0, "admitting: {}", status.stdout);
    let close = spawn_client(&server.socket, "close", &["--json"]);
    // The close is taken once the running job is being stopped.
    assert!(wait_until(Duration::from_secs(20), || {
        let status = server.client("status", &["--json"]);
        status.stdout.contains("\"stopping\":\"shutdown\"") && status.code == 13
    }));
    let mut drain = spawn_client(&server.socket, "drain", &["--json"]);
    // The drain's answer comes at once; the client then waits for the end.
    let (answer, line) = first_answer(&mut drain);
    assert_eq!(
        (answer.answer.as_str(), answer.why.as_deref()),
        ("ending", Some("closing")),
        "{line}"
    );
    // The job that ignores SIGTERM is ended here, by its pid, not after the grace.
    let pid = scratch.pid("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    for (mut client, what) in [(close, "close"), (drain, "drain")] {
        let status = ended_by(&mut client, what);
        assert_eq!(status.code(), Some(0), "{what}");
    }
    let (_, report) = server.end();
    assert_eq!(report.job(1).result(), ("interrupted", Some("shutdown")));
}

#[test]
fn a_status_sent_behind_a_waiting_submit_is_answered_as_of_its_turn() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let submit = serde_json::json!({
        "v": 1, "op": "submit", "key": "a", "command": blocked_on("go"), "wait": true
    });
    // Both requests in one write: the status arrives while the job runs.
    stream
        .write_all(format!("{submit}\n{{\"v\":1,\"op\":\"status\"}}\n").as_bytes())
        .unwrap();
    let mut answers = BufReader::new(stream.try_clone().unwrap());
    let mut next = || {
        let mut line = String::new();
        answers.read_line(&mut line).unwrap();
        serde_json::from_str::<Answer>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    assert_eq!(next().answer, "started");
    scratch.write("go", "");
    assert_eq!(next().answer, "record");
    let status = next();
    assert_eq!(status.answer, "status");
    assert_eq!(
        (status.running, status.ended),
        (Some(serde_json::json!([])), Some(1)),
        "the status is of after the record"
    );
    drop(stream);
    assert_eq!(server.client("drain", &[]).code, 0);
    server.end();
}

#[test]
fn a_sticky_world_writable_socket_directory_is_refused_by_its_full_mode() {
    let scratch = Scratch::new();
    let dir = scratch.mkdir("lanes");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = Run::new()
        .no_report()
        .scratch(&scratch)
        .env("XDG_RUNTIME_DIR", scratch.path())
        .env("LANES_SOCKET", "")
        .arg("serve")
        .run();
    out.code(2);
    assert!(out.stderr().contains("mode 1777"), "{}", out.stderr());
}

#[test]
fn a_waiting_client_whose_server_dies_says_the_record_is_to_come() {
    let scratch = Scratch::new();
    let socket = scratch.join("dying.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let child = spawn_client(&socket, "submit", &["--wait", "k", "--", "true"]);
    let (mut stream, _) = listener.accept().unwrap();
    let mut request = String::new();
    BufReader::new(&stream).read_line(&mut request).unwrap();
    // Answered, then gone before the record (as after `kill -9`).
    stream
        .write_all(b"{\"v\":1,\"answer\":\"started\",\"seq\":5,\"key\":\"k\",\"slot\":1}\n")
        .unwrap();
    drop(stream);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ended before seq 5 had its record"),
        "{stderr}"
    );
}

#[test]
fn a_server_whose_journal_handed_out_the_last_seq_numbers_nothing_more() {
    let scratch = Scratch::new();
    let last = u64::MAX - 2;
    scratch.write(
        "lanes.journal",
        format!("{{\"journal\":1,\"last\":{last}}}\n"),
    );
    let server = serve(&scratch, &["-j", "1"]);
    let first = server.client("submit", &["--json", "a", "--", "true"]);
    assert_eq!(first.answer().seq, Some(u64::MAX - 1), "{}", first.stderr);
    let refused = server.client("submit", &["a", "--", "true"]);
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert!(refused.stderr.contains("every seq"), "{}", refused.stderr);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert_eq!(report.jobs.len(), 1);
}

/// Reads one answer line from `stream` (one byte at a time: nothing after it is taken).
fn answer_line(stream: &mut UnixStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while stream.read(&mut byte).unwrap() == 1 {
        line.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    String::from_utf8(line).unwrap()
}

#[test]
fn clients_gone_while_waiting_for_their_records_free_their_connections() {
    // 16 connections at most, 14 of them waiting for a record. Each client submits with
    // `wait` and closes its socket without waiting for the record; the jobs run on, and the
    // server serves other clients.
    let scratch = Scratch::new();
    let server = serve_16_at_once(&scratch, &[]);
    let submit = serde_json::json!({
        "v": 1, "op": "submit", "key": "slow", "command": blocked_on("go"), "wait": true
    });
    let submit = format!("{submit}\n");
    // One client that shuts down its writing and waits for its answers is not gone.
    let mut patient = UnixStream::connect(&server.socket).unwrap();
    patient.write_all(submit.as_bytes()).unwrap();
    patient.shutdown(std::net::Shutdown::Write).unwrap();
    let first = answer_line(&mut patient);
    assert!(first.contains("\"answer\":\"started\""), "{first}");
    let ghosts = take_places(&server.socket, 13, &submit, "\"answer\":\"queued\"");
    // The last two places, kept from waiting clients, taken by connections that asked for
    // the status; every connection taken: one more is refused.
    let status = "{\"v\":1,\"op\":\"status\"}\n";
    let lookers = take_places(&server.socket, 2, status, "\"answer\":\"status\"");
    assert_refused(&server.socket, 16);
    drop(ghosts);
    assert!(
        wait_until(Duration::from_secs(10), || server
            .client("status", &[])
            .code
            == 0),
        "the connections of the clients gone are freed"
    );
    let status = server.client("status", &["--json"]).answer();
    assert_eq!(status.running.unwrap().as_array().unwrap().len(), 1);
    let waiting = status.waiting.unwrap();
    assert_eq!(
        waiting[0]["jobs"].as_array().unwrap().len(),
        13,
        "{waiting}"
    );
    let cancel = server.client("cancel", &["--json", "slow"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let cancelled = cancel.answer();
    assert_eq!(cancelled.stopped, Some(1));
    assert_eq!(cancelled.dropped, Some((2..=14).collect()));
    // The client that only shut down its writing gets its record.
    let record: Answer = serde_json::from_str(&answer_line(&mut patient)).unwrap();
    assert_eq!(record.answer, "record");
    assert_eq!(record.record.unwrap()["reason"], "cancelled");
    assert_eq!(answer_line(&mut patient), "", "then the connection ends");
    drop(lookers);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 14, "every job has its record");
    for seq in 1..=14 {
        assert_eq!(report.job(seq).result(), ("interrupted", Some("cancelled")));
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn clients_that_send_status_requests_and_read_no_answers_make_the_server_hold_little() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    // A thousand jobs of a thousand keys: one runs, the others wait, so that every status
    // answer is long (some 40 KB).
    let lines: String = (0..1000)
        .map(|i| format!("k{i}\t{}\n", blocked_on("go")))
        .collect();
    let batch = client_at(&server.socket, "submit", &[], Some(&lines));
    assert_eq!(batch.code, 10, "{}", batch.stderr);
    let pid = server.running.pid();
    assert_eq!(server.client("status", &[]).code, 0);
    let before = rss_kib(pid);
    // Four clients pipeline thousands of status requests each and read nothing.
    let request = b"{\"v\":1,\"op\":\"status\"}\n".repeat(5000);
    let mut silent = Vec::new();
    for _ in 0..4 {
        let mut stream = UnixStream::connect(&server.socket).unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut sent = 0;
        while sent < request.len() {
            match stream.write(&request[sent..]) {
                Ok(n) => sent += n,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) => panic!("{err}"),
            }
        }
        assert!(sent > 1000, "sent {sent} bytes of requests");
        silent.push(stream);
    }
    // Another client is answered promptly, again and again, and the server's memory stays
    // within a few MiB of what it was.
    let mut most = before;
    for _ in 0..5 {
        let asked = Instant::now();
        let status = server.client("status", &["--json"]);
        assert_eq!(status.code, 0, "{}", status.stderr);
        assert_eq!(status.answer().submitted, Some(1000));
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        most = most.max(rss_kib(pid));
    }
    assert!(
        most < before + 4 * 1024,
        "RSS {before} KiB before, {most} KiB with the silent clients"
    );
    drop(silent);
    let close = server.client("close", &[]);
    assert_eq!(close.code, 0, "{}", close.stderr);
    let (_, report) = server.end();
    assert_eq!(report.jobs.len(), 1000);
}

#[test]
fn a_socket_that_takes_connections_but_never_answers_is_refused_and_replaced_once_closed() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd as _;
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    // What a server killed with `kill -9` can leave for a moment: its listening socket, held
    // by a process that never accepts (here the test itself).
    let holder = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let asked = Instant::now();
    let refused = serve_alone(&socket);
    refused.code(2);
    assert!(
        refused.stderr().contains("does not answer within 3 s"),
        "{}",
        refused.stderr()
    );
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "{:?}",
        asked.elapsed()
    );
    // The refused server's connection is taken out of the way.
    holder.set_nonblocking(true).unwrap();
    while holder.accept().is_ok() {}
    // A server that connected while the socket was held is not refused once its holder
    // closes it (as the killed server's child does at its `exec`).
    let running = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .spawn();
    let mut connected = [PollFd::new(holder.as_fd(), PollFlags::POLLIN)];
    assert_eq!(
        poll(&mut connected, PollTimeout::from(20_000u16)).unwrap(),
        1,
        "the new server never connected"
    );
    drop(holder);
    // Until the new server has replaced the socket file, a connection may still reach the
    // held socket, through a copy another test's child has between its `clone` and `exec`:
    // the new server's socket is known by its inode and change time (an inode number may be
    // reused at once).
    use std::os::unix::fs::MetadataExt as _;
    let identity = |meta: std::fs::Metadata| (meta.ino(), meta.ctime(), meta.ctime_nsec());
    let held = identity(std::fs::metadata(&socket).unwrap());
    let replaced = wait_until(Duration::from_secs(20), || {
        std::fs::metadata(&socket).is_ok_and(|meta| identity(meta) != held)
    });
    if !replaced || !listening(&socket) {
        let out = running.wait();
        panic!("the new server does not listen\n{}", out.dump());
    }
    let status = client_at(&socket, "status", &[], None);
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert_eq!(client_at(&socket, "drain", &[], None).code, 0);
    running.wait().code(0);
}

/// A journal, given or by default, or its lock, at the socket's own path is refused before
/// anything is made: made first, it would stand where the socket goes, and every later server
/// on that socket would be refused for it.
#[test]
fn a_journal_at_the_sockets_path_is_refused_before_anything_is_made() {
    let scratch = Scratch::new();
    let socket = scratch.join("s.sock");
    let named = scratch.join("s.journal");
    let cases: [(&Path, Option<&Path>, &str); 3] = [
        (&socket, Some(&socket), "the journal"),
        (
            &named,
            None,
            "by default the socket's path with the extension `.journal`",
        ),
        (
            &scratch.join("j.lock"),
            Some(&scratch.join("j")),
            "the journal's lock",
        ),
    ];
    for (socket, journal, why) in cases {
        let mut run = Run::new()
            .no_report()
            .scratch(&scratch)
            .arg("serve")
            .arg("--socket")
            .arg(socket);
        if let Some(journal) = journal {
            run = run.arg("--journal").arg(journal);
        }
        let out = run.run();
        out.code(2);
        assert!(
            out.stderr().contains("would be the server's socket") && out.stderr().contains(why),
            "{}",
            out.dump()
        );
        let left: Vec<String> = std::fs::read_dir(scratch.path())
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

/// A server that cannot bind its socket (a path too long for one, a directory that does not
/// exist) fails before it makes or empties any file: the outputs of another server given by
/// mistake keep their contents, and no journal is made.
#[test]
fn a_server_that_cannot_bind_its_socket_leaves_every_file_as_it_was() {
    let scratch = Scratch::new();
    let outputs = ["report.jsonl", "events.jsonl", "junit.xml"].map(|name| scratch.join(name));
    for output in &outputs {
        std::fs::write(output, "another server's\n").unwrap();
    }
    let long = scratch.join(&format!("{}.sock", "l".repeat(120)));
    let missing = scratch.join("no-such-dir").join("lanes.sock");
    for socket in [&long, &missing] {
        let journal = scratch.join("lanes.journal");
        let run = serve_on(&scratch, socket, &journal)
            .arg("--report")
            .arg(&outputs[0])
            .arg("--events")
            .arg(&outputs[1])
            .arg("--junit")
            .arg(&outputs[2])
            .run();
        run.code(2);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(stderr.contains("cannot listen on"), "{stderr}");
        for output in &outputs {
            assert_eq!(
                std::fs::read_to_string(output).unwrap(),
                "another server's\n",
                "{} changed by a server that could not start ({stderr})",
                output.display()
            );
        }
        assert!(!journal.exists(), "a journal was made: {stderr}");
    }
}

/// The journal must be a regular file of its own: one that is also the report, or a FIFO
/// (as `/dev/null` would be, a device), is refused before anything is made.
#[test]
fn a_journal_that_is_an_output_or_no_regular_file_is_refused() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    std::fs::write(&report, "kept\n").unwrap();
    let fifo = scratch.join("journal.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (journal, says) in [(&report, "is the journal"), (&fifo, "not a regular file")] {
        let run = serve_on(&scratch, &scratch.join("lanes.sock"), journal)
            .arg("--report")
            .arg(&report)
            .run();
        run.code(2);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(stderr.contains(says), "{stderr}");
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "kept\n");
        assert!(!scratch.join("lanes.sock").exists());
    }
    let made: Vec<String> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        made.iter()
            .all(|name| ["report.jsonl", "journal.fifo"].contains(&name.as_str())),
        "{made:?}"
    );
}

/// `ended` is the last answer on the connection of a `drain` (or `close`): requests sent after
/// it on the same connection are not read. (They were read once `ended` was written, and
/// answered `closed` when the server was slow enough to exit.)
#[test]
fn ended_is_the_last_answer_on_the_connection_of_a_drain() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    // A job that runs while the drain waits.
    assert_eq!(server.client("submit", &["a", "--", "sleep 0.5"]).code, 0);
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .write_all(
            b"{\"v\":1,\"op\":\"drain\"}\n{\"v\":1,\"op\":\"status\"}\n\
              {\"v\":1,\"op\":\"submit\",\"key\":\"a\",\"command\":\"true\"}\n",
        )
        .unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let answers: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{text}");
    assert_eq!(answers[1]["answer"], "ended", "{text}");
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 1, "{:#?}", report.jobs);
}

/// A `submit` batch cut off by the server's end (SIGTERM) says how many of the submissions it
/// sent were answered and from which line of its stdin on nothing was sent; each submission
/// answered `queued` or `started` has its record.
#[test]
fn a_batch_cut_off_by_the_servers_end_says_what_was_answered_and_what_not_sent() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1", "--grace", "1"]);
    let mut client = piped_submit(&server.socket);
    let mut stdin = client.stdin.take().unwrap();
    let mut answers = BufReader::new(client.stdout.take().unwrap());
    for i in 1..=3 {
        writeln!(stdin, "k\tsleep 30 # {i}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        answers.read_line(&mut line).unwrap();
        assert!(line.contains("\"seq\":"), "{line}");
    }
    server.running.signal(nix::sys::signal::Signal::SIGTERM);
    // Lines keep coming until the client finds the connection closed.
    let mut sent = 3;
    while sent < 10_000
        && writeln!(stdin, "k\ttrue")
            .and_then(|()| stdin.flush())
            .is_ok()
    {
        sent += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(stdin);
    let mut rest = String::new();
    answers.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    client
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = client.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the server closed the connection; stdin ")
            && stderr.contains(" was not sent; it answered "),
        "{stderr}"
    );
    let (_, report) = server.end();
    assert_eq!(report.jobs.len(), 3, "{:#?}", report.jobs);
}

/// A batch cut off by a server killed outright: the client says the submissions it sent and
/// got no answer for may have been admitted, before anyone sends them again (a server started
/// again on the journal ran 42 of 85 such in a new user's run).
#[test]
fn a_batch_cut_off_by_a_killed_server_says_the_unanswered_may_have_been_admitted() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let mut server = Spawned::start(
        Command::new(BIN)
            .args(["serve", "-j", "1", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(listening(&socket));
    let mut client = piped_submit(&socket);
    let mut stdin = client.stdin.take().unwrap();
    let mut answers = BufReader::new(client.stdout.take().unwrap());
    // More than the socket's buffers hold: the server answers it over many turns.
    let writer = std::thread::spawn(move || {
        let lines = "k\ttrue\n".repeat(200_000);
        let _ = stdin.write_all(lines.as_bytes());
    });
    let mut line = String::new();
    answers.read_line(&mut line).unwrap();
    assert!(line.contains("\"seq\":1"), "{line}");
    server.kill().unwrap();
    server.wait().unwrap();
    let mut rest = String::new();
    let _ = answers.read_to_string(&mut rest);
    let mut stderr = String::new();
    client
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(client.wait().unwrap().code(), Some(2), "{stderr}");
    writer.join().unwrap();
    assert!(
        stderr.contains("the unanswered ones may have been admitted before it ended"),
        "{stderr}"
    );
}

/// A batch whose journal lines cross a file-size limit part way: each admission is answered
/// by what the journal holds of it. A job whose line went out whole before the failure is
/// answered as usual (a server started after a crash knows it); one whose line was cut back
/// is answered with an error saying a crash would lose it (no server knows it). Every
/// submission in the failing burst was answered with that error, though a later server ran
/// those of them whose lines were whole.
#[test]
fn each_answer_of_a_batch_cut_short_by_the_journal_says_what_a_crash_would_do() {
    let scratch = Scratch::new();
    let (mut server, socket, journal) = server_with_4_kib_files(&scratch, Stdio::null());
    let lines: String = (1..=40)
        .map(|i| format!("k{i}\ttrue {}\n", "x".repeat(150)))
        .collect();
    let batch = client_at(&socket, "submit", &["--json"], Some(&lines));
    let answers = batch.answers();
    assert_eq!(answers.len(), 40, "{}{}", batch.stdout, batch.stderr);
    // Submissions refused among ones `queued`: the batch's status says so.
    assert_eq!(batch.code, 2, "{}{}", batch.stdout, batch.stderr);
    let text = std::fs::read_to_string(&journal).unwrap();
    let held: std::collections::BTreeSet<u64> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|line| line["a"].as_u64())
        .collect();
    let (mut usual, mut lost) = (0, 0);
    for answer in &answers {
        match answer.answer.as_str() {
            "started" | "queued" => {
                let seq = answer.seq.unwrap();
                assert!(held.contains(&seq), "seq {seq} answered {}", answer.answer);
                usual += 1;
            }
            "error" => {
                let error = answer.error.clone().unwrap_or_default();
                if let Some(rest) = error.strip_prefix("seq ") {
                    let seq: u64 = rest.split(' ').next().unwrap().parse().unwrap();
                    assert!(
                        !held.contains(&seq) && error.contains("would not outlive a crash"),
                        "seq {seq}: {error}"
                    );
                    lost += 1;
                } else {
                    assert!(error.contains("admits no more jobs"), "{error}");
                }
            }
            other => panic!("{other}: {answer:?}"),
        }
    }
    assert!(usual > 0 && lost > 0, "{usual} usual, {lost} lost answers");
    let close = client_at(&socket, "close", &[], None);
    assert_eq!(close.code, 0, "{}{}", close.stdout, close.stderr);
    server.wait().unwrap();
}

/// A journal line that cannot be written (here a file-size limit, `ulimit -f`, as a full disk
/// would) makes no admission durable: the submission it was for is answered with an error
/// saying so, not `queued`; later submissions are refused; and the journal is cut back to its
/// last whole line, so that a next server can still read it.
#[test]
fn an_admission_the_journal_cannot_hold_is_answered_with_an_error_and_admissions_stop() {
    let scratch = Scratch::new();
    let stderr_path = scratch.join("server.err");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let (mut server, socket, journal) = server_with_4_kib_files(&scratch, stderr.into());
    let first = client_at(&socket, "submit", &["first", "--", "true"], None);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    // Its journal line crosses the 4 KiB limit: the write fails.
    let long = format!("true {}", "x".repeat(6000));
    let second = client_at(&socket, "submit", &["--json", "big", "--", &long], None);
    assert_eq!(second.code, 2, "{}{}", second.stdout, second.stderr);
    let error = second.answer().error.unwrap_or_default();
    assert!(error.contains("journal could not be written"), "{error}");
    let third = client_at(&socket, "submit", &["--json", "small", "--", "true"], None);
    assert_eq!(third.code, 2, "{}{}", third.stdout, third.stderr);
    let error = third.answer().error.unwrap_or_default();
    assert!(error.contains("admits no more jobs"), "{error}");
    // `status` says so, as it does of an ending server.
    let status = client_at(&socket, "status", &["--json"], None);
    assert_eq!(status.code, 13, "{}{}", status.stdout, status.stderr);
    let answer: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(answer["admitting"], Value::Bool(false), "{}", status.stdout);
    let status = client_at(&socket, "status", &[], None);
    assert!(
        status.stdout.contains("admitting no more"),
        "{}",
        status.stdout
    );
    // Every line of the journal is whole.
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|err| panic!("{line:?}: {err}"));
    }
    let close = client_at(&socket, "close", &[], None);
    assert_eq!(close.code, 0, "{}{}", close.stdout, close.stderr);
    server.wait().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(
        stderr.matches("cannot write the journal").count(),
        1,
        "{stderr}"
    );
}

/// `drain` and `close` end with the server's `ended` answer once its report is written: a
/// server killed while they wait leaves them with an error (exit status 2), not a success.
#[test]
fn drain_and_close_whose_server_is_killed_before_its_end_say_so() {
    let scratch = Scratch::new();
    let (mut server, socket) = first_server(&scratch, &["-j", "1", "--grace", "30"]);
    // A job that ignores SIGTERM, and ends once the test is done.
    let job = "trap '' TERM; touch \"$D/running\"; until [ -e \"$D/stop\" ] || [ ! -d \"$D\" ]; do sleep 0.1; done";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", job], None).code,
        0
    );
    assert!(wait_until(Duration::from_secs(20), || scratch
        .join("running")
        .exists()));
    let mut waiting = Vec::new();
    for task in ["drain", "close"] {
        let mut client = Command::new(BIN)
            .arg(task)
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(client.stdout.take().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        assert!(first.contains("running"), "{task}: {first}");
        waiting.push((client, reader));
    }
    // Both are held: the job ignores SIGTERM for its 30 s grace.
    let _ = server.kill();
    server.wait().unwrap();
    for (client, mut reader) in waiting {
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        let out = client.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rest}{stderr}");
        assert!(
            stderr.contains("without saying its report was written"),
            "{stderr}"
        );
    }
    scratch.write("stop", "");
}

/// A server (`-j 1`) on `lanes.sock` in `scratch`, journal `lanes.journal`, whose files may
/// not grow past 4 KiB (`prlimit --fsize`, as a full disk would stop them), its stderr to
/// `stderr`; returned once it listens, with its socket and journal.
fn server_with_4_kib_files(scratch: &Scratch, stderr: Stdio) -> (Spawned, PathBuf, PathBuf) {
    let socket = scratch.join("lanes.sock");
    let journal = scratch.join("lanes.journal");
    let server = Spawned::start(
        Command::new("prlimit")
            .arg("--fsize=4096")
            .arg("--")
            .arg(BIN)
            .args(["serve", "-j", "1", "--socket"])
            .arg(&socket)
            .arg("--journal")
            .arg(&journal)
            .env("D", scratch.path())
            .stdout(Stdio::null())
            .stderr(stderr),
    );
    assert!(listening(&socket));
    (server, socket, journal)
}

#[test]
fn a_key_that_begins_with_a_dash_and_a_batch_without_a_template_are_told_how_under_serve() {
    // clap's tip for `lanes submit -x -- make` is `-- -x`, which takes -x for the COMMAND.
    let scratch = Scratch::new();
    let out = Command::new(BIN)
        .args(["submit", "--socket"])
        .arg(scratch.join("none.sock"))
        .args(["--", "-x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("a KEY that begins with `-` is given on stdin: `printf -- '-x\\tCOMMAND\\n' | lanes submit`"),
        "{said}"
    );
    // `lanes serve` takes neither a trailing command nor a manifest.
    let out = Command::new(BIN)
        .args(["serve", "--batch-size", "2", "--socket"])
        .arg(scratch.join("s.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--batch-size needs a command template (--command): a batch"),
        "{said}"
    );
    assert!(!scratch.exists("s.sock"));
}

/// `lanes serve --help` and `lanes help serve` show a server's usage and options: not the
/// tasks, nor the options a server refuses.
#[test]
fn serve_has_a_help_of_its_own() {
    let help = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = help(&["serve", "--help"]);
    assert_eq!(text, help(&["help", "serve"]));
    assert!(text.contains("Usage: lanes serve [OPTIONS]"), "{text}");
    for shown in [
        "--socket",
        "--journal",
        "--requeue-lost",
        "--max-concurrent",
    ] {
        assert!(text.contains(shown), "{shown} missing:\n{text}");
    }
    for hidden in [
        "--dry-run",
        "--strict",
        "--lock-dir",
        "--resume",
        "Commands:",
        "[FILE]",
    ] {
        assert!(!text.contains(hidden), "{hidden} shown:\n{text}");
    }
}

/// A key's control characters are escaped in the clients' lines for people: an escape
/// sequence or a newline in a key can neither colour the terminal nor forge a line.
#[test]
fn keys_are_shown_with_their_control_characters_escaped() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    let key = "evil\u{1b}[31mRED\nforged";
    let submitted = server.client("submit", &[key, "--", "sleep 30"]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    assert_eq!(
        submitted.stdout,
        "started seq 1 (key evil\\u{1b}[31mRED\\nforged) in slot 1\n"
    );
    let status = server.client("status", &[]);
    assert!(!status.stdout.contains('\u{1b}'), "{}", status.stdout);
    assert!(
        status.stdout.contains("(key evil\\u{1b}[31mRED\\nforged)"),
        "{}",
        status.stdout
    );
    let cancelled = server.client("cancel", &[key]);
    assert!(
        cancelled
            .stdout
            .starts_with("cancelled key evil\\u{1b}[31mRED\\nforged:"),
        "{}",
        cancelled.stdout
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, _) = server.end();
    out.code(0);
}

/// A process that answers on the socket, but not as a lanes server, is not taken for one.
#[test]
fn a_socket_answered_by_another_kind_of_server_is_refused_as_such() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let answering = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 64];
        let _ = stream.read(&mut request);
        stream
            .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            .unwrap();
    });
    let refused = serve_alone(&socket);
    refused.code(2);
    assert!(
        refused.stderr().contains("but not as a lanes server"),
        "{}",
        refused.stderr()
    );
    answering.join().unwrap();
}

/// A stdin line under 1 MiB whose request, encoded as JSON, is over it (control characters
/// grow sixfold) is not sent, and the lines after it still are.
#[test]
fn a_batch_line_too_long_once_encoded_is_not_sent_and_the_rest_go_on() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1"]);
    let grown = "\u{1}".repeat(180_000);
    let input = format!("a\ttrue\nc\t{grown}\nb\ttrue\n");
    let batch = client_at(&server.socket, "submit", &["--json"], Some(&input));
    assert_eq!(batch.code, 2, "{}", batch.stderr);
    assert!(
        batch
            .stderr
            .contains("stdin line 2: longer than a request may be once encoded"),
        "{}",
        batch.stderr
    );
    let keys: Vec<String> = batch
        .answers()
        .into_iter()
        .map(|answer| answer.key.unwrap_or_default())
        .collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(report.jobs.len(), 2);
}

/// An output that cannot be made (its directory missing) fails a server's start before the
/// journal an earlier server left is rewritten, and before any other output is emptied.
#[test]
fn an_output_that_cannot_be_made_leaves_the_journal_and_the_other_outputs_as_they_were() {
    let scratch = Scratch::new();
    let journal = scratch.join("lanes.journal");
    let text = "{\"journal\":2,\"last\":3}\n{\"a\":3,\"k\":\"k\",\"c\":\"true\"}\n";
    std::fs::write(&journal, text).unwrap();
    let keep = scratch.join("keep.jsonl");
    std::fs::write(&keep, "kept\n").unwrap();
    for (flag, other) in [("--report", "--events"), ("--events", "--report")] {
        let run = serve_on(&scratch, &scratch.join("lanes.sock"), &journal)
            .arg(flag)
            .arg(scratch.join("missing").join("out.jsonl"))
            .arg(other)
            .arg(&keep)
            .run();
        run.code(2);
        assert!(
            run.stderr().contains("No such file or directory"),
            "{}",
            run.stderr()
        );
        assert_eq!(std::fs::read_to_string(&journal).unwrap(), text);
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "kept\n");
    }
}

/// `lanes serve --socket SOCKET`, nothing else, run to its end (a start refused, here).
fn serve_alone(socket: &Path) -> Output {
    Run::new()
        .no_report()
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .run()
}

/// `lanes serve` in `scratch` on `socket` and `journal`, for more arguments, with no report of
/// the harness's own.
fn serve_on(scratch: &Scratch, socket: &Path, journal: &Path) -> Run {
    Run::new()
        .no_report()
        .scratch(scratch)
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .arg("--journal")
        .arg(journal)
}

/// A running server's journal and report belong to it: a second server (on its own socket
/// and journal) or a plain run that names either of them as an output is refused before
/// anything is made, and the running server goes on to record every job it admitted.
#[test]
fn a_running_servers_journal_and_report_are_no_other_lanes_outputs() {
    let scratch = Scratch::new();
    let journal = scratch.join("a.journal");
    let first = serve(
        &scratch,
        &["-j", "1", "--journal", journal.to_str().unwrap()],
    );
    let admitted = first.client("submit", &["k", "--", "echo first"]);
    assert_eq!(admitted.code, 0, "{}", admitted.stderr);
    let header = |journal: &Path| {
        let text = std::fs::read_to_string(journal).unwrap();
        text.lines().next().unwrap_or_default().to_owned()
    };
    let header_before = header(&journal);
    assert!(
        header_before.starts_with("{\"journal\":"),
        "{header_before}"
    );
    let second_socket = scratch.join("b.sock");
    let second_journal = scratch.join("b.journal");
    let refusals = [
        ("--report", &journal, "is the journal of a `lanes serve`"),
        ("--events", &journal, "is the journal of a `lanes serve`"),
        ("--report", &first.report, "another lanes writes its report"),
        ("--events", &first.report, "another lanes writes its report"),
    ];
    for (flag, path, says) in refusals {
        let second = serve_on(&scratch, &second_socket, &second_journal)
            .arg(flag)
            .arg(path)
            .run();
        second.code(2);
        assert!(
            second.stderr().contains(says),
            "{flag}: {}",
            second.stderr()
        );
        assert!(
            !second_socket.exists(),
            "{flag}: the refused server left its socket"
        );
        assert!(
            !second_journal.exists(),
            "{flag}: the refused server made its journal"
        );
        let plain = Run::new()
            .no_report()
            .scratch(&scratch)
            .arg(flag)
            .arg(path)
            .stdin("k\ttrue\n")
            .run();
        plain.code(2);
        assert!(plain.stderr().contains(says), "{flag}: {}", plain.stderr());
    }
    // A journal that is the running server's report is refused before its lock is made.
    let on_report = serve_on(&scratch, &second_socket, &first.report).run();
    on_report.code(2);
    assert!(
        on_report
            .stderr()
            .contains("another lanes writes its report"),
        "{}",
        on_report.stderr()
    );
    let mut lock = first.report.as_os_str().to_owned();
    lock.push(".lock");
    assert!(
        !Path::new(&lock).exists(),
        "the refused server made a lock file"
    );
    // Still the first server's journal, naming its report.
    assert_eq!(header(&journal), header_before);
    let later = first.client("submit", &["k", "--", "echo second"]);
    assert_eq!(later.code, 0, "{}", later.stderr);
    assert_eq!(first.client("drain", &[]).code, 0);
    let (out, report) = first.end();
    out.code(0);
    assert_eq!(report.summary.succeeded, 2, "{}", out.dump());
    assert_eq!(report.jobs.len(), 2, "{}", out.dump());
}

/// `--journal` naming a symbolic link to a file not made yet makes the journal where the
/// link points (the link stays), as every output follows such a link; a second server
/// given the target's own path is refused.
#[test]
fn a_journal_named_by_a_dangling_link_is_made_where_the_link_points() {
    let scratch = Scratch::new();
    std::fs::create_dir(scratch.join("real")).unwrap();
    std::fs::create_dir(scratch.join("cli")).unwrap();
    let link = scratch.join("cli").join("j.journal");
    std::os::unix::fs::symlink("../real/j.journal", &link).unwrap();
    let socket = scratch.join("lanes.sock");
    let running = serve_on(&scratch, &socket, &link).spawn();
    assert!(listening(&socket), "the socket did not appear");
    let admitted = client_at(&socket, "submit", &["k", "--", "true"], None);
    assert_eq!(admitted.code, 0, "{}", admitted.stderr);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    let target = scratch.join("real").join("j.journal");
    assert!(target.is_file(), "no journal where the link points");
    let second = serve_on(&scratch, &scratch.join("b.sock"), &target).run();
    second.code(2);
    assert!(
        second
            .stderr()
            .contains("another lanes serve uses the journal"),
        "{}",
        second.stderr()
    );
    assert_eq!(client_at(&socket, "close", &[], None).code, 0);
    running.wait().code(0);
}

/// For a moment after `kill -9` of a server, a child of it that has not yet started its
/// command still holds the journal's lock: a server started then waits for it (up to a
/// second) rather than say that another server uses the journal. Here the test holds the lock
/// for 300 ms after the server starts.
#[test]
fn a_journal_lock_held_for_a_moment_is_waited_for() {
    use std::os::fd::AsRawFd as _;
    let scratch = Scratch::new();
    let journal = scratch.join("lanes.journal");
    let lock = std::fs::File::create(scratch.join("lanes.journal.lock")).unwrap();
    // SAFETY: `lock` is open for the call.
    assert_eq!(
        unsafe { nix::libc::flock(lock.as_raw_fd(), nix::libc::LOCK_EX) },
        0
    );
    let socket = scratch.join("lanes.sock");
    let running = serve_on(&scratch, &socket, &journal).spawn();
    std::thread::sleep(Duration::from_millis(300));
    drop(lock);
    assert!(
        listening(&socket),
        "the server did not start once the lock was free"
    );
    assert_eq!(client_at(&socket, "close", &[], None).code, 0);
    running.wait().code(0);
}

/// A killed server's report replaced by another run's under the same name: its records'
/// seqs are other jobs, and the next server takes none of its own jobs as recorded.
#[test]
fn a_report_replaced_after_kill_9_records_none_of_the_servers_jobs() {
    let scratch = Scratch::new();
    let (mut first, socket) = first_server(&scratch, &["-j", "1"]);
    let submitted = client_at(
        &socket,
        "submit",
        &[],
        Some("a\techo $$ > \"$D/pid\"; exec sleep 30\nb\ttrue\nc\ttrue\n"),
    );
    assert_eq!(submitted.code, 10, "{}", submitted.stderr);
    scratch.wait_for("pid", Duration::from_secs(20));
    let pid = scratch.pid("pid");
    first.kill().unwrap();
    first.wait().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    // An unrelated run reuses the first server's report name: its seqs 1–3 are x, y, z.
    let unrelated = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("--report")
        .arg(scratch.join("first.jsonl"))
        .stdin("x\ttrue\ny\ttrue\nz\ttrue\n")
        .run();
    unrelated.code(0);
    let server = serve(&scratch, &["-j", "1"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    let seqs: Vec<u64> = report.jobs.iter().map(|job| job.seq).collect();
    assert_eq!(seqs, [1, 2, 3], "{}", out.dump());
    assert_eq!(
        report.job(1).result(),
        ("interrupted", Some("server_lost")),
        "{}",
        out.dump()
    );
    assert_eq!(report.job(2).result(), ("succeeded", None));
    assert_eq!(report.job(3).result(), ("succeeded", None));
}

/// A `--journal` that is some other file (a finished report), and an output that is a socket
/// (another server's), are refused before the journal or its lock is made.
#[test]
fn a_journal_of_another_kind_and_a_socket_output_make_nothing() {
    let scratch = Scratch::new();
    let finished = scratch.write("fin.jsonl", "{\"type\":\"run\"}\n");
    let run = serve_on(&scratch, &scratch.join("lanes.sock"), &finished).run();
    run.code(2);
    assert!(
        run.stderr().contains("line 1 is not a journal line"),
        "{}",
        run.stderr()
    );
    assert!(
        !scratch.join("fin.jsonl.lock").exists(),
        "a lock file was made"
    );
    assert_eq!(
        std::fs::read_to_string(&finished).unwrap(),
        "{\"type\":\"run\"}\n"
    );
    let other = serve(&scratch, &["-j", "1"]);
    let journal = scratch.join("second.journal");
    let run = serve_on(&scratch, &scratch.join("second.sock"), &journal)
        .arg("--report")
        .arg(&other.socket)
        .run();
    run.code(2);
    assert!(run.stderr().contains("it is a socket"), "{}", run.stderr());
    assert!(!journal.exists(), "the journal was made");
    assert!(
        !scratch.join("second.journal.lock").exists(),
        "a lock file was made"
    );
    assert_eq!(other.client("close", &[]).code, 0);
    other.running.wait().code(0);
}

/// An output given the server's own socket path is refused before anything is made.
#[test]
fn an_output_on_the_servers_own_socket_path_is_refused() {
    let scratch = Scratch::new();
    let socket = scratch.join("a.sock");
    let journal = scratch.join("a.journal");
    let run = serve_on(&scratch, &socket, &journal)
        .arg("--report")
        .arg(&socket)
        .run();
    run.code(2);
    assert!(
        run.stderr().contains("is the server's socket"),
        "{}",
        run.stderr()
    );
    assert!(!socket.exists(), "a file was made at the socket's path");
    assert!(!journal.exists(), "the journal was made");
}

#[test]
fn fail_fast_ends_the_server_and_later_calls_are_told_why() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--fail-fast", "--grace", "60s"]);
    start_stubborn(&server, &scratch, "a");
    assert_eq!(server.client("submit", &["b", "--", "exit 3"]).code, 0);
    // Job 2's failure stops the server: job 1 is being stopped, nothing more is admitted.
    assert!(wait_until(Duration::from_secs(20), || {
        let status = server.client("status", &["--json"]);
        status.stdout.contains("\"stopping\":\"fail_fast\"") && status.code == 13
    }));
    let late = server.client("submit", &["--json", "c", "--", "true"]);
    assert_eq!(late.code, 13, "{}{}", late.stdout, late.stderr);
    let answer = late.answer();
    assert_eq!(
        (answer.answer.as_str(), answer.why.as_deref()),
        ("closed", Some("fail_fast")),
        "{}",
        late.stdout
    );
    let mut drain = spawn_client(&server.socket, "drain", &["--json"]);
    let (answer, line) = first_answer(&mut drain);
    assert_eq!(
        (answer.answer.as_str(), answer.why.as_deref()),
        ("ending", Some("fail_fast")),
        "{line}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scratch.pid("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(ended_by(&mut drain, "drain").code(), Some(0));
    let (out, report) = server.end();
    out.code(1);
    assert_eq!(report.jobs.len(), 2, "{}", out.dump());
    assert_eq!(report.job(1).result(), ("interrupted", Some("fail_fast")));
    assert_eq!(report.job(2).result(), ("failed", Some("exit_status")));
}

/// A stop signal in the middle of a burst of submissions: every submission given a seq and a
/// record (admitted, or rejected for a full queue) has its answer written before the server
/// exits.
#[test]
fn every_submission_with_a_record_is_answered_when_a_stop_signal_cuts_a_burst() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "1", "--max-queued", "5", "--grace", "1"]);
    let mut client = piped_submit(&server.socket);
    let mut stdin = client.stdin.take().unwrap();
    let stdout = client.stdout.take().unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&read);
    let reader = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let answer: Answer = serde_json::from_str(&line.unwrap()).unwrap();
            seqs.extend(answer.seq);
            counted.fetch_add(1, Ordering::SeqCst);
        }
        seqs
    });
    let writer = std::thread::spawn(move || {
        let mut lines = String::from("k\techo $$ > \"$D/pid\"; exec sleep 30\n");
        for i in 0..50_000 {
            lines.push_str(&format!("k\ttrue # {i}\n"));
        }
        let _ = stdin.write_all(lines.as_bytes());
    });
    assert!(
        wait_until(Duration::from_secs(20), || read.load(Ordering::SeqCst)
            >= 2000),
        "no burst of answers"
    );
    server.running.signal(nix::sys::signal::Signal::SIGTERM);
    writer.join().unwrap();
    let answered = reader.join().unwrap();
    let _ = client.wait().unwrap();
    let (_, report) = server.end();
    let answered: std::collections::HashSet<u64> = answered.into_iter().collect();
    let unanswered: Vec<u64> = report
        .jobs
        .iter()
        .map(|job| job.seq)
        .filter(|seq| !answered.contains(seq))
        .collect();
    assert!(
        unanswered.is_empty(),
        "{} of {} records have no answer: {:?}",
        unanswered.len(),
        report.jobs.len(),
        &unanswered[..unanswered.len().min(10)]
    );
    assert!(report.jobs.len() >= 2000, "{}", report.jobs.len());
}

/// A `lanes cancel` under way when the server is killed is journaled: with `--requeue-lost`,
/// the next server records the job `cancelled` and does not run it again, nor the waiting job
/// the cancel dropped.
#[test]
fn requeue_lost_does_not_run_again_a_job_being_cancelled_when_the_server_died() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let journal = scratch.join("j.journal");
    let mut first = serve_spawned(
        &scratch,
        &["--grace", "60s", "--journal", journal.to_str().unwrap()],
    );
    // Under the second server, a run (which must not happen) ends at once.
    let job = "echo run >> \"$D/runs\"; [ -e \"$D/second\" ] && exit 0; trap '' TERM; \
               echo $$ > \"$D/pid\"; while :; do sleep 0.05; done";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", job], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", job], None).code,
        10
    );
    let mut cancel = spawn_client(&socket, "cancel", &["a"]);
    assert!(wait_until(Duration::from_secs(20), || {
        client_at(&socket, "status", &["--json"], None)
            .stdout
            .contains("\"stopping\":\"cancelled\"")
    }));
    kill_server_and_its_job(&mut first, &scratch);
    let _ = ended_by(&mut cancel, "cancel");
    let server = second_server(&scratch, &journal, &["--requeue-lost"]);
    let (out, report) = server.end();
    out.code(0);
    assert_eq!(scratch.read("runs"), "run\n", "run once, never again");
    // Job 1 is recorded by the second server; job 2's record (dropped by the cancel) may
    // have been journaled as written before the kill. Neither ran again.
    assert!(!report.jobs.is_empty(), "{:#?}", report.jobs);
    for job in &report.jobs {
        assert_eq!(job.result(), ("interrupted", Some("cancelled")), "{job:?}");
        assert!(!job.started, "{job:?}");
    }
    assert_eq!(report.jobs[0].seq, 1);
}

/// A supersede under way (`--cancel-in-progress`) when the server is killed is journaled: with
/// `--requeue-lost`, the next server records the stopped job `superseded` by the newer one and
/// does not run it again; the newer job runs, once.
#[test]
fn requeue_lost_does_not_run_again_a_job_being_superseded_when_the_server_died() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let journal = scratch.join("j.journal");
    let mut first = serve_spawned(
        &scratch,
        &[
            "--cancel-in-progress",
            "--grace",
            "60s",
            "--journal",
            journal.to_str().unwrap(),
        ],
    );
    // Under the second server, a run (which must not happen) ends at once.
    let old = "echo old >> \"$D/runs\"; [ -e \"$D/second\" ] && exit 0; trap '' TERM; \
               echo $$ > \"$D/pid\"; while :; do sleep 0.05; done";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", old], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    let new = "echo new >> \"$D/runs\"";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", new], None).code,
        10
    );
    assert!(wait_until(Duration::from_secs(20), || {
        client_at(&socket, "status", &["--json"], None)
            .stdout
            .contains("\"stopping\":\"superseded\"")
    }));
    kill_server_and_its_job(&mut first, &scratch);
    let server = second_server(
        &scratch,
        &journal,
        &["--requeue-lost", "--cancel-in-progress"],
    );
    server.running.wait().code(0);
    assert_eq!(
        scratch.read("runs"),
        "old\nnew\n",
        "each run once, the old never again"
    );
    // Decoded as values: the report's checker refuses `superseded_by`, which only
    // `--coalesce` sets in a one-shot run.
    let records: Vec<Value> = crate::records::events(&server.report)
        .into_iter()
        .filter(|r| r["type"] == "job")
        .collect();
    assert_eq!(records.len(), 2, "{records:#?}");
    let (old, new) = (&records[0], &records[1]);
    assert_eq!(
        (&old["seq"], &old["outcome"], &old["reason"]),
        (&json!(1), &json!("interrupted"), &json!("superseded")),
        "{old}"
    );
    assert_eq!(old["superseded_by"], 2, "{old}");
    assert_eq!(old["started"], false, "{old}");
    assert!(
        old["error"]
            .as_str()
            .is_some_and(|e| e.contains("being stopped, superseded by seq 2")),
        "{old}"
    );
    assert_eq!(
        (&new["seq"], &new["outcome"]),
        (&json!(2), &json!("succeeded"))
    );
}

/// A job `lanes close` was stopping when its server was killed is recorded by the next server
/// `interrupted`/`shutdown`, and never run again, `--requeue-lost` or not: the close asked
/// for it to stop.
#[test]
fn requeue_lost_does_not_run_again_a_job_lanes_close_was_stopping_when_the_server_died() {
    let scratch = Scratch::new();
    let journal = scratch.join("j.journal");
    let mut first = serve_spawned(
        &scratch,
        &["--grace", "60s", "--journal", journal.to_str().unwrap()],
    );
    let socket = scratch.join("lanes.sock");
    // Under the second server, a run (which must not happen) ends at once.
    let job = "echo run >> \"$D/runs\"; [ -e \"$D/second\" ] && exit 0; trap '' TERM; \
               echo $$ > \"$D/pid\"; while :; do sleep 0.05; done";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", job], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    // `close` returns once the server has ended: it is cut off by the kill.
    let mut close = spawn_client(&socket, "close", &[]);
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&journal).is_ok_and(|text| text.contains("{\"t\":1,"))
    }));
    kill_server_and_its_job(&mut first, &scratch);
    assert_ne!(close.wait().unwrap().code(), Some(0));
    let server = second_server(&scratch, &journal, &["--requeue-lost"]);
    // An interrupted job, and no stop signal to this server.
    server.running.wait().code(1);
    assert_eq!(scratch.read("runs"), "run\n", "run once, never again");
    let records: Vec<Value> = crate::records::events(&server.report)
        .into_iter()
        .filter(|r| r["type"] == "job")
        .collect();
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(
        (&record["seq"], &record["outcome"], &record["reason"]),
        (&json!(1), &json!("interrupted"), &json!("shutdown")),
        "{record}"
    );
    assert_eq!(record["started"], false, "{record}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("`lanes close` or a stop signal was stopping it")),
        "{record}"
    );
}

/// A journal's live jobs are refused to a server that would run them under another command
/// template, shell or working directory: a job admitted as the argument of `echo got: {}`
/// ran as a command of its own under a server restarted without `--command`.
#[test]
fn a_journal_s_jobs_are_refused_to_a_server_that_would_run_them_otherwise() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let journal = scratch.join("j.journal");
    let template =
        "echo got {} >> \"$D/args\"; echo $$ > \"$D/pid\"; [ -e \"$D/second\" ] || sleep 60";
    let mut first = serve_spawned(
        &scratch,
        &[
            "-j",
            "1",
            "--command",
            template,
            "--journal",
            journal.to_str().unwrap(),
        ],
    );
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", "first"], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    let hostile = format!("touch {}/PWNED", scratch.path().display());
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", &hostile], None).code,
        10
    );
    kill_server_and_its_job(&mut first, &scratch);
    let other = scratch.join("other");
    std::fs::create_dir(&other).unwrap();
    for (args, cwd, wanted) in [
        (&[][..], scratch.path(), "the command template is none here"),
        (
            &["--command", template][..],
            other.as_path(),
            "the working directory is",
        ),
        (
            &["--command", template, "--shell", "bash"][..],
            scratch.path(),
            "bash` here, `",
        ),
    ] {
        let out = Run::new()
            .scratch(&scratch)
            .cwd(cwd)
            .no_report()
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--journal")
            .arg(&journal)
            .args(args)
            .run();
        out.code(2);
        assert!(
            out.stderr()
                .contains("holds 1 job an earlier server admitted that this one would run")
                && out.stderr().contains(wanted),
            "{args:?}: {}",
            out.dump()
        );
        assert!(!scratch.exists("PWNED"));
    }
    // As the earlier server ran (`/bin/sh` is the default `sh`): the waiting job runs, as the
    // template's argument.
    scratch.write("second", "");
    let server = serve(
        &scratch,
        &[
            "--journal",
            journal.to_str().unwrap(),
            "--command",
            template,
            "--shell",
            "/bin/sh",
        ],
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    // Exit 1: the job that was running is `server_lost`.
    server.running.wait().code(1);
    assert!(!scratch.exists("PWNED"));
    assert_eq!(scratch.read("args"), format!("got first\ngot {hostile}\n"));
}

/// A server started on a journal whose earlier report is gone says so: the jobs it would have
/// found recorded there are recorded (or run) as if no record had been written.
#[test]
fn a_server_says_when_the_earlier_report_cannot_be_read() {
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let report = scratch.join("r1.jsonl");
    let mut first = serve_spawned(&scratch, &["--report", report.to_str().unwrap()]);
    let job = "echo $$ > \"$D/pid\"; [ -e \"$D/second\" ] || sleep 60";
    assert_eq!(
        client_at(&socket, "submit", &["a", "--", job], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    kill_server_and_its_job(&mut first, &scratch);
    std::fs::remove_file(scratch.join("r1.jsonl")).unwrap();
    scratch.write("second", "");
    let server = serve(&scratch, &[]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (out, report) = server.end();
    out.code(1);
    assert!(
        out.stderr().contains("the earlier server's report")
            && out.stderr().contains("r1.jsonl cannot be read"),
        "{}",
        out.dump()
    );
    assert_eq!(report.job(1).result(), ("interrupted", Some("server_lost")));
}

/// A job's end is journaled once its record is in the report, also when nothing else happens
/// after it: an idle server kept its last job live in the journal, and a server started on the
/// journal after a crash recorded that job again (`server_lost`) when the report was gone.
#[test]
fn an_idle_server_journals_the_end_of_its_last_job() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &[]);
    assert_eq!(server.client("submit", &["a", "--", "true"]).code, 0);
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(
            &server.report
        )
        .is_ok_and(|text| text.contains("\"type\":\"job\""))),
        "no record"
    );
    // Nothing is sent to the server from here on: only the record's writing may wake it.
    let journal = scratch.join("lanes.journal");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(
            &journal
        )
        .is_ok_and(|text| text.contains("{\"e\":1}"))),
        "{}",
        std::fs::read_to_string(&journal).unwrap_or_default()
    );
    assert_eq!(server.client("drain", &[]).code, 0);
    server.running.wait().code(0);
}

/// A server started again after a crash with the earlier one's `--report` is refused: that
/// file holds the only records of the jobs the earlier server ended, and would be written
/// afresh (the natural restart, the same command line, lost a job's only record). The journal
/// is left as it was: the server given another report records the job left. After a clean
/// end, the report is written afresh as a run's is.
#[test]
fn a_restart_after_a_crash_on_the_earlier_report_is_refused() {
    let scratch = Scratch::new();
    let report = scratch.join("r.jsonl");
    let journal = scratch.join("j.journal");
    let mut first = serve_spawned(
        &scratch,
        &[
            "--report",
            report.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ],
    );
    let socket = scratch.join("lanes.sock");
    let ended = client_at(&socket, "submit", &["--wait", "a", "--", "true"], None);
    assert_eq!(ended.code, 0, "{}", ended.stderr);
    let job = "echo $$ > \"$D/pid\"; [ -e \"$D/second\" ] || sleep 60";
    assert_eq!(
        client_at(&socket, "submit", &["b", "--", job], None).code,
        0
    );
    scratch.wait_for("pid", Duration::from_secs(20));
    kill_server_and_its_job(&mut first, &scratch);
    let journaled = scratch.read("j.journal");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["serve", "--socket"])
        .arg(&socket)
        .arg("--report")
        .arg(&report)
        .arg("--journal")
        .arg(&journal)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("is the one of the earlier server, which ended with 1 job left"),
        "{}",
        out.dump()
    );
    assert_eq!(
        scratch.read("j.journal"),
        journaled,
        "the journal was rewritten"
    );
    assert!(
        scratch.read("r.jsonl").contains("\"seq\":1"),
        "the record of seq 1 is kept"
    );
    scratch.write("second", "");
    let server = serve(&scratch, &["--journal", journal.to_str().unwrap()]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, second) = server.end();
    assert_eq!(second.job(2).result(), ("interrupted", Some("server_lost")));
    // After a clean end, nothing is left: a run's report, written afresh.
    let server = serve(&scratch, &["--journal", journal.to_str().unwrap()]);
    assert_eq!(server.client("drain", &[]).code, 0);
    server.running.wait().code(0);
}

/// Pipelined requests: an answer that is ready is written at once, not held behind a later
/// request's answer that comes late (a `cancel` waits for its job's end).
#[test]
fn a_ready_answer_is_not_held_behind_a_later_one() {
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "2", "--grace", "60s"]);
    start_stubborn(&server, &scratch, "b");
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Both in one write: the cancel's answer comes once job 1 has ended (after the grace).
    stream
        .write_all(
            b"{\"v\":1,\"op\":\"submit\",\"key\":\"a\",\"command\":\"true\"}\n\
              {\"v\":1,\"op\":\"cancel\",\"key\":\"b\"}\n",
        )
        .unwrap();
    let first = answer_line(&mut stream);
    assert!(
        first.contains("\"answer\":\"started\"") && first.contains("\"key\":\"a\""),
        "the submission's answer waited for the cancel's: {first:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scratch.pid("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let second = answer_line(&mut stream);
    assert!(second.contains("\"answer\":\"cancelled\""), "{second:?}");
    drop(stream);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert_eq!(report.job(1).result(), ("interrupted", Some("cancelled")));
}

/// `lanes set -j` raises a server's cap while its report's `run` record keeps the cap it
/// started with: `lanes timeline` draws that report in every format, counting the highest
/// slot its jobs ran in as the cap.
#[test]
fn the_timeline_of_a_server_whose_cap_was_raised_is_drawn() {
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let events_arg = events.to_str().unwrap().to_owned();
    let server = serve(&scratch, &["-j", "1", "--events", &events_arg]);
    let raised = server.client("set", &["--json", "-j", "3"]).answer();
    assert_eq!(raised.max_concurrent, Some(3));
    let hold = format!("touch \"$D/started.$LANES_KEY\"; {}", blocked_on("go"));
    for key in ["a", "b", "c"] {
        assert_eq!(server.client("submit", &[key, "--", &hold]).code, 0);
    }
    for key in ["a", "b", "c"] {
        scratch.wait_for(&format!("started.{key}"), Duration::from_secs(20));
    }
    scratch.write("go", "");
    assert_eq!(server.client("drain", &[]).code, 0);
    let report_path = server.report.clone();
    server.running.wait().code(0);
    let text = std::fs::read_to_string(&report_path).expect("the report");
    let report = Report::parse_raised(&text, Some(3)).unwrap_or_else(|e| panic!("{e}"));
    let mut slots: Vec<u32> = report.jobs.iter().filter_map(|j| j.slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, [1, 2, 3]);
    for name in ["t.html", "t.md", "t.json"] {
        let drawn = draw_timeline(&report_path, Some(&events), &scratch.join(name));
        drawn.code(0);
    }
    let markdown = scratch.read("t.md");
    assert!(
        markdown.contains("of `-j 1, raised to at least 3`"),
        "{markdown}"
    );
}

#[test]
fn a_running_batch_counts_each_of_its_jobs_in_answers_status_and_cancel() {
    let scratch = Scratch::new();
    let template = format!(
        "for a in {{}}; do touch \"$D/started.$a\"; done; {}",
        blocked_on("go")
    );
    let events = scratch.join("events.jsonl");
    let events_arg = events.to_str().unwrap().to_owned();
    let server = serve(
        &scratch,
        &[
            "-j",
            "1",
            "--command",
            &template,
            "--batch-size",
            "3",
            "--batch-delay",
            "60s",
            "--events",
            &events_arg,
        ],
    );
    for arg in ["x1", "x2", "x3"] {
        let code = server.client("submit", &["a", "--", arg]).code;
        assert!(code == 0 || code == 10, "{code}");
    }
    // The three make a full batch: it starts at once.
    scratch.wait_for("started.x3", Duration::from_secs(20));
    let queued = server.client("submit", &["--json", "a", "--", "x4"]);
    assert_eq!(queued.code, 10);
    assert_eq!(queued.answer().ahead, Some(3), "the batch's three jobs");
    // The next job would be taken with x4: x4 is not ahead of it.
    let joining = server.client("submit", &["--json", "a", "--", "x5"]);
    assert_eq!(joining.code, 10);
    assert_eq!(joining.answer().ahead, Some(3), "x4 goes with it");
    let plain = server.client("status", &[]).stdout;
    assert!(
        plain.contains("running seq 1 (key a) in slot 1")
            && plain.contains("running seq 2 (key a, in the batch of seq 1) in slot 1")
            && plain.contains("running seq 3 (key a, in the batch of seq 1) in slot 1")
            && plain.contains("waiting (key a): seq 4 (3 ahead), seq 5 (3 ahead)"),
        "{plain}"
    );
    let status = server.client("status", &["--json"]).answer();
    let running = status.running.unwrap();
    let listed: Vec<(u64, u64)> = running
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r["batch"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, [(1, 1), (2, 1), (3, 1)]);
    assert_eq!(
        status.waiting.unwrap()[0]["jobs"][0]["ahead"].as_u64(),
        Some(3)
    );
    // A drain counts jobs as status does: the batch's three run, two wait.
    let mut drain = spawn_client(&server.socket, "drain", &["--json"]);
    let (ending, _) = first_answer(&mut drain);
    assert_eq!(ending.answer, "ending");
    assert_eq!(
        (ending.running, ending.waiting),
        (Some(serde_json::json!(3)), Some(serde_json::json!(2)))
    );
    let cancel = server.client("cancel", &["--json", "a"]).answer();
    assert_eq!(
        (cancel.dropped, cancel.stopped),
        (Some(vec![4, 5]), Some(1))
    );
    assert!(ended_by(&mut drain, "drain").success());
    let report_path = server.report.clone();
    server.running.wait();
    // Read as plain JSON: the batch's records have `batch` set.
    let cancelled: Vec<u64> = crate::records::events(&report_path)
        .iter()
        .filter(|r| r["type"] == "job" && r["reason"] == "cancelled")
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(cancelled.len(), 5, "{cancelled:?}");
    let queued_ahead: Vec<(u64, u64)> = crate::records::events(&events)
        .iter()
        .filter(|e| e["type"] == "queued")
        .map(|e| (e["seq"].as_u64().unwrap(), e["ahead"].as_u64().unwrap()))
        .collect();
    assert_eq!(queued_ahead[3..], [(4, 3), (5, 3)], "{queued_ahead:?}");
}

#[test]
fn cancel_names_a_run_already_being_stopped_and_leaves_it_its_reason() {
    let scratch = Scratch::new();
    let server = serve(
        &scratch,
        &["-j", "1", "--cancel-in-progress", "--grace", "300ms"],
    );
    start_stubborn(&server, &scratch, "a");
    // The newer job supersedes the running one, which takes its grace to stop.
    let newer = server.client("submit", &["--json", "a", "--", "echo never"]);
    assert_eq!(newer.code, 10, "{}", newer.stdout);
    let cancel = server.client("cancel", &["--json", "a"]).answer();
    assert_eq!(cancel.dropped, Some(vec![2]));
    assert_eq!(cancel.stopped, None, "this cancel stopped nothing");
    let stopping = cancel.stopping.expect("the run being stopped");
    assert_eq!(stopping["seq"], 1);
    assert_eq!(stopping["reason"], "superseded");
    assert_eq!(server.client("drain", &[]).code, 0);
    let report_path = server.report.clone();
    server.running.wait();
    // Read as plain JSON: job 1's record names the job that superseded it.
    let reasons: BTreeMap<u64, String> = crate::records::events(&report_path)
        .iter()
        .filter(|r| r["type"] == "job")
        .map(|r| {
            (
                r["seq"].as_u64().unwrap(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(reasons[&1], "superseded");
    assert_eq!(reasons[&2], "cancelled");
}

#[test]
fn a_server_given_jobs_another_way_says_which_way_it_was_given() {
    let scratch = Scratch::new();
    scratch.write("jobs.tsv", "a\ttrue\n");
    let cases: [(&[&str], &str); 3] = [
        (&["jobs.tsv"], "not from a FILE of jobs"),
        (
            &["missing.tsv"],
            "not from a FILE of jobs or a trailing command (`missing.tsv`)",
        ),
        (
            &["--", "echo", "hi"],
            "a trailing command (`echo`); for a command template applied to every submission, \
             give --command TEMPLATE",
        ),
    ];
    for (args, said) in cases {
        let out = Run::new()
            .no_report()
            .cwd(scratch.path())
            .arg("serve")
            .args(args.iter().copied())
            .run();
        out.code(2);
        assert!(out.stderr().contains(said), "{args:?}: {}", out.dump());
        assert!(!scratch.exists("lanes.sock"));
    }
}

#[test]
fn a_json_report_whose_reader_went_away_leaves_its_missing_jobs_to_the_next_server() {
    // The first server's report is its stdout (`--json`), read to the tenth job's record,
    // then closed. The records written after that are lost with the pipe: their ends must
    // stay out of the journal, `drain` must not say the report is written, and the next
    // server records each of those jobs, so that every job has one record across the two
    // reports. (Before, the ends were journaled as records were handed to stdout, the journal
    // was emptied and the jobs were left with no record anywhere.)
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let mut first = Spawned::start(
        Command::new(BIN)
            .args(["serve", "--json", "-j", "1", "--socket"])
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(scratch.join("first.err")).unwrap()),
    );
    assert!(listening(&socket));
    let mut stdout = BufReader::new(first.stdout.take().unwrap());
    let jobs = 10;
    for i in 1..=jobs {
        let key = format!("k{i}");
        let submitted = client_at(&socket, "submit", &["--wait", &key, "--", "true"], None);
        assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    }
    let mut whole_in_first = Vec::new();
    while whole_in_first.len() < jobs as usize {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout ended");
        let record: Value = serde_json::from_str(&line).unwrap();
        if record["type"] == "job" {
            whole_in_first.push(record["seq"].as_u64().unwrap());
        }
    }
    // The reader goes, with nothing left unread; more jobs come.
    drop(stdout);
    for i in 1..=jobs {
        let key = format!("m{i}");
        let submitted = client_at(&socket, "submit", &["--wait", &key, "--", "true"], None);
        assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    }
    let drained = client_at(&socket, "drain", &[], None);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert!(
        drained.stdout.contains("its report is incomplete"),
        "{}",
        drained.stdout
    );
    first.wait().unwrap();
    let said = std::fs::read_to_string(scratch.join("first.err")).unwrap();
    assert!(said.contains("the report is incomplete"), "{said}");
    let server = serve(&scratch, &["-j", "1"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, second) = server.end();
    assert_eq!(
        seqs_across(&whole_in_first, &second),
        (1..=2 * jobs).collect::<Vec<_>>(),
        "one record per job across the two reports; first: {whole_in_first:?}, second: {:#?}",
        second.jobs
    );
    assert!(second
        .jobs
        .iter()
        .all(|job| job.reason.as_deref() == Some("server_lost")));
}

#[test]
fn a_json_report_nobody_reads_holds_up_no_answer_and_no_start() {
    // Under `--json` a job's end is journaled once its record is written to stdout; a stdout
    // that is not read (a paused pager) must not hold the server up meanwhile: 1,000 jobs'
    // records fill the pipe, and every submission is still answered and every job runs.
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    let mut server = Spawned::start(
        Command::new(BIN)
            .args(["serve", "--json", "-j", "4", "--socket"])
            .arg(&socket)
            .env("D", scratch.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    assert!(listening(&socket));
    let jobs = 1000;
    let lines: String = (1..=jobs)
        .map(|i| format!("k{i}\techo {i} >> \"$D/ran\"\n"))
        .collect();
    let submitted = client_at(&socket, "submit", &[], Some(&lines));
    assert!(
        matches!(submitted.code, 0 | 10),
        "{}: {}",
        submitted.code,
        submitted.stderr
    );
    assert_eq!(
        submitted.stdout.lines().count(),
        jobs,
        "every line answered"
    );
    assert!(
        wait_until(Duration::from_secs(60), || scratch.lines("ran").len()
            == jobs),
        "{} of {jobs} jobs ran",
        scratch.lines("ran").len()
    );
    let status = client_at(&socket, "status", &[], None);
    assert_eq!(status.code, 0, "{}", status.stderr);
    // Read now, the report is whole, and the server ends with its journal emptied.
    let mut stdout = server.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let drained = client_at(&socket, "drain", &[], None);
    assert!(
        drained.stdout.contains("ended: its report is written"),
        "{}",
        drained.stdout
    );
    assert!(server.wait().unwrap().success());
    let report = Report::must_parse(&reader.join().unwrap());
    assert_eq!(report.jobs.len(), jobs);
    let journal = std::fs::read_to_string(scratch.join("lanes.journal")).unwrap();
    assert_eq!(journal.lines().count(), 1, "{journal}");
}

#[test]
fn jobs_a_killed_server_answered_queued_all_run_under_a_next_server_that_coalesces() {
    // The first server (no coalescing) answers three jobs of key q `queued` behind a running
    // one, and is killed. The next one coalesces; still, each of the three was promised its
    // run, and runs, in order.
    let scratch = Scratch::new();
    let (mut first, socket) = first_server(&scratch, &["-j", "1"]);
    let running = client_at(
        &socket,
        "submit",
        &["r", "--", "echo $$ > \"$D/r.pid\"; exec sleep 30"],
        None,
    );
    assert_eq!(running.code, 0, "{}", running.stderr);
    scratch.wait_for("r.pid", Duration::from_secs(10));
    for i in 1..=3 {
        let command = format!("echo {i} >> \"$D/q\"");
        let queued = client_at(&socket, "submit", &["q", "--", &command], None);
        assert_eq!(queued.code, 10, "{}", queued.stderr);
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // The lost job's process runs on after the kill (see the README); it is ours to end.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scratch.pid("r.pid")),
        nix::sys::signal::Signal::SIGKILL,
    );
    let server = serve(&scratch, &["-j", "1", "--coalesce", "latest"]);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, second) = server.end();
    assert_eq!(scratch.lines("q"), ["1", "2", "3"], "{:#?}", second.jobs);
    assert!(second
        .jobs
        .iter()
        .all(|job| job.reason.as_deref() != Some("superseded")));
}

#[test]
fn submissions_under_a_cap_never_reached_never_waited_for_the_cap() {
    // 60 keys submitted in one batch, -j 100: each job starts as the server takes it in; the
    // time the server spends starting the others is no wait for the cap.
    let scratch = Scratch::new();
    let server = serve(&scratch, &["-j", "100"]);
    let lines: String = (1..=60).map(|i| format!("k{i}\ttrue\n")).collect();
    let submitted = client_at(&server.socket, "submit", &[], Some(&lines));
    assert_eq!(submitted.stdout.lines().count(), 60, "{}", submitted.stderr);
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    assert_eq!(report.jobs.len(), 60);
    for job in &report.jobs {
        assert!(
            job.waits.iter().all(|w| w.cause != "cap"),
            "seq {}: {:?}",
            job.seq,
            job.waits
        );
    }
}

#[test]
fn an_events_fifo_nobody_reads_holds_up_no_start_and_no_end_of_a_server() {
    // The events file is a FIFO whose reader has it open and reads nothing (a paused
    // dashboard): the records' ends wait for nothing of it, and 300 jobs run to their end
    // meanwhile (the server waited for that file before it journaled their ends).
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let scratch = Scratch::new();
    let fifo = scratch.join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut paused = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    nix::fcntl::fcntl(paused.as_raw_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
    let server = serve(&scratch, &["-j", "2", "--events", fifo.to_str().unwrap()]);
    let jobs = 300;
    let lines: String = (1..=jobs)
        .map(|i| format!("k{}\techo {i} >> \"$D/ran\"\n", i % 7))
        .collect();
    let submitted = client_at(&server.socket, "submit", &[], Some(&lines));
    assert_eq!(
        submitted.stdout.lines().count(),
        jobs,
        "{}",
        submitted.stderr
    );
    let all_ran = wait_until(Duration::from_secs(30), || {
        scratch.lines("ran").len() == jobs
    });
    // Now read, so that the server can end.
    nix::fcntl::fcntl(
        paused.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        paused.read_to_string(&mut text).unwrap();
        text
    });
    assert_eq!(server.client("drain", &[]).code, 0);
    let (_, report) = server.end();
    let events = reader.join().unwrap();
    assert!(all_ran, "{} of {jobs} jobs ran", scratch.lines("ran").len());
    assert_eq!(report.jobs.len(), jobs);
    assert_eq!(events.matches("\"type\":\"ended\"").count(), jobs);
}

/// A client sends nothing to a socket another user serves (one who made a default socket
/// directory, `/tmp/lanes-UID`, before its owner): the request's command may hold secrets,
/// and a false `started` would be believed. The client says who serves it and exits 2.
#[test]
fn a_client_sends_nothing_to_a_socket_another_user_serves() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: needs root, to serve a socket as user nobody");
        return;
    }
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| Path::new(path).exists())
    else {
        eprintln!("skipped: no setpriv");
        return;
    };
    // The system's, which user nobody may run.
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        eprintln!("skipped: no {python}");
        return;
    }
    let scratch = Scratch::new();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    scratch.write(
        "impostor.py",
        "import socket, os, sys\n\
         d = sys.argv[1]\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.bind(d + '/lanes.sock')\n\
         os.chmod(d + '/lanes.sock', 0o777)\n\
         s.listen(1)\n\
         open(d + '/ready', 'w').close()\n\
         c, _ = s.accept()\n\
         c.settimeout(10)\n\
         got = c.recv(65536)\n\
         open(d + '/got', 'wb').write(got)\n\
         try:\n\
         \x20   c.sendall(b'{\"v\":1,\"answer\":\"started\",\"seq\":1,\"key\":\"k\",\"slot\":1}\\n')\n\
         except OSError:\n\
         \x20   pass\n",
    );
    let mut impostor = Command::new(setpriv)
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            python,
        ])
        .arg(scratch.join("impostor.py"))
        .arg(scratch.path())
        .spawn()
        .unwrap();
    scratch.wait_for("ready", Duration::from_secs(10));
    let out = Command::new(BIN)
        .args(["submit", "--socket"])
        .arg(scratch.join("lanes.sock"))
        .args(["k", "--", "deploy --token SECRET"])
        .output()
        .unwrap();
    impostor.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is served by uid") && stderr.contains("nothing was sent"),
        "{stderr}"
    );
    assert_eq!(scratch.read("got"), "", "the impostor was sent the request");
}

/// `lanes submit KEY echo hi` (the command without `--`) and `lanes submit -j 2 …` (a run's
/// option) are usage errors that say where the command and such options go; clap's own tip
/// (`-- -j`) would have made `-j` part of the job's command.
#[test]
fn submit_says_where_a_command_without_dashes_and_a_run_s_option_go() {
    let out = Run::new()
        .no_report()
        .args(["submit", "k", "echo", "hi"])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("hint: the command comes after `--`: `lanes submit KEY -- COMMAND"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .no_report()
        .args(["submit", "-j", "2", "k", "--", "echo"])
        .run();
    out.code(2);
    let err = out.stderr();
    assert!(
        err.contains("are given to `lanes serve`") && !err.contains("'-- -j'"),
        "{}",
        out.dump()
    );
}
