//! Requests: [`Entry`], [`Request`], [`InvalidRequest`], and the views a
//! handler reads them through, [`Id`] and [`Params`].
//!
//! Everything here borrows the message: ids and params are validated byte
//! ranges of it, read lazily and never copied.

use core::fmt;

use bumpalo::Bump;

use crate::error::Error;
use crate::json::{JsonStr, Kind, RawJson, parse_i64, parse_u64};
use crate::scan;

/// One entry of a request message: a request (which may be a notification),
/// or an invalid request that must be answered with -32600.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// A valid request or notification.
    Request(Request<'a>),
    /// A value that is not a valid request.
    Invalid(InvalidRequest<'a>),
}

impl<'a> Entry<'a> {
    /// The request, if the entry is valid.
    pub fn request(self) -> Option<Request<'a>> {
        match self {
            Entry::Request(r) => Some(r),
            Entry::Invalid(_) => None,
        }
    }

    /// The invalid request, if the entry is one.
    pub fn invalid(self) -> Option<InvalidRequest<'a>> {
        match self {
            Entry::Invalid(i) => Some(i),
            Entry::Request(_) => None,
        }
    }

    /// Whether the entry expects no reply: a valid request without `id`.
    /// Invalid requests are always answered.
    pub fn is_notification(&self) -> bool {
        matches!(self, Entry::Request(r) if r.is_notification())
    }

    /// The id a reply to this entry carries, or `None` if it gets no reply
    /// (a notification).
    pub fn reply_id(&self) -> Option<Id<'a>> {
        match self {
            Entry::Request(r) => r.id(),
            Entry::Invalid(i) => Some(i.id()),
        }
    }
}

/// A valid JSON-RPC 2.0 request or notification, borrowed from the message.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Decoded text, except while the parser reads the message: a method
    /// written with escapes is kept as its raw content (with a backslash)
    /// until the message is known to run, then decoded into the arena.
    pub(crate) method: &'a str,
    pub(crate) id: Option<Id<'a>>,
    pub(crate) params: Option<Params<'a>>,
}

impl<'a> Request<'a> {
    /// The method name, decoded if it was written with escapes.
    #[inline]
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The id, or `None` for a notification. `Some(Id::NULL)` is a request
    /// with `"id": null`, which is answered.
    #[inline]
    pub fn id(&self) -> Option<Id<'a>> {
        self.id
    }

    /// The params, or `None` if absent or `null`.
    #[inline]
    pub fn params(&self) -> Option<Params<'a>> {
        self.params
    }

    /// Whether the request is a notification (has no `id`).
    #[inline]
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("id", &self.id)
            .field("params", &self.params)
            .finish()
    }
}

/// A message or batch entry that is valid JSON but not a valid request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidRequest<'a> {
    pub(crate) id: Id<'a>,
    pub(crate) error: Error,
}

impl<'a> InvalidRequest<'a> {
    /// The id to answer with: the request's id if it could be read, else
    /// `null`.
    pub fn id(&self) -> Id<'a> {
        self.id
    }

    /// What is wrong with the request (code -32600).
    pub fn error(&self) -> Error {
        self.error
    }
}

/// A request or response id: a number, a string or `null`, kept as its exact
/// bytes so that the reply echoes it byte for byte (`1e3` stays `1e3`,
/// `18446744073709551616` does not overflow, `"\u0041"` keeps its escape).
///
/// ```
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":-0,"method":"m"}"#, &arena)?;
/// let id = msg.into_single().unwrap().request().unwrap().id().unwrap();
/// assert_eq!(id.as_bytes(), b"-0");
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Id<'a> {
    raw: &'a [u8],
}

impl<'a> Id<'a> {
    /// `null`, the id of replies to messages whose id could not be read.
    pub const NULL: Id<'static> = Id { raw: b"null" };

    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        Id { raw }
    }

    /// An id from its JSON text, checked: `raw` must be exactly one JSON
    /// number, string or `null`, with nothing around it (as a parser keeps
    /// an id), else `None`. For ids kept as bytes past the message they
    /// came in (a gateway's map from its upstream ids back to its
    /// clients'), to be written again with the [`peer`](crate::peer)
    /// writers.
    ///
    /// ```
    /// use rpcwire::Id;
    /// let kept: Vec<u8> = br#""req-\u0041""#.to_vec();
    /// let id = Id::from_json(&kept).unwrap();
    /// let mut out = Vec::new();
    /// rpcwire::peer::write_response_raw(&mut out, id, b"\"0x1\"");
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":"req-\u0041","result":"0x1"}"#);
    ///
    /// assert!(Id::from_json(b"1e3").is_some());
    /// assert!(Id::from_json(b" 1").is_none());
    /// assert!(Id::from_json(b"{}").is_none());
    /// assert!(Id::from_json(b"\"unterminated").is_none());
    /// ```
    pub fn from_json(raw: &'a [u8]) -> Option<Id<'a>> {
        let end = match raw.first()? {
            b'"' => scan::scan_string(raw, 1).ok()?.end,
            b'n' => scan::scan_literal(raw, 0, b"null").ok()?,
            b'-' | b'0'..=b'9' => scan::scan_number(raw, 0).ok()?,
            _ => return None,
        };
        (end == raw.len()).then_some(Id { raw })
    }

    /// The id's JSON text, exactly as received: echo these bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The id's JSON text as `&str`.
    pub fn as_json(&self) -> &'a str {
        scan::validated_str(self.raw)
    }

    /// [`Kind::Number`], [`Kind::String`] or [`Kind::Null`].
    pub fn kind(&self) -> Kind {
        Kind::of(self.raw)
    }

    /// Whether the id is `null`.
    pub fn is_null(&self) -> bool {
        self.raw == b"null"
    }

    /// The id as a `u64`, if it is a plain non-negative integer that fits.
    pub fn as_u64(&self) -> Option<u64> {
        parse_u64(self.raw)
    }

    /// The id as an `i64`, if it is a plain integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        parse_i64(self.raw)
    }

    /// The id as a string, if it is one.
    pub fn as_json_str(&self) -> Option<JsonStr<'a>> {
        JsonStr::from_quoted(self.raw)
    }
}

impl fmt::Debug for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.as_json())
    }
}

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

/// A request's `params`: a validated array or object, kept as raw bytes until
/// a handler asks for values.
///
/// Positional access ([`iter`](Params::iter), [`nth`](Params::nth)) and named
/// access ([`get`](Params::get), [`entries`](Params::entries)) walk the bytes
/// lazily and never allocate.
///
/// # Costs
///
/// The params are kept as text, so a walk starts at the front:
/// [`iter`](Params::iter) and [`entries`](Params::entries) are linear over
/// the whole walk, but [`nth`](Params::nth), [`get`](Params::get) and
/// [`len`](Params::len) each walk from the start (O(n) per call), so a loop
/// `for i in 0..p.len() { p.nth(i) }` is quadratic. For random access, build
/// the index once with [`positional_in`](Params::positional_in) (one walk,
/// then O(1) per element; [`Call::param`](crate::dispatch::Call::param) does
/// this on first use).
///
/// ```
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(
///     br#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0xab","data":"0x"},"latest"]}"#,
///     &arena,
/// )?;
/// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
/// assert!(params.is_array());
/// let call = params.nth(0).unwrap().as_params().unwrap();
/// assert_eq!(call.get("to").unwrap().as_str(), Some("0xab"));
/// assert_eq!(params.nth(1).unwrap().as_str(), Some("latest"));
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params<'a> {
    raw: &'a [u8],
}

impl<'a> Params<'a> {
    pub(crate) fn from_validated(raw: &'a [u8]) -> Self {
        Params { raw }
    }

    /// The params' JSON text, exactly as received.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The params' JSON text as `&str`.
    pub fn as_json(&self) -> &'a str {
        scan::validated_str(self.raw)
    }

    /// Whether the params are positional (`[...]`).
    pub fn is_array(&self) -> bool {
        self.raw.first() == Some(&b'[')
    }

    /// Whether the params are named (`{...}`).
    pub fn is_object(&self) -> bool {
        self.raw.first() == Some(&b'{')
    }

    /// The params as one raw value.
    pub fn as_value(&self) -> RawJson<'a> {
        RawJson::from_validated(self.raw)
    }

    /// The positional values, in order; empty if the params are named.
    pub fn iter(&self) -> Positional<'a> {
        Positional {
            raw: if self.is_array() { self.raw } else { b"[]" },
            pos: 1,
        }
    }

    /// The `n`th positional value (from 0). Walks from the first value: for
    /// repeated access use [`positional_in`](Params::positional_in).
    pub fn nth(&self, n: usize) -> Option<RawJson<'a>> {
        self.iter().nth(n)
    }

    /// Every positional value, in one walk, as a slice in `arena` (empty if
    /// the params are named): O(1) access to each afterwards.
    ///
    /// ```
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,"x",[2]]}"#, &arena)?;
    /// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
    /// let values = params.positional_in(&arena);
    /// assert_eq!(values.len(), 3);
    /// assert_eq!(values[2].as_bytes(), b"[2]");
    /// # Ok::<(), rpcwire::Error>(())
    /// ```
    pub fn positional_in<'b>(&self, arena: &'b Bump) -> &'b [RawJson<'a>]
    where
        'a: 'b,
    {
        // The walk is not repeated to count first: the slice grows in the
        // arena, and at most doubles (amortised O(n) copies of two words).
        let mut values = bumpalo::collections::Vec::new_in(arena);
        values.extend(self.iter());
        values.into_bump_slice()
    }

    /// The number of positional values or named members (a walk over all
    /// of them).
    pub fn len(&self) -> usize {
        if self.is_array() {
            self.iter().count()
        } else {
            self.entries().count()
        }
    }

    /// Whether there are no values at all (`[]` or `{}`).
    pub fn is_empty(&self) -> bool {
        scan::skip_ws(self.raw, 1) + 1 >= self.raw.len()
    }

    /// The named members, in order; empty if the params are positional.
    pub fn entries(&self) -> Named<'a> {
        Named {
            raw: if self.is_object() { self.raw } else { b"{}" },
            pos: 1,
        }
    }

    /// The value of the named member `name`, comparing names after
    /// unescaping; the last, if it repeats, as JavaScript's `JSON.parse`,
    /// Go's `encoding/json` and `serde_json::Value` keep it, so a check
    /// made here agrees with a node the params are forwarded to (a walk
    /// over all the members). Go also matches names without regard to
    /// case: to be sure what such a node reads, refuse unknown members.
    ///
    /// ```
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let msg = rpcwire::parse(
    ///     br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"to":"0x1","to":"0x2"}}"#,
    ///     &arena,
    /// )?;
    /// let params = msg.into_single().unwrap().request().unwrap().params().unwrap();
    /// assert_eq!(params.get("to").unwrap().as_str(), Some("0x2"));
    /// # Ok::<(), rpcwire::Error>(())
    /// ```
    pub fn get(&self, name: &str) -> Option<RawJson<'a>> {
        self.entries()
            .filter(|(key, _)| key.eq_str(name))
            .last()
            .map(|(_, v)| v)
    }
}

impl<'a> RawJson<'a> {
    /// The value as [`Params`], if it is an array or an object; for nested
    /// structures such as `eth_call`'s call object.
    pub fn as_params(&self) -> Option<Params<'a>> {
        matches!(self.kind(), Kind::Array | Kind::Object).then(|| Params::from_validated(self.raw))
    }
}

impl fmt::Debug for Params<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Params({})", self.as_json())
    }
}

impl<'a> IntoIterator for Params<'a> {
    type Item = RawJson<'a>;
    type IntoIter = Positional<'a>;
    fn into_iter(self) -> Positional<'a> {
        self.iter()
    }
}

/// Iterator over positional params; see [`Params::iter`].
#[derive(Clone, Debug)]
pub struct Positional<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Positional<'a> {
    type Item = RawJson<'a>;

    fn next(&mut self) -> Option<RawJson<'a>> {
        let start = scan::skip_ws(self.raw, self.pos);
        match self.raw.get(start) {
            None | Some(b']') => {
                self.pos = self.raw.len();
                return None;
            }
            Some(_) => {}
        }
        let end = scan::skip_value_trusted(self.raw, start);
        // Step over the separator: `,` or the closing `]`.
        self.pos = scan::skip_ws(self.raw, end) + 1;
        Some(RawJson::from_validated(&self.raw[start..end]))
    }
}

/// Iterator over named params; see [`Params::entries`].
#[derive(Clone, Debug)]
pub struct Named<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Named<'a> {
    type Item = (JsonStr<'a>, RawJson<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let key_start = scan::skip_ws(self.raw, self.pos);
        if self.raw.get(key_start) != Some(&b'"') {
            self.pos = self.raw.len();
            return None;
        }
        let (key_end, escaped) = scan::skip_string_trusted_escaped(self.raw, key_start + 1);
        let key = JsonStr::from_content(self.raw.get(key_start + 1..key_end - 1)?, escaped);
        // Step over the colon.
        let value_start = scan::skip_ws(self.raw, scan::skip_ws(self.raw, key_end) + 1);
        let value_end = scan::skip_value_trusted(self.raw, value_start);
        self.pos = scan::skip_ws(self.raw, value_end) + 1;
        let value = RawJson::from_validated(self.raw.get(value_start..value_end)?);
        Some((key, value))
    }
}
