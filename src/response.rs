//! Responses, as a gateway reads its upstream's answers and a two-way peer
//! reads the answers to its own requests: the id, and either the raw
//! `result` or the error's code, message and raw `data`. Read by
//! [`parse_response`](crate::parse_response) and
//! [`Parser::parse_incoming`](crate::Parser::parse_incoming) with the same
//! member rules as requests.

use core::fmt;

use crate::error::Error;
use crate::json::{JsonStr, RawJson};
use crate::message::Batch;
use crate::request::Id;

/// One parsed response message: a single response or a batch of them.
#[derive(Clone, Debug)]
pub enum ResponseMessage<'a> {
    /// A single valid response.
    Single(Response<'a>),
    /// A non-empty batch, validated, in order; each element is `Err` if it
    /// is not a valid response.
    Batch(Batch<'a, Result<Response<'a>, Error>>),
}

/// A JSON-RPC 2.0 response, borrowed from the message.
///
/// ```
/// use rpcwire::response::ResponseMessage;
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse_response(br#"{"jsonrpc":"2.0","id":"a","result":{"number":"0x1"}}"#, &arena)?;
/// let ResponseMessage::Single(response) = msg else { unreachable!() };
/// assert_eq!(response.id().as_bytes(), br#""a""#);
/// assert_eq!(response.result().unwrap().as_bytes(), br#"{"number":"0x1"}"#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub(crate) id: Id<'a>,
    pub(crate) outcome: Result<RawJson<'a>, ErrorObject<'a>>,
}

impl<'a> Response<'a> {
    /// The id, byte for byte (`null` when the server could not read the
    /// request's id).
    pub fn id(&self) -> Id<'a> {
        self.id
    }

    /// The raw `result`, or the error object.
    pub fn result(&self) -> Result<RawJson<'a>, ErrorObject<'a>> {
        self.outcome
    }

    /// Whether the response carries an error.
    pub fn is_error(&self) -> bool {
        self.outcome.is_err()
    }
}

/// The `error` member of a response: its code, message and `data`, and the
/// whole object byte for byte, for a gateway that passes an upstream's
/// error on unchanged.
///
/// ```
/// use rpcwire::response::ResponseMessage;
/// let arena = rpcwire::bumpalo::Bump::new();
/// let reply = br#"{"jsonrpc":"2.0","id":4,"error":{ "message": "execution reverted", "code": 3, "data": "0x08c3" }}"#;
/// let ResponseMessage::Single(response) = rpcwire::parse_response(reply, &arena)? else { unreachable!() };
/// let error = response.result().unwrap_err();
/// assert_eq!((error.code(), error.message().as_str()), (3, Some("execution reverted")));
/// assert_eq!(error.data().unwrap().as_bytes(), br#""0x08c3""#);
/// // Passed on as the upstream wrote it, spacing and member order kept.
/// assert_eq!(error.as_bytes(), br#"{ "message": "execution reverted", "code": 3, "data": "0x08c3" }"#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct ErrorObject<'a> {
    pub(crate) code: i64,
    pub(crate) message: JsonStr<'a>,
    /// The whole object. `data` is found in it when asked for rather than
    /// kept: a response stays the size it was (results, the hot path, are
    /// moved and stored in batches as `Response`s too).
    pub(crate) raw: RawJson<'a>,
}

impl<'a> ErrorObject<'a> {
    /// The error code.
    pub fn code(&self) -> i64 {
        self.code
    }

    /// The message, still escaped; see [`JsonStr`].
    pub fn message(&self) -> JsonStr<'a> {
        self.message
    }

    /// The raw `data`, if present (found by a walk over the object's
    /// members, which are few).
    pub fn data(&self) -> Option<RawJson<'a>> {
        crate::envelope::error_data(self.raw.as_bytes()).map(RawJson::from_validated)
    }

    /// The whole error object, `{` to `}`, exactly as it appeared in the
    /// message (member order, spacing, escapes and unknown members kept):
    /// what a gateway writes back to its client to pass the error on
    /// unchanged ([`write_error_raw`](crate::peer::write_error_raw)).
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw.as_bytes()
    }

    /// The whole error object as a [`RawJson`] (see
    /// [`as_bytes`](ErrorObject::as_bytes)).
    #[inline]
    pub fn raw(&self) -> RawJson<'a> {
        self.raw
    }
}

/// Equal when code, message and `data` are equal byte for byte, as before
/// the raw object was kept: the same error written with other spacing or
/// member order is the same error.
impl PartialEq for ErrorObject<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message && self.data() == other.data()
    }
}

impl Eq for ErrorObject<'_> {}

impl fmt::Debug for ErrorObject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrorObject")
            .field("code", &self.code)
            .field("message", &self.message)
            .field("data", &self.data())
            .finish()
    }
}

/// An object that looks like a response (it has `result` or `error` and no
/// `method`) but is not a valid one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidResponse<'a> {
    pub(crate) id: Option<Id<'a>>,
    pub(crate) error: Error,
}

impl<'a> InvalidResponse<'a> {
    /// The id, if it could be read.
    pub fn id(&self) -> Option<Id<'a>> {
        self.id
    }

    /// What is wrong with it.
    pub fn error(&self) -> Error {
        self.error
    }
}
