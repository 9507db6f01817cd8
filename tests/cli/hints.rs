//! What lanes tells a person on the way: reading from a terminal, `CI` only when true, a
//! reused `--results` directory, and counts that read right.

use std::process::{Command, Stdio};

use crate::support::*;

/// Runs `lanes ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed into it,
/// `CI` set to `ci` (or unset); returns what the terminal showed.
fn on_terminal(args: &str, input: &[u8], ci: Option<&str>) -> String {
    on_terminal_after(args, None, input, ci)
}

/// As [`on_terminal`], with `input` typed only once the terminal shows `prompt`.
fn on_terminal_after(args: &str, prompt: Option<&str>, input: &[u8], ci: Option<&str>) -> String {
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};
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
    let shown = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let shown = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buffer) {
                shown.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        })
    };
    if let Some(prompt) = prompt {
        let seen = wait_until(std::time::Duration::from_secs(20), || {
            String::from_utf8_lossy(&shown.lock().unwrap()).contains(prompt)
        });
        assert!(seen, "{prompt:?} never shown");
    }
    child.stdin.take().unwrap().write_all(input).unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let shown = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    assert!(status.success(), "{status:?}: {shown}");
    shown
}

#[test]
fn reading_from_a_terminal_says_so() {
    // Ctrl-D (0x04) ends the terminal's input.
    let shown = on_terminal_after(
        "--progress never",
        Some("end with Ctrl-D"),
        b"k\techo hi\n\x04",
        None,
    );
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
    // Nor is anything that has a results file's name and is no file: and nothing goes then.
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    std::fs::create_dir(dir.join("000009-x.stdout")).unwrap();
    let out = run(&["--results-clean"]);
    out.code(2);
    assert!(
        out.stderr()
            .contains("000009-x.stdout, which lanes did not write: nothing removed"),
        "{}",
        out.dump()
    );
    assert!(dir.join("000001-k.stdout").exists());
    assert!(dir.join("index.jsonl").exists());
}

#[test]
fn counts_read_right() {
    let out = Run::new().stdin("k\ttrue\n").run();
    out.code(0);
    assert!(out.stderr().contains("lanes: 1 job in "), "{}", out.dump());
    let out = Run::new().stdin("k\ttrue\nk\ttrue\n").run();
    assert!(out.stderr().contains("lanes: 2 jobs in "), "{}", out.dump());
}

/// A task (or `serve`) named after a run's options, and `--socket` before a task, are told
/// how to write them: the task first.
#[test]
fn a_task_after_options_is_told_to_come_first() {
    for (args, hint) in [
        (&["-j", "2", "status"][..], "`lanes status` is named first"),
        (&["-j", "2", "serve"][..], "`lanes serve` is named first"),
        (
            &["--socket", "s", "status"][..],
            "`lanes status --socket PATH`",
        ),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(hint), "{args:?}: {stderr}");
    }
}
