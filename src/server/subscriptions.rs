//! Subscriptions: notifications a server pushes to one connection, in the
//! shape of Ethereum's `eth_subscribe` / `eth_subscription` /
//! `eth_unsubscribe`.
//!
//! A two-way transport (the WebSocket server, and the stream servers: TCP,
//! Unix sockets, stdio) gives every connection a
//! [`Subscriptions`] registry, reachable from handlers through the
//! connection's [`Context`] ([`Subscriptions::of`]). A handler for
//! `eth_subscribe` calls [`subscribe`](Subscriptions::subscribe), answers
//! with the [`SubscriptionId`] (a QUANTITY string, `"0x…"`, 128 random
//! bits), and hands the [`Sink`] to whatever produces the events: a task
//! it spawns, a fan-out list in the dispatcher's state, a gateway's map of
//! upstream subscriptions. The producer calls [`Sink::send`] (or
//! [`Sink::send_raw`] with JSON it already has) and the client receives
//!
//! ```text
//! {"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x…","result":…}}
//! ```
//!
//! `send` never waits: each subscription has a bounded buffer
//! ([`SubscriptionConfig::buffer`]) that the connection's writer drains,
//! round-robin between subscriptions, when the socket can take more. When a
//! client reads more slowly than its notifications arrive, the buffer fills
//! and the [`SlowPolicy`] decides: drop the oldest notification
//! ([`SlowPolicy::DropOldest`], counted as [`LimitKind::Queue`]) or close
//! the subscription with a final error notification
//! ([`SlowPolicy::Close`], counted as [`LimitKind::Subscription`]). Either
//! way the connection is never stalled and its memory is bounded: at most
//! [`max_queued`](SubscriptionConfig::max_queued) notifications and
//! [`max_queued_bytes`](SubscriptionConfig::max_queued_bytes) bytes wait
//! (plus one notification larger than that alone, and one final error
//! notification per subscription the policy closed).
//!
//! A connection may hold at most
//! [`max_per_connection`](SubscriptionConfig::max_per_connection)
//! subscriptions; past it `subscribe` fails with a clear error
//! ([`LIMIT_EXCEEDED`], `data.limit`), also
//! counted as [`LimitKind::Subscription`].
//!
//! ```
//! use rpcwire::server::subscriptions::Subscriptions;
//! use rpcwire::{Call, Dispatcher, RpcError};
//!
//! let d = Dispatcher::builder(())
//!     .method("eth_subscribe", |call: Call<'_, ()>| {
//!         // `logs` takes a filter after its kind: read it, so that it is
//!         // refused as unsupported rather than as one param too many.
//!         let (kind, _filter): (&str, Option<&serde_json::value::RawValue>) = call.decode()?;
//!         if kind != "newHeads" {
//!             return Err(RpcError::invalid_params("unsupported subscription"));
//!         }
//!         let (id, sink) = Subscriptions::of(call.ctx)?.subscribe()?;
//!         tokio::spawn(async move {
//!             let mut ticks = tokio::time::interval(std::time::Duration::from_secs(12));
//!             for number in 1u64.. {
//!                 tokio::select! {
//!                     _ = ticks.tick() => {}
//!                     _ = sink.closed() => break, // unsubscribed, or the client left
//!                 }
//!                 if sink.send(&serde_json::json!({ "number": format!("{number:#x}") })).is_err() {
//!                     break;
//!                 }
//!             }
//!         });
//!         Ok::<_, RpcError>(id)
//!     })
//!     .method("eth_unsubscribe", |call: Call<'_, ()>| {
//!         let (id,): (&str,) = call.decode()?;
//!         Ok::<_, RpcError>(Subscriptions::of(call.ctx)?.unsubscribe(id))
//!     })
//!     .build()?;
//! # Ok::<(), rpcwire::router::BuildError>(())
//! ```
//!
//! A gateway relays an upstream node's subscriptions the same way: its
//! `eth_subscribe` handler subscribes upstream, keeps a map from the
//! upstream id to the downstream [`Sink`], and for each upstream
//! `eth_subscription` notification passes the raw `params.result` bytes to
//! [`Sink::send_raw`], which writes them without decoding them.
//!
//! The registry is transport-agnostic: a transport creates one per
//! connection ([`Subscriptions::new`]), puts it in the connection's context
//! ([`ContextBuilder::extension`](crate::ContextBuilder::extension)), writes
//! what [`poll_next`](Subscriptions::poll_next) yields, and calls
//! [`close_all`](Subscriptions::close_all) when the connection ends.
//! rpcwire's own transports also share with it which messages still wait
//! for their reply, so that a subscription opened by a message answered
//! later (a batch beside an async call) is written after that reply; a
//! transport of yours gets the id-first order for replies written at once
//! (see [`subscribe`](Subscriptions::subscribe)).
//!
//! On rpcwire's transports a subscription is also kept only if its id
//! reaches the client: one opened by a handler whose request is then
//! answered with an error instead of the result (the handler's own error
//! or panic, the too-large error of a reply past
//! [`max_response_len`](crate::dispatch::DispatcherBuilder::max_response_len), the
//! timeout of an async call) or not answered at all (a call cancelled or
//! dropped) is closed as if unsubscribed: its notifications are dropped,
//! its [`Sink`] reports it closed, and its place under
//! [`max_per_connection`](SubscriptionConfig::max_per_connection) is free.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use serde::Serialize;

use super::{LimitKind, Metrics};
use crate::codes::{LIMIT_EXCEEDED, METHOD_NOT_FOUND};
use crate::dispatch::engine::{ReplyGate, Unanswered};
use crate::lock;
use crate::{Context, RpcError};

/// What to do when a subscription's buffer is full because its client
/// reads more slowly than notifications arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlowPolicy {
    /// Drop the oldest buffered notification to make room for the new one
    /// (counted as [`LimitKind::Queue`]): the client misses some, and still
    /// sees the latest. Right for state that supersedes itself (new heads,
    /// prices). The oldest is this subscription's own when its
    /// [`buffer`](SubscriptionConfig::buffer) is full; when the
    /// connection's bounds are, it is taken from the subscription holding
    /// the most of them, so that a flood on one (`logs`) does not starve a
    /// quiet one (`newHeads`) of its latest.
    #[default]
    DropOldest,
    /// Close the subscription (counted as [`LimitKind::Subscription`]): the
    /// notifications already buffered are still written, then a final one
    /// carrying an error instead of a result,
    /// `{"jsonrpc":"2.0","method":…,"params":{"subscription":"0x…","error":{"code":-32005,…}}}`,
    /// and the producer's [`Sink`] reports the subscription closed. Right
    /// for streams where a gap is worse than an end (logs, transactions):
    /// the client knows to resubscribe and catch up.
    Close,
}

/// How the subscriptions of one connection behave.
#[derive(Clone, Debug)]
pub struct SubscriptionConfig {
    /// The notification's method (default `"eth_subscription"`).
    pub method: Cow<'static, str>,
    /// Notifications buffered per subscription while the client is slow
    /// (default 1024; at least 1). A subscription is also full when the
    /// connection's [`max_queued`](SubscriptionConfig::max_queued) is
    /// reached.
    pub buffer: usize,
    /// What happens when that buffer is full.
    pub policy: SlowPolicy,
    /// Subscriptions one connection may hold at once (default 1024).
    pub max_per_connection: usize,
    /// Notifications queued over all the subscriptions of one connection
    /// (default 16,384, geth's order of magnitude): past it, the
    /// subscription sending is treated as full.
    pub max_queued: usize,
    /// Bytes of notifications queued over all the subscriptions of one
    /// connection (default 16 MiB): a notification that would pass it
    /// finds its subscription full, so large notifications (logs, traces)
    /// cannot make a slow client cost `max_queued` times their size. One
    /// notification larger than the bound alone is still taken when
    /// nothing else waits (so 0 means one notification at a time).
    pub max_queued_bytes: usize,
}

impl Default for SubscriptionConfig {
    fn default() -> Self {
        SubscriptionConfig {
            method: Cow::Borrowed("eth_subscription"),
            buffer: 1024,
            policy: SlowPolicy::DropOldest,
            max_per_connection: 1024,
            max_queued: 16_384,
            max_queued_bytes: 16 << 20,
        }
    }
}

/// A subscription's id: 128 bits, written as a QUANTITY string (`"0x"` and
/// lowercase hex digits without leading zeros), as Ethereum nodes do.
///
/// ```
/// use rpcwire::server::subscriptions::SubscriptionId;
/// let id = SubscriptionId::from_u128(0x1b4);
/// assert_eq!(id.to_string(), "0x1b4");
/// assert_eq!(serde_json::to_string(&id)?, r#""0x1b4""#);
/// assert_eq!(SubscriptionId::parse("0x1B4"), Some(id));
/// assert_eq!(SubscriptionId::parse("1b4"), None);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u128);

impl SubscriptionId {
    /// A fresh id no client can guess: 128 bits from SipHash keyed per
    /// thread from the operating system's random source (std's
    /// `RandomState`), over a process-wide counter.
    pub fn random() -> SubscriptionId {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            static KEYS: RandomState = RandomState::new();
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let (hi, lo) = KEYS.with(|k| (k.hash_one((n, 0u8)), k.hash_one((n, 1u8))));
        SubscriptionId((u128::from(hi) << 64) | u128::from(lo))
    }

    /// The id with this value.
    pub const fn from_u128(value: u128) -> SubscriptionId {
        SubscriptionId(value)
    }

    /// The id's value.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// Reads an id as clients send it back: `0x` (or `0X`) and 1 to 32 hex
    /// digits, either case (leading zeros tolerated).
    pub fn parse(s: &str) -> Option<SubscriptionId> {
        let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
        if digits.is_empty() || digits.len() > 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return None;
        }
        u128::from_str_radix(digits, 16).ok().map(SubscriptionId)
    }

    /// Appends the id as a JSON string.
    fn write_json(self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(out, "\"{self}\"");
    }
}

impl fmt::Display for SubscriptionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Debug for SubscriptionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SubscriptionId({self})")
    }
}

impl Serialize for SubscriptionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SubscriptionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        SubscriptionId::parse(&s).ok_or_else(|| {
            serde::de::Error::custom("expected a subscription id (0x and hex digits)")
        })
    }
}

/// Why [`Sink::send`] did not queue a notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkError {
    /// The subscription has ended: the client unsubscribed, the
    /// slow-subscriber policy closed it, the producer closed it, or the
    /// connection closed. Stop producing.
    Closed,
    /// The result could not be serialized (nothing was sent).
    Serialize,
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SinkError::Closed => "the subscription has ended",
            SinkError::Serialize => "the notification could not be serialized",
        })
    }
}

impl std::error::Error for SinkError {}

/// One connection's subscriptions; see the [module docs](self). Cheap to
/// clone (one reference count): the transport keeps one clone, the
/// connection's context another.
#[derive(Clone)]
pub struct Subscriptions {
    inner: Arc<Registry>,
}

struct Registry {
    config: SubscriptionConfig,
    metrics: Option<Arc<Metrics>>,
    /// `{"jsonrpc":"2.0","method":"<method>","params":{"subscription":`,
    /// the start of every notification.
    head: Box<[u8]>,
    state: Mutex<State>,
    /// The connection's writer, woken when a notification is queued.
    writer: AtomicWaker,
    /// `State::queued`, readable without the lock (stored under it).
    queued: AtomicUsize,
    /// rpcwire's transports: which messages still wait for their reply (a
    /// subscription opened by one holds its notifications until then).
    gate: Option<Arc<ReplyGate>>,
}

#[derive(Default)]
struct State {
    /// Open subscriptions, and closed ones whose last notifications are
    /// still to be written.
    subs: HashMap<u128, Entry>,
    /// Subscriptions with queued notifications, in the order the writer
    /// takes them (round-robin: one notification each, then to the back).
    ready: VecDeque<u128>,
    /// Open subscriptions (what the per-connection limit counts).
    open: usize,
    /// Notifications queued over all subscriptions.
    queued: usize,
    /// Their bytes.
    queued_bytes: usize,
    /// The connection has closed: nothing is accepted any more.
    closed: bool,
}

struct Entry {
    queue: VecDeque<Bytes>,
    /// The bytes of `queue`.
    bytes: usize,
    /// Listed in `State::ready`.
    in_ready: bool,
    /// Accepting notifications; `false` once closed (then removed when its
    /// queue is written out).
    open: bool,
    signal: Arc<Signal>,
    /// The message whose handler opened it, while that message's reply
    /// (which carries the id) is not written: nothing is written before it
    /// (0: nothing held).
    held_for: u64,
}

/// Tells producers that a subscription ended.
#[derive(Default)]
struct Signal {
    closed: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Signal {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

impl Subscriptions {
    /// A registry for one connection; limits hit are counted in `metrics`.
    pub fn new(config: SubscriptionConfig, metrics: Option<Arc<Metrics>>) -> Subscriptions {
        Subscriptions::with_gate(config, metrics, None)
    }

    /// A registry sharing `gate` with the connection's dispatcher: what a
    /// handler subscribes waits for the reply of its message.
    pub(crate) fn with_gate(
        config: SubscriptionConfig,
        metrics: Option<Arc<Metrics>>,
        gate: Option<Arc<ReplyGate>>,
    ) -> Subscriptions {
        let mut head = b"{\"jsonrpc\":\"2.0\",\"method\":".to_vec();
        crate::write::string(&mut head, &config.method);
        head.extend_from_slice(b",\"params\":{\"subscription\":");
        let inner = Arc::new(Registry {
            config,
            metrics,
            head: head.into_boxed_slice(),
            state: Mutex::new(State::default()),
            writer: AtomicWaker::new(),
            queued: AtomicUsize::new(0),
            gate,
        });
        if let Some(gate) = &inner.gate {
            let registry: std::sync::Weak<Registry> = Arc::downgrade(&inner);
            gate.set_registry(registry);
        }
        Subscriptions { inner }
    }

    /// The registry of the connection `ctx` belongs to. On a transport
    /// without server-pushed messages (plain HTTP) this is an error to
    /// answer with: -32601, "Notifications not supported", as geth.
    pub fn of(ctx: &Context) -> Result<&Subscriptions, RpcError> {
        ctx.extension::<Subscriptions>().ok_or_else(|| {
            RpcError::new(METHOD_NOT_FOUND, "Notifications not supported").with_data(
                &NotSupported {
                    transport: ctx.transport(),
                },
            )
        })
    }

    /// Opens a subscription: its id (to answer the client with) and the
    /// [`Sink`] its notifications go through. Fails when the connection
    /// already holds [`max_per_connection`](SubscriptionConfig::max_per_connection)
    /// subscriptions ([`LIMIT_EXCEEDED`], `data.limit`; counted as
    /// [`LimitKind::Subscription`]), or has closed.
    ///
    /// Answer the request right after subscribing (a synchronous handler,
    /// or an async one that does not await after this call): the transport
    /// writes a handler's reply before the notifications queued after it,
    /// so the client learns the id before its first notification.
    ///
    /// On rpcwire's transports (WebSocket, TCP, Unix sockets, stdio) this
    /// holds also when the reply comes later: a subscription opened inside
    /// a batch that waits for an async call, or by an async handler that
    /// awaits after subscribing, has its notifications queued (its buffer
    /// and policy apply) but written only after the reply of its message,
    /// as geth does. And the subscription is kept only if that reply
    /// carries the handler's result: answered with an error instead (the
    /// handler's, a panic, the too-large error, a timeout), or never
    /// answered, it is closed as by [`unsubscribe`](Subscriptions::unsubscribe),
    /// since the client never learns its id. This holds for subscriptions
    /// opened in the handler's own code (not in a task it spawned) of a
    /// request. A notification's handler has no reply to carry an id, so
    /// what it opens is kept whatever it returns (a synchronous one's,
    /// inside a batch that waits for an async call, still waits for the
    /// batch's reply and is dropped with it if the batch is abandoned; an
    /// async notification handler's is written at once).
    pub fn subscribe(&self) -> Result<(SubscriptionId, Sink), RpcError> {
        let registry = &self.inner;
        let mut state = lock(&registry.state);
        if state.closed {
            return Err(RpcError::new(
                crate::codes::SERVER_ERROR,
                "Connection closed",
            ));
        }
        let limit = registry.config.max_per_connection;
        if state.open >= limit {
            drop(state);
            registry.count(LimitKind::Subscription);
            return Err(
                RpcError::new(LIMIT_EXCEEDED, "Too many subscriptions").with_data(&Limit { limit })
            );
        }
        let mut id = SubscriptionId::random();
        while state.subs.contains_key(&id.0) {
            id = SubscriptionId::random();
        }
        let signal = Arc::new(Signal::default());
        // Opened by a handler answering a request: kept only if that
        // request is answered with its result (see `ReplyGate`).
        let answering = registry.gate.as_ref().and_then(|g| g.current());
        state.subs.insert(
            id.0,
            Entry {
                queue: VecDeque::new(),
                bytes: 0,
                in_ready: false,
                open: true,
                signal: Arc::clone(&signal),
                held_for: answering.unwrap_or(0),
            },
        );
        state.open += 1;
        drop(state);
        if let (Some(gate), Some(_)) = (&registry.gate, answering) {
            gate.opened(id.0);
        }
        let sink = Sink {
            inner: Arc::new(SinkInner {
                registry: Arc::clone(registry),
                id,
                signal,
            }),
        };
        Ok((id, sink))
    }

    /// Ends the subscription `id` (as the client sent it, `"0x…"`) at the
    /// client's request: its queued notifications are dropped, none follow,
    /// and its producer's [`Sink`] reports it closed. Returns whether it
    /// was open (the answer to `eth_unsubscribe`).
    pub fn unsubscribe(&self, id: &str) -> bool {
        SubscriptionId::parse(id).is_some_and(|id| self.unsubscribe_id(id))
    }

    /// [`unsubscribe`](Subscriptions::unsubscribe) by parsed id.
    pub fn unsubscribe_id(&self, id: SubscriptionId) -> bool {
        self.inner.remove(id.0)
    }

    /// Subscriptions open now.
    pub fn len(&self) -> usize {
        lock(&self.inner.state).open
    }

    /// Whether no subscription is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notifications waiting to be written, over all subscriptions.
    pub fn queued(&self) -> usize {
        lock(&self.inner.state).queued
    }

    /// Bytes of the notifications waiting to be written, over all
    /// subscriptions.
    pub fn queued_bytes(&self) -> usize {
        lock(&self.inner.state).queued_bytes
    }

    /// The next notification to write (for the connection's writer): one
    /// from each subscription with queued notifications in turn.
    /// `Pending` when none is queued; the task is woken when one is.
    pub fn poll_next(&self, cx: &mut TaskContext<'_>) -> Poll<Bytes> {
        if let Some(m) = self.try_next() {
            return Poll::Ready(m);
        }
        self.inner.writer.register(cx.waker());
        match self.try_next() {
            Some(m) => Poll::Ready(m),
            None => Poll::Pending,
        }
    }

    /// Whether notifications wait to be written (without taking the
    /// lock: for a writer's fast path; [`poll_next`](Subscriptions::poll_next)
    /// is what registers for a wake-up).
    pub fn has_queued(&self) -> bool {
        self.inner.queued.load(Ordering::SeqCst) > 0
    }

    /// The next notification to write, if one is queued.
    pub fn try_next(&self) -> Option<Bytes> {
        if !self.has_queued() {
            return None;
        }
        let mut guard = lock(&self.inner.state);
        let state = &mut *guard;
        // Each listed subscription is looked at once at most: one still
        // held goes back to the end of the list.
        for _ in 0..state.ready.len() {
            let Some(id) = state.ready.pop_front() else {
                break;
            };
            let Some(entry) = state.subs.get_mut(&id) else {
                // Unsubscribed while listed.
                continue;
            };
            if entry.held_for != 0 {
                let gate = self.inner.gate.as_ref();
                if gate.is_some_and(|g| !g.is_answered(entry.held_for)) {
                    state.ready.push_back(id);
                    continue;
                }
                entry.held_for = 0;
            }
            let Some(message) = entry.queue.pop_front() else {
                entry.in_ready = false;
                continue;
            };
            state.queued -= 1;
            state.queued_bytes -= message.len();
            entry.bytes -= message.len();
            if !entry.queue.is_empty() {
                state.ready.push_back(id);
            } else {
                entry.in_ready = false;
                if !entry.open {
                    state.subs.remove(&id);
                }
            }
            self.inner.publish(state);
            return Some(message);
        }
        None
    }

    /// Ends every subscription: the connection closed. Queued notifications
    /// are dropped, producers' sinks report closed, and nothing more is
    /// accepted.
    pub fn close_all(&self) {
        let mut state = lock(&self.inner.state);
        state.closed = true;
        state.open = 0;
        state.queued = 0;
        state.queued_bytes = 0;
        state.ready.clear();
        self.inner.publish(&state);
        let subs = std::mem::take(&mut state.subs);
        drop(state);
        for entry in subs.into_values() {
            entry.signal.close();
        }
    }
}

impl fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("Subscriptions")
            .field("open", &state.open)
            .field("queued", &state.queued)
            .field("closed", &state.closed)
            .finish()
    }
}

impl Unanswered for Registry {
    fn close(&self, id: u128) {
        self.remove(id);
    }

    fn close_held(&self, seq: u64) {
        let held: Vec<u128> = lock(&self.state)
            .subs
            .iter()
            .filter(|(_, e)| e.held_for == seq)
            .map(|(&id, _)| id)
            .collect();
        for id in held {
            self.remove(id);
        }
    }
}

impl Registry {
    /// Ends subscription `id` at once: its queued notifications are
    /// dropped and its producer's sink reports it closed. Returns whether
    /// it was open.
    fn remove(&self, id: u128) -> bool {
        let mut state = lock(&self.state);
        let Some(entry) = state.subs.remove(&id) else {
            return false;
        };
        state.queued -= entry.queue.len();
        state.queued_bytes -= entry.bytes;
        if entry.open {
            state.open -= 1;
        }
        if entry.in_ready {
            // Listed ids are skipped only by a writer that finds something
            // queued: with nothing queued they stayed, one per ended
            // subscription, for the connection's life.
            state.ready.retain(|&listed| listed != id);
        }
        self.publish(&state);
        drop(state);
        entry.signal.close();
        entry.open
    }

    /// Makes `state.queued` readable without the lock (called under it).
    fn publish(&self, state: &State) {
        self.queued.store(state.queued, Ordering::SeqCst);
    }

    fn count(&self, kind: LimitKind) {
        self.count_n(kind, 1);
    }

    fn count_n(&self, kind: LimitKind, n: u64) {
        if let Some(m) = &self.metrics {
            m.limit_hits(kind, n);
        }
    }

    /// Queues `message` for subscription `id`, applying the slow-subscriber
    /// policy when its buffer is full.
    fn push(&self, id: SubscriptionId, mut message: Bytes) -> Result<(), SinkError> {
        let capacity = self.config.buffer.max(1);
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let entry = match state.subs.get_mut(&id.0) {
            Some(e) if e.open && !state.closed => e,
            _ => return Err(SinkError::Closed),
        };
        let mut hit = None;
        let mut outcome = Ok(());
        let max_queued = self.config.max_queued.max(1);
        let max_bytes = self.config.max_queued_bytes;
        let full = |len: usize, queued: usize, bytes: usize| {
            len >= capacity
                || queued >= max_queued
                || (bytes > 0 && bytes.saturating_add(message.len()) > max_bytes)
        };
        if full(entry.queue.len(), state.queued, state.queued_bytes) {
            match self.config.policy {
                SlowPolicy::DropOldest => {
                    // Oldest notifications make room for the new one, as
                    // many as it takes, each counted: this subscription's
                    // own while its buffer is full, else those of the open
                    // subscription holding the most of the connection's
                    // bound (this one included). Only its own, a flood on
                    // one subscription left another nothing to give up:
                    // every new notification of the quiet one was dropped,
                    // its client never saw its latest.
                    let by_bytes = state.queued_bytes > 0
                        && state.queued_bytes.saturating_add(message.len()) > max_bytes;
                    // What closed subscriptions hold is written out as it
                    // is: when it alone fills the bounds, nothing the open
                    // ones give up makes room, and the new notification
                    // is the one dropped (before anything else is).
                    let (closed, closed_bytes) = state
                        .subs
                        .values()
                        .filter(|e| !e.open)
                        .fold((0, 0), |(n, b), e| (n + e.queue.len(), b + e.bytes));
                    if full(0, closed, closed_bytes) {
                        drop(guard);
                        self.count(LimitKind::Queue);
                        return Ok(());
                    }
                    let mut dropped = 0;
                    loop {
                        let own = state.subs.get(&id.0).map_or(0, |e| e.queue.len());
                        if !full(own, state.queued, state.queued_bytes) {
                            break;
                        }
                        // Its own buffer full: its own oldest, down to
                        // below the buffer only (the connection's bounds
                        // are for the largest holder to answer).
                        let own_only = own >= capacity;
                        let victim = if own_only {
                            Some(id.0)
                        } else {
                            state
                                .subs
                                .iter()
                                .filter(|(_, e)| e.open && !e.queue.is_empty())
                                .max_by_key(|(_, e)| if by_bytes { e.bytes } else { e.queue.len() })
                                .map(|(&k, _)| k)
                        };
                        let Some(victim) = victim.and_then(|k| state.subs.get_mut(&k)) else {
                            // Not reached (the closed ones alone leave room,
                            // checked above); should it be, the new one is
                            // dropped so that the bounds hold.
                            self.publish(state);
                            drop(guard);
                            self.count_n(LimitKind::Queue, dropped + 1);
                            return Ok(());
                        };
                        loop {
                            let enough = if own_only {
                                victim.queue.len() < capacity
                            } else {
                                !full(own, state.queued, state.queued_bytes)
                            };
                            if enough {
                                break;
                            }
                            let Some(old) = victim.queue.pop_front() else {
                                break;
                            };
                            victim.bytes -= old.len();
                            state.queued -= 1;
                            state.queued_bytes -= old.len();
                            dropped += 1;
                        }
                    }
                    hit = (dropped > 0).then_some((LimitKind::Queue, dropped));
                }
                SlowPolicy::Close => {
                    entry.open = false;
                    state.open -= 1;
                    entry.signal.close();
                    // The closing notice takes the message's place.
                    message = self.error_notification(
                        id,
                        LIMIT_EXCEEDED,
                        "Subscription closed: the client reads too slowly",
                        Some(&format!(
                            "{{\"buffer\":{capacity},\"maxQueued\":{max_queued},\"maxQueuedBytes\":{max_bytes}}}"
                        )),
                    );
                    hit = Some((LimitKind::Subscription, 1));
                    outcome = Err(SinkError::Closed);
                }
            }
        }
        let Some(entry) = state.subs.get_mut(&id.0) else {
            return Err(SinkError::Closed);
        };
        state.queued_bytes += message.len();
        entry.bytes += message.len();
        entry.queue.push_back(message);
        state.queued += 1;
        if !entry.in_ready {
            entry.in_ready = true;
            state.ready.push_back(id.0);
        }
        self.publish(state);
        drop(guard);
        self.writer.wake();
        if let Some((kind, n)) = hit {
            self.count_n(kind, n);
        }
        outcome
    }

    /// Stops accepting notifications for `id`; `notice` (if any) is queued
    /// after those already buffered, which are still written.
    fn finish(&self, id: SubscriptionId, notice: Option<Bytes>) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let Some(entry) = state.subs.get_mut(&id.0) else {
            return;
        };
        if !entry.open {
            return;
        }
        entry.open = false;
        state.open -= 1;
        entry.signal.close();
        if let Some(notice) = notice {
            state.queued_bytes += notice.len();
            entry.bytes += notice.len();
            entry.queue.push_back(notice);
            state.queued += 1;
            if !entry.in_ready {
                entry.in_ready = true;
                state.ready.push_back(id.0);
            }
            self.publish(state);
            drop(guard);
            self.writer.wake();
        } else if entry.queue.is_empty() {
            // Listed still when another's notification took its last one
            // (drop-oldest), nothing would take the id off the list.
            if entry.in_ready {
                state.ready.retain(|&listed| listed != id.0);
            }
            state.subs.remove(&id.0);
        }
    }

    /// `{"jsonrpc":"2.0","method":…,"params":{"subscription":"0x…","result":<result>}}`.
    fn notification(&self, id: SubscriptionId, result: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(self.head.len() + 48 + result.len());
        self.start(id, &mut out);
        out.extend_from_slice(b",\"result\":");
        out.extend_from_slice(result);
        out.extend_from_slice(b"}}");
        Bytes::from(out)
    }

    fn start(&self, id: SubscriptionId, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        id.write_json(out);
    }

    /// A final notification carrying an error instead of a result.
    fn error_notification(
        &self,
        id: SubscriptionId,
        code: i32,
        message: &str,
        data: Option<&str>,
    ) -> Bytes {
        let mut out = Vec::with_capacity(self.head.len() + 128 + message.len());
        self.start(id, &mut out);
        out.extend_from_slice(b",\"error\":{\"code\":");
        crate::write::i64(&mut out, i64::from(code));
        out.extend_from_slice(b",\"message\":");
        crate::write::string(&mut out, message);
        if let Some(data) = data {
            out.extend_from_slice(b",\"data\":");
            out.extend_from_slice(data.as_bytes());
        }
        out.extend_from_slice(b"}}}");
        Bytes::from(out)
    }
}

/// Where a producer sends one subscription's notifications; see the
/// [module docs](self).
///
/// Cheap to clone, `Send + Sync`. Dropping the last clone ends the
/// subscription (the notifications already queued are still written); so
/// does [`close`](Sink::close). Sending never waits: see [`SlowPolicy`].
#[derive(Clone)]
pub struct Sink {
    inner: Arc<SinkInner>,
}

struct SinkInner {
    registry: Arc<Registry>,
    id: SubscriptionId,
    signal: Arc<Signal>,
}

impl Drop for SinkInner {
    fn drop(&mut self) {
        self.registry.finish(self.id, None);
    }
}

impl Sink {
    /// The subscription's id.
    pub fn id(&self) -> SubscriptionId {
        self.inner.id
    }

    /// Sends a notification whose `result` is `result`, serialized.
    /// Returns [`SinkError::Closed`] once the subscription has ended
    /// (including when this very notification made the
    /// [`SlowPolicy::Close`] policy close it).
    pub fn send<T: Serialize + ?Sized>(&self, result: &T) -> Result<(), SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        let registry = &self.inner.registry;
        let mut out = Vec::with_capacity(registry.head.len() + 128);
        registry.start(self.inner.id, &mut out);
        out.extend_from_slice(b",\"result\":");
        serde_json::to_writer(&mut out, result).map_err(|_| SinkError::Serialize)?;
        out.extend_from_slice(b"}}");
        registry.push(self.inner.id, Bytes::from(out))
    }

    /// Sends a notification whose `result` is already JSON text (not
    /// checked: the caller vouches for it), copied once into the message:
    /// for relaying an upstream node's notification without decoding it.
    pub fn send_raw(&self, result: &[u8]) -> Result<(), SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        let registry = &self.inner.registry;
        registry.push(self.inner.id, registry.notification(self.inner.id, result))
    }

    /// Whether the subscription has ended.
    pub fn is_closed(&self) -> bool {
        self.inner.signal.closed.load(Ordering::Acquire)
    }

    /// Completes when the subscription ends (unsubscribed, closed by the
    /// slow-subscriber policy or by [`close`](Sink::close), or the
    /// connection closed): select on it in a producer loop.
    pub async fn closed(&self) {
        let signal = &self.inner.signal;
        loop {
            let notified = signal.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// Notifications of this subscription waiting to be written.
    pub fn queued(&self) -> usize {
        let state = lock(&self.inner.registry.state);
        state
            .subs
            .get(&self.inner.id.0)
            .map_or(0, |e| e.queue.len())
    }

    /// Ends the subscription from the producer's side (the source ended):
    /// the notifications already queued are written, then nothing more.
    pub fn close(&self) {
        self.inner.registry.finish(self.inner.id, None);
    }

    /// Ends the subscription with a final notification carrying `error`
    /// (for example an upstream node's subscription failed): the
    /// notifications already queued are written first.
    pub fn close_with_error(&self, error: &RpcError) {
        let registry = &self.inner.registry;
        let notice =
            registry.error_notification(self.inner.id, error.code(), error.message(), error.data());
        registry.finish(self.inner.id, Some(notice));
    }
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink")
            .field("id", &self.inner.id)
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[derive(Serialize)]
struct Limit {
    limit: usize,
}

#[derive(Serialize)]
struct NotSupported {
    transport: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ended subscriptions leave nothing behind: their ids stayed in the
    /// ready list while nothing else was queued, 16 bytes each for the
    /// connection's life (found by a review).
    #[test]
    fn ended_subscriptions_do_not_pile_up_in_the_ready_list() {
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        for _ in 0..10_000 {
            let (id, sink) = subs.subscribe().unwrap();
            sink.send(&1).unwrap();
            assert!(subs.unsubscribe_id(id));
            // The writer looks: nothing is queued.
            assert!(subs.try_next().is_none());
        }
        assert_eq!((subs.len(), subs.queued()), (0, 0));
        let ready = lock(&subs.inner.state).ready.len();
        assert_eq!(
            ready, 0,
            "ids of ended subscriptions kept in the ready list"
        );
    }

    /// `DropOldest` drops this subscription's oldest notifications only
    /// when its own buffer is full: with the connection's bytes held by
    /// another subscription, that one's oldest make room, and the queued
    /// ones here are kept (the queue was once emptied, then the new one
    /// dropped too; found by a review).
    #[test]
    fn drop_oldest_keeps_a_queue_it_cannot_make_room_with() {
        let config = SubscriptionConfig {
            max_queued_bytes: 2000,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, None);
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        for i in 0..5 {
            a.send(&format!("{i}{}", "x".repeat(199))).unwrap();
        }
        b.send(&1).unwrap();
        b.send(&2).unwrap();
        assert_eq!(b.queued(), 2);
        b.send(&"y".repeat(900)).unwrap();
        assert_eq!(b.queued(), 3, "b lost its queued notifications");
        assert!(a.queued() < 5, "a gave up its oldest");
        assert!(subs.queued_bytes() <= 2000, "{}", subs.queued_bytes());
    }

    fn drain(subs: &Subscriptions) -> Vec<serde_json::Value> {
        std::iter::from_fn(|| subs.try_next())
            .map(|b| serde_json::from_slice(&b).unwrap())
            .collect()
    }

    #[test]
    fn ids_are_quantities_and_distinct() {
        let ids: std::collections::HashSet<_> =
            (0..1000).map(|_| SubscriptionId::random()).collect();
        assert_eq!(ids.len(), 1000);
        for id in ids {
            let s = id.to_string();
            assert!(
                s.starts_with("0x") && !s.starts_with("0x0") || s == "0x0",
                "{s}"
            );
            assert_eq!(SubscriptionId::parse(&s), Some(id));
        }
        assert_eq!(SubscriptionId::parse("0x"), None);
        assert_eq!(
            SubscriptionId::parse(&format!("0x1{}", "0".repeat(32))),
            None
        );
        assert_eq!(SubscriptionId::parse("0xg"), None);
        assert_eq!(SubscriptionId::from_u128(0).to_string(), "0x0");
    }

    #[test]
    fn notifications_in_the_eth_subscription_shape_round_robin() {
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        let (a, sa) = subs.subscribe().unwrap();
        let (b, sb) = subs.subscribe().unwrap();
        sa.send(&1).unwrap();
        sa.send(&2).unwrap();
        sb.send_raw(br#"{"x":true}"#).unwrap();
        assert_eq!(subs.queued(), 3);
        let got = drain(&subs);
        assert_eq!(
            got[0],
            serde_json::json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":a.to_string(),"result":1}})
        );
        assert_eq!(got[1]["params"]["subscription"], b.to_string());
        assert_eq!(got[1]["params"]["result"]["x"], true);
        assert_eq!(got[2]["params"]["result"], 2);
        assert_eq!(subs.queued(), 0);
    }

    #[test]
    fn drop_oldest_keeps_the_newest() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            buffer: 3,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (_, sink) = subs.subscribe().unwrap();
        for i in 0..10 {
            sink.send(&i).unwrap();
            assert!(sink.queued() <= 3);
        }
        let got: Vec<_> = drain(&subs)
            .iter()
            .map(|v| v["params"]["result"].clone())
            .collect();
        assert_eq!(got, [7, 8, 9]);
        assert_eq!(metrics.limit_count(LimitKind::Queue), 7);
    }

    /// A notification that needs the room of several older ones drops
    /// them all: each is counted (one count for all of them before; found
    /// by a review).
    #[test]
    fn drop_oldest_counts_every_notification_it_drops() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            max_queued_bytes: 1000,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (_, sink) = subs.subscribe().unwrap();
        for i in 0..4 {
            sink.send(&format!("{i}{}", "x".repeat(100))).unwrap();
        }
        assert_eq!(subs.queued(), 4);
        sink.send(&"y".repeat(850)).unwrap();
        assert_eq!(subs.queued(), 1, "the four older ones make room");
        assert_eq!(metrics.limit_count(LimitKind::Queue), 4);
    }

    #[test]
    fn the_connection_wide_cap_bounds_many_subscriptions() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            buffer: 10,
            max_queued: 12,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        let (_, c) = subs.subscribe().unwrap();
        for i in 0..10 {
            a.send(&i).unwrap();
        }
        for i in 0..5 {
            b.send(&i).unwrap();
        }
        // Past the 12, a (holding the most) gave up its oldest for b's.
        assert_eq!((a.queued(), b.queued(), subs.queued()), (7, 5, 12));
        // And for c's: a quiet subscription still gets its latest through
        // (it had nothing of its own to give up, and its notification was
        // the one dropped).
        c.send(&0).unwrap();
        assert_eq!((c.queued(), a.queued(), subs.queued()), (1, 6, 12));
        assert_eq!(metrics.limit_count(LimitKind::Queue), 4);
        let all = drain(&subs);
        let results_of = |sink: &Sink| -> Vec<serde_json::Value> {
            all.iter()
                .filter(|n| n["params"]["subscription"] == sink.id().to_string())
                .map(|n| n["params"]["result"].clone())
                .collect()
        };
        assert_eq!(results_of(&a), [4, 5, 6, 7, 8, 9]);
        assert_eq!(results_of(&b), [0, 1, 2, 3, 4]);
        assert_eq!(results_of(&c), [0]);
        // A subscription past its own buffer gives up its own oldest, even
        // holding less than another.
        let config = SubscriptionConfig {
            buffer: 2,
            max_queued: 100,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, None);
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        for i in 0..2 {
            a.send(&i).unwrap();
        }
        for i in 0..3 {
            b.send(&i).unwrap();
        }
        assert_eq!((a.queued(), b.queued()), (2, 2));
        let b_results: Vec<_> = drain(&subs)
            .into_iter()
            .filter(|n| n["params"]["subscription"] == b.id().to_string())
            .map(|n| n["params"]["result"].clone())
            .collect();
        assert_eq!(b_results, [1, 2]);
        // With the close policy, the subscription that finds the connection
        // full is closed.
        let config = SubscriptionConfig {
            buffer: 10,
            max_queued: 3,
            policy: SlowPolicy::Close,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, None);
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        for i in 0..3 {
            a.send(&i).unwrap();
        }
        assert_eq!(b.send(&0), Err(SinkError::Closed));
        assert!(!a.is_closed());
        assert_eq!(subs.queued(), 4, "a's three and b's final notice");
    }

    /// Drop-oldest's edges (a review of the change that made it take from
    /// the largest holder): a subscription past its own buffer gives up
    /// its own oldest only down to the buffer, the connection's bytes then
    /// coming from the largest holder; closed subscriptions' queued
    /// notifications are never taken, and when they alone fill the bounds
    /// the new notification is the one dropped (the bounds hold); a
    /// subscription whose last notification another took, then ended, is
    /// off the ready list.
    #[test]
    fn drop_oldest_respects_buffers_closed_queues_and_the_ready_list() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            buffer: 2,
            max_queued_bytes: 2000,
            ..Default::default()
        };
        let subs = Subscriptions::new(config.clone(), Some(metrics.clone()));
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        let text = |n: usize| "x".repeat(n);
        a.send(&text(10)).unwrap();
        a.send(&text(11)).unwrap();
        b.send(&text(1500)).unwrap();
        // (Each notification is its text and about 120 bytes of envelope.)
        // a is at its buffer: its oldest goes, one only; then the bytes
        // still pass the bound, and b (the largest) gives its up.
        a.send(&text(200)).unwrap();
        assert_eq!((a.queued(), b.queued()), (2, 0));
        assert!(subs.queued_bytes() <= 2000, "{}", subs.queued_bytes());
        assert_eq!(metrics.limit_count(LimitKind::Queue), 2);
        let lengths: Vec<usize> = drain(&subs)
            .iter()
            .map(|n| n["params"]["result"].as_str().unwrap().len())
            .collect();
        assert_eq!(lengths, [11, 200]);

        // Closed subscriptions' notifications fill the bounds.
        let subs = Subscriptions::new(config.clone(), Some(metrics.clone()));
        let (_, c) = subs.subscribe().unwrap();
        let (_, d) = subs.subscribe().unwrap();
        c.send(&text(1800)).unwrap();
        c.close();
        let before = metrics.limit_count(LimitKind::Queue);
        d.send(&text(200)).unwrap();
        assert_eq!(d.queued(), 0, "the new one dropped");
        assert!(subs.queued_bytes() <= 2000, "{}", subs.queued_bytes());
        assert_eq!(metrics.limit_count(LimitKind::Queue), before + 1);
        assert_eq!(drain(&subs).len(), 1, "the closed one's notification");
        // And what an open one holds is not given up for nothing: with
        // the closed ones filling the bounds, only the new one goes.
        let subs = Subscriptions::new(config.clone(), Some(metrics.clone()));
        let (_, g) = subs.subscribe().unwrap();
        let (_, h) = subs.subscribe().unwrap();
        h.send(&text(10)).unwrap();
        g.send(&text(1700)).unwrap();
        g.close();
        let before = metrics.limit_count(LimitKind::Queue);
        h.send(&text(300)).unwrap();
        assert_eq!(h.queued(), 1, "h kept what it had");
        assert_eq!(metrics.limit_count(LimitKind::Queue), before + 1);

        // Emptied by another's push, then ended: off the ready list.
        let subs = Subscriptions::new(config, None);
        let (_, e) = subs.subscribe().unwrap();
        let (_, f) = subs.subscribe().unwrap();
        e.send(&text(900)).unwrap();
        f.send(&text(900)).unwrap();
        assert_eq!((e.queued(), f.queued()), (0, 1));
        drop(e);
        assert_eq!(lock(&subs.inner.state).ready.len(), 1, "f alone listed");
        assert_eq!(drain(&subs).len(), 1);
        assert_eq!(lock(&subs.inner.state).ready.len(), 0);
    }

    #[test]
    fn queued_bytes_are_bounded_too() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            max_queued_bytes: 1000,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (_, a) = subs.subscribe().unwrap();
        let (_, b) = subs.subscribe().unwrap();
        let text = |i: usize| format!("{i}{}", "x".repeat(199));
        for i in 0..10 {
            a.send(&text(i)).unwrap();
            assert!(subs.queued_bytes() <= 1000, "{}", subs.queued_bytes());
        }
        // Three of ~300 bytes fit: the rest replaced a's oldest.
        assert_eq!(subs.queued(), 3);
        assert_eq!(metrics.limit_count(LimitKind::Queue), 7);
        // b has none to give up: a's oldest makes room for it.
        b.send(&text(0)).unwrap();
        assert_eq!((a.queued(), b.queued(), subs.queued()), (2, 1, 3));
        assert_eq!(metrics.limit_count(LimitKind::Queue), 8);
        let results: Vec<_> = drain(&subs)
            .into_iter()
            .map(|n| n["params"]["result"].as_str().unwrap()[..1].to_string())
            .collect();
        assert_eq!(results, ["8", "0", "9"]);
        assert_eq!(subs.queued_bytes(), 0);
        // One notification larger than the bound is taken when nothing
        // waits, and is the oldest the next one replaces.
        a.send(&"y".repeat(5000)).unwrap();
        assert_eq!(subs.queued(), 1);
        assert!(subs.queued_bytes() > 5000);
        a.send(&1).unwrap();
        assert_eq!(subs.queued(), 1);
        assert!(subs.queued_bytes() < 200);
        // Unsubscribing gives its bytes back.
        assert!(subs.unsubscribe_id(a.id()));
        assert_eq!((subs.queued(), subs.queued_bytes()), (0, 0));
        // With the close policy, the subscription that would pass the
        // bound is closed, and its final notice says which bounds apply.
        let config = SubscriptionConfig {
            max_queued_bytes: 1000,
            policy: SlowPolicy::Close,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, None);
        let (_, a) = subs.subscribe().unwrap();
        for i in 0..3 {
            a.send(&text(i)).unwrap();
        }
        assert_eq!(a.send(&text(3)), Err(SinkError::Closed));
        let got = drain(&subs);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3]["params"]["error"]["data"]["maxQueuedBytes"], 1000);
    }

    #[test]
    fn close_policy_ends_with_an_error_notification() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            buffer: 2,
            policy: SlowPolicy::Close,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (id, sink) = subs.subscribe().unwrap();
        sink.send(&0).unwrap();
        sink.send(&1).unwrap();
        assert_eq!(sink.send(&2), Err(SinkError::Closed));
        assert!(sink.is_closed());
        assert_eq!(sink.send(&3), Err(SinkError::Closed));
        assert_eq!(subs.len(), 0);
        let got = drain(&subs);
        assert_eq!(got.len(), 3);
        assert_eq!(got[2]["params"]["subscription"], id.to_string());
        assert_eq!(got[2]["params"]["error"]["code"], LIMIT_EXCEEDED);
        assert_eq!(got[2]["params"]["error"]["data"]["buffer"], 2);
        assert!(!subs.unsubscribe(&id.to_string()));
        assert_eq!(metrics.limit_count(LimitKind::Subscription), 1);
    }

    #[test]
    fn the_limit_is_a_clear_error_and_unsubscribing_frees_a_place() {
        let metrics = Arc::new(Metrics::default());
        let config = SubscriptionConfig {
            max_per_connection: 2,
            ..Default::default()
        };
        let subs = Subscriptions::new(config, Some(metrics.clone()));
        let (a, _sa) = subs.subscribe().unwrap();
        let (_b, _sb) = subs.subscribe().unwrap();
        let e = subs.subscribe().unwrap_err();
        assert_eq!(e.code(), LIMIT_EXCEEDED);
        assert_eq!(e.data(), Some(r#"{"limit":2}"#));
        assert_eq!(metrics.limit_count(LimitKind::Subscription), 1);
        assert!(subs.unsubscribe(&a.to_string()));
        assert!(!subs.unsubscribe(&a.to_string()));
        assert!(!subs.unsubscribe("not an id"));
        assert!(subs.subscribe().is_ok());
    }

    #[test]
    fn unsubscribe_drops_what_is_queued_and_closes_the_sink() {
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        let (id, sink) = subs.subscribe().unwrap();
        sink.send(&1).unwrap();
        assert!(subs.unsubscribe(&id.to_string()));
        assert_eq!(subs.queued(), 0);
        assert!(subs.try_next().is_none());
        assert_eq!(sink.send(&2), Err(SinkError::Closed));
    }

    #[test]
    fn dropping_the_sink_ends_after_what_is_queued() {
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        let (_, sink) = subs.subscribe().unwrap();
        sink.send(&1).unwrap();
        drop(sink);
        assert_eq!(subs.len(), 0);
        assert_eq!(drain(&subs).len(), 1);
        let (_, sink) = subs.subscribe().unwrap();
        sink.send(&1).unwrap();
        sink.close_with_error(&RpcError::new(-32000, "upstream gone"));
        let got = drain(&subs);
        assert_eq!(got[1]["params"]["error"]["message"], "upstream gone");
    }

    #[test]
    fn a_gateway_relays_an_upstream_notification_without_decoding_it() {
        let upstream = br#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x9ce59a13059e417087c02d3236a0b1cc","result":{"number":"0x1b4","hash":"0xab"}}}"#;
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        let (down, sink) = subs.subscribe().unwrap();
        // The gateway's map from upstream ids to its clients' sinks.
        let relays: HashMap<&str, Sink> = [("0x9ce59a13059e417087c02d3236a0b1cc", sink)].into();
        let arena = bumpalo::Bump::new();
        let crate::message::Message::Single(entry) = crate::parse(upstream, &arena).unwrap() else {
            panic!("a single message")
        };
        let params = entry.request().unwrap().params().unwrap();
        let up = params.get("subscription").unwrap().as_str().unwrap();
        let result = params.get("result").unwrap();
        relays[up].send_raw(result.as_bytes()).unwrap();
        let relayed = subs.try_next().unwrap();
        assert_eq!(
            relayed,
            format!(
                r#"{{"jsonrpc":"2.0","method":"eth_subscription","params":{{"subscription":"{down}","result":{{"number":"0x1b4","hash":"0xab"}}}}}}"#
            )
            .as_bytes()
        );
    }

    #[tokio::test]
    async fn closed_completes_when_the_connection_closes() {
        let subs = Subscriptions::new(SubscriptionConfig::default(), None);
        let (_, sink) = subs.subscribe().unwrap();
        let waiter = tokio::spawn({
            let sink = sink.clone();
            async move { sink.closed().await }
        });
        tokio::task::yield_now().await;
        subs.close_all();
        waiter.await.unwrap();
        assert_eq!(sink.send(&1), Err(SinkError::Closed));
        assert!(subs.subscribe().is_err());
    }
}
