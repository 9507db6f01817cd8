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
            "flaky\tn=$(cat \"$D/n\" 2>/dev/null || echo 0); echo $((n+1)) > \"$D/n\"; [ \"$n\" -ge 2 ]\n\
             steady\ttrue\n\
             broken\tfalse\n",
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
    assert!(!case("steady")
        .children()
        .any(|n| n.has_tag_name("flakyFailure")));
    assert!(case("broken").children().any(|n| n.has_tag_name("failure")));
}
