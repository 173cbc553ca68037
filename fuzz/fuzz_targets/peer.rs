//! A two-way connection driven by a script of operations: this side's peer
//! sends requests and notifications, the other side sends responses,
//! requests, batches, cancellations and garbage, time passes on a paused
//! clock, request futures are dropped, the peer closes. Checks that nothing
//! panics, every message written is valid JSON-RPC 2.0, responses are matched
//! exactly when pending and never answered, each request is answered once,
//! every outbound request completes once and nothing is left pending after
//! the close (see `tests/support/peer_check.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/peer_check.rs"]
mod peer_check;

thread_local! {
    static HARNESS: peer_check::Harness = peer_check::Harness::new();
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| peer_check::check(h, data));
});
