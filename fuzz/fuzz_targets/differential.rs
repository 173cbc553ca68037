//! Accept/reject agrees with serde_json on every input, and for accepted
//! requests the method, id bytes and params bytes agree with what serde_json
//! reads.
//! Each input runs with the AVX2 kernels and again without them
//! (`common/kernels.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/kernels.rs"]
mod kernels;

#[path = "../../tests/support/oracle.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| {
    kernels::with_and_without_runtime_simd(|| {
        oracle::check_agreement(&rpcwire::Parser::new(), data)
    });
});
