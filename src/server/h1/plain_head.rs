//! The HTTP/1.1 heads clients and nodes send, read without httparse.
//!
//! Nearly every head this loop answers is written one way: `POST`, an
//! origin-form target, `HTTP/1.1`, then `Name: value` lines ending in CR LF.
//! [`read_plain_head`] reads exactly that shape in one pass (names and
//! values eight bytes a step) and gives up, returning `None`, at the first
//! byte of any other: a bare LF, a blank before a colon or at a value's
//! end, an empty value, a byte outside visible ASCII, more than
//! [`MAX_HEADERS`] fields, a head not yet whole. httparse then reads the
//! head from the start and decides as it always did. Whatever the plain
//! reader accepts, httparse reads the same way (the same length, the same
//! names and values in the same order): the tests hold it to that on every
//! byte at every position of real clients' heads, and the `http_head` fuzz
//! target on any bytes. [`read_plain_fields`] is its fields' part, public
//! for reply heads (the gateway's upstream client reads them with it).
//! Callgrind, the gateway under load: the request head with its fields'
//! reading 1,565 -> 991 instructions.

use super::MAX_HEADERS;

/// Bytes httparse takes in a header name (RFC 9110's `tchar`).
static TOKEN: [bool; 256] = byte_set(b"!#$%&'*+-.^_`|~");

/// Bytes a target may hold here ([`plain_target`](super::plain_target)'s
/// set: what `http::Uri` takes as it is).
static TARGET: [bool; 256] = byte_set(b"-._~!$&'()*+,;=:@/?%");

/// Letters, digits and `extra`.
const fn byte_set(extra: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut b = 0;
    while b < 256 {
        set[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        set[extra[i] as usize] = true;
        i += 1;
    }
    set
}

/// Reads a plain `POST` head at the front of `buf`, handing each field's
/// name and value (as httparse trims it) to `field` in order; returns the
/// head's length (up to and including its empty line), or `None` for a
/// head of any other shape or not yet whole, which httparse reads. Fields
/// handed over before a `None` are to be forgotten.
#[inline]
pub(in crate::server) fn read_plain_head<'b>(
    buf: &'b [u8],
    field: impl FnMut(&'b [u8], &'b [u8]),
) -> Option<usize> {
    const LINE_END: &[u8] = b" HTTP/1.1\r\n";
    if !buf.starts_with(b"POST /") {
        return None;
    }
    let target_start = 5;
    let mut pos = target_start + 1;
    while TARGET[usize::from(*buf.get(pos)?)] {
        pos += 1;
    }
    if pos - target_start >= usize::from(u16::MAX)
        || buf.get(pos..pos + LINE_END.len())? != LINE_END
    {
        return None;
    }
    read_plain_fields(buf, pos + LINE_END.len(), MAX_HEADERS, field)
}

/// Reads the header fields of an HTTP/1.1 head that start at `buf[start]`
/// (right after the start line's CR LF) when they are written the way
/// nearly every client, server and proxy writes them, in one pass: each
/// field `Name: value` with a CR LF, at most `max_fields`, then the empty
/// line. Hands each field's name and value to `field` in order and returns
/// where the head ends (after its empty line).
///
/// `None` at the first byte of any other shape (a bare LF, a blank before
/// the colon or at a value's end, an empty value, a byte outside visible
/// ASCII but tab, a continued line), with more fields, or when the head is
/// not all in `buf` yet: read it with httparse then, which decides as it
/// always did, and forget the fields handed over. On every head it reads,
/// it reads what httparse reads (the same end, names and values in the
/// same order; tested on every byte at every position of real heads); it
/// takes about half of httparse's instructions, a quarter on long values.
///
/// ```
/// use rpcwire::server::http::read_plain_fields;
///
/// let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 39\r\n\r\n{";
/// let mut fields = Vec::new();
/// let end = read_plain_fields(head, 17, 100, |name, value| fields.push((name, value)));
/// assert_eq!(end, Some(head.len() - 1));
/// assert_eq!(fields[1], (&b"content-length"[..], &b"39"[..]));
/// // Not whole yet (or any other shape): httparse's to read.
/// assert_eq!(read_plain_fields(&head[..40], 17, 100, |_, _| {}), None);
/// ```
#[inline]
pub fn read_plain_fields<'b>(
    buf: &'b [u8],
    start: usize,
    max_fields: usize,
    mut field: impl FnMut(&'b [u8], &'b [u8]),
) -> Option<usize> {
    let mut pos = start;
    let mut fields = 0;
    loop {
        if *buf.get(pos)? == b'\r' {
            return (*buf.get(pos + 1)? == b'\n').then_some(pos + 2);
        }
        let name_start = pos;
        pos += name_len(&buf[pos..]);
        if *buf.get(pos)? != b':' || pos == name_start {
            return None;
        }
        let name = &buf[name_start..pos];
        pos += 1;
        while matches!(*buf.get(pos)?, b' ' | b'\t') {
            pos += 1;
        }
        let value_start = pos;
        let end = value_end(buf, pos)?;
        let value = &buf[value_start..end];
        // An empty value, or blanks httparse would trim: its reading.
        if matches!(value.last(), None | Some(b' ' | b'\t')) {
            return None;
        }
        fields += 1;
        if fields > max_fields {
            return None;
        }
        field(name, value);
        pos = end + 2;
    }
}

/// The length of the run of name bytes (RFC 9110's `tchar`) that `bytes`
/// starts with. Letters, digits and `-` (every name clients send) eight
/// bytes a step, the table for the rest: a byte at a time, the names of a
/// head took as many instructions as httparse's whole reading of it.
#[inline]
fn name_len(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Bytes of `x` (each below 0x80) from `lo` to `hi`: their top bits. No
    // sum carries into the next byte.
    let within = |x: u64, lo: u8, hi: u8| {
        (x + ONES * u64::from(0x80 - lo)) & !(x + ONES * u64::from(0x7f - hi)) & HIGH
    };
    let mut n = 0;
    while let Some(chunk) = bytes.get(n..n + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let low = x & !HIGH;
        let common = within(low | (ONES * 0x20), b'a', b'z')
            | within(low, b'0', b'9')
            | within(low, b'-', b'-');
        let stops = (!common | x) & HIGH;
        if stops != 0 {
            n += (stops.trailing_zeros() / 8) as usize;
            break;
        }
        n += 8;
    }
    n + bytes[n..]
        .iter()
        .position(|&b| !TOKEN[usize::from(b)])
        .unwrap_or(bytes.len() - n)
}

/// The index of the CR LF that ends the value starting at `pos`, if every
/// byte before it is visible ASCII, a space or a tab.
#[inline]
fn value_end(buf: &[u8], mut pos: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    loop {
        // Eight bytes a step: the first byte below 0x20 (CR, tab, other
        // controls), 0x7f, or from 0x80. A borrow only runs from a flagged
        // byte upwards, so the lowest flag is exact.
        while let Some(chunk) = buf.get(pos..pos + 8) {
            let x = u64::from_le_bytes(chunk.try_into().unwrap());
            let controls = x.wrapping_sub(ONES * 0x20) & !x;
            let del = x ^ (ONES * 0x7f);
            let del = del.wrapping_sub(ONES) & !del;
            let stops = (controls | del | x) & HIGH;
            if stops != 0 {
                pos += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            pos += 8;
        }
        while let Some(&b) = buf.get(pos) {
            if !(b' '..0x7f).contains(&b) {
                break;
            }
            pos += 1;
        }
        match *buf.get(pos)? {
            b'\t' => pos += 1,
            b'\r' => return (*buf.get(pos + 1)? == b'\n').then_some(pos),
            _ => return None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    /// httparse's reading of `buf` when it is complete: its length and its
    /// fields, if the request line is `POST`, a plain target, `HTTP/1.1`.
    /// A head's length and its fields.
    type Reading = Option<(usize, Vec<(Vec<u8>, Vec<u8>)>)>;

    fn httparse_reading(buf: &[u8]) -> Reading {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let Ok(httparse::Status::Complete(len)) = req.parse_with_uninit_headers(buf, &mut fields)
        else {
            return None;
        };
        if req.method != Some("POST")
            || req.version != Some(1)
            || !super::super::plain_target(req.path)
        {
            return None;
        }
        let fields = req
            .headers
            .iter()
            .map(|f| (f.name.as_bytes().to_vec(), f.value.to_vec()));
        Some((len, fields.collect()))
    }

    fn plain_reading(buf: &[u8]) -> Reading {
        let mut fields = Vec::new();
        let len = read_plain_head(buf, |n, v| fields.push((n.to_vec(), v.to_vec())))?;
        Some((len, fields))
    }

    /// Heads as clients write them: wrk, curl, viem and ethers (undici's
    /// fetch), web3.py (requests), alloy and cast (reqwest/hyper).
    pub(in crate::server::h1) const HEADS: [&str; 5] = [
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:8545\r\nContent-Type: application/json\r\nContent-Length: 119\r\n\r\n",
        "POST /rpc?key=a1b2 HTTP/1.1\r\nHost: localhost:8545\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nContent-Type: application/json\r\nContent-Length: 66\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: 127.0.0.1:8545\r\nconnection: keep-alive\r\ncontent-type: application/json\r\naccept: */*\r\naccept-language: *\r\nsec-fetch-mode: cors\r\nuser-agent: node\r\naccept-encoding: gzip, deflate\r\ncontent-length: 72\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:8545\r\nUser-Agent: web3.py/7.6.0/web3.providers.rpc.rpc.HTTPProvider\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: 69\r\n\r\n",
        "POST / HTTP/1.1\r\ncontent-type: application/json\r\naccept: */*\r\nhost: 127.0.0.1:8545\r\ncontent-length: 71\r\n\r\n",
    ];

    /// Whatever the plain reader takes, httparse reads alike.
    fn check(buf: &[u8]) -> bool {
        let plain = plain_reading(buf);
        if plain.is_some() {
            assert_eq!(
                plain,
                httparse_reading(buf),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
        plain.is_some()
    }

    #[test]
    fn real_heads_are_read_as_httparse_reads_them() {
        for head in HEADS {
            let mut with_body = head.as_bytes().to_vec();
            with_body.extend_from_slice(b"{\"jsonrpc\":\"2.0\"}");
            assert!(check(head.as_bytes()), "{head:?}");
            assert!(check(&with_body), "{head:?}");
            assert_eq!(plain_reading(&with_body).unwrap().0, head.len());
        }
    }

    #[test]
    fn every_byte_at_every_position_is_read_as_httparse_reads_it_or_left_to_it() {
        let mut taken = 0;
        for head in HEADS {
            let head = head.as_bytes();
            for at in 0..head.len() {
                for b in 0..=255u8 {
                    let mut replaced = head.to_vec();
                    replaced[at] = b;
                    taken += usize::from(check(&replaced));
                    let mut inserted = head.to_vec();
                    inserted.insert(at, b);
                    taken += usize::from(check(&inserted));
                }
                let mut removed = head.to_vec();
                removed.remove(at);
                check(&removed);
                // A head cut short is never taken (httparse: partial).
                assert!(!check(&head[..at]), "{at}");
            }
        }
        // Most changes inside a name or a value keep the head plain: the
        // reader is really taking the variants it should.
        assert!(taken > 50_000, "{taken}");
    }

    #[test]
    fn heads_changed_in_several_places_are_read_as_httparse_reads_them() {
        // Two to five changes at once (the single ones are above), bytes
        // drawn mostly from those the readers decide on.
        const DECIDING: &[u8] = b" \t\r\n:/-_aZ09\x00\x7f\x80\xff";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let mut taken = 0;
        for _ in 0..40_000 {
            let mut head = HEADS[next(HEADS.len())].as_bytes().to_vec();
            for _ in 0..2 + next(4) {
                let at = next(head.len());
                let byte = if next(4) == 0 {
                    next(256) as u8
                } else {
                    DECIDING[next(DECIDING.len())]
                };
                match next(3) {
                    0 => head[at] = byte,
                    1 => head.insert(at, byte),
                    _ => {
                        head.remove(at);
                    }
                }
            }
            taken += usize::from(check(&head));
        }
        assert!(taken > 4_000, "{taken}");
    }

    #[test]
    fn heads_of_other_shapes_are_left_to_httparse() {
        for other in [
            // Bare LF, obs-fold, blanks httparse trims, an empty value.
            "POST / HTTP/1.1\nHost: x\n\n",
            "POST / HTTP/1.1\r\nHost: x\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\n\r",
            "POST / HTTP/1.1\r\nX-A: a\r\n b\r\nHost: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x \r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\t\r\n\r\n",
            "POST / HTTP/1.1\r\nX-Empty:\r\nHost: x\r\n\r\n",
            "POST / HTTP/1.1\r\nX-Empty:  \r\nHost: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost : x\r\n\r\n",
            "POST / HTTP/1.1\r\n: x\r\n\r\n",
            "POST / HTTP/1.1\r\nX-Utf8: caf\u{e9}\r\n\r\n",
            "POST / HTTP/1.1\r\nX-Del: a\x7fb\r\n\r\n",
            // Request lines httparse reads and the loop does not answer.
            "POST * HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /a#b HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST / HTTP/1.0\r\nHost: x\r\n\r\n",
            "POST  / HTTP/1.1\r\nHost: x\r\n\r\n",
            "\r\nPOST / HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            assert_eq!(plain_reading(other.as_bytes()), None, "{other:?}");
        }
        // Tabs inside a value, and the most fields httparse keeps here.
        assert!(check(b"POST / HTTP/1.1\r\nX-Tab: a\tb\r\n\r\n"));
        let mut many = String::from("POST / HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS {
            many += &format!("X-{i}: {i}\r\n");
        }
        assert!(check(format!("{many}\r\n").as_bytes()));
        assert_eq!(
            plain_reading(format!("{many}X-Last: 1\r\n\r\n").as_bytes()),
            None
        );
        // A value of every length around the eight-byte steps.
        for len in 1..40 {
            let head = format!("POST / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "v".repeat(len));
            assert!(check(head.as_bytes()), "{len}");
        }
    }
}
