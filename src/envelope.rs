//! Layer 2: the envelope, read in one forward pass.
//!
//! A message is validated and its envelope read in the same pass. A batch
//! must be valid JSON as a whole before any entry may run (one bad byte
//! anywhere turns the whole reply into one -32700), so each entry's envelope
//! is read as the batch is validated and kept, a few words per entry, in the
//! caller's per-message arena; the [`Batch`] then hands the entries out one by
//! one. Walking the batch a second time to find the entries again would cost
//! as much as validating it: this is the "parses batches twice" that the
//! serde_json/jsonrpsee shape pays.
//!
//! One reader, [`read_object_from`], reads every envelope: requests,
//! responses and the mixed traffic of a two-way connection; the compact
//! readers take what clients and servers actually send first (requests,
//! [`read_compact`]; responses, which a gateway reads for every reply from
//! its upstream, [`read_compact_response`]), and hand over to it where they
//! stop. The rules for each member
//! (the `"2.0"` check, the id grammar and length limit, the params rule)
//! live in one function per member; the common case (compact JSON, or one
//! space after separators) is decided by a compare or two inside them, and
//! anything else takes the general grammar from where the fast check
//! stopped, so no byte is read twice.

use bumpalo::Bump;
use bumpalo::collections::Vec as BumpVec;

use crate::error::{Error, ErrorKind, Member};
use crate::json::{JsonStr, RawJson, parse_i64};
use crate::message::{Batch, Incoming, Message, Status};
use crate::request::{Entry, Id, InvalidRequest, Params, Request};
use crate::response::{ErrorObject, InvalidResponse, Response, ResponseMessage};
use crate::scan::{self, eof, err, skip_ws};

/// Limits that protect a server from hostile messages, and the entry point of
/// parsing.
///
/// ```
/// let parser = rpcwire::Parser::new().max_depth(32).max_batch_len(100);
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = parser.parse(br#"{"jsonrpc":"2.0","method":"ping","id":7}"#, &arena)?;
/// assert!(!msg.is_batch());
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parser {
    max_depth: u32,
    max_message_len: usize,
    max_batch_len: u32,
    max_id_len: u32,
    null_ids: bool,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new()
    }
}

/// How deep a response refused for its depth is read again to find the
/// request it answers ([`Parser::for_each_refused_answer`]).
const DEEP_ANSWER: u32 = 1024;

/// Where [`answer_id`] looks for an answer's `id`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdAt {
    /// Before its `result` or `error`: the first bytes of an answer (its
    /// value perhaps cut short) tell it.
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // for the transports
    Head,
    /// Anywhere among its top-level members, the object whole.
    Anywhere,
}

/// The id of the answer `object`: an object with a `result` or an `error`
/// and no `method`, its `id` where `at` says, read member by member at its
/// top level, each value skipped by `skip` (`None`: it cannot be). `None`
/// when its top level does not read as such an answer.
pub(crate) fn answer_id<'a>(
    object: &'a [u8],
    at: IdAt,
    skip: impl Fn(&'a [u8], usize) -> Option<usize>,
) -> Option<Id<'a>> {
    if object.first() != Some(&b'{') {
        return None;
    }
    let (mut id, mut answer) = (None, false);
    let mut pos = 1;
    loop {
        pos = skip_ws(object, pos);
        if object.get(pos) != Some(&b'"') {
            return None;
        }
        let scanned = scan::scan_string(object, pos + 1).ok()?;
        let name = &object[pos + 1..scanned.end - 1];
        pos = skip_ws(object, scanned.end);
        if object.get(pos) != Some(&b':') {
            return None;
        }
        pos = skip_ws(object, pos + 1);
        // Decoded, as the parser reads names: `"\u0069d"` is `id`.
        let is = |want: &[u8]| scan::unescaped_eq(name, scanned.escaped, want);
        if is(b"method") {
            return None;
        }
        answer |= is(b"result") || is(b"error");
        if at == IdAt::Head && answer && id.is_some() {
            return id;
        }
        let end = skip(object, pos)?;
        if is(b"id") {
            id = Some(Id::from_json(object.get(pos..end)?)?);
        }
        pos = skip_ws(object, end);
        match object.get(pos) {
            Some(b',') => pos += 1,
            Some(b'}') if at == IdAt::Anywhere && answer => return id,
            _ => return None,
        }
    }
}

impl Parser {
    /// Default nesting limit: 128 levels, the message itself counted.
    pub const DEFAULT_MAX_DEPTH: u32 = 128;
    /// Default message size limit: 5 MiB, as geth's HTTP server (room for
    /// blob transactions, hex-encoded).
    pub const DEFAULT_MAX_MESSAGE_LEN: usize = 5 * 1024 * 1024;
    /// Default batch length limit, as geth and most providers.
    pub const DEFAULT_MAX_BATCH_LEN: u32 = 1000;
    /// Default id length limit: 1 KiB of JSON text.
    pub const DEFAULT_MAX_ID_LEN: u32 = 1024;

    /// A parser with the default limits.
    pub const fn new() -> Self {
        Parser {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_message_len: Self::DEFAULT_MAX_MESSAGE_LEN,
            max_batch_len: Self::DEFAULT_MAX_BATCH_LEN,
            max_id_len: Self::DEFAULT_MAX_ID_LEN,
            null_ids: true,
        }
    }

    /// The deepest nesting of arrays and objects accepted, **the message
    /// itself counted as the first level** (default 128; clamped to
    /// `1..=1024`). So `{"params":[[…]]}` with 127 opening brackets is 128
    /// levels deep, the most accepted by default. Deeper input is a -32700 error whose `data` names the limit.
    ///
    /// `serde_json::Value` accepts one level less (127 with its default
    /// recursion limit of 128), because it counts the top-level container
    /// against its limit from the start; params 127 levels deep inside a
    /// request are accepted here and decode with serde_json.
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
    /// What is measured is the input handed to [`parse`](Parser::parse)
    /// (and `parse_incoming`, `parse_response`), whitespace around the
    /// message included; [`parse_prefix`](Parser::parse_prefix) measures
    /// from the input's start to the message's end, so whitespace after it
    /// does not count. The transports hand over what their framing cuts:
    /// a line without its line break, an HTTP body whole, a concatenated
    /// stream's value from its first byte.
    ///
    /// Why: the parser's work is linear in the input; this bounds it.
    pub const fn max_message_len(mut self, bytes: usize) -> Self {
        self.max_message_len = bytes;
        self
    }

    /// The most entries a batch may hold (default 1000), for requests and
    /// responses alike. A longer batch is answered with one -32600 error
    /// whose `data` gives the limit and the offset of the first entry beyond
    /// it; none of its entries runs.
    ///
    /// Why: one small message must not fan out into unbounded work, and the
    /// entry list kept for a batch (a few words per entry, sized once up
    /// front) must stay small whatever the message holds.
    pub const fn max_batch_len(mut self, entries: u32) -> Self {
        self.max_batch_len = entries;
        self
    }

    /// The longest id accepted, in bytes of JSON text (default 1 KiB). A
    /// request with a longer id is invalid and answered with -32600 and
    /// `id: null`.
    ///
    /// Why: every reply echoes its request's id, so without this bound an
    /// error reply (a -32600 for a bad entry, the reply to an entry past the
    /// response size limit) has no size known in advance, and the response
    /// size limit cannot hold.
    pub const fn max_id_len(mut self, bytes: u32) -> Self {
        self.max_id_len = bytes;
        self
    }

    /// Whether a request may carry `"id": null` (default `true`, as
    /// JSON-RPC 2.0 allows). With `false`, such a request is invalid:
    /// answered with -32600, `id: null` and `data` saying why, and not run.
    /// Responses keep reading `"id": null` (the answer to a message whose
    /// id could not be read).
    ///
    /// Why: protocols on JSON-RPC may forbid null ids (MCP: "the ID MUST
    /// NOT be `null`"); a client sending one cannot tell its answer from
    /// the answer to a message that could not be read.
    ///
    /// ```
    /// use rpcwire::request::Entry;
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let parser = rpcwire::Parser::new().allow_null_ids(false);
    /// let msg = parser.parse(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, &arena)?;
    /// let Some(Entry::Invalid(bad)) = msg.into_single() else { panic!() };
    /// assert_eq!(bad.error().code(), -32600);
    /// # Ok::<(), rpcwire::Error>(())
    /// ```
    pub const fn allow_null_ids(mut self, allowed: bool) -> Self {
        self.null_ids = allowed;
        self
    }

    /// Whether requests may carry `"id": null`
    /// ([`allow_null_ids`](Parser::allow_null_ids)).
    pub const fn null_ids_allowed(&self) -> bool {
        self.null_ids
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

    /// The configured id length limit.
    pub const fn id_len_limit(&self) -> u32 {
        self.max_id_len
    }

    /// Parses one JSON-RPC request message: a single request or a batch.
    ///
    /// The whole input is validated as JSON (exactly what RFC 8259 accepts,
    /// UTF-8 included, trailing bytes included) before anything is returned.
    /// Nothing is allocated on the heap: a batch's entries (a few words
    /// each) and method names written with `\u` escapes go into `arena`,
    /// which the caller resets between messages. Escaped method names are
    /// decoded only once the whole message is known to be valid and within
    /// the limits, and only for entries that will run.
    ///
    /// An `Err` is a problem with the message as a whole, answered with one
    /// error reply with `id: null` ([`Error::code`] gives the code). Problems
    /// with one request are reported as [`Entry::Invalid`] in its place.
    ///
    /// # Each case
    ///
    /// Where this differs from `serde_json::from_slice` into a request
    /// struct (`jsonrpc`, `Option<&RawValue>` id and params, `Cow<str>`
    /// method), as code moving from one to the other meets it:
    ///
    /// * Not one JSON value (bytes after it too), too deep, too large,
    ///   `[]`, or a value that is neither an object nor an array: `Err`,
    ///   -32700 or -32600.
    /// * `"id": null` is a request, answered with `id: null`:
    ///   [`Request::id`] is `Some(Id::NULL)`; only a missing `id` makes a
    ///   notification (serde reads both as `None`).
    /// * `"params": null` reads as no params ([`Request::params`] is
    ///   `None`), as geth reads it; `params` that is a number, string or
    ///   boolean makes the entry invalid (-32600, its id echoed), where
    ///   serde takes any value.
    /// * A missing `jsonrpc`, or one that is not `"2.0"` once unescaped:
    ///   invalid (-32600), its id echoed.
    /// * An `id` that is an object, array or boolean (serde takes any
    ///   value) or longer than [`max_id_len`](Parser::max_id_len), a
    ///   repeated envelope member (serde's derive refuses it too), a
    ///   member name that does not decode: invalid, answered with `id:
    ///   null` (the id cannot be trusted).
    /// * Member names and `method` written with `\u` escapes are read
    ///   decoded, as serde reads them; ids keep their exact bytes
    ///   (`18446744073709551616`, `1e400`, `-0.0`, escapes and all).
    /// * Members outside the envelope are ignored.
    ///
    /// ```
    /// use rpcwire::{Id, request::Entry};
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let entry = |input: &'static [u8]| rpcwire::parse(input, &arena).unwrap().into_single().unwrap();
    ///
    /// let r = entry(br#"{"jsonrpc":"2.0","id":null,"method":"m","params":null}"#).request().unwrap();
    /// assert_eq!((r.id(), r.params()), (Some(Id::NULL), None));
    /// let r = entry(br#"{"jsonrpc":"2.0","\u006dethod":"m\u0031","id":18446744073709551616,"x":1}"#)
    ///     .request()
    ///     .unwrap();
    /// assert_eq!((r.method(), r.id().unwrap().as_bytes()), ("m1", &b"18446744073709551616"[..]));
    ///
    /// for (input, id) in [
    ///     (&br#"{"jsonrpc":"2.0","id":1,"method":"m","params":5}"#[..], "1"),
    ///     (br#"{"id":1,"method":"m"}"#, "1"),
    ///     (br#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#, "null"),
    ///     (br#"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#, "null"),
    /// ] {
    ///     let Entry::Invalid(bad) = entry(input) else { panic!("valid: {input:?}") };
    ///     assert_eq!((bad.error().code(), bad.id().as_json()), (-32600, id));
    /// }
    /// for input in [&b"[]"[..], b"7", br#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#] {
    ///     assert!(rpcwire::parse(input, &arena).is_err());
    /// }
    /// ```
    pub fn parse<'a>(&self, input: &'a [u8], arena: &'a Bump) -> Result<Message<'a>, Error> {
        if input.len() > self.max_message_len {
            return err(ErrorKind::MessageTooLarge, self.max_message_len);
        }
        self.read_message::<Entry<'a>>(input, arena, false, &mut 0)
    }

    /// Parses one message of a two-way connection, where requests and
    /// responses travel both ways: each entry is a [`Incoming::Request`], a
    /// [`Incoming::Response`] (an object with `result` or `error` and no
    /// `method`), or invalid. A batch may mix requests and responses; it is
    /// read in the same single pass as [`parse`](Parser::parse).
    ///
    /// ```
    /// use rpcwire::message::{Incoming, Message};
    /// let arena = rpcwire::bumpalo::Bump::new();
    /// let input = br#"[{"jsonrpc":"2.0","id":7,"result":"0x1"},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
    /// let Message::Batch(batch) = rpcwire::Parser::new().parse_incoming(input, &arena)? else { unreachable!() };
    /// let items: Vec<_> = batch.collect();
    /// assert!(matches!(items[0], Incoming::Response(r) if r.id().as_bytes() == b"7"));
    /// assert!(matches!(items[1], Incoming::Request(r) if r.method() == "ping"));
    /// # Ok::<(), rpcwire::Error>(())
    /// ```
    pub fn parse_incoming<'a>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
    ) -> Result<Message<'a, Incoming<'a>>, Error> {
        if input.len() > self.max_message_len {
            return err(ErrorKind::MessageTooLarge, self.max_message_len);
        }
        self.read_message::<Incoming<'a>>(input, arena, false, &mut 0)
    }

    /// For a message the parser refused whole (a batch past
    /// [`max_batch_len`](Parser::max_batch_len), or a message nested past
    /// [`max_depth`](Parser::max_depth)), whose answers to this side's
    /// requests are still owed to their waiters: hands `f` each object
    /// element of a batch (the message itself when it is no batch) that
    /// reads as a single message, and `too_deep` the id of each response
    /// nested past the limit (read again allowing [`DEEP_ANSWER`] levels):
    /// its request is over, its answer unreadable. Stops at the first
    /// element that is not valid JSON, or, unless `whole`, at the first
    /// that is not an answer (with nothing to deliver, only what the
    /// message is matters). Returns whether the message is answers alone
    /// (valid or not, readable or not), which are never answered.
    pub(crate) fn for_each_refused_answer<'a>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
        whole: bool,
        mut f: impl FnMut(Incoming<'a>),
        mut too_deep: impl FnMut(Id<'a>),
    ) -> bool {
        let deep = Parser {
            max_depth: self.max_depth.max(DEEP_ANSWER),
            ..*self
        };
        let is_too_deep = |e: &Error| matches!(e.kind(), ErrorKind::TooDeep { .. });
        // Whether `object` is an answer (handed on when it is readable).
        let mut one = |object: &'a [u8]| match self.parse_incoming(object, arena) {
            Ok(Message::Single(item)) => {
                let answer = matches!(item, Incoming::Response(_) | Incoming::InvalidResponse(_));
                f(item);
                answer
            }
            Err(e) if is_too_deep(&e) => match deep.parse_incoming(object, arena) {
                Ok(Message::Single(Incoming::Response(r))) => {
                    too_deep(r.id());
                    true
                }
                Ok(Message::Single(Incoming::InvalidResponse(_))) => true,
                // Deeper still: its id read from its top level alone, the
                // values skipped by counting brackets (no depth limit, no
                // recursion).
                Err(e) if is_too_deep(&e) => {
                    let skip = |o: &'a [u8], at| Some(scan::skip_value_trusted(o, at));
                    match answer_id(object, IdAt::Anywhere, skip) {
                        Some(id) => {
                            too_deep(id);
                            true
                        }
                        None => false,
                    }
                }
                _ => false,
            },
            _ => false,
        };
        let pos = scan::skip_ws(input, 0);
        match input.get(pos) {
            Some(b'[') => {
                let mut only_answers = true;
                let walked = for_each_element(input, pos, deep.max_depth, |p| {
                    let end = match scan::skip_value(input, p, 1, deep.max_depth) {
                        Ok(end) => end,
                        // Past even the deeper limit: its end found by
                        // counting brackets, so that the answers after it
                        // still reach their requests (a miscount, on JSON
                        // that is not valid, can only lead to objects the
                        // peer sent).
                        Err(e) if is_too_deep(&e) => scan::skip_value_trusted(input, p),
                        Err(e) => return Err(e),
                    };
                    only_answers &= input[p] == b'{' && one(&input[p..end]);
                    if !only_answers && !whole {
                        // Not answers alone: nothing more to learn.
                        return err(ErrorKind::ExpectedValue, p);
                    }
                    Ok(end)
                });
                only_answers && walked.is_ok()
            }
            Some(b'{') => one(&input[pos..]),
            _ => false,
        }
    }

    /// Parses the message at the front of `input`, which may hold only part
    /// of it, or more than it: the incremental form of
    /// [`parse_incoming`](Parser::parse_incoming), for framers.
    ///
    /// * `Ok(Status::Complete((message, len)))`: the first `len` bytes
    ///   (leading whitespace included) are one complete, valid message;
    ///   whatever follows is not looked at.
    /// * `Ok(Status::Partial)`: every byte so far is a valid start of a
    ///   message; more are needed. Every prefix of a valid message is
    ///   `Partial`, never an error.
    /// * `Err(e)`: the bytes so far cannot start a valid message (or the
    ///   message would exceed the size limit, or is not an object or array).
    ///
    /// ```
    /// use rpcwire::Status;
    /// let (parser, arena) = (rpcwire::Parser::new(), rpcwire::bumpalo::Bump::new());
    /// let stream = br#"{"jsonrpc":"2.0","method":"a"} {"jsonrpc":"2.0","#;
    /// let Status::Complete((_, len)) = parser.parse_prefix(stream, &arena)? else { panic!() };
    /// assert_eq!(len, 30);
    /// assert!(matches!(parser.parse_prefix(&stream[len..], &arena)?, Status::Partial));
    /// assert!(parser.parse_prefix(b"{]", &arena).is_err());
    /// # Ok::<(), rpcwire::Error>(())
    /// ```
    pub fn parse_prefix<'a>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
    ) -> Result<Status<(Message<'a, Incoming<'a>>, usize)>, Error> {
        let window = &input[..input.len().min(self.max_message_len)];
        let mut end = 0;
        match self.read_message::<Incoming<'a>>(window, arena, true, &mut end) {
            Ok(message) => Ok(Status::Complete((message, end))),
            Err(e) if e.is_eof() && e.offset() == window.len() => {
                if window.len() < input.len() {
                    err(ErrorKind::MessageTooLarge, self.max_message_len)
                } else {
                    Ok(Status::Partial)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Parses one JSON-RPC response message: a single response or a batch,
    /// as a gateway reads its upstream's answers.
    ///
    /// The whole input is validated as JSON, under the same limits as
    /// requests (the batch length limit included: responses come from
    /// upstreams and, on two-way connections, from clients). A single
    /// invalid response is an `Err`; in a batch, each invalid element is an
    /// `Err` in its place. A batch's responses are kept in `arena`, a few
    /// words each, in a list sized once up front.
    pub fn parse_response<'a>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
    ) -> Result<ResponseMessage<'a>, Error> {
        if input.len() > self.max_message_len {
            return err(ErrorKind::MessageTooLarge, self.max_message_len);
        }
        let msg = self.read_message::<Result<Response<'a>, Error>>(input, arena, false, &mut 0)?;
        match msg {
            Message::Single(single) => single.map(ResponseMessage::Single),
            Message::Batch(batch) => Ok(ResponseMessage::Batch(batch)),
        }
    }

    /// Reads the message at the front of `input` (after leading whitespace);
    /// returns it and sets `end` to the index after it. With `prefix`, a
    /// top-level value that is not an object or array is refused at once
    /// (its end cannot be known), and trailing bytes are the caller's.
    ///
    /// The end is given apart so that the callers that return the message
    /// as it is (`parse`, `parse_incoming`) hand their own return slot
    /// down: returned with the end, the message was copied out of a tuple
    /// in wider loads than the stores that wrote it, which waited for
    /// those stores (about 5% of a single request's parse).
    fn read_message<'a, T: EntryKind<'a>>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
        prefix: bool,
        end: &mut usize,
    ) -> Result<Message<'a, T>, Error> {
        // A prefix is read from a stream's buffer, in address order after
        // the message before it: the CPU's prefetcher is ahead there, and
        // the rest of the buffer (what follows the message) is no reason
        // to ask for a page.
        scan::prefetch(if prefix {
            &input[..input.len().min(scan::PREFIX_PREFETCH_BYTES)]
        } else {
            input
        });
        let pos = skip_ws(input, 0);
        match input.get(pos) {
            Some(b'{') => {
                // Only the general reader takes methods with escapes.
                let mut h = Handover::fresh(pos);
                let mut r = ResponseParts::NONE;
                let (mut entry, after, general) =
                    match T::read_compact(input, pos, 0, self, &mut h, &mut r) {
                        Some((e, after)) => (e, after, false),
                        None => {
                            let (e, after) = self.read_general(input, pos, 0, h, r)?;
                            (e, after, true)
                        }
                    };
                if !prefix {
                    // Decode only what will run: after the end is checked.
                    expect_end(input, after)?;
                }
                if general {
                    entry.decode_method(input, arena);
                }
                *end = after;
                Ok(Message::Single(entry))
            }
            Some(b'[') => self.read_batch(input, pos, arena, prefix, end),
            Some(_) if prefix => err(ErrorKind::NotObjectOrArray, pos),
            Some(_) => {
                let end = scan::skip_value(input, pos, 0, self.max_depth)?;
                expect_end(input, end)?;
                err(ErrorKind::NotObjectOrArray, pos)
            }
            None => eof(input),
        }
    }

    /// The general reader's part of reading an entry, from where the
    /// compact reader handed over (or from the `{` for responses).
    #[inline(never)]
    fn read_general<'a, T: EntryKind<'a>>(
        &self,
        input: &'a [u8],
        pos: usize,
        depth: u32,
        handover: Handover,
        response: ResponseParts,
    ) -> Result<(T, usize), Error> {
        let (env, end) = read_object_from(input, pos, depth, self, T::MODE, handover, response)?;
        Ok((T::from_envelope(env, input), end))
    }

    /// Reads the batch whose `[` is at `pos`, validating it and storing its
    /// entries in `arena`.
    fn read_batch<'a, T: EntryKind<'a>>(
        &self,
        input: &'a [u8],
        pos: usize,
        arena: &'a Bump,
        prefix: bool,
        end: &mut usize,
    ) -> Result<Message<'a, T>, Error> {
        let limit = self.max_batch_len as usize;
        // The shortest element (`0,`) takes two bytes: reserving for that
        // many entries, up to the limit, means the list is never copied
        // while it grows, and never holds more than the limit.
        let room = (input.len() / 2 + 1).min(limit);
        let mut entries = BumpVec::with_capacity_in(room, arena);
        let mut len = 0usize;
        let mut first_beyond = 0;
        let mut escaped_methods = false;
        // What a compact reader hands over; it writes all of it before it
        // returns `None`, so one is kept for every entry (not filled anew
        // for each).
        let mut h = Handover::fresh(pos);
        let mut r = ResponseParts::NONE;
        let after = for_each_element(
            input,
            pos,
            self.max_depth,
            #[inline(always)]
            |p| {
                if len >= limit {
                    // Past the limit: validate (invalid JSON still wins) and
                    // count, but read and keep nothing.
                    if len == limit {
                        first_beyond = p;
                    }
                    len += 1;
                    return scan::skip_value(input, p, 1, self.max_depth);
                }
                let (entry, end) = if input[p] == b'{' {
                    match T::read_compact(input, p, 1, self, &mut h, &mut r) {
                        Some(read) => read,
                        None => {
                            let (entry, end): (T, usize) = self.read_general(input, p, 1, h, r)?;
                            // Only the general reader takes methods with
                            // escapes.
                            escaped_methods |= entry.needs_decode();
                            (entry, end)
                        }
                    }
                } else {
                    let end = scan::skip_value(input, p, 1, self.max_depth)?;
                    (T::not_object(Error::new(ErrorKind::NotObject, p)), end)
                };
                entries.push(entry);
                len += 1;
                Ok(end)
            },
        )?;
        if !prefix {
            // Invalid JSON anywhere wins over what the batch holds.
            expect_end(input, after)?;
        }
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
        if escaped_methods {
            for entry in entries.iter_mut() {
                entry.decode_method(input, arena);
            }
        }
        *end = after;
        Ok(Message::Batch(Batch::new(entries.into_bump_slice().iter())))
    }
}

/// Parses one request message with the default limits; see [`Parser::parse`].
///
/// ```
/// let arena = rpcwire::bumpalo::Bump::new();
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

/// Parses one response message with the default limits; see
/// [`Parser::parse_response`].
///
/// ```
/// use rpcwire::response::ResponseMessage;
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse_response(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"execution reverted","data":"0x08c379a0"}}"#, &arena)?;
/// let ResponseMessage::Single(response) = msg else { unreachable!() };
/// let error = response.result().unwrap_err();
/// assert_eq!(error.code(), -32000);
/// assert_eq!(error.message().as_str(), Some("execution reverted"));
/// assert_eq!(error.data().unwrap().as_bytes(), br#""0x08c379a0""#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
pub fn parse_response<'a>(input: &'a [u8], arena: &'a Bump) -> Result<ResponseMessage<'a>, Error> {
    Parser::new().parse_response(input, arena)
}

/// What an entry of a message is made into: a request entry, an incoming
/// (two-way) entry, or a response.
pub(crate) trait EntryKind<'a>: Copy + Sized {
    /// The members the reader recognises; others are unknown and ignored.
    const MODE: Mode;
    /// The entry an object's envelope makes. Escaped method names are not
    /// decoded yet (see [`decode_method`](EntryKind::decode_method)).
    fn from_envelope(env: Envelope, input: &'a [u8]) -> Self;
    /// Reads the object whose `{` is at `start` with this kind's compact
    /// reader ([`read_compact`] for requests and two-way connections, whose
    /// responses continue in the general reader at their `result`;
    /// [`read_compact_response`] for responses); `None` after handing over
    /// to the general reader through `out` and `response`.
    fn read_compact(
        input: &'a [u8],
        start: usize,
        depth: u32,
        parser: &Parser,
        out: &mut Handover,
        response: &mut ResponseParts,
    ) -> Option<(Self, usize)>;
    /// An element of a batch that is not an object.
    fn not_object(error: Error) -> Self;
    /// Decodes an escaped method name into the arena, once the entry is
    /// known to run; an undecodable one makes the entry invalid.
    fn decode_method(&mut self, input: &'a [u8], arena: &'a Bump);
    /// Whether the entry's method still has escapes to decode.
    fn needs_decode(&self) -> bool {
        false
    }
}

impl<'a> EntryKind<'a> for Entry<'a> {
    const MODE: Mode = Mode::Requests;

    fn needs_decode(&self) -> bool {
        matches!(self, Entry::Request(r) if has_escapes(r))
    }

    #[inline(always)]
    fn from_envelope(env: Envelope, input: &'a [u8]) -> Self {
        env.into_request(input)
    }

    #[inline(always)]
    fn read_compact(
        input: &'a [u8],
        start: usize,
        depth: u32,
        parser: &Parser,
        out: &mut Handover,
        _: &mut ResponseParts,
    ) -> Option<(Self, usize)> {
        read_compact(input, start, depth, parser, out).map(|(r, end)| (Entry::Request(r), end))
    }

    fn not_object(error: Error) -> Self {
        Entry::Invalid(InvalidRequest {
            id: Id::NULL,
            error,
        })
    }

    #[inline(always)]
    fn decode_method(&mut self, input: &'a [u8], arena: &'a Bump) {
        if let Entry::Request(r) = self
            && has_escapes(r)
        {
            *self = decode_escaped_method(*r, input, arena);
        }
    }
}

/// A request entry as an incoming one.
#[inline(always)]
fn incoming(entry: Entry<'_>) -> Incoming<'_> {
    match entry {
        Entry::Request(r) => Incoming::Request(r),
        Entry::Invalid(i) => Incoming::Invalid(i),
    }
}

impl<'a> EntryKind<'a> for Incoming<'a> {
    const MODE: Mode = Mode::Incoming;

    fn needs_decode(&self) -> bool {
        matches!(self, Incoming::Request(r) if has_escapes(r))
    }

    #[inline(always)]
    fn from_envelope(env: Envelope, input: &'a [u8]) -> Self {
        if env.is_response_like() {
            let id = env.readable_id(input);
            match env.into_response(input) {
                Ok(r) => Incoming::Response(r),
                Err(error) => Incoming::InvalidResponse(InvalidResponse { id, error }),
            }
        } else {
            incoming(env.into_request(input))
        }
    }

    #[inline(always)]
    fn read_compact(
        input: &'a [u8],
        start: usize,
        depth: u32,
        parser: &Parser,
        out: &mut Handover,
        _: &mut ResponseParts,
    ) -> Option<(Self, usize)> {
        read_compact(input, start, depth, parser, out).map(|(r, end)| (Incoming::Request(r), end))
    }

    fn not_object(error: Error) -> Self {
        Incoming::Invalid(InvalidRequest {
            id: Id::NULL,
            error,
        })
    }

    #[inline(always)]
    fn decode_method(&mut self, input: &'a [u8], arena: &'a Bump) {
        if let Incoming::Request(r) = self
            && has_escapes(r)
        {
            *self = incoming(decode_escaped_method(*r, input, arena));
        }
    }
}

impl<'a> EntryKind<'a> for Result<Response<'a>, Error> {
    const MODE: Mode = Mode::Responses;

    fn from_envelope(env: Envelope, input: &'a [u8]) -> Self {
        env.into_response(input)
    }

    #[inline(always)]
    fn read_compact(
        input: &'a [u8],
        start: usize,
        depth: u32,
        parser: &Parser,
        out: &mut Handover,
        response: &mut ResponseParts,
    ) -> Option<(Self, usize)> {
        read_compact_response(input, start, depth, parser, out, response)
            .map(|(r, end)| (Ok(r), end))
    }

    fn not_object(error: Error) -> Self {
        Err(error)
    }

    fn decode_method(&mut self, _: &'a [u8], _: &'a Bump) {}
}

/// Whether a request's method is still escaped text (before decoding, a
/// backslash in the raw content means an escape).
fn has_escapes(r: &Request<'_>) -> bool {
    memchr::memchr(b'\\', r.method.as_bytes()).is_some()
}

#[cold]
fn decode_escaped_method<'a>(mut r: Request<'a>, input: &'a [u8], arena: &'a Bump) -> Entry<'a> {
    match JsonStr::from_content(r.method.as_bytes(), true).decode_or_surrogate_at(arena) {
        Ok(method) => {
            r.method = method;
            Entry::Request(r)
        }
        Err(surrogate) => {
            // At the escape itself, as the offset of every other error.
            let at = r.method.as_ptr() as usize - input.as_ptr() as usize + surrogate;
            Entry::Invalid(InvalidRequest {
                id: r.id.unwrap_or(Id::NULL),
                error: Error::new(ErrorKind::LoneSurrogate(Member::Method), at),
            })
        }
    }
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

/// A byte range of the input.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// No value: no value ends at byte 0.
    const NONE: Span = Span { start: 0, end: 0 };

    #[inline(always)]
    pub(crate) fn of<'a>(&self, input: &'a [u8]) -> &'a [u8] {
        &input[self.start..self.end]
    }

    #[inline(always)]
    fn get(self) -> Option<Span> {
        (self.end != 0).then_some(self)
    }
}

/// Which envelope members a reading recognises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `jsonrpc`, `id`, `method`, `params`.
    Requests,
    /// `jsonrpc`, `id`, `result`, `error`.
    Responses,
    /// All six: a two-way connection.
    Incoming,
}

impl Mode {
    #[inline(always)]
    const fn knows(self, member: Member) -> bool {
        match member {
            Member::Jsonrpc | Member::Id => true,
            Member::Method | Member::Params => !matches!(self, Mode::Responses),
            Member::Result | Member::Error => !matches!(self, Mode::Requests),
            _ => false,
        }
    }
}

/// Which reading of an object a problem concerns: a problem with `params`
/// does not make a response invalid, nor one with `result` a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Both,
    Request,
    Response,
}

/// A problem found while reading an object, and whether it makes the id
/// unreadable (then the reply carries `id: null`).
#[derive(Clone, Copy, Debug)]
struct Problem {
    error: Error,
    voids_id: bool,
}

/// What one pass over an envelope object found.
#[derive(Debug)]
pub(crate) struct Envelope {
    /// Where the object starts, for errors about what it lacks.
    start: usize,
    /// Bit per member seen, by `Member as u8`.
    seen: u16,
    method_escaped: bool,
    /// The spans are [`Span::NONE`] for a member not seen.
    id: Span,
    /// The method's content between the quotes.
    method: Span,
    params: Span,
    result: Span,
    code: Option<i64>,
    /// The error message's content between the quotes, and whether it has
    /// escapes.
    message: Option<(Span, bool)>,
    /// The whole error object (its `data` is found in it when asked for).
    error: Option<Span>,
    /// The id is `null` and the parser refuses that in a request: the
    /// request's last check, so that any other problem is told first.
    null_id_refused: bool,
    /// The first problem of each side (see [`Side`]).
    common: Option<Problem>,
    request: Option<Problem>,
    response: Option<Problem>,
}

impl Envelope {
    #[inline(always)]
    fn has(&self, member: Member) -> bool {
        self.seen & (1 << member as u8) != 0
    }

    #[inline(always)]
    fn mark_seen(&mut self, member: Member, at: usize) {
        let bit = 1u16 << member as u8;
        if self.seen & bit != 0 {
            // A gateway and its upstream must never read different methods
            // from one message: a repeated member of a request voids the id
            // too. A member of one side only concerns that side's reading (a
            // request's `result` is an unknown member, ignored as `parse`
            // ignores it). A response's repeated `result` or `error` leaves
            // its id readable: the request it answers ends, as with any
            // other invalid answer, rather than waiting for one to come.
            let (side, voids_id) = match member {
                Member::Method | Member::Params => (Side::Request, true),
                Member::Result | Member::Error => (Side::Response, false),
                _ => (Side::Both, true),
            };
            self.problem(side, ErrorKind::Duplicate(member), at, voids_id);
        }
        self.seen |= bit;
    }

    /// Records a problem; the first one of its side stays, unless a later
    /// one voids the id and it did not.
    #[cold]
    #[inline(never)]
    fn problem(&mut self, side: Side, kind: ErrorKind, at: usize, voids_id: bool) {
        let slot = match side {
            Side::Both => &mut self.common,
            Side::Request => &mut self.request,
            Side::Response => &mut self.response,
        };
        if slot.is_none_or(|p| voids_id && !p.voids_id) {
            *slot = Some(Problem {
                error: Error::new(kind, at),
                voids_id,
            });
        }
    }

    /// The problem that decides the reading as `side`: a common one first,
    /// unless the side's own one voids the id and the common one does not.
    fn problem_for(&self, side: Option<Problem>) -> Option<Problem> {
        match (self.common, side) {
            (Some(c), Some(s)) if s.voids_id && !c.voids_id => Some(s),
            (Some(c), _) => Some(c),
            (None, s) => s,
        }
    }

    /// An object with `result` or `error` and no `method` is a response.
    fn is_response_like(&self) -> bool {
        !self.has(Member::Method) && (self.has(Member::Result) || self.has(Member::Error))
    }

    /// The id, unless a problem made it unreadable.
    fn readable_id<'a>(&self, input: &'a [u8]) -> Option<Id<'a>> {
        if self.problem_for(self.response).is_some_and(|p| p.voids_id) {
            return None;
        }
        self.id.get().map(|s| Id::from_validated(s.of(input)))
    }

    #[inline(always)]
    fn into_request(self, input: &[u8]) -> Entry<'_> {
        let id = self.id.get().map(|s| Id::from_validated(s.of(input)));
        let invalid = |p: Problem| {
            let id = if p.voids_id {
                Id::NULL
            } else {
                id.unwrap_or(Id::NULL)
            };
            Entry::Invalid(InvalidRequest { id, error: p.error })
        };
        if let Some(p) = self.problem_for(self.request) {
            return invalid(p);
        }
        let missing = |member| Problem {
            error: Error::new(ErrorKind::Missing(member), self.start),
            voids_id: false,
        };
        if !self.has(Member::Jsonrpc) {
            return invalid(missing(Member::Jsonrpc));
        }
        let Some(method) = self.method.get() else {
            return invalid(missing(Member::Method));
        };
        if self.null_id_refused {
            return invalid(Problem {
                error: Error::new(ErrorKind::NullId, self.id.start),
                voids_id: false,
            });
        }
        Entry::Request(Request {
            method: scan::validated_str(method.of(input)),
            id,
            params: self
                .params
                .get()
                .map(|s| Params::from_validated(s.of(input))),
        })
    }

    fn into_response(self, input: &[u8]) -> Result<Response<'_>, Error> {
        if let Some(p) = self.problem_for(self.response) {
            return Err(p.error);
        }
        let fail = |kind| Err(Error::new(kind, self.start));
        if !self.has(Member::Jsonrpc) {
            return fail(ErrorKind::Missing(Member::Jsonrpc));
        }
        let Some(id) = self.id.get() else {
            return fail(ErrorKind::Missing(Member::Id));
        };
        let id = Id::from_validated(id.of(input));
        let outcome = match (self.result.get(), self.has(Member::Error)) {
            (Some(_), true) => return fail(ErrorKind::BothResultAndError),
            (Some(result), false) => Ok(RawJson::from_validated(result.of(input))),
            (None, true) => {
                let Some(code) = self.code else {
                    return fail(ErrorKind::Missing(Member::Code));
                };
                let Some((message, escaped)) = self.message else {
                    return fail(ErrorKind::Missing(Member::Message));
                };
                let Some(raw) = self.error else {
                    return fail(ErrorKind::Missing(Member::Error));
                };
                Err(ErrorObject {
                    code,
                    message: JsonStr::from_content(message.of(input), escaped),
                    raw: RawJson::from_validated(raw.of(input)),
                })
            }
            (None, false) => return fail(ErrorKind::Missing(Member::Result)),
        };
        Ok(Response { id, outcome })
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

    #[inline(always)]
    fn matches(&self, word: u64) -> bool {
        word & self.mask == self.word
    }

    /// The member's bit in a set of members seen.
    #[inline(always)]
    const fn bit(&self) -> u16 {
        1 << self.member as u8
    }
}

/// The eight bytes after the quote at `pos`, where a member name starts
/// (`None` near the end of the input).
#[inline(always)]
fn name_word(input: &[u8], pos: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        input.get(pos + 1..pos + 9)?.try_into().unwrap(),
    ))
}

const JSONRPC: MemberName = MemberName::new(b"jsonrpc\"", Member::Jsonrpc);
const ID: MemberName = MemberName::new(b"id\"", Member::Id);
const METHOD: MemberName = MemberName::new(b"method\"", Member::Method);
const PARAMS: MemberName = MemberName::new(b"params\"", Member::Params);
const RESULT: MemberName = MemberName::new(b"result\"", Member::Result);
const ERROR: MemberName = MemberName::new(b"error\"", Member::Error);

/// Every envelope member; a mode picks those it knows.
const ENVELOPE_MEMBERS: [MemberName; 6] = [JSONRPC, ID, METHOD, PARAMS, RESULT, ERROR];

/// The members of a response's error object.
const CODE: MemberName = MemberName::new(b"code\"", Member::Code);
const MESSAGE: MemberName = MemberName::new(b"message\"", Member::Message);
const DATA: MemberName = MemberName::new(b"data\"", Member::Data);
const ERROR_MEMBERS: [MemberName; 3] = [CODE, MESSAGE, DATA];

/// What a member name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    /// One of the members being looked for.
    Member(Member),
    /// Any other name.
    Other,
    /// A name no `&str` can hold (an unpaired surrogate escape): serde-based
    /// readers reject the whole object, so the object is invalid and its id
    /// unreadable.
    Undecodable,
}

/// The envelope member named at `pos` (an opening quote), matched with one
/// 8-byte load and one compare chosen by the name's first byte. `None`
/// sends the name down the general path ([`read_member_name`]), which also
/// decides names near the end of the input and names with escapes.
#[inline(always)]
fn member_fast(input: &[u8], pos: usize, mode: Mode) -> Option<(Member, usize)> {
    let w = name_word(input, pos)?;
    // `mode` is a constant where this is inlined: the arms of members the
    // mode does not know fold away.
    let m = match w as u8 {
        b'j' => JSONRPC,
        b'i' => ID,
        b'm' if mode.knows(Member::Method) => METHOD,
        b'p' if mode.knows(Member::Params) => PARAMS,
        b'r' if mode.knows(Member::Result) => RESULT,
        b'e' if mode.knows(Member::Error) => ERROR,
        _ => return None,
    };
    m.matches(w).then_some((m.member, pos + 1 + m.len))
}

/// Reads the member name whose opening quote is at `pos`; returns what it
/// names among `members` (compared after unescaping) and the index after
/// its closing quote.
#[inline]
pub(crate) fn read_member_name(
    input: &[u8],
    pos: usize,
    members: &[MemberName],
) -> Result<(Name, usize), Error> {
    let scan::ScannedStr { end, escaped } = scan::scan_string(input, pos + 1)?;
    let content = &input[pos + 1..end - 1];
    if !escaped {
        let found = members
            .iter()
            .find(|m| content == m.member.name().as_bytes());
        return Ok((found.map_or(Name::Other, |m| Name::Member(m.member)), end));
    }
    Ok((classify_escaped_name(content, members), end))
}

#[cold]
fn classify_escaped_name(content: &[u8], members: &[MemberName]) -> Name {
    if scan::unescaped_len(content).is_err() {
        return Name::Undecodable;
    }
    members
        .iter()
        .find(|m| scan::unescaped_eq(content, true, m.member.name().as_bytes()))
        .map_or(Name::Other, |m| Name::Member(m.member))
}

/// After a member's value: `,` and the next member name's quote (returns
/// `true`, `pos` at the quote), or `}` (returns `false`, `pos` past it).
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

/// `:` and the whitespace around it, after a member name; returns the index
/// of the value's first byte, and that byte.
#[inline(always)]
pub(crate) fn colon(input: &[u8], pos: usize) -> Result<(usize, u8), Error> {
    let p = skip_ws(input, pos);
    match input.get(p) {
        Some(b':') => {
            let value = skip_ws(input, p + 1);
            match input.get(value) {
                Some(&first) => Ok((value, first)),
                None => eof(input),
            }
        }
        Some(_) => err(ErrorKind::ExpectedColon, p),
        None => eof(input),
    }
}

/// The first member name of the object whose `{` is at `pos`: `true` with
/// `pos` at its quote, or `false` for `{}` (then `pos` is past it).
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

/// Where the general reader picks up an object the compact reader did not
/// finish.
#[derive(Clone, Copy, Debug)]
enum Resume {
    /// At the object's `{`.
    AtObject,
    /// At the opening quote of a member name.
    AtName,
    /// At or before (whitespace) the value of `member`, whose name starts
    /// at `name_at`; the member is not marked seen yet.
    AtValue { member: Member, name_at: usize },
    /// Just after a member's value.
    AfterValue,
}

/// What the compact reader hands on: the request so far and where it
/// stopped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handover {
    seen: u16,
    id: Span,
    method: Span,
    method_escaped: bool,
    params: Span,
    pos: usize,
    resume: Resume,
}

/// What the compact reader of responses hands over besides a
/// [`Handover`]: the result, or the error object read whole. Apart from
/// it, so that a request's hand-over stays as small as it was (a larger
/// one, filled for every request, cost 1% on single requests).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResponseParts {
    result: Span,
    error: Option<ErrorParts<Span>>,
}

impl ResponseParts {
    const NONE: ResponseParts = ResponseParts {
        result: Span::NONE,
        error: None,
    };
}

/// The members of a response's error object: `code`, the message's
/// content between the quotes (`S`, a slice or a span) and whether it has
/// escapes, and the whole object (`data` is found in it when asked for).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ErrorParts<S> {
    code: i64,
    message: S,
    escaped: bool,
    raw: S,
}

impl Handover {
    /// A start from the object's `{` at `pos`.
    fn fresh(pos: usize) -> Self {
        Handover {
            seen: 0,
            id: Span::NONE,
            method: Span::NONE,
            method_escaped: false,
            params: Span::NONE,
            pos,
            resume: Resume::AtObject,
        }
    }
}

/// The compact reader: what clients actually send, a request written
/// compactly (or with web3.py's single spaces) whose members are the four
/// request members, each once, with a plain name. It keeps its state in
/// registers and decides nothing the general reader would decide
/// differently: at the first deviation it hands its state over
/// ([`Handover`], written to `out`; then it returns `None`), and
/// [`read_object_from`] continues from that byte, so no
/// byte is read twice. The member rules are the same functions for both
/// readers; their fast forms are the first thing the general forms try.
#[inline(always)]
pub(crate) fn read_compact<'a>(
    input: &'a [u8],
    start: usize,
    depth: u32,
    parser: &Parser,
    out: &mut Handover,
) -> Option<(Request<'a>, usize)> {
    let mut seen = 0u16;
    let mut id: Option<&'a [u8]> = None;
    let mut method: Option<&'a [u8]> = None;
    let mut params: Option<&'a [u8]> = None;
    // Out of line: the hand-over converts the slices to spans, and writes
    // them to `out` (not into the return value: the hot path's result then
    // stays in registers).
    #[cold]
    #[inline(never)]
    fn handover(
        out: &mut Handover,
        input: &[u8],
        seen: u16,
        [id, method, params]: [Option<&[u8]>; 3],
        pos: usize,
        resume: Resume,
    ) {
        // A value the fast form did not take: its member's name (written
        // plainly, as the fast form requires) ends just before `pos`.
        let resume = match resume {
            Resume::AtValue { member, .. } => {
                let before = pos - (input[pos - 1] == b' ') as usize - 1;
                Resume::AtValue {
                    member,
                    name_at: before - member.name().len() - 2,
                }
            }
            other => other,
        };
        let span = |s: Option<&[u8]>| {
            s.map_or(Span::NONE, |s| {
                let start = s.as_ptr() as usize - input.as_ptr() as usize;
                Span {
                    start,
                    end: start + s.len(),
                }
            })
        };
        *out = Handover {
            seen,
            id: span(id),
            method: span(method),
            method_escaped: false,
            params: span(params),
            pos,
            resume,
        };
    }
    // Hands over and returns `None` (a call that returns nothing: its
    // result does not share the hot path's return slot).
    macro_rules! hand_over {
        ($($arg:expr),* $(,)?) => {{
            handover(out, input, $($arg),*);
            return None;
        }};
    }
    if depth >= parser.max_depth {
        // The general reader reports it.
        hand_over!(0, [None; 3], start, Resume::AtObject);
    }
    let mut pos = one_space(input, start + 1);
    if input.get(pos) != Some(&b'"') {
        // `{}`, or whitespace the general reader handles.
        hand_over!(0, [None; 3], start, Resume::AtObject);
    }
    // The value of the member named `$name` (matched plainly at `pos`):
    // its first byte's index and the byte, after `:` and at most one space;
    // a hand-over here resumes at the value.
    macro_rules! value_of {
        ($name:expr) => {{
            let after_name = pos + 1 + $name.len;
            if input.get(after_name) != Some(&b':') {
                hand_over!(seen, [id, method, params], pos, Resume::AtName)
            }
            let at = one_space(input, after_name + 1);
            let bail = Resume::AtValue {
                member: $name.member,
                name_at: 0,
            };
            let Some(&first) = input.get(at) else {
                hand_over!(seen, [id, method, params], at, bail)
            };
            if seen & $name.bit() != 0 {
                hand_over!(seen, [id, method, params], at, bail)
            }
            (at, first, bail)
        }};
    }
    // Reads the value of the member whose name was matched at `pos` with
    // its rule's fast form (`None` hands the value to its general form),
    // then the `,` or `}` after it; evaluates to `true` at the `}`.
    macro_rules! member {
        ($name:ident) => {{
            let (at, first, bail) = value_of!($name);
            let end = member!(@value $name, at, first);
            let Some(end) = end else {
                hand_over!(seen, [id, method, params], at, bail)
            };
            seen |= $name.bit();
            pos = end;
            match input.get(pos) {
                Some(b',') => {
                    pos = one_space(input, pos + 1);
                    if input.get(pos) != Some(&b'"') {
                        let after = Resume::AfterValue;
                        hand_over!(seen, [id, method, params], end, after)
                    }
                    false
                }
                Some(b'}') => true,
                _ => {
                    hand_over!(seen, [id, method, params], end, Resume::AfterValue)
                }
            }
        }};
        // Plain `if let`s, not `Option` combinators: their closures are
        // not always inlined in this many copies.
        (@value METHOD, $at:expr, $first:expr) => {{
            let mut end = None;
            if let Some((e, has_escapes)) = method_fast(input, $at, $first) {
                method = Some(&input[$at + 1..e - 1]);
                // A method with escapes goes to the general form, which
                // marks it for decoding.
                if !has_escapes {
                    end = Some(e);
                }
            }
            end
        }};
        (@value PARAMS, $at:expr, $first:expr) => {{
            let end = params_fast(input, $at, $first, depth + 1, parser.max_depth);
            if let Some(e) = end {
                if $first != b'n' {
                    params = Some(&input[$at..e]);
                }
            }
            end
        }};
        (@value JSONRPC, $at:expr, $first:expr) => {{
            let _ = $first;
            version_fast(input, $at)
        }};
        (@value ID, $at:expr, $first:expr) => {{
            let end = id_fast(input, $at, $first, parser);
            if let Some(e) = end {
                id = Some(&input[$at..e]);
            }
            end
        }};
    }
    // The member orders clients write, each as straight-line code: which
    // order a message is in is decided once, from its first names, and
    // every later name is expected. A loop over members that decides each
    // name anew (below) mispredicted about two of its tests per message in
    // a stream that mixes clients: the history that would tell them apart
    // is overwritten by the branches of the params. A message that leaves its
    // order (a missing, extra or repeated member) continues in that loop
    // from the name where it left.
    let closed = 'ordered: {
        macro_rules! expect {
            ($($name:ident),*) => {{
                $(
                    match name_word(input, pos) {
                        Some(word) if $name.matches(word) => {}
                        _ => break 'ordered false,
                    }
                    if member!($name) {
                        break 'ordered true;
                    }
                )*
                false
            }};
        }
        match input.get(pos + 1) {
            // viem, web3.js and most servers; web3.py.
            Some(b'j') => {
                expect!(JSONRPC);
                if input.get(pos + 1) == Some(&b'i') {
                    expect!(ID, METHOD, PARAMS)
                } else {
                    expect!(METHOD, PARAMS, ID)
                }
            }
            // ethers.
            Some(b'm') => expect!(METHOD, PARAMS, ID, JSONRPC),
            Some(b'i') => expect!(ID, METHOD, PARAMS, JSONRPC),
            _ => false,
        }
    };
    if !closed {
        loop {
            let Some(word) = name_word(input, pos) else {
                hand_over!(seen, [id, method, params], pos, Resume::AtName)
            };
            // One masked compare per member name, in a chain of conditional
            // branches rather than a jump on the name's first byte: an
            // indirect jump per member was mispredicted nearly every time.
            let closed = if METHOD.matches(word) {
                member!(METHOD)
            } else if PARAMS.matches(word) {
                member!(PARAMS)
            } else if JSONRPC.matches(word) {
                member!(JSONRPC)
            } else if ID.matches(word) {
                member!(ID)
            } else {
                hand_over!(seen, [id, method, params], pos, Resume::AtName)
            };
            if closed {
                break;
            }
        }
    }
    match method {
        Some(m) if seen & (1 << Member::Jsonrpc as u8) != 0 => Some((
            Request {
                method: scan::validated_str(m),
                id: id.map(Id::from_validated),
                params: params.map(Params::from_validated),
            },
            pos + 1,
        )),
        // Missing members are the general reader's to report.
        _ => hand_over!(seen, [id, method, params], pos, Resume::AfterValue),
    }
}

/// The compact reader of responses: `jsonrpc`, `id` and `result` or
/// `error` (`code`, `message` and `data` in that order), each once, with
/// plain names, written compactly or with one space, in any order (one
/// upstream writes one order, so the member tests are predicted). As
/// [`read_compact`], it decides nothing the general reader would decide
/// differently, and hands over at the first deviation (an error id among
/// them: `null`).
#[inline(always)]
pub(crate) fn read_compact_response<'a>(
    input: &'a [u8],
    start: usize,
    depth: u32,
    parser: &Parser,
    out: &mut Handover,
    response: &mut ResponseParts,
) -> Option<(Response<'a>, usize)> {
    let mut seen = 0u16;
    let mut id: Option<&'a [u8]> = None;
    let mut result: Option<&'a [u8]> = None;
    let mut error: Option<ErrorParts<&'a [u8]>> = None;
    // Where the general reader takes over, unless the response is read
    // whole (then it returns from inside).
    let (pos, resume) = 'read: {
        if depth >= parser.max_depth {
            break 'read (start, Resume::AtObject);
        }
        let mut pos = one_space(input, start + 1);
        if input.get(pos) != Some(&b'"') {
            break 'read (start, Resume::AtObject);
        }
        loop {
            let Some(word) = name_word(input, pos) else {
                break 'read (pos, Resume::AtName);
            };
            let name = if RESULT.matches(word) {
                RESULT
            } else if JSONRPC.matches(word) {
                JSONRPC
            } else if ID.matches(word) {
                ID
            } else if ERROR.matches(word) {
                ERROR
            } else {
                break 'read (pos, Resume::AtName);
            };
            let after_name = pos + 1 + name.len;
            if input.get(after_name) != Some(&b':') {
                break 'read (pos, Resume::AtName);
            }
            let at = one_space(input, after_name + 1);
            let bail = (
                at,
                Resume::AtValue {
                    member: name.member,
                    name_at: pos,
                },
            );
            let Some(&first) = input.get(at) else {
                break 'read bail;
            };
            if seen & name.bit() != 0 {
                break 'read bail;
            }
            let inner = depth + 1;
            let end = match name.member {
                Member::Result => result_fast(input, at, first, inner, parser.max_depth)
                    .inspect(|&end| result = Some(&input[at..end])),
                Member::Error => {
                    error_fast(input, at, first, inner, parser.max_depth).map(|(end, parts)| {
                        error = Some(parts);
                        end
                    })
                }
                Member::Jsonrpc => version_fast(input, at),
                _ => id_fast(input, at, first, parser).inspect(|&end| id = Some(&input[at..end])),
            };
            let Some(end) = end else {
                break 'read bail;
            };
            seen |= name.bit();
            pos = end;
            match input.get(pos) {
                Some(b',') => {
                    pos = one_space(input, pos + 1);
                    if input.get(pos) != Some(&b'"') {
                        break 'read (end, Resume::AfterValue);
                    }
                }
                Some(b'}') => break,
                _ => break 'read (end, Resume::AfterValue),
            }
        }
        let outcome = match (result, error) {
            (Some(result), None) => Ok(RawJson::from_validated(result)),
            (None, Some(e)) => Err(ErrorObject {
                code: e.code,
                message: JsonStr::from_content(e.message, e.escaped),
                raw: RawJson::from_validated(e.raw),
            }),
            // Both, or neither: the general reader's to report.
            _ => break 'read (pos, Resume::AfterValue),
        };
        match id {
            Some(id) if seen & JSONRPC.bit() != 0 => {
                let id = Id::from_validated(id);
                return Some((Response { id, outcome }, pos + 1));
            }
            _ => break 'read (pos, Resume::AfterValue),
        }
    };
    response_handover(out, response, input, seen, [id, result], error, pos, resume);
    None
}

/// Writes what [`read_compact_response`] read to `out` and `response`, as
/// spans.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn response_handover(
    out: &mut Handover,
    response: &mut ResponseParts,
    input: &[u8],
    seen: u16,
    [id, result]: [Option<&[u8]>; 2],
    error: Option<ErrorParts<&[u8]>>,
    pos: usize,
    resume: Resume,
) {
    let span = |s: &[u8]| {
        let start = s.as_ptr() as usize - input.as_ptr() as usize;
        Span {
            start,
            end: start + s.len(),
        }
    };
    *out = Handover {
        seen,
        id: id.map_or(Span::NONE, span),
        method: Span::NONE,
        method_escaped: false,
        params: Span::NONE,
        pos,
        resume,
    };
    *response = ResponseParts {
        result: result.map_or(Span::NONE, span),
        error: error.map(|e| ErrorParts {
            code: e.code,
            message: span(e.message),
            escaped: e.escaped,
            raw: span(e.raw),
        }),
    };
}

/// `result`, the fast form: any value, validated whole (a string without
/// the general loop's turnaround).
#[inline(always)]
fn result_fast(input: &[u8], at: usize, first: u8, inner: u32, max_depth: u32) -> Option<usize> {
    if first == b'"' {
        return scan::scan_string(input, at + 1).ok().map(|s| s.end);
    }
    scan::skip_value(input, at, inner, max_depth).ok()
}

/// `error`, the fast form: an object of `code` (an integer written
/// plainly), `message` and optionally `data`, in that order (as geth,
/// reth and anvil write them), compact or with one space; `None` sends
/// anything else to the general rule, which reads the object from its
/// `{`.
#[inline(never)]
fn error_fast(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    max_depth: u32,
) -> Option<(usize, ErrorParts<&[u8]>)> {
    if first != b'{' || inner >= max_depth {
        return None;
    }
    // The value of the member `name` whose opening quote is at `pos`: the
    // index of its first byte.
    let value_of = |name: MemberName, pos: usize| {
        if input.get(pos) != Some(&b'"') || !name.matches(name_word(input, pos)?) {
            return None;
        }
        let colon = pos + 1 + name.len;
        (input.get(colon) == Some(&b':')).then(|| one_space(input, colon + 1))
    };
    let code_at = value_of(CODE, one_space(input, at + 1))?;
    let mut pos = code_at + (input.get(code_at) == Some(&b'-')) as usize;
    pos = match input.get(pos) {
        Some(b'0') => pos + 1,
        Some(b'1'..=b'9') => scan::skip_digits(input, pos + 1),
        _ => return None,
    };
    let code = parse_i64(&input[code_at..pos])?;
    if input.get(pos) != Some(&b',') {
        return None;
    }
    let message_at = value_of(MESSAGE, one_space(input, pos + 1))?;
    if input.get(message_at) != Some(&b'"') {
        return None;
    }
    let message = scan::scan_string(input, message_at + 1).ok()?;
    pos = message.end;
    if input.get(pos) == Some(&b',') {
        let data_at = value_of(DATA, one_space(input, pos + 1))?;
        pos = result_fast(input, data_at, *input.get(data_at)?, inner + 1, max_depth)?;
    }
    (input.get(pos) == Some(&b'}')).then(|| {
        let parts = ErrorParts {
            code,
            message: &input[message_at + 1..message.end - 1],
            escaped: message.escaped,
            raw: &input[at..pos + 1],
        };
        (pos + 1, parts)
    })
}

/// `pos`, or past one space there (web3.py writes `": "` and `", "`).
#[inline(always)]
fn one_space(input: &[u8], pos: usize) -> usize {
    if input.get(pos) == Some(&b' ') {
        pos + 1
    } else {
        pos
    }
}

/// The general reader: reads the envelope object whose `{` is at `start`,
/// `depth` containers deep, from where `h` says, validating it and
/// recording each member `mode` knows (with what the compact reader of
/// responses read, `response`). Returns what it found and the index after
/// the `}`.
#[inline(never)]
pub(crate) fn read_object_from(
    input: &[u8],
    start: usize,
    depth: u32,
    parser: &Parser,
    mode: Mode,
    h: Handover,
    response: ResponseParts,
) -> Result<(Envelope, usize), Error> {
    let mut env = Envelope {
        start,
        seen: h.seen,
        method_escaped: h.method_escaped,
        id: h.id,
        method: h.method,
        params: h.params,
        result: response.result,
        code: response.error.map(|e| e.code),
        message: response.error.map(|e| (e.message, e.escaped)),
        error: response.error.map(|e| e.raw),
        null_id_refused: false,
        common: None,
        request: None,
        response: None,
    };
    let max_depth = parser.max_depth;
    // Member values sit inside this object.
    let inner = depth + 1;
    let mut pos = h.pos;
    let mut more = match h.resume {
        Resume::AtObject => first_member(input, &mut pos, depth, max_depth)?,
        Resume::AtName => true,
        Resume::AfterValue => next_member(input, &mut pos)?,
        Resume::AtValue { member, name_at } => {
            let at = skip_ws(input, pos);
            let Some(&first) = input.get(at) else {
                return eof(input);
            };
            env.mark_seen(member, name_at);
            pos = read_value(input, at, first, member, inner, parser, &mut env)?;
            next_member(input, &mut pos)?
        }
    };
    while more {
        let name_at = pos;
        let (member, after_name) = match member_fast(input, pos, mode) {
            Some(hit) => hit,
            None => match read_member_name(input, pos, &ENVELOPE_MEMBERS)? {
                (Name::Member(m), after) if mode.knows(m) => (m, after),
                (name, after) => {
                    // An unknown member (or one this mode does not read).
                    if name == Name::Undecodable {
                        env.problem(Side::Both, ErrorKind::UndecodableName, name_at, true);
                    }
                    let (at, _) = colon(input, after)?;
                    pos = scan::skip_value(input, at, inner, max_depth)?;
                    more = next_member(input, &mut pos)?;
                    continue;
                }
            },
        };
        let (at, first) = colon(input, after_name)?;
        env.mark_seen(member, name_at);
        pos = read_value(input, at, first, member, inner, parser, &mut env)?;
        more = next_member(input, &mut pos)?;
    }
    Ok((env, pos))
}

/// Reads the value of an envelope member, by that member's rule.
#[inline(always)]
fn read_value(
    input: &[u8],
    at: usize,
    first: u8,
    member: Member,
    inner: u32,
    parser: &Parser,
    env: &mut Envelope,
) -> Result<usize, Error> {
    let max_depth = parser.max_depth;
    match member {
        Member::Jsonrpc => read_version(input, at, first, inner, max_depth, env),
        Member::Id => read_id(input, at, first, inner, parser, env),
        Member::Method => read_method(input, at, first, inner, max_depth, env),
        Member::Params => read_params(input, at, first, inner, max_depth, env),
        Member::Result => {
            let end = scan::skip_value(input, at, inner, max_depth)?;
            env.result = Span { start: at, end };
            Ok(end)
        }
        _ => read_error(input, at, first, inner, max_depth, env),
    }
}

/// `jsonrpc`, the fast form: exactly `"2.0"`.
#[inline(always)]
fn version_fast(input: &[u8], at: usize) -> Option<usize> {
    (input.get(at..at + 5) == Some(b"\"2.0\"")).then_some(at + 5)
}

/// `id`, the fast form: a string or a small integer written plainly,
/// within the id length limit. `Ok(None)` sends it to the general rule.
#[inline(always)]
fn id_fast(input: &[u8], at: usize, first: u8, parser: &Parser) -> Option<usize> {
    let end = match first {
        b'"' => scan::scan_string(input, at + 1).ok()?.end,
        b'1'..=b'9' => {
            // Digits, then `,` or `}`; anything else takes the full number
            // grammar.
            let end = scan::skip_digits(input, at);
            if matches!(input.get(end), Some(b'.' | b'e' | b'E')) {
                return None;
            }
            end
        }
        _ => return None,
    };
    (end - at <= parser.max_id_len as usize).then_some(end)
}

/// `method`, the fast form: a string; returns its end and whether it has
/// escapes (`None` if it is not a string, or not a valid one).
#[inline(always)]
fn method_fast(input: &[u8], at: usize, first: u8) -> Option<(usize, bool)> {
    if first != b'"' {
        return None;
    }
    let s = scan::scan_string(input, at + 1).ok()?;
    Some((s.end, s.escaped))
}

/// `params`, the fast form: an array or object (validated whole), or
/// `null`.
#[inline(always)]
fn params_fast(input: &[u8], at: usize, first: u8, inner: u32, max_depth: u32) -> Option<usize> {
    match first {
        b'[' | b'{' => scan::skip_value(input, at, inner, max_depth).ok(),
        b'n' if input.get(at..at + 4) == Some(b"null") => Some(at + 4),
        _ => None,
    }
}

/// `jsonrpc`: exactly the string `"2.0"` (escapes allowed).
#[inline(always)]
fn read_version(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    max_depth: u32,
    env: &mut Envelope,
) -> Result<usize, Error> {
    if let Some(end) = version_fast(input, at) {
        return Ok(end);
    }
    let (end, ok) = if first == b'"' {
        let s = scan::scan_string(input, at + 1)?;
        let ok = s.escaped && scan::unescaped_eq(&input[at + 1..s.end - 1], true, b"2.0");
        (s.end, ok)
    } else {
        (scan::skip_value(input, at, inner, max_depth)?, false)
    };
    if !ok {
        env.problem(Side::Both, ErrorKind::WrongVersion, at, false);
    }
    Ok(end)
}

/// `id`: a string, a number of any form, or `null`, at most the parser's id
/// length; anything else makes the id unreadable.
#[inline(always)]
fn read_id(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    parser: &Parser,
    env: &mut Envelope,
) -> Result<usize, Error> {
    let end = match first {
        b'"' => scan::scan_string(input, at + 1)?.end,
        b'-' | b'0'..=b'9' => scan::scan_number(input, at)?,
        b'n' => {
            let end = scan::scan_literal(input, at, b"null")?;
            env.null_id_refused = !parser.null_ids;
            end
        }
        _ => {
            let end = scan::skip_value(input, at, inner, parser.max_depth)?;
            env.problem(Side::Both, ErrorKind::WrongType(Member::Id), at, true);
            return Ok(end);
        }
    };
    if end - at > parser.max_id_len as usize {
        env.problem(
            Side::Both,
            ErrorKind::IdTooLong {
                limit: parser.max_id_len,
            },
            at,
            true,
        );
        return Ok(end);
    }
    env.id = Span { start: at, end };
    Ok(end)
}

/// `method`: a string.
#[inline(always)]
fn read_method(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    max_depth: u32,
    env: &mut Envelope,
) -> Result<usize, Error> {
    if first != b'"' {
        env.problem(
            Side::Request,
            ErrorKind::WrongType(Member::Method),
            at,
            false,
        );
        return scan::skip_value(input, at, inner, max_depth);
    }
    let s = scan::scan_string(input, at + 1)?;
    env.method = Span {
        start: at + 1,
        end: s.end - 1,
    };
    env.method_escaped = s.escaped;
    Ok(s.end)
}

/// `params`: an array, an object, or `null` (no params).
#[inline(always)]
fn read_params(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    max_depth: u32,
    env: &mut Envelope,
) -> Result<usize, Error> {
    match first {
        b'[' | b'{' => {
            let end = scan::skip_value(input, at, inner, max_depth)?;
            env.params = Span { start: at, end };
            Ok(end)
        }
        // A truncated `nul` is for the literal's grammar to report.
        b'n' => scan::scan_literal(input, at, b"null"),
        _ => {
            env.problem(
                Side::Request,
                ErrorKind::WrongType(Member::Params),
                at,
                false,
            );
            scan::skip_value(input, at, inner, max_depth)
        }
    }
}

/// `error`: an object with an integer `code`, a string `message` and any
/// `data`. The object is validated whole first, then its members are read
/// with the trusted walk (error objects are small).
#[cold]
fn read_error(
    input: &[u8],
    at: usize,
    first: u8,
    inner: u32,
    max_depth: u32,
    env: &mut Envelope,
) -> Result<usize, Error> {
    let end = scan::skip_value(input, at, inner, max_depth)?;
    if first != b'{' {
        env.problem(
            Side::Response,
            ErrorKind::WrongType(Member::Error),
            at,
            false,
        );
        return Ok(end);
    }
    let mut pos = at;
    let mut seen = 0u16;
    let mut more = first_member(input, &mut pos, 0, u32::MAX)?;
    while more {
        let name_at = pos;
        let (name, after_name) = read_member_name(input, pos, &ERROR_MEMBERS)?;
        let (value, _) = colon(input, after_name)?;
        let value_end = scan::skip_value_trusted(input, value);
        let raw = &input[value..value_end];
        if let Name::Member(m) = name {
            let bit = 1u16 << m as u8;
            if seen & bit != 0 {
                env.problem(Side::Response, ErrorKind::Duplicate(m), name_at, false);
            }
            seen |= bit;
            match m {
                Member::Code => match parse_i64(raw) {
                    Some(code) => env.code = Some(code),
                    None => env.problem(Side::Response, ErrorKind::WrongType(m), value, false),
                },
                Member::Message if raw[0] == b'"' => {
                    let escaped = memchr::memchr(b'\\', raw).is_some();
                    let content = Span {
                        start: value + 1,
                        end: value_end - 1,
                    };
                    env.message = Some((content, escaped));
                }
                Member::Message => {
                    env.problem(Side::Response, ErrorKind::WrongType(m), value, false)
                }
                _ => {}
            }
        }
        pos = value_end;
        more = next_member(input, &mut pos)?;
    }
    env.error = Some(Span { start: at, end });
    Ok(end)
}

/// The `data` member of `error`, a validated error object (as
/// [`read_error`] reads it: the first member named `data`, escapes in the
/// name decoded).
pub(crate) fn error_data(error: &[u8]) -> Option<&[u8]> {
    let mut pos = 0;
    let mut more = first_member(error, &mut pos, 0, u32::MAX).ok()?;
    while more {
        let (name, after_name) = read_member_name(error, pos, &ERROR_MEMBERS).ok()?;
        let (value, _) = colon(error, after_name).ok()?;
        let value_end = scan::skip_value_trusted(error, value);
        if name == Name::Member(Member::Data) {
            return Some(&error[value..value_end]);
        }
        pos = value_end;
        more = next_member(error, &mut pos).ok()?;
    }
    None
}

/// The parsers next to an unreadable page, on every truncation of a few
/// messages: a read past the slice faults.
#[cfg(all(test, target_os = "linux"))]
mod at_page_edges {
    use crate::guard_page::Guarded;

    #[test]
    fn parsers_read_nothing_past_their_input() {
        let mut guarded = Guarded::new();
        let arena = bumpalo::Bump::new();
        let messages = [
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0x00000000000000000000000000000000000000ab","data":"0xdeadbeef"},"latest"]}"#,
            r#"[{"jsonrpc":"2.0","id":"a\u00e9","method":"m\u0031","params":[1,2,3,-0.5,1e3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]},{"jsonrpc":"2.0","method":"x"}]"#,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"execution reverted: \u00e9\u00e9 ééééééééééééééééééééééééééééééééé","data":"0x08c379a0"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":"0x0000000000000000000000000000000000000000000000000000000000000001"}"#,
        ];
        for message in messages {
            let message = message.as_bytes();
            for len in 0..=message.len() {
                let buf = guarded.at_end(&message[..len]);
                let _ = crate::parse(buf, &arena);
                let _ = crate::parse_response(buf, &arena);
                let _ = crate::Parser::new().parse_prefix(buf, &arena);
                let _ = crate::Parser::new().parse_incoming(buf, &arena);
                let _ = crate::Id::from_json(buf);
            }
        }
    }
}
