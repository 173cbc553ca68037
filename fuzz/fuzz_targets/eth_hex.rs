//! Any bytes as a DATA string: the `eth` readers (the inlined SSE2 decoder
//! for addresses and hashes, the AVX2 one for longer data where the CPU has
//! it, const-hex elsewhere) agree with a digit-by-digit reference.
//! Each input runs with the AVX2 kernels and again without them
//! (`common/kernels.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/kernels.rs"]
mod kernels;

#[path = "../../tests/support/eth_hex_check.rs"]
mod eth_hex_check;

fuzz_target!(|data: &[u8]| {
    kernels::with_and_without_runtime_simd(|| eth_hex_check::check(data));
});
