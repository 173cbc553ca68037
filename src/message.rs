//! Messages as a whole: a single entry or a [`Batch`], the entries of a
//! two-way connection ([`Incoming`]), and the [`Status`] of a prefix parse.

use crate::request::{Entry, Id, InvalidRequest, Request};
use crate::response::{InvalidResponse, Response};

/// One parsed message: a single entry or a batch. `T` is what an entry is:
/// [`Entry`] for requests ([`Parser::parse`](crate::Parser::parse)),
/// [`Incoming`] on a two-way connection
/// ([`Parser::parse_incoming`](crate::Parser::parse_incoming)).
#[derive(Clone, Debug)]
pub enum Message<'a, T = Entry<'a>> {
    /// A single entry.
    Single(T),
    /// A non-empty batch, validated, whose entries were read in the same pass.
    Batch(Batch<'a, T>),
}

impl<'a, T> Message<'a, T> {
    /// Whether the message is a batch.
    pub fn is_batch(&self) -> bool {
        matches!(self, Message::Batch(_))
    }

    /// The entry, if the message is a single one.
    pub fn into_single(self) -> Option<T> {
        match self {
            Message::Single(e) => Some(e),
            Message::Batch(_) => None,
        }
    }

    /// The batch, if the message is one.
    pub fn into_batch(self) -> Option<Batch<'a, T>> {
        match self {
            Message::Batch(b) => Some(b),
            Message::Single(_) => None,
        }
    }
}

/// The entries of a batch, in message order.
///
/// The batch was validated as a whole, and each entry's envelope read, in the
/// one pass of the parser; the entries live in the arena passed to it.
#[derive(Clone, Debug)]
pub struct Batch<'a, T = Entry<'a>> {
    entries: core::slice::Iter<'a, T>,
}

impl<'a, T> Batch<'a, T> {
    pub(crate) fn new(entries: core::slice::Iter<'a, T>) -> Self {
        Batch { entries }
    }

    /// The entries not yet iterated, in order.
    pub fn as_slice(&self) -> &'a [T] {
        self.entries.as_slice()
    }
}

impl<T: Copy> Iterator for Batch<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        self.entries.next().copied()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl<T: Copy> ExactSizeIterator for Batch<'_, T> {}

/// One entry of a message on a two-way connection, where both sides send
/// requests and both answer them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// A valid request or notification, to be run.
    Request(Request<'a>),
    /// A valid response, never answered: the connection's peer matches it
    /// to the request of this side it answers (one that answers none is
    /// counted as unmatched).
    Response(Response<'a>),
    /// Neither a valid request nor a response: answered with -32600. One
    /// that has `"jsonrpc":"2.0"` and no `method`, `result` or `error`,
    /// with an id this side gave one of its requests, the dispatcher takes
    /// for a broken answer instead: it ends that request (if it still
    /// waits) with an invalid-response error and is not answered.
    Invalid(InvalidRequest<'a>),
    /// An object with `result` or `error` and no `method` that is not a
    /// valid response: reported, never answered (answering a response with
    /// an error would start a loop between two peers).
    InvalidResponse(InvalidResponse<'a>),
}

impl<'a> Incoming<'a> {
    /// The request entry (valid or not) this item is, if it is not a
    /// response.
    pub fn as_entry(&self) -> Option<Entry<'a>> {
        match *self {
            Incoming::Request(r) => Some(Entry::Request(r)),
            Incoming::Invalid(i) => Some(Entry::Invalid(i)),
            Incoming::Response(_) | Incoming::InvalidResponse(_) => None,
        }
    }

    /// Whether this item is a response (valid or not).
    pub fn is_response(&self) -> bool {
        matches!(self, Incoming::Response(_) | Incoming::InvalidResponse(_))
    }

    /// The id of a response, valid or not (if it could be read).
    pub fn response_id(&self) -> Option<Id<'a>> {
        match self {
            Incoming::Response(r) => Some(r.id()),
            Incoming::InvalidResponse(r) => r.id(),
            _ => None,
        }
    }
}

/// What a prefix parse found: a complete message, or a valid start that
/// needs more bytes (as httparse's `Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status<T> {
    /// A complete message.
    Complete(T),
    /// Valid so far; more bytes are needed.
    Partial,
}

impl<T> Status<T> {
    /// Whether the message is complete.
    pub fn is_complete(&self) -> bool {
        matches!(self, Status::Complete(_))
    }

    /// Whether more bytes are needed.
    pub fn is_partial(&self) -> bool {
        matches!(self, Status::Partial)
    }
}
