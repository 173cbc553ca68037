//! Concatenated JSON values: geth / reth IPC.

use super::error::{FrameError, Kind};
use super::{DEFAULT_MAX_FRAME, Framer, Step};

/// JSON values back to back, with or without whitespace (newlines included)
/// between them: `{…}{…}\n[…]`, as geth and reth speak over IPC.
///
/// The framer finds where each top-level object or array ends with a
/// resumable structural scan: it counts brackets outside strings, and inside
/// a string looks only for the closing quote and backslashes (an escaped
/// byte is skipped, so `"\"}"` and `"\\"` are read right). It does not
/// validate (the parser does, on the frame), but it never splits valid JSON
/// in the wrong place. Its state (depth, inside a string, after a backslash,
/// and the position) survives between calls, so nothing is rescanned.
///
/// A message must start with `{` or `[`. Any other byte between messages is
/// garbage after which the stream cannot be resynchronised (there is no
/// delimiter to look for): [`Step::Close`]. A value that grows past the size
/// limit is reported at once as [`Step::Garbage`] (-32600); the structural
/// scan then keeps running over its bytes, dropping them unbuffered, and
/// framing resumes after its end.
///
/// ```
/// use rpcwire::frame::{Concatenated, Framer, Step};
///
/// let mut json = Concatenated::new();
/// let buf = br#"{"a":"}\"]"} [1,{"b":[]}]"#;
/// assert_eq!(json.next_frame(buf), Step::Frame { range: 0..12, consumed: 12 });
/// assert_eq!(json.next_frame(&buf[12..]), Step::Frame { range: 1..13, consumed: 13 });
///
/// // Incomplete: nothing to do until more bytes arrive.
/// assert_eq!(json.next_frame(b"\n{\"a\":[1,"), Step::NeedMore { consumed: 1 });
/// assert_eq!(json.next_frame(b"{\"a\":[1,2]}"), Step::Frame { range: 0..11, consumed: 11 });
///
/// let Step::Close(error) = json.next_frame(b" x") else { panic!() };
/// assert_eq!((error.code(), error.offset()), (rpcwire::PARSE_ERROR, 38));
/// ```
#[derive(Clone, Debug)]
pub struct Concatenated {
    /// Where the scan resumes, as an index into `buf`.
    pos: usize,
    /// Where the value being read starts in `buf` (meaningful while
    /// `depth > 0`).
    start: usize,
    /// Brackets open in the value being read; zero between values.
    depth: u64,
    /// The scan stopped inside a string.
    in_string: bool,
    /// The scan stopped right after a backslash inside a string: the next
    /// byte is escaped.
    escape: bool,
    /// The value being read is over the limit: it is scanned to its end and
    /// dropped, not framed.
    discarding: bool,
    /// Garbage was found: the stream is over.
    closed: Option<FrameError>,
    /// The largest value accepted.
    max_frame: usize,
    /// Bytes consumed since creation or reset: turns positions in `buf`
    /// into stream offsets for errors.
    stream: u64,
    /// Bytes examined, for the test that the scan is linear.
    #[cfg(test)]
    pub(super) examined: usize,
}

impl Default for Concatenated {
    fn default() -> Self {
        Concatenated::new()
    }
}

/// Byte classes of the structural scan outside strings.
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const OPEN: u8 = 2;
const CLOSE: u8 = 3;

static CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    t[b'"' as usize] = QUOTE;
    t[b'{' as usize] = OPEN;
    t[b'[' as usize] = OPEN;
    t[b'}' as usize] = CLOSE;
    t[b']' as usize] = CLOSE;
    t
};

/// Where a string ends.
enum StringEnd {
    /// Index just past its closing quote.
    At(usize),
    /// Not in `buf`; `true` if `buf` ends with the backslash of an escape.
    Pending(bool),
}

/// Finds the closing quote of the string whose content continues at `pos`.
///
/// The crate's string kernel finds the next quote, backslash or control
/// byte (SSE2/AVX2/NEON, chosen at run time); a control byte is invalid JSON
/// the parser will report, so here it is just skipped.
#[inline(always)]
fn string_end(buf: &[u8], mut pos: usize) -> StringEnd {
    loop {
        let at = crate::scan::arch::find_string_stop(buf, pos).at;
        match buf.get(at) {
            Some(b'"') => return StringEnd::At(at + 1),
            Some(b'\\') => {
                if at + 1 >= buf.len() {
                    return StringEnd::Pending(true);
                }
                pos = at + 2;
            }
            Some(_) => pos = at + 1,
            None => return StringEnd::Pending(false),
        }
    }
}

impl Concatenated {
    /// A framer with the default limit ([`DEFAULT_MAX_FRAME`]).
    pub const fn new() -> Self {
        Concatenated {
            pos: 0,
            start: 0,
            depth: 0,
            in_string: false,
            escape: false,
            discarding: false,
            closed: None,
            max_frame: DEFAULT_MAX_FRAME,
            stream: 0,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// The largest message accepted, in bytes (default 5 MiB).
    ///
    /// Why: a peer that never closes its value would otherwise make the
    /// transport buffer without bound.
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

    /// Scans the value being read from `self.pos`: the index just past its
    /// end, or `None` with the state saved at `buf.len()`.
    #[inline(always)]
    fn scan(&mut self, buf: &[u8]) -> Option<usize> {
        let mut pos = self.pos;
        #[cfg(test)]
        let first = pos;
        if self.in_string {
            if self.escape {
                if pos >= buf.len() {
                    return None;
                }
                pos += 1;
                self.escape = false;
            }
            match string_end(buf, pos) {
                StringEnd::At(end) => pos = end,
                StringEnd::Pending(escape) => {
                    #[cfg(test)]
                    {
                        self.examined += buf.len() - first;
                    }
                    self.escape = escape;
                    self.pos = buf.len();
                    return None;
                }
            }
            self.in_string = false;
        }
        let mut depth = self.depth;
        while let Some(&b) = buf.get(pos) {
            pos += 1;
            match CLASS[b as usize] {
                PLAIN => {}
                QUOTE => match string_end(buf, pos) {
                    StringEnd::At(end) => pos = end,
                    StringEnd::Pending(escape) => {
                        self.in_string = true;
                        self.escape = escape;
                        pos = buf.len();
                        break;
                    }
                },
                OPEN => depth += 1,
                _ => {
                    depth -= 1;
                    if depth == 0 {
                        #[cfg(test)]
                        {
                            self.examined += pos - first;
                        }
                        self.depth = 0;
                        return Some(pos);
                    }
                }
            }
        }
        #[cfg(test)]
        {
            self.examined += pos - first;
        }
        self.depth = depth;
        self.pos = pos;
        None
    }
}

impl Framer for Concatenated {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        if let Some(error) = self.closed {
            return Step::Close(error);
        }
        // Only a caller that breaks the contract gives a shorter `buf`; its
        // answers are meaningless, but nothing may index out of bounds.
        self.pos = self.pos.min(buf.len());
        self.start = self.start.min(self.pos);
        loop {
            if self.depth == 0 {
                // Between values: skip whitespace, then a value must start.
                let p = crate::scan::skip_ws(buf, self.pos);
                #[cfg(test)]
                {
                    self.examined += p - self.pos;
                }
                match buf.get(p) {
                    None => {
                        self.pos = 0;
                        return self.step(Step::NeedMore {
                            consumed: buf.len(),
                        });
                    }
                    Some(b'{' | b'[') => {
                        self.start = p;
                        self.depth = 1;
                        self.pos = p + 1;
                    }
                    Some(&b) => {
                        let error =
                            FrameError::new(Kind::UnexpectedByte(b), self.stream + p as u64);
                        self.closed = Some(error);
                        return Step::Close(error);
                    }
                }
            }
            let Some(end) = self.scan(buf) else {
                if self.discarding {
                    self.pos = 0;
                    return self.step(Step::NeedMore {
                        consumed: buf.len(),
                    });
                }
                if buf.len() - self.start > self.max_frame {
                    // Refused before its end; the rest is scanned and dropped.
                    let error = self.too_large();
                    self.discarding = true;
                    self.pos = 0;
                    return self.step(Step::Garbage {
                        consumed: buf.len(),
                        error,
                    });
                }
                let consumed = self.start;
                self.pos -= consumed;
                self.start = 0;
                return self.step(Step::NeedMore { consumed });
            };
            self.pos = end;
            if self.discarding {
                // The end of a refused value: carry on with the next one.
                self.discarding = false;
                continue;
            }
            self.pos = 0;
            if end - self.start > self.max_frame {
                let error = self.too_large();
                return self.step(Step::Garbage {
                    consumed: end,
                    error,
                });
            }
            return self.step(Step::Frame {
                range: self.start..end,
                consumed: end,
            });
        }
    }

    /// Appends `message` and `\n`, as geth writes (its `json.Encoder` ends
    /// each value with a newline).
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        out.reserve(message.len() + 1);
        out.extend_from_slice(message);
        out.push(b'\n');
    }

    fn reset(&mut self) {
        *self = Concatenated::new().max_frame(self.max_frame);
    }
}

impl Concatenated {
    fn too_large(&self) -> FrameError {
        FrameError::new(
            Kind::TooLarge {
                limit: self.max_frame,
            },
            self.stream + self.start as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::{Outcome, feed_whole, run};

    #[test]
    fn strings_with_brackets_quotes_and_backslashes() {
        let values: &[&[u8]] = &[
            br#"{"a":"}"}"#,
            br#"["]"]"#,
            br#"{"a":"\"}"}"#,
            br#"{"a":"\\"}"#,
            br#"{"a":"\\\"]\\"}"#,
            br#"["\\\\","\\\\\""]"#,
            br#"{"\"":"{[","}":"]"}"#,
            r#"["\u005d\n\t", "é}ü", "日本]語"]"#.as_bytes(),
            br#"[[[[]]],{"a":{"b":[{}]}}]"#,
            br#"{}"#,
            br#"[]"#,
        ];
        let mut input = Vec::new();
        for v in values {
            input.extend_from_slice(v);
        }
        for chunk in [1, 2, 3, 5, input.len()] {
            let got = run(&mut Concatenated::new(), &input, chunk);
            let want: Vec<Outcome> = values.iter().map(|v| Outcome::Frame(v.to_vec())).collect();
            assert_eq!(got.events, want, "chunks of {chunk}");
        }
    }

    #[test]
    fn whitespace_between_values_is_consumed() {
        let out = feed_whole(&mut Concatenated::new(), b" \n\t{}\r\n\n[] \n ");
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"{}".to_vec()),
                Outcome::Frame(b"[]".to_vec())
            ]
        );
        assert_eq!(out.left, 0);
    }

    #[test]
    fn garbage_closes_for_good() {
        for (input, at, byte) in [
            (&b"{} x{}"[..], 3u64, b'x'),
            (b"1", 0, b'1'),
            (b"\"a\"", 0, b'"'),
            (b"[1]]", 3, b']'),
            (b"{}}", 2, b'}'),
            (b"[] null", 3, b'n'),
        ] {
            let out = feed_whole(&mut Concatenated::new(), input);
            let Some(error) = out.closed else {
                panic!("{input:?}: {out:?}")
            };
            assert_eq!(error.kind(), Kind::UnexpectedByte(byte), "{input:?}");
            assert_eq!(error.offset(), at, "{input:?}");
            assert_eq!(error.code(), crate::PARSE_ERROR);
        }
        let mut json = Concatenated::new();
        let Step::Close(e) = json.next_frame(b"x") else {
            panic!()
        };
        assert_eq!(json.next_frame(b"x{}"), Step::Close(e), "sticky");
        json.reset();
        assert_eq!(
            json.next_frame(b"{}"),
            Step::Frame {
                range: 0..2,
                consumed: 2
            }
        );
    }

    #[test]
    fn mismatched_brackets_are_the_parsers_business() {
        // Not valid JSON, but framed by depth; the parser rejects the frame.
        let out = feed_whole(&mut Concatenated::new(), b"{]  [}");
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"{]".to_vec()),
                Outcome::Frame(b"[}".to_vec())
            ]
        );
    }

    #[test]
    fn over_the_limit_refused_before_the_end_then_skipped() {
        let mut json = Concatenated::new().max_frame(8);
        let step = json.next_frame(b"  [\"abcdefgh");
        let Step::Garbage {
            consumed: 12,
            error,
        } = step
        else {
            panic!("{step:?}")
        };
        assert_eq!((error.offset(), error.limit()), (2, Some(8)));
        // The rest of the value is scanned (a `]` in its string does not end
        // it) and dropped as it arrives.
        assert_eq!(json.next_frame(b"]\\\"]ij"), Step::NeedMore { consumed: 6 });
        assert_eq!(
            json.next_frame(b"k\", [[]]] [1]"),
            Step::Frame {
                range: 10..13,
                consumed: 13
            }
        );
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let input = b"[1,2,3,4][1,2,3,45]";
        let out = run(&mut Concatenated::new().max_frame(9), input, 1);
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"[1,2,3,4]".to_vec()),
                Outcome::Garbage(-32600)
            ]
        );
        // Whole in one chunk, the over-long value is refused at its end.
        let out = feed_whole(&mut Concatenated::new().max_frame(9), input);
        assert_eq!(
            out.events,
            vec![
                Outcome::Frame(b"[1,2,3,4]".to_vec()),
                Outcome::Garbage(-32600)
            ]
        );
    }

    #[test]
    fn every_chunking_of_oversized_values_gives_the_same_events() {
        let input = br#"[1] {"a":"]]]]]]]]]]]]\"}"} [2] [[[[[[[[[[]]]]]]]]]] {"b":"\\"}"#;
        let want = run(&mut Concatenated::new().max_frame(10), input, input.len());
        assert_eq!(
            want.events,
            vec![
                Outcome::Frame(b"[1]".to_vec()),
                Outcome::Garbage(-32600),
                Outcome::Frame(b"[2]".to_vec()),
                Outcome::Garbage(-32600),
                Outcome::Frame(br#"{"b":"\\"}"#.to_vec()),
            ]
        );
        for chunk in 1..input.len() {
            let got = run(&mut Concatenated::new().max_frame(10), input, chunk);
            assert_eq!(got.events, want.events, "chunks of {chunk}");
            assert!(got.max_held <= 10 + chunk, "chunks of {chunk}");
        }
    }

    #[test]
    fn encode_appends_a_newline() {
        let mut out = Vec::new();
        Concatenated::new().encode(b"{}", &mut out);
        Concatenated::new().encode(b"[1]", &mut out);
        assert_eq!(out, b"{}\n[1]\n");
    }
}
