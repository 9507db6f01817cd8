//! `lanes timeline`: golden files of the three formats drawn from small reports (regenerated
//! with `LANES_REGENERATE=1`), the trace checked against the Trace Event format's required
//! fields, the page opened in a real headless Chromium, bad input refused with the file and
//! line, and a real run's report and events drawn.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// The fixtures: small reports written as lanes writes them (checked against the schema).
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/timeline")
}

/// Runs `lanes timeline ARGS` in the fixtures directory (so that the report's name in the
/// output is the same everywhere).
fn timeline(args: &[&str]) -> Output {
    Run::new()
        .no_report()
        .cwd(fixtures())
        .arg("timeline")
        .args(args)
        .run()
}

/// Compares `got` with the golden file `name` (or writes it, under `LANES_REGENERATE`).
fn golden(name: &str, got: &str) {
    let path = fixtures().join("golden").join(name);
    if std::env::var_os("LANES_REGENERATE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == got,
        "{} is out of date (regenerate with `LANES_REGENERATE=1 cargo test --test cli \
         timeline`); got:\n{got}",
        path.display()
    );
}

fn draw(report: &str, events: Option<&str>, out: &Path) -> Output {
    let mut args = vec![report];
    if let Some(events) = events {
        args.extend(["--events", events]);
    }
    let out_arg = out.to_str().unwrap();
    args.extend(["-o", out_arg]);
    timeline(&args)
}

#[test]
fn the_fixtures_are_reports_lanes_writes() {
    let schema = crate::outputs::schema();
    for name in ["small.jsonl", "unfinished.jsonl"] {
        let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
        for line in text.lines().filter(|l| l.ends_with('}')) {
            let record: Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                crate::outputs::schema_errors(&schema, &record),
                Vec::<String>::new(),
                "{name}: {line}"
            );
        }
    }
    let events = crate::events_schema::schema();
    let text = std::fs::read_to_string(fixtures().join("unfinished-events.jsonl")).unwrap();
    for line in text.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            crate::events_schema::errors(&events, &event),
            Vec::<String>::new()
        );
    }
}

#[test]
fn the_three_formats_match_their_golden_files() {
    let scratch = Scratch::new();
    for (report, events, stem) in [
        ("small.jsonl", None, "small"),
        (
            "unfinished.jsonl",
            Some("unfinished-events.jsonl"),
            "unfinished",
        ),
    ] {
        for ext in ["html", "json", "md"] {
            let out = scratch.join(&format!("{stem}.{ext}"));
            draw(report, events, &out).code(0);
            golden(
                &format!("{stem}.{ext}"),
                &std::fs::read_to_string(&out).unwrap(),
            );
        }
    }
}

#[test]
fn the_format_comes_from_the_extension_or_the_flag() {
    let scratch = Scratch::new();
    let out = scratch.join("trace.out");
    let o = out.to_str().unwrap();
    let refused = timeline(&["small.jsonl", "-o", o]);
    refused.code(2);
    assert!(
        refused.stderr().contains("--format"),
        "{}",
        refused.stderr()
    );
    timeline(&["small.jsonl", "-o", o, "--format", "json"]).code(0);
    let trace: Value = serde_json::from_str(&scratch.read("trace.out")).unwrap();
    assert!(trace["traceEvents"].is_array());
}

/// The Trace Event format's required fields (the "JSON Object Format" of the Trace Event
/// Format document): every event has `name`, `ph`, `pid` and `tid`; all but metadata events
/// a `ts` in microseconds; complete events (`X`) a `dur`; instant events (`i`) a scope `s`;
/// async events (`b`, `e`) an `id` and a `cat`, each begin ended by an end of the same name,
/// later, before that id begins again; and complete events of one thread nest.
fn check_trace(trace: &Value) -> Vec<&Value> {
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert!(
        matches!(trace["displayTimeUnit"].as_str(), Some("ms" | "ns")),
        "displayTimeUnit"
    );
    for event in events {
        assert!(event["name"].is_string(), "{event}");
        assert!(event["pid"].is_u64() && event["tid"].is_u64(), "{event}");
        let ph = event["ph"].as_str().expect("ph");
        match ph {
            "M" => assert!(
                matches!(event["name"].as_str(), Some("process_name" | "thread_name"))
                    && event["args"]["name"].is_string(),
                "{event}"
            ),
            "X" => {
                assert!(event["ts"].is_u64(), "{event}");
                assert!(event["dur"].is_u64(), "{event}");
            }
            "i" => {
                assert!(event["ts"].is_u64(), "{event}");
                assert!(
                    matches!(event["s"].as_str(), Some("g" | "p" | "t")),
                    "{event}"
                );
            }
            // Async events: an id and a category, which pair a begin with its end.
            "b" | "e" => {
                assert!(event["ts"].is_u64(), "{event}");
                assert!(event["id"].is_u64() && event["cat"].is_string(), "{event}");
            }
            other => panic!("unexpected phase {other}: {event}"),
        }
    }
    let mut open: BTreeMap<(String, u64), (String, u64)> = BTreeMap::new();
    for event in events {
        let id = (
            event["cat"].as_str().unwrap_or("").to_owned(),
            event["id"].as_u64().unwrap_or(0),
        );
        let name = event["name"].as_str().unwrap().to_owned();
        let ts = event["ts"].as_u64().unwrap_or(0);
        match event["ph"].as_str() {
            Some("b") => assert!(
                open.insert(id, (name, ts)).is_none(),
                "nested begin {event}"
            ),
            Some("e") => {
                let (begun, at) = open.remove(&id).expect("an end without a begin");
                assert!(begun == name && at <= ts, "{event}");
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "begins without an end: {open:?}");
    // Complete events on one thread: each starts after the one before ended, or within it.
    let mut threads: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for event in events.iter().filter(|e| e["ph"] == "X") {
        let ts = event["ts"].as_u64().unwrap();
        threads
            .entry((
                event["pid"].as_u64().unwrap(),
                event["tid"].as_u64().unwrap(),
            ))
            .or_default()
            .push((ts, ts + event["dur"].as_u64().unwrap()));
    }
    for (thread, mut spans) in threads {
        spans.sort();
        for pair in spans.windows(2) {
            let ((a0, a1), (b0, b1)) = (pair[0], pair[1]);
            assert!(
                b0 >= a1 || (b0 >= a0 && b1 <= a1),
                "thread {thread:?}: {pair:?}"
            );
        }
    }
    events.iter().collect()
}

#[test]
fn the_trace_has_the_trace_event_formats_required_fields_and_every_try_and_wait() {
    let scratch = Scratch::new();
    let out = scratch.join("small.json");
    draw("small.jsonl", None, &out).code(0);
    let trace: Value = serde_json::from_str(&scratch.read("small.json")).unwrap();
    let events = check_trace(&trace);
    let count = |cat: &str, pid: u64| {
        events
            .iter()
            .filter(|e| e["cat"] == cat && e["pid"] == pid)
            .count()
    };
    // 6 tries (one retried) on the key threads and on the slot threads, 8 waits, 2 jobs
    // that never ran.
    assert_eq!(count("try", 1), 6);
    assert_eq!(count("try", 2), 6);
    assert_eq!(
        count("wait", 1),
        16,
        "a begin and an end for each of 8 waits"
    );
    assert_eq!(count("never_ran", 1), 2);
    // The retried try of job 3: 500 ms from the run's start.
    let retried: Vec<_> = events
        .iter()
        .filter(|e| e["args"]["retried"] == true && e["pid"] == 1)
        .collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(
        (retried[0]["ts"].as_u64(), retried[0]["dur"].as_u64()),
        (Some(0), Some(500_000))
    );
    // Each try tells its own reason: the retried one failed on its exit status, while the
    // record (which succeeded on its second try) has none.
    assert_eq!(retried[0]["args"]["reason"], "exit_status");
    let second = events
        .iter()
        .find(|e| e["args"]["seq"] == 3 && e["args"]["attempt"] == 2 && e["pid"] == 1)
        .unwrap();
    assert_eq!(second["args"]["reason"], Value::Null);
}

/// The attributes of the page's status element in a dumped DOM.
fn status(dom: &str) -> BTreeMap<String, String> {
    let start = dom.find("<p id=\"status\"").expect("the status element");
    let tag = &dom[start..start + dom[start..].find('>').unwrap()];
    let mut attributes = BTreeMap::new();
    for part in tag.split(" data-").skip(1) {
        let (name, value) = part.split_once("=\"").unwrap();
        attributes.insert(name.to_owned(), value.trim_end_matches('"').to_owned());
    }
    attributes
}

/// A wait's rectangle as the page drew it.
#[derive(Debug)]
struct WaitRect {
    x: f64,
    width: f64,
    y: f64,
    fill: String,
}

/// The waits' rectangles of a drawn page's DOM, in the order drawn (the last on top).
fn wait_rects(dom: &str) -> Vec<WaitRect> {
    dom.split("<rect ")
        .skip(1)
        .filter_map(|rest| {
            let tag = &rest[..rest.find('>')?];
            if !tag.contains("class=\"bar wait\"") {
                return None;
            }
            let attribute = |name: &str| {
                let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
                Some(tag[start..start + tag[start..].find('"')?].to_owned())
            };
            let number = |name: &str| attribute(name)?.parse::<f64>().ok();
            Some(WaitRect {
                x: number("x")?,
                width: number("width")?,
                y: number("y")?,
                fill: attribute("fill")?,
            })
        })
        .collect()
}

/// A Chromium to test the page with, if one is installed.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless Chromium on `page` with `extra` arguments in a process group of its own and
/// a fresh profile; returns its stdout. It is killed (by its group's id) if it does not end
/// within a minute, and no process of its group is left.
fn run_chromium(browser: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut command = Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().expect("start chromium");
    let pgid = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("chromium did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its helpers (zygote, renderer) go with it; any left over is killed by the group id.
    if !wait_until(Duration::from_secs(10), || group_members(pgid).is_empty()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(wait_until(Duration::from_secs(5), || group_members(pgid).is_empty()));
    }
    reader.join().unwrap()
}

#[test]
fn the_page_draws_in_a_real_browser_with_hostile_text_shown_as_text() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no Chromium found (install Debian's `chromium`) to open the timeline page"
        );
        return;
    };
    let scratch = Scratch::new();
    let page = scratch.join("small.html");
    draw("small.jsonl", None, &page).code(0);
    let dom = run_chromium(
        &browser,
        &page,
        &["--virtual-time-budget=5000".into(), "--dump-dom".into()],
    );
    let status = status(&dom);
    assert_eq!(
        status.get("state").map(String::as_str),
        Some("drawn"),
        "{dom}"
    );
    assert_eq!(status["errors"], "0");
    // Rows: 4 keys (build, deploy, the hostile one, no key) and 2 slots. Bars: 6 tries on
    // their key rows and 6 on their slot rows; 8 waits; 2 jobs that never ran.
    assert_eq!(status["rows"], "6");
    assert_eq!(status["bars"], "12");
    assert_eq!(status["waits"], "8");
    assert_eq!(status["marks"], "2");
    // The hostile key is text in a row label, not markup: no image, no attribute set by it.
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;\"q\""),
        "the key as text: {dom}"
    );
    // Whole in the label's title, its control character shown.
    assert!(
        dom.contains("\"q\"\\u{7}&lt;img src=x onerror="),
        "the key's control character shown: {dom}"
    );
    assert!(!dom.contains("data-pwned=\""), "the key ran: {dom}");
    assert!(!dom.contains("<img"), "the key became markup: {dom}");
    assert_eq!(dom.matches("<script").count(), 2, "only the page's scripts");
    // Where waits of one key overlap in its strip, the one on top is never a `key_busy` wait
    // over another cause: the job ahead's own cause (cap, retry delay) is why both wait.
    let waits = wait_rects(&dom);
    assert_eq!(waits.len(), 8, "{dom}");
    let mut overlaps = 0;
    for (i, top) in waits.iter().enumerate() {
        for under in &waits[..i] {
            let (from, to) = (
                top.x.max(under.x),
                (top.x + top.width).min(under.x + under.width),
            );
            if top.y == under.y && from < to {
                overlaps += 1;
                assert!(
                    top.fill != "var(--key_busy)" || under.fill == "var(--key_busy)",
                    "a key_busy wait hides a {} wait: {waits:?}",
                    under.fill
                );
            }
        }
    }
    assert!(overlaps >= 2, "{waits:?}");
    // A screenshot for people to look at.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("timeline-small.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &browser,
        &page,
        &[
            "--virtual-time-budget=5000".into(),
            "--window-size=1300,900".into(),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn bad_input_is_refused_with_the_file_and_line() {
    let scratch = Scratch::new();
    let out = scratch.join("t.html");
    let o = out.to_str().unwrap();
    let run_line = std::fs::read_to_string(fixtures().join("small.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let cases = [
        (
            "text.jsonl",
            "some text\n".to_owned(),
            "text.jsonl:1: not a lanes report",
        ),
        (
            "newer.jsonl",
            run_line.replace("\"schema\":2", "\"schema\":99") + "\n",
            "newer.jsonl:1: the report's schema version is 99",
        ),
        (
            "broken.jsonl",
            format!("{run_line}\n{{\"type\":\"job\",\"seq\":1}}\n{{\"type\":\"summary\"}}\n"),
            "broken.jsonl:2: bad job record",
        ),
        (
            "torn-middle.jsonl",
            format!("{run_line}\n{{\"type\":\"jo\n{{\"type\":\"job\"}}\n"),
            "torn-middle.jsonl:2: not a JSON line",
        ),
    ];
    for (name, text, want) in cases {
        let path = scratch.write(name, text);
        let got = timeline(&[path.to_str().unwrap(), "-o", o]);
        got.code(2);
        assert!(got.stderr().contains(want), "{name}: {}", got.stderr());
        assert!(!out.exists(), "nothing written for {name}");
    }
    // An events file of another run: its job 2 has another key; or it is from before the run.
    let events = std::fs::read_to_string(fixtures().join("unfinished-events.jsonl")).unwrap();
    let other_key = scratch.write(
        "other-key.jsonl",
        events.replace("\"seq\":2,\"key\":\"build\"", "\"seq\":2,\"key\":\"lint\""),
    );
    let got = timeline(&[
        "unfinished.jsonl",
        "--events",
        other_key.to_str().unwrap(),
        "-o",
        o,
    ]);
    got.code(2);
    assert!(
        got.stderr()
            .contains("other-key.jsonl:5: an events file from another run"),
        "{}",
        got.stderr()
    );
    let earlier = scratch.write(
        "earlier.jsonl",
        events.replace("2026-01-02T03:04:05.600Z", "2025-01-02T03:04:05.600Z"),
    );
    let got = timeline(&[
        "unfinished.jsonl",
        "--events",
        earlier.to_str().unwrap(),
        "-o",
        o,
    ]);
    got.code(2);
    assert!(
        got.stderr()
            .contains("earlier.jsonl:1: an events file from another run"),
        "{}",
        got.stderr()
    );
    assert!(!out.exists());
}

#[test]
fn a_real_runs_report_and_events_make_a_timeline_that_tells_why_jobs_waited() {
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--events"])
        .arg(&events)
        .stdin("a\tsleep 0.1\na\ttrue\nb\ttrue\n")
        .run();
    out.code(0);
    let report = out.report();
    // 2 waited behind 1 (same key), 3 for the one slot.
    let causes = |seq: u64| -> Vec<(String, Option<u64>)> {
        report
            .job(seq)
            .waits
            .iter()
            .map(|w| (w.cause.clone(), w.behind))
            .collect()
    };
    assert_eq!(causes(2)[0], ("key_busy".to_owned(), Some(1)));
    assert!(causes(3).iter().all(|c| c.0 == "cap"), "{:?}", causes(3));
    assert!(report.job(3).wait_ms.unwrap() >= 100);
    let report_path = scratch.write("report.jsonl", out.report_text.as_deref().unwrap());
    let page = scratch.join("run.html");
    let drawn = draw_timeline(&report_path, Some(&events), &page);
    drawn.code(0);
    let html = scratch.read("run.html");
    assert!(html.contains("key_busy"), "the waits are in the page");
    let md = scratch.join("run.md");
    draw_timeline(&report_path, None, &md).code(0);
    assert!(scratch.read("run.md").contains("```mermaid\ngantt"));
}

/// A report of `jobs` jobs over `keys` keys with -j 4, as lanes writes them, each job 10 ms
/// after the one before in its slot, the first waiting for the cap.
fn large_report(jobs: u64, keys: u64) -> String {
    let time = |ms: u64| {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_767_323_045_000 + ms);
        humantime::format_rfc3339_millis(at).to_string()
    };
    let mut text = format!(
        "{{\"type\":\"run\",\"version\":\"0.1.0\",\"schema\":2,\"started_at\":\"{}\",\
         \"max_concurrent\":4,\"source\":\"-\",\"containment\":\"process_group\"}}\n",
        time(0)
    );
    for seq in 1..=jobs {
        let slot = (seq - 1) % 4 + 1;
        let start = (seq - 1) / 4 * 10;
        let (end, key) = (start + 10, format!("k{}", seq % keys));
        let waits = if start > 0 {
            format!(
                ",\"waits\":[{{\"cause\":\"cap\",\"started_at\":\"{}\",\"ms\":{start}}}]",
                time(0)
            )
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{{\"type\":\"job\",\"seq\":{seq},\"line\":{seq},\"key\":\"{key}\",\"command\":\"true\",\
             \"outcome\":\"succeeded\",\"reason\":null,\"exit_code\":0,\"signal\":null,\"started\":true,\
             \"started_at\":\"{s}\",\"ended_at\":\"{e}\",\"duration_ms\":10,\"wait_ms\":{start},\
             \"attempts\":1,\"flaky\":false,\"slot\":{slot},\"leaked\":false,\"superseded_by\":null,\
             \"batch\":null,\"error\":null,\"cpu_ms\":null,\"memory_peak_bytes\":null,\"tries\":[{{\
             \"attempt\":1,\"outcome\":\"succeeded\",\"reason\":null,\"exit_code\":0,\"signal\":null,\
             \"slot\":{slot},\"started_at\":\"{s}\",\"ended_at\":\"{e}\",\"duration_ms\":10}}]{waits}}}\n",
            s = time(start),
            e = time(end),
        ));
    }
    text
}

#[test]
fn a_large_run_is_drawn_aggregated_and_says_so() {
    let scratch = Scratch::new();
    let report = scratch.write("large.jsonl", large_report(6_000, 100));
    let schema = crate::outputs::schema();
    let first_job: Value =
        serde_json::from_str(scratch.read("large.jsonl").lines().nth(1).unwrap()).unwrap();
    assert_eq!(
        crate::outputs::schema_errors(&schema, &first_job),
        Vec::<String>::new()
    );
    let page = scratch.join("large.html");
    draw_timeline(&report, None, &page).code(0);
    let html = scratch.read("large.html");
    assert!(
        html.contains(
            "id=\"aggregated\">6000 jobs: too many to draw one by one, so this timeline is \
             aggregated: a row for each of the 40 busiest keys, one for the others and"
        ),
        "the page says it is aggregated"
    );
    // Over few keys, there are no others to speak of.
    let few = scratch.write("few.jsonl", large_report(6_000, 2));
    draw_timeline(&few, None, &scratch.join("few.html")).code(0);
    assert!(
        scratch
            .read("few.html")
            .contains("aggregated: a row for each of the 2 keys and a row per slot"),
        "{}",
        scratch.read("few.html")
    );
    assert!(html.contains("\"mode\":\"aggregate\""));
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
    // The Markdown's chart of an aggregated run: its keys are the drawn rows (the 40 busiest),
    // and it says so; no bar ends past the run's end (15 s), as a bucket's end may.
    draw_timeline(&report, None, &scratch.join("large.md")).code(0);
    let md = scratch.read("large.md");
    assert!(
        md.contains("the chart shows the 30 slowest of its 40 busiest keys (the run has 100)"),
        "{md}"
    );
    let ends: Vec<u64> = md
        .lines()
        .filter(|line| line.trim_start().starts_with("key "))
        .filter_map(|line| line.rsplit(", ").next()?.trim().parse().ok())
        .collect();
    assert_eq!(ends.len(), 30, "{md}");
    assert!(ends.iter().all(|&end| end <= 15_000), "{ends:?}");
    let Some(browser) = chromium() else {
        eprintln!("skipped: no Chromium found to open the aggregated page");
        return;
    };
    let dom = run_chromium(
        &browser,
        &page,
        &["--virtual-time-budget=5000".into(), "--dump-dom".into()],
    );
    let status = status(&dom);
    assert_eq!(status.get("state").map(String::as_str), Some("drawn"));
    assert_eq!(status["errors"], "0");
    // The 40 busiest keys, the 60 others, 4 slots.
    assert_eq!(status["rows"], "45");
    assert!(dom.contains("60 other keys"));
}

#[test]
fn bytes_that_are_not_utf_8_are_drawn_replaced() {
    let scratch = Scratch::new();
    let text = std::fs::read(fixtures().join("small.jsonl")).unwrap();
    let text = String::from_utf8(text)
        .unwrap()
        .replace("\"key\":\"build\"", "\"key\":\"bu\u{1}ild\"");
    // The key of jobs 1 and 2 with a byte that is not UTF-8 in it.
    let bytes: Vec<u8> = text
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xff } else { b })
        .collect();
    let report = scratch.write("bytes.jsonl", bytes);
    let page = scratch.join("bytes.html");
    draw_timeline(&report, None, &page).code(0);
    assert!(scratch.read("bytes.html").contains("bu\u{fffd}ild"));
}

#[test]
fn the_output_is_written_where_links_point_into_fifos_and_keeps_a_files_mode() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let want = {
        let out = scratch.join("plain.md");
        draw("small.jsonl", None, &out).code(0);
        scratch.read("plain.md")
    };
    // `-o -` and `-o /dev/stdout` (a link to a pipe here) write to stdout; nothing replaced.
    for dash in ["-", "/dev/stdout"] {
        let got = timeline(&["small.jsonl", "-o", dash, "--format", "md"]);
        got.code(0);
        assert_eq!(got.stdout(), want, "-o {dash}");
    }
    // A link to a file: the file gets the timeline, the link stays a link.
    let target = scratch.write("target.md", "old");
    let link = scratch.join("link.md");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    draw("small.jsonl", None, &link).code(0);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(scratch.read("target.md"), want);
    // A dangling link: the file is created where it points.
    let dangling = scratch.join("dangling.md");
    std::os::unix::fs::symlink("made.md", &dangling).unwrap();
    draw("small.jsonl", None, &dangling).code(0);
    assert!(std::fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(scratch.read("made.md"), want);
    // A private file stays private.
    let private = scratch.write("private.md", "old");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    draw("small.jsonl", None, &private).code(0);
    assert_eq!(
        std::fs::metadata(&private).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(scratch.read("private.md"), want);
    // A FIFO is written into, not replaced.
    let fifo = scratch.join("pipe.md");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    draw("small.jsonl", None, &fifo).code(0);
    assert_eq!(reader.join().unwrap(), want);
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &std::fs::symlink_metadata(&fifo).unwrap().file_type()
    ));
}

#[test]
fn an_events_file_of_a_later_run_of_the_same_jobs_is_refused() {
    let scratch = Scratch::new();
    let out = scratch.join("t.html");
    let o = out.to_str().unwrap();
    // small.jsonl: the run ended 2 s after 03:04:05; job 1's only try started in slot 1.
    let good = concat!(
        r#"{"type":"queued","seq":1,"key":"build","ahead":0,"at":"2026-01-02T03:04:05.000Z"}"#,
        "\n",
        r#"{"type":"started","seq":1,"key":"build","slot":1,"attempt":1,"at":"2026-01-02T03:04:05.010Z"}"#,
        "\n"
    );
    let path = scratch.write("good.jsonl", good);
    timeline(&["small.jsonl", "--events", path.to_str().unwrap(), "-o", o]).code(0);
    std::fs::remove_file(&out).unwrap();
    let cases = [
        (
            "later.jsonl",
            good.replace("03:04:05.010Z", "03:09:05.010Z"),
            "later.jsonl:2: an events file from another run: this event",
        ),
        (
            "slot.jsonl",
            good.replace("\"slot\":1", "\"slot\":2"),
            "slot.jsonl:2: an events file from another run: job 1 try 1 started in slot 2",
        ),
        // Two runs of the same jobs side by side: the same try in the same slot, 0.3 s later.
        (
            "moved.jsonl",
            good.replace("03:04:05.010Z", "03:04:05.310Z"),
            "moved.jsonl:2: an events file from another run: job 1 try 1 started at \
             2026-01-02T03:04:05.310Z here, 300 ms after it did in the report",
        ),
        (
            "attempt.jsonl",
            good.replace("\"attempt\":1", "\"attempt\":3"),
            "attempt.jsonl:2: an events file from another run: job 1 started try 3",
        ),
        (
            "unrecorded.jsonl",
            good.replace("\"seq\":1", "\"seq\":99"),
            "unrecorded.jsonl:1: an events file from another run: job 99 has events here, but \
             the report of this finished run has no record of it",
        ),
    ];
    for (name, text, want) in cases {
        let path = scratch.write(name, text);
        for format in ["html", "json", "md"] {
            let got = timeline(&[
                "small.jsonl",
                "--events",
                path.to_str().unwrap(),
                "-o",
                o,
                "--format",
                format,
            ]);
            got.code(2);
            assert!(got.stderr().contains(want), "{name}: {}", got.stderr());
            assert!(!out.exists(), "nothing written for {name}");
        }
    }
}

#[test]
fn invalid_records_and_unreadable_input_are_refused_with_the_file_and_line() {
    let scratch = Scratch::new();
    let out = scratch.join("t.html");
    let o = out.to_str().unwrap();
    let small = std::fs::read_to_string(fixtures().join("small.jsonl")).unwrap();
    let lines: Vec<&str> = small.lines().collect();
    let (run_line, job_line, summary) = (lines[0], lines[1], *lines.last().unwrap());
    let n = lines.len();
    let mut after_summary = lines.clone();
    after_summary.swap(n - 2, n - 1);
    let cases = [
        (
            "after.jsonl",
            after_summary.join("\n") + "\n",
            format!(
                "after.jsonl:{n}: a record after the summary (line {})",
                n - 1
            ),
        ),
        (
            "twice.jsonl",
            format!("{run_line}\n{job_line}\n{job_line}\n{summary}\n"),
            "twice.jsonl:3: a second record of seq 7".to_owned(),
        ),
        (
            "outcome.jsonl",
            format!(
                "{run_line}\n{}\n",
                job_line.replace("\"rejected\"", "\"exploded\"")
            ),
            "outcome.jsonl:2: unknown outcome \"exploded\"".to_owned(),
        ),
        (
            "cause.jsonl",
            small.replace("\"cause\":\"cap\"", "\"cause\":\"gremlins\""),
            "cause.jsonl:3: unknown wait cause \"gremlins\"".to_owned(),
        ),
        (
            "zero.jsonl",
            small.replace("\"max_concurrent\":2", "\"max_concurrent\":0"),
            "zero.jsonl:1: max_concurrent 0".to_owned(),
        ),
        (
            "slot.jsonl",
            small.replace("\"slot\":2,", "\"slot\":0,"),
            "slot.jsonl:3: slot 0 in the record of seq 3: slots start at 1".to_owned(),
        ),
        (
            "empty.jsonl",
            String::new(),
            "empty.jsonl:1: empty: a run that recorded nothing".to_owned(),
        ),
        (
            "torn.jsonl",
            run_line[..40].to_owned(),
            "torn.jsonl:1: only a torn `run` record".to_owned(),
        ),
        (
            "joined.jsonl",
            lines.concat(),
            "joined.jsonl:1: not JSON Lines: another record follows the `run` record on its \
             line"
                .to_owned(),
        ),
        (
            "status.jsonl",
            small.replace("\"exit_code\":1}", "\"exit_code\":256}"),
            format!("status.jsonl:{n}: exit_code 256 in the summary: an exit status is 0 to 255"),
        ),
        (
            "before.jsonl",
            small.replace(
                "\"ended_at\":\"2026-01-02T03:04:05.001Z\"",
                "\"ended_at\":\"2025-01-02T03:04:05.001Z\"",
            ),
            "before.jsonl:2: the record of seq 7 has a time (2025-01-02T03:04:05.001Z) from \
             before the run started"
                .to_owned(),
        ),
        (
            "backwards.jsonl",
            small.replace(
                "\"started_at\":\"2026-01-02T03:04:05.000Z\",\"ended_at\":\"2026-01-02T03:04:05.500Z\"",
                "\"started_at\":\"2026-01-02T03:04:05.600Z\",\"ended_at\":\"2026-01-02T03:04:05.500Z\"",
            ),
            "backwards.jsonl:3: try 1 of seq 3 ends (2026-01-02T03:04:05.500Z) before it starts \
             (2026-01-02T03:04:05.600Z)"
                .to_owned(),
        ),
        (
            "job-backwards.jsonl",
            small.replace(
                "\"started_at\":\"2026-01-02T03:04:06.010Z\",\"ended_at\":\"2026-01-02T03:04:06.500Z\",\"duration_ms\":490,\"wait_ms\"",
                "\"started_at\":\"2026-01-02T03:04:06.600Z\",\"ended_at\":\"2026-01-02T03:04:06.500Z\",\"duration_ms\":490,\"wait_ms\"",
            ),
            "job-backwards.jsonl:3: the record of seq 3 ends (2026-01-02T03:04:06.500Z) before \
             its job starts (2026-01-02T03:04:06.600Z)"
                .to_owned(),
        ),
        (
            "late.jsonl",
            small.replace(
                "\"ended_at\":\"2026-01-02T03:04:05.001Z\"",
                "\"ended_at\":\"9999-01-02T03:04:05.001Z\"",
            ),
            "late.jsonl:2: the record of seq 7 ends ".to_owned(),
        ),
        (
            "events.jsonl",
            std::fs::read_to_string(fixtures().join("unfinished-events.jsonl")).unwrap(),
            "events.jsonl:1: not a lanes report: its first line is a `queued` event: it is an \
             events file"
                .to_owned(),
        ),
    ];
    for (name, text, want) in cases {
        let path = scratch.write(name, text);
        let got = timeline(&[path.to_str().unwrap(), "-o", o]);
        got.code(2);
        assert!(got.stderr().contains(&want), "{name}: {}", got.stderr());
        assert!(!out.exists(), "nothing written for {name}");
    }
    // Unreadable input is told once, and nothing is created, not even in a FIFO's place.
    let dir = scratch.mkdir("dir");
    let got = timeline(&[dir.to_str().unwrap(), "-o", o]);
    got.code(2);
    assert_eq!(
        got.stderr().matches("directory").count(),
        1,
        "{}",
        got.stderr()
    );
    let got = timeline(&["missing.jsonl", "-o", o]);
    got.code(2);
    assert_eq!(
        got.stderr().matches("os error 2").count(),
        1,
        "{}",
        got.stderr()
    );
    let got = timeline(&["small.jsonl", "--events", "missing.jsonl", "-o", o]);
    got.code(2);
    assert!(!out.exists());
    // A slot far beyond the slots used (a run of a huge `-j`) costs a row, not a row for
    // every slot below it: drawn job by job and as a trace.
    let huge = small
        .replace("\"max_concurrent\":2", "\"max_concurrent\":4000000000")
        .replace("\"slot\":2,", "\"slot\":3999999999,");
    let huge = scratch.write("huge.jsonl", huge);
    timeline(&[huge.to_str().unwrap(), "-o", o]).code(0);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("slot 3999999999"));
    assert!(!page.contains("slot 2\""), "no row for an unused slot");
    std::fs::remove_file(&out).unwrap();
    let trace = scratch.join("t.json");
    timeline(&[huge.to_str().unwrap(), "-o", trace.to_str().unwrap()]).code(0);
    assert!(std::fs::read_to_string(&trace)
        .unwrap()
        .contains("\"tid\":3999999999"));
    // A byte order mark before the report is accepted.
    let bom = scratch.write("bom.jsonl", format!("\u{feff}{small}"));
    timeline(&[bom.to_str().unwrap(), "-o", o]).code(0);
}

#[test]
fn bidi_and_control_characters_are_shown_escaped_on_the_page() {
    // The page's own escaping of what it shows from the embedded data (the details panel, the
    // row labels) matches the header's.
    let page = include_str!("../../src/timeline/page.js");
    let pattern = page
        .lines()
        .find(|l| l.contains("return String(text).replace("))
        .unwrap();
    for range in [
        "\\u0000-\\u001f",
        "\\u007f-\\u009f",
        "\\u202a-\\u202e",
        "\\u2066-\\u2069",
        "\\u2028",
        "\\u2029",
    ] {
        assert!(pattern.contains(range), "{range} not escaped: {pattern}");
    }
    assert!(page.contains("lines.push(visible(k) + \": \" + visible("));
}

/// A timeline written to a stdout whose reader is gone (`| head -c 10`) ends quietly, with
/// exit status 0, as the other client commands do.
#[test]
fn a_timeline_on_a_closed_stdout_ends_quietly() {
    let mut child = Command::new(BIN)
        .current_dir(fixtures())
        .args(["timeline", "small.jsonl", "-o", "-", "--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A timeline to a stdout closed when lanes started (`>&-`) cannot be written: said, exit 2,
/// not taken for a timeline written.
#[test]
fn a_timeline_on_a_stdout_closed_at_start_says_it_cannot_be_written() {
    let out = Command::new("sh")
        .current_dir(fixtures())
        .arg("-c")
        .arg("exec >&-; exec \"$0\" timeline small.jsonl -o - --format md")
        .arg(BIN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write -") && stderr.contains("closed when lanes started"),
        "{stderr}"
    );
}

/// A report or events file on a pipe (`/dev/stdin`, `<(…)`) is drawn as the same file would
/// be: the timeline reads its input more than once, and a pipe can be read only once. Errors
/// name the path given.
#[test]
fn a_report_or_events_on_a_pipe_is_drawn_as_the_file_is() {
    // `lanes timeline REPORT --events EVENTS -o - --format FORMAT`, `stdin` on a pipe.
    let draw = |report: &str, events: Option<&str>, format: &str, stdin: &[u8]| {
        let mut args = vec!["timeline", report];
        if let Some(events) = events {
            args.extend(["--events", events]);
        }
        args.extend(["-o", "-", "--format", format]);
        Run::new()
            .no_report()
            .cwd(fixtures())
            .args(args)
            .stdin(stdin)
            .run()
    };
    let small = std::fs::read(fixtures().join("small.jsonl")).unwrap();
    let events = std::fs::read(fixtures().join("unfinished-events.jsonl")).unwrap();
    let want = draw("small.jsonl", Some("unfinished-events.jsonl"), "json", b"");
    want.code(0);
    let piped = draw(
        "/dev/stdin",
        Some("unfinished-events.jsonl"),
        "json",
        &small,
    );
    piped.code(0);
    assert_eq!(
        piped.stdout().replace("\"/dev/stdin\"", "\"small.jsonl\""),
        want.stdout()
    );
    assert!(
        piped.stdout().contains("\"report\":\"/dev/stdin\""),
        "{}",
        piped.stdout()
    );
    let piped = draw("small.jsonl", Some("/dev/stdin"), "json", &events);
    piped.code(0);
    assert_eq!(piped.stdout(), want.stdout());
    // `-` is stdin, for either (not both).
    let dash = draw("-", Some("unfinished-events.jsonl"), "json", &small);
    dash.code(0);
    assert_eq!(
        dash.stdout()
            .replace("\"report\":\"-\"", "\"report\":\"small.jsonl\""),
        want.stdout()
    );
    let dash = draw("small.jsonl", Some("-"), "json", &events);
    dash.code(0);
    assert_eq!(dash.stdout(), want.stdout());
    let both = draw("-", Some("-"), "json", &small);
    both.code(2);
    assert!(
        both.stderr().contains("cannot both be read from stdin"),
        "{}",
        both.stderr()
    );
    let bad = draw("/dev/stdin", None, "md", b"{\"type\":\"run\"}\n");
    bad.code(2);
    assert!(
        bad.stderr()
            .contains("/dev/stdin:1: not a lanes report's `run` record"),
        "{}",
        bad.stderr()
    );
}

/// The output may not be one of the inputs, by any name: the timeline would replace the
/// report it reads.
#[test]
fn the_output_is_never_an_input() {
    let scratch = Scratch::new();
    let report = scratch.write(
        "r.jsonl",
        std::fs::read(fixtures().join("small.jsonl")).unwrap(),
    );
    let events = scratch.write(
        "e.jsonl",
        std::fs::read(fixtures().join("unfinished-events.jsonl")).unwrap(),
    );
    let link = scratch.join("link.html");
    std::os::unix::fs::symlink(&report, &link).unwrap();
    let hard = scratch.join("hard.md");
    std::fs::hard_link(&report, &hard).unwrap();
    let before = std::fs::read(&report).unwrap();
    for (events_arg, out, format) in [
        (None, &report, Some("html")),
        (None, &link, None),
        (None, &hard, None),
        (Some(&events), &events, Some("md")),
    ] {
        let mut args = vec![report.to_str().unwrap()];
        if let Some(events) = events_arg {
            args.extend(["--events", events.to_str().unwrap()]);
        }
        args.extend(["-o", out.to_str().unwrap()]);
        if let Some(format) = format {
            args.extend(["--format", format]);
        }
        let got = timeline(&args);
        got.code(2);
        assert!(
            got.stderr().contains("is both an input and the output"),
            "{args:?}: {}",
            got.stderr()
        );
    }
    assert_eq!(std::fs::read(&report).unwrap(), before);
    assert!(std::fs::read_to_string(&events)
        .unwrap()
        .starts_with("{\"type\":\"queued\""));
}

#[test]
fn the_trace_names_the_resource_a_job_waited_for() {
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    Run::new()
        .scratch(&scratch)
        .no_report()
        .args([
            "-j",
            "2",
            "--resource",
            "gpu=1",
            "--needs",
            "gpu=1",
            "--report",
        ])
        .arg(&report)
        .stdin("a\tsleep 0.2\nb\ttrue\n")
        .run()
        .code(0);
    let out = scratch.join("run.json");
    draw_timeline(&report, None, &out).code(0);
    let trace: Value = serde_json::from_str(&scratch.read("run.json")).unwrap();
    let waits: Vec<&Value> = check_trace(&trace)
        .into_iter()
        .filter(|e| e["cat"] == "wait" && e["ph"] == "b")
        .collect();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0]["args"]["cause"], "resource");
    assert_eq!(waits[0]["args"]["resource"], "gpu");
}

#[test]
fn an_aggregated_unfinished_run_counts_its_jobs_with_no_record_from_the_events() {
    // 5,001 records (drawn aggregated) of a run that had not finished, and events of three
    // jobs with no record: one running, two waiting.
    let scratch = Scratch::new();
    let fixture = std::fs::read_to_string(fixtures().join("unfinished.jsonl")).unwrap();
    let mut lines = fixture.lines();
    let run_line = lines.next().unwrap();
    let rejected = lines.next().unwrap();
    assert!(rejected.contains("\"seq\":7,\"line\":7,"), "{rejected}");
    let mut report = format!("{run_line}\n");
    for seq in 1..=5001 {
        report.push_str(&rejected.replace(
            "\"seq\":7,\"line\":7,",
            &format!("\"seq\":{seq},\"line\":{seq},"),
        ));
        report.push('\n');
    }
    let report_path = scratch.write("big.jsonl", report);
    let at = "2026-01-02T03:04:06.000Z";
    let events = [
        format!("{{\"type\":\"queued\",\"seq\":5002,\"key\":\"a\",\"ahead\":0,\"at\":\"{at}\"}}"),
        format!("{{\"type\":\"started\",\"seq\":5002,\"key\":\"a\",\"slot\":1,\"attempt\":1,\"at\":\"{at}\"}}"),
        format!("{{\"type\":\"queued\",\"seq\":5003,\"key\":\"a\",\"ahead\":1,\"at\":\"{at}\"}}"),
        format!("{{\"type\":\"queued\",\"seq\":5004,\"key\":\"b\",\"ahead\":0,\"at\":\"{at}\"}}"),
        // A recorded job's events are no job with no record.
        format!("{{\"type\":\"queued\",\"seq\":5000,\"key\":null,\"ahead\":0,\"at\":\"{at}\"}}"),
    ];
    let events_path = scratch.write("big-events.jsonl", events.join("\n") + "\n");
    let out = scratch.join("big.md");
    draw_timeline(&report_path, Some(&events_path), &out).code(0);
    let markdown = scratch.read("big.md");
    assert!(
        markdown.contains("jobs with no record yet: 1 running, 2 waiting"),
        "{markdown}"
    );
}

#[test]
fn a_batch_s_run_counts_once_in_the_utilisation() {
    // One batch of four jobs runs in one slot of two for the whole run: half the capacity,
    // not four times one slot.
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    Run::new()
        .scratch(&scratch)
        .no_report()
        .args([
            "-j",
            "2",
            "--command",
            "sleep 0.3; true {}",
            "--batch-size",
            "4",
        ])
        .arg("--report")
        .arg(&report)
        .stdin("a\t1\na\t2\na\t3\na\t4\n")
        .run()
        .code(0);
    let (utilisation, markdown) = markdown_utilisation(&scratch, &report);
    assert!((35..=55).contains(&utilisation), "{markdown}");
}

/// The utilisation, in percent, the Markdown timeline of `report` gives, and that Markdown.
fn markdown_utilisation(scratch: &Scratch, report: &std::path::Path) -> (u32, String) {
    let out = scratch.join("run.md");
    draw_timeline(report, None, &out).code(0);
    let markdown = scratch.read("run.md");
    let utilisation = markdown
        .split("utilisation ")
        .nth(1)
        .and_then(|rest| rest.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{markdown}"));
    (utilisation, markdown)
}

#[test]
fn a_job_of_weight_w_counts_w_times_in_the_utilisation() {
    // One job of weight 2 holds all of -j 2 for the whole run: the cap is full, not half.
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["-j", "2", "--weight", "2"])
        .arg("--report")
        .arg(&report)
        .stdin("a\tsleep 0.3\n")
        .run()
        .code(0);
    let (utilisation, markdown) = markdown_utilisation(&scratch, &report);
    assert!((80..=100).contains(&utilisation), "{markdown}");
}

#[test]
fn jobs_that_ended_by_their_events_without_a_record_are_drawn_and_counted() {
    // A report cut short after three records (its writer behind the events', or a torn
    // copy), drawn with the whole events file: the other jobs ended by their events.
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    let events = scratch.join("events.jsonl");
    Run::new()
        .no_report()
        .args([
            "-j",
            "2",
            "--retries",
            "1",
            "--retry-delay",
            "100ms",
            "--report",
        ])
        .arg(&report)
        .arg("--events")
        .arg(&events)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/timeline/jobs.tsv"))
        .run();
    let whole = scratch.read("run.jsonl");
    let jobs = whole
        .lines()
        .filter(|l| l.contains("\"type\":\"job\""))
        .count();
    assert!(jobs > 3, "{whole}");
    let cut: String = whole.lines().take(4).map(|l| format!("{l}\n")).collect();
    let cut_path = scratch.write("cut.jsonl", cut);
    let utilisation = |markdown: &str| -> i64 {
        markdown
            .split("utilisation ")
            .nth(1)
            .and_then(|rest| rest.split('%').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{markdown}"))
    };
    let full_md = scratch.join("full.md");
    draw_timeline(&report, Some(&events), &full_md).code(0);
    let cut_md = scratch.join("cut.md");
    draw_timeline(&cut_path, Some(&events), &cut_md).code(0);
    let (full, cut) = (scratch.read("full.md"), scratch.read("cut.md"));
    let said = format!("0 running, 0 waiting, {} ended", jobs - 3);
    assert!(cut.contains(&said), "{said}\n{cut}");
    // Their running time is the run's as much as the recorded jobs' is.
    assert!(
        (utilisation(&full) - utilisation(&cut)).abs() <= 3,
        "whole report: {full}\ncut: {cut}"
    );
    let page = scratch.join("cut.html");
    draw_timeline(&cut_path, Some(&events), &page).code(0);
    let html = scratch.read("cut.html");
    let data = html
        .split("id=\"timeline-data\">")
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .expect("the page's data");
    let data: Value = serde_json::from_str(data).unwrap();
    let outcomes: Vec<&str> = data["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    let class_of = |outcome: &str| outcomes.iter().position(|o| *o == outcome).unwrap() as u64;
    let drawn = data["body"]["jobs"].as_array().unwrap();
    let bars = data["body"]["bars"].as_array().unwrap();
    let records: BTreeMap<u64, Value> = whole
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "job")
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    // Every job that ended without a record is on the page with the outcome its events
    // told, every try of it drawn: a retried try as retried, the last in its outcome's colour.
    let unrecorded: Vec<(usize, &Value)> = drawn.iter().enumerate().skip(3).collect();
    assert_eq!(unrecorded.len(), jobs - 3, "{drawn:?}");
    let mut retried_seen = 0;
    for (index, job) in unrecorded {
        let record = &records[&job["seq"].as_u64().unwrap()];
        assert_eq!(job["outcome"], record["outcome"], "{job} against {record}");
        let tries: Vec<(u64, u64)> = bars
            .iter()
            .filter(|b| b[5].as_u64() == Some(index as u64) && b[3] == 0)
            .map(|b| (b[6].as_u64().unwrap(), b[4].as_u64().unwrap()))
            .collect();
        let attempts = record["attempts"].as_u64().unwrap();
        let last_class = class_of(record["outcome"].as_str().unwrap());
        for attempt in 1..=attempts {
            let want = if attempt < attempts {
                class_of("failed") + 10
            } else {
                last_class
            };
            // On its key's row and its slot's row.
            assert_eq!(
                tries.iter().filter(|t| **t == (attempt, want)).count(),
                2,
                "try {attempt} of {job}: {tries:?}"
            );
        }
        retried_seen += usize::from(attempts > 1);
    }
    // `lint` fails twice and cannot end before three other jobs have.
    assert!(retried_seen >= 1, "a retried job without a record: {whole}");
}

/// The data a timeline page embeds.
fn page_data(html: &str) -> Value {
    let data = html
        .split("id=\"timeline-data\">")
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .expect("the page's data");
    serde_json::from_str(data).unwrap()
}

/// The bars of job `seq` on a detailed page: (kind, class, attempt), sorted.
fn bars_of(data: &Value, seq: u64) -> Vec<(u64, u64, u64)> {
    let jobs = data["body"]["jobs"].as_array().unwrap();
    let index = jobs
        .iter()
        .position(|job| job["seq"] == seq)
        .unwrap_or_else(|| panic!("seq {seq} is not on the page")) as u64;
    let mut bars: Vec<(u64, u64, u64)> = data["body"]["bars"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|bar| bar[5] == index)
        .map(|bar| {
            (
                bar[3].as_u64().unwrap(),
                bar[4].as_u64().unwrap(),
                bar[6].as_u64().unwrap(),
            )
        })
        .collect();
    bars.sort_unstable();
    bars
}

#[test]
fn a_job_stopped_while_waiting_for_its_retry_is_drawn_alike_with_and_without_its_record() {
    // b fails and waits out a 60 s retry delay; Ctrl-C stops the run meanwhile. Drawn from its
    // record, or from the events of a report cut before it, it is the same: one failed try,
    // no wait after it (README: the retry delay of a job stopped while it waited one out is
    // not drawn), and the reason its end told.
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    let events = scratch.join("events.jsonl");
    let running = Run::new()
        .scratch(&scratch)
        .no_report()
        .args([
            "-j",
            "2",
            "--retries",
            "2",
            "--retry-delay",
            "60s",
            "--report",
        ])
        .arg(&report)
        .arg("--events")
        .arg(&events)
        .stdin("a\ttouch \"$D/a\"; exec sleep 30\nb\texit 5\n")
        .spawn();
    scratch.wait_for("a", Duration::from_secs(10));
    crate::records::wait_for_a_retry(&events);
    running.signal(nix::sys::signal::Signal::SIGINT);
    running.wait().code(130);
    let whole = scratch.read("run.jsonl");
    let cut: String = whole.lines().take(1).map(|l| format!("{l}\n")).collect();
    let cut_path = scratch.write("cut.jsonl", cut);
    let full_page = scratch.join("full.html");
    draw_timeline(&report, Some(&events), &full_page).code(0);
    let cut_page = scratch.join("cut.html");
    draw_timeline(&cut_path, Some(&events), &cut_page).code(0);
    let full = page_data(&scratch.read("full.html"));
    let cut = page_data(&scratch.read("cut.html"));
    let failed = full["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o == "failed")
        .unwrap() as u64;
    // A try on its key's row and on its slot's row; nothing else.
    assert_eq!(bars_of(&full, 2), [(0, failed, 1), (0, failed, 1)]);
    assert_eq!(bars_of(&cut, 2), bars_of(&full, 2));
    let jobs = cut["body"]["jobs"].as_array().unwrap();
    let b = jobs.iter().find(|job| job["seq"] == 2).unwrap();
    assert_eq!(b["outcome"], "interrupted", "{b}");
    assert_eq!(b["reason"], "shutdown", "{b}");
}

/// Lines refused before they had a key are drawn in the `(no key)` row, but are no key of the
/// run: two keys and an invalid line are "2 keys" (they were 3).
#[test]
fn invalid_lines_are_no_key_in_the_timeline_s_count() {
    let scratch = Scratch::new();
    let report = scratch.join("r.jsonl");
    Run::new()
        .no_report()
        .arg("--report")
        .arg(&report)
        .stdin("a\ttrue\nno tab here\nb\ttrue\n")
        .run()
        .code(1);
    let md = scratch.join("t.md");
    draw_timeline(&report, None, &md).code(0);
    let text = scratch.read("t.md");
    assert!(text.contains(" over 2 keys;"), "{text}");
}

#[test]
fn a_run_stopped_by_ctrl_c_says_so_and_its_keys_that_never_started_are_among_the_slowest() {
    // One slot: `a` runs, `b` and `c` wait for it; Ctrl-C comes while they wait. Their keys'
    // chains (first wait to the stop) are as long as `a`'s.
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .stdin("a\ttouch \"$D/up\"; exec sleep 30\nb\ttrue\nc\ttrue\n")
        .spawn();
    scratch.wait_for("up", Duration::from_secs(10));
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    let report_path = scratch.write("report.jsonl", out.report_text.as_deref().unwrap());
    let md = scratch.join("run.md");
    draw_timeline(&report_path, None, &md).code(0);
    let text = scratch.read("run.md");
    assert!(
        text.contains("(finished: stopped by SIGINT, exit status 130)"),
        "{text}"
    );
    let slowest: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("| slowest key"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.split('|').nth(1).unwrap().trim())
        .collect();
    assert_eq!(slowest.len(), 3, "{text}");
    for key in ["a", "b", "c"] {
        assert!(slowest.contains(&key), "{key} missing: {text}");
    }
    let page = scratch.join("run.html");
    draw_timeline(&report_path, None, &page).code(0);
    assert!(
        scratch
            .read("run.html")
            .contains("finished: stopped by SIGINT, exit status 130."),
        "the page says how the run ended"
    );
}

#[test]
fn a_report_cut_short_with_a_long_events_file_is_drawn_aggregated() {
    // The jobs known from the events alone count toward the page's limit of jobs drawn one by
    // one: a report cut short early beside the events of 5,200 jobs is drawn aggregated.
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let input: String = (0..5_200).map(|i| format!("k{}\ttrue\n", i % 50)).collect();
    let out = Run::new()
        .args(["-j", "8", "--output", "none", "--events"])
        .arg(&events)
        .stdin(input)
        .run();
    out.code(0);
    let cut: String = out
        .report_text
        .as_deref()
        .unwrap()
        .lines()
        .take(100)
        .map(|line| format!("{line}\n"))
        .collect();
    let report = scratch.write("cut.jsonl", cut);
    let page = scratch.join("cut.html");
    draw_timeline(&report, Some(&events), &page).code(0);
    let html = scratch.read("cut.html");
    assert!(
        html.contains("id=\"aggregated\">5200 jobs, 5101 of them with no record yet"),
        "{}",
        &html[..html.len().min(3000)]
    );
}

#[test]
fn a_wait_for_a_resource_names_the_resource_among_the_longest_waits() {
    let scratch = Scratch::new();
    let out = Run::new()
        .args(["-j", "2", "--resource", "gpu=0,", "--needs", "gpu=1"])
        .stdin("a\tsleep 0.2\nb\ttrue\n")
        .run();
    out.code(0);
    assert_eq!(out.job(2).waits[0].cause, "resource");
    let report = scratch.write("report.jsonl", out.report_text.as_deref().unwrap());
    let md = scratch.join("run.md");
    draw_timeline(&report, None, &md).code(0);
    let text = scratch.read("run.md");
    assert!(text.contains("| resource (gpu) |"), "{text}");
}

#[test]
fn a_trace_shows_bidi_and_control_characters_of_keys_and_commands_escaped() {
    let scratch = Scratch::new();
    let out = Run::new()
        .stdin("k\u{202e}1\techo \"\u{202e}\u{1b}[31m hi\"\n")
        .run();
    out.code(0);
    let report = scratch.write("rep\u{202e}ort.jsonl", out.report_text.as_deref().unwrap());
    let trace = scratch.join("run.json");
    draw_timeline(&report, None, &trace).code(0);
    let text = scratch.read("run.json");
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.contains("k\\\\u{202e}1"), "{text}");
    let _: Value = serde_json::from_str(&text).expect("still JSON");
}

/// A key's chain is as long as its job ran, however long: a server's run may last months
/// (it stopped at 2^32 ms, 49 d 17 h).
#[test]
fn a_key_whose_job_ran_sixty_days_has_a_sixty_day_chain() {
    let scratch = Scratch::new();
    let out = Run::new().stdin("long\ttrue\n").run();
    out.code(0);
    let later = |at: &Value| -> Value {
        let at = chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap()).unwrap();
        let later = at + chrono::Duration::days(60);
        Value::from(later.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    };
    let sixty_days_ms = 60 * 24 * 3600 * 1000_u64;
    let lines: Vec<String> = out
        .report_text
        .as_deref()
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            match record["type"].as_str() {
                Some("job") => {
                    record["ended_at"] = later(&record["ended_at"]);
                    record["duration_ms"] = Value::from(sixty_days_ms);
                    let tries = record["tries"].as_array_mut().unwrap();
                    tries[0]["ended_at"] = later(&tries[0]["ended_at"]);
                    tries[0]["duration_ms"] = Value::from(sixty_days_ms);
                }
                Some("summary") => record["duration_ms"] = Value::from(sixty_days_ms + 1_000),
                _ => {}
            }
            record.to_string()
        })
        .collect();
    let report = scratch.write("report.jsonl", lines.join("\n") + "\n");
    let md = scratch.join("run.md");
    draw_timeline(&report, None, &md).code(0);
    let text = scratch.read("run.md");
    let row = text
        .lines()
        .find(|line| line.starts_with("| long |"))
        .unwrap_or_else(|| panic!("no row of key long:\n{text}"));
    assert!(row.contains("| 60 d 0 h |"), "{row}");
    assert!(!row.contains("49 d"), "{row}");
}
