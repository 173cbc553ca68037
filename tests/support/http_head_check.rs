// Shared by the `http_head` fuzz target and `tests/fuzz_corpus.rs`: any
// bytes as the header fields of a request and of a reply head;
// `read_plain_fields` either leaves them to httparse (`None`) or reads
// exactly what httparse reads (the same end, names and values in order).

use std::mem::MaybeUninit;

use rpcwire::server::http::read_plain_fields;

/// A head's length and its fields.
type Reading = (usize, Vec<(Vec<u8>, Vec<u8>)>);

pub fn check(fields: &[u8]) {
    for (start_line, max) in [
        (&b"POST / HTTP/1.1\r\n"[..], 32),
        (b"HTTP/1.1 200 OK\r\n", 100),
    ] {
        let mut head = start_line.to_vec();
        head.extend_from_slice(fields);
        let mut plain = Vec::new();
        let Some(end) = read_plain_fields(&head, start_line.len(), max, |n, v| {
            plain.push((n.to_vec(), v.to_vec()))
        }) else {
            continue;
        };
        assert!(plain.len() <= max);
        let theirs = if start_line.starts_with(b"POST") {
            httparse_request(&head)
        } else {
            httparse_response(&head)
        };
        assert_eq!(
            Some((end, plain)),
            theirs,
            "{:?}",
            String::from_utf8_lossy(&head)
        );
    }
}

fn httparse_request(head: &[u8]) -> Option<Reading> {
    let mut slots = [const { MaybeUninit::uninit() }; 32];
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut slots) {
        Ok(httparse::Status::Complete(len)) => Some((len, fields(req.headers))),
        _ => None,
    }
}

fn httparse_response(head: &[u8]) -> Option<Reading> {
    let mut slots = [const { MaybeUninit::uninit() }; 100];
    let mut res = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, head, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => Some((len, fields(res.headers))),
        _ => None,
    }
}

fn fields(headers: &[httparse::Header<'_>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    headers
        .iter()
        .map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec()))
        .collect()
}
