//! Any input through the dispatcher: no panic, and either no reply or one
//! valid JSON-RPC 2.0 reply.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/dispatch_check.rs"]
mod dispatch_check;

thread_local! {
    static DISPATCHER: rpcwire::Dispatcher<()> = dispatch_check::dispatcher();
}

fuzz_target!(|data: &[u8]| {
    DISPATCHER.with(|d| dispatch_check::check(d, data));
});
