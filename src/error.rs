//! The parser's error: small, `Copy`, with a byte offset and a JSON-RPC code.

use core::fmt;

pub(crate) use crate::codes::{INVALID_REQUEST, PARSE_ERROR};

/// Why a message, or one entry of a batch, was rejected.
///
/// The error is `Copy` and two words wide: it records *what* went wrong and the
/// byte offset *where*, and maps to the JSON-RPC error code the reply must
/// carry. Its exact cause is private so that it can grow; match on
/// [`category`](Error::category) or [`code`](Error::code) instead.
///
/// ```
/// let arena = rpcwire::bumpalo::Bump::new();
/// let err = rpcwire::parse(br#"{"jsonrpc":"2.0","method":"x",}"#, &arena).unwrap_err();
/// assert_eq!(err.code(), rpcwire::codes::PARSE_ERROR);
/// assert_eq!(err.offset(), 30);
/// assert_eq!(err.to_string(), "expected a member name at byte 30");
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error {
    offset: usize,
    kind: ErrorKind,
}

/// The coarse class of an [`Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Category {
    /// The bytes are not valid JSON (RFC 8259, UTF-8). Code -32700.
    Syntax,
    /// A configured limit was exceeded: nesting depth (-32700), message size
    /// or batch length (-32600).
    Limit,
    /// Valid JSON that is not a valid JSON-RPC 2.0 request or response
    /// (-32600).
    Envelope,
}

/// An envelope member, as named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Code,
    Message,
    Data,
}

impl Member {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Member::Jsonrpc => "jsonrpc",
            Member::Id => "id",
            Member::Method => "method",
            Member::Params => "params",
            Member::Result => "result",
            Member::Error => "error",
            Member::Code => "code",
            Member::Message => "message",
            Member::Data => "data",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    // Syntax.
    Eof,
    ExpectedValue,
    ExpectedColon,
    ExpectedKey,
    ExpectedObjectCommaOrEnd,
    ExpectedArrayCommaOrEnd,
    InvalidNumber,
    InvalidLiteral,
    InvalidEscape,
    ControlCharacter,
    InvalidUtf8,
    TrailingCharacters,
    // Limits.
    TooDeep {
        limit: u32,
    },
    /// The offset is the limit: the first byte beyond it.
    MessageTooLarge,
    /// The offset is where the first entry beyond the limit starts.
    BatchTooLarge {
        limit: u32,
    },
    /// The offset is where the id starts.
    IdTooLong {
        limit: u32,
    },
    // Envelope.
    NotObjectOrArray,
    EmptyBatch,
    NotObject,
    Missing(Member),
    Duplicate(Member),
    WrongVersion,
    WrongType(Member),
    /// `"id": null` where the parser refuses it.
    NullId,
    BothResultAndError,
    LoneSurrogate(Member),
    UndecodableName,
}

impl Error {
    #[inline]
    pub(crate) const fn new(kind: ErrorKind, offset: usize) -> Error {
        Error { offset, kind }
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the input ended before the message did: a truncated message.
    pub fn is_eof(&self) -> bool {
        self.kind == ErrorKind::Eof
    }

    /// Whether the bytes are not JSON (a syntax error, not a message cut
    /// short): a framer that finds messages by their brackets and quotes
    /// cannot be trusted after them.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the stream driver's
    pub(crate) fn is_not_json(&self) -> bool {
        self.category() == Category::Syntax && !self.is_eof()
    }

    /// Byte offset in the input at which the problem was found.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The coarse class of the error.
    pub fn category(&self) -> Category {
        use ErrorKind::*;
        match self.kind {
            Eof
            | ExpectedValue
            | ExpectedColon
            | ExpectedKey
            | ExpectedObjectCommaOrEnd
            | ExpectedArrayCommaOrEnd
            | InvalidNumber
            | InvalidLiteral
            | InvalidEscape
            | ControlCharacter
            | InvalidUtf8
            | TrailingCharacters => Category::Syntax,
            TooDeep { .. } | MessageTooLarge | BatchTooLarge { .. } | IdTooLong { .. } => {
                Category::Limit
            }
            NotObjectOrArray | EmptyBatch | NotObject | Missing(_) | Duplicate(_)
            | WrongVersion | WrongType(_) | NullId | BothResultAndError | LoneSurrogate(_)
            | UndecodableName => Category::Envelope,
        }
    }

    /// The JSON-RPC 2.0 error code a reply to this error carries: -32700 for
    /// invalid JSON and for nesting beyond the depth limit, -32600 otherwise.
    pub fn code(&self) -> i32 {
        match self.kind {
            ErrorKind::TooDeep { .. } => PARSE_ERROR,
            _ => match self.category() {
                Category::Syntax => PARSE_ERROR,
                _ => INVALID_REQUEST,
            },
        }
    }

    /// The standard message for [`code`](Error::code): `"Parse error"` or
    /// `"Invalid Request"`. The detail is in [`Display`](fmt::Display).
    pub fn message(&self) -> &'static str {
        if self.code() == PARSE_ERROR {
            "Parse error"
        } else {
            "Invalid Request"
        }
    }

    /// The configured limit this error reports, if it is a limit error.
    pub fn limit(&self) -> Option<usize> {
        match self.kind {
            ErrorKind::TooDeep { limit } => Some(limit as usize),
            ErrorKind::MessageTooLarge => Some(self.offset),
            ErrorKind::BatchTooLarge { limit } => Some(limit as usize),
            ErrorKind::IdTooLong { limit } => Some(limit as usize),
            _ => None,
        }
    }

    /// Writes this error's JSON `data` member value: an object naming the
    /// problem and, for limit errors, the limit, so a client can fix its call.
    ///
    /// ```
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let err = rpcwire::parse(b"[1,2", &arena).unwrap_err();
    /// let mut data = Vec::new();
    /// err.write_data(&mut data);
    /// assert_eq!(data, br#"{"reason":"unexpected end of input","offset":4}"#);
    /// ```
    pub fn write_data<B: crate::dispatch::ReplyBuf + ?Sized>(&self, out: &mut B) {
        out.extend_from_slice(b"{\"reason\":\"");
        // Every reason is plain ASCII without quotes or backslashes, at most
        // a few dozen bytes: formatted on the stack.
        let mut reason = StackText::<96>::new();
        use fmt::Write;
        let _ = write!(reason, "{}", Reason(self.kind));
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\"");
        match self.kind {
            ErrorKind::TooDeep { limit }
            | ErrorKind::BatchTooLarge { limit }
            | ErrorKind::IdTooLong { limit } => push_field(out, "limit", limit as u64),
            ErrorKind::MessageTooLarge => push_field(out, "limit", self.offset as u64),
            _ => {}
        }
        if self.kind != ErrorKind::MessageTooLarge {
            push_field(out, "offset", self.offset as u64);
        }
        out.push(b'}');
    }
}

fn push_field<B: crate::dispatch::ReplyBuf + ?Sized>(out: &mut B, name: &str, value: u64) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    let mut buf = itoa_buf();
    out.extend_from_slice(fmt_u64(value, &mut buf));
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// Formats `v` in decimal into the tail of `buf`, returning the digits.
pub(crate) fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Text formatted on the stack; what does not fit is cut off.
struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    fn new() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let take = s.len().min(N - self.len);
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

struct Reason(ErrorKind);

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self.0 {
            Eof => f.write_str("unexpected end of input"),
            ExpectedValue => f.write_str("expected a JSON value"),
            ExpectedColon => f.write_str("expected ':'"),
            ExpectedKey => f.write_str("expected a member name"),
            ExpectedObjectCommaOrEnd => f.write_str("expected ',' or '}'"),
            ExpectedArrayCommaOrEnd => f.write_str("expected ',' or ']'"),
            InvalidNumber => f.write_str("invalid number"),
            InvalidLiteral => f.write_str("invalid literal"),
            InvalidEscape => f.write_str("invalid escape in string"),
            ControlCharacter => f.write_str("control character in string"),
            InvalidUtf8 => f.write_str("invalid UTF-8"),
            TrailingCharacters => f.write_str("trailing characters after the JSON value"),
            TooDeep { limit } => write!(f, "nesting deeper than the limit of {limit}"),
            MessageTooLarge => f.write_str("message larger than the size limit"),
            BatchTooLarge { limit } => write!(f, "batch longer than the limit of {limit} entries"),
            IdTooLong { limit } => write!(f, "id longer than the limit of {limit} bytes"),
            NotObjectOrArray => f.write_str("message is neither an object nor an array"),
            EmptyBatch => f.write_str("empty batch"),
            NotObject => f.write_str("batch entry is not an object"),
            Missing(m) => write!(f, "missing member '{}'", m.name()),
            Duplicate(m) => write!(f, "duplicate member '{}'", m.name()),
            WrongVersion => f.write_str("'jsonrpc' must be exactly \\\"2.0\\\""),
            WrongType(m) => write!(
                f,
                "member '{}' has the wrong type ({})",
                m.name(),
                expected(m)
            ),
            NullId => f.write_str("'id' must not be null (a string or a number)"),
            BothResultAndError => f.write_str("response has both 'result' and 'error'"),
            LoneSurrogate(m) => write!(f, "member '{}' has an unpaired surrogate escape", m.name()),
            UndecodableName => f.write_str("a member name has an unpaired surrogate escape"),
        }
    }
}

fn expected(m: Member) -> &'static str {
    match m {
        Member::Jsonrpc | Member::Method | Member::Message => "expected a string",
        Member::Id => "expected a string, number or null",
        Member::Params => "expected an array, object or null",
        Member::Error => "expected an object",
        Member::Code => "expected an integer",
        Member::Result | Member::Data => "expected a JSON value",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Written for logs, so the version quote is not JSON-escaped here.
        match self.kind {
            ErrorKind::WrongVersion => f.write_str("'jsonrpc' must be exactly \"2.0\"")?,
            kind => Reason(kind).fmt(f)?,
        }
        write!(f, " at byte {}", self.offset)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code())
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .finish()
    }
}

impl std::error::Error for Error {}

// Parsing functions return `Result<usize, Error>` on every hot path: at two
// words, with the discriminant in a niche of the kind, it comes back in
// registers instead of through memory.
const _: () = assert!(core::mem::size_of::<Error>() == 16);
const _: () = assert!(core::mem::size_of::<Result<usize, Error>>() == 16);
