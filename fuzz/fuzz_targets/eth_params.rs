#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/eth_params_check.rs"]
mod eth_params_check;

fuzz_target!(|data: &[u8]| {
    eth_params_check::check(data);
});
