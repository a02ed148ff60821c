//! The shared fixtures beside the repository (`../shared/fixtures`), which the vendored copies
//! under `fixtures/` must not drift from.

use std::path::{Path, PathBuf};

/// `../shared/fixtures/<family>` (relative to the repository root) when `../shared` exists.
/// `../shared` may be absent on a development machine (it sits beside the repository), and
/// drift is then not checked; once it is there, the family's fixtures must be too.
///
/// # Panics
/// When `../shared` exists without `fixtures/<family>` in it (a partial or renamed checkout
/// would otherwise skip the check quietly), and when `../shared` is absent while the
/// environment has `CI=true` (CI must check for drift); each says where it looked.
fn shared_fixtures(family: &str) -> Option<PathBuf> {
    // crates/polyq-testkit -> crates -> the repository -> the directory beside it.
    let beside_repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the test kit sits two levels below the repository root");
    family_fixtures(
        &beside_repository.join("shared"),
        family,
        std::env::var("CI").is_ok_and(|ci| ci == "true"),
    )
}

/// Asserts that `vendored` holds the same files, at the same relative paths and byte for byte,
/// as the shared fixtures of `family` (`shared_fixtures`); checks nothing when `../shared` is
/// absent outside CI.
///
/// # Panics
/// On any difference, naming the file and what to do, and as `shared_fixtures` does.
pub fn assert_no_drift(family: &str, vendored: &Path) {
    if let Some(shared) = shared_fixtures(family) {
        assert_same_files(vendored, &shared);
    }
}

fn family_fixtures(shared: &Path, family: &str, in_ci: bool) -> Option<PathBuf> {
    let dir = shared.join("fixtures").join(family);
    if shared.is_dir() {
        assert!(
            dir.is_dir(),
            "{} exists but {} does not: the vendored fixtures cannot be compared with the \
             shared ones; check the shared directory out whole",
            shared.display(),
            dir.display()
        );
        return Some(dir);
    }
    assert!(
        !in_ci,
        "the shared fixtures were expected at {} (CI=true): check them out beside the \
         repository, so that the vendored copies are compared with them",
        dir.display()
    );
    eprintln!(
        "note: {} is absent, so drift from the shared fixtures was not checked",
        shared.display()
    );
    None
}

fn assert_same_files(vendored: &Path, shared: &Path) {
    let files = files_under(shared);
    assert_eq!(
        files_under(vendored),
        files,
        "{} and {} hold different files",
        vendored.display(),
        shared.display()
    );
    for file in files {
        let ours = std::fs::read(vendored.join(&file)).expect("a vendored fixture reads");
        let theirs = std::fs::read(shared.join(&file)).expect("a shared fixture reads");
        assert!(
            ours == theirs,
            "{} has drifted from {}; copy the shared file over it",
            vendored.join(&file).display(),
            shared.join(&file).display()
        );
    }
}

/// Every file under `root`, as paths relative to it, sorted.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(relative) = path.strip_prefix(root) {
                out.push(relative.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Scratch {
        type Target = Path;

        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn scratch() -> Scratch {
        let dir = std::env::temp_dir().join(crate::unique_name("polyq-shared"));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(root: &Path, file: &str, text: &str) {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn an_absent_shared_directory_is_skipped_outside_ci() {
        let absent = std::env::temp_dir().join(crate::unique_name("polyq-no-shared"));
        assert_eq!(family_fixtures(&absent, "acemq", false), None);
    }

    #[test]
    #[should_panic(expected = "the shared fixtures were expected at")]
    fn an_absent_shared_directory_fails_in_ci() {
        let absent = std::env::temp_dir().join(crate::unique_name("polyq-no-shared"));
        family_fixtures(&absent, "acemq", true);
    }

    #[test]
    #[should_panic(expected = "cannot be compared")]
    fn a_shared_directory_without_the_family_fails_outside_ci_too() {
        let shared = scratch();
        write(&shared, "fixtures/babelqueue/a.json", "{}");
        family_fixtures(&shared, "acemq", false);
    }

    #[test]
    fn a_present_family_is_given_back() {
        let shared = scratch();
        write(&shared, "fixtures/acemq/a.json", "{}");
        assert_eq!(
            family_fixtures(&shared, "acemq", false),
            Some(shared.join("fixtures/acemq"))
        );
    }

    #[test]
    fn equal_trees_pass() {
        let (ours, theirs) = (scratch(), scratch());
        for root in [&*ours, &*theirs] {
            write(root, "a.json", "{}");
            write(root, "deep/b.json", "[]");
        }
        assert_same_files(&ours, &theirs);
    }

    #[test]
    #[should_panic(expected = "has drifted from")]
    fn a_changed_file_in_a_subdirectory_fails() {
        let (ours, theirs) = (scratch(), scratch());
        write(&ours, "deep/b.json", "[]");
        write(&theirs, "deep/b.json", "[1]");
        assert_same_files(&ours, &theirs);
    }

    #[test]
    #[should_panic(expected = "hold different files")]
    fn a_file_only_one_side_has_fails() {
        let (ours, theirs) = (scratch(), scratch());
        write(&ours, "a.json", "{}");
        write(&theirs, "a.json", "{}");
        write(&theirs, "new.json", "{}");
        assert_same_files(&ours, &theirs);
    }
}
