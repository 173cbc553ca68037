//! Any byte stream, read in reads of sizes the input chooses, through the
//! stream transports' `Driver` with each framer: the one-pass path for
//! concatenated JSON answers exactly as the framer-first path, other
//! framers answer alike however the reads cut the stream, every reply is
//! framed and valid JSON-RPC 2.0, the driver returns, and its buffers stay
//! within their limits. See `tests/support/stream_check.rs` for how the
//! input is decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/fuzz_rpc.rs"]
mod fuzz_rpc;
#[path = "../../tests/support/stream_check.rs"]
mod stream_check;

thread_local! {
    static DISPATCHERS: stream_check::Dispatchers = stream_check::dispatchers();
}

fuzz_target!(|data: &[u8]| {
    DISPATCHERS.with(|d| stream_check::check(d, data));
});
