//! The vendored fixtures under `fixtures/acemq` must equal the shared copies in
//! `../shared/fixtures/acemq` (relative to the repository root), file for file, whenever
//! `../shared` exists; in CI (`CI=true`) it must exist.

use std::path::PathBuf;

#[test]
fn vendored_fixtures_match_the_shared_copies() {
    let vendored = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/acemq");
    for name in ["envelope-fixtures.json", "contract-fixtures.json"] {
        assert!(
            vendored.join(name).is_file(),
            "the vendored fixture {name} is missing from {}",
            vendored.display()
        );
    }
    polyq_testkit::assert_no_drift("acemq", &vendored);
}
