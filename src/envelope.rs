//! Layer 2: the request envelope, read in one forward pass.
//!
//! A message is validated and its envelope read in the same pass. A batch
//! must be valid JSON as a whole before any entry may run (one bad byte
//! anywhere turns the whole reply into one -32700), so each entry's envelope
//! is read as the batch is validated and kept, a few words per entry, in the
//! caller's per-message arena; the [`Batch`] then hands the entries out one by
//! one. Walking the batch a second time to find the entries again would cost
//! as much as validating it: this is the "parses batches twice" that the
//! serde_json/jsonrpsee shape pays.

use bumpalo::Bump;

use crate::error::{Error, ErrorKind, Member};
use crate::scan::{self, eof, err, skip_ws};
use crate::value::{Id, JsonStr, Params};

/// Limits that protect a server from hostile messages, and the entry point of
/// parsing.
///
/// ```
/// let parser = rpcwire::Parser::new().max_depth(32).max_batch_len(100);
/// let arena = bumpalo::Bump::new();
/// let msg = parser.parse(br#"{"jsonrpc":"2.0","method":"ping","id":7}"#, &arena)?;
/// assert!(!msg.is_batch());
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parser {
    max_depth: u32,
    max_message_len: usize,
    max_batch_len: u32,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new()
    }
}

impl Parser {
    /// Default nesting limit, as serde_json.
    pub const DEFAULT_MAX_DEPTH: u32 = 128;
    /// Default message size limit: 5 MiB, as geth's HTTP server (room for
    /// blob transactions, hex-encoded).
    pub const DEFAULT_MAX_MESSAGE_LEN: usize = 5 * 1024 * 1024;
    /// Default batch length limit, as geth and most providers.
    pub const DEFAULT_MAX_BATCH_LEN: u32 = 1000;

    /// A parser with the default limits.
    pub const fn new() -> Self {
        Parser {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_message_len: Self::DEFAULT_MAX_MESSAGE_LEN,
            max_batch_len: Self::DEFAULT_MAX_BATCH_LEN,
        }
    }

    /// The deepest nesting of arrays and objects accepted, the message itself
    /// included (default 128; clamped to `1..=1024`). Deeper input is a
    /// -32700 error whose `data` names the limit.
    ///
    /// Why: nesting costs a validator nothing, but every deserializer that
    /// later reads the params recurses on it; this stops stack-exhaustion
    /// attacks before any handler sees the message.
    pub const fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = if depth == 0 {
            1
        } else if depth > scan::MAX_DEPTH_LIMIT {
            scan::MAX_DEPTH_LIMIT
        } else {
            depth
        };
        self
    }

    /// The largest message accepted, in bytes (default 5 MiB). A larger one
    /// is rejected before any byte is read, with -32600.
    ///
    /// Why: the parser's work is linear in the input; this bounds it.
    pub const fn max_message_len(mut self, bytes: usize) -> Self {
        self.max_message_len = bytes;
        self
    }

    /// The most entries a batch may hold (default 1000). A longer batch is
    /// answered with one -32600 error whose `data` gives the limit and the
    /// offset of the first entry beyond it; none of its entries runs.
    ///
    /// Why: one small message must not fan out into unbounded work upstream.
    pub const fn max_batch_len(mut self, entries: u32) -> Self {
        self.max_batch_len = entries;
        self
    }

    /// The configured depth limit.
    pub const fn depth_limit(&self) -> u32 {
        self.max_depth
    }

    /// The configured message size limit.
    pub const fn message_len_limit(&self) -> usize {
        self.max_message_len
    }

    /// The configured batch length limit.
    pub const fn batch_len_limit(&self) -> u32 {
        self.max_batch_len
    }

    /// Parses one JSON-RPC request message: a single request or a batch.
    ///
    /// The whole input is validated as JSON (exactly what RFC 8259 accepts,
    /// UTF-8 included, trailing bytes included) before anything is returned.
    /// Nothing is allocated on the heap: a batch's entries (a few words
    /// each) and method names written with `\u` escapes go into `arena`,
    /// which the caller resets between messages.
    ///
    /// An `Err` is a problem with the message as a whole, answered with one
    /// error reply with `id: null` ([`Error::code`] gives the code). Problems
    /// with one request are reported as [`Entry::Invalid`] in its place.
    pub fn parse<'a>(&self, input: &'a [u8], arena: &'a Bump) -> Result<Message<'a>, Error> {
        if input.len() > self.max_message_len {
            return err(ErrorKind::MessageTooLarge, self.max_message_len);
        }
        let pos = skip_ws(input, 0);
        match input.get(pos) {
            Some(b'{') => {
                // Trailing whitespace (a final newline) is fine on this path.
                if let Some((request, end)) = compact_request(input, pos, 0, self.max_depth)
                    && skip_ws(input, end) == input.len()
                {
                    return Ok(Message::Single(Entry::Request(request)));
                }
                let (fields, end) = read_envelope(input, pos, 0, self.max_depth)?;
                expect_end(input, end)?;
                Ok(Message::Single(fields.into_entry(input, arena)))
            }
            Some(b'[') => self.parse_batch(input, pos, arena),
            Some(_) => {
                let end = scan::skip_value(input, pos, 0, self.max_depth)?;
                expect_end(input, end)?;
                err(ErrorKind::NotObjectOrArray, pos)
            }
            None => eof(input),
        }
    }
}

impl Parser {
    /// Reads the batch whose `[` is at `pos`, validating it and storing its
    /// entries in `arena`.
    fn parse_batch<'a>(
        &self,
        input: &'a [u8],
        pos: usize,
        arena: &'a Bump,
    ) -> Result<Message<'a>, Error> {
        let limit = self.max_batch_len as usize;
        // The smallest request (`{"jsonrpc":"2.0","method":"m"}`) is 30 bytes:
        // reserving for that many entries (up to the limit) means the list is
        // never copied while it grows.
        let room = (input.len() / 30 + 1).min(limit);
        let mut entries = bumpalo::collections::Vec::with_capacity_in(room, arena);
        let mut len = 0usize;
        let mut first_beyond = 0;
        let end = for_each_element(input, pos, self.max_depth, |p| {
            if len == limit {
                first_beyond = p;
            }
            let (entry, end) = if input[p] == b'{' {
                match compact_request(input, p, 1, self.max_depth) {
                    Some((request, end)) => (Entry::Request(request), end),
                    None => {
                        let (fields, end) = read_envelope(input, p, 1, self.max_depth)?;
                        (fields.into_entry(input, arena), end)
                    }
                }
            } else {
                let end = scan::skip_value(input, p, 1, self.max_depth)?;
                let error = Error::new(ErrorKind::NotObject, p);
                (
                    Entry::Invalid(InvalidRequest {
                        id: Id::NULL,
                        error,
                    }),
                    end,
                )
            };
            // Past the limit, keep validating and counting (invalid JSON
            // still wins), but store nothing more.
            if len < limit {
                entries.push(entry);
            }
            len += 1;
            Ok(end)
        })?;
        expect_end(input, end)?;
        if len == 0 {
            return err(ErrorKind::EmptyBatch, pos);
        }
        if len > limit {
            return err(
                ErrorKind::BatchTooLarge {
                    limit: self.max_batch_len,
                },
                first_beyond,
            );
        }
        Ok(Message::Batch(Batch {
            entries: entries.into_bump_slice().iter(),
        }))
    }
}

/// Parses one request message with the default limits; see [`Parser::parse`].
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#, &arena)?;
/// let request = msg.into_single().unwrap().request().unwrap();
/// assert_eq!(request.method(), "eth_blockNumber");
/// assert_eq!(request.id().unwrap().as_bytes(), b"1");
/// assert!(request.params().is_none());
/// # Ok::<(), rpcwire::Error>(())
/// ```
pub fn parse<'a>(input: &'a [u8], arena: &'a Bump) -> Result<Message<'a>, Error> {
    Parser::new().parse(input, arena)
}

/// Only whitespace may follow the message.
#[inline]
pub(crate) fn expect_end(input: &[u8], end: usize) -> Result<(), Error> {
    let rest = skip_ws(input, end);
    if rest == input.len() {
        Ok(())
    } else {
        err(ErrorKind::TrailingCharacters, rest)
    }
}

/// Walks the array whose `[` is at `pos`, calling `element` with the index of
/// each element's first byte; `element` returns the index after the element.
/// Returns the index after the `]`.
#[inline(always)]
pub(crate) fn for_each_element(
    input: &[u8],
    pos: usize,
    max_depth: u32,
    mut element: impl FnMut(usize) -> Result<usize, Error>,
) -> Result<usize, Error> {
    if max_depth == 0 {
        return err(ErrorKind::TooDeep { limit: max_depth }, pos);
    }
    let mut p = skip_ws(input, pos + 1);
    match input.get(p) {
        Some(b']') => return Ok(p + 1),
        Some(_) => {}
        None => return eof(input),
    }
    loop {
        p = skip_ws(input, element(p)?);
        match input.get(p) {
            Some(b',') => {
                p = skip_ws(input, p + 1);
                if p == input.len() {
                    return eof(input);
                }
            }
            Some(b']') => return Ok(p + 1),
            Some(_) => return err(ErrorKind::ExpectedArrayCommaOrEnd, p),
            None => return eof(input),
        }
    }
}

/// One parsed message: a single entry or a batch.
#[derive(Clone, Debug)]
pub enum Message<'a> {
    /// A single request, notification or invalid request.
    Single(Entry<'a>),
    /// A non-empty batch, validated, whose entries are read as it is walked.
    Batch(Batch<'a>),
}

impl<'a> Message<'a> {
    /// Whether the message is a batch.
    pub fn is_batch(&self) -> bool {
        matches!(self, Message::Batch(_))
    }

    /// The entry, if the message is a single one.
    pub fn into_single(self) -> Option<Entry<'a>> {
        match self {
            Message::Single(e) => Some(e),
            Message::Batch(_) => None,
        }
    }

    /// The batch, if the message is one.
    pub fn into_batch(self) -> Option<Batch<'a>> {
        match self {
            Message::Batch(b) => Some(b),
            Message::Single(_) => None,
        }
    }
}

/// One entry of a message: a request (which may be a notification), or an
/// invalid request that must be answered with -32600.
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
}

/// A valid JSON-RPC 2.0 request or notification, borrowed from the message.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    method: &'a str,
    id: Option<Id<'a>>,
    params: Option<Params<'a>>,
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

impl core::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("id", &self.id)
            .field("params", &self.params)
            .finish()
    }
}

/// A batch entry or message that is valid JSON but not a valid request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidRequest<'a> {
    id: Id<'a>,
    error: Error,
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

/// The entries of a batch, in request order.
///
/// The batch was validated as a whole, and each entry's envelope read, in the
/// one pass of [`Parser::parse`]; the entries live in the arena passed to it.
#[derive(Clone, Debug)]
pub struct Batch<'a> {
    entries: core::slice::Iter<'a, Entry<'a>>,
}

impl<'a> Batch<'a> {
    /// The entries not yet iterated, in order.
    pub fn as_slice(&self) -> &'a [Entry<'a>] {
        self.entries.as_slice()
    }
}

impl<'a> Iterator for Batch<'a> {
    type Item = Entry<'a>;

    #[inline]
    fn next(&mut self) -> Option<Entry<'a>> {
        self.entries.next().copied()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for Batch<'_> {}

/// A byte range of the input.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    #[inline(always)]
    pub(crate) fn of<'a>(&self, input: &'a [u8]) -> &'a [u8] {
        &input[self.start..self.end]
    }
}

/// What one pass over a request object found.
#[derive(Debug, Default)]
struct Fields {
    /// Where the object starts, for errors about what it lacks.
    start: usize,
    /// Bit per member seen, by `Member as u8`.
    seen: u16,
    version_ok: bool,
    id: Option<Span>,
    /// The method's content between the quotes.
    method: Option<Span>,
    method_escaped: bool,
    params: Option<Span>,
    /// The first problem found, with whether it makes the id unreadable.
    problem: Option<(Error, bool)>,
}

impl Fields {
    #[inline(always)]
    fn mark_seen(&mut self, member: Member, at: usize) {
        let bit = 1u16 << member as u8;
        if self.seen & bit != 0 {
            // A gateway and its upstream must never read different methods
            // from one message: any repeated envelope member voids the id too.
            self.problem(ErrorKind::Duplicate(member), at, true);
        }
        self.seen |= bit;
    }

    #[inline(always)]
    fn problem(&mut self, kind: ErrorKind, at: usize, voids_id: bool) {
        if self.problem.is_none() || (voids_id && !self.problem.unwrap().1) {
            self.problem = Some((Error::new(kind, at), voids_id));
        }
    }

    #[inline(always)]
    fn into_entry<'a>(self, input: &'a [u8], arena: &'a Bump) -> Entry<'a> {
        let id = self.id.map(|s| Id::from_validated(s.of(input)));
        let invalid = |error: Error, voids_id: bool| {
            let id = if voids_id {
                Id::NULL
            } else {
                id.unwrap_or(Id::NULL)
            };
            Entry::Invalid(InvalidRequest { id, error })
        };
        if let Some((error, voids_id)) = self.problem {
            return invalid(error, voids_id);
        }
        if self.seen & (1 << Member::Jsonrpc as u8) == 0 {
            return invalid(
                Error::new(ErrorKind::Missing(Member::Jsonrpc), self.start),
                false,
            );
        }
        let Some(method) = self.method else {
            return invalid(
                Error::new(ErrorKind::Missing(Member::Method), self.start),
                false,
            );
        };
        let raw = method.of(input);
        let method = if self.method_escaped {
            match JsonStr::from_content(raw, true).decode_in(arena) {
                Some(m) => m,
                None => {
                    let e = Error::new(ErrorKind::LoneSurrogate(Member::Method), method.start);
                    return invalid(e, false);
                }
            }
        } else {
            scan::validated_str(raw)
        };
        let params = self.params.map(|s| Params::from_validated(s.of(input)));
        Entry::Request(Request { method, id, params })
    }
}

/// A member name as its first bytes after the opening quote (the name and its
/// closing quote, so a match is exact and escape-free), packed into a
/// little-endian word with a mask of the bytes that count.
#[derive(Clone, Copy)]
pub(crate) struct MemberName {
    word: u64,
    mask: u64,
    len: usize,
    member: Member,
}

impl MemberName {
    pub(crate) const fn new(name_and_quote: &[u8], member: Member) -> Self {
        assert!(name_and_quote.len() <= 8);
        let mut word = 0u64;
        let mut i = 0;
        while i < name_and_quote.len() {
            word |= (name_and_quote[i] as u64) << (8 * i);
            i += 1;
        }
        let len = name_and_quote.len();
        let mask = if len == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * len)) - 1
        };
        MemberName {
            word,
            mask,
            len,
            member,
        }
    }

    /// The name without its closing quote.
    fn name(&self) -> &'static str {
        self.member.name()
    }
}

/// Request envelope members, most frequent first.
pub(crate) const REQUEST_MEMBERS: [MemberName; 4] = [
    MemberName::new(b"jsonrpc\"", Member::Jsonrpc),
    MemberName::new(b"id\"", Member::Id),
    MemberName::new(b"method\"", Member::Method),
    MemberName::new(b"params\"", Member::Params),
];

/// What a member name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    /// One of the envelope members being looked for.
    Member(Member),
    /// Any other name.
    Other,
    /// A name no `&str` can hold (an unpaired surrogate escape): serde-based
    /// readers reject the whole object, so the object is invalid and its id
    /// unreadable.
    Undecodable,
}

/// Reads the member name whose opening quote is at `pos`; returns what it
/// names (compared after unescaping) and the index after its closing quote.
#[inline(always)]
pub(crate) fn read_member_name(
    input: &[u8],
    pos: usize,
    members: &[MemberName],
) -> Result<(Name, usize), Error> {
    // Fast path: one 8-byte load, compared against each name's word.
    if let Some(chunk) = input.get(pos + 1..pos + 9) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap());
        for m in members {
            if word & m.mask == m.word {
                return Ok((Name::Member(m.member), pos + 1 + m.len));
            }
        }
    } else {
        let rest = &input[pos + 1..];
        for m in members {
            if rest.len() >= m.len
                && rest[..m.len - 1] == *m.name().as_bytes()
                && rest[m.len - 1] == b'"'
            {
                return Ok((Name::Member(m.member), pos + 1 + m.len));
            }
        }
    }
    let scan::ScannedStr { end, escaped } = scan::scan_string(input, pos + 1)?;
    if !escaped {
        // Without escapes the fast path above would have matched.
        return Ok((Name::Other, end));
    }
    Ok((
        classify_escaped_name(&input[pos + 1..end - 1], members),
        end,
    ))
}

#[cold]
fn classify_escaped_name(content: &[u8], members: &[MemberName]) -> Name {
    if scan::unescape(content, &mut Discard).is_err() {
        return Name::Undecodable;
    }
    members
        .iter()
        .find(|m| scan::unescaped_eq(content, true, m.name().as_bytes()))
        .map_or(Name::Other, |m| Name::Member(m.member))
}

/// An `Extend` that keeps nothing, to check that a string decodes.
struct Discard;

impl Extend<u8> for Discard {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        iter.into_iter().for_each(drop);
    }
}

/// Reads a string value whose opening quote is at `pos`; returns the index
/// after it and whether it has escapes.
#[inline(always)]
pub(crate) fn read_string(input: &[u8], pos: usize) -> Result<(usize, bool), Error> {
    let s = scan::scan_string(input, pos + 1)?;
    Ok((s.end, s.escaped))
}

/// After a member's value: `,` and the next member name's quote, or `}`.
/// Returns `Some(index of the next name's quote)` or `None` at the end of the
/// object (then `pos` is past the `}`).
#[inline(always)]
pub(crate) fn next_member(input: &[u8], pos: &mut usize) -> Result<bool, Error> {
    let p = skip_ws(input, *pos);
    match input.get(p) {
        Some(b',') => {
            let q = skip_ws(input, p + 1);
            match input.get(q) {
                Some(b'"') => {
                    *pos = q;
                    Ok(true)
                }
                Some(_) => err(ErrorKind::ExpectedKey, q),
                None => eof(input),
            }
        }
        Some(b'}') => {
            *pos = p + 1;
            Ok(false)
        }
        Some(_) => err(ErrorKind::ExpectedObjectCommaOrEnd, p),
        None => eof(input),
    }
}

/// `:` and the whitespace around it, after a member name.
#[inline(always)]
pub(crate) fn colon(input: &[u8], pos: usize) -> Result<usize, Error> {
    let p = skip_ws(input, pos);
    match input.get(p) {
        Some(b':') => {
            let value = skip_ws(input, p + 1);
            // Callers index the value's first byte: it must exist.
            if value < input.len() {
                Ok(value)
            } else {
                eof(input)
            }
        }
        Some(_) => err(ErrorKind::ExpectedColon, p),
        None => eof(input),
    }
}

/// The first member name of the object whose `{` is at `pos`: `Some(index of
/// its quote)`, or `None` for `{}` (then `pos` is past it).
#[inline(always)]
pub(crate) fn first_member(
    input: &[u8],
    pos: &mut usize,
    depth: u32,
    max_depth: u32,
) -> Result<bool, Error> {
    if depth >= max_depth {
        return err(ErrorKind::TooDeep { limit: max_depth }, *pos);
    }
    let p = skip_ws(input, *pos + 1);
    match input.get(p) {
        Some(b'"') => {
            *pos = p;
            Ok(true)
        }
        Some(b'}') => {
            *pos = p + 1;
            Ok(false)
        }
        Some(_) => err(ErrorKind::ExpectedKey, p),
        None => eof(input),
    }
}

/// The request envelope member named at `pos` (an opening quote), matched
/// with one load and one compare chosen by the name's first byte; `None`
/// sends the name down the general path.
#[inline(always)]
fn request_member_fast(input: &[u8], pos: usize) -> Option<(Member, usize)> {
    let w = u64::from_le_bytes(input.get(pos + 1..pos + 9)?.try_into().unwrap());
    let [jsonrpc, id, method, params] = REQUEST_MEMBERS;
    let hit = |m: MemberName| (w & m.mask == m.word).then_some((m.member, pos + 1 + m.len));
    match w as u8 {
        b'j' => hit(jsonrpc),
        b'i' => hit(id),
        b'm' => hit(method),
        b'p' => hit(params),
        _ => None,
    }
}

/// The byte at `pos` if it is `want`, allowing one space after it (web3.py
/// writes `": "` and `", "`); returns the index after them.
#[inline(always)]
fn punct(input: &[u8], pos: usize, want: u8) -> Option<usize> {
    if *input.get(pos)? != want {
        return None;
    }
    Some(if input.get(pos + 1) == Some(&b' ') {
        pos + 2
    } else {
        pos + 1
    })
}

/// The fast path for what clients actually send: a valid request, written
/// compactly (or with web3.py's single spaces), whose members are the four
/// envelope members, each once, without escapes in names or method.
/// Returns `None` at the first deviation, and the caller reads the object
/// again with [`read_envelope`], which handles everything (and reports what
/// is wrong): so this path never decides anything `read_envelope` would
/// decide differently, it only decides the common case sooner.
#[inline(always)]
fn compact_request<'a>(
    input: &'a [u8],
    mut pos: usize,
    depth: u32,
    max_depth: u32,
) -> Option<(Request<'a>, usize)> {
    if depth >= max_depth {
        return None;
    }
    pos = if input.get(pos + 1) == Some(&b' ') {
        pos + 2
    } else {
        pos + 1
    };
    let mut seen = 0u8;
    let mut method: Option<&'a str> = None;
    let mut id: Option<Id<'a>> = None;
    let mut params: Option<Params<'a>> = None;
    loop {
        if input.get(pos) != Some(&b'"') {
            return None;
        }
        let (member, after_name) = request_member_fast(input, pos)?;
        let bit = 1u8 << member as u8;
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        let at = punct(input, after_name, b':')?;
        pos = match member {
            Member::Jsonrpc => {
                if input.get(at..at + 5)? != b"\"2.0\"" {
                    return None;
                }
                at + 5
            }
            Member::Id => {
                let end = match *input.get(at)? {
                    b'"' => {
                        let s = scan::scan_string(input, at + 1).ok()?;
                        s.end
                    }
                    b'1'..=b'9' => {
                        // Most ids are small integers: digits, then `,` or
                        // `}`; anything else takes the full number grammar.
                        let mut end = at + 1;
                        while matches!(input.get(end), Some(b'0'..=b'9')) {
                            end += 1;
                        }
                        match input.get(end) {
                            Some(b'.' | b'e' | b'E') => scan::scan_number(input, at).ok()?,
                            _ => end,
                        }
                    }
                    b'-' | b'0' => scan::scan_number(input, at).ok()?,
                    b'n' => scan::scan_literal(input, at, b"null").ok()?,
                    _ => return None,
                };
                id = Some(Id::from_validated(&input[at..end]));
                end
            }
            Member::Method => {
                if *input.get(at)? != b'"' {
                    return None;
                }
                let s = scan::scan_string(input, at + 1).ok()?;
                if s.escaped {
                    return None;
                }
                method = Some(scan::validated_str(&input[at + 1..s.end - 1]));
                s.end
            }
            Member::Params => match *input.get(at)? {
                b'[' | b'{' => {
                    let end = scan::skip_value(input, at, depth + 1, max_depth).ok()?;
                    params = Some(Params::from_validated(&input[at..end]));
                    end
                }
                b'n' => scan::scan_literal(input, at, b"null").ok()?,
                _ => return None,
            },
            _ => return None,
        };
        match *input.get(pos)? {
            b',' => {
                pos = if input.get(pos + 1) == Some(&b' ') {
                    pos + 2
                } else {
                    pos + 1
                }
            }
            b'}' => break,
            _ => return None,
        }
    }
    if seen & (1 << Member::Jsonrpc as u8) == 0 {
        return None;
    }
    Some((
        Request {
            method: method?,
            id,
            params,
        },
        pos + 1,
    ))
}

/// Reads the request object whose `{` is at `pos`, `depth` containers deep, in
/// one pass; returns what it found and the index after the `}`.
#[inline(always)]
fn read_envelope(
    input: &[u8],
    mut pos: usize,
    depth: u32,
    max_depth: u32,
) -> Result<(Fields, usize), Error> {
    let mut f = Fields {
        start: pos,
        ..Fields::default()
    };
    // Member values sit inside this object.
    let inner = depth + 1;
    let mut more = first_member(input, &mut pos, depth, max_depth)?;
    while more {
        let name_at = pos;
        let (member, after_name) = match request_member_fast(input, pos) {
            Some((m, after)) => (Name::Member(m), after),
            None => read_member_name(input, pos, &REQUEST_MEMBERS)?,
        };
        pos = colon(input, after_name)?;
        let at = pos;
        match member {
            Name::Member(Member::Jsonrpc) => {
                f.mark_seen(Member::Jsonrpc, name_at);
                if input[pos..].starts_with(b"\"2.0\"") {
                    f.version_ok = true;
                    pos += 5;
                } else {
                    if input[pos] == b'"' {
                        let (end, escaped) = read_string(input, pos)?;
                        f.version_ok =
                            escaped && scan::unescaped_eq(&input[pos + 1..end - 1], true, b"2.0");
                        pos = end;
                    } else {
                        pos = scan::skip_value(input, pos, inner, max_depth)?;
                    }
                    if !f.version_ok {
                        f.problem(ErrorKind::WrongVersion, at, false);
                    }
                }
            }
            Name::Member(Member::Id) => {
                f.mark_seen(Member::Id, name_at);
                match input[pos] {
                    b'"' => pos = read_string(input, pos)?.0,
                    b'-' | b'0'..=b'9' => pos = scan::scan_number(input, pos)?,
                    b'n' => pos = scan::scan_literal(input, pos, b"null")?,
                    _ => {
                        pos = scan::skip_value(input, pos, inner, max_depth)?;
                        f.problem(ErrorKind::WrongType(Member::Id), at, true);
                    }
                }
                f.id = Some(Span {
                    start: at,
                    end: pos,
                });
            }
            Name::Member(Member::Method) => {
                f.mark_seen(Member::Method, name_at);
                if input[pos] == b'"' {
                    let (end, escaped) = read_string(input, pos)?;
                    f.method = Some(Span {
                        start: pos + 1,
                        end: end - 1,
                    });
                    f.method_escaped = escaped;
                    pos = end;
                } else {
                    pos = scan::skip_value(input, pos, inner, max_depth)?;
                    f.problem(ErrorKind::WrongType(Member::Method), at, false);
                }
            }
            Name::Member(Member::Params) => {
                f.mark_seen(Member::Params, name_at);
                match input[pos] {
                    b'[' | b'{' => {
                        pos = scan::skip_value(input, pos, inner, max_depth)?;
                        f.params = Some(Span {
                            start: at,
                            end: pos,
                        });
                    }
                    b'n' => pos = scan::scan_literal(input, pos, b"null")?,
                    _ => {
                        pos = scan::skip_value(input, pos, inner, max_depth)?;
                        f.problem(ErrorKind::WrongType(Member::Params), at, false);
                    }
                }
            }
            Name::Undecodable => {
                f.problem(ErrorKind::UndecodableName, name_at, true);
                pos = scan::skip_value(input, pos, inner, max_depth)?;
            }
            _ => pos = scan::skip_value(input, pos, inner, max_depth)?,
        }
        more = next_member(input, &mut pos)?;
    }
    Ok((f, pos))
}
