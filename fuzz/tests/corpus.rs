//! Every fuzz target's saved corpus (`fuzz/corpus/<target>`), replayed through the target's own
//! checks as an ordinary test: no fuzzing engine is needed to run an input again, so an input
//! that once failed (kept in the corpus with its fix) stays fixed. The long fuzz runs that grow
//! the corpus are `scripts/fuzz`'s.
//!
//! Run with the cfg cargo-fuzz sets, as `scripts/test` does:
//! `RUSTFLAGS="--cfg fuzzing" cargo test --manifest-path fuzz/Cargo.toml --test corpus`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use polyq_fuzz::targets;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of the files in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Runs every input of `target`'s corpus through `check`, naming the inputs that fail.
fn replay(target: &str, check: fn(&[u8])) {
    let corpus = fuzz_dir().join("corpus").join(target);
    let inputs = names_in(&corpus);
    assert!(!inputs.is_empty(), "{} holds no input", corpus.display());
    let failed: Vec<&String> = inputs
        .iter()
        .filter(|name| {
            let data = std::fs::read(corpus.join(name)).expect("a corpus input reads");
            catch_unwind(AssertUnwindSafe(|| check(&data))).is_err()
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} inputs of {target} fail its checks (their panics are printed above): {failed:?}; \
         reproduce one with `RUSTC_BOOTSTRAP=1 cargo fuzz run -O -a {target} corpus/{target}/<file>` \
         in fuzz/",
        failed.len(),
        inputs.len()
    );
}

/// One test per target, and the list of them, which must name every target in `fuzz_targets/`.
macro_rules! replays {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), targets::$target::check);
            }
        )*

        const REPLAYED: &[&str] = &[$(stringify!($target)),*];
    };
}

replays!(
    acemq_claim_frame,
    acemq_envelope,
    acemq_itinerary,
    acemq_route,
    acemq_text_codecs,
    babelqueue_body,
    babelqueue_laravel_payload,
    babelqueue_redis_frame,
    message_json,
);

#[test]
fn every_target_is_replayed() {
    let targets: Vec<String> = names_in(&fuzz_dir().join("fuzz_targets"))
        .into_iter()
        .filter_map(|name| name.strip_suffix(".rs").map(str::to_owned))
        .collect();
    let mut replayed: Vec<&str> = REPLAYED.to_vec();
    replayed.sort_unstable();
    assert_eq!(
        targets, replayed,
        "a fuzz target without a corpus replay, or the other way"
    );
}
