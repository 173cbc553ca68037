//! Layer 5: run handlers and write replies straight into the caller's buffer.
//!
//! There is one dispatch path. Synchronous handlers run inline, in
//! [`Dispatcher::handle`] and in `Dispatcher::handle_async` alike; async
//! handlers (feature `async`) run concurrently under a cap. Every reply, of
//! either kind, goes through the one reply writer (module `reply`): batch
//! brackets and commas, ids echoed from the requests, and the response size
//! limit enforced as a budget before anything is written.
//!
//! Whether a dispatcher has async methods is part of its type: a
//! [`DispatcherBuilder`] starts as [`SyncOnly`] and becomes [`WithAsync`]
//! when an async method is registered. `handle` (synchronous, no executor
//! needed) exists only on `Dispatcher<S, SyncOnly>`, so calling it on a
//! dispatcher whose methods need awaiting does not compile.

mod call;
#[cfg(feature = "async")]
pub(crate) mod engine;
mod error;
#[cfg(feature = "async")]
pub(crate) mod held;
mod reply;

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use bumpalo::Bump;
use bytes::Bytes;

pub use call::Call;
pub(crate) use call::Invocation;
#[cfg(feature = "async")]
pub use engine::{AsyncCall, Cancellation, CancelledReply, OwnedParams};
pub use error::RpcError;
pub(crate) use reply::{Budget, Outcome, Sink, TooLarge};
pub use reply::{Done, IntoResponse, IntoResult, Reply, ReplyBuf};

use crate::codes::SERVER_ERROR;
use crate::conn::{Connection, Context};
use crate::envelope::Parser;
use crate::message::{Incoming, Message};
use crate::request::{Entry, Id, Request};
use crate::router::{BuildError, Router};
use reply::{
    Discard, write_error_reply, write_method_not_found_tail, write_reply, write_request_error_tail,
};

/// Marks a dispatcher whose methods are all synchronous: it has
/// [`Dispatcher::handle`], which needs no executor.
#[derive(Clone, Copy, Debug)]
pub enum SyncOnly {}

/// Marks a dispatcher with async methods: it is driven by
/// `Dispatcher::handle_async` (feature `async`), and has no synchronous
/// `handle`, so this does not compile:
///
/// ```compile_fail
/// # // Compiled with the `async` feature (`cargo test --all-features`).
/// use rpcwire::{Connection, Dispatcher, dispatch::AsyncCall};
/// let d = Dispatcher::builder(())
///     .async_method("m", |_c: AsyncCall<()>| async { Ok::<_, rpcwire::RpcError>(1) })
///     .build()
///     .unwrap();
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#, &mut Connection::new(), &mut Vec::new());
/// ```
#[derive(Clone, Copy, Debug)]
pub enum WithAsync {}

/// A synchronous handler, its return type erased: it makes the [`Call`]
/// (with a [`Reply`] over `sink`, bounded by `limit`), and writes the
/// returned value through a second one.
pub(crate) type SyncFn<S> =
    dyn Fn(Invocation<'_, S>, &mut Sink<'_>, usize) -> Result<Done, RpcError> + Send + Sync;

pub(crate) enum Handler<S> {
    Sync(Box<SyncFn<S>>),
    #[cfg(feature = "async")]
    Async(Arc<engine::AsyncFn<S>>),
}

/// Builds a [`Dispatcher`]: register methods, set limits, `build`.
pub struct DispatcherBuilder<S, K = SyncOnly> {
    methods: Vec<(String, Handler<S>)>,
    discover: Option<Handler<S>>,
    fallback: Option<Handler<S>>,
    state: S,
    parser: Parser,
    max_response_len: usize,
    too_large_code: i32,
    timeout_code: i32,
    max_in_flight: usize,
    timeout: Option<Duration>,
    quiet_panics: bool,
    panic_messages: bool,
    observer: Option<Arc<dyn Observer>>,
    #[cfg(feature = "async")]
    cancel_by: Option<engine::CancelBy>,
    /// The member of the cancellation notification that says why, in the
    /// ones this side sends ([`cancel_reason`](DispatcherBuilder::cancel_reason)).
    #[cfg(feature = "async")]
    cancel_reason: Option<Box<str>>,
    /// The cancellation this side's peer sends, when it is not the one
    /// `cancel_by` reads (MCP reads its own).
    #[cfg(feature = "async")]
    cancel_notice: Option<crate::peer::CancelNotice>,
    kind: PhantomData<fn() -> K>,
}

impl<S: Send + Sync + 'static, K> DispatcherBuilder<S, K> {
    /// Registers a synchronous handler for `name`.
    ///
    /// The handler returns `Result<T, E>`: `T` is any `Serialize` value
    /// (serialized straight into the reply), or the [`Done`] of a [`Reply`]
    /// method for handlers that write their result themselves; `E` is
    /// anything that converts into [`RpcError`].
    ///
    /// A returned `T` cannot borrow from the call (the handler's return type
    /// is one type for every call, whatever its lifetime): rustc says
    /// "lifetime may not live long enough". Write a result that borrows from
    /// the params with [`Reply::json`] instead, as in `greet` below.
    ///
    /// ```
    /// use rpcwire::{Call, Connection, Dispatcher, RpcError};
    /// let d = Dispatcher::builder(40u64)
    ///     .method("add", |call: Call<'_, u64>| {
    ///         let (n,): (u64,) = call.decode()?;
    ///         Ok::<_, RpcError>(call.state + n)
    ///     })
    ///     .method("eth_chainId", |call: Call<'_, u64>| call.reply.str("0x1"))
    ///     .method("greet", |call: Call<'_, u64>| {
    ///         #[derive(serde::Serialize)]
    ///         struct Hello<'a> { hello: &'a str }
    ///         let (name,): (&str,) = call.decode()?;
    ///         call.reply.json(&Hello { hello: name }) // not `Ok(Hello { .. })`
    ///     })
    ///     .build()?;
    /// let (mut conn, mut out) = (Connection::new(), Vec::new());
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"add","params":[2]}"#, &mut conn, &mut out);
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":42}"#);
    /// out.clear();
    /// d.handle(br#"{"jsonrpc":"2.0","id":2,"method":"greet","params":["Ada"]}"#, &mut conn, &mut out);
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":2,"result":{"hello":"Ada"}}"#);
    /// # Ok::<(), rpcwire::router::BuildError>(())
    /// ```
    ///
    /// One handler under two names (an alias: a method renamed and kept
    /// under its old name, `eth_chainId` and `net_chainId`) is registered
    /// under each name, the same `fn` or a `Clone` closure; there is no
    /// alias registration. Each name is then a method of its own to
    /// observers ([`Route::Method`] has one index per name) and to
    /// metrics, counted apart.
    ///
    /// ```
    /// use rpcwire::{Call, Connection, Dispatcher, RpcError};
    /// fn chain_id(_: Call<'_, ()>) -> Result<&'static str, RpcError> {
    ///     Ok("0x1")
    /// }
    /// let d = Dispatcher::builder(())
    ///     .method("eth_chainId", chain_id)
    ///     .method("net_chainId", chain_id)
    ///     .build()?;
    /// let (mut conn, mut out) = (Connection::new(), Vec::new());
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"net_chainId"}"#, &mut conn, &mut out);
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#);
    /// # Ok::<(), rpcwire::router::BuildError>(())
    /// ```
    pub fn method<F, R>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Call<'_, S>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.methods
            .push((name.into(), Handler::Sync(erase_sync(handler))));
        self
    }

    /// Registers `rpc.discover` (OpenRPC's service discovery), the one name
    /// under the `rpc.` prefix that may be registered, and only through this
    /// explicit opt-in. Every other `rpc.` name stays reserved.
    pub fn rpc_discover<F, R>(mut self, handler: F) -> Self
    where
        F: Fn(Call<'_, S>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.discover = Some(Handler::Sync(erase_sync(handler)));
        self
    }

    /// Runs `handler` for every method no other handler is registered for
    /// (instead of answering -32601): a proxy forwarding what it does not
    /// serve itself, for instance. `rpc.` names stay reserved: they never
    /// reach it. The handler sees the method name with `call.method()`.
    ///
    /// The name is the client's text: observers see its calls as
    /// [`Route::Fallback`], and `server::Metrics` counts them all under one
    /// label, `(other)`, so that clients cannot make labels of their own.
    pub fn fallback<F, R>(mut self, handler: F) -> Self
    where
        F: Fn(Call<'_, S>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.fallback = Some(Handler::Sync(erase_sync(handler)));
        self
    }

    /// The parser and its limits (depth, message size, batch length, id
    /// length).
    pub fn parser(mut self, parser: Parser) -> Self {
        self.parser = parser;
        self
    }

    /// The largest reply written, in bytes (default 25 MB, as geth), an
    /// upper bound on what is buffered as well as on what is sent (with
    /// async calls in a batch, on each of two buffers: a reply that is ready
    /// before its turn waits in a buffer of its own, then is copied into
    /// place, so a batch's replies may hold up to twice the limit).
    ///
    /// A result that would make the reply larger is refused as it is
    /// written (a [`Reply`] stops writing, `Reply::json` stops streaming),
    /// and the request is answered with the too-large error
    /// ([`too_large_code`](DispatcherBuilder::too_large_code), `data` giving
    /// the limit). In a batch, the entry that crosses the limit and every
    /// entry after it are answered with that error, in order, and are not
    /// run. With async calls in the batch, "after" is in the order replies
    /// are decided: calls run concurrently and finish in any order, so a
    /// reply decided before the limit was crossed (an entry that finished
    /// earlier, an invalid entry, an unknown method) keeps its place, and
    /// the requests not started by then are not run (a notification queued
    /// for a slot before then still runs: it adds nothing to the reply; the
    /// sync path runs none past the limit). A call already running
    /// when the limit is crossed keeps its reply if it fits the room held
    /// for it (it ran: a transaction sent, say), and so does one timed out
    /// or cancelled after (its timeout or cancellation error); an async
    /// call whose
    /// future is ready when first polled is decided in its turn, as a sync
    /// one. Room for those errors is held back before any handler runs
    /// (their size is known: ids are bounded by
    /// [`Parser::max_id_len`]); a message (a batch, or a single request)
    /// whose error replies alone would pass the limit is answered with one
    /// too-large error, `id: null`, and nothing runs. The reply to a
    /// message that cannot be read at all (-32700, a batch past its limit)
    /// is held to the limit too, falling back to that error. Not held to
    /// it: the refusals a transport writes itself before a message reaches
    /// the dispatcher (a frame or body past the transport's size limit,
    /// bytes its framer cannot read, HTTP's 4xx bodies), fixed texts with
    /// `id: null` of at most 256 bytes.
    ///
    /// At least [`MIN_RESPONSE_LEN`] (128 bytes, room for that error
    /// whatever its code and limit): a smaller value is taken as it.
    pub fn max_response_len(mut self, bytes: usize) -> Self {
        self.max_response_len = bytes.max(MIN_RESPONSE_LEN);
        self
    }

    /// The code of the too-large error (default -32000, a server error;
    /// geth's is -32003, `eth::codes::RESPONSE_TOO_LARGE`).
    pub fn too_large_code(mut self, code: i32) -> Self {
        self.too_large_code = code;
        self
    }

    /// The code of the error a call past its timeout is answered with
    /// (default -32000, a server error; geth's is -32002,
    /// `eth::codes::REQUEST_TIMEOUT`).
    pub fn timeout_code(mut self, code: i32) -> Self {
        self.timeout_code = code;
        self
    }

    /// Keeps caught handler panics quiet: the process's panic hook (which
    /// prints the message and, with `RUST_BACKTRACE`, a backtrace) is skipped
    /// for panics inside this dispatcher's handlers, which are answered with
    /// -32603 anyway. Panics anywhere else still reach the hook.
    ///
    /// Quiet or not, the -32603 carries the panic's message to the client
    /// (`"data":{"panic":"…"}`, or `"handler panicked"` for a payload that
    /// is not a string) unless [`panic_messages`](Self::panic_messages) is
    /// turned off: keep secrets out of panic messages (`expect` texts,
    /// `unwrap` on errors that quote them).
    ///
    /// This wraps the hook installed when the first quiet dispatcher is
    /// built (once per process); set your own hook before that.
    pub fn quiet_panics(mut self, quiet: bool) -> Self {
        self.quiet_panics = quiet;
        self
    }

    /// Whether the -32603 answering a panicking handler carries the
    /// panic's message in `data.panic` (default `true`: a client, or the
    /// developer reading its logs, sees what went wrong). With `false` it
    /// is a bare `{"code":-32603,"message":"Internal error"}`: for servers
    /// whose panic messages may hold what clients must not see (an
    /// `expect` text, an `unwrap` of an error that quotes a path or a
    /// key). The panic hook still gets the message
    /// ([`quiet_panics`](Self::quiet_panics) aside).
    ///
    /// ```
    /// use rpcwire::{Call, Connection, Dispatcher, RpcError};
    /// let d = Dispatcher::builder(())
    ///     .panic_messages(false)
    ///     .quiet_panics(true)
    ///     .method("boom", |_: Call<'_, ()>| -> Result<u8, RpcError> { panic!("key 1234") })
    ///     .build()
    ///     .unwrap();
    /// let mut out = Vec::new();
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#, &mut Connection::new(), &mut out);
    /// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error"}}"#);
    /// ```
    pub fn panic_messages(mut self, send: bool) -> Self {
        self.panic_messages = send;
        self
    }

    /// Reports every call to `observer` (method, id, error code, time).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Builds the dispatcher. Fails on a duplicate method name, an empty one,
    /// or one starting with `rpc.`.
    pub fn build(self) -> Result<Dispatcher<S, K>, BuildError> {
        if self.quiet_panics {
            install_quiet_hook();
        }
        // Requests this side sends are cancelled the way the other side's
        // are: the notification the dispatcher acts on is also the one its
        // peer sends.
        #[cfg(feature = "async")]
        let cancel_notice = self.cancel_notice.or_else(|| {
            self.cancel_by
                .as_ref()
                .map(|by| by.notice(self.cancel_reason.clone()))
        });
        let methods = MethodTable {
            names: self
                .methods
                .iter()
                .map(|(n, _)| n.as_str().into())
                .collect(),
        };
        Ok(Dispatcher {
            inner: Arc::new(Shared {
                router: Router::new(self.methods)?,
                methods,
                discover: self.discover,
                fallback: self.fallback,
                parser: self.parser,
                max_response_len: self.max_response_len,
                too_large: TooLarge::new(self.too_large_code, self.max_response_len),
                state: Arc::new(self.state),
                max_in_flight: self.max_in_flight,
                timeout: self.timeout,
                timeout_code: self.timeout_code,
                quiet: self.quiet_panics,
                panic_messages: self.panic_messages,
                observer: self.observer,
                #[cfg(feature = "async")]
                cancel_by: self.cancel_by,
                #[cfg(feature = "async")]
                cancel_notice: cancel_notice.map(Arc::new),
            }),
            kind: PhantomData,
        })
    }
}

fn erase_sync<S, F, R>(handler: F) -> Box<SyncFn<S>>
where
    S: 'static,
    F: Fn(Call<'_, S>) -> R + Send + Sync + 'static,
    R: IntoResponse,
{
    Box::new(
        // The sink by reference (see `reply::poll_reply`).
        move |inv: Invocation<'_, S>, sink: &mut Sink<'_>, limit: usize| {
            let at = sink.len();
            let returned = handler(inv.into_call(Reply::new(sink.reborrow(), limit)));
            if !R::WRITTEN_BY_HANDLER {
                // A handler that wrote through `call.reply`, dropped the
                // `Done` and returned a value: the value is the answer.
                sink.truncate(at);
            }
            returned.into_response(Reply::new(sink.reborrow(), limit))
        },
    )
}

/// Routes JSON-RPC messages to handlers and writes the replies.
///
/// A `Dispatcher` is immutable once built, `Send + Sync` when its state is,
/// and cheap to clone (it is shared behind one `Arc`): build it once and
/// hand a clone to every connection.
///
/// ```
/// use rpcwire::{Call, Connection, Dispatcher};
///
/// struct Node { height: u64 }
///
/// let d = Dispatcher::builder(Node { height: 0x1b4 })
///     .method("eth_blockNumber", |call: Call<'_, Node>| {
///         Ok::<_, rpcwire::RpcError>(format!("{:#x}", call.state.height))
///     })
///     .method("subtract", |call: Call<'_, Node>| {
///         let (a, b): (i64, i64) = call.decode()?;
///         Ok::<_, rpcwire::RpcError>(a - b)
///     })
///     .build()?;
/// let (mut conn, mut out) = (Connection::new(), Vec::new());
/// d.handle(br#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},
///              {"jsonrpc":"2.0","id":2,"method":"subtract","params":[42,23]},
///              {"jsonrpc":"2.0","method":"subtract","params":[1,1]}]"#, &mut conn, &mut out);
/// assert_eq!(out, br#"[{"jsonrpc":"2.0","id":1,"result":"0x1b4"},{"jsonrpc":"2.0","id":2,"result":19}]"#);
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Dispatcher<S = (), K = SyncOnly> {
    pub(crate) inner: Arc<Shared<S>>,
    kind: PhantomData<fn() -> K>,
}

impl<S, K> Clone for Dispatcher<S, K> {
    fn clone(&self) -> Self {
        Dispatcher {
            inner: Arc::clone(&self.inner),
            kind: PhantomData,
        }
    }
}

/// What every clone of a dispatcher shares.
pub(crate) struct Shared<S> {
    pub(crate) router: Router<Handler<S>>,
    /// The registered names in registration order, for observers: the
    /// `index` of a [`Route::Method`] is a position in it.
    methods: MethodTable,
    discover: Option<Handler<S>>,
    fallback: Option<Handler<S>>,
    pub(crate) parser: Parser,
    pub(crate) max_response_len: usize,
    pub(crate) too_large: TooLarge,
    pub(crate) state: Arc<S>,
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) max_in_flight: usize,
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) timeout: Option<Duration>,
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) timeout_code: i32,
    pub(crate) quiet: bool,
    /// [`DispatcherBuilder::panic_messages`].
    pub(crate) panic_messages: bool,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// The notification that cancels a call, if one does.
    #[cfg(feature = "async")]
    pub(crate) cancel_by: Option<engine::CancelBy>,
    /// The notification that tells the client this side gave up on a
    /// request it sent, taught to each connection's peer.
    #[cfg(feature = "async")]
    pub(crate) cancel_notice: Option<Arc<crate::peer::CancelNotice>>,
}

impl<S: Send + Sync + 'static> Dispatcher<S, SyncOnly> {
    /// A builder with `state` (what every handler sees as `call.state`),
    /// the default limits and no methods.
    pub fn builder(state: S) -> DispatcherBuilder<S, SyncOnly> {
        DispatcherBuilder {
            methods: Vec::new(),
            discover: None,
            fallback: None,
            state,
            parser: Parser::new(),
            max_response_len: DEFAULT_MAX_RESPONSE_LEN,
            too_large_code: SERVER_ERROR,
            timeout_code: SERVER_ERROR,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            timeout: Some(DEFAULT_TIMEOUT),
            quiet_panics: false,
            panic_messages: true,
            observer: None,
            #[cfg(feature = "async")]
            cancel_by: None,
            #[cfg(feature = "async")]
            cancel_reason: None,
            #[cfg(feature = "async")]
            cancel_notice: None,
            kind: PhantomData,
        }
    }

    /// Handles one message and appends the complete reply to `out`, or
    /// nothing at all (a notification, a batch of only notifications, or
    /// incoming responses, which are never answered). Returns whether a
    /// reply was written.
    ///
    /// `conn` holds the per-message arena (decoded method names, batch
    /// bookkeeping), reset here first, and the context handlers see; reuse
    /// one `Connection` and one `out` across messages and steady-state
    /// dispatch allocates nothing.
    ///
    /// Every case of the JSON-RPC 2.0 specification is answered (the
    /// README's table lists them all): one -32700 for invalid JSON, one -32600
    /// for `[]` and for non-object messages, -32600 in place for invalid
    /// batch entries (with the id when it could be read), -32601 for unknown
    /// methods (and every `rpc.` method but an opted-in `rpc.discover`),
    /// replies in request order, within the response size limit.
    ///
    /// Only on a dispatcher without async methods: one with them
    /// (`Dispatcher<S, WithAsync>`, feature `async`) is driven by
    /// `handle_async`, which takes the message as [`bytes::Bytes`] (its
    /// async handlers keep slices of it), not `&[u8]`:
    /// `d.handle_async(&Bytes::from_static(b"..."), &mut conn, &mut out).await`,
    /// or `Bytes::copy_from_slice(input)` for bytes read into a buffer of
    /// your own.
    pub fn handle<B: ReplyBuf>(&self, input: &[u8], conn: &mut Connection, out: &mut B) -> bool {
        conn.begin_message();
        #[cfg(feature = "async")]
        self.inner.teach_peer(conn);
        let start = out.len();
        self.inner.handle_sync(input, None, conn, out);
        conn.end_message();
        out.len() > start
    }
}

impl<S, K> Dispatcher<S, K> {
    /// The dispatcher's state.
    pub fn state(&self) -> &Arc<S> {
        &self.inner.state
    }

    /// The parser and its limits.
    pub fn parser(&self) -> &Parser {
        &self.inner.parser
    }

    /// The method names registered.
    pub fn methods(&self) -> impl Iterator<Item = &str> + '_ {
        self.inner.router.iter().map(|(name, _)| name)
    }
}

/// What a dispatcher reports of each call it answers (or notification it
/// runs), to an [`Observer`].
#[derive(Clone, Copy, Debug)]
pub struct CallRecord<'a> {
    /// The method, when the entry named one (`None` for an invalid entry
    /// or a message that could not be read).
    pub method: Option<&'a str>,
    /// The request id, byte for byte; `None` for a notification or an
    /// unreadable id.
    pub id: Option<Id<'a>>,
    /// The code of the error the call was answered with; `None` for a
    /// result (and for notifications, whose outcome is not sent). A call
    /// cancelled by its client (by id: MCP's `notifications/cancelled`,
    /// LSP's `$/cancelRequest`) is recorded with
    /// [`REQUEST_CANCELLED`](crate::codes::REQUEST_CANCELLED), whether a
    /// reply carried it or none was sent.
    pub code: Option<i32>,
    /// Whether a handler is registered for `method`: one of the
    /// dispatcher's methods, `rpc.discover` or the fallback (`false` for a
    /// name answered -32601: a client's text, which counters should not
    /// keep apart). [`route`](CallRecord::route) tells which.
    pub known: bool,
    /// Which handler `method` is routed to (whether or not it ran: an
    /// entry refused as too large before it started still names it).
    pub route: Route<'a>,
    /// From the start of the call to its reply.
    pub elapsed: Duration,
}

/// Which of a dispatcher's handlers a call's method name is routed to, in a
/// [`CallRecord`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Route<'a> {
    /// A method registered with the builder: the `index`th name of
    /// `table`. The table is the dispatcher's (every clone of a dispatcher
    /// shares one; tell dispatchers apart with
    /// [`MethodTable::ptr_eq`]), and its names are fixed once the
    /// dispatcher is built, so an observer can keep one counter per
    /// method, found by `index` without a lookup or a lock.
    Method {
        /// The dispatcher's registered names.
        table: &'a MethodTable,
        /// The position of the method in `table` (its registration order).
        index: usize,
    },
    /// `rpc.discover`, registered with
    /// [`rpc_discover`](DispatcherBuilder::rpc_discover).
    Discover,
    /// The [`fallback`](DispatcherBuilder::fallback) handler: the method
    /// name is whatever the client sent, which counters should not keep
    /// apart.
    Fallback,
    /// No handler: an unknown or reserved name (answered -32601), an
    /// invalid entry, a message that could not be read.
    Unrouted,
}

/// The names of a dispatcher's registered methods, in the order they were
/// registered: what [`Route::Method`]'s `index` points into. Cloning it
/// clones an `Arc`.
#[derive(Clone)]
pub struct MethodTable {
    names: Arc<[Box<str>]>,
}

impl MethodTable {
    /// The number of methods.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the dispatcher registered no method.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The name of the `index`th method.
    pub fn get(&self, index: usize) -> Option<&str> {
        self.names.get(index).map(|n| &**n)
    }

    /// Every name, in registration order (an index in [`Route::Method`] is
    /// a position in it).
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.iter().map(|n| &**n)
    }

    /// Whether `a` and `b` are the table of one dispatcher (or of its
    /// clones), whose indices mean the same methods; two dispatchers built
    /// apart have tables of their own, even with the same names.
    pub fn ptr_eq(a: &MethodTable, b: &MethodTable) -> bool {
        Arc::ptr_eq(&a.names, &b.names)
    }
}

impl std::fmt::Debug for MethodTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Sees every call a dispatcher answers: for counters per method and per
/// error code, latency histograms, logs. Called on the dispatching thread
/// after the reply is written, so it should be quick (atomics, a channel).
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
/// use rpcwire::dispatch::{CallRecord, Observer};
/// #[derive(Default)]
/// struct Errors(AtomicUsize);
/// impl Observer for Errors {
///     fn on_call(&self, call: &CallRecord<'_>) {
///         if call.code.is_some() { self.0.fetch_add(1, Ordering::Relaxed); }
///     }
/// }
/// let errors = Arc::new(Errors::default());
/// let d = rpcwire::Dispatcher::builder(()).observer(errors.clone()).build()?;
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#, &mut rpcwire::Connection::new(), &mut Vec::new());
/// assert_eq!(errors.0.load(Ordering::Relaxed), 1);
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub trait Observer: Send + Sync + 'static {
    /// One call answered.
    fn on_call(&self, call: &CallRecord<'_>);
}

/// Default response size limit: 25 MB, as geth.
pub const DEFAULT_MAX_RESPONSE_LEN: usize = 25 * 1000 * 1000;
/// The smallest response size limit
/// ([`DispatcherBuilder::max_response_len`]): room for the too-large error
/// with `id: null` whatever its code and limit (at most 125 bytes: code `i32::MIN`, limit `u64::MAX`).
pub const MIN_RESPONSE_LEN: usize = 128;
/// Default cap on the async handlers of one connection running at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Default per-request timeout of async handlers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The pieces of a connection a handler runs with.
#[derive(Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) arena: &'a Bump,
    pub(crate) ctx: &'a Context,
    pub(crate) message: &'a [u8],
    /// The connection's reply gate (rpcwire's two-way transports), which
    /// settles what handlers subscribe with how they are answered.
    #[cfg(feature = "async")]
    pub(crate) gate: Option<&'a engine::ReplyGate>,
}

impl<'a> Scope<'a> {
    /// `conn`'s arena and context, for the calls of `message`.
    #[inline]
    pub(crate) fn new(conn: &'a Connection, message: &'a [u8]) -> Self {
        Scope {
            arena: &conn.arena,
            ctx: &conn.context,
            message,
            #[cfg(feature = "async")]
            gate: conn.gate.as_deref(),
        }
    }
}

/// Hands the answers among `items` (a batch answered whole with an
/// error, whose requests do not run) to the pending table.
#[cold]
pub(crate) fn deliver_answers(items: &[Incoming<'_>], bytes: Option<&Bytes>, conn: &Connection) {
    for item in items {
        if conn.given.entry_of(item).is_none() {
            conn.deliver(bytes, *item);
        }
    }
}

impl<S: Send + Sync + 'static> Shared<S> {
    /// Parses `input` and answers everything in it synchronously (no async
    /// handler may be reached: only `SyncOnly` dispatchers call this).
    fn handle_sync<B: ReplyBuf>(
        &self,
        input: &[u8],
        bytes: Option<&Bytes>,
        conn: &Connection,
        out: &mut B,
    ) {
        let scope = Scope::new(conn, input);
        match self.parser.parse_incoming(input, scope.arena) {
            Err(e) => self.refuse_message(e, input, bytes, conn, out),
            Ok(Message::Single(item)) => {
                let Some(entry) = conn.given.entry_of(&item) else {
                    return conn.deliver(bytes, item);
                };
                let Some(id) = entry.reply_id() else {
                    return self.notify(entry, scope);
                };
                let Some((budget, too_large_len)) = self.single_budget(id) else {
                    return self.refuse_whole(out);
                };
                self.answer(&entry, id, scope, out, budget.allowance(too_large_len));
            }
            Ok(Message::Batch(batch)) => {
                let items = batch.as_slice();
                let Some(budget) = self.batch_budget(items, &conn.given) else {
                    deliver_answers(items, bytes, conn);
                    return self.refuse_whole(out);
                };
                self.answer_batch(items, budget, input, bytes, conn, out);
            }
        }
    }

    /// Answers a batch with nothing to await, in order, straight into `out`
    /// (the synchronous path, and the async one when no entry awaits).
    pub(crate) fn answer_batch<B: ReplyBuf>(
        &self,
        items: &[Incoming<'_>],
        mut budget: Budget,
        message: &[u8],
        bytes: Option<&Bytes>,
        conn: &Connection,
        out: &mut B,
    ) {
        let scope = Scope::new(conn, message);
        let mut any = false;
        // The buffer grows within the limit from here: a reply that filled
        // its allowance leaves it full, and the next separator would double
        // it.
        let most = out.len().saturating_add(budget.limit());
        for item in items {
            let Some(entry) = conn.given.entry_of(item) else {
                conn.deliver(bytes, *item);
                continue;
            };
            let Some(id) = entry.reply_id() else {
                if !budget.is_over() {
                    self.notify(entry, scope);
                }
                continue;
            };
            let too_large_len = self.too_large.len_for(id);
            let allowance = budget.allowance(too_large_len);
            reply::grow_within(out, too_large_len + 1, most);
            out.push(if any { b',' } else { b'[' });
            any = true;
            let (len, outcome) = if budget.is_over() {
                // Past the limit: answered, not run.
                self.too_large.write(out, id);
                self.report_unrun(entry.request().map(|r| r.method()), Some(id));
                (too_large_len, Outcome::TooLarge)
            } else {
                self.answer(&entry, id, scope, out, allowance)
            };
            budget.commit(too_large_len, len, outcome);
        }
        if any {
            reply::grow_within(out, 1, most);
            out.push(b']');
        }
    }

    /// Answers a message the parser refused with `e`; the answers inside
    /// a batch refused whole still reach their requests
    /// ([`deliver_refused_answers`](Self::deliver_refused_answers)), and a
    /// message of answers alone is not answered (answering answers would
    /// start a loop between two peers).
    #[cold]
    #[inline(never)]
    pub(crate) fn refuse_message<B: ReplyBuf>(
        &self,
        e: crate::Error,
        input: &[u8],
        bytes: Option<&Bytes>,
        conn: &Connection,
        out: &mut B,
    ) {
        if !self.deliver_refused_answers(e, input, bytes, conn) {
            self.message_error(out, e);
        }
    }

    /// Hands the answers of a message the parser refused whole (a batch
    /// past the batch limit, a message nested past the depth limit) to the
    /// pending table: refused, its requests do not run, but the answers the
    /// handlers wait for are not lost with it (each request would wait
    /// until its deadline, or for good); an answer nested too deep to read
    /// fails its request with [`PeerError::InvalidResponse`](crate::peer::PeerError::InvalidResponse).
    /// Returns whether the message is answers alone.
    #[cold]
    pub(crate) fn deliver_refused_answers(
        &self,
        error: crate::Error,
        input: &[u8],
        bytes: Option<&Bytes>,
        conn: &Connection,
    ) -> bool {
        use crate::error::ErrorKind;
        if !matches!(
            error.kind(),
            ErrorKind::BatchTooLarge { .. } | ErrorKind::TooDeep { .. }
        ) {
            return false;
        }
        let peer = conn.context.peer().filter(|peer| peer.pending() > 0);
        // Held at the in-flight limit, its answers went then.
        #[cfg(feature = "async")]
        let peer = peer.filter(|_| !conn.engine.answers_taken);
        let arena = Bump::new();
        // Walked even with nothing to deliver: whether to answer depends
        // on what the message holds.
        self.parser.for_each_refused_answer(
            input,
            &arena,
            peer.is_some(),
            |item| {
                if peer.is_some() {
                    deliver_answers(&[item], bytes, conn);
                }
            },
            |id| {
                if let Some(peer) = &peer {
                    peer.fail(id, crate::peer::PeerError::InvalidResponse(error));
                }
            },
        )
    }

    /// The budget of a single request answered with `id`, and the length of
    /// its too-large reply. `None` if even that reply would pass the limit
    /// (an id near the id limit under a small response limit): as for a
    /// batch, the message is then answered with one too-large error, `id:
    /// null`, and nothing runs.
    pub(crate) fn single_budget(&self, id: Id<'_>) -> Option<(Budget, usize)> {
        let mut budget = Budget::new(self.max_response_len, false);
        let too_large_len = self.too_large.len_for(id);
        budget.hold(too_large_len);
        budget.feasible().then_some((budget, too_large_len))
    }

    /// Answers a message (a batch, or a single request) whose too-large
    /// replies alone would pass the limit with one too-large error, `id:
    /// null`, and reports it: the counters see every reply that carries the
    /// code, this one too.
    #[cold]
    pub(crate) fn refuse_whole<B: ReplyBuf>(&self, out: &mut B) {
        self.too_large.write(out, Id::NULL);
        self.report_unrun(None, Some(Id::NULL));
    }

    /// The budget of a batch: room held for every reply's too-large form.
    /// `None` if even those would pass the limit.
    pub(crate) fn batch_budget(
        &self,
        items: &[Incoming<'_>],
        given: &crate::conn::GivenIds,
    ) -> Option<Budget> {
        let mut budget = Budget::new(self.max_response_len, true);
        for item in items {
            if let Some(id) = given.entry_of(item).and_then(|e| e.reply_id()) {
                budget.hold(self.too_large.len_for(id));
            }
        }
        budget.feasible().then_some(budget)
    }

    #[inline]
    pub(crate) fn lookup(&self, method: &str) -> Option<&Handler<S>> {
        match self.router.get(method) {
            Some(h) => Some(h),
            None => self.unrouted(method),
        }
    }

    /// [`lookup`](Shared::lookup) for a method name known to be UTF-8, as
    /// bytes (no UTF-8 check on the routed path).
    #[cfg(feature = "async")]
    #[inline]
    pub(crate) fn lookup_bytes(&self, method: &[u8]) -> Option<&Handler<S>> {
        match self.router.get_bytes(method) {
            Some(h) => Some(h),
            None => self.unrouted(core::str::from_utf8(method).ok()?),
        }
    }

    /// The handler for a method the router does not know.
    #[cold]
    fn unrouted(&self, method: &str) -> Option<&Handler<S>> {
        if method == "rpc.discover" && self.discover.is_some() {
            return self.discover.as_ref();
        }
        if method.starts_with("rpc.") {
            return None;
        }
        self.fallback.as_ref()
    }

    /// Writes the reply to an entry that is answered without awaiting: an
    /// invalid request, an unknown method, or a synchronous handler's
    /// result, in at most `allowance` bytes.
    #[inline]
    pub(crate) fn answer<B: ReplyBuf>(
        &self,
        entry: &Entry<'_>,
        id: Id<'_>,
        scope: Scope<'_>,
        out: &mut B,
        allowance: usize,
    ) -> (usize, Outcome) {
        #[cfg(feature = "async")]
        if let Some(gate) = scope.gate {
            // What the handler subscribes is kept only if its reply
            // carries the result (and with it the subscription's id).
            return gate.answering(
                || self.answer_observed(entry, id, scope, out, allowance),
                |written| written.1 == Outcome::Result,
            );
        }
        self.answer_observed(entry, id, scope, out, allowance)
    }

    #[inline(always)]
    fn answer_observed<B: ReplyBuf>(
        &self,
        entry: &Entry<'_>,
        id: Id<'_>,
        scope: Scope<'_>,
        out: &mut B,
        allowance: usize,
    ) -> (usize, Outcome) {
        let Some(observer) = &self.observer else {
            return self.answer_unobserved(entry, id, scope, out, allowance);
        };
        let started = Instant::now();
        let written = self.answer_unobserved(entry, id, scope, out, allowance);
        let method = entry.request().map(|r| r.method());
        self.report(observer, method, Some(id), written.1, started);
        written
    }

    /// Reports an entry answered with the too-large error without being
    /// run (its batch's reply was already past the limit): the counters see
    /// every reply that carries the code.
    #[cold]
    pub(crate) fn report_unrun(&self, method: Option<&str>, id: Option<Id<'_>>) {
        if let Some(observer) = &self.observer {
            self.report(observer, method, id, Outcome::TooLarge, Instant::now());
        }
    }

    /// Reports a call to the observer.
    #[cold]
    pub(crate) fn report(
        &self,
        observer: &Arc<dyn Observer>,
        method: Option<&str>,
        id: Option<Id<'_>>,
        outcome: Outcome,
        started: Instant,
    ) {
        let route = method.map_or(Route::Unrouted, |m| self.route(m));
        observer.on_call(&CallRecord {
            method,
            known: !matches!(route, Route::Unrouted),
            route,
            id: id.filter(|i| !i.is_null() || method.is_some()),
            code: match outcome {
                Outcome::Result => None,
                Outcome::Error(code) => Some(code),
                Outcome::TooLarge => Some(self.too_large.code()),
            },
            elapsed: started.elapsed(),
        });
    }

    /// Which handler `method` is routed to, as [`lookup`](Shared::lookup)
    /// finds it.
    fn route(&self, method: &str) -> Route<'_> {
        if let Some(index) = self.router.index_of(method) {
            return Route::Method {
                table: &self.methods,
                index,
            };
        }
        match self.unrouted(method) {
            None => Route::Unrouted,
            Some(_) if method == "rpc.discover" => Route::Discover,
            Some(_) => Route::Fallback,
        }
    }

    #[inline(always)]
    fn answer_unobserved<B: ReplyBuf>(
        &self,
        entry: &Entry<'_>,
        id: Id<'_>,
        scope: Scope<'_>,
        out: &mut B,
        allowance: usize,
    ) -> (usize, Outcome) {
        let req = match entry {
            Entry::Request(req) => req,
            Entry::Invalid(inv) => {
                let code = inv.error().code();
                return write_error_reply(out, id, allowance, &self.too_large, code, |o| {
                    write_request_error_tail(o, inv.error())
                });
            }
        };
        match self.lookup(req.method()) {
            Some(Handler::Sync(h)) => {
                #[cfg(feature = "tracing")]
                let span = call_span(req.method(), Some(id.as_bytes()));
                #[cfg(feature = "tracing")]
                let _entered = span.enter();
                let written = write_reply(out, id, allowance, &self.too_large, |sink, limit| {
                    self.invoke(h, req, scope, sink, limit)
                });
                #[cfg(feature = "tracing")]
                record_outcome(&span, written.1);
                written
            }
            #[cfg(feature = "async")]
            Some(Handler::Async(_)) => {
                // Only the async path reaches async handlers; it starts them
                // itself and never calls this for them.
                let code = crate::codes::INTERNAL_ERROR;
                write_error_reply(out, id, allowance, &self.too_large, code, |o| {
                    reply::write_error_tail(o, code, "async method reached the sync path", None)
                })
            }
            None => write_error_reply(
                out,
                id,
                allowance,
                &self.too_large,
                crate::codes::METHOD_NOT_FOUND,
                |o| write_method_not_found_tail(o, req.method()),
            ),
        }
    }

    /// Runs a notification's synchronous handler; it writes into nothing.
    pub(crate) fn notify(&self, entry: Entry<'_>, scope: Scope<'_>) {
        if let Entry::Request(req) = entry
            && let Some(Handler::Sync(h)) = self.lookup(req.method())
        {
            let started = self.observer.as_ref().map(|_| Instant::now());
            let outcome = self.invoke(h, &req, scope, &mut Sink::Dyn(&mut Discard), usize::MAX);
            #[cfg(feature = "async")]
            if let Some(gate) = scope.gate {
                gate.keep_fresh();
            }
            if let (Some(observer), Some(started)) = (&self.observer, started) {
                let outcome = notification_outcome(outcome.map(|_| ()));
                self.report(observer, Some(req.method()), None, outcome, started);
            }
        }
    }

    /// Writes the reply to a message that could not be read, and reports
    /// it.
    pub(crate) fn message_error<B: ReplyBuf>(&self, out: &mut B, e: crate::Error) {
        // Held to the response limit too (its `data` is up to ~180 bytes).
        let (_, outcome) = write_error_reply(
            out,
            Id::NULL,
            self.max_response_len,
            &self.too_large,
            e.code(),
            |o| write_request_error_tail(o, e),
        );
        if let Some(observer) = &self.observer {
            self.report(observer, None, None, outcome, Instant::now());
        }
    }

    /// Reports a message a transport's framer refused with `code` (bytes
    /// that are not a frame), answered without the parser.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn report_unframed(&self, code: i32) {
        if let Some(observer) = &self.observer {
            self.report(observer, None, None, Outcome::Error(code), Instant::now());
        }
    }

    /// Calls a synchronous handler, a panic caught and turned into -32603.
    #[inline(always)]
    fn invoke(
        &self,
        h: &SyncFn<S>,
        req: &Request<'_>,
        scope: Scope<'_>,
        sink: &mut Sink<'_>,
        limit: usize,
    ) -> Result<Done, RpcError> {
        let inv = Invocation {
            params: req.params(),
            arena: scope.arena,
            state: &*self.state,
            ctx: scope.ctx,
            method: req.method(),
            id: req.id(),
            message: scope.message,
        };
        guard_panics(self.quiet, self.panic_messages, || h(inv, sink, limit))
    }
}

/// The span of one call (feature `tracing`).
#[cfg(feature = "tracing")]
pub(crate) fn call_span(method: &str, id: Option<&[u8]>) -> tracing::Span {
    tracing::info_span!(
        "rpc.call",
        method,
        id = id.map(|i| String::from_utf8_lossy(i).into_owned()),
        code = tracing::field::Empty,
    )
}

/// Records how a call was answered on its span.
#[cfg(feature = "tracing")]
pub(crate) fn record_outcome(span: &tracing::Span, outcome: Outcome) {
    match outcome {
        Outcome::Result => {}
        Outcome::Error(code) => {
            span.record("code", code);
        }
        Outcome::TooLarge => {
            span.record("code", "too_large");
        }
    }
}

thread_local! {
    /// Set while a quiet dispatcher runs a handler on this thread.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// What a notification's run reports: its result is not written (a
/// notification gets no reply; the writer it is given takes nothing), so a
/// "too large" from that writer is the run succeeding, not an error.
pub(crate) fn notification_outcome(run: Result<(), RpcError>) -> Outcome {
    match run {
        Ok(()) => Outcome::Result,
        Err(e) if e.is_too_large() => Outcome::Result,
        Err(e) => Outcome::Error(e.code()),
    }
}

/// Installs (once per process) a panic hook that skips the previous hook
/// while a quiet dispatcher runs a handler on the panicking thread.
fn install_quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, turning a panic into -32603, with the panic's message in
/// `data` if `messages`.
#[inline(always)]
pub(crate) fn guard_panics(
    quiet: bool,
    messages: bool,
    f: impl FnOnce() -> Result<Done, RpcError>,
) -> Result<Done, RpcError> {
    catch_handler_panic(quiet, f).unwrap_or_else(|panic| Err(panic_error(&*panic, messages)))
}

/// Runs handler code `f`, catching a panic; with `quiet`, the panic hook is
/// skipped for it (see [`DispatcherBuilder::quiet_panics`]).
#[inline(always)]
pub(crate) fn catch_handler_panic<R>(quiet: bool, f: impl FnOnce() -> R) -> std::thread::Result<R> {
    if !quiet {
        return catch_unwind(AssertUnwindSafe(f));
    }
    // Restored, not cleared: a quiet handler may run another quiet
    // dispatcher and panic after it returns.
    let was_quiet = QUIET.with(|q| q.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    outcome
}

/// The -32603 that answers a panicking handler, with the panic's message
/// in `data` if `message`.
pub(crate) fn panic_error(payload: &(dyn std::any::Any + Send), message: bool) -> RpcError {
    if !message {
        return RpcError::internal("Internal error");
    }
    #[derive(serde::Serialize)]
    struct PanicData<'a> {
        panic: &'a str,
    }
    let reason = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("handler panicked");
    RpcError::internal("Internal error").with_data(&PanicData { panic: reason })
}
