//! The LSP base protocol: `Content-Length` headers, then the body.

use memchr::memchr;

use super::error::{FrameError, Kind};
use super::{DEFAULT_MAX_FRAME, Framer, Step};

/// The Language Server Protocol's base protocol (also the Debug Adapter
/// Protocol's): header lines `Name: value\r\n`, a blank line `\r\n`, then
/// exactly `Content-Length` bytes of body, which is the message.
///
/// Header names are compared without regard to case; headers other than
/// `Content-Length` (`Content-Type`, say) are checked for form and ignored.
/// Every line must end in `\r\n`. The framer refuses, with
/// [`Step::Close`] and a -32700 error, a header section without
/// `Content-Length`, a value that is not a decimal integer, two
/// `Content-Length` headers that disagree, a line that is not
/// `Name: value`, and a message that starts with `{` or `[` (JSON sent
/// without headers, as a client framing with newlines sends it: refused at
/// that first byte, its reason naming the framing expected). These leave
/// no trustworthy way to find the next message.
///
/// Limits, both checked before anything is buffered:
///
/// * the header section ([`max_header`](Lsp::max_header), default 8 KiB):
///   past it, [`Step::Close`] (-32600);
/// * the body ([`max_frame`](Lsp::max_frame), default 5 MiB): a larger
///   `Content-Length` is refused as soon as its header section ends, before
///   any body byte. If the declared length is at most
///   [`max_skip`](Lsp::max_skip) (default 64 MiB) the message is
///   [`Step::Garbage`] (-32600): its body is then dropped as it arrives,
///   never buffered, and the stream continues with the next message. A
///   larger one (`Content-Length: 99999999999`) is [`Step::Close`]: the
///   peer is broken or hostile, and following it would mean reading
///   gigabytes only to throw them away.
///
/// ```
/// use rpcwire::frame::{Framer, Lsp, Step};
///
/// let mut lsp = Lsp::new();
/// let buf = b"content-length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}";
/// assert_eq!(lsp.next_frame(&buf[..60]), Step::NeedMore { consumed: 0 });
/// assert_eq!(lsp.next_frame(buf), Step::Frame { range: 78..80, consumed: 80 });
///
/// let mut out = Vec::new();
/// lsp.encode(b"{}", &mut out);
/// assert_eq!(out, b"Content-Length: 2\r\n\r\n{}");
/// ```
#[derive(Clone, Debug)]
pub struct Lsp {
    state: State,
    /// A framing error was found: the stream is over.
    closed: Option<FrameError>,
    /// The largest body accepted.
    max_frame: usize,
    /// The largest header section accepted, its blank line included.
    max_header: usize,
    /// The largest over-limit body dropped to stay in sync.
    max_skip: u64,
    /// Bytes consumed since creation or reset: turns positions in `buf`
    /// into stream offsets for errors.
    stream: u64,
    /// Bytes examined, for the test that the scan is linear.
    #[cfg(test)]
    pub(super) examined: usize,
}

/// Where the framer is in the current message. Positions are indices into
/// `buf`, whose front is always the start of the current message (every
/// step consumes up to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading the header section.
    Header {
        /// Where the first header line not yet read starts.
        line: usize,
        /// Where the search for that line's `\n` resumes.
        scan: usize,
        /// The `Content-Length` read so far.
        length: Option<u64>,
    },
    /// The header section is read: the body follows it.
    Body {
        /// Where the body starts: the header section's length.
        start: usize,
        /// The body's length.
        len: usize,
    },
    /// Dropping the body of a refused message.
    Skip {
        /// Bytes still to drop.
        remaining: u64,
    },
}

const NEW_MESSAGE: State = State::Header {
    line: 0,
    scan: 0,
    length: None,
};

impl Default for Lsp {
    fn default() -> Self {
        Lsp::new()
    }
}

impl Lsp {
    /// Default header section limit: 8 KiB, as most HTTP servers. An LSP
    /// header section is two short lines.
    pub const DEFAULT_MAX_HEADER: usize = 8 * 1024;
    /// Default for [`max_skip`](Lsp::max_skip): 64 MiB.
    pub const DEFAULT_MAX_SKIP: u64 = 64 * 1024 * 1024;

    /// A framer with the default limits.
    pub const fn new() -> Self {
        Lsp {
            state: NEW_MESSAGE,
            closed: None,
            max_frame: DEFAULT_MAX_FRAME,
            max_header: Self::DEFAULT_MAX_HEADER,
            max_skip: Self::DEFAULT_MAX_SKIP,
            stream: 0,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// The largest body accepted, in bytes (default 5 MiB).
    ///
    /// Why: the declared length decides how much the transport buffers; this
    /// bounds it before the body arrives.
    pub const fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes;
        self
    }

    /// The largest header section accepted, in bytes, its final blank line
    /// included (default 8 KiB).
    ///
    /// Why: a peer that never sends the blank line (or sends endless
    /// headers) would otherwise make the transport buffer without bound.
    pub const fn max_header(mut self, bytes: usize) -> Self {
        self.max_header = bytes;
        self
    }

    /// The largest declared body, beyond [`max_frame`](Lsp::max_frame), that
    /// is refused and dropped (so the stream carries on) rather than closing
    /// the stream (default 64 MiB; 0 closes on every over-limit body).
    ///
    /// Why: dropping costs reading every byte; an absurd length is not worth
    /// following.
    pub const fn max_skip(mut self, bytes: u64) -> Self {
        self.max_skip = bytes;
        self
    }

    /// The configured body size limit.
    pub const fn frame_limit(&self) -> usize {
        self.max_frame
    }

    /// The configured header section limit.
    pub const fn header_limit(&self) -> usize {
        self.max_header
    }

    #[inline]
    fn step(&mut self, step: Step) -> Step {
        self.stream += step.consumed() as u64;
        step
    }

    #[cold]
    fn close(&mut self, kind: Kind, at: usize) -> Step {
        let error = FrameError::new(kind, self.stream + at as u64);
        self.closed = Some(error);
        Step::Close(error)
    }
}

/// RFC 9110 `tchar`: the bytes of a header name.
#[inline]
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Reads one header line (its `\r\n` removed): `Ok(Some(n))` for a
/// `Content-Length`, `Ok(None)` for any other well-formed header.
fn header_line(line: &[u8]) -> Result<Option<u64>, Kind> {
    let colon = memchr(b':', line).ok_or(Kind::MalformedHeader)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty()
        || !name.iter().all(|&b| is_token(b))
        || value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(Kind::MalformedHeader);
    }
    if !name.eq_ignore_ascii_case(b"content-length") {
        return Ok(None);
    }
    let value = value.trim_ascii();
    if value.is_empty() {
        return Err(Kind::InvalidLength);
    }
    let mut n = 0u64;
    for &b in value {
        if !b.is_ascii_digit() {
            return Err(Kind::InvalidLength);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add((b - b'0') as u64))
            .ok_or(Kind::InvalidLength)?;
    }
    Ok(Some(n))
}

impl Framer for Lsp {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        if let Some(error) = self.closed {
            return Step::Close(error);
        }
        // Where the current message starts: zero, unless the end of a
        // skipped body was in this `buf`.
        let mut base = 0;
        loop {
            match self.state {
                State::Skip { remaining } => {
                    let here = (buf.len() - base) as u64;
                    if remaining > here {
                        self.state = State::Skip {
                            remaining: remaining - here,
                        };
                        return self.step(Step::NeedMore {
                            consumed: buf.len(),
                        });
                    }
                    base += remaining as usize;
                    self.state = NEW_MESSAGE;
                }
                State::Header {
                    mut line,
                    mut scan,
                    mut length,
                } => {
                    let msg = &buf[base..];
                    // Only a caller that breaks the contract gives a shorter
                    // `buf`; nothing may index out of bounds even then.
                    scan = scan.min(msg.len());
                    line = line.min(scan);
                    // No header name starts with `{` or `[`: this is JSON
                    // framed otherwise (newlines, most often), and saying
                    // so tells the other side what to fix, at its first
                    // byte rather than after a line (which may never end).
                    if line == 0 && matches!(msg.first(), Some(b'{' | b'[')) {
                        return self.close(Kind::MissingHeaders, base);
                    }
                    loop {
                        let Some(i) = memchr(b'\n', &msg[scan..]) else {
                            #[cfg(test)]
                            {
                                self.examined += msg.len() - scan;
                            }
                            if msg.len() > self.max_header {
                                let limit = self.max_header;
                                return self.close(Kind::HeaderTooLarge { limit }, base);
                            }
                            self.state = State::Header {
                                line,
                                scan: msg.len(),
                                length,
                            };
                            return self.step(Step::NeedMore { consumed: base });
                        };
                        #[cfg(test)]
                        {
                            self.examined += i + 1;
                        }
                        let newline = scan + i;
                        scan = newline + 1;
                        if scan > self.max_header {
                            let limit = self.max_header;
                            return self.close(Kind::HeaderTooLarge { limit }, base);
                        }
                        let Some(text) = msg[line..newline].strip_suffix(b"\r") else {
                            return self.close(Kind::MalformedHeader, base + line);
                        };
                        if text.is_empty() {
                            break;
                        }
                        match header_line(text) {
                            Ok(None) => {}
                            Ok(Some(n)) => match length {
                                Some(m) if m != n => {
                                    return self.close(Kind::ConflictingLength, base + line);
                                }
                                _ => length = Some(n),
                            },
                            Err(kind) => return self.close(kind, base + line),
                        }
                        line = scan;
                    }
                    // The blank line: the header section ends at `scan`.
                    let Some(len) = length else {
                        return self.close(Kind::MissingLength, base);
                    };
                    if len > self.max_frame as u64 {
                        let kind = Kind::TooLarge {
                            limit: self.max_frame,
                        };
                        if len > self.max_skip {
                            return self.close(kind, base);
                        }
                        let error = FrameError::new(kind, self.stream + base as u64);
                        // Drop the header section and whatever part of the
                        // body is here; the rest later.
                        let here = len.min((msg.len() - scan) as u64);
                        self.state = if here == len {
                            NEW_MESSAGE
                        } else {
                            State::Skip {
                                remaining: len - here,
                            }
                        };
                        return self.step(Step::Garbage {
                            consumed: base + scan + here as usize,
                            error,
                        });
                    }
                    self.state = State::Body {
                        start: scan,
                        len: len as usize,
                    };
                }
                State::Body { start, len } => {
                    // Saturating: with `max_frame(usize::MAX)` a declared
                    // length near 2^64 must wait for its body, not wrap.
                    let end = (base + start).saturating_add(len);
                    if buf.len() < end {
                        return self.step(Step::NeedMore { consumed: base });
                    }
                    self.state = NEW_MESSAGE;
                    return self.step(Step::Frame {
                        range: base + start..end,
                        consumed: end,
                    });
                }
            }
        }
    }

    /// Appends `Content-Length: N\r\n\r\n` and `message`.
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        out.reserve(message.len() + 24);
        out.extend_from_slice(b"Content-Length: ");
        super::error::push_decimal(out, message.len() as u64);
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(message);
    }

    fn reset(&mut self) {
        *self = Lsp::new()
            .max_frame(self.max_frame)
            .max_header(self.max_header)
            .max_skip(self.max_skip);
    }

    /// Always `None`: a frame ends where its `Content-Length` says, so bytes
    /// left at the end of the input are a frame cut short.
    fn finish(&mut self, _buf: &[u8]) -> Option<core::ops::Range<usize>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::{Outcome, feed_whole, run};

    fn closed_with(input: &[u8]) -> FrameError {
        for chunk in [1, 2, 7, input.len().max(1)] {
            let out = run(&mut Lsp::new(), input, chunk);
            assert!(
                out.closed.is_some(),
                "{:?}: {out:?}",
                String::from_utf8_lossy(input)
            );
        }
        feed_whole(&mut Lsp::new(), input).closed.unwrap()
    }

    #[test]
    fn headers_case_and_order_and_other_headers() {
        for input in [
            &b"Content-Length: 2\r\n\r\n{}"[..],
            b"content-length:2\r\n\r\n{}",
            b"CONTENT-LENGTH: \t2 \t\r\n\r\n{}",
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
            b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            b"Content-Length: 002\r\nX-Empty:\r\nX-Utf8: \xc3\xa9\r\n\r\n{}",
        ] {
            let out = feed_whole(&mut Lsp::new(), input);
            assert_eq!(
                out.events,
                vec![Outcome::Frame(b"{}".to_vec())],
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(out.left, 0);
        }
    }

    #[test]
    fn zero_length_body_is_an_empty_frame() {
        let out = feed_whole(
            &mut Lsp::new(),
            b"Content-Length: 0\r\n\r\nContent-Length: 2\r\n\r\n[]",
        );
        assert_eq!(
            out.events,
            vec![Outcome::Frame(vec![]), Outcome::Frame(b"[]".to_vec())]
        );
    }

    #[test]
    fn malformed_headers_close() {
        // (input, error kind, stream offset)
        let table: &[(&[u8], Kind, u64)] = &[
            (b"\r\n{}", Kind::MissingLength, 0),
            (b"Content-Type: x\r\n\r\n{}", Kind::MissingLength, 0),
            (b"Content-Length: 2\n\n{}", Kind::MalformedHeader, 0),
            (b"Content-Length: 2\r\n\n{}", Kind::MalformedHeader, 19),
            (b"Content-Length 2\r\n\r\n{}", Kind::MalformedHeader, 0),
            (b"Content-Length : 2\r\n\r\n{}", Kind::MalformedHeader, 0),
            (b" Content-Length: 2\r\n\r\n{}", Kind::MalformedHeader, 0),
            (b": 2\r\n\r\n{}", Kind::MalformedHeader, 0),
            (
                b"X: a\rb\r\nContent-Length: 2\r\n\r\n{}",
                Kind::MalformedHeader,
                0,
            ),
            (b"X: a\x00\r\n\r\n", Kind::MalformedHeader, 0),
            (b"{\"jsonrpc\":\"2.0\"}\r\n", Kind::MissingHeaders, 0),
            (b"[{\"jsonrpc\":\"2.0\"}", Kind::MissingHeaders, 0),
            (b"Content-Length:\r\n\r\n", Kind::InvalidLength, 0),
            (b"Content-Length: -2\r\n\r\n{}", Kind::InvalidLength, 0),
            (b"Content-Length: +2\r\n\r\n{}", Kind::InvalidLength, 0),
            (b"Content-Length: 2 2\r\n\r\n{}", Kind::InvalidLength, 0),
            (b"Content-Length: 0x2\r\n\r\n{}", Kind::InvalidLength, 0),
            (
                b"Content-Length: 18446744073709551616\r\n\r\n",
                Kind::InvalidLength,
                0,
            ),
            (
                b"Content-Length: 2\r\ncontent-length: 3\r\n\r\n{}",
                Kind::ConflictingLength,
                19,
            ),
            (
                b"Content-Length: 2\r\n\r\n{}Content-Length: x\r\n\r\n",
                Kind::InvalidLength,
                23,
            ),
        ];
        for &(input, kind, at) in table {
            let e = closed_with(input);
            assert_eq!(
                (e.kind(), e.offset()),
                (kind, at),
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(e.code(), -32700);
        }
    }

    #[test]
    fn absurd_length_closes_at_once() {
        let mut lsp = Lsp::new();
        let step = lsp.next_frame(b"Content-Length: 99999999999\r\n\r\n");
        let Step::Close(e) = step else {
            panic!("{step:?}")
        };
        assert_eq!((e.limit(), e.code()), (Some(DEFAULT_MAX_FRAME), -32600));
        // Sticky, whatever comes next.
        assert_eq!(
            lsp.next_frame(b"Content-Length: 2\r\n\r\n{}"),
            Step::Close(e)
        );
    }

    #[test]
    fn header_section_limit() {
        let mut lsp = Lsp::new().max_header(32);
        // 33 bytes without the blank line: refused at once.
        let step = lsp.next_frame(&[b'a'; 33]);
        let Step::Close(e) = step else {
            panic!("{step:?}")
        };
        assert_eq!((e.limit(), e.code()), (Some(32), -32600));
        // Exactly 32 with the blank line is fine.
        let head = b"Content-Length: 2\r\nX-Pad: 12\r\n\r\n";
        assert_eq!(head.len(), 32);
        let mut input = head.to_vec();
        input.extend_from_slice(b"{}");
        for chunk in 1..=input.len() {
            let out = run(&mut Lsp::new().max_header(32), &input, chunk);
            assert_eq!(out.events, vec![Outcome::Frame(b"{}".to_vec())]);
        }
        let mut longer = b"X-Pad: 123\r\n".to_vec();
        longer.extend_from_slice(&input);
        for chunk in 1..=longer.len() {
            let out = run(&mut Lsp::new().max_header(32), &longer, chunk);
            assert!(out.closed.unwrap().is_too_large());
        }
    }

    #[test]
    fn over_the_limit_body_refused_before_it_arrives_and_skipped() {
        let mut lsp = Lsp::new().max_frame(4).max_skip(100);
        let step = lsp.next_frame(b"Content-Length: 10\r\n\r\n[1,");
        let Step::Garbage {
            consumed: 25,
            error,
        } = step
        else {
            panic!("{step:?}")
        };
        assert_eq!((error.limit(), error.offset()), (Some(4), 0));
        assert_eq!(lsp.next_frame(b"2,3"), Step::NeedMore { consumed: 3 });
        assert_eq!(
            lsp.next_frame(b",45]Content-Length: 2\r\n\r\n{}"),
            Step::Frame {
                range: 25..27,
                consumed: 27
            }
        );
        // Beyond max_skip: closed.
        let mut lsp = Lsp::new().max_frame(4).max_skip(100);
        assert!(matches!(
            lsp.next_frame(b"Content-Length: 101\r\n\r\n"),
            Step::Close(e) if e.is_too_large()
        ));
    }

    #[test]
    fn every_chunking_of_oversized_bodies_gives_the_same_events() {
        let input = b"Content-Length: 3\r\n\r\n[1]Content-Length: 12\r\n\r\n[1234567890]Content-Length: 3\r\n\r\n[2]Content-Length: 5\r\n\r\n[345]";
        let want = run(
            &mut Lsp::new().max_frame(4).max_skip(100),
            input,
            input.len(),
        );
        assert_eq!(
            want.events,
            vec![
                Outcome::Frame(b"[1]".to_vec()),
                Outcome::Garbage(-32600),
                Outcome::Frame(b"[2]".to_vec()),
                Outcome::Garbage(-32600),
            ]
        );
        assert_eq!(want.left, 0);
        for chunk in 1..input.len() {
            let got = run(&mut Lsp::new().max_frame(4).max_skip(100), input, chunk);
            assert_eq!(got.events, want.events, "chunks of {chunk}");
            assert!(got.max_held <= 24 + 4 + chunk, "chunks of {chunk}");
        }
    }

    #[test]
    fn reset_keeps_the_limits() {
        let mut lsp = Lsp::new().max_frame(1).max_header(21).max_skip(0);
        let _ = lsp.next_frame(b"x\r\n");
        lsp.reset();
        assert_eq!(
            (lsp.frame_limit(), lsp.header_limit(), lsp.max_skip),
            (1, 21, 0)
        );
        assert_eq!(
            lsp.next_frame(b"Content-Length: 1\r\n\r\n1"),
            Step::Frame {
                range: 21..22,
                consumed: 22
            }
        );
    }
}
