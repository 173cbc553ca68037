//! Layer 5: run handlers and write replies straight into the caller's buffer.
//!
//! The reply to a request is written as it is produced: the envelope head
//! (`{"jsonrpc":"2.0","id":…,"result":`) goes into the output buffer, the
//! handler writes its result after it, and the dispatcher closes the object.
//! If the handler fails (or panics), what it wrote is cut off and an error
//! object takes its place. There is no intermediate `Value`, and results that
//! are already JSON (an upstream node's bytes) are copied, not re-validated.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};

use bumpalo::Bump;
use serde::{Deserialize, Serialize};

use crate::envelope::{Entry, Message, Parser, Request};
use crate::error::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::router::{Router, RouterError};
use crate::value::{Id, Params, RawValue};
use crate::write;

/// Server-defined code for a reply that would exceed the response size
/// limit (as geth).
pub const RESPONSE_TOO_LARGE: i32 = -32003;

/// An error a handler answers with: code, message and optional `data`.
///
/// ```
/// let e = rpcwire::RpcError::invalid_params("expected a block tag")
///     .with_data(&serde_json::json!({"field": "block", "expected": ["latest", "safe"]}));
/// assert_eq!(e.code(), -32602);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError(Box<ErrorParts>);

/// Boxed so that a handler's `Result<Done, RpcError>` is one word, returned
/// in a register on the success path.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ErrorParts {
    code: i32,
    message: Cow<'static, str>,
    /// Serialized JSON.
    data: Option<Box<str>>,
}

impl RpcError {
    /// An error with any code; -32000 to -32099 are for server-defined
    /// errors.
    pub fn new(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError(Box::new(ErrorParts {
            code,
            message: message.into(),
            data: None,
        }))
    }

    /// -32602 Invalid params, with a message saying what is wrong.
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// -32603 Internal error.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        RpcError::new(INTERNAL_ERROR, message)
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

    /// Attaches `data` that is already JSON, unchecked.
    pub fn with_raw_data(mut self, json: impl Into<Box<str>>) -> Self {
        self.0.data = Some(json.into());
        self
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
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.code())
    }
}

impl std::error::Error for RpcError {}

impl From<serde_json::Error> for RpcError {
    /// A params decoding failure: -32602, with serde's explanation in `data`.
    fn from(e: serde_json::Error) -> Self {
        RpcError::invalid_params("Invalid params").with_data(&ParamsErrorData {
            reason: &e.to_string(),
        })
    }
}

#[derive(Serialize)]
struct ParamsErrorData<'a> {
    reason: &'a str,
}

/// Proof that a handler wrote a result: only [`Reply`]'s methods make one.
#[must_use = "return the Done from the handler"]
#[derive(Debug)]
pub struct Done(());

/// Where a handler writes its result: straight into the reply buffer, after
/// the envelope head. Each method consumes the `Reply` and returns [`Done`].
///
/// ```
/// # use rpcwire::{Dispatcher, Call, Done, RpcError};
/// let d = Dispatcher::<()>::builder()
///     .method("eth_chainId", |call: Call<'_, ()>| Ok(call.reply.quantity(1)))
///     .method("web3_clientVersion", |call: Call<'_, ()>| Ok(call.reply.str("rpcwire/0.1")))
///     .method("eth_getBlockByNumber", |call: Call<'_, ()>| Ok(call.reply.raw(br#"{"number":"0x1"}"#)))
///     .build()?;
/// let (mut arena, mut out) = (bumpalo::Bump::new(), Vec::new());
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#, &(), &mut arena, &mut out);
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#);
/// # Ok::<(), rpcwire::RouterError>(())
/// ```
pub struct Reply<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Reply<'a> {
    /// Pre-serialized JSON, copied as is (not validated: the caller vouches
    /// for it, e.g. bytes an upstream node answered with).
    pub fn raw(self, json: &[u8]) -> Done {
        self.out.extend_from_slice(json);
        Done(())
    }

    /// A value from a parsed message (for instance an upstream response's
    /// `result`), copied byte for byte.
    pub fn raw_value(self, value: RawValue<'_>) -> Done {
        self.raw(value.as_bytes())
    }

    /// Any `Serialize` value, serialized in place with serde_json.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Done, RpcError> {
        match serde_json::to_writer(&mut *self.out, value) {
            Ok(()) => Ok(Done(())),
            Err(e) => Err(
                RpcError::internal("result could not be serialized").with_data(&ParamsErrorData {
                    reason: &e.to_string(),
                }),
            ),
        }
    }

    /// A JSON string, escaped as needed.
    pub fn str(self, s: &str) -> Done {
        write::string(self.out, s);
        Done(())
    }

    /// An unsigned integer.
    pub fn u64(self, v: u64) -> Done {
        write::u64(self.out, v);
        Done(())
    }

    /// A signed integer.
    pub fn i64(self, v: i64) -> Done {
        write::i64(self.out, v);
        Done(())
    }

    /// `true` or `false`.
    pub fn bool(self, v: bool) -> Done {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Done(())
    }

    /// `null`.
    pub fn null(self) -> Done {
        self.out.extend_from_slice(b"null");
        Done(())
    }

    /// An Ethereum QUANTITY: `"0x"` and lowercase hex without leading zeros
    /// (`"0x0"` for zero).
    pub fn quantity(self, v: u128) -> Done {
        write::quantity(self.out, v);
        Done(())
    }

    /// Ethereum DATA: `"0x"` and two hex digits per byte.
    pub fn hex_data(self, bytes: &[u8]) -> Done {
        write::hex_data(self.out, bytes);
        Done(())
    }
}

/// Everything a handler receives for one request.
pub struct Call<'a, S> {
    /// The params, raw until decoded; `None` when absent or `null`.
    pub params: Option<Params<'a>>,
    /// The per-message arena, reset between messages.
    pub arena: &'a Bump,
    /// The caller's state.
    pub state: &'a S,
    /// Where the result goes.
    pub reply: Reply<'a>,
    method: &'a str,
    id: Option<Id<'a>>,
}

impl<'a, S> Call<'a, S> {
    /// The method name.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request id; `None` for a notification (whose result is
    /// discarded).
    pub fn id(&self) -> Option<Id<'a>> {
        self.id
    }

    /// Decodes the params into `T`, borrowing from the message where `T`
    /// borrows (`&str`, `&RawValue`); see [`Params::decode`]. Absent params
    /// decode as `[]`, so `()`, `Vec<_>` and all-optional tuples accept a
    /// call without params. A failure is -32602 with serde's reason in
    /// `data`.
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, RpcError> {
        match self.params {
            Some(p) => p.decode(),
            None => serde_json::from_slice(b"[]").map_err(RpcError::from),
        }
    }
}

impl<'a> Params<'a> {
    /// Decodes the params into `T` with serde_json, borrowing from the
    /// message where `T` borrows. A failure is -32602 with serde's reason in
    /// `data`.
    ///
    /// serde_json reads the params in place, at every size. simd-json was
    /// measured against it (`cargo bench --bench decode`; simd-json needs a
    /// mutable buffer, so the params are copied into the arena, its buffers
    /// reused): serde_json was faster for `eth_getBalance` (60 B, 64 vs
    /// 102 ns), `eth_call` (330 B, 222 vs 257 ns), an MCP `tools/call`,
    /// a 1 KB raw transaction (185 vs 278 ns), a 128 KiB one (23 vs 36 µs)
    /// and a list of 2000 hashes (136 KiB, 66 vs 74 µs), and level on an
    /// `eth_getLogs` filter. Typed decoding of small borrowed structs is
    /// dominated by serde's visitor calls, which both share; simd-json's
    /// SIMD stage cannot win it back after the copy.
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, RpcError> {
        serde_json::from_slice(self.as_bytes()).map_err(RpcError::from)
    }
}

type SyncHandler<S> = Box<dyn Fn(Call<'_, S>) -> Result<Done, RpcError> + Send + Sync>;

pub(crate) enum Handler<S> {
    Sync(SyncHandler<S>),
    #[cfg(feature = "async")]
    Async(crate::dispatch_async::AsyncHandler<S>),
}

/// Builds a [`Dispatcher`]: register methods, set limits, `build`.
pub struct DispatcherBuilder<S> {
    methods: Vec<(String, Handler<S>)>,
    parser: Parser,
    max_response_len: usize,
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    max_in_flight: usize,
}

impl<S> DispatcherBuilder<S> {
    /// Registers a handler for `name`.
    pub fn method<F>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Call<'_, S>) -> Result<Done, RpcError> + Send + Sync + 'static,
    {
        self.methods
            .push((name.into(), Handler::Sync(Box::new(handler))));
        self
    }

    /// The parser and its limits (depth, message size, batch length).
    pub fn parser(mut self, parser: Parser) -> Self {
        self.parser = parser;
        self
    }

    /// The largest reply written, in bytes (default 25 MB, as geth). A
    /// single reply that would be larger is replaced by a -32003 error whose
    /// `data` gives the limit; in a batch, the entry that crosses the limit
    /// and every entry after it are answered with that error, in order, and
    /// are not run.
    pub fn max_response_len(mut self, bytes: usize) -> Self {
        self.max_response_len = bytes;
        self
    }

    /// Builds the dispatcher. Fails on a duplicate method name, an empty one,
    /// or one starting with `rpc.`.
    pub fn build(self) -> Result<Dispatcher<S>, RouterError> {
        Ok(Dispatcher {
            router: Router::new(self.methods)?,
            parser: self.parser,
            max_response_len: self.max_response_len,
            max_in_flight: self.max_in_flight,
        })
    }

    #[cfg(feature = "async")]
    pub(crate) fn push(&mut self, name: String, handler: Handler<S>) {
        self.methods.push((name, handler));
    }

    #[cfg(feature = "async")]
    pub(crate) fn set_max_in_flight(&mut self, n: usize) {
        self.max_in_flight = n.max(1);
    }
}

/// Routes JSON-RPC messages to handlers and writes the replies.
///
/// A `Dispatcher` is immutable once built and can be shared across threads
/// (it is `Send + Sync` when `S` is `Sync`).
///
/// ```
/// use rpcwire::{Call, Dispatcher};
///
/// struct Node { height: u64 }
///
/// let d = Dispatcher::<Node>::builder()
///     .method("eth_blockNumber", |call: Call<'_, Node>| Ok(call.reply.quantity(call.state.height.into())))
///     .method("subtract", |call: Call<'_, Node>| {
///         let (a, b): (i64, i64) = call.decode()?;
///         Ok(call.reply.i64(a - b))
///     })
///     .build()?;
/// let node = Node { height: 0x1b4 };
/// let (mut arena, mut out) = (bumpalo::Bump::new(), Vec::new());
/// d.handle(br#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},
///              {"jsonrpc":"2.0","id":2,"method":"subtract","params":[42,23]},
///              {"jsonrpc":"2.0","method":"subtract","params":[1,1]}]"#, &node, &mut arena, &mut out);
/// assert_eq!(out, br#"[{"jsonrpc":"2.0","id":1,"result":"0x1b4"},{"jsonrpc":"2.0","id":2,"result":19}]"#);
/// # Ok::<(), rpcwire::RouterError>(())
/// ```
pub struct Dispatcher<S> {
    pub(crate) router: Router<Handler<S>>,
    pub(crate) parser: Parser,
    pub(crate) max_response_len: usize,
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) max_in_flight: usize,
}

impl<S> Dispatcher<S> {
    /// Default response size limit: 25 MB, as geth.
    pub const DEFAULT_MAX_RESPONSE_LEN: usize = 25 * 1000 * 1000;

    /// A builder with the default limits and no methods.
    pub fn builder() -> DispatcherBuilder<S> {
        DispatcherBuilder {
            methods: Vec::new(),
            parser: Parser::new(),
            max_response_len: Self::DEFAULT_MAX_RESPONSE_LEN,
            max_in_flight: 16,
        }
    }

    /// Handles one message and appends the complete reply to `out`, or
    /// nothing at all (a notification, or a batch of only notifications).
    /// Returns whether a reply was written.
    ///
    /// `arena` is reset first and holds per-message scratch (decoded method
    /// names, batch bookkeeping); reuse one arena and one `out` across
    /// messages and steady-state dispatch allocates nothing.
    ///
    /// Every case of the JSON-RPC 2.0 specification is answered as the
    /// crate's design notes list: one -32700 for invalid JSON, one -32600
    /// for `[]` and for non-object messages, -32600 in place for invalid
    /// batch entries (with the id when it could be read), -32601 for unknown
    /// methods (and every `rpc.` method), replies in request order.
    /// Synchronous handlers only: an async handler reached here is answered
    /// with -32603 (use `handle_async`).
    pub fn handle(&self, input: &[u8], state: &S, arena: &mut Bump, out: &mut Vec<u8>) -> bool {
        arena.reset();
        let arena = &*arena;
        let start = out.len();
        match self.parser.parse(input, arena) {
            Err(e) => write_parse_error(out, e),
            Ok(Message::Single(entry)) => {
                self.entry(entry, state, arena, out, start);
                if out.len() - start > self.max_response_len {
                    out.truncate(start);
                    let id = match entry {
                        Entry::Request(r) => r.id().unwrap_or(Id::NULL),
                        Entry::Invalid(i) => i.id(),
                    };
                    write_too_large(out, id, self.max_response_len);
                }
            }
            Ok(Message::Batch(batch)) => {
                out.push(b'[');
                let mut any = false;
                let mut over = false;
                for entry in batch {
                    let before = out.len();
                    if any {
                        out.push(b',');
                    }
                    let body = out.len();
                    if over {
                        // Past the size limit: answered, not run.
                        if let Some(id) = reply_id(&entry) {
                            write_too_large(out, id, self.max_response_len);
                        }
                    } else {
                        self.entry(entry, state, arena, out, body);
                        if out.len() - start > self.max_response_len {
                            over = true;
                            out.truncate(body);
                            if let Some(id) = reply_id(&entry) {
                                write_too_large(out, id, self.max_response_len);
                            }
                        }
                    }
                    if out.len() == body {
                        out.truncate(before);
                    } else {
                        any = true;
                    }
                }
                if any {
                    out.push(b']');
                } else {
                    out.truncate(start);
                }
            }
        }
        out.len() > start
    }

    /// Writes the reply to one entry at the end of `out` (nothing for a
    /// notification); `start` is where the entry's reply begins.
    pub(crate) fn entry(
        &self,
        entry: Entry<'_>,
        state: &S,
        arena: &Bump,
        out: &mut Vec<u8>,
        start: usize,
    ) {
        match entry {
            Entry::Invalid(inv) => write_request_error(out, inv.id(), inv.error()),
            Entry::Request(req) => self.request(req, state, arena, out, start),
        }
    }

    fn request(&self, req: Request<'_>, state: &S, arena: &Bump, out: &mut Vec<u8>, start: usize) {
        let handler = match self.router.get(req.method()) {
            Some(Handler::Sync(h)) => h,
            #[cfg(feature = "async")]
            Some(Handler::Async(_)) => {
                if let Some(id) = req.id() {
                    write_error(
                        out,
                        id,
                        INTERNAL_ERROR,
                        "async method called through a sync dispatch",
                        None,
                    );
                }
                return;
            }
            None => {
                if let Some(id) = req.id() {
                    write_method_not_found(out, id, req.method());
                }
                return;
            }
        };
        let id = req.id();
        write_head(out, id.unwrap_or(Id::NULL));
        let head_end = out.len();
        let call = Call {
            params: req.params(),
            arena,
            state,
            reply: Reply { out: &mut *out },
            method: req.method(),
            id,
        };
        let result = catch_unwind(AssertUnwindSafe(|| handler(call)));
        if id.is_none() {
            // A notification: run, never answered.
            out.truncate(start);
            return;
        }
        match result {
            Ok(Ok(Done(()))) => out.push(b'}'),
            Ok(Err(e)) => {
                out.truncate(head_end - RESULT_KEY.len());
                write_error_tail(out, e.code(), e.message(), e.data().map(str::as_bytes));
            }
            Err(panic) => {
                out.truncate(head_end - RESULT_KEY.len());
                let mut data = Vec::new();
                let _ = serde_json::to_writer(
                    &mut data,
                    &PanicData {
                        panic: panic_reason(&*panic),
                    },
                );
                write_error_tail(out, INTERNAL_ERROR, "Internal error", Some(&data));
            }
        }
    }
}

/// The `data` of the -32603 that answers a panicking handler.
#[derive(Serialize)]
pub(crate) struct PanicData<'a> {
    pub(crate) panic: &'a str,
}

/// The message a panic carried, when it is a string.
pub(crate) fn panic_reason(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("handler panicked")
}

/// The id a reply to `entry` carries, or `None` if it gets no reply.
fn reply_id<'a>(entry: &Entry<'a>) -> Option<Id<'a>> {
    match entry {
        Entry::Request(r) => r.id(),
        Entry::Invalid(i) => Some(i.id()),
    }
}

const RESULT_KEY: &[u8] = b",\"result\":";

/// `{"jsonrpc":"2.0","id":<id>,"result":`
#[inline]
pub(crate) fn write_head(out: &mut Vec<u8>, id: Id<'_>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write::small(out, id.as_bytes());
    out.extend_from_slice(RESULT_KEY);
}

/// `,"error":{…}}` after `{"jsonrpc":"2.0","id":<id>`.
pub(crate) fn write_error_tail(out: &mut Vec<u8>, code: i32, message: &str, data: Option<&[u8]>) {
    out.extend_from_slice(b",\"error\":{\"code\":");
    write::i64(out, code as i64);
    out.extend_from_slice(b",\"message\":");
    write::string(out, message);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data);
    }
    out.extend_from_slice(b"}}");
}

pub(crate) fn write_error(
    out: &mut Vec<u8>,
    id: Id<'_>,
    code: i32,
    message: &str,
    data: Option<&[u8]>,
) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    write_error_tail(out, code, message, data);
}

/// The error reply for a whole message (id null) or an invalid entry, with
/// the error's `data` written in place.
pub(crate) fn write_request_error(out: &mut Vec<u8>, id: Id<'_>, e: crate::Error) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"error\":{\"code\":");
    write::i64(out, e.code() as i64);
    out.extend_from_slice(b",\"message\":\"");
    out.extend_from_slice(e.message().as_bytes());
    out.extend_from_slice(b"\",\"data\":");
    e.write_data(out);
    out.extend_from_slice(b"}}");
}

pub(crate) fn write_parse_error(out: &mut Vec<u8>, e: crate::Error) {
    write_request_error(out, Id::NULL, e);
}

pub(crate) fn write_method_not_found(out: &mut Vec<u8>, id: Id<'_>, method: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(
        b",\"error\":{\"code\":-32601,\"message\":\"Method not found\",\"data\":{\"method\":",
    );
    write::string(out, method);
    out.extend_from_slice(b"}}}");
}

pub(crate) fn write_too_large(out: &mut Vec<u8>, id: Id<'_>, limit: usize) {
    let mut data = Vec::with_capacity(32);
    data.extend_from_slice(b"{\"limit\":");
    write::u64(&mut data, limit as u64);
    data.push(b'}');
    write_error(
        out,
        id,
        RESPONSE_TOO_LARGE,
        "Response too large",
        Some(&data),
    );
}
