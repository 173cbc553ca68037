//! Any bytes as a request's params through the `eth` layer's fused and
//! general readers, which must agree (`tests/support/eth_params_check.rs`).
//! Each input runs with the AVX2 kernels and again without them
//! (`common/kernels.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/kernels.rs"]
mod kernels;

#[path = "../../tests/support/eth_params_check.rs"]
mod eth_params_check;

fuzz_target!(|data: &[u8]| {
    kernels::with_and_without_runtime_simd(|| eth_params_check::check(data));
});
