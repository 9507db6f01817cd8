//! What lanes tells a person on the way: reading from a terminal, `CI` only when true, a
//! reused `--results` directory, and counts that read right.

use std::process::{Command, Stdio};

use crate::support::*;

/// Runs `lanes ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed into it,
/// `CI` set to `ci` (or unset); returns what the terminal showed.
fn on_terminal(args: &str, input: &[u8], ci: Option<&str>) -> String {
    use std::io::Write as _;
    let mut command = Command::new("script");
    command
        .args(["-qec", &format!("{BIN} {args}"), "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match ci {
        Some(value) => command.env("CI", value),
        None => command.env_remove("CI"),
    };
    let mut child = command.spawn().expect("util-linux script(1) runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn reading_from_a_terminal_says_so() {
    // Ctrl-D (0x04) ends the terminal's input.
    let shown = on_terminal("--progress never", b"k\techo hi\n\x04", None);
    assert!(
        shown.contains("lanes: reading jobs from the terminal (end with Ctrl-D)"),
        "{shown}"
    );
    assert!(shown.contains("hi"), "{shown}");
    // Not from a pipe.
    let out = Run::new().stdin("k\ttrue\n").run();
    out.code(0);
    assert!(!out.stderr().contains("terminal"), "{}", out.dump());
}

#[test]
fn ci_turns_colours_off_only_when_true() {
    let job = "--progress never ::: 'echo hi'";
    for (ci, coloured) in [
        (None, true),
        (Some("false"), true),
        (Some("0"), true),
        (Some("true"), false),
        (Some("1"), false),
    ] {
        let shown = on_terminal(job, b"", ci);
        assert_eq!(shown.contains('\x1b'), coloured, "CI={ci:?}: {shown:?}");
    }
}

#[test]
fn a_results_directory_that_holds_files_is_refused_unless_cleaned() {
    let scratch = Scratch::new();
    let dir = scratch.join("results");
    let run = |extra: &[&str]| {
        Run::new()
            .arg("--results")
            .arg(&dir)
            .args(extra.iter().copied())
            .stdin("k\techo one\n")
            .run()
    };
    run(&[]).code(0);
    let out = run(&[]);
    out.code(2);
    assert!(out.stderr().contains("--results-clean"), "{}", out.dump());
    let out = run(&["--results-clean"]);
    out.code(0);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["000001-k.stderr", "000001-k.stdout", "index.jsonl"]);
    // Files lanes did not write are never removed.
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = run(&["--results-clean"]);
    out.code(2);
    assert!(out.stderr().contains("notes.txt"), "{}", out.dump());
    assert!(dir.join("000001-k.stdout").exists());
}

#[test]
fn counts_read_right() {
    let out = Run::new().stdin("k\ttrue\n").run();
    out.code(0);
    assert!(out.stderr().contains("lanes: 1 job in "), "{}", out.dump());
    let out = Run::new().stdin("k\ttrue\nk\ttrue\n").run();
    assert!(out.stderr().contains("lanes: 2 jobs in "), "{}", out.dump());
}
