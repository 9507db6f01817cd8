//! The generated files: shell completions and the man page from the command-line definition
//! (and the man page's reference sections from the README),
//! and the JSON Schemas of the report and the events file from their types. They are committed
//! under `completions/`, `man/` and `schema/`; a test proves them current.
//!
//! Regenerate after changing `cli.rs`, the README's reference sections, the records in
//! `report/json.rs` or the events in `report/events.rs`:
//! `LANES_REGENERATE=1 cargo test --lib generated_files_are_current`

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// The shells completions are generated for, with their file names under `completions/`.
pub(crate) const COMPLETIONS: [(Shell, &str); 5] = [
    (Shell::Bash, "lanes.bash"),
    (Shell::Zsh, "_lanes"),
    (Shell::Fish, "lanes.fish"),
    (Shell::Elvish, "lanes.elv"),
    (Shell::PowerShell, "_lanes.ps1"),
];

/// The completion script for `shell`.
pub(crate) fn completion(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lanes", &mut out);
    out
}

/// The man page `lanes.1` (roff): clap's sections from the command-line definition, with the
/// reference sections of the README ([`crate::man_sections`]) after the options.
pub(crate) fn man_page() -> Vec<u8> {
    let readme = include_str!("../README.md");
    let reference = crate::man_sections::render(readme).expect("the README has every section");
    let man = clap_mangen::Man::new(Cli::command());
    let mut out = Vec::new();
    let rendered: std::io::Result<()> = (|| {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        man.render_options_section(&mut out)?;
        out.extend_from_slice(reference.as_bytes());
        man.render_extra_section(&mut out)?;
        man.render_version_section(&mut out)
    })();
    rendered.expect("rendering to memory cannot fail");
    out
}

/// The report's JSON Schema, `schema/report.schema.json`: pretty JSON ending in a newline.
pub(crate) fn report_schema() -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&crate::report::json::schema())
        .expect("a schema always serialises");
    out.push(b'\n');
    out
}

/// The events file's JSON Schema, `schema/events.schema.json`.
pub(crate) fn events_schema() -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&crate::report::events::schema())
        .expect("a schema always serialises");
    out.push(b'\n');
    out
}

/// The JSON Schema of `--dry-run --json`'s lines, `schema/plan.schema.json`.
pub(crate) fn plan_schema() -> Vec<u8> {
    let mut out =
        serde_json::to_vec_pretty(&crate::dry_run::schema()).expect("a schema always serialises");
    out.push(b'\n');
    out
}

/// Every generated file as (path relative to the repository, contents).
pub(crate) fn all() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = COMPLETIONS
        .iter()
        .map(|&(shell, name)| (format!("completions/{name}"), completion(shell)))
        .collect();
    files.push(("man/lanes.1".to_owned(), man_page()));
    files.push(("schema/report.schema.json".to_owned(), report_schema()));
    files.push(("schema/events.schema.json".to_owned(), events_schema()));
    files.push(("schema/plan.schema.json".to_owned(), plan_schema()));
    files
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn generated_files_are_current() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let regenerate = std::env::var_os("LANES_REGENERATE").is_some();
        let mut stale = Vec::new();
        for (path, contents) in super::all() {
            let full = root.join(&path);
            if regenerate {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(&full, &contents).unwrap();
            } else if std::fs::read(&full).ok().as_deref() != Some(&contents[..]) {
                stale.push(path);
            }
        }
        assert!(
            stale.is_empty(),
            "out of date: {stale:?}; run `LANES_REGENERATE=1 cargo test --lib generated_files_are_current`"
        );
    }

    #[test]
    fn every_boolean_flag_has_its_no_form() {
        use clap::CommandFactory;
        let command = crate::cli::Cli::command();
        let flags: Vec<String> = command
            .get_arguments()
            .filter(|arg| matches!(arg.get_action(), clap::ArgAction::SetTrue))
            .map(|arg| arg.get_id().to_string())
            .collect();
        assert!(flags.len() >= 9, "{flags:?}");
        for flag in flags.iter().filter(|flag| !flag.starts_with("no_")) {
            assert!(
                flags.contains(&format!("no_{flag}")),
                "--{flag} has no --no- form"
            );
        }
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        crate::cli::Cli::command().debug_assert();
    }
}
