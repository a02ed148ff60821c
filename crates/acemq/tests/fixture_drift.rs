//! The vendored fixtures under `fixtures/acemq` must equal the shared copies in
//! `../shared/fixtures/acemq` (relative to the repository root) whenever that directory exists;
//! in CI (`CI=true`) it must exist.

use std::fs;
use std::path::{Path, PathBuf};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry"))
        .filter(|entry| entry.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn vendored_fixtures_match_the_shared_copies() {
    let vendored = manifest().join("../../fixtures/acemq");
    let vendored_files = files(&vendored);
    assert!(
        vendored_files.contains(&"envelope-fixtures.json".to_owned())
            && vendored_files.contains(&"contract-fixtures.json".to_owned()),
        "the vendored fixtures are missing from {}",
        vendored.display()
    );
    let Some(shared) = polyq_testkit::shared_fixtures("acemq") else {
        return;
    };
    assert_eq!(
        vendored_files,
        files(&shared),
        "fixtures/acemq and the shared directory hold different files"
    );
    for name in &vendored_files {
        let ours = fs::read(vendored.join(name)).expect("vendored fixture");
        let theirs = fs::read(shared.join(name)).expect("shared fixture");
        assert!(
            ours == theirs,
            "fixtures/acemq/{name} has drifted from {}; copy the shared file over it",
            shared.join(name).display()
        );
    }
}
