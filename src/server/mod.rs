//! Servers (feature `server`, and `http` / `ws` for those transports): put a
//! [`Dispatcher`](crate::Dispatcher) on the wire.
//!
//! Every transport shares what is here: [`Limits`] (each breach answered
//! with a clear error and counted), [`Metrics`] (counters per method, per
//! error code and per limit, rendered for a Prometheus-style metrics
//! endpoint), the bounded per-connection [`Outbox`] through which handlers
//! send notifications and requests to their client (so a client that reads
//! slowly costs bounded memory), and [`Shutdown`] (stop accepting, let calls
//! in flight finish within a deadline, never write half a reply).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;

use crate::dispatch::{CallRecord, MethodTable, Observer, Route};
use crate::lock;
use crate::peer::{Outbound, SendError};

#[cfg(all(feature = "http", feature = "ws"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "http", feature = "ws"))))]
pub mod combined;
#[cfg(any(feature = "http", feature = "ws"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "http", feature = "ws"))))]
pub mod cors;
#[cfg(feature = "http")]
mod h1;
// With `mcp` too: its Streamable HTTP server applies `hosts`' rule for
// HTTP/1.1 requests without one valid `Host`.
#[cfg(any(feature = "http", feature = "ws", feature = "mcp"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "http", feature = "ws", feature = "mcp")))
)]
pub mod hosts;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod stream;
pub mod subscriptions;
#[cfg(feature = "ws")]
#[cfg_attr(docsrs, doc(cfg(feature = "ws")))]
pub mod ws;

/// The timer a connection driver keeps for its peer's request deadlines
/// ([`Peer::request_with`](crate::peer::Peer::request_with)): armed on
/// [`Peer::next_deadline`](crate::peer::Peer::next_deadline), it fails
/// the requests whose deadline passed ([`Peer::expire`](crate::peer::Peer::expire)),
/// which then tell their waiters and the client (the protocol's
/// cancellation). Without it a request no answer came for waited for ever,
/// holding its entry and keeping its connection from ever idling out.
#[derive(Default)]
pub(crate) struct PeerDeadlines {
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl PeerDeadlines {
    /// Expires what is due and arms the timer (with `cx`'s waker) on the
    /// next deadline. A driver calls it as it is polled and before it
    /// waits: a request made meanwhile is sent through the driver, which
    /// wakes it, so its deadline is seen at the next wait.
    pub(crate) fn poll(&mut self, conn: &crate::Connection, cx: &mut std::task::Context<'_>) {
        if let Some(peer) = conn.context().peer() {
            self.poll_peer(peer, cx);
        }
    }

    /// [`poll`](Self::poll) for `peer` itself, for a driver that holds its
    /// connection elsewhere.
    pub(crate) fn poll_peer(&mut self, peer: &crate::peer::Peer, cx: &mut std::task::Context<'_>) {
        peer.register_deadline_waker(cx.waker());
        while let Some(next) = peer.next_deadline() {
            let next = tokio::time::Instant::from_std(next);
            let timer = match &mut self.timer {
                Some(timer) => {
                    if timer.deadline() != next {
                        timer.as_mut().reset(next);
                    }
                    timer
                }
                None => self.timer.insert(Box::pin(tokio::time::sleep_until(next))),
            };
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            // Tokio's clock, which the timer keeps (it may be paused).
            peer.expire(tokio::time::Instant::now().into_std());
        }
        self.timer = None;
    }
}

/// How long a stream or WebSocket driver's reading may stay stopped at its
/// bound on held messages, with its handlers waiting for the client's
/// answers, before it gives up on their requests
/// ([`PeerError::Backlog`](crate::peer::PeerError::Backlog)): a call in
/// flight may end meanwhile, its slot start the held messages, and reading
/// go on to the answers.
pub(crate) const HELD_STALL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The timer of a driver stalled at its bound on held messages
/// ([`HELD_STALL_GRACE`]).
#[derive(Default)]
pub(crate) struct HeldStall {
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl HeldStall {
    /// Whether the driver, `stalled` now, has been so for the grace (the
    /// timer, armed with `cx`'s waker when the stall began, fired). A
    /// driver not stalled drops the timer: the next stall starts anew.
    pub(crate) fn is_over(&mut self, stalled: bool, cx: &mut std::task::Context<'_>) -> bool {
        if !stalled {
            self.timer = None;
            return false;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(HELD_STALL_GRACE)));
        if timer.as_mut().poll(cx).is_pending() {
            return false;
        }
        self.timer = None;
        true
    }
}

/// What a driver has reported of its connection's unmatched responses
/// ([`Connection::unmatched_responses`](crate::Connection::unmatched_responses))
/// to [`Metrics`].
#[derive(Default)]
pub(crate) struct UnmatchedSeen(u64);

impl UnmatchedSeen {
    /// Reports to `metrics` what `conn` counted since the last report.
    #[inline]
    pub(crate) fn report(&mut self, conn: &crate::Connection, metrics: Option<&Metrics>) {
        let now = conn.unmatched_responses();
        if now != self.0 {
            if let Some(m) = metrics {
                m.unmatched_responses(now.saturating_sub(self.0));
            }
            self.0 = now;
        }
    }

    /// The connection's state was made anew (its count starts at zero).
    pub(crate) fn restart(&mut self) {
        self.0 = 0;
    }
}

/// Limits a server enforces. Each is a defence against one kind of abuse;
/// every breach gets a clear error and is counted in [`Metrics`].
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once (default 10,000); further connections are
    /// refused (HTTP: closed at once; counted as `connections`). 0 is taken
    /// as 1 by every server.
    pub max_connections: usize,
    /// The largest message (HTTP body, WebSocket message, frame) accepted,
    /// in bytes (default 5 MiB, as the parser): larger ones are answered
    /// with -32600 (HTTP: 413), over HTTP and WebSocket before they are
    /// buffered. Stream transports ([`stream`]) refuse a message before it
    /// is buffered at their framer's limit (`max_frame`, default 5 MiB),
    /// and one past this limit but within the framer's once it is framed:
    /// give both the same value. 0 refuses every message (WebSocket takes
    /// it as 1 byte: no JSON-RPC message is that short). The dispatcher's
    /// parser has a limit of its own
    /// ([`Parser::max_message_len`](crate::Parser::max_message_len), also
    /// 5 MiB by default), which a message must pass too: for larger
    /// messages raise both (`DispatcherBuilder::parser`).
    pub max_message_len: usize,
    /// Messages of one connection being handled at once (pipelining;
    /// default 256; 0 is taken as 1 by every server). The dispatcher's
    /// own cap on a connection's async calls running at once
    /// ([`max_in_flight`](crate::dispatch::DispatcherBuilder::max_in_flight),
    /// default 64) applies within them: calls past it wait for a slot (and
    /// their timeout runs while they wait), so raising this one alone
    /// does not run more calls at once. Past it the server stops reading from that client
    /// until replies drain: backpressure, not errors (the stream and
    /// WebSocket transports read on, holding the requests, while handlers
    /// wait for that client's answers to their own requests; both read on
    /// up to 64 KiB in any case, to notice a client that leaves and drop
    /// its calls). On HTTP/2
    /// it is the connection's `SETTINGS_MAX_CONCURRENT_STREAMS` (at least
    /// 1: 0 would refuse every stream), which the
    /// `h2` crate enforces: a client that opens more streams before it
    /// has read the server's settings gets those refused
    /// (`REFUSED_STREAM`, which clients retry), and the refusals are not
    /// counted. The dispatcher's cap is the connection's on HTTP/2 too
    /// (served by `server::http::serve` or `Server`): a stream whose body
    /// is in waits while its connection's streams run that many async
    /// calls. Each HTTP/2 stream's body is read whole before it is
    /// dispatched, as an HTTP/1.1 request's is: what the bodies of one
    /// HTTP/2 connection's streams hold together is bounded by
    /// [`max_connection_body_bytes`](Self::max_connection_body_bytes), not
    /// by this times [`max_message_len`](Self::max_message_len), and is
    /// counted only as it arrives (an announced `Content-Length` reserves
    /// nothing ahead).
    pub max_in_flight: usize,
    /// The bytes of request bodies one HTTP/2 connection may hold at once,
    /// across its streams (default 32 MiB: six bodies of the default
    /// [`max_message_len`](Self::max_message_len); never less than one
    /// body of that limit, whatever is set). A body counts from its first
    /// byte until its calls end (their params are slices of it; async
    /// notifications still running after the reply included), or until
    /// its stream is refused or reset. A stream whose next chunk would
    /// take its connection past this is answered at once with
    /// `503` and a -32600 body naming the limit (counted as
    /// [`LimitKind::ConnectionBodyBytes`]); the connection's other streams
    /// go on. An HTTP/1.1 connection reads one body at a time, at most
    /// `max_message_len`, and is not concerned (async notifications left
    /// running after their `204` keep theirs, at most the dispatcher's
    /// `max_in_flight` of them: see [`http`]). Enforced for the bodies an
    /// `HttpService` reads (under tower layers or not, or in a `Combined`)
    /// when rpcwire's HTTP server (`server::http::serve`, `Server`) serves
    /// it with these limits, not by another server it is mounted in (axum).
    ///
    /// The replies of an HTTP/2 connection count against the same budget
    /// until they are written to its socket (a client that gives no
    /// window, or reads nothing, holds them): a reply that would take the
    /// connection past it, while others are held, is answered `503` with
    /// a "Response too large" body naming the limit (its call has run, as
    /// for a reply past the response limit). Served by `serve` or
    /// `Server`, with any service.
    pub max_connection_body_bytes: usize,
    /// Replies and notifications queued for one client that does not read
    /// (default 1024 messages). A full queue drops notifications for that
    /// client (counted) and stops reading its requests.
    pub max_queued: usize,
    /// A connection with no traffic for this long is closed (default 120 s;
    /// WebSocket pings count as traffic (HTTP/2 PINGs only while a request
    /// or a response body is under way), and so do a message's bytes still
    /// arriving (on a stream connection, from 4 KiB per idle period: a
    /// byte trickled now and then does not hold it) and a reply's still
    /// being read (after the socket pushed back), so a long upload or
    /// download is not idle (what the kernel's buffers still hold once all
    /// is written, which the server cannot tell from bytes nobody reads,
    /// must drain within it); a stream connection running calls or
    /// holding subscriptions is not idle, unless output (notifications,
    /// or what a buffering writer holds) waits for a client that does not
    /// read it). 0 closes a connection as soon as it is idle (HTTP: after
    /// 10 ms, the least its timer takes).
    pub idle_timeout: Duration,
    /// How long a graceful shutdown waits for calls in flight (default
    /// 10 s). On a stream connection the replies made by then have one
    /// more grace to be written, and the writer's close (a TLS
    /// close_notify) one more: at most three in all, for a client that
    /// reads nothing. On a WebSocket connection the close handshake has
    /// 2 s more after the grace.
    pub shutdown_grace: Duration,
    /// How long an HTTP request body may take to arrive once its head has
    /// (default 30 s): a client trickling its body is answered `408` and
    /// disconnected (HTTP/2: a GOAWAY, its other streams answered first
    /// within [`shutdown_grace`](Limits::shutdown_grace); counted as
    /// [`LimitKind::BodyTimeout`]). A body that comes with its head never
    /// starts the clock.
    pub body_timeout: Duration,
    /// TCP keepalive on accepted connections (default 15 s, as Go's
    /// servers, geth's among them, set): after this long without traffic
    /// the kernel probes the client, then again at this interval, and
    /// fails the connection when the system's probe count (Linux: 9) goes
    /// unanswered, so a client whose machine or network vanished without
    /// a FIN or a reset (its calls running, its subscriptions waiting) is
    /// found in about ten intervals. Probes run only while nothing sent is
    /// unacknowledged, so on Linux the same ten intervals also bound how
    /// long sent data (replies, notifications) may go unacknowledged
    /// (`TCP_USER_TIMEOUT`), which finds a client that vanished while
    /// data was on its way (else found when retransmission gives up, about
    /// 15 minutes). The kernel applies that bound to data held back by a
    /// closed receive window too: a client that keeps reading, but more
    /// slowly than its subscriptions produce, so that its window stays
    /// closed for that long, is disconnected (`ETIMEDOUT`) as a vanished
    /// one would be; give such clients a longer interval, or `None`, and
    /// let [`idle_timeout`](Limits::idle_timeout) judge them by the writes
    /// that go through. `None` leaves the system's settings (keepalive
    /// off, on Linux). Unix sockets and stdio have no such probe.
    pub tcp_keepalive: Option<Duration>,
}

/// The longest a server's clock is set for: "never" in practice (30
/// years, as tokio's own far future), so that a wait of `Duration::MAX`,
/// the usual way to say "never", cannot overflow the clock when added to
/// it.
pub(crate) const NEVER: Duration = Duration::from_secs(30 * 365 * 86_400);

impl Limits {
    /// These limits with every wait at most [`NEVER`]: the servers add them
    /// to the clock.
    pub(crate) fn clocked(self) -> Limits {
        Limits {
            idle_timeout: self.idle_timeout.min(NEVER),
            shutdown_grace: self.shutdown_grace.min(NEVER),
            body_timeout: self.body_timeout.min(NEVER),
            tcp_keepalive: self.tcp_keepalive.map(|t| t.min(NEVER)),
            ..self
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_message_len: crate::Parser::DEFAULT_MAX_MESSAGE_LEN,
            max_in_flight: 256,
            max_connection_body_bytes: 32 << 20,
            max_queued: 1024,
            idle_timeout: Duration::from_secs(120),
            shutdown_grace: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            tcp_keepalive: Some(DEFAULT_TCP_KEEPALIVE),
        }
    }
}

/// Which limit was hit, for [`Metrics::limit_hit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// [`Limits::max_connections`].
    Connections,
    /// [`Limits::max_message_len`].
    MessageLen,
    /// [`Limits::max_queued`]: a notification dropped for a slow client.
    Queue,
    /// [`Limits::idle_timeout`]: a connection closed.
    Idle,
    /// A subscription refused (the per-connection limit) or closed by its
    /// slow-subscriber policy (notifications dropped by it count as
    /// `Queue`).
    Subscription,
    /// The header section (LSP, HTTP, a WebSocket opening handshake) too
    /// large, or (HTTP, WebSocket) too slow to arrive.
    Header,
    /// [`Limits::body_timeout`]: an HTTP body that did not arrive in time.
    BodyTimeout,
    /// An HTTP/2 client cut off by the `h2` crate's abuse limits (a
    /// `GOAWAY` with `ENHANCE_YOUR_CALM`): streams opened and reset before
    /// they were served, hundreds at a time (rapid reset, CVE-2023-44487),
    /// streams it made the server reset, a flood of DATA frames carrying
    /// next to nothing, a header block grown far past
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` (a CONTINUATION flood: `h2` does
    /// not tell these apart).
    Flood,
    /// An HTTP request or WebSocket handshake refused for its `Host`: by
    /// the allowlist (`HttpService::allowed_hosts`,
    /// `WsServer::allowed_hosts`), its host not listed (`403`); or, by any
    /// of rpcwire's HTTP and WebSocket servers, allowlist or not, an
    /// HTTP/1.1 request without one valid `Host` (`400`).
    Host,
    /// [`Limits::max_connection_body_bytes`]: an HTTP/2 stream refused
    /// (`503`) because the bodies its connection holds would pass it.
    ConnectionBodyBytes,
    /// A stream or WebSocket client sent more than its connection holds
    /// while the handlers' requests to it awaited their answers (see
    /// [`PeerError::Backlog`](crate::peer::PeerError::Backlog)): those
    /// requests were given up on.
    Held,
}

impl LimitKind {
    fn name(self) -> &'static str {
        match self {
            LimitKind::Connections => "connections",
            LimitKind::MessageLen => "message_len",
            LimitKind::Queue => "queue",
            LimitKind::Idle => "idle",
            LimitKind::Subscription => "subscription",
            LimitKind::Header => "header",
            LimitKind::BodyTimeout => "body_timeout",
            LimitKind::Flood => "flood",
            LimitKind::Host => "host",
            LimitKind::ConnectionBodyBytes => "connection_body_bytes",
            LimitKind::Held => "held",
        }
    }
}

/// Counters for a metrics endpoint: calls per method (calls of methods the
/// dispatcher does not have under one label, [`UNKNOWN_METHOD`], and the
/// calls its [fallback](crate::dispatch::DispatcherBuilder::fallback)
/// answers under another, [`OTHER_METHOD`]: names a client chooses never
/// become labels), errors per code, limits hit, responses read that
/// answer no request (the stream and WebSocket servers'), connections (each transport counts its own: an
/// HTTP connection upgraded to WebSocket on a combined port counts once as
/// each). Install it as the dispatcher's
/// [`Observer`] (it counts calls) and hand it to
/// the servers (they count connections and limits).
///
/// Counting a call takes no lock: the first dispatchers it observes (up
/// to four; clones of one dispatcher are one) get a counter per method,
/// found by the [`Route`] of each call, and the error codes of the
/// JSON-RPC and LSP ranges (-32899 to -32000) and small codes (-128 to
/// 127, such as Ethereum's 3) have counters of their own, all atomics. Only
/// rare calls go through a lock: `rpc.discover`, methods of further
/// dispatchers, other error codes.
///
/// ```
/// use std::sync::Arc;
/// use rpcwire::server::Metrics;
/// let metrics = Arc::new(Metrics::default());
/// let d = rpcwire::Dispatcher::builder(())
///     .method("eth_chainId", |c: rpcwire::Call<'_, ()>| c.reply.str("0x1"))
///     .observer(metrics.clone())
///     .build()?;
/// d.handle(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#, &mut rpcwire::Connection::new(), &mut Vec::new());
/// assert!(metrics.render().contains(r#"rpcwire_calls_total{method="eth_chainId"} 1"#));
/// # Ok::<(), rpcwire::router::BuildError>(())
/// ```
pub struct Metrics {
    /// Per dispatcher observed (the first [`BOUND_TABLES`]), a counter per
    /// registered method: set at its first call, never changed after.
    bound: [OnceLock<Bound>; BOUND_TABLES],
    /// Calls of names no dispatcher has ([`UNKNOWN_METHOD`]).
    unknown: AtomicU64,
    /// Calls counted under [`OTHER_METHOD`]: the fallback's, and names
    /// past [`MAX_METHODS`] or [`MAX_METHOD_LABEL`].
    other: AtomicU64,
    /// Calls of the rare names no bound table holds (`rpc.discover`,
    /// further dispatchers' methods, records made by hand).
    calls: Mutex<HashMap<Box<str>, u64>>,
    /// Replies per error code of [`code_slot`]'s ranges.
    codes: Box<[AtomicU64]>,
    /// Replies per other error code, at most [`MAX_CODES`] of them.
    errors: Mutex<HashMap<i32, u64>>,
    /// Replies with codes past [`MAX_CODES`] (`code="other"`).
    other_codes: AtomicU64,
    limits: Mutex<HashMap<LimitKind, u64>>,
    connections_open: AtomicUsize,
    connections_total: AtomicU64,
    call_nanos: AtomicU64,
    unmatched_responses: AtomicU64,
}

/// One dispatcher's methods and their counters.
struct Bound {
    table: MethodTable,
    calls: Box<[AtomicU64]>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            bound: Default::default(),
            unknown: AtomicU64::new(0),
            other: AtomicU64::new(0),
            calls: Mutex::default(),
            codes: (0..CODE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            errors: Mutex::default(),
            other_codes: AtomicU64::new(0),
            limits: Mutex::default(),
            connections_open: AtomicUsize::new(0),
            connections_total: AtomicU64::new(0),
            call_nanos: AtomicU64::new(0),
            unmatched_responses: AtomicU64::new(0),
        }
    }
}

/// Dispatchers whose methods [`Metrics`] counts without a lock (a server
/// has one; a few for servers of different method sets sharing one
/// `Metrics`).
const BOUND_TABLES: usize = 4;

/// Codes with a counter of their own: the LSP and JSON-RPC ranges
/// (-32899..=-32000: every code rpcwire, geth and MCP answer with but 3),
/// and small codes (-128..=127: 3, a reverted call, and the like).
const PROTOCOL_CODES: usize = 900;
const CODE_SLOTS: usize = PROTOCOL_CODES + 256;

fn code_slot(code: i32) -> Option<usize> {
    match code {
        -32899..=-32000 => Some((code + 32899) as usize),
        -128..=127 => Some(PROTOCOL_CODES + (code + 128) as usize),
        _ => None,
    }
}

fn slot_code(slot: usize) -> i32 {
    if slot < PROTOCOL_CODES {
        slot as i32 - 32899
    } else {
        (slot - PROTOCOL_CODES) as i32 - 128
    }
}

/// Distinct error codes outside [`code_slot`]'s ranges counted apart; the
/// rest go under `code="other"` (a proxy relays whatever codes its
/// upstreams answer with).
const MAX_CODES: usize = 1000;

impl Metrics {
    /// Counts a limit hit.
    pub fn limit_hit(&self, kind: LimitKind) {
        self.limit_hits(kind, 1);
    }

    /// Counts `n` hits of one limit at once.
    pub(crate) fn limit_hits(&self, kind: LimitKind, n: u64) {
        *lock(&self.limits).entry(kind).or_default() += n;
    }

    /// How often `kind` was hit.
    pub fn limit_count(&self, kind: LimitKind) -> u64 {
        lock(&self.limits).get(&kind).copied().unwrap_or(0)
    }

    /// How many calls of `method` were answered.
    pub fn call_count(&self, method: &str) -> u64 {
        let mut n = lock(&self.calls).get(method).copied().unwrap_or(0);
        for b in self.bound.iter().filter_map(OnceLock::get) {
            if let Some(i) = b.table.iter().position(|m| m == method) {
                n += b.calls[i].load(Ordering::Relaxed);
            }
        }
        if method == UNKNOWN_METHOD {
            n += self.unknown.load(Ordering::Relaxed);
        }
        if method == OTHER_METHOD {
            n += self.other.load(Ordering::Relaxed);
        }
        n
    }

    /// How many replies carried error `code`.
    pub fn error_count(&self, code: i32) -> u64 {
        match code_slot(code) {
            Some(slot) => self.codes[slot].load(Ordering::Relaxed),
            None => lock(&self.errors).get(&code).copied().unwrap_or(0),
        }
    }

    /// Counts `n` responses a two-way transport read that answer no request
    /// of its side (an unknown id, one answered already or given up on):
    /// a client confused about ids, or replaying answers.
    pub fn unmatched_responses(&self, n: u64) {
        self.unmatched_responses.fetch_add(n, Ordering::Relaxed);
    }

    /// How many responses answered no request (as
    /// `rpcwire_unmatched_responses_total` in [`render`](Metrics::render)).
    pub fn unmatched_response_count(&self) -> u64 {
        self.unmatched_responses.load(Ordering::Relaxed)
    }

    /// A connection opened; the guard closes it when dropped.
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(Arc::clone(self))
    }

    /// Connections open now.
    pub fn connections_open(&self) -> usize {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// Connections opened since the start, closed ones included (as
    /// `rpcwire_connections_total` in [`render`](Metrics::render)).
    pub fn connections_total(&self) -> u64 {
        self.connections_total.load(Ordering::Relaxed)
    }

    /// The counters in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# TYPE rpcwire_calls_total counter\n");
        // By label: dispatchers sharing a method name share its line.
        let mut calls: BTreeMap<Box<str>, u64> = lock(&self.calls)
            .iter()
            .map(|(m, n)| (m.clone(), *n))
            .collect();
        let mut add = |method: &str, n: u64| {
            if n > 0 {
                *calls.entry(method.into()).or_default() += n;
            }
        };
        for b in self.bound.iter().filter_map(OnceLock::get) {
            for (method, n) in b.table.iter().zip(b.calls.iter()) {
                add(method, n.load(Ordering::Relaxed));
            }
        }
        add(UNKNOWN_METHOD, self.unknown.load(Ordering::Relaxed));
        add(OTHER_METHOD, self.other.load(Ordering::Relaxed));
        for (method, n) in calls {
            out.push_str("rpcwire_calls_total{method=\"");
            push_label_value(&mut out, &method);
            let _ = writeln!(out, "\"}} {n}");
        }
        out.push_str("# TYPE rpcwire_errors_total counter\n");
        let mut errors: Vec<_> = lock(&self.errors).iter().map(|(c, n)| (*c, *n)).collect();
        errors.extend(
            self.codes
                .iter()
                .enumerate()
                .map(|(slot, n)| (slot_code(slot), n.load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0),
        );
        errors.sort();
        for (code, n) in errors {
            let _ = writeln!(out, "rpcwire_errors_total{{code=\"{code}\"}} {n}");
        }
        let other_codes = self.other_codes.load(Ordering::Relaxed);
        if other_codes > 0 {
            let _ = writeln!(out, "rpcwire_errors_total{{code=\"other\"}} {other_codes}");
        }
        out.push_str("# TYPE rpcwire_limit_hits_total counter\n");
        let mut limits: Vec<_> = lock(&self.limits)
            .iter()
            .map(|(k, n)| (k.name(), *n))
            .collect();
        limits.sort();
        for (limit, n) in limits {
            let _ = writeln!(out, "rpcwire_limit_hits_total{{limit=\"{limit}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# TYPE rpcwire_connections_open gauge\nrpcwire_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# TYPE rpcwire_connections_total counter\nrpcwire_connections_total {}",
            self.connections_total.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# TYPE rpcwire_call_seconds_total counter\nrpcwire_call_seconds_total {:.6}",
            self.call_nanos.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "# TYPE rpcwire_unmatched_responses_total counter\nrpcwire_unmatched_responses_total {}",
            self.unmatched_responses.load(Ordering::Relaxed)
        );
        out
    }

    /// The counters of `table`'s methods: the table's own if it is bound
    /// already, else a free place's, bound to it now.
    #[inline]
    fn counters(&self, table: &MethodTable) -> Option<&[AtomicU64]> {
        self.bound.iter().find_map(|b| {
            let b = b.get_or_init(|| Bound {
                table: table.clone(),
                calls: (0..table.len()).map(|_| AtomicU64::new(0)).collect(),
            });
            MethodTable::ptr_eq(&b.table, table).then_some(&*b.calls)
        })
    }

    /// Counts a call of a name no bound table holds, under that name.
    #[cold]
    fn count_name(&self, method: &str) {
        let mut calls = lock(&self.calls);
        if let Some(n) = calls.get_mut(method) {
            *n += 1;
        } else if calls.len() < MAX_METHODS && method.len() <= MAX_METHOD_LABEL {
            calls.insert(method.into(), 1);
        } else {
            // A bound for any other observer's records too (a name can
            // be megabytes).
            self.other.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a reply with a code outside [`code_slot`]'s ranges.
    #[cold]
    fn count_code(&self, code: i32) {
        let mut errors = lock(&self.errors);
        if let Some(n) = errors.get_mut(&code) {
            *n += 1;
        } else if errors.len() < MAX_CODES {
            errors.insert(code, 1);
        } else {
            self.other_codes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Observer for Metrics {
    fn on_call(&self, call: &CallRecord<'_>) {
        if let Some(method) = call.method {
            match call.route {
                Route::Method { table, index } => {
                    match self.counters(table).and_then(|c| c.get(index)) {
                        Some(n) => {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                        None => self.count_name(method),
                    }
                }
                // Names a client chooses (the fallback answers any) are
                // counted under one label each kind: kept apart, they would
                // make labels at the client's will (a time series each for
                // Prometheus) and crowd the real methods out of the map.
                Route::Fallback => {
                    self.other.fetch_add(1, Ordering::Relaxed);
                }
                _ if !call.known => {
                    self.unknown.fetch_add(1, Ordering::Relaxed);
                }
                _ => self.count_name(method),
            }
        }
        if let Some(code) = call.code {
            match code_slot(code) {
                Some(slot) => {
                    self.codes[slot].fetch_add(1, Ordering::Relaxed);
                }
                None => self.count_code(code),
            }
        }
        self.call_nanos
            .fetch_add(call.elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("connections_open", &self.connections_open())
            .field("connections_total", &self.connections_total())
            .finish()
    }
}

/// Marks one open connection in [`Metrics`]; dropping it closes it.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<Metrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The label [`Metrics`] counts calls of methods the dispatcher does not
/// have under (answered -32601, or refused before they could run).
pub const UNKNOWN_METHOD: &str = "(unknown)";

/// The label [`Metrics`] counts calls answered by the dispatcher's
/// [fallback](crate::dispatch::DispatcherBuilder::fallback) under
/// (whatever name the client sent), and names past its caps on labels.
pub const OTHER_METHOD: &str = "(other)";

/// Distinct method names [`Metrics`] counts apart; the rest go under
/// [`OTHER_METHOD`].
const MAX_METHODS: usize = 10_000;
/// The longest method name [`Metrics`] keeps as a label; longer ones go
/// under [`OTHER_METHOD`].
const MAX_METHOD_LABEL: usize = 128;

/// `value` as a label value of the Prometheus text format: backslash,
/// double quote and line feed escaped, everything else as it is (a
/// client's method name may hold any of them; Rust's `Debug` escapes
/// others, `\t` or `\u{1b}`, that the format does not know).
fn push_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A connection's bounded outbound queue: what handlers send to the client
/// (notifications, requests) waits here for the connection's writer. When
/// it is full, [`send`](Outbound::send) answers [`SendError::Full`] at once
/// (the message is dropped and counted): a client that does not read costs
/// at most `capacity` messages, and never stalls the handlers.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    metrics: Option<Arc<Metrics>>,
    /// Messages the writer took from the outbox past its output's limit
    /// (the stream driver's, to keep them ahead of a reply): they count
    /// against the capacity until the output drains below its limit.
    spilled: Arc<std::sync::atomic::AtomicUsize>,
}

impl Outbox {
    /// An outbox of `capacity` messages, and the receiving end the
    /// connection's writer drains.
    pub fn new(
        capacity: usize,
        metrics: Option<Arc<Metrics>>,
    ) -> (Outbox, tokio::sync::mpsc::Receiver<Bytes>) {
        let (outbox, rx, _) = Outbox::spilling(capacity, metrics);
        (outbox, rx)
    }

    /// [`new`](Outbox::new), and the count of messages the writer took
    /// past its output's limit, which the outbox's capacity includes.
    pub(crate) fn spilling(
        capacity: usize,
        metrics: Option<Arc<Metrics>>,
    ) -> (
        Outbox,
        tokio::sync::mpsc::Receiver<Bytes>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        // tokio's channel refuses (panics on) more than its semaphore's
        // permits: `usize::MAX`, a natural "no limit", is that many.
        let capacity = capacity.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let (tx, rx) = tokio::sync::mpsc::channel(capacity);
        let spilled = Arc::default();
        let outbox = Outbox {
            tx,
            metrics,
            spilled: Arc::clone(&spilled),
        };
        (outbox, rx, spilled)
    }
}

impl Outbound for Outbox {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        let spilled = self.spilled.load(std::sync::atomic::Ordering::Relaxed);
        let sent = if spilled > 0 && spilled >= self.tx.capacity() {
            Err(tokio::sync::mpsc::error::TrySendError::Full(message))
        } else {
            self.tx.try_send(message)
        };
        match sent {
            Ok(()) => Ok(()),
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                if let Some(m) = &self.metrics {
                    m.limit_hit(LimitKind::Queue);
                }
                Err(SendError::Full)
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => Err(SendError::Closed),
        }
    }
}

/// Graceful shutdown: [`trigger`](Shutdown::trigger) it, and servers stop
/// accepting, let calls in flight finish (within
/// [`Limits::shutdown_grace`]), write their replies whole, and close.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: Arc<tokio::sync::watch::Sender<bool>>,
    /// The same, for [`is_triggered`](Shutdown::is_triggered) without a
    /// lock: the stream driver asks after every message it starts.
    triggered: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A shutdown signal not yet triggered.
    pub fn new() -> Self {
        let (tx, _) = tokio::sync::watch::channel(false);
        Shutdown {
            tx: Arc::new(tx),
            triggered: Arc::default(),
        }
    }

    /// Starts the shutdown. Kept even when no server waits for it yet (a
    /// signal before `serve` first runs): servers that start waiting later
    /// see it at once.
    pub fn trigger(&self) {
        // `send` drops the value when no receiver exists (none does
        // between waits: `triggered` subscribes only while it waits);
        // `send_replace` always stores it.
        self.triggered
            .store(true, std::sync::atomic::Ordering::Release);
        self.tx.send_replace(true);
    }

    /// Whether it was triggered.
    pub fn is_triggered(&self) -> bool {
        self.triggered.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Completes when the shutdown is triggered.
    pub async fn triggered(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|t| *t).await;
    }
}

/// Errors of the connection being accepted, not of the listener: the next
/// accept may well succeed at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    )
}

/// How long accepting pauses after an error of the listener (out of file
/// descriptors or memory), instead of spinning on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// [`Limits::tcp_keepalive`]'s default.
pub(crate) const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// Sets up an accepted TCP connection: no Nagle delay (replies are written
/// whole), and keepalive probes every `keepalive` (see
/// [`Limits::tcp_keepalive`]). Failures are ignored: a socket that refuses
/// an option is served without it.
pub(crate) fn accepted(stream: &tokio::net::TcpStream, keepalive: Option<Duration>) {
    let _ = stream.set_nodelay(true);
    let Some(every) = keepalive else {
        return;
    };
    let probes = socket2::TcpKeepalive::new().with_time(every);
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "windows"
    ))]
    let probes = probes.with_interval(every);
    let socket = socket2::SockRef::from(stream);
    let _ = socket.set_tcp_keepalive(&probes);
    // Keepalive probes only a connection with nothing unacknowledged: a
    // client that vanished while replies or notifications were on their
    // way would be found only when retransmission gives up (Linux: about
    // 15 minutes). The user timeout bounds how long sent data may go
    // unacknowledged, and (tcp(7)) also ends a connection whose keepalive
    // probes go unanswered for as long.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = socket.set_tcp_user_timeout(Some(every.saturating_mul(USER_TIMEOUT_PROBES)));
}

/// [`accepted`]'s user timeout, in keepalive intervals: about the time
/// Linux's nine unanswered probes take after the first idle interval.
#[cfg(any(target_os = "linux", target_os = "android"))]
const USER_TIMEOUT_PROBES: u32 = 10;

/// After an accept error: nothing for an error of one connection, else a
/// pause of [`ACCEPT_BACKOFF`].
pub(crate) async fn accept_backoff(e: &std::io::Error) {
    if !is_connection_error(e) {
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }
}

/// Whether a `Content-Encoding` value is `identity` (no coding): the one
/// request body coding rpcwire's HTTP servers (and MCP's) read.
#[cfg_attr(not(any(feature = "http", feature = "mcp")), allow(dead_code))]
pub(crate) fn is_identity(coding: &[u8]) -> bool {
    coding.trim_ascii().eq_ignore_ascii_case(b"identity")
}

/// Whether `have` is `lower` (ASCII, no uppercase letter) in any ASCII
/// case: `have.eq_ignore_ascii_case(lower)`, eight bytes a step (the HTTP
/// loops compare header names and values with it on every request, where
/// the byte-by-byte comparison cost about 200 instructions a request).
#[inline]
#[cfg_attr(not(feature = "http"), allow(dead_code))] // for the HTTP loops
pub(crate) fn eq_ignore_case(have: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.is_ascii() && !lower.iter().any(u8::is_ascii_uppercase));
    let n = have.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return have
            .iter()
            .zip(lower)
            .all(|(&h, &l)| (if l.is_ascii_lowercase() { h | 0x20 } else { h }) == l);
    }
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    // Each of `have`'s bytes with 0x20 set where `lower` has a letter (an
    // uppercase letter becomes its lowercase one, and no other byte does),
    // then compared whole. The letters' mask, per byte below 0x80 (no carry
    // between bytes): the top bit of `b + 0x80 - 'a'` is set when `b >= 'a'`,
    // that of `b + 0x80 - 'z' - 1` when `b > 'z'`.
    let same = |at: usize| {
        let l = word(lower, at);
        let from_a = l + ONES * (0x80 - b'a' as u64);
        let past_z = l + ONES * (0x80 - b'z' as u64 - 1);
        let letters = (from_a & !past_z & (ONES * 0x80)) >> 2;
        word(have, at) | letters == l
    };
    let mut at = 0;
    while at + 8 < n {
        if !same(at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes (overlapping the previous word).
    same(n - 8)
}

#[cfg(test)]
mod tests {
    #[test]
    fn eq_ignore_case_is_eq_ignore_ascii_case() {
        // Every byte value at every position of names and values the HTTP
        // loops compare (letters, digits, `-`, `/`, `@`, `[`, `` ` ``, `{`:
        // the bytes next to the letters), and every length around them.
        let targets: [&[u8]; 8] = [
            b"content-length",
            b"application/jsonrequest",
            b"host",
            b"close",
            b"a",
            b"0-9/@[`{~",
            b"upgrade",
            b"x-forwarded-for-and-then-some",
        ];
        for lower in targets {
            for at in 0..lower.len() {
                for b in 0..=255u8 {
                    let mut have = lower.to_vec();
                    have[at] = b;
                    assert_eq!(
                        super::eq_ignore_case(&have, lower),
                        have.eq_ignore_ascii_case(lower),
                        "{have:?} vs {lower:?}"
                    );
                }
            }
            let upper = lower.to_ascii_uppercase();
            assert!(super::eq_ignore_case(&upper, lower));
            for len in 0..lower.len() + 2 {
                let have: Vec<u8> = upper.iter().copied().cycle().take(len).collect();
                assert_eq!(
                    super::eq_ignore_case(&have, lower),
                    have.eq_ignore_ascii_case(lower)
                );
            }
        }
    }

    use super::*;

    /// An accepted connection's socket options, read back from the kernel.
    #[tokio::test]
    async fn accepted_connections_are_probed_and_bounded() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        accepted(&stream, Some(Duration::from_secs(7)));
        let socket = socket2::SockRef::from(&stream);
        assert!(socket.tcp_nodelay().unwrap());
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            assert_eq!(
                socket.tcp_keepalive_interval().unwrap(),
                Duration::from_secs(7)
            );
            assert_eq!(
                socket.tcp_user_timeout().unwrap(),
                Some(Duration::from_secs(70))
            );
        }

        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        accepted(&stream, None);
        let socket = socket2::SockRef::from(&stream);
        assert!(socket.tcp_nodelay().unwrap());
        assert!(!socket.keepalive().unwrap());
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(socket.tcp_user_timeout().unwrap(), None);
    }

    fn called(metrics: &Metrics, method: &str) {
        metrics.on_call(&CallRecord {
            method: Some(method),
            known: true,
            route: Route::Unrouted,
            id: None,
            code: None,
            elapsed: Duration::ZERO,
        });
    }

    /// Counting a call takes no lock in the common cases (the dispatcher's
    /// own methods, unknown names, the standard error codes): with the
    /// maps kept for rare names and codes held locked here, calls on
    /// another thread are still counted. Before, every call took those
    /// locks, which every worker thread of a server shares, and these
    /// calls waited for them.
    #[test]
    fn counting_calls_takes_no_lock() {
        let metrics = Arc::new(Metrics::default());
        let d = crate::Dispatcher::builder(())
            .method("eth_chainId", |c: crate::Call<'_, ()>| c.reply.str("0x1"))
            .method("bad", |_c: crate::Call<'_, ()>| {
                Err::<(), _>(crate::RpcError::invalid_params("no"))
            })
            .observer(metrics.clone())
            .build()
            .unwrap();
        let held = (lock(&metrics.calls), lock(&metrics.errors));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut conn, mut out) = (crate::Connection::new(), Vec::new());
            for m in [
                &br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#[..],
                br#"{"jsonrpc":"2.0","id":2,"method":"bad"}"#,
                br#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
                br#"{"jsonrpc":"2.0","id":4,"#,
                br#"{"jsonrpc":"2.0","id":5}"#,
            ] {
                d.handle(m, &mut conn, &mut out);
            }
            let _ = tx.send(());
        });
        // A guard against a hang only: the five calls take microseconds.
        let counted = rx.recv_timeout(Duration::from_secs(20));
        drop(held);
        assert!(counted.is_ok(), "counting waited for a lock");
        assert_eq!(metrics.call_count("eth_chainId"), 1);
        assert_eq!(metrics.call_count("bad"), 1);
        assert_eq!(metrics.call_count(UNKNOWN_METHOD), 1);
        for code in [-32602, -32601, -32700, -32600] {
            assert_eq!(metrics.error_count(code), 1, "{code}");
        }
    }

    /// A fallback answers any name a client sends: its calls are one
    /// `(other)` counter, as unknown names are one `(unknown)`. Before,
    /// each name was a label of its own: up to 10,000 of the client's
    /// choosing, each a time series for Prometheus to keep.
    #[test]
    fn fallback_calls_are_counted_as_other() {
        let metrics = Arc::new(Metrics::default());
        let d = crate::Dispatcher::builder(())
            .method("eth_chainId", |c: crate::Call<'_, ()>| c.reply.str("0x1"))
            .fallback(|c: crate::Call<'_, ()>| c.reply.str("forwarded"))
            .observer(metrics.clone())
            .build()
            .unwrap();
        let (mut conn, mut out) = (crate::Connection::new(), Vec::new());
        for m in ["m0", "m1", "m2", "eth_chainId", "rpc.nope"] {
            let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
            d.handle(call.as_bytes(), &mut conn, &mut out);
        }
        assert_eq!(metrics.call_count("m0"), 0);
        assert_eq!(metrics.call_count(OTHER_METHOD), 3);
        let text = metrics.render();
        let labels: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with("rpcwire_calls_total{"))
            .collect();
        assert_eq!(
            labels,
            [
                r#"rpcwire_calls_total{method="(other)"} 3"#,
                r#"rpcwire_calls_total{method="(unknown)"} 1"#,
                r#"rpcwire_calls_total{method="eth_chainId"} 1"#,
            ]
        );
    }

    /// Connections ever opened, for a gateway that reads its counters
    /// itself: closed ones stay counted.
    #[test]
    fn connections_total_counts_closed_connections_too() {
        let metrics = Arc::new(Metrics::default());
        let first = metrics.connection();
        drop(metrics.connection());
        assert_eq!(
            (metrics.connections_open(), metrics.connections_total()),
            (1, 2)
        );
        drop(first);
        assert_eq!(
            (metrics.connections_open(), metrics.connections_total()),
            (0, 2)
        );
    }

    /// Method names come from clients: any text must leave the exposition
    /// parseable (only `\`, `"` and line feeds are escaped there; `Debug`
    /// formatting once wrote `\t` and `\u{1b}`, which it does not know).
    #[test]
    fn method_labels_are_escaped_as_the_text_format_says() {
        let metrics = Metrics::default();
        called(&metrics, "a\"b\\c\nd\te\u{1b}f é");
        let text = metrics.render();
        let line = text
            .lines()
            .find(|l| l.starts_with("rpcwire_calls_total{"))
            .unwrap();
        assert_eq!(
            line,
            "rpcwire_calls_total{method=\"a\\\"b\\\\c\\nd\te\u{1b}f é\"} 1"
        );
    }

    /// A client cannot make the per-method counters hold megabytes: a long
    /// name is counted under `(other)`, as names past the count cap are.
    #[test]
    fn long_method_names_are_counted_as_other() {
        let metrics = Metrics::default();
        let long = "x".repeat(MAX_METHOD_LABEL + 1);
        called(&metrics, &long);
        called(&metrics, &"x".repeat(MAX_METHOD_LABEL));
        assert_eq!(metrics.call_count(&long), 0);
        assert_eq!(metrics.call_count("(other)"), 1);
        assert_eq!(metrics.call_count(&"x".repeat(MAX_METHOD_LABEL)), 1);
    }

    /// Unknown names are a client's text: 20,000 of them (past the cap on
    /// distinct labels) are one `(unknown)` counter, and the dispatcher's
    /// own methods, called after them, are still counted apart (before,
    /// each unknown name took a label, and once the cap was reached the
    /// real methods went under `(other)`).
    #[test]
    fn unknown_methods_do_not_crowd_out_the_real_ones() {
        let metrics = Arc::new(Metrics::default());
        let d = crate::Dispatcher::builder(())
            .method("eth_chainId", |c: crate::Call<'_, ()>| c.reply.str("0x1"))
            .observer(metrics.clone())
            .max_response_len(1000)
            .build()
            .unwrap();
        let mut conn = crate::Connection::new();
        let mut out = Vec::new();
        for i in 0..20_000 {
            let m = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"m{i}"}}"#);
            d.handle(m.as_bytes(), &mut conn, &mut out);
        }
        d.handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
            &mut conn,
            &mut out,
        );
        // Its -32601 reply (which echoes up to 256 bytes of the name as
        // written) is over a 300-byte limit: answered too large, and still
        // unknown.
        let d = crate::Dispatcher::builder(())
            .method("eth_chainId", |c: crate::Call<'_, ()>| c.reply.str("0x1"))
            .observer(metrics.clone())
            .max_response_len(300)
            .build()
            .unwrap();
        let long_name = "n".repeat(300);
        let refused = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{long_name}"}}"#);
        out.clear();
        d.handle(refused.as_bytes(), &mut conn, &mut out);
        assert!(
            out.windows(6).any(|w| w == b"-32000"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(metrics.call_count("eth_chainId"), 1);
        assert_eq!(metrics.call_count(UNKNOWN_METHOD), 20_001);
        assert_eq!(metrics.call_count("m7"), 0);
        assert_eq!(metrics.call_count("(other)"), 0);
        let labels = metrics.render();
        let labels = labels
            .lines()
            .filter(|l| l.starts_with("rpcwire_calls_total{"));
        assert_eq!(labels.count(), 2);
    }
}
