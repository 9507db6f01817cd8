//! SPEC §6: 0 all succeeded, 1 some job failed/rejected/interrupted, 2 usage error with
//! nothing run (128+N after a signal: see `signals`).

use crate::support::*;

#[test]
fn every_job_succeeding_exits_0() {
    let out = Run::new()
        .args(["-j", "2"])
        .stdin("a\ttrue\nb\techo x\na\texit 0\n")
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 3);
}

#[test]
fn one_failed_job_exits_1() {
    Run::new()
        .args(["-j", "2"])
        .stdin("a\ttrue\nb\texit 7\nc\ttrue\n")
        .run()
        .code(1);
}

#[test]
fn one_rejected_line_exits_1() {
    Run::new().stdin("a\ttrue\nbroken\n").run().code(1);
}

#[test]
fn one_timed_out_job_exits_1() {
    Run::new()
        .args(["--timeout", "0.2", "--grace", "1"])
        .stdin("a\tsleep 10\n")
        .run()
        .code(1);
}

#[test]
fn usage_errors_exit_2_and_run_nothing() {
    let scratch = Scratch::new();
    let cases: &[&[&str]] = &[
        &["-j", "0"],
        &["--max-concurrent", "many"],
        &["--timeout", "soon"],
        &["--grace", "-1"],
        &["--leak-window", "x"],
        &["--max-queued", "0"],
        &["--on-full", "maybe"],
        &["--output", "loud"],
        &["--no-such-flag"],
        &["no-such-file.txt"],
        &["no-such-manifest.toml"],
        &["--manifest", "m.toml", "other.txt"],
    ];
    for args in cases {
        let out = Run::new()
            .scratch(&scratch)
            .cwd(scratch.path())
            .args(args.iter())
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        assert_eq!(out.code, 2, "lanes {args:?}\n{}", out.dump());
        assert!(!scratch.exists("ran"), "lanes {args:?} ran a job");
        assert!(out.stdout.is_empty(), "lanes {args:?}\n{}", out.dump());
        assert!(!out.stderr.is_empty(), "lanes {args:?} says nothing");
        assert!(out.report.is_none(), "lanes {args:?} wrote a report");
    }
}

#[test]
fn a_missing_input_file_is_named() {
    let scratch = Scratch::new();
    let out = Run::new().cwd(scratch.path()).arg("missing-jobs.txt").run();
    out.code(2);
    assert!(out.stderr().contains("missing-jobs.txt"), "{}", out.dump());
}

#[test]
fn a_count_out_of_range_names_the_range_a_manifest_takes_too() {
    let scratch = Scratch::new();
    let cases: &[(&[&str], &str)] = &[
        (&["-j", "0"], "between 1 and 4294967295"),
        (&["--max-queued", "0"], "between 1 and 9223372036854775807"),
        (
            &["--max-queued", "9223372036854775808"],
            "between 1 and 9223372036854775807",
        ),
        (
            &["--command", "echo", "--batch-size", "-1"],
            "between 1 and 9223372036854775807",
        ),
    ];
    for (args, range) in cases {
        let out = Run::new().args(args.iter()).stdin("k\techo\n").run();
        assert_eq!(out.code, 2, "lanes {args:?}\n{}", out.dump());
        assert!(
            out.stderr()
                .contains(&format!("must be a whole number {range}")),
            "lanes {args:?}\n{}",
            out.dump()
        );
    }
    // The largest the flag takes is the largest a manifest takes.
    let out = Run::new()
        .args(["--max-queued", "9223372036854775807"])
        .stdin("k\techo\n")
        .run();
    out.code(0);
    let manifest = scratch.write(
        "m.toml",
        "max_queued = 9223372036854775807\n[[job]]\nkey = \"k\"\ncmd = \"true\"\n",
    );
    Run::new().arg(&manifest).run().code(0);
    let manifest = scratch.write(
        "zero.toml",
        "max_queued = 0\n[[job]]\nkey = \"k\"\ncmd = \"true\"\n",
    );
    let out = Run::new().arg(&manifest).run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("`max_queued` must be between 1 and 9223372036854775807, not 0"),
        "{}",
        out.dump()
    );
}
