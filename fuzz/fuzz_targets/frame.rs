//! Any bytes, split into chunks chosen by the input, through the three
//! framers: the events agree with byte-by-byte models of newline-delimited
//! and concatenated JSON framing (and, for LSP, with the events of the whole
//! input fed at once), and each step keeps the calling contract. Covers the
//! SIMD structural scan and newline search on any input, cut anywhere.
//! Each input runs with the AVX2 kernels and again without them
//! (`common/kernels.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/kernels.rs"]
mod kernels;

#[path = "../../tests/support/frame_check.rs"]
mod frame_check;

fuzz_target!(|data: &[u8]| {
    kernels::with_and_without_runtime_simd(|| frame_check::check(data));
});
