//! Concatenated JSON values: geth / reth IPC.

use super::error::{FrameError, Kind};
use super::structural::{self, Ends, MAX_ENDS, State};
use super::{DEFAULT_MAX_FRAME, Framer, Step};

/// JSON values back to back, with or without whitespace (newlines included)
/// between them: `{…}{…}\n[…]`, as geth and reth speak over IPC.
///
/// The framer finds where each top-level object or array ends with a
/// resumable structural scan: brackets are counted outside strings, and
/// escapes are followed, so `"\"}"` and `"\\"` are read right. It does not
/// validate (the parser does, on the frame), but it never splits valid JSON
/// in the wrong place. The scan runs 64 bytes at a time (SSE2, or AVX2 when
/// the CPU has it) over everything received, records where the next values
/// end, and keeps its state (depth, inside a string, after a backslash) and
/// position between calls: every byte is classified once, however the
/// stream is chunked.
///
/// Its messages end where their JSON values end, so a parser can frame them
/// itself ([`Framer::parser_frames`] is `true`): the stream transports'
/// `Driver` (feature `server`) parses and frames each
/// complete message in one pass, and calls on this framer only for a
/// message cut by the end of a read or one that is not valid.
///
/// A message must start with `{` or `[`. Any other byte between messages is
/// garbage after which the stream cannot be resynchronised (there is no
/// delimiter to look for): [`Step::Close`] (-32700). A value that grows past
/// the size limit is reported at once as [`Step::Garbage`] (-32600); the
/// structural scan then keeps running over its bytes, dropping them
/// unbuffered, and framing resumes after its end, unless the value runs
/// past [`max_skip`](Concatenated::max_skip) (64 MiB): then the stream is
/// over ([`Step::Close`], -32600), since a value whose brackets never close
/// would have every later byte dropped. A message that is not
/// JSON cannot be framed reliably either: its brackets or quotes may never
/// balance ([`Framer::resynchronises`] is `false`), so the stream driver
/// closes the connection after answering it.
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
/// assert_eq!((error.code(), error.offset()), (-32700, 38));
/// ```
#[derive(Clone, Debug)]
pub struct Concatenated {
    /// The structural scan's state (levels open, inside a string, after a
    /// backslash) as of stream offset `scanned`.
    scan: State,
    /// Stream offset up to which the structural scan has run.
    scanned: u64,
    /// Where the values found by the last scan end: `ends[next..found]` are
    /// not framed yet. Indices into the `buf` of that scan, which started at
    /// stream offset `ends_base`.
    ends: Ends,
    next: usize,
    found: usize,
    /// How many value ends one scan looks for: `MAX_ENDS` when the framer
    /// frames every message; 1 once the parser frames them
    /// ([`Framer::skip`]), where the framer is asked for one message at a
    /// time (one cut by the end of a read) and what it found past that one
    /// would be thrown away.
    batch: usize,
    ends_base: u64,
    /// The value being read is over the limit: it is scanned to its end and
    /// dropped, not framed.
    discarding: bool,
    /// The stream offset where the value being dropped starts.
    discard_start: u64,
    /// The longest value dropped rather than closing the stream.
    max_skip: u64,
    /// Garbage was found: the stream is over.
    closed: Option<FrameError>,
    /// The largest value accepted.
    max_frame: usize,
    /// Bytes consumed since creation or reset: the stream offset of `buf[0]`.
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

impl Concatenated {
    /// A framer with the default limit ([`DEFAULT_MAX_FRAME`]).
    pub const fn new() -> Self {
        Concatenated {
            scan: State {
                depth: 0,
                in_string: false,
                escape: false,
            },
            scanned: 0,
            ends: [0; MAX_ENDS + 32],
            next: 0,
            found: 0,
            batch: MAX_ENDS,
            ends_base: 0,
            discarding: false,
            discard_start: 0,
            max_skip: Self::DEFAULT_MAX_SKIP,
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

    /// Default for [`max_skip`](Concatenated::max_skip): 64 MiB, as
    /// [`Lsp::DEFAULT_MAX_SKIP`](super::Lsp::DEFAULT_MAX_SKIP).
    pub const DEFAULT_MAX_SKIP: u64 = 64 * 1024 * 1024;

    /// The longest value, beyond [`max_frame`](Concatenated::max_frame),
    /// that is refused and dropped (so the stream carries on) rather than
    /// ending the stream (default 64 MiB): past it, the refusal
    /// ([`Step::Garbage`]) is followed by [`Step::Close`].
    ///
    /// Why: a value is dropped until its brackets close, and bytes that are
    /// not JSON may never close them (`["` and no closing quote): every
    /// later message would be dropped unanswered.
    pub const fn max_skip(mut self, bytes: u64) -> Self {
        self.max_skip = bytes;
        self
    }

    /// The refused value starting at stream offset `start` runs past
    /// [`max_skip`](Concatenated::max_skip) (it is `len` bytes long so
    /// far): the stream ends after its refusal.
    fn past_skip(&self, start: u64, len: u64) -> Option<FrameError> {
        (len > self.max_skip).then(|| {
            FrameError::new(
                Kind::TooLarge {
                    limit: self.max_frame,
                },
                start,
            )
        })
    }

    #[inline]
    fn step(&mut self, step: Step) -> Step {
        self.stream += step.consumed() as u64;
        step
    }

    fn too_large(&self, start: usize) -> FrameError {
        FrameError::new(
            Kind::TooLarge {
                limit: self.max_frame,
            },
            self.stream + start as u64,
        )
    }

    #[cold]
    fn close(&mut self, byte: u8, at: usize) -> Step {
        let error = FrameError::new(Kind::UnexpectedByte(byte), self.stream + at as u64);
        self.closed = Some(error);
        Step::Close(error)
    }

    /// The first byte at or after `from` that is not whitespace: where the
    /// next value starts.
    #[inline(always)]
    fn value_start(&mut self, buf: &[u8], from: usize) -> usize {
        let start = crate::scan::skip_ws(buf, from);
        #[cfg(test)]
        {
            self.examined += start - from;
        }
        start
    }
}

impl Framer for Concatenated {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        if let Some(error) = self.closed {
            return Step::Close(error);
        }
        if self.scanned > self.stream + buf.len() as u64 {
            // Only a caller that breaks the contract gives a shorter `buf`:
            // start over on it (the answers are meaningless, but nothing may
            // index out of bounds).
            self.skip(0);
        }
        // Bytes of `buf` this call drops before the frame it returns: the
        // rest of a refused value.
        let mut base = 0;
        loop {
            if self.next < self.found {
                let end = (self.ends_base + self.ends[self.next] as u64 - self.stream) as usize;
                self.next += 1;
                if self.discarding {
                    // The end of a refused value: carry on after it, unless
                    // it ran past the skip limit.
                    let len = self.stream + end as u64 - self.discard_start;
                    if let Some(error) = self.past_skip(self.discard_start, len) {
                        self.closed = Some(error);
                        return Step::Close(error);
                    }
                    self.discarding = false;
                    base = end;
                    continue;
                }
                let start = self.value_start(buf, base).min(end);
                match buf.get(start) {
                    Some(b'{' | b'[') => {}
                    other => return self.close(other.copied().unwrap_or(b' '), start),
                }
                if end - start > self.max_frame {
                    let error = self.too_large(start);
                    // As if the reads had cut it: refused, then the end.
                    self.closed = self.past_skip(error.offset(), (end - start) as u64);
                    return self.step(Step::Garbage {
                        consumed: end,
                        error,
                    });
                }
                return self.step(Step::Frame {
                    range: start..end,
                    consumed: end,
                });
            }
            // Scan what has arrived since the last scan: every value end in
            // it, up to `batch`.
            let from = (self.scanned - self.stream) as usize;
            if from < buf.len() {
                let found = structural::scan(&mut self.scan, buf, from, &mut self.ends, self.batch);
                #[cfg(test)]
                {
                    self.examined += found.stop - from;
                }
                self.scanned = self.stream + found.stop as u64;
                self.ends_base = self.stream;
                self.next = 0;
                self.found = found.ends;
                if found.ends > 0 {
                    continue;
                }
                // Otherwise the scan reached the end of `buf`, or stopped at
                // a closing bracket with nothing open, which is garbage the
                // check below finds at or before it.
            }
            // No value ends in `buf[base..]`.
            if self.discarding {
                let len = self.stream + buf.len() as u64 - self.discard_start;
                if let Some(error) = self.past_skip(self.discard_start, len) {
                    self.closed = Some(error);
                    return Step::Close(error);
                }
                return self.step(Step::NeedMore {
                    consumed: buf.len(),
                });
            }
            let start = self.value_start(buf, base);
            match buf.get(start) {
                // Only whitespace: nothing to keep.
                None => {
                    return self.step(Step::NeedMore {
                        consumed: buf.len(),
                    });
                }
                Some(b'{' | b'[') => {}
                Some(&b) => return self.close(b, start),
            }
            if buf.len() - start > self.max_frame {
                // Refused before its end; the rest is scanned and dropped.
                self.discarding = true;
                let error = self.too_large(start);
                self.discard_start = error.offset();
                self.closed = self.past_skip(error.offset(), (buf.len() - start) as u64);
                return self.step(Step::Garbage {
                    consumed: buf.len(),
                    error,
                });
            }
            return self.step(Step::NeedMore { consumed: start });
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
        *self = Concatenated::new()
            .max_frame(self.max_frame)
            .max_skip(self.max_skip);
    }

    fn parser_frames(&self) -> bool {
        true
    }

    fn resynchronises(&self) -> bool {
        false
    }

    fn parsed_frame_limit(&self) -> usize {
        self.max_frame
    }

    fn skip(&mut self, consumed: usize) {
        let stream = self.stream + consumed as u64;
        *self = Concatenated {
            stream,
            scanned: stream,
            batch: 1,
            ..Concatenated::new()
                .max_frame(self.max_frame)
                .max_skip(self.max_skip)
        };
    }

    fn refused_start(&self, error: &FrameError, consumed: usize) -> Option<usize> {
        super::refused_start_in_buf(self.stream, error, consumed)
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
            assert_eq!(error.code(), -32700);
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

    /// A refused value is dropped until its brackets close, and bytes that
    /// are not JSON may never close them: past `max_skip` the stream ends
    /// (after the refusal), however the reads cut it; a value that closes
    /// within it is dropped and framing goes on. Every later message was
    /// dropped for good before.
    #[test]
    fn a_refused_value_past_max_skip_ends_the_stream() {
        let framer = || Concatenated::new().max_frame(8).max_skip(32);
        let never_closes = b"[\"abcdefghijklmnopqrstuvwxyz [1] [2] [3] [4] [5] [6] [7] [8]";
        let closes_in_time = b"[\"abcdefghijklmnopqrstuvwxyz\"] [1]";
        for chunk in 1..=never_closes.len() {
            let out = run(&mut framer(), never_closes, chunk);
            assert_eq!(out.events, vec![Outcome::Garbage(-32600)], "chunk {chunk}");
            let closed = out.closed.expect("closed");
            assert_eq!(
                (closed.offset(), closed.code()),
                (0, -32600),
                "chunk {chunk}"
            );
        }
        for chunk in 1..=closes_in_time.len() {
            let out = run(&mut framer(), closes_in_time, chunk);
            assert_eq!(
                out.events,
                vec![Outcome::Garbage(-32600), Outcome::Frame(b"[1]".to_vec())],
                "chunk {chunk}"
            );
            assert!(out.closed.is_none(), "chunk {chunk}");
        }
        // The limits survive a reset.
        let mut json = framer();
        json.reset();
        assert!(run(&mut json, never_closes, 5).closed.is_some());
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
