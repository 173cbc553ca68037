//! The two-way side of JSON-RPC: this side sending requests and
//! notifications, and matching the responses that come back.
//!
//! MCP servers send progress and log notifications and ask clients for
//! things; Ethereum nodes push `eth_subscription` notifications; LSP servers
//! do both. Three pieces, from the bottom:
//!
//! * writers for outbound messages ([`write_request`],
//!   [`write_notification`], and `_raw` forms for params that are already
//!   JSON), into any [`ReplyBuf`], and for responses a gateway passes on
//!   under its client's ids ([`write_response_raw`], [`write_error_raw`],
//!   [`write_response`]);
//! * [`PendingTable`]: ids allocated by this side, and what waits for each
//!   answer, with deadlines: sans-I/O, usable by any transport;
//! * [`Peer`]: both, over a transport's [`Outbound`] queue, shared by a
//!   connection's handlers through its [`Context`](crate::Context).
//!
//! Incoming responses are found by the same single pass that reads
//! requests ([`Parser::parse_incoming`](crate::Parser::parse_incoming));
//! the dispatcher hands each one to the connection's peer and never answers
//! it. A response whose id matches no pending request is counted
//! ([`Connection::unmatched_responses`](crate::Connection::unmatched_responses)),
//! not answered; an invalid response to a pending id ends that request with
//! [`PeerError::InvalidResponse`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
#[cfg(feature = "async")]
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use crate::dispatch::ReplyBuf;
use crate::request::Id;
use crate::response::Response;
use crate::write;

/// Writes a request `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` with
/// params serialized from `params` (omitted when `None`).
///
/// ```
/// let mut out = Vec::new();
/// rpcwire::peer::write_request(&mut out, 7, "sampling/createMessage", Some(&serde_json::json!({"maxTokens": 5})))?;
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"maxTokens":5}}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn write_request<B: ReplyBuf, P: Serialize + ?Sized>(
    out: &mut B,
    id: u64,
    method: &str,
    params: Option<&P>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write::u64(out, id);
    write_method_and_params(out, start, method, params)
}

/// Writes a request whose params are already JSON text (an array or an
/// object, not checked: the caller vouches for it).
pub fn write_request_raw<B: ReplyBuf>(
    out: &mut B,
    id: Id<'_>,
    method: &str,
    params: Option<&[u8]>,
) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"method\":");
    write::string(out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(p);
    }
    out.push(b'}');
}

/// Writes a notification `{"jsonrpc":"2.0","method":…,"params":…}`.
///
/// ```
/// let mut out = Vec::new();
/// rpcwire::peer::write_notification(&mut out, "eth_subscription", Some(&serde_json::json!({"subscription": "0x1", "result": 5})))?;
/// assert_eq!(out, br#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":5,"subscription":"0x1"}}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn write_notification<B: ReplyBuf, P: Serialize + ?Sized>(
    out: &mut B,
    method: &str,
    params: Option<&P>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
    write_method_and_params(out, start, method, params)
}

/// Writes a notification whose params are already JSON text.
pub fn write_notification_raw<B: ReplyBuf>(out: &mut B, method: &str, params: Option<&[u8]>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write::string(out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(p);
    }
    out.push(b'}');
}

/// Writes a response `{"jsonrpc":"2.0","id":…,"result":…}` whose result
/// is already JSON text (one value, not checked: the caller vouches for
/// it), copied byte for byte: what a gateway writes back to its client
/// with the client's id in place of its own. The id is written as the
/// client sent it ([`Id::as_bytes`]).
///
/// A batch response is the responses between `[` and `]`, separated by
/// `,`. A gateway that sent a client's batch upstream under ids of its own
/// maps them back, passing results and error objects on unchanged:
///
/// ```
/// use rpcwire::message::Message;
/// use rpcwire::peer::{write_error_raw, write_response_raw};
/// use rpcwire::response::ResponseMessage;
/// let arena = rpcwire::bumpalo::Bump::new();
/// // The client's batch, and its ids.
/// let client = br#"[{"jsonrpc":"2.0","id":"a","method":"eth_chainId"},{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[{}]}]"#;
/// let Message::Batch(requests) = rpcwire::parse(client, &arena)? else { unreachable!() };
/// let client_ids: Vec<_> = requests.map(|e| e.request().unwrap().id().unwrap()).collect();
/// // The upstream's answer to the same calls sent as ids 100 and 101,
/// // in its own order and spacing.
/// let upstream = br#"[{"jsonrpc":"2.0","id":101,"error":{"code":3,"message":"execution reverted","data":"0x08c3"}},
///                    {"jsonrpc":"2.0","id":100,"result":"0x1"}]"#;
/// let ResponseMessage::Batch(answers) = rpcwire::parse_response(upstream, &arena)? else { unreachable!() };
/// let mut out = vec![b'['];
/// for (n, answer) in answers.enumerate() {
///     let answer = answer?; // an invalid element: the gateway's own error
///     let id = client_ids[answer.id().as_u64().unwrap() as usize - 100];
///     if n > 0 {
///         out.push(b',');
///     }
///     match answer.result() {
///         Ok(result) => write_response_raw(&mut out, id, result.as_bytes()),
///         Err(error) => write_error_raw(&mut out, id, error.as_bytes()),
///     }
/// }
/// out.push(b']');
/// assert_eq!(out, br#"[{"jsonrpc":"2.0","id":7,"error":{"code":3,"message":"execution reverted","data":"0x08c3"}},{"jsonrpc":"2.0","id":"a","result":"0x1"}]"#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
pub fn write_response_raw<B: ReplyBuf>(out: &mut B, id: Id<'_>, result: &[u8]) {
    write_response_start(out, id, result.len());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result);
    out.push(b'}');
}

/// Writes an error response `{"jsonrpc":"2.0","id":…,"error":…}` whose
/// error object is already JSON text (not checked), copied byte for byte:
/// an upstream's error passed on
/// ([`ErrorObject::as_bytes`](crate::response::ErrorObject::as_bytes)).
/// See [`write_response_raw`] for a batch rewritten with both.
///
/// ```
/// let mut out = Vec::new();
/// rpcwire::peer::write_error_raw(&mut out, rpcwire::Id::NULL, br#"{"code":-32005,"message":"limit exceeded"}"#);
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"limit exceeded"}}"#);
/// ```
pub fn write_error_raw<B: ReplyBuf>(out: &mut B, id: Id<'_>, error: &[u8]) {
    write_response_start(out, id, error.len());
    out.extend_from_slice(b",\"error\":");
    out.extend_from_slice(error);
    out.push(b'}');
}

/// Writes a response `{"jsonrpc":"2.0","id":…,"result":…}` with the result
/// serialized from `result`. If serializing fails, the buffer is left as
/// it was.
///
/// ```
/// let arena = rpcwire::bumpalo::Bump::new();
/// let msg = rpcwire::parse(br#"{"jsonrpc":"2.0","id":"q1","method":"eth_syncing"}"#, &arena)?;
/// let id = msg.into_single().unwrap().request().unwrap().id().unwrap();
/// let mut out = Vec::new();
/// rpcwire::peer::write_response(&mut out, id, &false).unwrap();
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":"q1","result":false}"#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
pub fn write_response<B: ReplyBuf, T: Serialize + ?Sized>(
    out: &mut B,
    id: Id<'_>,
    result: &T,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    write_response_start(out, id, 0);
    out.extend_from_slice(b",\"result\":");
    if let Err(e) = serde_json::to_writer(&mut Appender(out), result) {
        out.truncate(start);
        return Err(e);
    }
    out.push(b'}');
    Ok(())
}

/// `{"jsonrpc":"2.0","id":…`, room made for `more` bytes after it.
fn write_response_start<B: ReplyBuf>(out: &mut B, id: Id<'_>, more: usize) {
    let id = id.as_bytes();
    out.reserve(24 + id.len() + 11 + more);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write::small(out, id);
}

fn write_method_and_params<B: ReplyBuf, P: Serialize + ?Sized>(
    out: &mut B,
    start: usize,
    method: &str,
    params: Option<&P>,
) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b",\"method\":");
    write::string(out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        let mut w = Appender(out);
        if let Err(e) = serde_json::to_writer(&mut w, p) {
            out.truncate(start);
            return Err(e);
        }
    }
    out.push(b'}');
    Ok(())
}

struct Appender<'o, B: ?Sized>(&'o mut B);

impl<B: ReplyBuf + ?Sized> std::io::Write for Appender<'_, B> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Places the pending table keeps however few requests wait: below
/// twice it the table never shrinks, so a steady trickle does not
/// allocate.
const PENDING_KEPT: usize = 64;

/// Requests this side sent and has not had answered: each under an id this
/// side allocated (a counter, written as a JSON integer), with what waits for
/// its answer and an optional deadline. No I/O: a transport asks it for ids,
/// hands it the responses it reads, and calls
/// [`expire`](PendingTable::expire) when the next deadline passes.
///
/// ```
/// use rpcwire::peer::PendingTable;
/// use rpcwire::response::ResponseMessage;
/// let mut table = PendingTable::new();
/// let id = table.insert("ask the client", None);
/// let arena = rpcwire::bumpalo::Bump::new();
/// let reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":true}}"#);
/// let ResponseMessage::Single(r) = rpcwire::parse_response(reply.as_bytes(), &arena)? else { panic!() };
/// assert_eq!(table.take(r.id()), Some("ask the client"));
/// assert_eq!(table.take(r.id()), None); // answered once only
/// # Ok::<(), rpcwire::Error>(())
/// ```
pub struct PendingTable<T> {
    next: u64,
    entries: HashMap<u64, (T, Option<Instant>)>,
    /// The deadlines, earliest on top: the next one without a scan of
    /// every pending request (the drivers ask at each poll). An entry
    /// whose request was answered or cancelled stays until it reaches the
    /// top (then dropped) or the heap is compacted; the top is always a
    /// pending request's.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The most requests pending at once in the current window of
    /// [`SHRINK_WINDOW`] removals, and the removals in it so far.
    window_peak: usize,
    window_removals: usize,
}

/// Removals after which the pending table looks at whether to shrink:
/// it shrinks to what the window's peak needed, so that a count of
/// requests in flight that moves within a window makes it neither grow
/// nor shrink.
const SHRINK_WINDOW: usize = 1024;

impl<T> Default for PendingTable<T> {
    fn default() -> Self {
        PendingTable::new()
    }
}

impl<T> PendingTable<T> {
    /// An empty table; ids start at 1.
    pub fn new() -> Self {
        PendingTable {
            next: 1,
            entries: HashMap::new(),
            deadlines: BinaryHeap::new(),
            window_peak: 0,
            window_removals: 0,
        }
    }

    /// Whether the heap entry `(deadline, id)` is a pending request's.
    fn is_due(&self, deadline: Instant, id: u64) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|(_, d)| *d == Some(deadline))
    }

    /// Notes `id`'s deadline; past twice the pending requests (and some
    /// slack), the entries of requests no longer pending are dropped in
    /// place (amortised: no allocation once the heap has its size).
    fn push_deadline(&mut self, id: u64, deadline: Option<Instant>) {
        let Some(deadline) = deadline else {
            return;
        };
        self.compact_deadlines();
        self.deadlines.push(Reverse((deadline, id)));
    }

    /// Past twice the pending requests (and some slack), drops the heap's
    /// entries of requests no longer pending, in place: each compaction
    /// at least halves the heap, so their cost is amortised.
    fn compact_deadlines(&mut self) {
        if self.deadlines.len() >= 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.deadlines.retain(|Reverse((d, id))| {
                entries.get(id).is_some_and(|(_, due)| *due == Some(*d))
            });
        }
    }

    /// Drops the top entries of requests no longer pending, so that the
    /// top is a pending request's; then, with `removed` requests just
    /// removed, gives back what a burst made the table grow to.
    fn settle_deadlines(&mut self, removed: usize) {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if self.is_due(deadline, id) {
                break;
            }
            self.deadlines.pop();
        }
        // A request that stays pending on top keeps the entries under it.
        self.compact_deadlines();
        self.shrink(removed);
    }

    /// Every [`SHRINK_WINDOW`] removals, shrinks the map to four times the
    /// most requests pending at once in the window, when that is an
    /// eighth of its room or less (never below [`PENDING_KEPT`]
    /// places), and the heap to what it reaches between compactions for
    /// that map: a connection that once had 100,000 requests out kept
    /// about 8 MiB of places for its life. Shrinking on the count pending
    /// at the moment made a count moving between 20 and 60 grow and
    /// shrink them over and over.
    fn shrink(&mut self, removed: usize) {
        self.window_removals += removed;
        if self.window_removals < SHRINK_WINDOW {
            return;
        }
        self.window_removals = 0;
        let peak = std::mem::replace(&mut self.window_peak, self.entries.len());
        // Four times the peak: std's map grows (rather than rehashing
        // in place) once its removed entries' marks leave it more than
        // half full, so twice the peak grew back at once.
        if self.entries.capacity() > 2 * PENDING_KEPT
            && peak.saturating_mul(8) <= self.entries.capacity()
        {
            self.entries.shrink_to((4 * peak).max(PENDING_KEPT));
        }
        // The heap keeps room for what it reaches between compactions
        // while the map holds its places.
        let keep = 2 * self.entries.capacity() + 64;
        let heap = self.deadlines.len();
        if self.deadlines.capacity() > 2 * keep
            && heap.saturating_mul(4) <= self.deadlines.capacity()
        {
            self.deadlines.shrink_to((2 * heap).max(keep));
        }
    }

    /// Gives back what a burst made the table grow to now, keeping room
    /// for four times the requests pending (at least 64
    /// places): for a connection going idle, since the table shrinks by
    /// itself only as requests are answered (once per window of 1,024
    /// answers), and one idle after a burst kept up to a couple of MiB.
    ///
    /// ```
    /// use rpcwire::peer::PendingTable;
    /// let mut table = PendingTable::new();
    /// let ids: Vec<u64> = (0..10_000).map(|n| table.insert(n, None)).collect();
    /// for id in ids {
    ///     table.cancel(id);
    /// }
    /// table.shrink_to_fit(); // the connection idles
    /// assert!(table.is_empty());
    /// ```
    pub fn shrink_to_fit(&mut self) {
        self.compact_deadlines();
        let len = self.entries.len();
        self.entries.shrink_to((4 * len).max(PENDING_KEPT));
        let keep = 2 * self.entries.capacity() + 64;
        self.deadlines
            .shrink_to((2 * self.deadlines.len()).max(keep));
        self.window_peak = len;
        self.window_removals = 0;
    }

    /// Registers `waiter` under a new id, which it returns; the request is
    /// to be written with that id.
    pub fn insert(&mut self, waiter: T, deadline: Option<Instant>) -> u64 {
        let id = self.next;
        self.next += 1;
        self.entries.insert(id, (waiter, deadline));
        self.window_peak = self.window_peak.max(self.entries.len());
        self.push_deadline(id, deadline);
        id
    }

    /// Registers `waiter` under `id`, an id allocated elsewhere (peers that
    /// share one id space, or a peer's own counter); the table's own
    /// counter is not used.
    pub(crate) fn insert_as(&mut self, id: u64, waiter: T, deadline: Option<Instant>) {
        self.entries.insert(id, (waiter, deadline));
        self.window_peak = self.window_peak.max(self.entries.len());
        self.push_deadline(id, deadline);
        // A request replaced under the same id leaves its deadline behind.
        self.settle_deadlines(0);
    }

    /// The waiter for the response with `id`, removed; `None` for an id this
    /// side never sent, or already answered (ids are matched byte for byte
    /// as the integers this table wrote).
    pub fn take(&mut self, id: Id<'_>) -> Option<T> {
        let id = id.as_u64()?;
        let (waiter, _) = self.entries.remove(&id)?;
        self.settle_deadlines(1);
        Some(waiter)
    }

    /// Whether a request with `id` waits for its response.
    #[cfg(feature = "server")]
    pub(crate) fn contains(&self, id: Id<'_>) -> bool {
        id.as_u64().is_some_and(|id| self.entries.contains_key(&id))
    }

    /// Forgets the request `id` (cancelled by this side); returns its waiter.
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        let (waiter, _) = self.entries.remove(&id)?;
        self.settle_deadlines(1);
        Some(waiter)
    }

    /// Removes every request whose deadline is at or before `now`, calling
    /// `expired` with each id and waiter (earliest deadline first); returns
    /// how many expired.
    pub fn expire(&mut self, now: Instant, mut expired: impl FnMut(u64, T)) -> usize {
        let mut count = 0;
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                break;
            }
            self.deadlines.pop();
            if self.is_due(deadline, id)
                && let Some((waiter, _)) = self.entries.remove(&id)
            {
                expired(id, waiter);
                count += 1;
            }
        }
        self.settle_deadlines(count);
        count
    }

    /// The earliest deadline of a pending request.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines
            .peek()
            .map(|Reverse((deadline, _))| *deadline)
    }

    /// How many requests wait for an answer.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every pending request (the connection closed), calling
    /// `closed` with each.
    pub fn clear(&mut self, mut closed: impl FnMut(u64, T)) {
        self.deadlines = BinaryHeap::new();
        self.window_peak = 0;
        self.window_removals = 0;
        for (id, (w, _)) in std::mem::take(&mut self.entries) {
            closed(id, w);
        }
    }
}

impl<T> fmt::Debug for PendingTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTable")
            .field("pending", &self.entries.len())
            .field("next_id", &self.next)
            .finish()
    }
}

/// Where a connection's outbound messages go: the transport's writer queue.
/// `send` must not block; a bounded queue that is full answers
/// [`SendError::Full`] (the message is dropped, the caller decides what
/// that means: a slow subscriber, a failed request).
pub trait Outbound: Send + Sync {
    /// Queues one complete message (a notification, request or response).
    fn send(&self, message: Bytes) -> Result<(), SendError>;
}

/// Why an outbound message was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The connection's queue is full: the client reads too slowly.
    Full,
    /// The connection is closed.
    Closed,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::Full => "the connection's send queue is full",
            SendError::Closed => "the connection is closed",
        })
    }
}

impl std::error::Error for SendError {}

/// Why an outbound request got no response.
///
/// New reasons may be added (as `Backlog` was): match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerError {
    /// No response before the deadline.
    Timeout,
    /// This side cancelled the request.
    Cancelled,
    /// The connection closed first.
    Closed,
    /// The request could not be queued.
    Send(SendError),
    /// The params could not be serialized.
    Params,
    /// The other side answered with an object that is not a valid
    /// response (both `result` and `error`, a `"jsonrpc"` other than
    /// `"2.0"`, an error object without its code, ...): what was wrong
    /// with it. The request is over; its answer cannot be read.
    InvalidResponse(crate::Error),
    /// The other side sent more than the connection holds (messages read
    /// while its calls are at their in-flight limit) without this answer:
    /// rpcwire's stream and WebSocket drivers give up on the requests
    /// that wait then, rather than stop reading with the answer maybe
    /// behind what they cannot take (their calls, holding the slots,
    /// would wait for good). Asking again at once, while the held messages
    /// still wait for a slot, ends the same way after the same grace:
    /// return instead, so that they can run.
    Backlog,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Timeout => f.write_str("no response before the deadline"),
            PeerError::Cancelled => f.write_str("the request was cancelled"),
            PeerError::Closed => f.write_str("the connection closed"),
            PeerError::Send(e) => e.fmt(f),
            PeerError::Params => f.write_str("the params could not be serialized"),
            PeerError::InvalidResponse(e) => write!(f, "the answer was not a valid response: {e}"),
            PeerError::Backlog => {
                f.write_str("the other side sent more than the connection holds before it answered")
            }
        }
    }
}

impl std::error::Error for PeerError {}

/// A response to a request this side sent, owned. A large `result` or
/// `data` (at least [`SHARED_FROM`] bytes, and most of what the transport
/// read with it) shares the transport's buffer when it read the message
/// into `rpcwire::bytes::Bytes`; a smaller one is copied, so that keeping
/// it does not keep the whole read buffer (64 KiB or more) alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedResponse {
    outcome: Result<Bytes, OwnedError>,
}

impl OwnedResponse {
    /// The raw `result` JSON, or the error.
    pub fn result(&self) -> Result<&[u8], &OwnedError> {
        self.outcome.as_ref().map(|b| &b[..])
    }

    /// Decodes the result into `T`; an error response is returned as is.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, DecodeError> {
        match &self.outcome {
            Ok(json) => serde_json::from_slice(json).map_err(DecodeError::Json),
            Err(e) => Err(DecodeError::Rpc(e.clone())),
        }
    }

    fn from_response(input: Option<&Bytes>, r: Response<'_>) -> Self {
        // Shared, a value keeps the whole buffer it was read into: a
        // client that kept many small answers, each read into a buffer of
        // its own, held 64 KiB apiece.
        let own = |s: &[u8]| match input {
            Some(b)
                if s.len() >= SHARED_FROM
                    && s.len() >= b.len() / 2
                    && b.as_ptr_range().contains(&s.as_ptr()) =>
            {
                b.slice_ref(s)
            }
            _ => Bytes::copy_from_slice(s),
        };
        OwnedResponse {
            outcome: match r.result() {
                Ok(v) => Ok(own(v.as_bytes())),
                Err(e) => Err(OwnedError {
                    code: e.code(),
                    message: e
                        .message()
                        .decode()
                        .map_or_else(|| "(undecodable message)".into(), |m| m.into_owned()),
                    data: e.data().map(|d| own(d.as_bytes())),
                }),
            },
        }
    }
}

/// The smallest `result` or `data` an [`OwnedResponse`] shares with the
/// buffer its message was read into rather than copies (a copy of this
/// much costs under a microsecond). Shared, it keeps that buffer alive as
/// long as the answer: the message, and whatever else the transport read
/// into the same allocation (up to its read size, 64 KiB for the stream
/// transports).
pub const SHARED_FROM: usize = 16 * 1024;

/// An error response's `error` member, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedError {
    /// The code.
    pub code: i64,
    /// The message, decoded.
    pub message: String,
    /// The raw `data` JSON.
    pub data: Option<Bytes>,
}

/// Why [`OwnedResponse::decode`] failed.
#[derive(Debug)]
pub enum DecodeError {
    /// The peer answered with an error.
    Rpc(OwnedError),
    /// The result did not decode into the type asked for.
    Json(serde_json::Error),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Rpc(e) => write!(f, "{} ({})", e.message, e.code),
            DecodeError::Json(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DecodeError {}

/// What waits for an outbound request's answer.
type Waiter = Box<dyn FnOnce(Result<OwnedResponse, PeerError>) + Send>;

/// The protocol's notification that tells the other side a request was
/// given up on (LSP's `$/cancelRequest {"id": …}`, MCP's
/// `notifications/cancelled {"requestId": …, "reason": …}`): the shape a
/// dispatcher knows from its `cancel_notification`, used by the peer for
/// the requests it sends and abandons.
#[derive(Debug)]
pub(crate) struct CancelNotice {
    pub(crate) method: Box<str>,
    pub(crate) id_member: Box<str>,
    /// The member that says why in words; `None` where the protocol has
    /// none (LSP).
    pub(crate) reason_member: Option<Box<str>>,
}

impl CancelNotice {
    /// MCP's, either side's: `notifications/cancelled` naming the request
    /// by `requestId`, with a `reason`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn mcp() -> CancelNotice {
        CancelNotice {
            method: "notifications/cancelled".into(),
            id_member: "requestId".into(),
            reason_member: Some("reason".into()),
        }
    }

    /// The notification for the request `id`, abandoned because of `why`.
    fn write(&self, out: &mut Vec<u8>, id: u64, why: PeerError) {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
        write::string(out, &self.method);
        out.extend_from_slice(b",\"params\":{");
        write::string(out, &self.id_member);
        out.push(b':');
        write::u64(out, id);
        if let Some(member) = &self.reason_member {
            out.push(b',');
            write::string(out, member);
            out.push(b':');
            write::string(
                out,
                match why {
                    PeerError::Timeout => "no response before the deadline",
                    PeerError::Closed => "the connection or session ended",
                    PeerError::Backlog => "more was sent than is held before the answer",
                    _ => "the sender no longer waits for it",
                },
            );
        }
        out.extend_from_slice(b"}}");
    }
}

/// Tells the other side, when the protocol has a way to, that this side
/// gave up on its request `id` (so it stops working on it). Best effort:
/// a connection that is gone or full cannot be told, and nothing else is
/// owed to it.
fn announce(outbound: &dyn Outbound, notice: Option<&CancelNotice>, id: u64, why: PeerError) {
    let Some(notice) = notice else {
        return;
    };
    let mut out = Vec::with_capacity(64 + notice.method.len());
    notice.write(&mut out, id, why);
    let _ = outbound.send(Bytes::from(out));
}

/// This side of a two-way connection: sends notifications and requests to
/// the client through the transport's [`Outbound`] queue, and matches the
/// responses that come back. Cheap to clone; every clone shares the
/// pending-request table.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<PeerInner>,
}

struct PeerInner {
    outbound: Arc<dyn Outbound>,
    pending: Mutex<PendingTable<Waiter>>,
    /// [`Peer::close`] was called: no answer can come any more. Set and
    /// read under `pending`'s lock.
    closed: std::sync::atomic::AtomicBool,
    /// A request was ever sent with a deadline: until then
    /// [`Peer::next_deadline`] answers without the lock.
    deadlines: std::sync::atomic::AtomicBool,
    /// Where request ids come from, given in order from 1: shared when
    /// several peers share one id space (their answers come back on one
    /// channel that must tell whose they are: an MCP HTTP session's
    /// calls). Read without the lock by [`Peer::ids_given_below`].
    ids: Arc<std::sync::atomic::AtomicU64>,
    /// How the other side is told of a request this side gives up on;
    /// learnt from the dispatcher of the connection (plain JSON-RPC has
    /// no such notification: unset, nothing is sent).
    cancel_notice: std::sync::OnceLock<Arc<CancelNotice>>,
    /// The driver that keeps the deadlines, woken when a request with one
    /// is made (from outside its poll: a client, spawned work).
    #[cfg(feature = "async")]
    deadline_waker: futures_util::task::AtomicWaker,
}

impl Drop for PeerInner {
    /// The last clone gone (a transport that never called
    /// [`Peer::close`]): no answer can come, and each waiter still hears
    /// why, as `request_with` promises. A waiter that holds a clone of the
    /// peer (or a `Context`) keeps it alive, so this never runs for it: a
    /// transport of one's own calls `close` when its connection ends, as
    /// rpcwire's do.
    fn drop(&mut self) {
        let table = self
            .pending
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut closed = Vec::new();
        table.clear(|id, w| closed.push((id, w)));
        let notice = self.cancel_notice.get().map(|n| &**n);
        for (id, _) in &closed {
            announce(&*self.outbound, notice, *id, PeerError::Closed);
        }
        for (_, w) in closed {
            w(Err(PeerError::Closed));
        }
    }
}

impl Peer {
    /// A peer writing to `outbound`.
    pub fn new(outbound: Arc<dyn Outbound>) -> Peer {
        Peer::with_ids(outbound, None)
    }

    /// A peer writing to `outbound` whose request ids are taken from `ids`
    /// (shared with other peers, so that no two of them send one id).
    pub(crate) fn with_ids(
        outbound: Arc<dyn Outbound>,
        ids: Option<Arc<std::sync::atomic::AtomicU64>>,
    ) -> Peer {
        Peer {
            inner: Arc::new(PeerInner {
                outbound,
                pending: Mutex::new(PendingTable::new()),
                closed: std::sync::atomic::AtomicBool::new(false),
                deadlines: std::sync::atomic::AtomicBool::new(false),
                ids: ids.unwrap_or_else(|| Arc::new(std::sync::atomic::AtomicU64::new(1))),
                cancel_notice: std::sync::OnceLock::new(),
                #[cfg(feature = "async")]
                deadline_waker: futures_util::task::AtomicWaker::new(),
            }),
        }
    }

    /// Sends a notification with params serialized from `params`.
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<(), PeerError> {
        let mut out = Vec::with_capacity(64);
        write_notification(&mut out, method, Some(params)).map_err(|_| PeerError::Params)?;
        self.send(out)
    }

    /// Sends a notification whose params are already JSON text.
    pub fn notify_raw(&self, method: &str, params: &[u8]) -> Result<(), PeerError> {
        let mut out = Vec::with_capacity(32 + method.len() + params.len());
        write_notification_raw(&mut out, method, Some(params));
        self.send(out)
    }

    /// Sends a notification without params (LSP's `exit`), which
    /// [`notify`](Peer::notify) cannot: it always sends its `params`.
    ///
    /// ```
    /// use rpcwire::peer::Peer;
    /// use std::sync::Arc;
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// /// What the other side would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let wire = Arc::new(Wire::default());
    /// Peer::new(wire.clone()).notify_no_params("exit")?;
    /// assert_eq!(wire.0.lock().unwrap()[0], &br#"{"jsonrpc":"2.0","method":"exit"}"#[..]);
    /// # Ok::<(), rpcwire::peer::PeerError>(())
    /// ```
    pub fn notify_no_params(&self, method: &str) -> Result<(), PeerError> {
        let mut out = Vec::with_capacity(32 + method.len());
        write_notification_raw(&mut out, method, None);
        self.send(out)
    }

    fn send(&self, message: Vec<u8>) -> Result<(), PeerError> {
        self.inner
            .outbound
            .send(Bytes::from(message))
            .map_err(PeerError::Send)
    }

    /// Sends a request; `on_answer` runs once with its response, or with
    /// why none came. A `deadline` is kept by whoever calls
    /// [`expire`](Peer::expire): rpcwire's stream (TCP, IPC, stdio) and
    /// WebSocket drivers do, at [`next_deadline`](Peer::next_deadline); a
    /// transport of one's own must. A request without one waits until its
    /// answer, a [`cancel`](Peer::cancel) or the connection's end (and
    /// keeps the connection from being closed as idle meanwhile). Returns
    /// the id it was sent with;
    /// [`PeerError::Closed`] once the peer is [closed](Peer::close) (nothing
    /// is sent, `on_answer` is not called). Either `on_answer` runs or this
    /// returns an error, never both: a send that fails after a `close` on
    /// another thread already told `on_answer` is not reported again.
    ///
    /// A request this side gives up on before its answer came (its
    /// deadline passed in [`expire`](Peer::expire), [`cancel`](Peer::cancel),
    /// or [`close`](Peer::close)) is announced to the other side with the
    /// protocol's cancellation, when the connection's dispatcher has one
    /// (`DispatcherBuilder::cancel_notification`, feature `async`; the
    /// peer of a connection made by `Dispatcher::connection`, as rpcwire's
    /// transports make theirs, knows it from the start; one of a
    /// connection made otherwise learns it when the dispatcher handles the
    /// connection's first message): LSP's
    /// `$/cancelRequest` with `{"id": <id>}`, MCP's
    /// `notifications/cancelled` with `requestId` and a `reason`. It is
    /// sent once, before `on_answer` hears why, and never for a request
    /// already answered; plain JSON-RPC has no cancellation, and then
    /// nothing is sent. An answer that comes afterwards matches nothing
    /// and is dropped (counted as unmatched).
    ///
    /// The answer comes back through the dispatcher that handles the
    /// connection's input (rpcwire's transports feed it theirs):
    ///
    /// ```
    /// use rpcwire::{Connection, Context, Dispatcher};
    /// use std::sync::Arc;
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// # /// What the other side would be sent.
    /// # #[derive(Default)]
    /// # struct Wire(Mutex<Vec<Bytes>>);
    /// # impl Outbound for Wire {
    /// #     fn send(&self, message: Bytes) -> Result<(), SendError> {
    /// #         self.0.lock().unwrap().push(message);
    /// #         Ok(())
    /// #     }
    /// # }
    ///
    /// let d = Dispatcher::builder(()).build()?;
    /// let wire = Arc::new(Wire::default());
    /// let mut conn = Connection::with_context(Context::builder().outbound(wire.clone()).build());
    /// let peer = conn.context().peer().unwrap().clone();
    /// let heard = Arc::new(Mutex::new(None));
    /// let keep = Arc::clone(&heard);
    /// let id = peer.request_with("add", Some(&[1, 2]), None, move |answer| {
    ///     *keep.lock().unwrap() = Some(answer);
    /// })?;
    /// let sent = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"add","params":[1,2]}}"#);
    /// assert_eq!(wire.0.lock().unwrap()[0], sent.as_bytes());
    ///
    /// // The other side answers; a response gets no reply of its own.
    /// let mut out = Vec::new();
    /// d.handle(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":3}}"#).as_bytes(), &mut conn, &mut out);
    /// assert!(out.is_empty());
    /// let answer = heard.lock().unwrap().take().expect("answered")?;
    /// assert_eq!(answer.decode::<u64>()?, 3);
    /// assert_eq!(peer.pending(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_with<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
        deadline: Option<Instant>,
        on_answer: impl FnOnce(Result<OwnedResponse, PeerError>) + Send + 'static,
    ) -> Result<u64, PeerError> {
        self.start(Box::new(on_answer), deadline, |out, id| {
            write_request(out, id, method, params).map_err(|_| PeerError::Params)
        })
    }

    /// [`request_with`](Peer::request_with) with params that are already
    /// JSON text (an array or an object, not checked: the caller vouches
    /// for it), or none: `None` needs no type annotation, where
    /// `request_with::<()>(method, None, ..)` does.
    ///
    /// ```
    /// use rpcwire::peer::Peer;
    /// use std::sync::Arc;
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// /// What the other side would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let wire = Arc::new(Wire::default());
    /// let peer = Peer::new(wire.clone());
    /// let id = peer.request_with_raw("shutdown", None, None, |_answer| {})?;
    /// peer.request_with_raw("add", Some(b"[1,2]"), None, |_answer| {})?;
    /// let sent = wire.0.lock().unwrap();
    /// assert_eq!(sent[0], format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"shutdown"}}"#).as_bytes());
    /// assert!(sent[1].ends_with(br#""method":"add","params":[1,2]}"#));
    /// # Ok::<(), rpcwire::peer::PeerError>(())
    /// ```
    pub fn request_with_raw(
        &self,
        method: &str,
        params: Option<&[u8]>,
        deadline: Option<Instant>,
        on_answer: impl FnOnce(Result<OwnedResponse, PeerError>) + Send + 'static,
    ) -> Result<u64, PeerError> {
        self.start(Box::new(on_answer), deadline, |out, id| {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            write::u64(out, id);
            out.extend_from_slice(b",\"method\":");
            write::string(out, method);
            if let Some(p) = params {
                out.extend_from_slice(b",\"params\":");
                out.extend_from_slice(p);
            }
            out.push(b'}');
            Ok(())
        })
    }

    /// Enters `waiter` in the table and sends the request `write` makes
    /// with its id. The message is written first, so that the entry is in
    /// the table only while it is sent: a `close`, `cancel` or `expire`
    /// running meanwhile (another thread) finds it for no longer than that.
    /// The outcome is told once: when such a call took the waiter (and told
    /// it why) before a failed send, the send's error is not returned too.
    fn start(
        &self,
        waiter: Waiter,
        deadline: Option<Instant>,
        write: impl FnOnce(&mut Vec<u8>, u64) -> Result<(), PeerError>,
    ) -> Result<u64, PeerError> {
        let id = self
            .inner
            .ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::with_capacity(64);
        write(&mut out, id)?;
        if deadline.is_some() {
            self.inner
                .deadlines
                .store(true, std::sync::atomic::Ordering::Release);
        }
        {
            // Checked under the lock: a `close` that runs between the check
            // and the insert would miss the new entry, whose waiter would
            // then wait for ever.
            let mut table = self.lock();
            if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
                drop(table);
                drop(waiter);
                return Err(PeerError::Closed);
            }
            table.insert_as(id, waiter, deadline);
        }
        #[cfg(feature = "async")]
        if deadline.is_some() {
            self.inner.deadline_waker.wake();
        }
        if let Err(e) = self.send(out) {
            // Dropped (not called) after the lock is released: what the
            // waiter owns may use the peer when it goes.
            let unsent = self.lock().cancel(id);
            if unsent.is_none() {
                // Told already, by whoever took it.
                return Ok(id);
            }
            drop(unsent);
            return Err(e);
        }
        Ok(id)
    }

    /// Sends a request and waits for its response, at most `timeout`.
    /// Dropping the future cancels the request (its answer, if it comes, is
    /// then counted as unmatched). Without params, `None` needs a type:
    /// `request::<()>(method, None, timeout)`, or use
    /// [`request_raw`](Peer::request_raw).
    ///
    /// What the other side sees when this side stops waiting without an
    /// answer (the timeout passed; the future was dropped, say because the
    /// call that awaits it was cancelled or timed out; the peer closed):
    /// the protocol's cancellation notification for the request, as
    /// [`request_with`](Peer::request_with) says (LSP's `$/cancelRequest`,
    /// MCP's `notifications/cancelled`), sent once and never after an
    /// answer; nothing where the protocol has none.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub async fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
        timeout: Duration,
    ) -> Result<OwnedResponse, PeerError> {
        self.wait(timeout, |on_answer| {
            self.request_with(method, params, None, on_answer)
        })
        .await
    }

    /// [`request`](Peer::request) with params that are already JSON text
    /// (an array or an object, not checked: the caller vouches for it), or
    /// none: `None` needs no type annotation.
    ///
    /// ```
    /// use rpcwire::peer::{Peer, PeerError};
    /// use std::{sync::Arc, time::Duration};
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// /// What the other side would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let wire = Arc::new(Wire::default());
    /// let peer = Peer::new(wire.clone());
    /// // Nobody answers here: the request times out, once sent.
    /// let answer = peer.request_raw("shutdown", None, Duration::from_millis(10)).await;
    /// assert!(matches!(answer, Err(PeerError::Timeout)));
    /// assert_eq!(wire.0.lock().unwrap()[0], &br#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#[..]);
    /// # })
    /// ```
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub async fn request_raw(
        &self,
        method: &str,
        params: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<OwnedResponse, PeerError> {
        self.wait(timeout, |on_answer| {
            self.request_with_raw(method, params, None, on_answer)
        })
        .await
    }

    /// Sends a request with `send` and waits for its answer, at most
    /// `timeout`.
    #[cfg(feature = "async")]
    async fn wait(
        &self,
        timeout: Duration,
        send: impl FnOnce(Waiter) -> Result<u64, PeerError>,
    ) -> Result<OwnedResponse, PeerError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = send(Box::new(move |answer| {
            let _ = tx.send(answer);
        }))?;
        // Removes the entry however the wait ends (answer, timeout, drop);
        // one still there was abandoned, and the other side is told.
        struct Forget<'p> {
            peer: &'p Peer,
            id: u64,
        }
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                let waiter = self.peer.lock().cancel(self.id);
                if let Some(waiter) = waiter {
                    self.peer.announce(self.id, PeerError::Cancelled);
                    drop(waiter);
                }
            }
        }
        let _forget = Forget { peer: self, id };
        let mut rx = rx;
        match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(PeerError::Closed),
            Err(_) => {
                let waiter = self.lock().cancel(id);
                if waiter.is_none() {
                    // Answered (or ended) as the time ran out: whoever took
                    // the entry calls its waiter, or is about to, after the
                    // table's lock. The answer was dropped (the other side
                    // had done the work, a retry did it twice), and no
                    // cancel notice told it so.
                    return rx.await.unwrap_or(Err(PeerError::Timeout));
                }
                self.announce(id, PeerError::Timeout);
                drop(waiter);
                Err(PeerError::Timeout)
            }
        }
    }

    /// Cancels the pending request `id`: the other side is told, as
    /// [`request_with`](Peer::request_with) says, and then its waiter gets
    /// [`PeerError::Cancelled`]. Returns whether it was pending.
    ///
    /// ```
    /// use rpcwire::peer::{Peer, PeerError};
    /// use std::sync::Arc;
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// # /// What the other side would be sent.
    /// # #[derive(Default)]
    /// # struct Wire(Mutex<Vec<Bytes>>);
    /// # impl Outbound for Wire {
    /// #     fn send(&self, message: Bytes) -> Result<(), SendError> {
    /// #         self.0.lock().unwrap().push(message);
    /// #         Ok(())
    /// #     }
    /// # }
    ///
    /// let peer = Peer::new(Arc::new(Wire::default()));
    /// let heard = Arc::new(Mutex::new(None));
    /// let keep = Arc::clone(&heard);
    /// let id = peer.request_with_raw("wait", None, None, move |answer| {
    ///     *keep.lock().unwrap() = answer.err();
    /// })?;
    /// assert!(peer.cancel(id));
    /// assert_eq!(*heard.lock().unwrap(), Some(PeerError::Cancelled));
    /// // No longer pending: nothing to cancel.
    /// assert!(!peer.cancel(id));
    /// # Ok::<(), PeerError>(())
    /// ```
    pub fn cancel(&self, id: u64) -> bool {
        let waiter = self.lock().cancel(id);
        let Some(waiter) = waiter else {
            return false;
        };
        self.announce(id, PeerError::Cancelled);
        waiter(Err(PeerError::Cancelled));
        true
    }

    /// Fails every request whose deadline passed with
    /// [`PeerError::Timeout`] (each announced to the other side first, as
    /// [`request_with`](Peer::request_with) says); returns how many.
    ///
    /// ```
    /// use rpcwire::peer::{Peer, PeerError};
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// # /// What the other side would be sent.
    /// # #[derive(Default)]
    /// # struct Wire(Mutex<Vec<Bytes>>);
    /// # impl Outbound for Wire {
    /// #     fn send(&self, message: Bytes) -> Result<(), SendError> {
    /// #         self.0.lock().unwrap().push(message);
    /// #         Ok(())
    /// #     }
    /// # }
    ///
    /// let peer = Peer::new(Arc::new(Wire::default()));
    /// let now = Instant::now();
    /// let heard = Arc::new(Mutex::new(Vec::new()));
    /// for (method, deadline) in [("soon", now), ("later", now + Duration::from_secs(60))] {
    ///     let keep = Arc::clone(&heard);
    ///     peer.request_with_raw(method, None, Some(deadline), move |answer| {
    ///         keep.lock().unwrap().push((method, answer.err()));
    ///     })?;
    /// }
    /// assert_eq!(peer.expire(now), 1);
    /// assert_eq!(*heard.lock().unwrap(), [("soon", Some(PeerError::Timeout))]);
    /// assert_eq!(peer.pending(), 1);
    /// # Ok::<(), PeerError>(())
    /// ```
    pub fn expire(&self, now: Instant) -> usize {
        let mut expired = Vec::new();
        let n = self.lock().expire(now, |id, w| expired.push((id, w)));
        for (id, _) in &expired {
            self.announce(*id, PeerError::Timeout);
        }
        for (_, w) in expired {
            w(Err(PeerError::Timeout));
        }
        n
    }

    /// The earliest deadline of a pending request, if any: when a transport
    /// should call [`expire`](Peer::expire) next. rpcwire's stream and
    /// WebSocket drivers arm a timer on it; a transport of one's own
    /// does the same. Cheap (no lock) on a peer that never sent a request
    /// with a deadline.
    ///
    /// ```
    /// use rpcwire::peer::Peer;
    /// use std::{sync::Arc, time::{Duration, Instant}};
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # struct Wire;
    /// # impl Outbound for Wire {
    /// #     fn send(&self, _: Bytes) -> Result<(), SendError> { Ok(()) }
    /// # }
    /// let peer = Peer::new(Arc::new(Wire));
    /// assert_eq!(peer.next_deadline(), None);
    /// let soon = Instant::now() + Duration::from_secs(1);
    /// peer.request_with_raw("ping", None, Some(soon), |_| {})?;
    /// peer.request_with_raw("ping", None, None, |_| {})?;
    /// assert_eq!(peer.next_deadline(), Some(soon));
    /// # Ok::<(), rpcwire::peer::PeerError>(())
    /// ```
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self
            .inner
            .deadlines
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return None;
        }
        self.lock().next_deadline()
    }

    /// Registers the waker of whoever keeps the deadlines.
    #[cfg(feature = "server")]
    pub(crate) fn register_deadline_waker(&self, waker: &std::task::Waker) {
        self.inner.deadline_waker.register(waker);
    }

    /// Tells the other side this side gave up on its request `id`, if the
    /// protocol has a way.
    fn announce(&self, id: u64, why: PeerError) {
        let notice = self.inner.cancel_notice.get().map(|n| &**n);
        announce(&*self.inner.outbound, notice, id, why);
    }

    /// Learns the protocol's cancellation (from the connection's
    /// dispatcher, when it makes the connection or handles a message of
    /// it); the first one learnt stays.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn learn_cancel_notice(&self, notice: &Arc<CancelNotice>) {
        if self.inner.cancel_notice.get().is_none() {
            let _ = self.inner.cancel_notice.set(Arc::clone(notice));
        }
    }

    /// Fails every pending request with [`PeerError::Closed`], and every
    /// later one at once (the transport calls this when no answer can come
    /// any more: the connection ended, or its input did). The other side
    /// is told of each, as [`request_with`](Peer::request_with) says, where
    /// it can still hear it (a client that only closed its input; an MCP
    /// call's stream after its session ended). A transport of one's own
    /// must call it: dropping the last clone fails the pending requests
    /// too, but a waiter holding a clone of the peer (or a `Context`)
    /// keeps it from being dropped.
    ///
    /// ```
    /// use rpcwire::peer::{Peer, PeerError};
    /// use std::sync::Arc;
    /// # use rpcwire::{bytes::Bytes, peer::{Outbound, SendError}};
    /// # use std::sync::Mutex;
    /// # /// What the other side would be sent.
    /// # #[derive(Default)]
    /// # struct Wire(Mutex<Vec<Bytes>>);
    /// # impl Outbound for Wire {
    /// #     fn send(&self, message: Bytes) -> Result<(), SendError> {
    /// #         self.0.lock().unwrap().push(message);
    /// #         Ok(())
    /// #     }
    /// # }
    ///
    /// let wire = Arc::new(Wire::default());
    /// let peer = Peer::new(wire.clone());
    /// let heard = Arc::new(Mutex::new(None));
    /// let keep = Arc::clone(&heard);
    /// peer.request_with_raw("wait", None, None, move |answer| {
    ///     *keep.lock().unwrap() = answer.err();
    /// })?;
    /// peer.close();
    /// assert_eq!(*heard.lock().unwrap(), Some(PeerError::Closed));
    /// // Later requests are refused, and not sent.
    /// let later = peer.request_with_raw("later", None, None, |_| {});
    /// assert_eq!(later, Err(PeerError::Closed));
    /// assert_eq!(wire.0.lock().unwrap().len(), 1);
    /// # Ok::<(), PeerError>(())
    /// ```
    pub fn close(&self) {
        let mut closed = Vec::new();
        {
            // Set under the lock that `request_with` checks it under: a
            // request is either refused or in the table cleared here.
            let mut table = self.lock();
            self.inner
                .closed
                .store(true, std::sync::atomic::Ordering::Release);
            table.clear(|id, w| closed.push((id, w)));
        }
        for (id, _) in &closed {
            self.announce(*id, PeerError::Closed);
        }
        for (_, w) in closed {
            w(Err(PeerError::Closed));
        }
    }

    /// Gives back what a burst made the pending table grow to (the
    /// connection idles).
    #[cfg(feature = "server")]
    pub(crate) fn release_idle(&self) {
        crate::lock(&self.inner.pending).shrink_to_fit();
    }

    /// Fails every pending request with `why`, each announced to the
    /// other side first (as [`expire`](Peer::expire) does); returns how
    /// many. The peer stays open.
    #[cfg(feature = "server")]
    pub(crate) fn give_up_all(&self, why: PeerError) -> usize {
        let mut given_up = Vec::new();
        self.lock().clear(|id, w| given_up.push((id, w)));
        for (id, _) in &given_up {
            self.announce(*id, why);
        }
        let n = given_up.len();
        for (_, w) in given_up {
            w(Err(why));
        }
        n
    }

    /// How many requests wait for an answer.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    /// The first id this side has not given a request yet: every id from
    /// 1 below it was given (answered or not).
    pub(crate) fn ids_given_below(&self) -> u64 {
        self.inner.ids.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the request with `id` waits for its response.
    #[cfg(feature = "server")]
    pub(crate) fn awaits(&self, id: Id<'_>) -> bool {
        self.lock().contains(id)
    }

    /// Matches an incoming response to its request; `false` if none waits
    /// for it.
    pub(crate) fn complete(&self, input: Option<&Bytes>, response: Response<'_>) -> bool {
        let Some(waiter) = self.lock().take(response.id()) else {
            return false;
        };
        waiter(Ok(OwnedResponse::from_response(input, response)));
        true
    }

    /// Fails the pending request `id` with `error` (its answer was not a
    /// valid response). Returns whether it was pending.
    pub(crate) fn fail(&self, id: Id<'_>, error: PeerError) -> bool {
        let Some(waiter) = self.lock().take(id) else {
            return false;
        };
        waiter(Err(error));
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PendingTable<Waiter>> {
        // A waiter never runs under the lock, so a poisoned lock only means a
        // panic elsewhere while the table was consistent.
        crate::lock(&self.inner.pending)
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("pending", &self.pending())
            .finish()
    }
}

/// The id of the answer whose first bytes are `head`: an object whose
/// `id` member comes before its `result` or `error`, with no `method`
/// before them. Read as far as its members are whole; `None` when what was
/// read does not say.
#[cfg(feature = "server")]
pub(crate) fn answer_id_in_head(head: &[u8]) -> Option<Id<'_>> {
    crate::envelope::answer_id(head, crate::envelope::IdAt::Head, |h, at| {
        crate::scan::skip_value(h, at, 1, 64).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An answer whose entry was taken from the table just as the wait's
    /// time ran out (its waiter not yet called: that happens after the
    /// table's lock) reaches the caller; it was dropped for a timeout.
    /// The window is a few instructions on another thread; here the entry
    /// is held outside the table from the start.
    #[cfg(feature = "async")]
    #[tokio::test]
    async fn an_answer_taken_as_the_time_runs_out_is_not_lost() {
        #[derive(Default)]
        struct Wire(std::sync::Mutex<Vec<Bytes>>);
        impl Outbound for Wire {
            fn send(&self, message: Bytes) -> Result<(), SendError> {
                self.0.lock().unwrap().push(message);
                Ok(())
            }
        }
        let wire = Arc::new(Wire::default());
        let peer = Peer::new(wire.clone());
        let taken: Arc<std::sync::Mutex<Option<Waiter>>> = Arc::default();
        let answerer = Arc::clone(&taken);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let waiter = answerer.lock().unwrap().take().unwrap();
            let text = Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"result":"late"}"#);
            let arena = bumpalo::Bump::new();
            let crate::response::ResponseMessage::Single(r) =
                crate::envelope::parse_response(&text, &arena).unwrap()
            else {
                panic!("a single answer")
            };
            waiter(Ok(OwnedResponse::from_response(Some(&text), r)));
        });
        let answer = peer
            .wait(Duration::from_millis(5), |waiter| {
                *taken.lock().unwrap() = Some(waiter);
                Ok(7)
            })
            .await;
        assert_eq!(answer.unwrap().result().unwrap(), br#""late""#);
        assert!(wire.0.lock().unwrap().is_empty(), "no cancel notice");
    }

    /// A burst of requests answered (or cancelled, or expired, or closed)
    /// leaves the table near its floor, not at its peak: 100,000 requests
    /// with deadlines kept about 8 MiB of places for the connection's life.
    #[test]
    fn the_pending_table_gives_back_what_a_burst_took() {
        let now = Instant::now();
        let burst = |table: &mut PendingTable<u64>| -> Vec<u64> {
            (0..100_000u64)
                .map(|n| table.insert(n, Some(now + Duration::from_secs(n % 100 + 1))))
                .collect()
        };
        // What it gives back, it gives back within two windows of
        // removals: a trickle after the burst.
        let small = |table: &mut PendingTable<u64>| {
            for _ in 0..2 * SHRINK_WINDOW {
                let id = table.insert(0, None);
                table.cancel(id);
            }
            // The heap keeps room for what it reaches between compactions.
            table.entries.capacity() <= 2 * PENDING_KEPT
                && table.deadlines.capacity() <= 2 * (2 * table.entries.capacity() + 64)
        };
        let mut table = PendingTable::new();
        let answer = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":0}}"#);
        let arena = bumpalo::Bump::new();
        // Answered, but for one that stays pending.
        let ids = burst(&mut table);
        assert!(table.entries.capacity() >= 100_000);
        for &id in &ids[1..] {
            let text = answer(id);
            let Ok(crate::response::ResponseMessage::Single(r)) =
                crate::parse_response(text.as_bytes(), &arena)
            else {
                panic!("{text}")
            };
            assert!(table.take(r.id()).is_some());
        }
        assert_eq!(table.len(), 1);
        assert!(
            small(&mut table),
            "{:?}",
            (table.entries.capacity(), table.deadlines.capacity())
        );
        // Cancelled.
        let ids = burst(&mut table);
        for id in ids {
            assert!(table.cancel(id).is_some());
        }
        assert!(small(&mut table));
        // Expired.
        burst(&mut table);
        assert_eq!(
            table.expire(now + Duration::from_secs(1000), |_, _| ()),
            100_001
        );
        assert!(table.is_empty());
        assert!(small(&mut table));
        // Closed.
        burst(&mut table);
        let mut closed = 0;
        table.clear(|_, _| closed += 1);
        assert_eq!(closed, 100_000);
        assert!(small(&mut table));
        // Drained and idle at once: given back when asked.
        let ids = burst(&mut table);
        for id in ids {
            table.cancel(id);
        }
        assert!(table.entries.capacity() > 4 * PENDING_KEPT, "not yet");
        table.shrink_to_fit();
        assert!(table.entries.capacity() <= 2 * PENDING_KEPT);
        assert!(table.deadlines.capacity() <= 2 * (2 * table.entries.capacity() + 64));
        // The table still works, ids going on from where they were.
        let id = table.insert(7, None);
        assert_eq!(id, 500_001 + 4 * 2 * SHRINK_WINDOW as u64);
        assert_eq!(table.cancel(id), Some(7));
    }

    #[cfg(feature = "server")]
    #[test]
    fn an_answer_s_id_is_read_from_its_start() {
        let id = |head: &str| answer_id_in_head(head.as_bytes()).map(|i| i.as_bytes().to_vec());
        for (head, want) in [
            (r#"{"jsonrpc":"2.0","id":7,"result":"xxxx"#, Some(&b"7"[..])),
            (
                r#"{"id":"a-1","jsonrpc":"2.0","error":{"code":-1,"mess"#,
                Some(b"\"a-1\""),
            ),
            (
                "{ \"jsonrpc\" : \"2.0\" , \"id\" : 12 , \"result\" : [",
                Some(b"12"),
            ),
            // Not told by what was read, or not an answer.
            (r#"{"jsonrpc":"2.0","result":"xxxx"#, None),
            (r#"{"jsonrpc":"2.0","result":1,"id":7}"#, None),
            (r#"{"jsonrpc":"2.0","id":7,"method":"x","params":["#, None),
            (r#"{"method":"x","id":7,"result":1"#, None),
            (r#"{"jsonrpc":"2.0","id":7"#, None),
            (r#"{"jsonrpc":"2.0","id":[7],"result":1"#, None),
            (r#"[{"jsonrpc":"2.0","id":7,"result":1"#, None),
            (r#"{"jsonrpc":"2.0","id":12"#, None),
            // The caller skips what comes before the message.
            ("Content-Length: 9\r\n\r\n{\"id\":3,\"result\":{", None),
            (" {\"id\":3,\"result\":{", None),
            ("", None),
        ] {
            assert_eq!(id(head).as_deref(), want, "{head:?}");
        }
    }

    /// Small answers are copied out of the buffer they were read into (a
    /// kept one held the whole buffer); a large one that fills most of it
    /// shares it.
    #[test]
    fn only_large_answers_share_the_read_buffer() {
        let arena = bumpalo::Bump::new();
        let within = |b: &Bytes, v: &[u8]| b.as_ptr_range().contains(&v.as_ptr());
        let mut read = br#"{"jsonrpc":"2.0","id":1,"result":true}"#.to_vec();
        read.resize(64 * 1024, b' ');
        let read = Bytes::from(read);
        let crate::response::ResponseMessage::Single(r) =
            crate::envelope::parse_response(&read, &arena).unwrap()
        else {
            panic!("a single answer")
        };
        let small = OwnedResponse::from_response(Some(&read), r);
        assert_eq!(small.result().unwrap(), b"true");
        assert!(!within(&read, small.result().unwrap()), "copied");

        let big = format!(r#""{}""#, "a".repeat(SHARED_FROM));
        let read = Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":2,"error":{{"code":-1,"message":"m","data":{big}}}}}"#
        ));
        let crate::response::ResponseMessage::Single(r) =
            crate::envelope::parse_response(&read, &arena).unwrap()
        else {
            panic!("a single answer")
        };
        let large = OwnedResponse::from_response(Some(&read), r);
        let data = large.result().unwrap_err().data.clone().unwrap();
        assert_eq!(&data[..], big.as_bytes());
        assert!(within(&read, &data), "shared");
    }

    /// The deadline heap agrees with a scan of the pending requests through
    /// inserts, answers, cancellations, replacements and expiries in a
    /// pseudo-random order, expires earliest first, and stays within twice
    /// the pending requests (plus slack) however many were answered.
    #[test]
    fn deadlines_agree_with_a_scan_and_stay_bounded() {
        let start = Instant::now();
        let mut table: PendingTable<u64> = PendingTable::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut now = start;
        for step in 0..20_000u64 {
            match random(10) {
                0..=4 => {
                    let deadline =
                        (random(4) != 0).then(|| now + Duration::from_millis(random(5_000)));
                    table.insert(step, deadline);
                }
                5 | 6 => {
                    let id = random(table.next);
                    let text = id.to_string();
                    let _ = table.take(Id::from_json(text.as_bytes()).unwrap());
                }
                7 => {
                    let _ = table.cancel(random(table.next));
                }
                8 => {
                    let id = random(table.next);
                    table.insert_as(id, step, Some(now + Duration::from_millis(random(5_000))));
                }
                _ => {
                    now += Duration::from_millis(random(200));
                    let due: Vec<u64> = table
                        .entries
                        .iter()
                        .filter(|(_, (_, d))| d.is_some_and(|d| d <= now))
                        .map(|(id, _)| *id)
                        .collect();
                    let deadline_of: HashMap<u64, Option<Instant>> =
                        table.entries.iter().map(|(id, (_, d))| (*id, *d)).collect();
                    let mut expired = Vec::new();
                    table.expire(now, |id, _| expired.push(id));
                    assert!(
                        expired
                            .windows(2)
                            .all(|w| deadline_of[&w[0]] <= deadline_of[&w[1]]),
                        "step {step}: not earliest first"
                    );
                    for id in &expired {
                        assert!(!table.entries.contains_key(id));
                    }
                    let mut sorted_due = due.clone();
                    sorted_due.sort_unstable();
                    let mut sorted = expired.clone();
                    sorted.sort_unstable();
                    assert_eq!(sorted, sorted_due, "step {step}");
                }
            }
            let scanned = table.entries.values().filter_map(|(_, d)| *d).min();
            assert_eq!(table.next_deadline(), scanned, "step {step}");
            assert!(
                table.deadlines.len() <= 2 * table.entries.len() + 65,
                "step {step}: {} deadlines for {} pending",
                table.deadlines.len(),
                table.entries.len()
            );
        }
    }
}
