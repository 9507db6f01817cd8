//! README "Coming from xargs or GNU parallel": every row's lanes command runs, in a directory
//! holding the files the README names, exits 0 and prints exactly the lines the row shows.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;

const BEGIN: &str = "<!-- coming-from-table: begin -->";
const END: &str = "<!-- coming-from-table: end -->";

/// One row: the lanes command and the lines it prints.
#[derive(Debug)]
struct Row {
    command: String,
    stdout: Vec<String>,
}

/// The cells of a table row, split at the `|` that are not escaped (`\|`), unescaped.
fn cells(row: &str) -> Vec<String> {
    let inner = row
        .trim()
        .strip_prefix('|')
        .and_then(|r| r.strip_suffix('|'))
        .unwrap_or_else(|| panic!("not a table row: {row}"));
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().unwrap().push('|');
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells
}

/// The code spans of a cell, in order.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, span)| span.to_owned())
        .collect()
}

fn rows() -> Vec<Row> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find(BEGIN).expect("the table's begin marker") + BEGIN.len();
    let end = readme.find(END).expect("the table's end marker");
    readme[start..end]
        .lines()
        .filter(|line| line.starts_with('|'))
        .skip(2) // the header and the separator
        .map(|line| {
            let cells = cells(line);
            assert_eq!(cells.len(), 3, "three cells: {line}");
            let command = code_spans(&cells[1]);
            assert_eq!(command.len(), 1, "one command: {line}");
            Row {
                command: command[0].clone(),
                stdout: code_spans(&cells[2]),
            }
        })
        .collect()
}

/// A directory with the files the README's table names.
fn fixtures() -> Scratch {
    let scratch = Scratch::new();
    scratch.mkdir("logs");
    scratch.write("logs/a.log", "1\n2\n");
    scratch.write("logs/b c.log", "1\n");
    scratch.write("list.txt", "one\ntwo\n");
    scratch.write("hosts.csv", "db,migrate\nweb,build\n");
    scratch.write("x.txt", "");
    scratch
}

#[test]
fn the_cells_of_a_row_are_split_as_markdown_does() {
    assert_eq!(cells(r"| `a \| b` | `c` | |"), [" `a | b` ", " `c` ", " "]);
    assert_eq!(code_spans(" `x` `y z` "), ["x", "y z"]);
}

#[test]
fn every_row_of_the_readme_table_runs_as_shown() {
    let rows = rows();
    assert!(rows.len() >= 10, "the table has its rows: {rows:?}");
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    for row in rows {
        let scratch = fixtures();
        let out = Command::new("sh")
            .arg("-c")
            .arg(&row.command)
            .current_dir(scratch.path())
            .env("PATH", &path)
            .env_remove("CI")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{}: {}\n{stdout}\n{stderr}",
            row.command,
            out.status
        );
        let mut got: Vec<&str> = stdout.lines().collect();
        let mut want: Vec<&str> = row.stdout.iter().map(String::as_str).collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{}\n{stderr}", row.command);
    }
}
