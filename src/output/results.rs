//! `--results DIR`: each job's stdout and stderr also in files of their own under DIR, named
//! from the seq and an escaped key so that no key can name a path outside DIR (SPEC §5.1).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The longest escaped key kept in a file name, in bytes; longer ones are cut (the seq keeps
/// names unique).
const MAX_KEY_IN_NAME: usize = 80;

/// The file stem for a job: `000042-` followed by the key with every byte outside
/// `[A-Za-z0-9._-]` written as `%XX`, cut to 80 bytes. The seq makes every name unique and
/// never `.` or `..`; the escaping keeps `/`, control characters and anything else a shell or
/// a file system treats specially out of names.
pub(crate) fn file_stem(seq: u64, key: &str) -> String {
    let mut stem = format!("{seq:06}-");
    let mut kept = 0;
    for &byte in key.as_bytes() {
        let piece = if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            (byte as char).to_string()
        } else {
            format!("%{byte:02X}")
        };
        if kept + piece.len() > MAX_KEY_IN_NAME {
            break;
        }
        kept += piece.len();
        stem.push_str(&piece);
    }
    stem
}

/// The two files of one job.
#[derive(Debug)]
pub(crate) struct ResultFiles {
    stdout: ResultFile,
    stderr: ResultFile,
    /// The first error met, naming the file: the file is incomplete (SPEC §5.1: reported, and
    /// the exit status says so).
    pub error: Option<String>,
}

/// One of a job's two result files: its path, and the file until a write to it fails.
#[derive(Debug)]
struct ResultFile {
    path: PathBuf,
    file: Option<File>,
}

impl ResultFiles {
    /// Creates `DIR/STEM.stdout` and `DIR/STEM.stderr`. A file that cannot be created for a
    /// lasting reason (a full disk, no permission) is kept as the error, and the job runs
    /// without it.
    ///
    /// # Errors
    /// A passing shortage (EMFILE, ENFILE, EAGAIN): the job is to start later, once a running
    /// job has freed a descriptor, as a spawn that met it does.
    pub(crate) fn create(dir: &Path, seq: u64, key: &str) -> std::io::Result<Self> {
        let stem = file_stem(seq, key);
        let mut error = None;
        let mut open = |path: PathBuf| {
            let file = match File::create(&path) {
                Ok(file) => Some(file),
                Err(err) if crate::descriptors::is_passing_shortage(&err) => return Err(err),
                Err(err) => {
                    error.get_or_insert_with(|| format!("cannot create {}: {err}", path.display()));
                    None
                }
            };
            Ok(ResultFile { path, file })
        };
        let stdout = open(dir.join(format!("{stem}.stdout")))?;
        let stderr = open(dir.join(format!("{stem}.stderr")))?;
        Ok(ResultFiles {
            stdout,
            stderr,
            error,
        })
    }

    /// Appends `data` to the job's stdout or stderr file. A file that fails (a full disk,
    /// ENOSPC; a file-size limit, EFBIG) is written no more, and the error is kept.
    pub(crate) fn write(&mut self, is_stderr: bool, data: &[u8]) {
        let target = if is_stderr {
            &mut self.stderr
        } else {
            &mut self.stdout
        };
        if let Some(handle) = &mut target.file {
            if let Err(err) = handle.write_all(data) {
                self.error.get_or_insert_with(|| {
                    format!("cannot write {}: {err}", target.path.display())
                });
                target.file = None;
            }
        }
    }
}

/// One line of `DIR/index.jsonl`: which files hold a job's output (names relative to DIR).
#[derive(Debug, serde::Serialize)]
pub(crate) struct IndexEntry<'a> {
    pub seq: u64,
    pub key: &'a str,
    pub stdout: String,
    pub stderr: String,
}

impl<'a> IndexEntry<'a> {
    /// The entry for job `seq` of `key`, whose output went to the files of the run known by
    /// `run_seq` (itself, or the first job of its batch).
    pub(crate) fn new(seq: u64, key: &'a str, run_seq: u64) -> Self {
        let stem = file_stem(run_seq, key);
        IndexEntry {
            seq,
            key,
            stdout: format!("{stem}.stdout"),
            stderr: format!("{stem}.stderr"),
        }
    }
}

/// The name of the index file under DIR.
pub(crate) const INDEX: &str = "index.jsonl";

/// Creates DIR (and its parents) when missing. A DIR that holds files already is refused, so
/// that two runs' files never mix, unless `clean` (`--results-clean`): then the files an
/// earlier run wrote there (`NNNNNN-KEY.stdout`, `.stderr`, `index.jsonl`) are removed first,
/// and anything else in DIR is refused; or unless `resuming` (`--resume`), where the earlier
/// run's files are the results of the jobs this run skips: they are kept (a job run again
/// writes its files afresh, and the index is added to), and anything else is refused.
///
/// # Errors
/// DIR cannot be created or read, is not empty, or (with `clean` or `resuming`) holds other
/// files.
pub(crate) fn prepare_dir(dir: &Path, clean: bool, resuming: bool) -> Result<(), String> {
    let shown = dir.display();
    std::fs::create_dir_all(dir).map_err(|err| {
        // `create_dir_all` says "File exists" of a path that is something else.
        match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => not_a_directory(dir),
            _ => format!("cannot create the results directory {shown}: {err}"),
        }
    })?;
    let earlier = earlier_files(dir, clean, resuming)?;
    if !clean {
        return Ok(());
    }
    for name in earlier {
        std::fs::remove_file(dir.join(&name)).map_err(|err| {
            format!(
                "--results-clean: cannot remove {}: {err}",
                name.to_string_lossy()
            )
        })?;
    }
    Ok(())
}

/// What [`prepare_dir`] would refuse, found without making or removing anything
/// (`--dry-run`): a DIR that exists and is refused as it stands, or a missing one whose
/// nearest existing ancestor is not a directory this process may write in (`access(2)`).
///
/// # Errors
/// As [`prepare_dir`]'s, in the same words.
pub(crate) fn check_dir(dir: &Path, clean: bool, resuming: bool) -> Result<(), String> {
    let cannot = |err: std::io::Error| {
        format!(
            "cannot create the results directory {}: {err}",
            dir.display()
        )
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => earlier_files(dir, clean, resuming).map(drop),
        Ok(_) => Err(not_a_directory(dir)),
        // A link to nothing: the name is taken, and no directory can be made there.
        Err(err)
            if err.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(dir).is_ok() =>
        {
            Err(cannot(std::io::Error::from_raw_os_error(nix::libc::EEXIST)))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            crate::containing_dir::check_creatable(dir).map_err(cannot)
        }
        // Below a file (ENOTDIR), or under a directory this process may not search (EACCES).
        Err(err) => Err(cannot(err)),
    }
}

fn not_a_directory(dir: &Path) -> String {
    format!(
        "the results directory {} exists and is not a directory",
        dir.display()
    )
}

/// The names of the files an earlier run wrote in the existing directory `dir`, when this run
/// may keep (`resuming`) or remove (`clean`) them.
///
/// # Errors
/// DIR cannot be read, holds files and neither is given, or holds anything lanes did not write.
fn earlier_files(
    dir: &Path,
    clean: bool,
    resuming: bool,
) -> Result<Vec<std::ffi::OsString>, String> {
    let shown = dir.display();
    let entries = std::fs::read_dir(dir)
        .map_err(|err| format!("cannot read the results directory {shown}: {err}"))?;
    // Each name, and whether it is a file lanes could have written (not a directory, say).
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| format!("cannot read {shown}: {err}"))?;
        let is_file = entry.file_type().is_ok_and(|kind| kind.is_file());
        names.push((entry.file_name(), is_file));
    }
    if names.is_empty() {
        return Ok(Vec::new());
    }
    if !clean && !resuming {
        return Err(format!(
            "the results directory {shown} is not empty (an earlier run's?): this run's files \
             would mix with them; empty it, name another directory, or add --results-clean"
        ));
    }
    // Everything is checked before anything is removed.
    if let Some((other, _)) = names
        .iter()
        .find(|(name, is_file)| !(*is_file && written_by_lanes(name)))
    {
        let (flag, done) = if clean {
            ("--results-clean", "nothing removed")
        } else {
            ("--resume", "it would mix with this run's files")
        };
        return Err(format!(
            "{flag}: {shown} holds {}, which lanes did not write: {done}",
            other.to_string_lossy()
        ));
    }
    Ok(names.into_iter().map(|(name, _)| name).collect())
}

/// Whether a file name is one lanes writes under `--results`: the index, or
/// `NNNNNN-KEY.stdout`/`.stderr` (see [`file_stem`]).
fn written_by_lanes(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    if name == INDEX {
        return true;
    }
    let Some(stem) = name
        .strip_suffix(".stdout")
        .or_else(|| name.strip_suffix(".stderr"))
    else {
        return false;
    };
    let digits = stem.bytes().take_while(u8::is_ascii_digit).count();
    digits >= 6 && stem.as_bytes().get(digits) == Some(&b'-')
}

/// `--results DIR`: `DIR/index.jsonl`, one line per job that ran.
#[derive(Debug, Default)]
pub(crate) struct ResultsIndex {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Why the index is incomplete, until said.
    error: Option<String>,
}

impl ResultsIndex {
    /// The index of `dir`, created now, or added to where an earlier run's stays (`--resume`,
    /// see [`prepare_dir`]: the latest line of a seq is its job's); none without a directory.
    /// One that cannot be opened is an error for [`ResultsIndex::take_error`]; the jobs' own
    /// files are still written.
    pub(crate) fn create(dir: Option<&Path>) -> Self {
        let Some(dir) = dir else {
            return ResultsIndex::default();
        };
        let path = dir.join(INDEX);
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path);
        match opened {
            Ok(file) => ResultsIndex {
                path,
                file: Some(file),
                error: None,
            },
            Err(err) => ResultsIndex {
                error: Some(format!("cannot create {}: {err}", path.display())),
                path,
                file: None,
            },
        }
    }

    /// Job `seq` of `key` ran, its output in the files of the run known by `run_seq`.
    pub(crate) fn add(&mut self, seq: u64, key: &str, run_seq: u64) {
        use std::io::Write as _;
        if let Some(file) = &mut self.file {
            let mut line = serde_json::to_vec(&IndexEntry::new(seq, key, run_seq))
                .expect("an index entry always serialises");
            line.push(b'\n');
            if let Err(err) = file.write_all(&line) {
                self.error = Some(format!("cannot write {}: {err}", self.path.display()));
                self.file = None;
            }
        }
    }

    /// Why the index is incomplete, once: the caller says so and the exit status is 1.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_escape_everything_that_could_be_a_path() {
        assert_eq!(file_stem(1, "a/b"), "000001-a%2Fb");
        assert_eq!(file_stem(2, "../x"), "000002-..%2Fx");
        assert_eq!(file_stem(3, "/etc/y"), "000003-%2Fetc%2Fy");
        assert_eq!(file_stem(4, "ctl\u{1}x\ny"), "000004-ctl%01x%0Ay");
        assert_eq!(file_stem(5, "ü"), "000005-%C3%BC");
    }

    #[test]
    fn long_keys_are_cut_and_pieces_never_split() {
        let stem = file_stem(7, &"k".repeat(300));
        assert_eq!(stem.len(), 7 + MAX_KEY_IN_NAME);
        let stem = file_stem(8, &"/".repeat(100));
        assert!(stem.len() <= 7 + MAX_KEY_IN_NAME);
        assert!(stem.ends_with("%2F"));
    }

    #[test]
    fn a_path_that_is_no_directory_is_said_to_be_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let said = prepare_dir(&file, false, false).unwrap_err();
        assert_eq!(
            said,
            format!(
                "the results directory {} exists and is not a directory",
                file.display()
            )
        );
        let below = prepare_dir(&file.join("sub"), false, false).unwrap_err();
        assert!(
            below.starts_with("cannot create the results directory"),
            "{below}"
        );
    }

    #[test]
    fn files_land_inside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ResultFiles::create(dir.path(), 3, "../../escape").unwrap();
        assert_eq!(files.stdout.path.parent(), Some(dir.path()));
        files.write(false, b"out\n");
        files.write(true, b"err\n");
        assert!(files.error.is_none());
        let stem = file_stem(3, "../../escape");
        let stdout_path = dir.path().join(format!("{stem}.stdout"));
        assert_eq!(stdout_path.parent(), Some(dir.path()));
        assert_eq!(std::fs::read(&stdout_path).unwrap(), b"out\n");
        let stderr_path = dir.path().join(format!("{stem}.stderr"));
        assert_eq!(std::fs::read(&stderr_path).unwrap(), b"err\n");
    }
}
