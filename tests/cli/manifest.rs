//! SPEC §1.2: the TOML manifest: settings, per-job timeout, cwd, env, rank, and errors.

use std::fs;

use crate::support::*;

#[test]
fn manifest_settings_apply_to_the_run() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        r#"# settings
max_concurrent = 3
timeout = "300ms"
grace = "1s"
shell = "bash"

[env]
FROM_MANIFEST = "m-env"

[[job]]
key = "shell"
cmd = 'echo "bash=${BASH_VERSION:+yes} env=$FROM_MANIFEST"'

[[job]]
key = "slow"
cmd = "sleep 5"
"#,
    );
    let out = Run::new().cwd(scratch.path()).arg("m.toml").run();
    out.code(1);
    let report = out.report();
    assert_eq!(report.run.max_concurrent, 3);
    assert_eq!(report.run.source, "m.toml");
    assert!(
        out.stdout().contains("[shell] bash=yes env=m-env\n"),
        "{}",
        out.dump()
    );
    let slow = out.job(2);
    assert_eq!(slow.result(), ("interrupted", Some("timeout")), "{slow:?}");
    let ms = slow.duration_ms.unwrap();
    assert!((200..3000).contains(&ms), "timeout 300ms, ran {ms} ms");
}

#[test]
fn command_line_flags_override_manifest_settings() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        r#"max_concurrent = 3
timeout = "200ms"
shell = "bash"

[[job]]
key = "a"
cmd = 'sleep 0.5; echo "shell=${BASH_VERSION:-not-bash}"'
"#,
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "1", "--timeout", "20", "--shell", "sh", "m.toml"])
        .run();
    out.code(0);
    assert_eq!(out.report().run.max_concurrent, 1);
    assert_eq!(out.stdout(), "[a] shell=not-bash\n");
}

#[test]
fn a_jobs_timeout_overrides_the_runs() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        r#"timeout = 0.4
grace = "1s"

[[job]]
key = "short"
cmd = "sleep 5"
timeout = "150ms"

[[job]]
key = "long"
cmd = "sleep 0.8; echo done"
timeout = "20s"

[[job]]
key = "default"
cmd = "sleep 5"

[[job]]
key = "number"
cmd = "sleep 5"
timeout = 0.2
"#,
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "4", "m.toml"])
        .run();
    out.code(1);
    let short = out.job(1);
    assert_eq!(short.result(), ("interrupted", Some("timeout")));
    assert!(short.duration_ms.unwrap() < 2000, "{short:?}");
    let long = out.job(2);
    assert_eq!(long.result(), ("succeeded", None), "{}", out.dump());
    assert!(long.duration_ms.unwrap() >= 750, "{long:?}");
    let default = out.job(3);
    assert_eq!(default.result(), ("interrupted", Some("timeout")));
    assert!(
        (300..3000).contains(&default.duration_ms.unwrap()),
        "{default:?}"
    );
    let number = out.job(4);
    assert_eq!(number.result(), ("interrupted", Some("timeout")));
    assert!(number.duration_ms.unwrap() < 2000, "{number:?}");
}

#[test]
fn cwd_is_relative_to_the_manifest_directory() {
    let scratch = Scratch::new();
    let work = scratch.mkdir("sub/work");
    let elsewhere = scratch.mkdir("elsewhere");
    let absolute = scratch.mkdir("abs dir");
    scratch.write(
        "sub/m.toml",
        format!(
            r#"[[job]]
key = "rel"
cmd = "pwd -P"
cwd = "work"

[[job]]
key = "none"
cmd = "pwd -P"

[[job]]
key = "abs"
cmd = "pwd -P"
cwd = {absolute:?}
"#
        ),
    );
    let out = Run::new()
        .cwd(&elsewhere)
        .args(["-j", "1", "../sub/m.toml"])
        .run();
    out.code(0);
    let real = |p: &std::path::Path| fs::canonicalize(p).unwrap().display().to_string();
    let want = format!(
        "[rel] {}\n[none] {}\n[abs] {}\n",
        real(&work),
        real(&elsewhere),
        real(&absolute)
    );
    assert_eq!(out.stdout(), want, "{}", out.dump());
}

#[test]
fn every_job_gets_pwd_set_to_its_physical_working_directory() {
    // lanes starts in a directory reached through a symlink, with the logical PWD a shell
    // would export; one job's cwd is a symlink too. Each job prints its physical directory
    // and the PWD its process was started with (read from /proc: the shell may correct $PWD
    // on its own).
    let scratch = Scratch::new();
    let real = scratch.mkdir("real");
    let home = scratch.mkdir("home");
    let sub = scratch.mkdir("m/sub");
    std::os::unix::fs::symlink(&real, scratch.join("link")).unwrap();
    std::os::unix::fs::symlink(&home, scratch.join("home-link")).unwrap();
    let show = r"pwd -P; tr '\0' '\n' < /proc/$$/environ | grep ^PWD=";
    scratch.write(
        "m/m.toml",
        format!(
            "[[job]]\nkey = \"link\"\ncmd = '''{show}'''\ncwd = {:?}\n\n\
             [[job]]\nkey = \"rel\"\ncmd = '''{show}'''\ncwd = \"sub\"\n\n\
             [[job]]\nkey = \"none\"\ncmd = '''{show}'''\n",
            scratch.join("link")
        ),
    );
    let out = Run::new()
        .cwd(scratch.join("home-link"))
        .env("PWD", scratch.join("home-link"))
        .args(["-j", "1"])
        .arg(scratch.join("m/m.toml"))
        .run();
    out.code(0);
    let physical = |p: &std::path::Path| fs::canonicalize(p).unwrap().display().to_string();
    let mut want = String::new();
    for (key, dir) in [("link", &real), ("rel", &sub), ("none", &home)] {
        let dir = physical(dir);
        want.push_str(&format!("[{key}] {dir}\n[{key}] PWD={dir}\n"));
    }
    assert_eq!(out.stdout(), want, "{}", out.dump());
}

/// lanes started in a directory deleted under it: a job runs there (a command with absolute
/// paths works) and starts without `PWD`, neither an empty one nor the stale inherited one.
#[test]
fn a_job_of_lanes_in_a_deleted_directory_starts_without_pwd() {
    let scratch = Scratch::new();
    let gone = scratch.mkdir("gone");
    let seen = scratch.join("seen");
    let out = Run::new()
        .cwd(&gone)
        .env("PWD", &gone)
        .wrapper(&format!("rmdir {}", sh_quote(gone.to_str().unwrap())))
        .stdin(format!(
            "k\ttr '\\0' '\\n' < /proc/$$/environ | grep -c ^PWD= > {}; true\n",
            sh_quote(seen.to_str().unwrap())
        ))
        .run();
    out.code(0);
    assert!(!gone.exists());
    assert_eq!(
        fs::read_to_string(&seen).unwrap().trim(),
        "0",
        "{}",
        out.dump()
    );
}

#[test]
fn env_is_added_per_job_and_isolated_between_jobs() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        r#"[env]
SHARED = "s"

[[job]]
key = "a"
cmd = 'echo "1:$SHARED:${ONLY_A-unset}:${ONLY_B-unset}:$RUNNER"'
env = { ONLY_A = "x" }

[[job]]
key = "a"
cmd = 'echo "2:$SHARED:${ONLY_A-unset}:${ONLY_B-unset}:$RUNNER"'
env = { ONLY_B = "y", SHARED = "overridden" }

[[job]]
key = "a"
cmd = 'echo "3:$SHARED:${ONLY_A-unset}:${ONLY_B-unset}:$RUNNER"'
"#,
    );
    let out = Run::new()
        .cwd(scratch.path())
        .env("RUNNER", "r")
        .args(["-j", "2", "m.toml"])
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "[a] 1:s:x:unset:r\n[a] 2:overridden:unset:y:r\n[a] 3:s:unset:unset:r\n",
        "{}",
        out.dump()
    );
}

#[test]
fn rank_orders_a_lane_and_ties_keep_file_order() {
    let scratch = Scratch::new();
    let job = |cmd: &str, rank: Option<i64>| {
        let rank = rank.map_or_else(|| "# no rank\n".to_owned(), |r| format!("rank = {r}\n"));
        format!("[[job]]\nkey = \"x\"\ncmd = 'echo {cmd} >> \"$D/x.log\"'\n{rank}\n")
    };
    let text = [
        job("r2", Some(2)),
        job("r0a", Some(0)),
        job("r0b", None),
        job("r1", Some(1)),
        job("rm1", Some(-1)),
        job("r0c", Some(0)),
    ]
    .concat();
    scratch.write("m.toml", &text);
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-j", "2", "m.toml"])
        .run();
    out.code(0);
    assert_eq!(
        scratch.lines("x.log"),
        ["rm1", "r0a", "r0b", "r0c", "r1", "r2"],
        "{}",
        out.dump()
    );
    // seq stays the file order; line is the `[[job]]` header's line.
    for seq in 1..=6u64 {
        let record = out.job(seq);
        assert_eq!(record.line, 1 + (seq - 1) * 5, "{record:?}");
    }
    assert_eq!(
        out.job(1).command.as_deref(),
        Some("echo r2 >> \"$D/x.log\"")
    );
    // And the records agree: each job of the lane starts after the one before it ended.
    let order = [5, 2, 3, 6, 4, 1];
    for pair in order.windows(2) {
        let (before, after) = (out.job(pair[0]), out.job(pair[1]));
        assert!(after.start_ms() >= before.end_ms(), "{before:?}\n{after:?}");
    }
}

#[test]
fn the_manifest_flag_reads_any_file_name() {
    let scratch = Scratch::new();
    scratch.write(
        "jobs.conf",
        "[[job]]\nkey = \"k\"\ncmd = \"echo from-manifest\"\n",
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["--manifest", "jobs.conf"])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] from-manifest\n");
}

/// Runs an invalid manifest; asserts exit 2, nothing run, and returns the (line, column)
/// named on stderr as `m.toml:LINE:COLUMN`.
fn invalid_manifest(text: &str) -> (u64, u64) {
    let scratch = Scratch::new();
    scratch.write("m.toml", text);
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .arg("m.toml")
        .run();
    out.code(2);
    assert!(!scratch.exists("ran"), "a job ran\n{}", out.dump());
    assert!(
        out.report.as_ref().is_none_or(|r| r.jobs.is_empty()),
        "{}",
        out.dump()
    );
    let stderr = out.stderr();
    let at = stderr
        .find("m.toml:")
        .unwrap_or_else(|| panic!("stderr does not name m.toml\n{}", out.dump()));
    let mut parts = stderr[at + "m.toml:".len()..].splitn(3, ':');
    let number = |part: Option<&str>| -> u64 {
        part.and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no LINE:COLUMN after m.toml:\n{}", out.dump()))
    };
    (number(parts.next()), number(parts.next()))
}

const RAN: &str = "[[job]]\nkey = \"ok\"\ncmd = 'touch \"$D/ran\"'\n";

#[test]
fn an_unknown_top_level_field_is_named_with_line_and_column() {
    let pos = invalid_manifest(&format!("max_concurrent = 2\ncolour = \"red\"\n{RAN}"));
    assert_eq!(pos, (2, 1));
}

#[test]
fn a_wrong_type_is_named_with_line_and_column() {
    let pos = invalid_manifest(&format!("max_concurrent = \"four\"\n{RAN}"));
    assert_eq!(pos, (1, 18));
    let pos = invalid_manifest(&format!("{RAN}rank = \"high\"\n"));
    assert_eq!(pos, (4, 8));
}

#[test]
fn an_unknown_job_field_is_named_with_line_and_column() {
    let pos = invalid_manifest(&format!(
        "{RAN}\n[[job]]\nkey = \"b\"\ncmd = \"true\"\n  retries = 3\n"
    ));
    assert_eq!(pos, (8, 3));
}

#[test]
fn a_missing_cmd_or_key_is_named_in_its_job_and_nothing_runs() {
    // The valid job comes first: the whole manifest is validated before anything starts.
    let (line, column) = invalid_manifest(&format!(
        "{RAN}\n[[job]]\nkey = \"b\"\n\n[[job]]\nkey = \"c\"\ncmd = \"true\"\n"
    ));
    assert!((5..=7).contains(&line) && column >= 1, "{line}:{column}");
    let (line, column) = invalid_manifest(&format!("{RAN}\n[[job]]\ncmd = \"true\"\n"));
    assert!((5..=6).contains(&line) && column >= 1, "{line}:{column}");
}

#[test]
fn a_command_longer_than_one_argument_or_a_key_with_nul_is_named() {
    // Neither could ever be given to a process: refused with the manifest, not at spawn.
    let long = "x".repeat(200_000);
    let pos = invalid_manifest(&format!("{RAN}\n[[job]]\nkey = \"b\"\ncmd = \"{long}\"\n"));
    assert_eq!(pos, (7, 7));
    let pos = invalid_manifest(&format!(
        "{RAN}\n[[job]]\nkey = \"b\\u0000\"\ncmd = \"true\"\n"
    ));
    assert_eq!(pos, (6, 7));
    // Nor could an environment string longer than one argument, the run's or a job's.
    let pos = invalid_manifest(&format!("[env]\nBIG = \"{long}\"\n{RAN}"));
    assert_eq!(pos, (2, 1));
    let pos = invalid_manifest(&format!("{RAN}env = {{ BIG = \"{long}\" }}\n"));
    assert_eq!(pos, (4, 9));
}

#[test]
fn a_bad_duration_is_named_with_line_and_column() {
    let pos = invalid_manifest(&format!("grace = \"1s\"\ntimeout = \"soon\"\n{RAN}"));
    assert_eq!(pos, (2, 11));
    let pos = invalid_manifest(&format!("{RAN}timeout = \"soon\"\n"));
    assert_eq!(pos, (4, 11));
}

#[test]
fn a_toml_syntax_error_is_named_with_line_and_column() {
    let pos = invalid_manifest(&format!("{RAN}\n[[job]\nkey = \"b\"\n"));
    assert_eq!(pos.0, 5);
}

#[test]
fn a_jobs_timeout_of_zero_means_no_timeout_as_on_the_command_line() {
    // `timeout = 0` on a job turns the run's timeout off for it, like `--timeout 0` for the
    // whole run (README: 0 means no timeout).
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        r#"timeout = "100ms"

[[job]]
key = "zero"
cmd = "sleep 0.4; echo zero-done"
timeout = 0

[[job]]
key = "zero-text"
cmd = "sleep 0.4; echo text-done"
timeout = "0s"

[[job]]
key = "run-wide"
cmd = "sleep 5"
"#,
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "3", "--grace", "1", "m.toml"])
        .run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
    assert_eq!(out.job(2).result(), ("succeeded", None), "{}", out.dump());
    assert_eq!(out.job(3).result(), ("interrupted", Some("timeout")));
    assert!(
        out.stdout().contains("[zero] zero-done\n"),
        "{}",
        out.dump()
    );
}

/// A file of `KEY<TAB>COMMAND` lines named `*.toml` is read as a manifest by its name: its
/// error says so, and how to give the lines.
#[test]
fn tab_lines_in_a_file_named_toml_are_said_to_be_read_as_a_manifest() {
    let scratch = Scratch::new();
    scratch.write("jobs.toml", "# jobs\na\ttouch \"$D/ran\"\n");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .no_report()
        .arg("jobs.toml")
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("jobs.toml:2:")
            && out
                .stderr()
                .contains("a FILE named *.toml is read as a manifest"),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
}

/// A manifest without a job runs nothing, and says so (exit 0, as empty input).
#[test]
fn a_manifest_without_a_job_says_that_nothing_runs() {
    let scratch = Scratch::new();
    scratch.write("m.toml", "max_concurrent = 2\n");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .arg("m.toml")
        .run();
    out.code(0);
    assert!(
        out.stderr()
            .contains("the manifest m.toml has no job (each is written `[[job]]`)"),
        "{}",
        out.dump()
    );
    assert_eq!(out.report().summary.jobs, 0);
}

/// A manifest `command` that names columns, over a job's `cmd` with fewer of them split at
/// `--colsep`, is refused before anything starts, naming the job (file and line): lines, `-a`
/// and `:::` reject such an argument; a manifest is checked whole first.
#[test]
fn a_job_cmd_without_the_columns_the_command_names_is_refused_before_any_job() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        "command = 'touch \"$D\"/{1}-{2}'\n\
         [[job]]\nkey = \"db\"\ncmd = \"db,migrate\"\n\
         [[job]]\nkey = \"web\"\ncmd = \"web\"\n",
    );
    for flags in [&[][..], &["--dry-run"][..]] {
        let out = Run::new()
            .scratch(&scratch)
            .cwd(scratch.path())
            .no_report()
            .args(["--colsep", ","])
            .args(flags)
            .arg("m.toml")
            .run();
        out.code(2);
        assert!(
            out.stderr().contains(
                "m.toml:5:1: the job's `cmd` has 1 column split at --colsep `,`, but column {2} \
                 is named"
            ),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("db-migrate"), "a job ran\n{}", out.dump());
    }
    // With the column there, both run.
    scratch.write(
        "m.toml",
        "command = 'touch \"$D\"/{1}-{2}'\n[[job]]\nkey = \"web\"\ncmd = \"web,up\"\n",
    );
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["--colsep", ",", "m.toml"])
        .run();
    out.code(0);
    assert!(scratch.exists("web-up"), "{}", out.dump());
}

/// Two settings that cannot go together are each named as written, the manifest's with file,
/// line and column, a flag as the flag.
#[test]
fn settings_in_conflict_are_named_where_they_are_written() {
    let cases: [(&str, &[&str], &[&str]); 10] = [
        (
            "batch_size = 2\n",
            &[],
            &["`batch_size` (m.toml:1:14) needs a command template"],
        ),
        (
            "coalesce = \"off\"\ncancel_in_progress = true\n",
            &[],
            &[
                "`cancel_in_progress = true` (m.toml:2:22) keeps one running",
                "while `coalesce = \"off\"` (m.toml:1:12) keeps every job",
            ],
        ),
        (
            "cancel_in_progress = true\n",
            &["--coalesce", "off"],
            &[
                "(m.toml:1:22) keeps one running",
                "while --coalesce off keeps",
            ],
        ),
        (
            "lock_dir = \"locks\"\ncoordinate = \"postgresql:///x?host=/nowhere\"\n",
            &[],
            &["`coordinate` (m.toml:2:14) shares keys across hosts and `lock_dir` (m.toml:1:12)"],
        ),
        (
            "command = \"echo {}\"\ncoalesce = \"latest\"\nbatch_bytes = 100\n",
            &[],
            &[
                "`batch_bytes` (m.toml:3:15) runs every waiting job",
                "while `coalesce = \"latest\"` (m.toml:2:12) drops",
            ],
        ),
        (
            "command = \"echo {}\"\nbatch_delay = \"1s\"\n",
            &[],
            &["`batch_delay` (m.toml:2:15) waits for a key's batch to fill"],
        ),
        (
            "retry_delay = \"1s\"\n",
            &[],
            &[
                "`retry_delay` (m.toml:1:15) is the wait before a failed job's retry, but no job \
               is retried here: give --retries N",
            ],
        ),
        (
            "command = \"echo {res.gpu} {}\"\n",
            &[],
            &["`command` (m.toml:1:11) uses {res.gpu}, but the run has no resource \"gpu\""],
        ),
        (
            "command = \"echo {2}\"\n",
            &[],
            &["`command` (m.toml:1:11) names column {2}, but there is no --colsep"],
        ),
        (
            "command = \"echo {}\"\nbatch_bytes = 99999999\n",
            &[],
            &["`batch_bytes` (m.toml:2:15) 99999999 is more than one argument can hold"],
        ),
    ];
    for (settings, flags, wanted) in cases {
        let scratch = Scratch::new();
        scratch.write("m.toml", format!("{settings}{RAN}"));
        let out = Run::new()
            .scratch(&scratch)
            .cwd(scratch.path())
            .no_report()
            .args(flags)
            .arg("m.toml")
            .run();
        out.code(2);
        assert!(!scratch.exists("ran"), "a job ran\n{}", out.dump());
        for want in wanted {
            assert!(out.stderr().contains(want), "{want}\n{}", out.dump());
        }
    }
}

/// A manifest's `coordinate` that cannot be used is named as the manifest writes it, with its
/// file, line and column, not as a flag the user never gave.
#[test]
fn a_bad_coordinate_in_a_manifest_is_named_with_its_place() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        "max_concurrent = 1\ncoordinate = \"http://x\"\n[[job]]\nkey = \"a\"\ncmd = \"true\"\n",
    );
    for dry_run in [true, false] {
        let mut run = Run::new().no_report().cwd(scratch.path());
        if dry_run {
            run = run.arg("--dry-run");
        }
        let out = run.arg("m.toml").run();
        out.code(2);
        assert!(
            out.stderr()
                .starts_with("lanes: `coordinate` (m.toml:2:14): not a valid PostgreSQL URL"),
            "{}",
            out.dump()
        );
    }
}

/// What an error quotes of a manifest (a field's name, a value) is shown with its control,
/// bidi and invisible characters escaped: it never moves the cursor, and a name with a
/// zero-width space in it does not look like a known one.
#[test]
fn an_error_quoting_a_manifest_escapes_its_control_and_invisible_characters() {
    let scratch = Scratch::new();
    for (field, shown) in [
        (
            "\"evil\\u001b[31mRED\\u202e\"",
            "evil\\u{1b}[31mRED\\u{202e}",
        ),
        ("\"cmd\\u200b\"", "cmd\\u{200b}"),
    ] {
        scratch.write(
            "m.toml",
            format!("[[job]]\nkey = \"a\"\ncmd = \"true\"\n{field} = \"y\"\n"),
        );
        let out = Run::new()
            .no_report()
            .cwd(scratch.path())
            .args(["--dry-run", "m.toml"])
            .run();
        out.code(2);
        let stderr = out.stderr();
        assert!(
            stderr.contains(&format!("unknown field `{shown}`")),
            "{}",
            out.dump()
        );
        assert!(
            !stderr.contains(['\u{1b}', '\u{202e}', '\u{200b}']),
            "{stderr:?}"
        );
    }
}

/// A job's error quotes what the manifest gave (here its `cwd`): the summary on stderr and the
/// JUnit file show it escaped, never raw escape sequences that would act on a terminal.
#[test]
fn a_job_error_quoting_the_manifest_reaches_the_summary_escaped() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        "[[job]]\nkey = \"a\"\ncmd = \"true\"\ncwd = \"\\u001b]2;title\\u0007\\u001b[2Jgone\"\n",
    );
    let junit = scratch.join("junit.xml");
    let out = Run::new()
        .cwd(scratch.path())
        .arg("--junit")
        .arg(&junit)
        .arg("m.toml")
        .run();
    out.code(1);
    let stderr = out.stderr();
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.contains("\\u{1b}]2;title\\u{7}\\u{1b}[2Jgone"),
        "{}",
        out.dump()
    );
    let xml = fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("\\u{1b}[2Jgone"), "{xml}");
}
