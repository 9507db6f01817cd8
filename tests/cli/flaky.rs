//! Flaky jobs: a job that succeeds after a failed try is `succeeded` with `flaky: true`,
//! counted in the summary (record and line) and a `<flakyFailure>` per failed try in JUnit.

use crate::support::*;

#[test]
fn a_job_that_passes_on_a_retry_is_flaky_everywhere() {
    let scratch = Scratch::new();
    let junit = scratch.join("junit.xml");
    // `flaky` fails its first two tries (a counter file), `steady` passes at once, `broken`
    // never passes.
    let out = Run::new()
        .scratch(&scratch)
        .args(["--retries", "3", "-j", "3", "--junit"])
        .arg(&junit)
        .stdin(
            "flaky\tn=$(cat \"$D/n\" 2>/dev/null || echo 0); echo $((n+1)) > \"$D/n\"; \
             [ \"$n\" -ge 2 ] || { echo \"flaky try $LANES_ATTEMPT failed\" >&2; exit 1; }\n\
             steady\ttrue\n\
             broken\techo \"broken try $LANES_ATTEMPT\" >&2; false\n",
        )
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(
        (job.outcome.as_str(), job.attempts, job.flaky),
        ("succeeded", 3, true)
    );
    assert_eq!((out.job(2).attempts, out.job(2).flaky), (1, false));
    assert_eq!(
        (out.job(3).outcome.as_str(), out.job(3).flaky),
        ("failed", false)
    );
    assert_eq!(out.report().summary.flaky, 1);
    assert!(
        out.stderr().contains(": 2 succeeded (1 flaky), 1 failed"),
        "{}",
        out.dump()
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let case = |suite: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testsuite") && n.attribute("name") == Some(suite))
            .and_then(|s| s.children().find(|n| n.has_tag_name("testcase")))
            .unwrap_or_else(|| panic!("no case for {suite}\n{xml}"))
    };
    let flaky: Vec<_> = case("flaky")
        .children()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name().to_owned())
        .filter(|name| name != "properties")
        .collect();
    assert_eq!(flaky, ["flakyFailure", "flakyFailure"], "{xml}");
    // Each retried try carries its own stderr: why it failed.
    let stderr_of = |suite: &str, tag: &str| rerun_stderr(case(suite), tag);
    assert_eq!(
        stderr_of("flaky", "flakyFailure"),
        ["flaky try 1 failed", "flaky try 2 failed"],
        "{xml}"
    );
    assert_eq!(
        stderr_of("broken", "rerunFailure"),
        ["broken try 1", "broken try 2", "broken try 3"],
        "{xml}"
    );
    assert!(!case("steady")
        .children()
        .any(|n| n.has_tag_name("flakyFailure")));
    assert!(case("broken").children().any(|n| n.has_tag_name("failure")));
}

#[test]
fn a_job_stopped_while_it_waits_for_its_retry_keeps_each_tries_stderr_in_junit() {
    let scratch = Scratch::new();
    let junit = scratch.join("junit.xml");
    let events = scratch.join("events.jsonl");
    let running = Run::new()
        .scratch(&scratch)
        .args(["--retries", "3", "--retry-delay", "60s", "--junit"])
        .arg(&junit)
        .arg("--events")
        .arg(&events)
        .stdin("k\techo \"try $LANES_ATTEMPT went wrong\" >&2; exit 3\n")
        .spawn();
    // Its first try ended and goes again: it now waits out the delay.
    crate::records::wait_for_a_retry(&events);
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    assert_eq!(out.job(1).result(), ("interrupted", Some("shutdown")));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert_eq!(
        rerun_stderr(doc.root_element(), "rerunFailure"),
        ["try 1 went wrong"],
        "{xml}"
    );
}

/// The `<system-err>` text of each `tag` element (`flakyFailure`, `rerunFailure`) under
/// `node`, in order, trimmed ("" for one without).
fn rerun_stderr(node: roxmltree::Node<'_, '_>, tag: &str) -> Vec<String> {
    node.descendants()
        .filter(|n| n.has_tag_name(tag))
        .map(|n| {
            n.children()
                .find(|c| c.has_tag_name("system-err"))
                .and_then(|c| c.text())
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}
