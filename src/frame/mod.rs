//! Layer 6: incremental framers, which cut a byte stream into messages.
//!
//! A stream transport (stdio, TCP, a Unix socket, an LSP pipe) delivers bytes
//! in chunks that have nothing to do with message boundaries. A framer finds
//! the boundaries; the parser then reads each complete frame. Three framings
//! are in use for JSON-RPC:
//!
//! | framer | framing | used by |
//! | --- | --- | --- |
//! | [`Lines`] | one message per line, `\n` (or `\r\n`) after each | MCP stdio, many TCP servers |
//! | [`Lsp`] | `Content-Length: N\r\n` headers, `\r\n`, then `N` bytes | LSP base protocol, DAP |
//! | [`Concatenated`] | JSON values back to back, whitespace optional | geth / reth IPC |
//!
//! The framers do no I/O and own no buffer: they are state machines over the
//! bytes the caller has received and not yet consumed. Each keeps its scan
//! position between calls, so a message that arrives in many small chunks is
//! scanned once: the work is linear in the input, whatever the chunking.
//!
//! # The calling contract
//!
//! [`Framer::next_frame`] takes `buf`, *every byte received and not yet
//! consumed*, and returns a [`Step`]. Positions in a step are indices into
//! that `buf`. Every step says how many bytes it consumed
//! ([`Step::consumed`]); before the next call the caller drops exactly that
//! many bytes from the front of its buffer (or, cheaper, advances an offset
//! and passes `&buf[offset..]`), and may append newly received bytes at the
//! end. The next `buf` must therefore start with the bytes the previous one
//! held after its first `consumed`, unchanged. Anything else (skipping bytes,
//! passing another connection's buffer) is a caller bug: the framer does not
//! detect it and its answers become meaningless (never undefined behaviour).
//! After clearing its buffer for another reason, call [`Framer::reset`].
//!
//! * [`Step::Frame`]: `buf[range]` is one message; hand it to the parser.
//! * [`Step::NeedMore`]: no complete message yet; read more bytes. Its
//!   `consumed` is often zero, but covers whitespace between messages and the
//!   bytes of a message being thrown away, so the caller's buffer never holds
//!   more than one pending message.
//! * [`Step::Garbage`]: a message was over the size limit (or malformed, but
//!   the stream can continue). Answer with [`FrameError::write_reply`] (an
//!   error with `id: null`), then carry on.
//! * [`Step::Close`]: the stream cannot be resynchronised; answer if you like,
//!   then close the connection. Every later call returns the same `Close`.
//!
//! The size limits are enforced *before* a message is buffered: a framer
//! reports a message over the limit as soon as the bytes received prove it
//! (an LSP `Content-Length: 99999999999` at once, before any body byte), so a
//! transport never holds more than about one limit's worth of bytes.
//!
//! ```
//! use rpcwire::frame::{Framer, Lines, Step};
//!
//! let mut framer = Lines::new();
//! let mut buf: Vec<u8> = Vec::new();
//! let mut frames = Vec::new();
//! // Bytes as a socket might deliver them.
//! for chunk in [&b"{\"jsonrpc\":\"2.0\",\"id\":1,\"met"[..], b"hod\":\"a\"}\r\n\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"b\"}\n"] {
//!     buf.extend_from_slice(chunk);
//!     let mut at = 0; // the caller's consumed offset into `buf`
//!     loop {
//!         let step = framer.next_frame(&buf[at..]);
//!         match &step {
//!             Step::Frame { range, .. } => frames.push(buf[at..][range.clone()].to_vec()),
//!             Step::NeedMore { .. } => {}
//!             Step::Garbage { error, .. } => {
//!                 let mut reply = Vec::new();
//!                 error.write_reply(&mut reply); // send it, then carry on
//!             }
//!             Step::Close(_) => return, // close the connection
//!         }
//!         at += step.consumed();
//!         if let Step::NeedMore { .. } = step {
//!             break;
//!         }
//!     }
//!     buf.drain(..at);
//! }
//! assert_eq!(frames[0], br#"{"jsonrpc":"2.0","id":1,"method":"a"}"#);
//! assert_eq!(frames[1], br#"{"jsonrpc":"2.0","id":2,"method":"b"}"#);
//! assert!(buf.is_empty());
//! ```
//!
//! Each framer also writes outgoing messages in its framing
//! ([`Framer::encode`]).

mod concat;
mod error;
mod lines;
mod lsp;
mod structural;

use core::ops::Range;

pub use concat::Concatenated;
pub use error::FrameError;
#[cfg(feature = "server")]
pub(crate) use error::Kind as FrameErrorKind;
pub use lines::Lines;
pub use lsp::Lsp;

/// Default frame size limit: 5 MiB, the parser's default message limit
/// ([`Parser::DEFAULT_MAX_MESSAGE_LEN`](crate::Parser::DEFAULT_MAX_MESSAGE_LEN)).
pub const DEFAULT_MAX_FRAME: usize = crate::Parser::DEFAULT_MAX_MESSAGE_LEN;

/// What a framer found in the bytes it was given; see the
/// [module docs](self) for the calling contract.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the caller must drop `consumed()` bytes before the next call"]
pub enum Step {
    /// One complete message: `buf[range]`. Drop `consumed` bytes (the
    /// message, its framing, and anything skipped before it) before the next
    /// call, after reading the message.
    Frame {
        /// Where the message lies in `buf`.
        range: Range<usize>,
        /// Bytes to drop from the front of `buf`.
        consumed: usize,
    },
    /// No complete message in `buf` yet: drop `consumed` bytes (whitespace
    /// between messages, or the rest of a message being thrown away; often
    /// zero), then call again when more bytes have arrived.
    NeedMore {
        /// Bytes to drop from the front of `buf`.
        consumed: usize,
    },
    /// A message was refused (over the size limit, say) and skipped; the
    /// stream continues after it. Drop `consumed` bytes, answer with `error`
    /// ([`FrameError::write_reply`]), and call again. The rest of the refused
    /// message, if it has not all arrived yet, is dropped through later steps'
    /// `consumed` without being buffered.
    Garbage {
        /// Bytes to drop from the front of `buf`.
        consumed: usize,
        /// Why the message was refused.
        error: FrameError,
    },
    /// The stream cannot be resynchronised: close the connection (after an
    /// error reply, if you like). Nothing is consumed, and every later call
    /// returns the same step until [`Framer::reset`].
    Close(FrameError),
}

impl Step {
    /// The bytes to drop from the front of the buffer before the next call
    /// (zero for [`Step::Close`]).
    #[inline]
    pub fn consumed(&self) -> usize {
        match *self {
            Step::Frame { consumed, .. }
            | Step::NeedMore { consumed }
            | Step::Garbage { consumed, .. } => consumed,
            Step::Close(_) => 0,
        }
    }
}

/// An incremental framer: cuts incoming bytes into messages and writes
/// outgoing messages in the same framing.
///
/// Implemented by [`Lines`], [`Lsp`] and [`Concatenated`], so that a
/// transport can be written once over `F: Framer`.
pub trait Framer {
    /// Looks for the next message in `buf`, every byte received and not yet
    /// consumed, resuming the scan where the previous call stopped. See the
    /// [module docs](self) for what the caller does with each [`Step`].
    fn next_frame(&mut self, buf: &[u8]) -> Step;

    /// Appends `message` to `out` framed for this transport.
    fn encode(&self, message: &[u8], out: &mut Vec<u8>);

    /// Forgets every byte seen (the caller has cleared its buffer, or the
    /// framer is reused for another connection), a [`Step::Close`] included;
    /// the limits are kept.
    fn reset(&mut self);

    /// The input has ended with `buf` left over after the last
    /// [`Step::NeedMore`]: returns where a last message lies in it, if the
    /// framing lets one end without its terminator.
    ///
    /// The default, used by [`Lines`] and [`Concatenated`], returns the
    /// leftover bytes without surrounding whitespace, if there are any: a
    /// last line without its newline is a message (`printf '{...}' |
    /// server`), and a message cut short gets the parser's -32700 rather
    /// than vanishing. [`Lsp`] returns `None`: its frames end where their
    /// `Content-Length` says, so the leftover is a frame cut short, which
    /// the stream driver (`server::stream::Driver`, feature `server`)
    /// answers with a -32700 (`"message cut short by the end of the
    /// input"`) when it is more than whitespace.
    ///
    /// ```
    /// use rpcwire::frame::{Framer, Lines, Step};
    ///
    /// let mut framer = Lines::new();
    /// let buf = br#"{"jsonrpc":"2.0","method":"exit"}"#;
    /// assert_eq!(framer.next_frame(buf), Step::NeedMore { consumed: 0 });
    /// let last = framer.finish(buf).unwrap();
    /// assert_eq!(&buf[last], &buf[..]);
    /// ```
    fn finish(&mut self, buf: &[u8]) -> Option<Range<usize>> {
        let start = buf.iter().position(|b| !crate::scan::is_ws(*b))?;
        let end = buf.iter().rposition(|b| !crate::scan::is_ws(*b))? + 1;
        Some(start..end)
    }

    /// Whether every message is one JSON object or array with nothing
    /// around it but whitespace, so that the parser finds where it ends
    /// ([`Concatenated`]; default `false`). The stream transports' `Driver`
    /// (feature `server`) then reads and frames each
    /// message in one pass
    /// ([`Parser::parse_prefix`](crate::Parser::parse_prefix)), and asks the
    /// framer only about a message cut by the end of the bytes received,
    /// or one that is not valid JSON-RPC; after each frame it returns,
    /// the caller moves on with [`skip`](Framer::skip).
    fn parser_frames(&self) -> bool {
        false
    }

    /// When [`parser_frames`](Framer::parser_frames): the largest message
    /// the parser may take, the framer's own frame limit (default: none),
    /// so that a message over it is refused however the reads cut the
    /// stream.
    fn parsed_frame_limit(&self) -> usize {
        usize::MAX
    }

    /// `consumed` bytes at the front of the buffer were taken without the
    /// framer (framed by the parser, see
    /// [`parser_frames`](Framer::parser_frames)): the framer forgets what
    /// it scanned past its last frame and starts afresh after them,
    /// keeping the stream offsets its errors report. Called between frames
    /// only, never after [`Step::Garbage`] or [`Step::Close`]. The default
    /// is [`reset`](Framer::reset).
    fn skip(&mut self, consumed: usize) {
        let _ = consumed;
        self.reset();
    }

    /// After a [`Step::Garbage`] that refused a message as too large
    /// (`error`, having consumed `consumed` bytes of the buffer it was
    /// given): where in that buffer the refused message starts, if the
    /// framer says ([`Lines`] and [`Concatenated`] do; [`Lsp`] refuses a
    /// message from its header, before its body is read; default `None`). A two-way transport
    /// reads the message's first bytes there for the id of an answer, so
    /// that the request it answers ends at once rather than at its
    /// deadline (an answer too large to read is not answered).
    fn refused_start(&self, error: &FrameError, consumed: usize) -> Option<usize> {
        let _ = (error, consumed);
        None
    }

    /// Whether framing can go on after a message that is not JSON (default
    /// `true`): messages delimited apart from their JSON, by a newline or
    /// a `Content-Length`, are. [`Concatenated`] returns `false`: its next
    /// message is found only by following this one's brackets and strings,
    /// which bytes that are not JSON may leave open for good (`[1}` or an
    /// unescaped quote, and every message after it is swallowed). The
    /// stream transports' `Driver` (feature `server`) then answers the
    /// first such message with -32700 and closes the connection
    /// (`CloseReason::NotJson`), as geth does over IPC; it reads the
    /// message with the parser to tell, since the framer may never find
    /// its end.
    fn resynchronises(&self) -> bool {
        true
    }
}

/// [`Framer::refused_start`] for a framer whose errors give the stream
/// offset where the refused message starts, and whose `stream` (the
/// offset of the buffer's first byte) has moved past the `consumed` bytes.
fn refused_start_in_buf(stream: u64, error: &FrameError, consumed: usize) -> Option<usize> {
    let buf_start = stream.checked_sub(consumed as u64)?;
    let start = error.offset().checked_sub(buf_start)?;
    usize::try_from(start).ok().filter(|_| error.is_too_large())
}

impl<F: Framer + ?Sized> Framer for &mut F {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        (**self).next_frame(buf)
    }
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        (**self).encode(message, out)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn finish(&mut self, buf: &[u8]) -> Option<Range<usize>> {
        (**self).finish(buf)
    }
    fn parser_frames(&self) -> bool {
        (**self).parser_frames()
    }
    fn parsed_frame_limit(&self) -> usize {
        (**self).parsed_frame_limit()
    }
    fn skip(&mut self, consumed: usize) {
        (**self).skip(consumed)
    }
    fn refused_start(&self, error: &FrameError, consumed: usize) -> Option<usize> {
        (**self).refused_start(error, consumed)
    }
    fn resynchronises(&self) -> bool {
        (**self).resynchronises()
    }
}

impl<F: Framer + ?Sized> Framer for Box<F> {
    fn next_frame(&mut self, buf: &[u8]) -> Step {
        (**self).next_frame(buf)
    }
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        (**self).encode(message, out)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn finish(&mut self, buf: &[u8]) -> Option<Range<usize>> {
        (**self).finish(buf)
    }
    fn parser_frames(&self) -> bool {
        (**self).parser_frames()
    }
    fn parsed_frame_limit(&self) -> usize {
        (**self).parsed_frame_limit()
    }
    fn skip(&mut self, consumed: usize) {
        (**self).skip(consumed)
    }
    fn refused_start(&self, error: &FrameError, consumed: usize) -> Option<usize> {
        (**self).refused_start(error, consumed)
    }
    fn resynchronises(&self) -> bool {
        (**self).resynchronises()
    }
}

#[cfg(test)]
mod tests;
