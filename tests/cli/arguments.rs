//! The forms xargs and GNU parallel users type: a trailing command, `--key` templates with
//! `--colsep`, `-0`, `::: ARG…`, `-a FILE`; flags that compose (the last `-j` wins, `--no-…`)
//! and contradictions refused with the reason.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use crate::support::*;

/// The key and command of every job record, by seq (records come in the order jobs end).
fn keys_and_commands(out: &Output) -> Vec<(String, String)> {
    let mut jobs: Vec<_> = out.report().jobs.iter().collect();
    jobs.sort_by_key(|job| job.seq);
    jobs.into_iter()
        .map(|job| {
            (
                job.key.clone().unwrap_or_default(),
                job.command.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, c)| ((*k).to_owned(), (*c).to_owned()))
        .collect()
}

#[test]
fn a_trailing_command_runs_once_per_line_and_every_line_is_its_own_key() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args([
            "-j",
            "2",
            "sh",
            "-c",
            "printf '%s' \"$1\" > \"$D/out-$LANES_SEQ\"",
            "_",
        ])
        .stdin("a\nb c\n\n$(touch pwned)\n")
        .run();
    out.code(0);
    assert_eq!(
        keys_and_commands(&out),
        pairs(&[
            ("a", "a"),
            ("b c", "b c"),
            ("$(touch pwned)", "$(touch pwned)")
        ])
    );
    assert_eq!(scratch.read("out-1"), "a");
    assert_eq!(scratch.read("out-2"), "b c");
    assert_eq!(scratch.read("out-3"), "$(touch pwned)");
    assert!(!scratch.exists("pwned"));
}

#[test]
fn the_commands_own_options_belong_to_it() {
    let scratch = Scratch::new();
    let dir = scratch.mkdir("some dir");
    // Without `--`: `-d` is ls's, not lanes'.
    let out = Run::new()
        .args(["--output", "raw", "ls", "-d"])
        .stdin(format!("{}\n", dir.display()))
        .run();
    out.code(0);
    assert_eq!(out.stdout(), format!("{}\n", dir.display()));
}

#[test]
fn after_a_double_dash_an_existing_file_is_the_command() {
    let scratch = Scratch::new();
    let script = scratch.write(
        "run.sh",
        "#!/bin/sh\nprintf '%s\\n' \"ran $1\" > \"$D/out\"\n",
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["--", "./run.sh"])
        .stdin("x y\n")
        .run();
    out.code(0);
    assert_eq!(scratch.read("out"), "ran x y\n");
    // Without `--` a script is no file of jobs: the message gives the command's form, with
    // the `./` a shell needs to run it from here.
    let out = Run::new()
        .cwd(scratch.path())
        .no_report()
        .args(["run.sh", "arg"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("lanes [OPTIONS] -- ./run.sh arg"),
        "{}",
        out.dump()
    );
}

#[test]
fn placeholders_work_in_the_trailing_words_and_each_word_stays_one_argument() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args([
            "--output",
            "raw",
            "-j",
            "1",
            "printf",
            "%s|%s|%s|%s|{literal}\\n",
            "{/.}",
            "{//}",
            "a b",
            "{#}",
        ])
        .stdin("dir/file.tar.gz\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "file.tar|dir|a b|1|{literal}\n");
    // `{{` and `}}` are literal braces in the words too: a literal `{}` can be passed.
    let out = Run::new()
        .args(["--output", "raw", "printf", "%s %s %s\n", "{{}}", "{{key}}"])
        .stdin("A\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "{} {key} A\n");
}

#[test]
fn one_word_is_shell_text() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["cd \"$D\" && echo {} > {.}.out"])
        .stdin("one.txt\n")
        .run();
    out.code(0);
    assert_eq!(scratch.read("one.out"), "one.txt\n");
}

#[test]
fn a_template_whose_end_would_take_in_the_appended_argument_is_refused_before_anything_runs() {
    let scratch = Scratch::new();
    let cases: [(&[&str], &str, &str); 4] = [
        (&["echo \""], "\"; touch \"$D/pwned1\" #", "inside quotes"),
        (
            &["--command", "echo hi # note"],
            "k\tx\ntouch \"$D/pwned2\"",
            "in a comment",
        ),
        (
            &["--command", "cat <<E\nbody"],
            "k\t$(touch \"$D/pwned3\")",
            "in a here-document",
        ),
        (
            &["--command", "printf '%s"],
            "k\t'; touch \"$D/pwned4\"; '",
            "inside quotes",
        ),
    ];
    for (args, input, place) in cases {
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .arg("-0")
            .args(args.iter().copied())
            .stdin(format!("{input}\0"))
            .run();
        out.code(2);
        assert!(
            out.stderr().contains(&format!(
                "the argument appended at its end would be {place}"
            )),
            "{args:?}: {}",
            out.dump()
        );
        // The message names what gave the template.
        let origin = if args[0] == "--command" {
            "the template in --command"
        } else {
            "the template in the trailing command"
        };
        assert!(out.stderr().contains(origin), "{args:?}: {}", out.dump());
    }
    let out = Run::new()
        .no_report()
        .args(["echo \"{}\"", ":::", "x"])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("placeholder `{}` inside quotes in the trailing command at byte 6"),
        "{}",
        out.dump()
    );
    let pwned: Vec<String> = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("pwned"))
        .collect();
    assert!(pwned.is_empty(), "injected commands ran: {pwned:?}");
}

#[test]
fn xargs_and_parallel_habits_are_usage_errors_that_say_what_is_meant_here() {
    let cases: [(&[&str], &str); 15] = [
        (
            &["-P", "4", "echo", ":::", "a"],
            "xargs' `-P N` is `-j N` here",
        ),
        (
            &["-s", "100", "echo", ":::", "a"],
            "xargs' `-s N` is `--batch-bytes N` here",
        ),
        (
            &["--verbose", "echo", ":::", "a"],
            "every job's command is in its record",
        ),
        (
            &["--tag", "echo", ":::", "a"],
            "lanes' default output (`--output prefixed`",
        ),
        (
            &["--bar", "echo", ":::", "a"],
            "`--bar` and `--eta` are the live display here",
        ),
        (
            &["-X", "echo", ":::", "a"],
            "`-X` and `-m` are `--batch-size N` (or `--batch-bytes N`) here",
        ),
        (&["-u", "echo", ":::", "a"], "`--ungroup` is `--output raw`"),
        (
            &["-I{}", "echo", "{}", ":::", "a"],
            "the argument is `{}` in the command (xargs' `-I {}`)",
        ),
        (
            &["--halt", "now,fail=1", "echo", ":::", "a"],
            "`--halt now,fail=1` is `--fail-fast` here",
        ),
        (
            &["--joblog", "jobs.log", "echo", ":::", "a"],
            "`--joblog FILE` is `--report FILE` here",
        ),
        (
            &["-k", "echo", ":::", "a"],
            "`-k` is `--output grouped --keep-order` here",
        ),
        (
            &["--jobs", "4", "echo", ":::", "a"],
            "GNU parallel's `--jobs N` is `-j N` here",
        ),
        (
            &["-n", "1", "echo", ":::", "a"],
            "one argument per job is what lanes does",
        ),
        (&["--", ":::", "a"], "no command between `--` and `:::`"),
        (
            &["echo", "{2}", ":::", "a"],
            "the trailing command names column {2}, but there is no --colsep",
        ),
    ];
    for (args, said) in cases {
        let out = Run::new().no_report().args(args.iter().copied()).run();
        out.code(2);
        assert!(out.stderr().contains(said), "{args:?}: {}", out.dump());
        // Not clap's tip to pass the option after `--`, where lanes reads the command, nor
        // its guess at a similar name (`--joblog`: `--color`).
        assert!(
            !out.stderr().contains("as a value, use '--")
                && !out.stderr().contains("similar argument"),
            "{}",
            out.dump()
        );
    }
}

#[test]
fn mistakes_are_usage_errors_with_a_hint() {
    let out = Run::new().no_report().args(["-j", "2", "--bogus"]).run();
    out.code(2);
    assert!(
        out.stderr().contains("lanes [OPTIONS] -- COMMAND"),
        "{}",
        out.dump()
    );
    let out = Run::new().no_report().arg("jobs-typo.tsv").run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("`jobs-typo.tsv` is neither an existing file of jobs nor a command"),
        "{}",
        out.dump()
    );
    // A word after an existing file: xargs' `-a FILE` habit, with lanes' own form given.
    let scratch = Scratch::new();
    scratch.write("list.txt", "a\nb\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .args(["list.txt", "echo", "got"])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("write `lanes [OPTIONS] -a list.txt echo ...`")
            && out
                .stderr()
                .contains("`lanes [OPTIONS] -- ./list.txt echo ...`"),
        "{}",
        out.dump()
    );
    // A script named without a path is run from here with `./`: the form given says so.
    scratch.write("proc.sh", "#!/bin/sh\necho \"$1\"\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .arg("proc.sh")
        .stdin("x\n")
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("write `lanes [OPTIONS] -- ./proc.sh`"),
        "{}",
        out.dump()
    );
    // A directory is no command, by a path or by a bare name, and nothing runs.
    let dir = scratch.mkdir("d");
    let out = Run::new().no_report().arg(&dir).args([":::", "a"]).run();
    out.code(2);
    assert!(
        out.stderr().contains("is a directory, not a command"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .args(["d", ":::", "a"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("`d` is a directory here"),
        "{}",
        out.dump()
    );
    // After `--` the word was never a file of jobs.
    let out = Run::new()
        .no_report()
        .args(["--", "no-such-program-x", ":::", "a"])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("`no-such-program-x` is not a command on PATH")
            && !out.stderr().contains("file of jobs"),
        "{}",
        out.dump()
    );
    let out = Run::new().no_report().args(["-j", "2", "--"]).run();
    out.code(2);
    assert!(
        out.stderr().contains("nothing after `--`"),
        "{}",
        out.dump()
    );
}

#[test]
fn nul_separated_names_with_spaces_and_newlines_run_one_at_a_time_per_directory() {
    let scratch = Scratch::new();
    let files = ["d1/a b", "d1/new\nline", "d1/plain", "d2/x", "d2/y z"];
    scratch.mkdir("d1");
    scratch.mkdir("d2");
    for name in files {
        scratch.write(name, name);
    }
    let found = std::process::Command::new("find")
        .args(["d1", "d2", "-type", "f", "-print0"])
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(found.status.success());
    // A job holds its directory's lock (mkdir fails when it exists) while it runs: two jobs
    // of one directory at once would fail one of them.
    let job = "set -e; lock=\"$D/lock-$(dirname \"$1\")\"; mkdir \"$lock\"; \
               cat \"$1\" > \"$D/copy-$LANES_SEQ\"; sleep 0.1; rmdir \"$lock\"";
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-0", "-j", "4", "--key", "{//}", "--", "sh", "-c", job, "_"])
        .stdin(found.stdout)
        .run();
    out.code(0);
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for job in &out.report().jobs {
        let name = job.command.clone().unwrap();
        assert_eq!(scratch.read(&format!("copy-{}", job.seq)), name);
        by_key
            .entry(job.key.clone().unwrap())
            .or_default()
            .push(name);
    }
    assert_eq!(by_key.len(), 2, "{by_key:?}");
    let mut d1 = by_key["d1"].clone();
    d1.sort();
    assert_eq!(d1, ["d1/a b", "d1/new\nline", "d1/plain"]);
    assert_eq!(by_key["d2"].len(), 2);
}

#[test]
fn nul_separated_tab_lines_may_hold_newlines_in_commands() {
    let out = Run::new()
        .args(["-0", "--output", "raw"])
        .stdin("k\techo one\necho two\0")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "one\ntwo\n");
    assert_eq!(out.job(1).command.as_deref(), Some("echo one\necho two"));
}

/// A word after `:::` that is not UTF-8 is an invalid record, as the same bytes on stdin are:
/// the other arguments still run.
#[test]
fn an_argument_after_three_colons_that_is_not_text_is_rejected_and_the_rest_run() {
    use std::os::unix::ffi::OsStringExt as _;
    let out = Run::new()
        .args(["echo", ":::"])
        .arg(std::ffi::OsString::from_vec(b"\xffx".to_vec()))
        .arg("a")
        .run();
    out.code(1);
    let report = out.report();
    let results: Vec<(u64, &str, Option<&str>)> = report
        .jobs
        .iter()
        .map(|job| (job.seq, job.outcome.as_str(), job.reason.as_deref()))
        .collect();
    assert_eq!(
        results,
        [
            (1, "rejected", Some("invalid_input")),
            (2, "succeeded", None)
        ],
        "{}",
        out.dump()
    );
}

#[test]
fn arguments_after_three_colons_are_the_input() {
    let out = Run::new()
        .args([
            "--output", "raw", "-j", "1", "printf", "%s\\n", ":::", "a", "b c", "-n",
        ])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "a\nb c\n-n\n");
    assert_eq!(out.report().run.source, ":::");
    assert_eq!(out.job(3).line, 3);
    // Without a command every argument is a command.
    let out = Run::new()
        .args(["--output", "raw", "-j", "1", ":::", "echo x", "echo y"])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "x\ny\n");
    assert_eq!(
        keys_and_commands(&out),
        pairs(&[("echo x", "echo x"), ("echo y", "echo y")])
    );
}

#[test]
fn arguments_from_a_file() {
    let scratch = Scratch::new();
    let list = scratch.write("list.toml", "one\ntwo\n");
    let out = Run::new()
        .args(["--output", "raw", "-j", "1", "-a"])
        .arg(&list)
        .args(["echo", "got"])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "got one\ngot two\n");
    assert_eq!(out.report().run.source, list.display().to_string());
}

#[test]
fn keys_from_columns() {
    let out = Run::new()
        .args([
            "--key", "{1}", "--colsep", ",", "--output", "raw", "-j", "1",
        ])
        .args(["echo", "{2}"])
        .stdin("db,migrate\nweb,build\ndb,seed\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "migrate\nbuild\nseed\n");
    let keys: Vec<_> = keys_and_commands(&out)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["db", "web", "db"]);
    // With --key and no command, the records are commands.
    let out = Run::new()
        .args(["--key", "{2}", "--colsep", " ", "--output", "raw"])
        .stdin("echo first\necho second\n")
        .run();
    out.code(0);
    assert_eq!(
        keys_and_commands(&out),
        pairs(&[("first", "echo first"), ("second", "echo second")])
    );
}

#[test]
fn a_record_with_an_empty_key_is_rejected_with_the_reason() {
    let out = Run::new()
        .args(["--key", "{2}", "--colsep", ",", "echo"])
        .stdin("a,b\nlonely\n")
        .run();
    out.code(1);
    let job = out.job(2);
    assert_eq!(job.outcome, "rejected");
    assert!(
        job.error.as_deref().unwrap().contains("empty key"),
        "{job:?}"
    );
    assert_eq!(out.job(1).outcome, "succeeded");
}

#[test]
fn the_last_max_concurrent_wins() {
    for args in [["-j4", "-j", "2"], ["-j", "7", "-j2"]] {
        let out = Run::new().args(args).stdin("k\ttrue\n").run();
        out.code(0);
        assert_eq!(out.report().run.max_concurrent, 2, "{args:?}");
    }
}

#[test]
fn no_fail_fast_turns_a_manifests_fail_fast_off() {
    let scratch = Scratch::new();
    let manifest = scratch.write(
        "jobs.toml",
        "fail_fast = true\nmax_concurrent = 1\n\
         [[job]]\nkey = \"a\"\ncmd = \"exit 1\"\n\
         [[job]]\nkey = \"b\"\ncmd = \"true\"\n",
    );
    let out = Run::new().arg(&manifest).run();
    out.code(1);
    assert_eq!(out.job(2).outcome, "interrupted");
    let out = Run::new().arg(&manifest).arg("--no-fail-fast").run();
    out.code(1);
    assert_eq!(out.job(2).outcome, "succeeded");
    // The last of the pair wins.
    let out = Run::new()
        .arg(&manifest)
        .args(["--no-fail-fast", "--fail-fast"])
        .run();
    assert_eq!(out.job(2).outcome, "interrupted");
}

#[test]
fn contradictions_are_usage_errors_that_say_why() {
    let cases: [(&[&str], &str); 13] = [
        (
            &["--cancel-in-progress", "--coalesce", "off"],
            "--coalesce off keeps every job",
        ),
        (&["--command", ""], "the command (--command) is empty"),
        (
            &["--command", " "],
            "the command (--command) is empty or blank",
        ),
        (
            &["", ":::", "a"],
            "the trailing command's first word is empty",
        ),
        (
            &["/", ":::", "a"],
            "`/` is a directory, not a command nor a file of jobs",
        ),
        (&["--command", "echo", "--", "echo"], "use one"),
        (
            &["--key", "same"],
            "no placeholder: every job would have the same key (use {} for the whole line, {1} \
             for its first column); for one job at a time, give -j 1",
        ),
        (&["echo", ":::"], "nothing after `:::`"),
        (
            &["--key", "{2}", "echo", ":::", "a"],
            "--key names column {2}, but there is no --colsep",
        ),
        (
            &["--command", "echo {3}", ":::", "a"],
            "--command names column {3}, but there is no --colsep",
        ),
        (
            &["echo", "{1}", "{2}", "--colsep", ",", ":::", "a,b"],
            "give --colsep SEP before the command (after it, `--colsep` is a word of the command)",
        ),
        // GNU parallel's habit: columns passed as arguments where nothing names them.
        (
            &["--colsep", ",", "echo", ":::", "a,b"],
            "--colsep `,` is given, but no column placeholder ({1}, {2}…) uses it",
        ),
        (
            &["--colsep", ",", "--key", "{}", "echo {}", ":::", "a,b"],
            "(not in the trailing command, not in the key (--key))",
        ),
    ];
    for (args, want) in cases {
        let out = Run::new().no_report().args(args.iter().copied()).run();
        out.code(2);
        assert!(out.stderr().contains(want), "{args:?}\n{}", out.dump());
    }
    // A manifest's jobs without a `command` template: --colsep would change nothing at all.
    let scratch = Scratch::new();
    scratch.write("jobs.toml", "[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .args(["--colsep", ",", "jobs.toml"])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("(there is no command template, nor --key)")
            && !scratch.exists("ran"),
        "{}",
        out.dump()
    );
}

#[test]
fn lines_without_a_tab_under_command_say_how_to_run_them() {
    let out = Run::new()
        .args(["--command", "echo {}"])
        .stdin("1\n2\n")
        .run();
    out.code(1);
    let error = out.job(1).error.clone().unwrap();
    assert!(
        error.starts_with("line 1: no tab between key and argument (expected KEY<TAB>ARGUMENT)")
            && error.contains("lanes [OPTIONS] -- COMMAND"),
        "{error}"
    );
    // What follows the tab is the template's argument, and is named so.
    let out = Run::new()
        .args(["--command", "echo {}"])
        .stdin(
            "k	 
",
        )
        .run();
    out.code(1);
    assert_eq!(
        out.job(1).error.as_deref(),
        Some("line 1: empty argument after the tab")
    );
    // As it says: with --key, every line is an argument.
    let out = Run::new()
        .args([
            "--command",
            "echo {}",
            "--key",
            "{}",
            "--output",
            "raw",
            "-j",
            "1",
        ])
        .stdin("1\n2\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "1\n2\n");
}

#[test]
fn a_name_that_is_both_a_file_here_and_a_command_is_a_usage_error_and_a_directory_no_file() {
    let scratch = Scratch::new();
    scratch.write("echo", "");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .cwd(scratch.path())
        .arg("echo")
        .stdin("1\n2\n")
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("`echo` is both a file here and a command on PATH"),
        "{}",
        out.dump()
    );
    // A directory named like the command is no FILE of jobs: `test -e` runs for each line.
    scratch.mkdir("test");
    scratch.write("present", "");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["test", "-e"])
        .stdin("present\nabsent\n")
        .run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("succeeded", None));
    assert_eq!(out.job(2).result(), ("failed", Some("exit_status")));
}

#[test]
fn several_lists_and_four_colons_are_refused_with_the_form_to_use() {
    let out = Run::new()
        .no_report()
        .args(["echo", ":::", "a", ":::", "b"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("one `:::` list only"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .no_report()
        .args(["echo", "::::", "list.txt"])
        .run();
    out.code(2);
    assert!(out.stderr().contains("`-a FILE`"), "{}", out.dump());
    // GNU parallel's linked lists: refused, not passed to the command as words (`echo :::+ a
    // b` ran for every stdin line).
    for args in [
        &["echo", ":::+", "a", "b"][..],
        &["echo", ":::", "a", ":::+", "b"],
        &["echo", "::::+", "f"],
    ] {
        let out = Run::new().no_report().args(args).stdin("x\n").run();
        out.code(2);
        assert!(
            out.stderr().contains("linked arguments") && out.stderr().contains("--colsep"),
            "{args:?}: {}",
            out.dump()
        );
    }
}

/// A manifest followed by a command: the refusal says a manifest's jobs have their own
/// commands, not to give the manifest with `-a` (which would run its lines as arguments).
#[test]
fn a_command_after_a_manifest_is_refused_saying_its_jobs_have_their_own() {
    let scratch = Scratch::new();
    scratch.write("m.toml", "[[job]]\nkey = \"a\"\ncmd = \"true\"\n");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .no_report()
        .args(["m.toml", "echo"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("`m.toml` is a manifest") && !out.stderr().contains("-a m.toml"),
        "{}",
        out.dump()
    );
}

#[test]
fn arg_file_dash_reads_stdin() {
    let out = Run::new().args(["-a", "-", "echo"]).stdin("x\n").run();
    out.code(0);
    assert_eq!(keys_and_commands(&out), pairs(&[("x", "x")]));
}

#[test]
fn every_spelling_of_a_directory_is_one_key() {
    let out = Run::new()
        .args(["--key", "{//}", "true"])
        .stdin("d//a.log\nd/b.log\nd/sub/\n")
        .run();
    out.code(0);
    let keys: Vec<_> = keys_and_commands(&out)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["d", "d", "d"]);
}

#[test]
fn a_dry_run_escapes_control_characters() {
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "echo", ":::", "k\u{1b}[31mRED"])
        .run();
    out.code(0);
    assert!(!out.stdout().contains('\u{1b}'), "{}", out.dump());
    assert!(out.stdout().contains("[k\\u{1b}[31mRED]"), "{}", out.dump());
}

#[test]
fn a_nul_separated_record_longer_than_any_job_is_refused_and_the_next_runs() {
    let mut input = vec![b'x'; 2_000_000];
    input.extend_from_slice(b"\0short\0");
    let out = Run::new().args(["-0", "echo"]).stdin(input).run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("rejected", Some("invalid_input")));
    assert!(
        out.job(1)
            .error
            .as_deref()
            .is_some_and(|e| e.contains("longer than any job can be")),
        "{}",
        out.dump()
    );
    assert_eq!(out.job(2).result(), ("succeeded", None));
    // The figure is what one argument may hold (32 pages with its terminating NUL, as
    // everywhere else the limit is said), not a key, a tab and a command.
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .unwrap()
        .unwrap();
    let limit = format!("({} bytes)", 32 * page - 1);
    assert!(out.stderr().contains(&limit), "{limit}: {}", out.dump());
    // The same figure for a line, whose `\r` (CRLF input) is no part of the limit.
    let mut input = vec![b'x'; 2_000_000];
    input.extend_from_slice(b"\nshort\n");
    let out = Run::new().args(["echo"]).stdin(input).run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("rejected", Some("invalid_input")));
    assert!(out.stderr().contains(&limit), "{limit}: {}", out.dump());
}

/// A `KEY<TAB>COMMAND` file given where each line is a whole command (`-a FILE` without a
/// command, `--key` without one, `:::`) is not run with each key as a program (`cleanup<TAB>cd
/// sandbox; rm -f *.tmp` ran the `rm` where the `cd` failed): such a line is
/// `rejected`/`invalid_input`, and says how to give the file.
#[test]
fn a_key_tab_command_line_where_each_line_is_a_whole_command_is_invalid_not_run() {
    let scratch = Scratch::new();
    let line = "cleanup\ttouch \"$D/ran\"\n";
    scratch.write("jobs.tsv", line);
    scratch.write("jobs0.tsv", line.replace('\n', "\0"));
    let stdin_key: &[&str] = &["--key", "{1}", "--colsep", "\t"];
    for (args, stdin) in [
        (&["-a", "jobs.tsv"][..], ""),
        (stdin_key, line),
        (&["--key", "{}"][..], line),
        (&[":::", "cleanup\ttouch \"$D/ran\""][..], ""),
        (&["-0", "-a", "jobs0.tsv"][..], ""),
    ] {
        let out = first_rejected_in(&scratch, args, stdin, "as a KEY<TAB>COMMAND line does");
        let error = out.job(1).error.clone().unwrap_or_default();
        assert!(error.contains("`lanes jobs.tsv`"), "{args:?}: {error}");
    }
    // As FILE, it runs; and a command template takes such a line as its argument.
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .arg("jobs.tsv")
        .run();
    out.code(0);
    assert!(scratch.exists("ran"), "{}", out.dump());
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-a", "jobs.tsv", "echo"])
        .run();
    out.code(0);
}

/// Runs `lanes ARGS` in `scratch` on `stdin`: exit 1, its first job `rejected`/`invalid_input`
/// with `wanted` in its error, and nothing ran (no file `ran`).
fn first_rejected_in(scratch: &Scratch, args: &[&str], stdin: &str, wanted: &str) -> Output {
    let out = Run::new()
        .scratch(scratch)
        .cwd(scratch.path())
        .args(args)
        .stdin(stdin)
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(
        job.result(),
        ("rejected", Some("invalid_input")),
        "{args:?}"
    );
    assert!(
        job.error.as_deref().is_some_and(|e| e.contains(wanted)),
        "{args:?}: {}",
        out.dump()
    );
    assert!(!scratch.exists("ran"), "{args:?}: it ran\n{}", out.dump());
    out
}

/// Newline-separated input given `-0` (no NUL at all, so one record) is refused, not run as one
/// job, nor dropped whole as a comment when its first line is one (`lanes -0 jobs.tsv` ran
/// nothing and exited 0).
#[test]
fn newline_separated_input_under_nul_separation_is_refused_as_one_record() {
    let scratch = Scratch::new();
    scratch.write("jobs.tsv", "# KEY\tCOMMAND\na\ttouch \"$D/ran\"\n");
    // A listing longer than any job can be (`find | lanes -0` without `-print0`) says so too,
    // not only that the record is too long.
    let long_listing: String = (0..30_000).map(|i| format!("file-{i}\n")).collect();
    for (args, stdin) in [
        (&["-0", "jobs.tsv"][..], ""),
        (&["-0", "--", "touch"][..], "ran\nran2\n"),
        (&["-0", "-a", "jobs.tsv", "echo"][..], ""),
        (&["-0", "--", "touch"][..], long_listing.as_str()),
    ] {
        let out = first_rejected_in(
            &scratch,
            args,
            stdin,
            "leave -0 out for one record per line",
        );
        assert_eq!(out.report().jobs.len(), 1, "{args:?}");
    }
    // A last record without its NUL, after others, is a record as it is.
    let out = Run::new().args(["-0", "echo"]).stdin("a\0b\nc").run();
    out.code(0);
    assert_eq!(out.report().jobs.len(), 2);
}

/// An empty `-0` record (`a\0\0b`, or a NUL first) is `rejected`/`invalid_input`, not run with
/// an empty argument (`rm -rf dir/{}`) nor dropped without a record; the trailing NUL of the
/// last record makes none.
#[test]
fn an_empty_nul_separated_record_is_invalid_not_run_or_dropped() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["-0", "--", "sh", "-c", "touch \"$D/ran-$1\"", "_"])
        .stdin(&b"\0a\0\0b\0"[..])
        .run();
    out.code(1);
    let report = out.report();
    let mut lines: Vec<(u64, &str)> = report
        .jobs
        .iter()
        .map(|job| (job.line, job.result().0))
        .collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            (1, "rejected"),
            (2, "succeeded"),
            (3, "rejected"),
            (4, "succeeded")
        ],
        "{}",
        out.dump()
    );
    for seq in [1, 3] {
        assert!(
            out.job(seq)
                .error
                .as_deref()
                .is_some_and(|e| e.contains("empty record")),
            "{}",
            out.dump()
        );
    }
    assert!(scratch.exists("ran-a") && scratch.exists("ran-b"));
    assert!(!scratch.exists("ran-"), "run with an empty argument");
}

#[test]
fn lanes_help_prints_the_help_of_lanes_or_of_a_task() {
    let scratch = Scratch::new();
    let help = |args: &[&str]| {
        std::process::Command::new(BIN)
            .args(args)
            .current_dir(scratch.path())
            .output()
            .unwrap()
    };
    let whole = help(&["help"]);
    let text = String::from_utf8_lossy(&whole.stdout);
    assert_eq!(whole.status.code(), Some(0), "{whole:?}");
    assert!(text.contains("Usage: lanes [OPTIONS] [FILE]"), "{text}");
    assert!(text.contains("lanes serve [OPTIONS]"), "{text}");
    let submit = help(&["help", "submit"]);
    let text = String::from_utf8_lossy(&submit.stdout);
    assert_eq!(submit.status.code(), Some(0), "{submit:?}");
    assert!(text.contains("Usage: lanes submit"), "{text}");
}

/// A negative number given to a numeric option is refused as a bad value of that option (not
/// as an unknown argument with a tip to pass it after `--`, which would make it a command).
#[test]
fn a_negative_number_is_a_bad_value_of_its_option() {
    for (option, value) in [
        ("--retries", "-1"),
        ("--retry-delay", "-1"),
        ("--timeout", "-0.5"),
        ("-j", "-2"),
        ("--weight", "-1"),
        ("--max-queued-weight", "-1"),
        ("--batch-bytes", "-1"),
        ("--max-queued", "-3"),
    ] {
        let out = Run::new()
            .no_report()
            .args([option, value, ":::", "true"])
            .run();
        out.code(2);
        assert!(
            out.stderr().contains(&format!("invalid value '{value}'"))
                && ["between", "up to", "from 1 to"]
                    .iter()
                    .any(|range| out.stderr().contains(range)),
            "{option} {value}: {}",
            out.stderr()
        );
        assert!(!out.stderr().contains("-- "), "{}", out.stderr());
    }
}

#[test]
fn a_script_given_where_xargs_takes_its_command_is_refused_with_both_forms() {
    // `ls | lanes ./proc.sh` (the xargs habit): the script is no file of jobs.
    let scratch = Scratch::new();
    scratch.write("proc.sh", "#!/bin/sh\n# one file\necho \"got $1\"\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .arg("./proc.sh")
        .stdin("f1\nf2\n")
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("`./proc.sh` is a script (`#!/bin/sh`), not a file of jobs")
            && out.stderr().contains("lanes [OPTIONS] -- ./proc.sh"),
        "{}",
        out.dump()
    );
    // A compiled program, whatever lines it happens to hold, is no file of jobs either.
    let mut program = std::fs::read("/bin/true").unwrap();
    program.extend_from_slice(b"\nk\ttouch \"$D/ran\"\n");
    std::fs::write(scratch.path().join("tool"), &program).unwrap();
    let mut binary = b"\0\0\nk\ttouch \"$D/ran\"\n".to_vec();
    binary.extend_from_slice(&[0; 8]);
    std::fs::write(scratch.path().join("blob"), &binary).unwrap();
    for (name, kind) in [
        ("tool", "an ELF executable"),
        ("blob", "a binary executable"),
    ] {
        use std::os::unix::fs::PermissionsExt as _;
        let path = scratch.path().join(name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = Run::new()
            .scratch(&scratch)
            .cwd(scratch.path())
            .no_report()
            .arg(format!("./{name}"))
            .stdin("f1\n")
            .run();
        out.code(2);
        assert!(
            out.stderr()
                .contains(&format!("`./{name}` is {kind}, not a file of jobs"))
                && out
                    .stderr()
                    .contains(&format!("lanes [OPTIONS] -- ./{name}")),
            "{}",
            out.dump()
        );
        assert!(!scratch.path().join("ran").exists(), "a line of {name} ran");
    }
    // A file of jobs that runs itself through lanes is one.
    scratch.write("jobs", "#!/usr/bin/env lanes\na\techo ran\n");
    let out = Run::new().cwd(scratch.path()).arg("./jobs").run();
    out.code(0);
    assert_eq!(out.stdout(), "[a] ran\n");
}

/// In the several-words form the words go to the program as they are: a placeholder inside the
/// script of `sh -c` would make the argument code, and is refused; the argument passed to the
/// script as `$1` is the way, and stays data.
#[test]
fn a_placeholder_inside_a_shells_script_word_is_refused_and_the_argument_form_is_data() {
    let scratch = Scratch::new();
    let hostile = "$(touch \"$D/pwned\")";
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["sh", "-c", "echo {}", ":::", hostile])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("the placeholder `{}` is inside a word `sh` runs as code"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args([
            "--output",
            "raw",
            "sh",
            "-c",
            "printf '%s\\n' \"$1\"",
            "sh",
            "{}",
            ":::",
            hostile,
        ])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), format!("{hostile}\n"));
    assert!(!scratch.exists("pwned"), "the argument ran");
}

/// `--strict` names an invalid argument of a `:::` list by its place in the list.
#[test]
fn strict_names_an_invalid_argument_of_a_list_by_its_place() {
    let out = Run::new()
        .no_report()
        .args([
            "--strict", "--key", "{1}", "--colsep", ",", "echo", ":::", "a,b", ",c",
        ])
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("::: argument 2: --key gives an empty key for this record"),
        "{}",
        out.dump()
    );
}

/// An argument with fewer columns than the templates name is refused, not run with the missing
/// column empty: `--colsep '\t'` (GNU parallel's regular expression for a tab) is a backslash
/// and a `t` here, and `rm -rf -- dir/{2}` removed `dir/` itself.
#[test]
fn an_argument_without_the_columns_named_is_invalid_not_run_with_them_empty() {
    let scratch = Scratch::new();
    let keep = scratch.mkdir("sandbox");
    scratch.write("sandbox/precious", "");
    scratch.write("hosts.tsv", "db\tmigrate\nweb\tbuild\n");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["--colsep", "\\t", "--key", "{1}", "-a", "hosts.tsv"])
        .args(["rm", "-rf", "--", "sandbox/{2}"])
        .run();
    out.code(1);
    assert!(keep.join("precious").exists(), "{}", out.dump());
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("rejected", Some("invalid_input")));
        let error = job.error.clone().unwrap_or_default();
        assert!(
            error.contains("the argument has 1 column split at --colsep `\\t`, but column {2}")
                && error.contains("for a tab, give a tab: --colsep $'\\t'"),
            "{error}"
        );
    }
    // A real tab splits them; a record short of a column is refused alone.
    scratch.write("hosts.tsv", "db\tmigrate\nweb\n");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["--colsep", "\t", "--key", "{1}", "-a", "hosts.tsv"])
        .args(["sh", "-c", "touch \"$D/$1\"", "sh", "{2}"])
        .run();
    out.code(1);
    assert!(scratch.exists("migrate"));
    assert_eq!(out.job(2).result(), ("rejected", Some("invalid_input")));
}

/// An executable file without a `#!` line (a shell runs it as its own script) given where xargs
/// takes its command is refused as a script is: it was read as jobs, a line of it with a tab
/// ran, and the input on stdin was never used. The form suggested quotes what a shell would
/// split (`"a b"`), and `lanes .` (the current directory) does not source each input line.
#[test]
fn an_executable_without_a_shebang_and_the_current_directory_are_no_file_of_jobs() {
    let scratch = Scratch::new();
    scratch.write(
        "check",
        "for f in \"$@\"; do echo \"$f\"; done\nk\ttouch \"$D/canary\"\n",
    );
    std::fs::set_permissions(
        scratch.join("check"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .cwd(scratch.path())
        .args(["./check", "a b", "{}"])
        .stdin("x\n")
        .run();
    out.code(2);
    assert!(
        out.stderr().contains(
            "`./check` is an executable file (a script without a `#!` line), not a file of \
             jobs: to run it for each input line, write `lanes [OPTIONS] -- ./check 'a b' {}`"
        ),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("canary"));
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .cwd(scratch.path())
        .arg(".")
        .stdin("./check\n")
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("`.` is the current directory"),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("canary"));
}

/// A usage error quoting an argument shows its escape sequences escaped (`\u{1b}`), neither
/// sent raw to the terminal nor stripped from the message (which then named another value).
#[test]
fn a_usage_error_shows_an_argument_s_escape_sequences_escaped() {
    for (args, quoted) in [
        (
            vec!["-j", "\u{1b}]2;title\u{7}\u{1b}[41mX"],
            "'\\u{1b}]2;title\\u{7}\\u{1b}[41mX'",
        ),
        (vec!["--bogus\u{1b}[31m"], "'--bogus\\u{1b}[31m'"),
        (vec!["submit", "--bogus\u{1b}[31m"], "'--bogus\\u{1b}[31m'"),
    ] {
        let out = Run::new().no_report().args(&args).run();
        out.code(2);
        let stderr = out.stderr();
        assert!(!stderr.contains('\u{1b}'), "{args:?}: {stderr:?}");
        assert!(stderr.contains(quoted), "{args:?}: {stderr}");
    }
}

/// The words a usage error quotes from the command line (file names too) are escaped, and
/// the commands it suggests are quoted for a shell: copied, they do what they say.
#[test]
fn the_split_s_usage_errors_escape_file_names_and_quote_what_they_suggest() {
    let scratch = Scratch::new();
    scratch.write("my jobs.tsv", "x\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .args(["my jobs.tsv", "grep -c"])
        .stdin("a\n")
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("write `lanes [OPTIONS] -a 'my jobs.tsv' 'grep -c' ...`; to run `my jobs.tsv` as a command for each input line, write `lanes [OPTIONS] -- './my jobs.tsv' 'grep -c' ...`"),
        "{}",
        out.dump()
    );
    let script = "s\u{1b}[31m\u{1b}]0;T\u{7}.sh";
    scratch.write(script, "#!/bin/sh\n");
    let out = Run::new()
        .no_report()
        .cwd(scratch.path())
        .args([&format!("./{script}"), "x"])
        .stdin("a\n")
        .run();
    out.code(2);
    let stderr = out.stderr();
    assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
    assert!(
        stderr.contains("`./s\\u{1b}[31m\\u{1b}]0;T\\u{7}.sh` is a script"),
        "{stderr}"
    );
}

/// `lanes locks URL`, `--coordinate` forgotten: the URL is taken as the database, and its
/// password never shown (read as a path, the error would have quoted it whole).
#[test]
fn lanes_locks_takes_a_database_url_given_as_dir_and_never_shows_its_password() {
    let out = std::process::Command::new(BIN)
        .args(["locks", "postgres://u:Secret9pw@127.0.0.1:1/db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Secret9pw"), "{stderr}");
    assert!(stderr.contains("postgres://u@127.0.0.1:1/db"), "{stderr}");
}

/// `lanes - echo`: `-` is stdin, not a file: the usage error says so, and suggests no `./-`.
#[test]
fn a_word_after_stdin_as_file_suggests_reading_stdin_as_arguments() {
    let out = Run::new()
        .no_report()
        .args(["-", "echo"])
        .stdin("k\ttrue\n")
        .run();
    out.code(2);
    assert!(
        out.stderr().contains(
            "`-` is stdin, read as jobs, so `echo` is not expected after it; to run `echo` for \
             each line of stdin (xargs' `-a -`), write `lanes [OPTIONS] -a - echo ...`"
        ),
        "{}",
        out.dump()
    );
}
