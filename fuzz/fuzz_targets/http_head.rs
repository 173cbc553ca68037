//! Any bytes as the header fields of an HTTP/1.1 request head and of a
//! reply head: `read_plain_fields` leaves them to httparse or reads
//! exactly what httparse reads.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/http_head_check.rs"]
mod http_head_check;

fuzz_target!(|data: &[u8]| {
    http_head_check::check(data);
});
