//! Any sequence of client frames (text, binary, fragmented, pings, pongs,
//! a close, protocol errors), read in reads of sizes the input chooses,
//! through the WebSocket transport's driver (`WsServer::serve_connection`):
//! every frame the server writes is well formed, every text message is a
//! JSON-RPC 2.0 reply or a message to the client, the close code matches
//! why the connection ended, nothing starts after a shutdown, and the
//! connection ends and answers alike however the reads cut the stream.
//! See `tests/support/ws_check.rs` for how the input is decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/fuzz_rpc.rs"]
mod fuzz_rpc;
#[path = "../../tests/support/ws_check.rs"]
mod ws_check;

thread_local! {
    static DISPATCHERS: ws_check::Dispatchers = ws_check::dispatchers();
}

fuzz_target!(|data: &[u8]| {
    DISPATCHERS.with(|d| ws_check::check(d, data));
});
