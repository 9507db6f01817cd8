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

/// The nearest ancestor of `path` that exists (`.` when none of its named ones does): where
/// `create_dir_all(path)` would make its first directory.
pub(crate) fn nearest_existing(path: &Path) -> &Path {
    let mut ancestor = containing_dir(path);
    while std::fs::symlink_metadata(ancestor).is_err() {
        match ancestor.parent() {
            Some(up) if !up.as_os_str().is_empty() => ancestor = up,
            _ => return Path::new("."),
        }
    }
    ancestor
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
