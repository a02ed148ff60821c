//! The shared fixtures beside the repository (`../shared/fixtures`), which the vendored copies
//! under `fixtures/` must not drift from.

use std::path::{Path, PathBuf};

/// `../shared/fixtures/<family>` (relative to the repository root) when that directory exists.
/// Outside CI it may be absent (it sits beside the repository on development machines), and
/// drift is then not checked.
///
/// # Panics
/// When it is absent and the environment has `CI=true`: CI must check for drift, so the
/// directory missing there is a failure, saying where it was expected.
pub fn shared_fixtures(family: &str) -> Option<PathBuf> {
    // crates/polyq-testkit -> crates -> the repository -> the directory beside it.
    let beside_repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the test kit sits two levels below the repository root");
    let dir = beside_repository.join("shared/fixtures").join(family);
    present_or_not_in_ci(dir, std::env::var("CI").is_ok_and(|ci| ci == "true"))
}

fn present_or_not_in_ci(dir: PathBuf, in_ci: bool) -> Option<PathBuf> {
    if dir.is_dir() {
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
        dir.display()
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn absent() -> PathBuf {
        std::env::temp_dir().join(crate::unique_name("polyq-no-shared"))
    }

    #[test]
    fn an_absent_directory_is_skipped_outside_ci() {
        assert_eq!(present_or_not_in_ci(absent(), false), None);
    }

    #[test]
    #[should_panic(expected = "the shared fixtures were expected at")]
    fn an_absent_directory_fails_in_ci() {
        present_or_not_in_ci(absent(), true);
    }

    #[test]
    fn a_present_directory_is_given_back() {
        let dir = std::env::temp_dir();
        assert_eq!(present_or_not_in_ci(dir.clone(), true), Some(dir));
    }
}
