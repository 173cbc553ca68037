//! Per-connection state: the [`Connection`] a transport keeps for each
//! client (scratch memory, running calls), and the [`Context`] handlers see
//! (transport metadata, typed extensions such as HTTP headers, a handle to
//! send notifications and requests to that client).

use std::any::{Any, TypeId};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bumpalo::Bump;
use bytes::Bytes;

use crate::peer::{Outbound, Peer};

/// What handlers know of the connection a request came from: transport
/// metadata, typed extensions (the HTTP transport puts the request's
/// `http::HeaderMap` here), and, on two-way transports, the [`Peer`] that
/// sends notifications and requests back to the client.
///
/// A `Context` is cheap to clone (one reference count) and `Send + Sync`, so
/// async handlers and spawned tasks can keep it.
///
/// ```
/// use rpcwire::Context;
/// #[derive(Debug, PartialEq)]
/// struct Tenant(&'static str);
/// let ctx = Context::builder()
///     .transport("http")
///     .peer_addr("127.0.0.1:9000".parse().unwrap())
///     .extension(Tenant("acme"))
///     .build();
/// assert_eq!(ctx.extension::<Tenant>(), Some(&Tenant("acme")));
/// assert_eq!(ctx.transport(), "http");
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    transport: &'static str,
    peer_addr: Option<SocketAddr>,
    session: Option<Box<str>>,
    extensions: Vec<(TypeId, Extension)>,
    peer: Option<Peer>,
}

/// A typed extension: its value, or what computes it on first access.
enum Extension {
    Ready(Box<dyn Any + Send + Sync>),
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Lazy(Box<dyn LazyExtension>),
}

/// An extension computed on first access (the HTTP request's header map,
/// from the raw head: most handlers never look at it).
pub(crate) trait LazyExtension: Any + Send + Sync {
    /// The value, computed at the first call.
    fn value(&self) -> &(dyn Any + Send + Sync);
    /// Itself, to be refilled in place.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl Context {
    /// A builder for a context.
    pub fn builder() -> ContextBuilder {
        ContextBuilder {
            inner: ContextInner {
                transport: "memory",
                peer_addr: None,
                session: None,
                extensions: Vec::new(),
                peer: None,
            },
        }
    }

    /// The context of a connection nothing is known about (shared, so
    /// making one allocates nothing).
    pub fn empty() -> Context {
        static EMPTY: OnceLock<Context> = OnceLock::new();
        EMPTY.get_or_init(|| Context::builder().build()).clone()
    }

    /// The transport's name: `"http"`, `"ws"`, `"stdio"`, `"tcp"`,
    /// `"ipc"`, or `"memory"` when none was set.
    pub fn transport(&self) -> &'static str {
        self.inner.transport
    }

    /// The client's address, when the transport has one.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.peer_addr
    }

    /// The session id (for example an MCP `Mcp-Session-Id`), if any.
    pub fn session(&self) -> Option<&str> {
        self.inner.session.as_deref()
    }

    /// The extension of type `T`, if one was set.
    pub fn extension<T: Any + Send + Sync>(&self) -> Option<&T> {
        let want = TypeId::of::<T>();
        self.inner
            .extensions
            .iter()
            .find(|(id, _)| *id == want)
            .and_then(|(_, v)| match v {
                Extension::Ready(v) => v.downcast_ref(),
                Extension::Lazy(lazy) => lazy.value().downcast_ref(),
            })
    }

    /// The two-way peer: sends notifications and requests to this
    /// connection's client. `None` on one-way transports (plain HTTP).
    pub fn peer(&self) -> Option<&Peer> {
        self.inner.peer.as_ref()
    }

    /// Refills this context for another request of a transport without
    /// allocating: sets the peer address and replaces the extension of type
    /// `T` in place. Works only when no clone of the context is alive and
    /// it has such an extension already; gives `value` back otherwise (then
    /// build a new one).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn refill<T: Any + Send + Sync>(
        &mut self,
        peer_addr: Option<SocketAddr>,
        value: T,
    ) -> Result<(), T> {
        let Some((Extension::Ready(slot), peer)) = self.unique_extension(TypeId::of::<T>()) else {
            return Err(value);
        };
        let Some(slot) = slot.downcast_mut::<T>() else {
            return Err(value);
        };
        *slot = value;
        *peer = peer_addr;
        Ok(())
    }

    /// The extension stored under `want` and the peer address, to be
    /// refilled: only while no clone of the context is alive.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    fn unique_extension(
        &mut self,
        want: TypeId,
    ) -> Option<(&mut Extension, &mut Option<SocketAddr>)> {
        let ContextInner {
            extensions,
            peer_addr,
            ..
        } = Arc::get_mut(&mut self.inner)?;
        let (_, extension) = extensions.iter_mut().find(|(id, _)| *id == want)?;
        Some((extension, peer_addr))
    }

    /// [`refill`](Context::refill) for an extension of type `T` computed
    /// lazily by an `L`: `fill` refills the `L` in place. Returns whether
    /// it could (as `refill`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn refill_lazy<T: Any, L: LazyExtension>(
        &mut self,
        peer_addr: Option<SocketAddr>,
        fill: impl FnOnce(&mut L),
    ) -> bool {
        let Some((Extension::Lazy(lazy), peer)) = self.unique_extension(TypeId::of::<T>()) else {
            return false;
        };
        let Some(lazy) = lazy.as_any_mut().downcast_mut::<L>() else {
            return false;
        };
        fill(lazy);
        *peer = peer_addr;
        true
    }

    /// Sends a notification to this connection's client; see
    /// [`Peer::notify`]. Returns whether it was queued (`false` on one-way
    /// transports, when the client's queue is full or closed, or when
    /// `params` failed to serialize).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use rpcwire::bytes::Bytes;
    /// use rpcwire::peer::{Outbound, SendError};
    /// use rpcwire::{Call, Connection, Context, Dispatcher};
    ///
    /// /// What the client would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let d = Dispatcher::builder(())
    ///     .method("build", |c: Call<'_, ()>| {
    ///         // Progress, before the reply, on the same connection.
    ///         c.ctx.notify("progress", &serde_json::json!({"done": 100}));
    ///         c.reply.str("ok")
    ///     })
    ///     .build()?;
    /// let wire = Arc::new(Wire::default());
    /// let mut conn = Connection::with_context(Context::builder().outbound(wire.clone()).build());
    /// let mut out = Vec::new();
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"build"}"#, &mut conn, &mut out);
    /// assert_eq!(
    ///     wire.0.lock().unwrap()[0],
    ///     &br#"{"jsonrpc":"2.0","method":"progress","params":{"done":100}}"#[..]
    /// );
    /// // A one-way transport (plain HTTP) has no client to notify.
    /// assert!(!Context::empty().notify("progress", &()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn notify<P: serde::Serialize + ?Sized>(&self, method: &str, params: &P) -> bool {
        self.peer()
            .is_some_and(|p| p.notify(method, params).is_ok())
    }

    /// Sends a notification without params (LSP's `exit`) to this
    /// connection's client, which [`notify`](Context::notify) cannot: it
    /// always sends its `params`; see [`Peer::notify_no_params`]. Returns
    /// whether it was queued (`false` on one-way transports, or when the
    /// client's queue is full or closed).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use rpcwire::bytes::Bytes;
    /// use rpcwire::peer::{Outbound, SendError};
    /// use rpcwire::{Call, Connection, Context, Dispatcher};
    ///
    /// /// What the client would be sent.
    /// #[derive(Default)]
    /// struct Wire(Mutex<Vec<Bytes>>);
    /// impl Outbound for Wire {
    ///     fn send(&self, message: Bytes) -> Result<(), SendError> {
    ///         self.0.lock().unwrap().push(message);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let d = Dispatcher::builder(())
    ///     .method("shutdown", |c: Call<'_, ()>| {
    ///         c.ctx.notify_no_params("exit");
    ///         c.reply.null()
    ///     })
    ///     .build()?;
    /// let wire = Arc::new(Wire::default());
    /// let mut conn = Connection::with_context(Context::builder().outbound(wire.clone()).build());
    /// let mut out = Vec::new();
    /// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#, &mut conn, &mut out);
    /// assert_eq!(wire.0.lock().unwrap()[0], &br#"{"jsonrpc":"2.0","method":"exit"}"#[..]);
    /// assert!(!Context::empty().notify_no_params("exit"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn notify_no_params(&self, method: &str) -> bool {
        self.peer()
            .is_some_and(|p| p.notify_no_params(method).is_ok())
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("transport", &self.inner.transport)
            .field("peer_addr", &self.inner.peer_addr)
            .field("session", &self.inner.session)
            .field("extensions", &self.inner.extensions.len())
            .field("two_way", &self.inner.peer.is_some())
            .finish()
    }
}

/// Builds a [`Context`].
pub struct ContextBuilder {
    inner: ContextInner,
}

impl ContextBuilder {
    /// The transport's name.
    pub fn transport(mut self, name: &'static str) -> Self {
        self.inner.transport = name;
        self
    }

    /// The client's address.
    pub fn peer_addr(mut self, addr: SocketAddr) -> Self {
        self.inner.peer_addr = Some(addr);
        self
    }

    /// The session id.
    pub fn session(mut self, id: impl Into<Box<str>>) -> Self {
        self.inner.session = Some(id.into());
        self
    }

    /// Adds a typed extension (replacing one of the same type).
    pub fn extension<T: Any + Send + Sync>(mut self, value: T) -> Self {
        let id = TypeId::of::<T>();
        self.inner.extensions.retain(|(t, _)| *t != id);
        self.inner
            .extensions
            .push((id, Extension::Ready(Box::new(value))));
        self
    }

    /// An extension of type `T` that `lazy` computes at its first access;
    /// `lazy`'s value must be a `T` (another type reads as no extension).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn lazy_extension<T: Any>(mut self, lazy: impl LazyExtension) -> Self {
        let id = TypeId::of::<T>();
        self.inner.extensions.retain(|(t, _)| *t != id);
        self.inner
            .extensions
            .push((id, Extension::Lazy(Box::new(lazy))));
        self
    }

    /// Makes the connection two-way: notifications and requests to the
    /// client go to `outbound` (the transport's writer queue), through a
    /// new [`Peer`] that replaces one set with [`peer`](Self::peer).
    pub fn outbound(mut self, outbound: Arc<dyn Outbound>) -> Self {
        self.inner.peer = Some(Peer::new(outbound));
        self
    }

    /// Uses an existing [`Peer`] (to share its pending-request table, or to
    /// keep one to send requests with from outside the handlers, as a
    /// client does); a later [`outbound`](Self::outbound) replaces it.
    /// rpcwire's transports call `outbound` with their own queue, so a
    /// peer set here does not reach them: over a stream, take the
    /// driver's own with `server::stream::Driver::peer` (feature
    /// `server`).
    pub fn peer(mut self, peer: Peer) -> Self {
        self.inner.peer = Some(peer);
        self
    }

    /// Builds the context.
    pub fn build(self) -> Context {
        Context {
            inner: Arc::new(self.inner),
        }
    }
}

/// What a transport keeps per connection: the per-message arena, the
/// [`Context`] handlers see, and (with async handlers) the calls still
/// running. Reuse one `Connection` for every message of a connection, and
/// steady-state dispatch allocates nothing.
///
/// ```
/// use rpcwire::{Call, Connection, Dispatcher};
/// let d = Dispatcher::builder(())
///     .method("whoami", |call: Call<'_, ()>| call.reply.str(call.ctx.transport()))
///     .build()?;
/// let mut conn = Connection::with_context(rpcwire::Context::builder().transport("tcp").build());
/// let mut out = Vec::new();
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"whoami"}"#, &mut conn, &mut out);
/// assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"tcp"}"#);
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Connection {
    pub(crate) context: Context,
    pub(crate) arena: Bump,
    /// The most memory the arena keeps between messages (and, apart from
    /// it, the async engine's reply buffers).
    pub(crate) max_retained: usize,
    /// Responses that matched no pending request.
    unmatched: std::cell::Cell<u64>,
    /// The message being read (or the last one) is not JSON: a framer
    /// that finds messages by their brackets cannot go on after it.
    #[cfg(feature = "server")]
    pub(crate) not_json: bool,
    /// The ids the message being read may answer.
    pub(crate) given: GivenIds,
    /// The ids given when the transport last read
    /// ([`note_read`](Self::note_read)); `None`: when a message starts.
    ids_at_read: std::cell::Cell<Option<u64>>,
    #[cfg(feature = "async")]
    pub(crate) engine: crate::dispatch::engine::Engine,
    /// The engine's reply gate, beside it so that handlers can be given it
    /// while the engine is borrowed.
    #[cfg(feature = "async")]
    pub(crate) gate: Option<std::sync::Arc<crate::dispatch::engine::ReplyGate>>,
}

/// The peer's [`ids_given_below`](Peer::ids_given_below) when the
/// message being read was read (a held one: when it was held): its items
/// are bare answers only to those ids, not to ids given while it waited
/// or ran (a request its own first entry sent). Apart from the engine, so
/// that the dispatchers read items through it while they drive the
/// engine.
#[derive(Debug, Default)]
pub(crate) struct GivenIds(std::cell::Cell<u64>);

impl GivenIds {
    /// The request entry (valid or not) `item` is, or `None` if it belongs
    /// to the peer's pending table: a response, valid or not, or an object
    /// with `"jsonrpc":"2.0"` and an id this side had given one of its
    /// requests when the message was read but neither `method` nor
    /// `result` nor `error` (a broken answer: answering it -32600 would
    /// send the client an error for its own answer, and leave the request
    /// waiting). The dispatchers read every item through this.
    ///
    /// What an item is never changes while a message is read (a request's
    /// reply budget is reserved by one pass and spent by the next, and a
    /// held message is read again when it starts): it is judged against
    /// the ids given when the message was read
    /// ([`Connection::note_ids_given`]), answered or not.
    #[inline(always)]
    pub(crate) fn entry_of<'a>(
        &self,
        item: &crate::message::Incoming<'a>,
    ) -> Option<crate::request::Entry<'a>> {
        // `as_entry` first, the invalid entry checked after: a request
        // takes `as_entry`'s path (as a guarded `match` this cost a single
        // message's round trip 7% on an AVX-512 AMD host, instructions
        // unchanged).
        let entry = item.as_entry()?;
        if let crate::request::Entry::Invalid(i) = entry
            && self.is_bare_answer(&i)
        {
            return None;
        }
        Some(entry)
    }

    /// Whether an invalid request is only an id the peer had given one of
    /// its requests when the message was read (it lacks `method`, the one
    /// thing a request needs past a valid envelope): see
    /// [`entry_of`](Self::entry_of).
    #[cold]
    #[inline(never)]
    pub(crate) fn is_bare_answer(&self, invalid: &crate::request::InvalidRequest<'_>) -> bool {
        use crate::error::{ErrorKind, Member};
        invalid.error().kind() == ErrorKind::Missing(Member::Method)
            && invalid
                .id()
                .as_u64()
                .is_some_and(|id| (1..self.0.get()).contains(&id))
    }
}

impl Default for Connection {
    fn default() -> Self {
        Connection::new()
    }
}

impl Connection {
    /// Default for [`max_retained`](Connection::max_retained): 1 MiB.
    pub const DEFAULT_MAX_RETAINED: usize = 1 << 20;

    /// A connection with an [empty](Context::empty) context.
    pub fn new() -> Self {
        Connection::with_context(Context::empty())
    }

    /// A connection whose handlers see `context`.
    pub fn with_context(context: Context) -> Self {
        Connection {
            context,
            arena: Bump::new(),
            max_retained: Self::DEFAULT_MAX_RETAINED,
            unmatched: std::cell::Cell::new(0),
            #[cfg(feature = "server")]
            not_json: false,
            given: GivenIds(std::cell::Cell::new(0)),
            ids_at_read: std::cell::Cell::new(None),
            #[cfg(feature = "async")]
            engine: Default::default(),
            #[cfg(feature = "async")]
            gate: None,
        }
    }

    /// The most scratch memory the connection keeps between messages
    /// (default 1 MiB). One large message (a 5 MiB batch, a method name of
    /// `\u` escapes) may need more while it is handled; afterwards the arena
    /// is given back and a fresh one is started, so a single message cannot
    /// pin memory for the life of the connection. The same cap applies,
    /// apart from the arena and from each other, to the buffers async
    /// batches assemble their replies in and to the lists that track each
    /// message's replies (feature `async`; the lists keep at least 1 KiB,
    /// so that a single request's does not cost an allocation a message).
    pub fn max_retained(mut self, bytes: usize) -> Self {
        self.max_retained = bytes;
        self
    }

    /// The context handlers see.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Whether handlers wait for the client's answers to requests they
    /// sent it (the drivers read on at their in-flight limit for those).
    #[cfg(feature = "server")]
    pub(crate) fn awaits_client_answers(&self) -> bool {
        self.context.peer().is_some_and(|peer| peer.pending() > 0)
    }

    /// Gives up on every request the handlers wait on the client to
    /// answer ([`PeerError::Backlog`](crate::peer::PeerError::Backlog),
    /// each announced with the protocol's cancellation); whether there was
    /// one. For a transport that stops reading at its bound on held
    /// messages: the answers may be behind what it no longer reads.
    #[cfg(feature = "server")]
    pub(crate) fn give_up_on_answers(&self) -> bool {
        self.context
            .peer()
            .is_some_and(|peer| peer.give_up_all(crate::peer::PeerError::Backlog) > 0)
    }

    /// What a transport at its in-flight limit does with `message` (read
    /// from `input`), asked only while
    /// [`awaits_client_answers`](Self::awaits_client_answers): it starts a
    /// message of answers only (it starts no call). A batch that mixes
    /// requests with an answer the handlers wait for has its answers
    /// delivered now (held behind the asking call, which holds its slot
    /// until its answer comes, they would wait for good) and its requests
    /// held like any others: starting it whole let a client past the limit
    /// by a batch of any length per request the handlers sent it. Anything
    /// else is held whole.
    #[cfg(feature = "server")]
    pub(crate) fn take_answers_at_limit(
        &self,
        message: &crate::message::Message<'_, crate::message::Incoming<'_>>,
        input: &Bytes,
    ) -> AtLimit {
        use crate::message::{Incoming, Message};
        let Some(peer) = self.context.peer() else {
            return AtLimit::Hold;
        };
        // Its items answer the ids given when it was read.
        self.note_ids_given();
        let answers = |item: &Incoming<'_>| match item {
            Incoming::Invalid(i) => self.given.is_bare_answer(i),
            _ => item.response_id().is_some_and(|id| peer.awaits(id)),
        };
        let items = match message {
            Message::Single(item) if self.given.entry_of(item).is_none() => {
                return AtLimit::Start;
            }
            Message::Single(_) => return AtLimit::Hold,
            Message::Batch(batch) => batch.as_slice(),
        };
        if items.iter().all(|item| self.given.entry_of(item).is_none()) {
            return AtLimit::Start;
        }
        if !items.iter().any(answers) {
            return AtLimit::Hold;
        }
        for item in items {
            if self.given.entry_of(item).is_none() {
                self.deliver(Some(input), *item);
            }
        }
        AtLimit::HoldAnswered
    }

    /// Bytes the per-message arena holds now.
    pub fn arena_bytes(&self) -> usize {
        self.arena.allocated_bytes()
    }

    /// How many incoming responses matched no pending request (or arrived
    /// on a connection that sent none, or were invalid). They are never
    /// answered. An invalid one whose id is pending also ends that request
    /// with [`PeerError::InvalidResponse`](crate::peer::PeerError::InvalidResponse),
    /// as does an object with `"jsonrpc":"2.0"` and a pending id but no
    /// `method`, `result` or `error` (one with an id this side had given
    /// when the message was read, and that no longer waits, is counted
    /// too, and not answered). Not counted: responses inside a batch
    /// refused whole (past the batch limit) while no request waited (the
    /// batch is not read item by item then), nor those a transport drops
    /// unread while shutting down.
    pub fn unmatched_responses(&self) -> u64 {
        self.unmatched.get()
    }

    /// The unmatched responses counted since the last call, for a server
    /// that lends one connection to request after request (HTTP's pooled
    /// scratch) and reports each request's to its metrics.
    #[cfg(feature = "http")]
    #[inline]
    pub(crate) fn take_unmatched_responses(&self) -> u64 {
        self.unmatched.take()
    }

    /// Notes why the message being read was refused: whether it is not
    /// JSON (`not_json`), for the stream driver.
    #[cfg(feature = "async")]
    #[inline]
    pub(crate) fn note_refused(&mut self, _error: &crate::Error) {
        #[cfg(feature = "server")]
        {
            self.not_json = _error.is_not_json();
        }
    }

    /// Readies the arena for a message read now.
    #[inline]
    pub(crate) fn begin_message(&mut self) {
        self.arena.reset();
        #[cfg(feature = "server")]
        {
            self.not_json = false;
        }
        self.note_ids_given();
    }

    /// Notes the ids this side had given its requests when the message
    /// being read arrived: those it may answer ([`GivenIds`]). That is
    /// when the transport last read ([`note_read`](Self::note_read)), not
    /// when the message starts: a message read with others may start after
    /// a handler of one before it gave an id, which the client could not
    /// have known.
    #[inline]
    pub(crate) fn note_ids_given(&self) {
        if let Some(peer) = self.context.peer() {
            let given = self
                .ids_at_read
                .get()
                .unwrap_or_else(|| peer.ids_given_below());
            self.given.0.set(given);
        }
    }

    /// The transport is about to read: what it reads answers at most the
    /// ids given so far ([`note_ids_given`](Self::note_ids_given)).
    #[cfg(feature = "server")]
    pub(crate) fn note_read(&self) {
        if let Some(peer) = self.context.peer() {
            self.ids_at_read.set(Some(peer.ids_given_below()));
        }
    }

    /// The ids noted by [`note_ids_given`](Self::note_ids_given) (0 on a
    /// connection without a peer).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // held messages
    pub(crate) fn ids_given_below(&self) -> u64 {
        self.given.0.get()
    }

    /// Reads a held message's items against the ids given when it was
    /// held ([`note_ids_given`](Self::note_ids_given) noted those of now).
    #[cfg_attr(not(feature = "server"), allow(dead_code))] // held messages
    pub(crate) fn read_as_when_held(&self, ids_given_below: u64) {
        self.given.0.set(ids_given_below);
    }

    /// Gives the arena's memory back if the message made it grow past the
    /// cap.
    #[inline]
    pub(crate) fn end_message(&mut self) {
        if self.arena.allocated_bytes() > self.max_retained {
            self.arena = Bump::new();
        }
    }

    /// Gives back the arena and the reply buffers kept between messages
    /// past `keep` bytes each ([`max_retained`](Connection::max_retained)
    /// bounds what one message leaves): for a transport whose connection
    /// idles, so that thousands of idle connections do not each keep what
    /// their largest message needed.
    #[cfg(feature = "server")]
    pub(crate) fn release_idle(&mut self, keep: usize) {
        if self.arena.allocated_bytes() > keep {
            self.arena = Bump::new();
        }
        if let Some(peer) = self.context.peer() {
            peer.release_idle();
        }
        #[cfg(feature = "async")]
        self.engine.release_buffers(keep);
    }

    /// Whether a message refused unread as too large is an answer, read
    /// from its start: `buf` holds it from its first byte (whitespace
    /// included, as the framer counts it), and at least `limit` bytes of
    /// it (the limit it passed). Only those are read, so that the answer
    /// does not depend on how reads cut the stream. An answer is an object
    /// whose `id` comes before its `result` or `error`, as JSON-RPC
    /// libraries write them. Its request, if one waits, ends at once with
    /// [`PeerError::InvalidResponse`](crate::peer::PeerError::InvalidResponse)
    /// (the parser's "message too large"): it waited for its deadline, or
    /// for good without one. An answer is not answered: the transport
    /// writes no -32600 for it. Only on a connection with a peer (one that
    /// sends requests); an answer whose id comes after its result cannot
    /// be told from a request and is refused as one.
    #[cfg(feature = "server")]
    pub(crate) fn refused_answer(&self, buf: &[u8], limit: usize) -> bool {
        let Some(peer) = self.context.peer() else {
            return false;
        };
        // Its id is near its start: what lies beyond is not looked at.
        const HEAD: usize = 64 << 10;
        let head = &buf[..buf.len().min(limit.min(HEAD))];
        let head = &head[crate::scan::skip_ws(head, 0)..];
        let Some(id) = crate::peer::answer_id_in_head(head) else {
            return false;
        };
        let error = crate::Error::new(crate::error::ErrorKind::MessageTooLarge, limit);
        if !peer.fail(id, crate::peer::PeerError::InvalidResponse(error)) {
            self.unmatched.set(self.unmatched.get() + 1);
        }
        true
    }

    /// Hands an incoming response to the peer's pending table.
    pub(crate) fn deliver(&self, input: Option<&Bytes>, response: crate::message::Incoming<'_>) {
        use crate::message::Incoming;
        #[cfg(feature = "async")]
        if self.engine.answers_taken {
            // Delivered when the message was held.
            return;
        }
        let matched = match (self.context.peer(), response) {
            (Some(peer), Incoming::Response(r)) => peer.complete(input, r),
            (Some(peer), Incoming::InvalidResponse(r)) => {
                // The request it answers is over: waiting on would only end
                // at its deadline (or never, without one). Still counted.
                if let Some(id) = r.id() {
                    peer.fail(id, crate::peer::PeerError::InvalidResponse(r.error()));
                }
                false
            }
            (Some(peer), Incoming::Invalid(i)) => {
                // A bare answer (`entry_of`): it lacks what any response
                // needs.
                let missing = crate::error::ErrorKind::Missing(crate::error::Member::Result);
                let error = crate::Error::new(missing, i.error().offset());
                peer.fail(i.id(), crate::peer::PeerError::InvalidResponse(error));
                false
            }
            _ => false,
        };
        if !matched {
            self.unmatched.set(self.unmatched.get() + 1);
        }
    }
}

/// What a transport at its in-flight limit does with a message
/// ([`Connection::take_answers_at_limit`]).
#[cfg(feature = "server")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtLimit {
    /// Start it now: it holds only answers.
    Start,
    /// Hold it until a slot frees.
    Hold,
    /// Hold it; its answers were delivered (start it with
    /// [`Connection::start_held`]).
    HoldAnswered,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("context", &self.context)
            .field("arena_bytes", &self.arena.allocated_bytes())
            .finish()
    }
}
