//! Responses, as a gateway reads its upstream's answers and a two-way peer
//! reads the answers to its own requests: the id, and either the raw
//! `result` or the error's code, message and raw `data`. Read by
//! [`parse_response`](crate::parse_response) and
//! [`Parser::parse_incoming`](crate::Parser::parse_incoming) with the same
//! member rules as requests.

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

/// The `error` member of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorObject<'a> {
    pub(crate) code: i64,
    pub(crate) message: JsonStr<'a>,
    pub(crate) data: Option<RawJson<'a>>,
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

    /// The raw `data`, if present.
    pub fn data(&self) -> Option<RawJson<'a>> {
        self.data
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
