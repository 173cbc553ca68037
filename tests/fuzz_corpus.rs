//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) through the same checks
//! the fuzz targets run, so every input that ever found a bug stays fixed.

#[path = "support/dispatch_check.rs"]
mod dispatch_check;
#[cfg(feature = "eth")]
#[path = "support/eth_hex_check.rs"]
mod eth_hex_check;
#[cfg(feature = "eth")]
#[path = "support/eth_params_check.rs"]
mod eth_params_check;
#[path = "support/exercise.rs"]
mod exercise;
#[path = "support/frame_check.rs"]
mod frame_check;
#[cfg(feature = "server")]
#[path = "support/fuzz_rpc.rs"]
mod fuzz_rpc;
#[cfg(feature = "http")]
#[path = "support/http_head_check.rs"]
mod http_head_check;
#[path = "support/oracle.rs"]
mod oracle;
#[cfg(feature = "async")]
#[path = "support/peer_check.rs"]
mod peer_check;
#[cfg(feature = "server")]
#[path = "support/stream_check.rs"]
mod stream_check;
#[cfg(feature = "ws")]
#[path = "support/ws_check.rs"]
mod ws_check;

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

#[cfg(feature = "eth")]
#[test]
fn eth_params_target_corpus() {
    for (name, input) in corpus("eth_params") {
        let r = std::panic::catch_unwind(|| eth_params_check::check(&input));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[test]
fn frame_target_corpus() {
    for (name, input) in corpus("frame") {
        let r = std::panic::catch_unwind(|| frame_check::check(&input));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[cfg(feature = "async")]
#[test]
fn peer_target_corpus() {
    let h = peer_check::Harness::new();
    for (name, input) in corpus("peer") {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            peer_check::check(&h, &input)
        }));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[cfg(feature = "server")]
#[test]
fn stream_target_corpus() {
    let d = stream_check::dispatchers();
    for (name, input) in corpus("stream") {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stream_check::check(&d, &input)
        }));
        assert!(r.is_ok(), "{name} fails");
    }
}

#[cfg(feature = "ws")]
#[test]
fn ws_target_corpus() {
    let d = ws_check::dispatchers();
    for (name, input) in corpus("ws") {
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ws_check::check(&d, &input)));
        assert!(r.is_ok(), "{name} fails");
    }
}

/// The frame target's check on generated streams (JSON-ish bytes with
/// newlines, LSP headers, escapes and brackets), so `cargo test` runs it
/// over many more inputs than the corpus holds.
#[test]
fn frame_check_on_generated_streams() {
    const PIECES: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b"\\",
        b"\\",
        b"\"",
        b"\"",
        b"\n",
        b"\r",
        b"\r\n",
        b" ",
        b"\t",
        br#"{"jsonrpc":"2.0","id":1,"method":"a","params":[1,"}"]}"#,
        br#"["\\",{"a":"\"]"}]"#,
        b"Content-Length: 2\r\n\r\n{}",
        b"content-length: 5\r\nContent-Type: x\r\n\r\n[1,2]",
        b"Content-Length: 99999999999\r\n\r\n",
        b"x",
        b"\xc3\xa9",
        b"0",
    ];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for case in 0..3000 {
        let mut data = vec![
            if case % 3 == 0 {
                0
            } else {
                0x80 | (next() % 64) as u8
            },
            next() as u8,
        ];
        for _ in 0..next() % 40 {
            data.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize]);
        }
        let r = std::panic::catch_unwind(|| frame_check::check(&data));
        assert!(
            r.is_ok(),
            "case {case}: {:?}",
            String::from_utf8_lossy(&data)
        );
    }
}

#[cfg(feature = "http")]
#[test]
fn http_head_target_corpus() {
    for (name, input) in corpus("http_head") {
        let r = std::panic::catch_unwind(|| http_head_check::check(&input));
        assert!(r.is_ok(), "{name} fails");
    }
}
