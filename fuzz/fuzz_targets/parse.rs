//! Any input: no panic, and every view the parser hands out stays within the
//! input and reads as valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/exercise.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| {
    exercise::exercise(data);
});
