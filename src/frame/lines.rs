//! Newline-delimited messages: MCP stdio, many TCP servers.

use memchr::memchr2;

use super::error::{FrameError, Kind};
use super::structural::{self, NEWLINE_BATCH, Newlines};
use super::{DEFAULT_MAX_FRAME, Framer, Step};

/// One message per line: a frame ends at `\n`, one `\r` before it is
/// stripped, and empty or whitespace-only lines are skipped (a line over
/// the limit is refused, blank or not).
///
/// This is MCP's stdio transport and what most JSON-RPC-over-TCP servers
/// speak. The search for `\n` runs over everything received, 64 bytes at a
/// time (SSE2 or AVX2; `memchr` elsewhere), records up to a few dozen line
/// ends at once, and resumes where it stopped: a long line arriving in
/// pieces is searched once.
///
/// A line longer than the limit is reported as soon as the bytes received
/// prove it, without waiting for its end, as [`Step::Garbage`] (a transport
/// answers -32600 with `id: null`); the rest of the line is then dropped,
/// never buffered, up to and including its `\n`, and framing resumes with the
/// next line (as tokio-util's `LinesCodec` does). Every line ending is a
/// point to resynchronise at, so this framer never returns [`Step::Close`].
///
/// ```
/// use rpcwire::frame::{Framer, Lines, Step};
///
/// let mut lines = Lines::new().max_frame(16);
/// let buf = b"\r\n{\"id\":1}\r\n";
/// assert_eq!(lines.next_frame(buf), Step::Frame { range: 2..10, consumed: 12 });
///
/// // Over the limit before its end: refused at once, the rest skipped later.
/// let Step::Garbage { consumed: 20, error } = lines.next_frame(&[b'x'; 20]) else { panic!() };
/// assert_eq!(error.code(), -32600);
/// assert_eq!(lines.next_frame(b"xxx\n[1]\n"), Step::Frame { range: 4..7, consumed: 8 });
///
/// let mut out = Vec::new();
/// lines.encode(b"{\n  \"id\": 1\n}", &mut out);
/// assert_eq!(out, b"{   \"id\": 1 }\n");
/// ```
#[derive(Clone, Debug)]
pub struct Lines {
    /// Stream offset up to which `buf` has been searched for `\n`.
    searched: u64,
    /// Where the `\n`s found by the last search are: `newlines[next..found]`
    /// are not used yet. Indices into the `buf` of that search, which started
    /// at stream offset `newlines_base`.
    newlines: Newlines,
    next: usize,
    found: usize,
    newlines_base: u64,
    /// The rest of an over-long line is being dropped, up to its `\n`.
    discarding: bool,
    /// The longest line accepted, `\r\n` not counted.
    max_frame: usize,
    /// Bytes consumed since creation or reset: the stream offset of `buf[0]`.
    stream: u64,
    /// Bytes examined, for the test that the scan is linear.
    #[cfg(test)]
    pub(super) examined: usize,
}

impl Default for Lines {
    fn default() -> Self {
        Lines::new()
    }
}

impl Lines {
    /// A framer with the default limit ([`DEFAULT_MAX_FRAME`]).
    pub const fn new() -> Self {
        Lines {
            searched: 0,
            newlines: [0; NEWLINE_BATCH + 64],
            next: 0,
            found: 0,
            newlines_base: 0,
            discarding: false,
            max_frame: DEFAULT_MAX_FRAME,
            stream: 0,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// The longest message accepted, in bytes, its line ending not counted
    /// (default 5 MiB).
    ///
    /// Why: a peer that never sends `\n` would otherwise make the transport
    /// buffer without bound.
    pub const fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes;
        self
    }

    /// The configured frame size limit.
    pub const fn frame_limit(&self) -> usize {
        self.max_frame
    }

    #[inline]
    fn step(&mut self, step: Step) -> Step {
        self.stream += step.consumed() as u64;
        step
    }

    fn too_large(&self, at: usize) -> FrameError {
        FrameError::new(
            Kind::TooLarge {
                limit: self.max_frame,
            },
            self.stream + at as u64,
        )
    }

    /// Searches `buf[from..]` for the next batch of `\n`s.
    #[inline]
    fn search(&mut self, buf: &[u8], from: usize) {
        let found = structural::newlines(buf, from, &mut self.newlines);
        #[cfg(test)]
        {
            self.examined += found.stop - from;
        }
        self.searched = self.stream + found.stop as u64;
        self.newlines_base = self.stream;
        self.next = 0;
        self.found = found.ends;
    }
}

/// Whether `line` holds only spaces, tabs and carriage returns.
#[inline]
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| matches!(b, b' ' | b'\t' | b'\r'))
}

impl Framer for Lines {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        if self.searched > self.stream + buf.len() as u64 {
            // Only a caller that breaks the contract gives a shorter `buf`:
            // start over on it (the answers are meaningless, but nothing may
            // index out of bounds).
            *self = Lines {
                stream: self.stream,
                searched: self.stream,
                discarding: self.discarding,
                ..Lines::new().max_frame(self.max_frame)
            };
        }
        // The first byte of the line being read; everything before it is
        // consumed by whatever step this call returns.
        let mut start = 0;
        loop {
            if self.next < self.found {
                let newline =
                    (self.newlines_base + self.newlines[self.next] as u64 - self.stream) as usize;
                self.next += 1;
                let line = start;
                start = newline + 1;
                if self.discarding {
                    // The end of an over-long line.
                    self.discarding = false;
                    continue;
                }
                let mut end = newline;
                if end > line && buf[end - 1] == b'\r' {
                    end -= 1;
                }
                // Before the blank-line check: a line over the limit may
                // already have been refused unfinished, whatever it holds,
                // so a whole one is refused too (the chunking must not
                // change the answer).
                if end - line > self.max_frame {
                    let error = self.too_large(line);
                    return self.step(Step::Garbage {
                        consumed: start,
                        error,
                    });
                }
                // A message line starts with `{` or `[`: one compare.
                if buf[line..end].first().is_none_or(|&b| b <= b' ') && is_blank(&buf[line..end]) {
                    continue;
                }
                return self.step(Step::Frame {
                    range: line..end,
                    consumed: start,
                });
            }
            let from = (self.searched - self.stream) as usize;
            if from < buf.len() {
                self.search(buf, from);
                if self.found > 0 {
                    continue;
                }
            }
            // No `\n` in `buf[start..]`.
            if self.discarding {
                return self.step(Step::NeedMore {
                    consumed: buf.len(),
                });
            }
            // A final `\r` may be the start of the line ending.
            // Saturating: a caller that broke the contract (a `buf` not
            // starting with what was left) must get meaningless answers,
            // not an overflow.
            let pending = buf
                .len()
                .saturating_sub(start)
                .saturating_sub((buf.last() == Some(&b'\r')) as usize);
            if pending > self.max_frame {
                self.discarding = true;
                let error = self.too_large(start);
                return self.step(Step::Garbage {
                    consumed: buf.len(),
                    error,
                });
            }
            return self.step(Step::NeedMore { consumed: start });
        }
    }

    /// Appends `message` and `\n`. A raw `\n` or `\r` inside valid JSON can
    /// only be whitespace between tokens (inside strings they are escaped),
    /// so each is written as a space: a pretty-printed message stays one
    /// line, and means the same.
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        out.reserve(message.len() + 1);
        let mut from = 0;
        while let Some(i) = memchr2(b'\n', b'\r', &message[from..]) {
            out.extend_from_slice(&message[from..from + i]);
            out.push(b' ');
            from += i + 1;
        }
        out.extend_from_slice(&message[from..]);
        out.push(b'\n');
    }

    fn reset(&mut self) {
        *self = Lines::new().max_frame(self.max_frame);
    }

    fn refused_start(&self, error: &FrameError, consumed: usize) -> Option<usize> {
        super::refused_start_in_buf(self.stream, error, consumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::{Outcome, feed_whole, run};

    /// A caller that breaks the contract gets answers, not a panic: after a
    /// frame that left `"\n"`, a `"\r"` instead (the next line's start was
    /// then the buffer's end, and with the trailing `\r` the pending
    /// length's subtraction overflowed; found by a read-only review).
    #[test]
    fn a_caller_breaking_the_contract_gets_no_overflow() {
        let mut lines = Lines::new();
        let consumed = match lines.next_frame(b"[1]\n\n") {
            Step::Frame { consumed, .. } => consumed,
            other => panic!("{other:?}"),
        };
        assert_eq!(consumed, 4);
        let _ = lines.next_frame(b"\r");
        let _ = lines.next_frame(b"");
    }

    #[test]
    fn blank_lines_and_crlf() {
        let input = b"\n\r\n  \t\r\n{\"a\":1}\r\n\n[2]\n \r\n";
        let out = feed_whole(&mut Lines::new(), input);
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"{\"a\":1}".to_vec()),
                Outcome::Frame(b"[2]".to_vec())
            ]
        );
        assert_eq!(out.left, 0, "blank lines are consumed too");
    }

    #[test]
    fn only_one_cr_is_stripped_and_inner_cr_kept() {
        let out = feed_whole(&mut Lines::new(), b"[1]\r\r\n[2\r3]\n");
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"[1]\r".to_vec()),
                Outcome::Frame(b"[2\r3]".to_vec())
            ]
        );
    }

    #[test]
    fn leading_whitespace_on_a_line_is_kept() {
        let out = feed_whole(&mut Lines::new(), b"  {}\n");
        assert_eq!(out.events, vec![Outcome::Frame(b"  {}".to_vec())]);
    }

    #[test]
    fn over_long_line_refused_before_its_end_then_skipped() {
        let mut lines = Lines::new().max_frame(8);
        // 9 bytes, no newline yet: refused at once.
        let step = lines.next_frame(b"123456789");
        let Step::Garbage { consumed: 9, error } = step else {
            panic!("{step:?}")
        };
        assert_eq!(error.limit(), Some(8));
        assert_eq!(error.offset(), 0);
        // The rest of it is dropped as it arrives, not buffered.
        assert_eq!(lines.next_frame(b"abcdef"), Step::NeedMore { consumed: 6 });
        assert_eq!(
            lines.next_frame(b"gh\r\n[1]\n"),
            Step::Frame {
                range: 4..7,
                consumed: 8
            }
        );
    }

    #[test]
    fn exactly_the_limit_is_accepted_with_or_without_cr() {
        for input in [&b"12345678\n"[..], b"12345678\r\n"] {
            let out = run(&mut Lines::new().max_frame(8), input, 1);
            assert_eq!(out.events, vec![Outcome::Frame(b"12345678".to_vec())]);
        }
        // Split before the `\n`: the pending `\r` does not count.
        let mut lines = Lines::new().max_frame(8);
        assert_eq!(
            lines.next_frame(b"12345678\r"),
            Step::NeedMore { consumed: 0 }
        );
        assert_eq!(
            lines.next_frame(b"12345678\r\n"),
            Step::Frame {
                range: 0..8,
                consumed: 10
            }
        );
    }

    #[test]
    fn over_long_line_whole_in_one_chunk() {
        let mut lines = Lines::new().max_frame(4);
        let buf = b"[1]\n[1234]\n[2]\n";
        assert_eq!(
            lines.next_frame(buf),
            Step::Frame {
                range: 0..3,
                consumed: 4
            }
        );
        let step = lines.next_frame(&buf[4..]);
        let Step::Garbage { consumed: 7, error } = step else {
            panic!("{step:?}")
        };
        assert_eq!(error.offset(), 4, "stream offset of the refused line");
        assert_eq!(
            lines.next_frame(&buf[11..]),
            Step::Frame {
                range: 0..3,
                consumed: 4
            }
        );
    }

    #[test]
    fn every_chunking_of_oversized_lines_gives_the_same_events() {
        let input = b"[1]\n[1234567890]\n\n[2]\r\n[abcdefghijklmnop]\r\n[3]\n";
        let want = run(&mut Lines::new().max_frame(6), input, input.len());
        assert_eq!(
            want.events,
            vec![
                Outcome::Frame(b"[1]".to_vec()),
                Outcome::Garbage(-32600),
                Outcome::Frame(b"[2]".to_vec()),
                Outcome::Garbage(-32600),
                Outcome::Frame(b"[3]".to_vec()),
            ]
        );
        for chunk in 1..input.len() {
            let got = run(&mut Lines::new().max_frame(6), input, chunk);
            assert_eq!(got.events, want.events, "chunks of {chunk}");
            assert!(got.max_held <= 6 + 2 + chunk, "chunks of {chunk}");
        }
    }

    #[test]
    fn encode_keeps_one_line() {
        let lines = Lines::new();
        let mut out = Vec::new();
        lines.encode(br#"{"a":"x\ny"}"#, &mut out);
        lines.encode(b"[\r\n1,\n2\n]", &mut out);
        assert_eq!(out, b"{\"a\":\"x\\ny\"}\n[  1, 2 ]\n");
        let got = feed_whole(&mut Lines::new(), &out);
        assert_eq!(got.events.len(), 2);
    }

    #[test]
    fn reset_forgets_discarding_and_keeps_the_limit() {
        let mut lines = Lines::new().max_frame(2);
        let _ = lines.next_frame(b"xxxx");
        lines.reset();
        assert_eq!(lines.frame_limit(), 2);
        assert_eq!(
            lines.next_frame(b"[]\n"),
            Step::Frame {
                range: 0..2,
                consumed: 3
            }
        );
    }
}
