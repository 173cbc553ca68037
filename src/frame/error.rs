//! The framers' error: small, `Copy`, with a stream offset and a JSON-RPC code.

use core::fmt;

/// JSON-RPC 2.0 "Invalid Request".
const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC 2.0 "Parse error".
const PARSE_ERROR: i32 = -32700;

/// Why a framer refused a message ([`Step::Garbage`](super::Step::Garbage))
/// or gave up on a stream ([`Step::Close`](super::Step::Close)).
///
/// It records what went wrong and where, as an offset in the connection's
/// byte stream (every byte the framer has been given since it was created or
/// [reset](super::Framer::reset)), and maps to the JSON-RPC code of the
/// error reply: -32600 for a message over a size limit, -32700 for bytes
/// that are not a message. Its exact cause is private so that it can grow;
/// use [`code`](FrameError::code), [`is_too_large`](FrameError::is_too_large)
/// and [`limit`](FrameError::limit).
///
/// ```
/// use rpcwire::frame::{Framer, Lsp, Step};
///
/// let mut lsp = Lsp::new();
/// let Step::Close(err) = lsp.next_frame(b"Content-Length: 99999999999\r\n\r\n") else { panic!() };
/// assert_eq!(err.code(), -32600);
/// assert_eq!(err.limit(), Some(5 * 1024 * 1024));
/// assert_eq!(err.to_string(), "message larger than the limit of 5242880 bytes at stream offset 0");
/// let mut reply = Vec::new();
/// err.write_reply(&mut reply);
/// assert_eq!(
///     reply,
///     br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"message larger than the size limit","limit":5242880}}}"#
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    offset: u64,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A message over the frame size limit; the offset is where it starts.
    TooLarge { limit: usize },
    /// An LSP header section over its limit; the offset is where it starts.
    HeaderTooLarge { limit: usize },
    /// A header line that is not `Name: value\r\n`; the offset is the line's.
    MalformedHeader,
    /// An LSP message that starts with `{` or `[`: JSON sent without its
    /// header section, most likely by a client framing with newlines; the
    /// offset is where it starts.
    MissingHeaders,
    /// A header section without `Content-Length`; the offset is where the
    /// section starts.
    MissingLength,
    /// A `Content-Length` value that is not a decimal integer below 2^64;
    /// the offset is the header line's.
    InvalidLength,
    /// Two `Content-Length` headers with different values; the offset is the
    /// second one's.
    ConflictingLength,
    /// A byte that cannot start a message (concatenated JSON: anything but
    /// whitespace, `{` or `[`); the offset is the byte's.
    UnexpectedByte(u8),
    /// The input ended inside a message whose framing says it goes on (an
    /// LSP header section or body shorter than its `Content-Length`); the
    /// offset is where the message starts.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // the stream driver's
    CutShort,
}

impl FrameError {
    #[inline]
    pub(crate) const fn new(kind: Kind, offset: u64) -> FrameError {
        FrameError { offset, kind }
    }

    #[cfg(test)]
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Offset in the connection's byte stream at which the problem was found:
    /// where the refused message or header line starts, or the unexpected
    /// byte.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the frame's header section was larger than its limit (LSP),
    /// rather than its body.
    pub fn is_header_too_large(&self) -> bool {
        matches!(self.kind, Kind::HeaderTooLarge { .. })
    }

    /// Whether a size limit was exceeded (a message, or an LSP header
    /// section); otherwise the bytes were not a well-formed frame.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self.kind,
            Kind::TooLarge { .. } | Kind::HeaderTooLarge { .. }
        )
    }

    /// The limit that was exceeded, in bytes, if [`is_too_large`](Self::is_too_large).
    pub fn limit(&self) -> Option<usize> {
        match self.kind {
            Kind::TooLarge { limit } | Kind::HeaderTooLarge { limit } => Some(limit),
            _ => None,
        }
    }

    /// The JSON-RPC 2.0 code of the error reply: -32600 (Invalid Request) for
    /// a message over the size limit, as the parser answers one; -32700
    /// (Parse error) for bytes that are not a message.
    pub fn code(&self) -> i32 {
        if self.is_too_large() {
            INVALID_REQUEST
        } else {
            PARSE_ERROR
        }
    }

    /// The standard message for [`code`](Self::code): `"Invalid Request"` or
    /// `"Parse error"`. The detail is in [`Display`](fmt::Display).
    pub fn message(&self) -> &'static str {
        if self.is_too_large() {
            "Invalid Request"
        } else {
            "Parse error"
        }
    }

    /// Writes this error's JSON `data` member value: the reason, and the
    /// limit or the stream offset, in the shape of [`Error::write_data`](crate::Error::write_data).
    pub fn write_data(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"reason\":\"");
        // Every reason is plain ASCII without quotes or backslashes.
        out.extend_from_slice(self.reason().as_bytes());
        if let Kind::UnexpectedByte(b) = self.kind {
            out.extend_from_slice(b" 0x");
            out.extend_from_slice(&hex_byte(b));
        }
        out.push(b'"');
        match self.limit() {
            Some(limit) => {
                out.extend_from_slice(b",\"limit\":");
                push_decimal(out, limit as u64);
            }
            None => {
                out.extend_from_slice(b",\"offset\":");
                push_decimal(out, self.offset);
            }
        }
        out.push(b'}');
    }

    /// Appends the whole error reply a transport sends for this error, with
    /// `id: null` (no request could be read):
    /// `{"jsonrpc":"2.0","id":null,"error":{"code":…,"message":…,"data":…}}`.
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        // Both codes are negative.
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-");
        push_decimal(out, self.code().unsigned_abs() as u64);
        out.extend_from_slice(b",\"message\":\"");
        out.extend_from_slice(self.message().as_bytes());
        out.extend_from_slice(b"\",\"data\":");
        self.write_data(out);
        out.extend_from_slice(b"}}");
    }

    /// The reason, as the `data` member names it.
    fn reason(&self) -> &'static str {
        match self.kind {
            Kind::TooLarge { .. } => "message larger than the size limit",
            Kind::HeaderTooLarge { .. } => "header section larger than its size limit",
            Kind::MalformedHeader => "malformed header line",
            Kind::MissingHeaders => {
                "JSON without a header section: expected Content-Length: N, a blank line, then the message"
            }
            Kind::MissingLength => "missing Content-Length header",
            Kind::InvalidLength => "invalid Content-Length value",
            Kind::ConflictingLength => "conflicting Content-Length headers",
            Kind::UnexpectedByte(_) => "unexpected byte between messages",
            Kind::CutShort => "message cut short by the end of the input",
        }
    }
}

/// Appends `v` in decimal.
pub(super) fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn hex_byte(b: u8) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::TooLarge { limit } => {
                write!(f, "message larger than the limit of {limit} bytes")?
            }
            Kind::HeaderTooLarge { limit } => {
                write!(f, "header section larger than the limit of {limit} bytes")?
            }
            Kind::UnexpectedByte(b) => write!(f, "unexpected byte 0x{b:02x} between messages")?,
            _ => f.write_str(self.reason())?,
        }
        write!(f, " at stream offset {}", self.offset)
    }
}

impl fmt::Debug for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameError")
            .field("code", &self.code())
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .finish()
    }
}

impl std::error::Error for FrameError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DispatcherBuilder::max_response_len` says a transport's own
    /// refusals are at most 256 bytes: every kind, at the largest offset
    /// and limit.
    #[test]
    fn replies_fit_in_256_bytes() {
        let kinds = [
            Kind::TooLarge { limit: usize::MAX },
            Kind::HeaderTooLarge { limit: usize::MAX },
            Kind::MalformedHeader,
            Kind::MissingHeaders,
            Kind::MissingLength,
            Kind::InvalidLength,
            Kind::ConflictingLength,
            Kind::UnexpectedByte(0xff),
            Kind::CutShort,
        ];
        for kind in kinds {
            let mut out = Vec::new();
            FrameError::new(kind, u64::MAX).write_reply(&mut out);
            assert!(
                out.len() <= 256,
                "{} bytes: {}",
                out.len(),
                String::from_utf8_lossy(&out)
            );
            serde_json::from_slice::<serde_json::Value>(&out).unwrap();
        }
    }

    #[test]
    fn messages_codes_and_data() {
        // (error, Display, code, data)
        let table = [
            (
                FrameError::new(Kind::TooLarge { limit: 10 }, 3),
                "message larger than the limit of 10 bytes at stream offset 3",
                -32600,
                r#"{"reason":"message larger than the size limit","limit":10}"#,
            ),
            (
                FrameError::new(Kind::HeaderTooLarge { limit: 8192 }, 0),
                "header section larger than the limit of 8192 bytes at stream offset 0",
                -32600,
                r#"{"reason":"header section larger than its size limit","limit":8192}"#,
            ),
            (
                FrameError::new(Kind::MalformedHeader, 40),
                "malformed header line at stream offset 40",
                -32700,
                r#"{"reason":"malformed header line","offset":40}"#,
            ),
            (
                FrameError::new(Kind::MissingLength, 7),
                "missing Content-Length header at stream offset 7",
                -32700,
                r#"{"reason":"missing Content-Length header","offset":7}"#,
            ),
            (
                FrameError::new(Kind::InvalidLength, 0),
                "invalid Content-Length value at stream offset 0",
                -32700,
                r#"{"reason":"invalid Content-Length value","offset":0}"#,
            ),
            (
                FrameError::new(Kind::ConflictingLength, 21),
                "conflicting Content-Length headers at stream offset 21",
                -32700,
                r#"{"reason":"conflicting Content-Length headers","offset":21}"#,
            ),
            (
                FrameError::new(Kind::UnexpectedByte(b'x'), 12),
                "unexpected byte 0x78 between messages at stream offset 12",
                -32700,
                r#"{"reason":"unexpected byte between messages 0x78","offset":12}"#,
            ),
        ];
        for (e, display, code, data) in table {
            assert_eq!(e.to_string(), display);
            assert_eq!(e.code(), code);
            assert_eq!(
                e.message(),
                if code == -32600 {
                    "Invalid Request"
                } else {
                    "Parse error"
                }
            );
            let mut out = Vec::new();
            e.write_data(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), data);
            // The reply is valid JSON with the same code and data.
            let mut reply = Vec::new();
            e.write_reply(&mut reply);
            let v: serde_json::Value = serde_json::from_slice(&reply).unwrap();
            assert_eq!(v["id"], serde_json::Value::Null);
            assert_eq!(v["error"]["code"], code);
            assert_eq!(
                v["error"]["data"],
                serde_json::from_str::<serde_json::Value>(data).unwrap()
            );
        }
    }

    #[test]
    fn small() {
        assert!(core::mem::size_of::<FrameError>() <= 24);
    }
}
