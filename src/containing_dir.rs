//! The directory a file is in, as a path names it.

use std::path::Path;

/// The directory that holds the file `path` names: its parent, or `.` for a bare file name
/// (whose parent is the empty path, which no system call takes).
pub(crate) fn containing_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Whether `create_dir_all(dir)` could make the missing `dir`, found without making it: its
/// nearest existing ancestor (`.` when none of its named ones exists) a directory this process
/// may write in and search (`access(2)`, as the real ids).
///
/// # Errors
/// `ENOTDIR` when that ancestor is not a directory, else what `access` says (`EACCES`,
/// `EROFS`).
pub(crate) fn check_creatable(dir: &Path) -> Result<(), std::io::Error> {
    use nix::unistd::{access, AccessFlags};
    let mut ancestor = containing_dir(dir);
    while std::fs::symlink_metadata(ancestor).is_err() {
        match ancestor.parent() {
            Some(up) if !up.as_os_str().is_empty() => ancestor = up,
            _ => {
                ancestor = Path::new(".");
                break;
            }
        }
    }
    if !std::fs::metadata(ancestor).is_ok_and(|meta| meta.is_dir()) {
        return Err(std::io::Error::from_raw_os_error(nix::libc::ENOTDIR));
    }
    access(ancestor, AccessFlags::W_OK | AccessFlags::X_OK)
        .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))
}

#[cfg(test)]
mod tests {
    use super::containing_dir;
    use std::path::Path;

    #[test]
    fn a_bare_name_is_in_the_current_directory() {
        assert_eq!(containing_dir(Path::new("report.jsonl")), Path::new("."));
        assert_eq!(containing_dir(Path::new("")), Path::new("."));
    }

    #[test]
    fn a_path_with_directories_is_in_its_parent() {
        assert_eq!(
            containing_dir(Path::new("out/report.jsonl")),
            Path::new("out")
        );
        assert_eq!(containing_dir(Path::new("/report.jsonl")), Path::new("/"));
        assert_eq!(containing_dir(Path::new("./r")), Path::new("."));
    }
}
