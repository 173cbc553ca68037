//! [`RpcError`]: the error a handler answers with.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;

use crate::codes::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::peer::{DecodeError, PeerError};

/// An error a handler answers with: code, message and optional `data`.
///
/// Handlers return `Result<_, E>` for any `E: Into<RpcError>`, so `?` works
/// on the common error types, each with a documented code:
///
/// | from | code | `data` |
/// | --- | --- | --- |
/// | `serde_json::Error` (decoding params) | -32602 Invalid params | `{"reason": …}` |
/// | `std::num::ParseIntError`, `ParseFloatError`, `TryFromIntError`, `std::str::Utf8Error`, `std::string::FromUtf8Error` | -32602 Invalid params | `{"reason": …}` |
/// | `std::io::Error` | -32603 Internal error | `{"reason": …, "kind": …}` |
/// | `std::fmt::Error`, `Box<dyn std::error::Error + Send + Sync>` | -32603 Internal error | `{"reason": …}` |
/// | [`PeerError`] (a request this side sent got no answer) | -32603, message `Request to the peer failed: …` | `{"reason": …}` |
/// | [`DecodeError`] `Rpc` (the other side answered with an error) | -32603, message `The peer answered with an error` | `{"reason": …, "error": {its code, message, data}}` |
/// | [`DecodeError`] `Json` (its result did not decode) | -32603, message `The peer's result did not decode` | `{"reason": …}` |
///
/// ```
/// let e = rpcwire::RpcError::invalid_params("expected a block tag")
///     .with_data(&serde_json::json!({"field": "block", "expected": ["latest", "safe"]}));
/// assert_eq!(e.code(), -32602);
/// let io: rpcwire::RpcError = std::io::Error::other("disk on fire").into();
/// assert_eq!(io.code(), rpcwire::codes::INTERNAL_ERROR);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RpcError(Box<ErrorParts>);

/// Boxed so that a handler's `Result<Done, RpcError>` is one word, returned
/// in a register on the success path.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ErrorParts {
    code: i32,
    message: Cow<'static, str>,
    /// Serialized JSON.
    data: Option<Box<str>>,
    /// The marker a [`Reply`](super::Reply) returns for a result past the
    /// size limit: the dispatcher answers with its configured too-large
    /// error.
    too_large: bool,
    /// A whole error object to send byte for byte (a gateway passing on
    /// its upstream's error unchanged).
    raw: Option<Box<[u8]>>,
}

/// Whether `object` is a JSON-RPC error object both serde_json clients
/// and this crate's reader ([`crate::parse_response`]) read as one: one
/// JSON object with an integer `code` and a string `message` (other
/// members are its own), no member repeated.
fn is_error_object(object: &[u8]) -> bool {
    // serde_json: one value and nothing after it, a `code` that is an
    // integer of `i64` (`-0` reads as a float there), member names and
    // the message that are text (an unpaired surrogate escape is refused;
    // serde_json passes over one in a value it skips, but a client reading
    // the message as a `String` fails on it).
    #[derive(serde::Deserialize)]
    struct Members<'a> {
        code: serde_json::Number,
        #[serde(borrow)]
        #[allow(dead_code)]
        message: Cow<'a, str>,
    }
    let serde_reads = serde_json::from_slice::<Members<'_>>(object).is_ok_and(|m| m.code.is_i64());
    if !serde_reads {
        return false;
    }
    // This crate's reader, without its default size and depth limits (an
    // upstream's error may be larger than a request): an object (serde's
    // derive also takes an array in the members' order) whose members
    // appear once each.
    const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":0,"error":"#;
    let mut reply = Vec::with_capacity(HEAD.len() + object.len() + 1);
    reply.extend_from_slice(HEAD);
    reply.extend_from_slice(object);
    reply.push(b'}');
    let reader = crate::Parser::new()
        .max_message_len(usize::MAX)
        .max_depth(crate::scan::MAX_DEPTH_LIMIT);
    let arena = bumpalo::Bump::new();
    matches!(
        reader.parse_response(&reply, &arena),
        Ok(crate::response::ResponseMessage::Single(r)) if r.is_error()
    )
}

impl RpcError {
    /// An error with any code; -32000 to -32099 are for server-defined
    /// errors.
    pub fn new(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError(Box::new(ErrorParts {
            code,
            message: message.into(),
            data: None,
            too_large: false,
            raw: None,
        }))
    }

    /// An error whose whole `error` object is already JSON (an upstream
    /// node's error, passed on byte for byte, `data` included); `code` is
    /// its code, for observers. Checked once here: `object` must be a JSON
    /// object with an integer `code` (within `i64`, not `-0`) and a string
    /// `message` (JSON-RPC 2.0, 5.1), no member repeated and every member
    /// name text, as serde_json and [`parse_response`](crate::parse_response)
    /// read an error (any size, nested less than 1,024 levels); anything
    /// else becomes -32603 whose `data` says so (it was written into the
    /// reply as it was, `"error":not json`).
    ///
    /// ```
    /// let upstream = br#"{"code":3,"message":"execution reverted","data":"0x08c379a0"}"#;
    /// let e = rpcwire::RpcError::raw(3, &upstream[..]);
    /// assert_eq!(e.raw_object(), Some(&upstream[..]));
    /// let e = rpcwire::RpcError::raw(3, &b"not json"[..]);
    /// assert_eq!((e.code(), e.raw_object()), (-32603, None));
    /// ```
    pub fn raw(code: i32, object: impl Into<Box<[u8]>>) -> Self {
        let object = object.into();
        if !is_error_object(&object) {
            #[derive(Serialize)]
            struct Refused {
                reason: &'static str,
            }
            return RpcError::new(INTERNAL_ERROR, "Internal error").with_data(&Refused {
                reason: "a raw error object that is not a JSON-RPC error object (a JSON object with an integer code and a string message)",
            });
        }
        let mut e = RpcError::new(code, "");
        e.0.raw = Some(object);
        e
    }

    /// The whole error object, for an error made with
    /// [`raw`](RpcError::raw).
    pub fn raw_object(&self) -> Option<&[u8]> {
        self.0.raw.as_deref()
    }

    /// -32602 Invalid params, with a message saying what is wrong.
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// -32603 Internal error.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        RpcError::new(INTERNAL_ERROR, message)
    }

    /// The result would make the reply exceed the response size limit: the
    /// dispatcher answers with its too-large error instead.
    pub fn too_large() -> Self {
        let mut e = RpcError::new(crate::codes::SERVER_ERROR, "Response too large");
        e.0.too_large = true;
        e
    }

    /// Whether this is the [`too_large`](RpcError::too_large) marker.
    pub fn is_too_large(&self) -> bool {
        self.0.too_large
    }

    /// Attaches `data`, serialized now. A value that fails to serialize is
    /// replaced by a string saying so.
    pub fn with_data<T: Serialize + ?Sized>(mut self, data: &T) -> Self {
        let json = serde_json::to_string(data).unwrap_or_else(|e| {
            serde_json::to_string(&format!("unserializable data: {e}")).unwrap_or_default()
        });
        self.0.data = Some(json.into_boxed_str());
        self
    }

    /// Attaches `data` that is already JSON. Checked once here: text that
    /// is not one JSON value is attached as a JSON string of that text
    /// instead (it was written as it was: `"data":}` for an empty one).
    ///
    /// ```
    /// let e = rpcwire::RpcError::internal("x").with_raw_data(r#"{"gas":21000}"#);
    /// assert_eq!(e.data(), Some(r#"{"gas":21000}"#));
    /// let e = rpcwire::RpcError::internal("x").with_raw_data("{oops");
    /// assert_eq!(e.data(), Some(r#""{oops""#));
    /// ```
    pub fn with_raw_data(mut self, json: impl Into<Box<str>>) -> Self {
        let json = json.into();
        if crate::scan::is_one_value(json.as_bytes()) {
            self.0.data = Some(json);
            self
        } else {
            self.with_data(&*json)
        }
    }

    /// The code.
    pub fn code(&self) -> i32 {
        self.0.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The serialized `data`, if any.
    pub fn data(&self) -> Option<&str> {
        self.0.data.as_deref()
    }

    /// -32602 for a value that could not be decoded, with `reason` in
    /// `data` (at most [`MAX_ECHOED_REASON`] bytes of it as written,
    /// its middle left out for `…` and `data.truncated` then: serde's
    /// reasons quote the client's value whole, `invalid type: string
    /// "…", expected u64`, and a long one made the error larger than a
    /// small response limit, so the client got "Response too large" and a
    /// batch's later entries did not run; the end, what was expected, is
    /// kept) and the offset in the message when known.
    pub(crate) fn params(reason: &str, offset: Option<usize>) -> Self {
        #[derive(Serialize)]
        struct Data<'a> {
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            offset: Option<usize>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            truncated: bool,
        }
        let shortened = shorten_reason(reason);
        RpcError::invalid_params("Invalid params").with_data(&Data {
            reason: shortened.as_deref().unwrap_or(reason),
            offset,
            truncated: shortened.is_some(),
        })
    }

    pub(crate) fn internal_because(reason: &str) -> Self {
        RpcError::internal("Internal error").with_data(&super::reply::Reason { reason })
    }
}

/// The most bytes a -32602's `data.reason` holds, as written (escapes
/// counted); see [`RpcError::params`].
pub(crate) const MAX_ECHOED_REASON: usize = 256;

/// The most bytes, as written, kept of a long reason's end: serde's
/// `, expected …` (`, expected a borrowed string`, `, expected struct
/// Transaction with 3 elements`).
const KEPT_REASON_END: usize = 96;

/// `reason` with its middle left out for `…` so that at most
/// [`MAX_ECHOED_REASON`] bytes are written; `None` when it fits whole.
fn shorten_reason(reason: &str) -> Option<String> {
    use super::reply::echo_cut;
    echo_cut(reason, MAX_ECHOED_REASON)?;
    // The end: the last characters whose escapes fit in its share.
    let mut end_written = 0;
    let end_start = reason
        .char_indices()
        .rev()
        .take_while(|(_, c)| {
            let mut utf8 = [0; 4];
            end_written += c
                .encode_utf8(&mut utf8)
                .bytes()
                .map(crate::write::escaped_len)
                .sum::<usize>();
            end_written <= KEPT_REASON_END
        })
        .last()
        .map_or(reason.len(), |(i, _)| i);
    let end = &reason[end_start..];
    let written = |text: &str| text.bytes().map(crate::write::escaped_len).sum::<usize>();
    let room = MAX_ECHOED_REASON - written(end) - '…'.len_utf8();
    let head = &reason[..end_start];
    let head = &head[..echo_cut(head, room).unwrap_or(head.len())];
    Some(format!("{head}…{end}"))
}

impl fmt::Debug for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcError")
            .field("code", &self.0.code)
            .field("message", &self.0.message)
            .field("data", &self.0.data)
            .finish()
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message(), self.code())
    }
}

impl std::error::Error for RpcError {}

impl From<serde_json::Error> for RpcError {
    /// A params decoding failure: -32602, with serde's explanation in
    /// `data` (without serde's "at line 1 column N", a position in text
    /// the handler chose, which the client may never have written). An I/O
    /// failure (`serde_json::from_reader`) is the server's: -32603 with
    /// its kind, as [`From<std::io::Error>`](#impl-From<Error>-for-RpcError).
    fn from(e: serde_json::Error) -> Self {
        if e.is_io() {
            return std::io::Error::from(e).into();
        }
        super::call::params_error(&e, None)
    }
}

impl From<std::io::Error> for RpcError {
    /// -32603, with the error and its kind in `data`.
    fn from(e: std::io::Error) -> Self {
        #[derive(Serialize)]
        struct Data<'a> {
            reason: &'a str,
            kind: &'a str,
        }
        let kind = format!("{:?}", e.kind());
        RpcError::internal("Internal error").with_data(&Data {
            reason: &e.to_string(),
            kind: &kind,
        })
    }
}

macro_rules! invalid_params_from {
    ($($t:ty),*) => {$(
        impl From<$t> for RpcError {
            /// -32602, with the reason in `data`: these errors come from
            /// reading a value the client sent.
            fn from(e: $t) -> Self {
                RpcError::params(&e.to_string(), None)
            }
        }
    )*};
}

invalid_params_from!(
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::num::TryFromIntError,
    std::str::Utf8Error,
    std::string::FromUtf8Error
);

impl From<std::fmt::Error> for RpcError {
    /// -32603.
    fn from(e: std::fmt::Error) -> Self {
        RpcError::internal_because(&e.to_string())
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for RpcError {
    /// -32603, with the error's text in `data`.
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        RpcError::internal_because(&e.to_string())
    }
}

impl From<PeerError> for RpcError {
    /// -32603, the message saying why (`Request to the peer failed: no
    /// response before the deadline`, `…: the connection closed`, …) and
    /// `data` `{"reason": …}` with the same words: a handler that asked
    /// the other side something and got no answer cannot answer its own
    /// caller, and its caller did nothing wrong.
    ///
    /// ```
    /// use rpcwire::peer::PeerError;
    /// let e = rpcwire::RpcError::from(PeerError::Timeout);
    /// assert_eq!(e.code(), -32603);
    /// assert_eq!(e.message(), "Request to the peer failed: no response before the deadline");
    /// ```
    fn from(e: PeerError) -> Self {
        let reason = e.to_string();
        RpcError::internal(format!("Request to the peer failed: {reason}"))
            .with_data(&super::reply::Reason { reason: &reason })
    }
}

impl From<DecodeError> for RpcError {
    /// -32603 either way, so that `?` works on
    /// `ctx.peer()…request(…).await?.decode::<T>()?` in a handler:
    ///
    /// * `Rpc(e)`, the other side answered with an error: wrapped, not
    ///   passed on. Its code answers the request this side sent, not the
    ///   call this handler answers: a client's -32602 (the params *this
    ///   side* sent it were wrong) or -32601 would tell this handler's
    ///   caller that *its* params or method were wrong. As MCP and LSP
    ///   servers calling their clients do, the call fails as an internal
    ///   error (message `The peer answered with an error`), the other
    ///   side's error whole in `data`: `{"reason": "<message> (<code>)",
    ///   "error": {"code": …, "message": …, "data": …}}`. A handler that
    ///   means to pass an error on matches `Rpc` itself.
    /// * `Json(e)`, the result did not decode into the type asked for:
    ///   message `The peer's result did not decode`, serde's explanation
    ///   in `data` `{"reason": …}`. Not -32602, which `serde_json::Error`
    ///   converts to: the bad value is the other side's answer, not this
    ///   call's params.
    ///
    /// ```
    /// # #[cfg(feature = "async")] {
    /// use rpcwire::dispatch::AsyncCall;
    /// use rpcwire::{Dispatcher, RpcError};
    /// use std::time::Duration;
    ///
    /// let d = Dispatcher::builder(())
    ///     .async_method("ask", |call: AsyncCall<()>| async move {
    ///         let peer = call.ctx.peer().ok_or_else(|| RpcError::internal("one-way transport"))?;
    ///         let answer: String = peer.request_raw("roots/list", None, Duration::from_secs(5)).await?.decode()?;
    ///         Ok::<_, RpcError>(answer)
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # }
    /// ```
    fn from(e: DecodeError) -> Self {
        #[derive(Serialize)]
        struct Wrapped<'a> {
            reason: &'a str,
            error: Theirs<'a>,
        }
        #[derive(Serialize)]
        struct Theirs<'a> {
            code: i64,
            message: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<&'a serde_json::value::RawValue>,
        }
        match &e {
            DecodeError::Rpc(theirs) => {
                // Their `data` is JSON the parser read; kept as is.
                let data = theirs.data.as_deref().and_then(|d| {
                    let text = std::str::from_utf8(d).ok()?;
                    serde_json::from_str::<&serde_json::value::RawValue>(text).ok()
                });
                RpcError::internal("The peer answered with an error").with_data(&Wrapped {
                    reason: &e.to_string(),
                    error: Theirs {
                        code: theirs.code,
                        message: &theirs.message,
                        data,
                    },
                })
            }
            DecodeError::Json(json) => RpcError::internal("The peer's result did not decode")
                .with_data(&super::reply::Reason {
                    reason: &json.to_string(),
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::{OwnedError, SendError};

    #[test]
    fn peer_errors_are_internal_errors_saying_why() {
        let cases = [
            (PeerError::Timeout, "no response before the deadline"),
            (PeerError::Closed, "the connection closed"),
            (PeerError::Cancelled, "the request was cancelled"),
            (
                PeerError::Send(SendError::Full),
                "the connection's send queue is full",
            ),
            (PeerError::Params, "the params could not be serialized"),
        ];
        for (e, why) in cases {
            let e = RpcError::from(e);
            assert_eq!(e.code(), INTERNAL_ERROR);
            assert_eq!(e.message(), format!("Request to the peer failed: {why}"));
            let data: serde_json::Value = serde_json::from_str(e.data().unwrap()).unwrap();
            assert_eq!(data, serde_json::json!({ "reason": why }));
        }
    }

    #[test]
    fn a_peer_error_answer_is_wrapped_whole() {
        let theirs = OwnedError {
            code: -32602,
            message: "bad \"uri\"".into(),
            data: Some(bytes::Bytes::from_static(br#"{"field":"uri"}"#)),
        };
        let e = RpcError::from(DecodeError::Rpc(theirs));
        assert_eq!(e.code(), INTERNAL_ERROR);
        assert_eq!(e.message(), "The peer answered with an error");
        let data: serde_json::Value = serde_json::from_str(e.data().unwrap()).unwrap();
        assert_eq!(
            data,
            serde_json::json!({
                "reason": "bad \"uri\" (-32602)",
                "error": {"code": -32602, "message": "bad \"uri\"", "data": {"field": "uri"}},
            })
        );
        // Without data, none is made up.
        let bare = OwnedError {
            code: 7,
            message: "no".into(),
            data: None,
        };
        let e = RpcError::from(DecodeError::Rpc(bare));
        let data: serde_json::Value = serde_json::from_str(e.data().unwrap()).unwrap();
        assert_eq!(
            data["error"],
            serde_json::json!({"code": 7, "message": "no"})
        );
    }

    #[test]
    fn a_result_that_does_not_decode_is_an_internal_error_not_invalid_params() {
        let json = serde_json::from_str::<u64>("\"x\"").unwrap_err();
        let why = json.to_string();
        let e = RpcError::from(DecodeError::Json(json));
        assert_eq!(e.code(), INTERNAL_ERROR);
        assert_eq!(e.message(), "The peer's result did not decode");
        let data: serde_json::Value = serde_json::from_str(e.data().unwrap()).unwrap();
        assert_eq!(data, serde_json::json!({ "reason": why }));
    }
}
