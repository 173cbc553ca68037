//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) through the same checks
//! the fuzz targets run, so every input that ever found a bug stays fixed.

#[path = "support/dispatch_check.rs"]
mod dispatch_check;
#[cfg(feature = "eth")]
#[path = "support/eth_hex_check.rs"]
mod eth_hex_check;
#[path = "support/exercise.rs"]
mod exercise;
#[path = "support/oracle.rs"]
mod oracle;

use std::path::Path;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the {target} corpus is empty");
    files
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

#[test]
fn parse_target_corpus() {
    for (name, input) in corpus("parse") {
        let r = std::panic::catch_unwind(|| exercise::exercise(&input));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[test]
fn differential_target_corpus() {
    let parser = rpcwire::Parser::new();
    for (name, input) in corpus("differential") {
        let r = std::panic::catch_unwind(|| oracle::check_agreement(&parser, &input));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[test]
fn dispatch_target_corpus() {
    let d = dispatch_check::dispatcher();
    for (name, input) in corpus("dispatch") {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dispatch_check::check(&d, &input)
        }));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[cfg(feature = "eth")]
#[test]
fn eth_hex_target_corpus() {
    for (name, input) in corpus("eth_hex") {
        let r = std::panic::catch_unwind(|| eth_hex_check::check(&input));
        assert!(r.is_ok(), "{name} fails");
    }
}
