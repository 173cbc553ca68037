//! Accept/reject agrees with serde_json on every input, and for accepted
//! requests the method, id bytes and params bytes agree with what serde_json
//! reads.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/oracle.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| {
    oracle::check_agreement(&rpcwire::Parser::new(), data);
});
