//! Any bytes, split into chunks chosen by the input, through the three
//! framers: the events agree with byte-by-byte models of newline-delimited
//! and concatenated JSON framing (and, for LSP, with the events of the whole
//! input fed at once), and each step keeps the calling contract. Covers the
//! SIMD structural scan and newline search on any input, cut anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/frame_check.rs"]
mod frame_check;

fuzz_target!(|data: &[u8]| {
    frame_check::check(data);
});
