//! The `frame` fuzz target's check, shared with `tests/fuzz_corpus.rs`: any
//! bytes, fed to each framer in chunks whose sizes come from the input, give
//! the events a byte-by-byte model of the framing gives on the whole input
//! (newline-delimited and concatenated JSON), or the events of a whole feed
//! (LSP, whose model is the framer's own one-piece path), and every step
//! keeps the calling contract. The concatenated framer's SIMD structural
//! scan and the newline search run on everything received, so this covers
//! their kernels on any input, split anywhere.
//!
//! Input layout: byte 0 picks the size limit (small limits reach the
//! over-limit paths), byte 1 seeds the chunk sizes, the rest is the stream.

use rpcwire::frame::{Concatenated, FrameError, Framer, Lines, Lsp, Step};

/// What a transport sees, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Frame(Vec<u8>),
    /// A refused message: its error's code and stream offset.
    Garbage(i32, u64),
    /// The stream is over: the error's code and stream offset.
    Close(i32, u64),
}

fn error_event(close: bool, error: &FrameError) -> Event {
    if close {
        Event::Close(error.code(), error.offset())
    } else {
        Event::Garbage(error.code(), error.offset())
    }
}

/// Chunk sizes from a seed: runs of small and larger pieces (1 to 80
/// bytes), so that chunk ends land inside every kind of token and across
/// the kernels' 16-, 32- and 64-byte blocks.
fn chunks(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut state = 0x9E37_79B9_u32 ^ (seed as u32) << 8 ^ stream.len() as u32;
    let mut out = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = match seed % 4 {
            0 => 1,
            1 => 1 + (state % 8) as usize,
            _ => 1 + (state % 80) as usize,
        };
        let end = (at + size).min(stream.len());
        out.push(&stream[at..end]);
        at = end;
    }
    out
}

/// Feeds `chunks` as a transport does, checking the contract on each step:
/// `consumed` within `buf`, a frame inside what it consumes, garbage that
/// consumes something, and `Close` repeated once given.
pub fn feed<'a, F: Framer>(
    framer: &mut F,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut buf = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            let here = &buf[at..];
            let step = framer.next_frame(here);
            assert!(step.consumed() <= here.len(), "{step:?} of {}", here.len());
            match &step {
                Step::Frame { range, consumed } => {
                    assert!(
                        range.start <= range.end && range.end <= *consumed,
                        "{step:?}"
                    );
                    events.push(Event::Frame(here[range.clone()].to_vec()));
                }
                Step::Garbage { consumed, error } => {
                    assert!(*consumed > 0, "{step:?}");
                    events.push(error_event(false, error));
                }
                Step::NeedMore { .. } => {}
                Step::Close(error) => {
                    assert_eq!(framer.next_frame(here), step, "Close is final");
                    events.push(error_event(true, error));
                    return events;
                }
            }
            at += step.consumed();
            if let Step::NeedMore { .. } = step {
                break;
            }
        }
        buf.drain(..at);
    }
    events
}

/// Newline-delimited framing, byte by byte: each line (one `\r` before its
/// `\n` stripped) over the limit is refused, blank lines (spaces, tabs,
/// `\r`) are skipped, the rest are frames; an unfinished line over the
/// limit (a final `\r` not counted) is refused at once.
pub fn lines_model(stream: &[u8], limit: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let mut start = 0;
    for (i, _) in stream.iter().enumerate().filter(|&(_, &b)| b == b'\n') {
        let mut line = &stream[start..i];
        if let Some(rest) = line.strip_suffix(b"\r") {
            line = rest;
        }
        if line.len() > limit {
            events.push(Event::Garbage(-32600, start as u64));
        } else if !line.iter().all(|&b| matches!(b, b' ' | b'\t' | b'\r')) {
            events.push(Event::Frame(line.to_vec()));
        }
        start = i + 1;
    }
    let tail = &stream[start..];
    if tail.len() - tail.ends_with(b"\r") as usize > limit {
        events.push(Event::Garbage(-32600, start as u64));
    }
    events
}

/// Concatenated JSON, byte by byte: after JSON whitespace a value starts
/// with `{` or `[` (anything else closes the stream, -32700); it ends when
/// its brackets (of any kind, counted outside strings, a backslash
/// escaping the next byte) close; one longer than the limit is refused,
/// at once if it has not ended yet.
pub fn concatenated_model(stream: &[u8], limit: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let mut at = 0;
    loop {
        while at < stream.len() && matches!(stream[at], b' ' | b'\t' | b'\n' | b'\r') {
            at += 1;
        }
        let Some(&first) = stream.get(at) else {
            return events;
        };
        if first != b'{' && first != b'[' {
            events.push(Event::Close(-32700, at as u64));
            return events;
        }
        let start = at;
        let (mut depth, mut in_string, mut escape) = (0u64, false, false);
        let mut end = None;
        while at < stream.len() {
            let b = stream[at];
            at += 1;
            if escape {
                escape = false;
            } else if b == b'\\' {
                escape = true;
            } else if b == b'"' {
                in_string = !in_string;
            } else if !in_string && (b == b'{' || b == b'[') {
                depth += 1;
            } else if !in_string && (b == b'}' || b == b']') {
                depth -= 1;
                if depth == 0 {
                    end = Some(at);
                    break;
                }
            }
        }
        match end {
            Some(end) if end - start > limit => events.push(Event::Garbage(-32600, start as u64)),
            Some(end) => events.push(Event::Frame(stream[start..end].to_vec())),
            None => {
                if stream.len() - start > limit {
                    events.push(Event::Garbage(-32600, start as u64));
                }
                return events;
            }
        }
    }
}

/// The whole check on one fuzz input.
pub fn check(data: &[u8]) {
    let [limit_byte, seed, stream @ ..] = data else {
        return;
    };
    let limit = if limit_byte & 0x80 != 0 {
        (limit_byte & 0x7f) as usize + 1
    } else {
        rpcwire::frame::DEFAULT_MAX_FRAME
    };
    let pieces = chunks(stream, *seed);

    let got = feed(&mut Lines::new().max_frame(limit), pieces.iter().copied());
    assert_eq!(got, lines_model(stream, limit), "lines, limit {limit}");

    let got = feed(
        &mut Concatenated::new().max_frame(limit),
        pieces.iter().copied(),
    );
    assert_eq!(
        got,
        concatenated_model(stream, limit),
        "concatenated, limit {limit}"
    );

    let lsp = || Lsp::new().max_frame(limit).max_header(limit.max(32) * 2);
    let whole = feed(&mut lsp(), [stream]);
    assert_eq!(
        feed(&mut lsp(), pieces.iter().copied()),
        whole,
        "lsp, limit {limit}"
    );
    assert_eq!(
        feed(&mut lsp(), stream.chunks(1)),
        whole,
        "lsp byte by byte, limit {limit}"
    );
}
