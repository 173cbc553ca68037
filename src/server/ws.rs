//! The WebSocket transport (feature `ws`): JSON-RPC over WebSocket, one
//! message per WebSocket message, with pipelining, server-pushed
//! notifications and [subscriptions](super::subscriptions).
//!
//! [`WsServer`] holds the dispatcher and what every connection is served
//! with ([`Limits`], [`Metrics`], [`Shutdown`], the [`SubscriptionConfig`]).
//! It serves
//!
//! * a [`TcpListener`]: [`WsServer::serve`] accepts, does the opening
//!   handshake and serves each connection in a task of its own;
//! * one connection whose handshake is still to be done:
//!   [`WsServer::accept`];
//! * one connection already upgraded elsewhere, for example by an HTTP
//!   server on the same port ([`serve_websocket`], or
//!   [`WsServer::serve_connection`]): any `AsyncRead + AsyncWrite` stream,
//!   such as hyper's `Upgraded` through `hyper_util::rt::TokioIo`. The HTTP
//!   side answers the upgrade request with [`upgrade_response`] (it checks
//!   the request and computes `Sec-WebSocket-Accept`, [`accept_key`]).
//!
//! # One connection
//!
//! One task drives each connection, with no locks and no channel between
//! reading and writing:
//!
//! * Text and binary messages both carry JSON-RPC messages (single or
//!   batch), handed to the dispatcher as they are read, without a copy.
//!   Replies are sent as text messages, one per reply, each as soon as it
//!   is complete (`Connection::start` / `poll_replies`): a client may
//!   pipeline many requests, and a fast call is not held behind a slow one.
//!   Writes are buffered and flushed when there is nothing more to read or
//!   send at once, so a burst of pipelined requests costs a few system
//!   calls, not two per request.
//! * A message that is not valid JSON is answered with -32700 and the
//!   connection stays open. A text message that is not UTF-8 is a
//!   WebSocket protocol error (RFC 6455 closes with 1007); in a binary
//!   message it is just invalid JSON (-32700).
//! * A message larger than [`Limits::max_message_len`] is refused from its
//!   frame header, before its payload is read (a message sent in
//!   fragments, from the header of the fragment that takes it past the
//!   limit, after the messages before it are read): the server answers with
//!   -32600, `id: null`, `data.limit` (as for an over-long HTTP body), then
//!   closes the connection with 1009 (Message Too Big). The connection
//!   cannot continue: the rest of the frame would have to be read to find
//!   the next one, which is what the limit refuses to do. Counted as
//!   [`LimitKind::MessageLen`].
//! * Such a close (1009), a protocol error's (1002, 1007) and the client's
//!   own close end the connection at once, as RFC 6455 fails a
//!   connection: the calls in flight and the messages held at the
//!   in-flight cap are dropped unanswered (the stream transports, which
//!   have no such rule, answer them first). During a graceful shutdown
//!   they end it as the shutdown (1001), unanswered.
//! * Backpressure, so that memory per connection is bounded: at
//!   [`Limits::max_in_flight`] messages waiting for replies no more are
//!   started, and the server reads on only a little: the messages read
//!   are held in order (up to 64 KiB of them) until calls finish, and past
//!   that it stops reading, as it does while the socket does not take what
//!   is written (a client that does not read). Reading that little is
//!   what notices a client that leaves at its cap (a close frame, the end
//!   of the stream, a reset) and drops its calls at once, instead of
//!   running them to their end for nobody, and what answers its pings;
//!   once reading has stopped, a ping each `idle_timeout / 2` finds a
//!   client whose socket is closed (it answers with a reset, which fails
//!   the next write). A client that only goes quiet keeps its calls. One
//!   exception keeps calls from waiting on themselves: while handlers
//!   wait for their client's answers
//!   ([`Context::peer`](crate::Context::peer)) at the in-flight limit,
//!   reading goes on further, at the limit and while the socket takes no
//!   writes (the client may be writing its answers before it reads ours);
//!   answers are delivered at once, and the other messages are held in
//!   order (up to about `max_message_len` bytes, 5 MiB at most) until
//!   calls finish and the socket takes writes. Buffers: the message being read
//!   (at most `max_message_len`; a message sent in fragments, up to twice
//!   that while tungstenite copies a fragment out of its read buffer), those held, an 8 KiB read buffer, the
//!   write buffer (32 KiB plus the message being written), the replies of
//!   the calls in flight, the [`Outbox`] ([`Limits::max_queued`] messages)
//!   and the subscriptions' buffers. A connection that waits for its client with
//!   nothing in hand gives back the buffers a large message made grow
//!   (past 64 KiB), so that idle connections do not each keep the size of
//!   the largest message they once read or wrote; until then, small
//!   messages are copied out of the grown buffer, so that the calls
//!   running on them do not keep it.
//! * Server-initiated messages: the connection's [`Context`](crate::Context)
//!   is two-way. Its [`Peer`](crate::peer::Peer) writes to a bounded
//!   [`Outbox`] ([`Limits::max_queued`] messages; a full outbox refuses
//!   the message and counts [`LimitKind::Queue`]), and it carries the
//!   connection's [`Subscriptions`]. Their messages are written between
//!   replies, whole.
//! * Liveness: after `idle_timeout / 2` without a frame from the client
//!   the server sends a ping; a client silent for a whole
//!   [`Limits::idle_timeout`] (so at most 1.5 times it) is closed with
//!   1001 and counted as [`LimitKind::Idle`]. A client that stops reading
//!   is not read either, so it goes silent and is closed the same way.
//! * Graceful shutdown ([`Shutdown`]): the server stops accepting and
//!   reading (but for answers to requests its calls sent the client and
//!   wait for; other messages read then are dropped, but a cancellation
//!   still reaches the call it names; messages read before it and held
//!   at [`Limits::max_in_flight`] are not run and get no answer either, as
//!   on the stream transports: a client resends what was not answered),
//!   lets the calls in flight finish
//!   and writes their replies and what they sent before they ended
//!   (within [`Limits::shutdown_grace`]; the idle timeout does not apply
//!   then), sends a close frame (1001), and
//!   waits a moment for the client's. Only whole messages are written; a
//!   client that does not read may be cut off. The server's own messages
//!   (notifications, subscriptions' events) go on while calls run; the
//!   subscriptions end with the connection (their producers see it).
//!
//! # Why tokio-tungstenite
//!
//! `benches/ws_echo.rs` compares tokio-tungstenite 0.30 and fastwebsockets
//! 0.10 as echo servers (each in a child process, the same client, three
//! alternated rounds, on a shared 2-core machine). Server CPU time per
//! message:
//!
//! | case | tokio-tungstenite | fastwebsockets | fastwebsockets, writes batched |
//! | --- | --- | --- | --- |
//! | 100,000 × 52 B, pipelined | 0.21-0.28 µs | 1.47-1.97 µs | 0.21-0.24 µs |
//! | 1,000,000 × 52 B | 0.21-0.27 µs | 1.44-1.67 µs | 0.21 µs |
//! | 1,000 × 1 MiB | 697-722 µs | 470-616 µs | 538-725 µs |
//!
//! Used as documented, fastwebsockets makes one write system call per
//! frame, 7 times the CPU of tungstenite on small messages; given the same
//! write batching the two are level on small messages, and fastwebsockets
//! is up to a quarter cheaper on 1 MiB ones (tungstenite copies a payload
//! into its write buffer). JSON-RPC traffic is mostly small messages, and
//! tokio-tungstenite's `Stream` + `Sink` is poll-based and cancel-safe, so
//! one task can interleave reading, replies as they complete, server
//! notifications, pings and timers, and flush only when it runs out of
//! work; fastwebsockets' `read_frame` future is not cancel-safe (it
//! consumes the frame header before awaiting the payload), so the same
//! driver would need a reader task and a channel. tungstenite also does the
//! HTTP handshake itself.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes, http};

use super::cors::Cors;
use super::hosts::{AllowedHosts, Refusal};
use super::subscriptions::{SubscriptionConfig, Subscriptions};
use super::{LimitKind, Limits, Metrics, Outbox, Shutdown};
use crate::conn::AtLimit;
use crate::dispatch::engine::ReplyGate;
use crate::dispatch::held::HeldMessages;
use crate::dispatch::{ReplyBuf, SyncOnly};
use crate::{Connection, ContextBuilder, Dispatcher};

/// The read buffer of a connection: the most one read system call takes.
/// tungstenite zero-fills this much before every read (a read that would
/// block included), so it is kept small: 8 KiB holds a hundred typical
/// requests, and costs a quarter of what 32 KiB did per read; a 1 MiB
/// message takes 128 reads.
const READ_BUFFER: usize = 8 << 10;
/// Written data is buffered up to this much before a write system call (a
/// flush writes it sooner when there is nothing else to do).
const WRITE_BUFFER: usize = 32 << 10;
/// How long closing waits for the close frame to be written and the
/// client's to come back.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Notifications taken from the subscriptions per turn, so that they do
/// not starve replies or reading.
const PUMP_BATCH: usize = 64;
/// Turns of the driver per poll before it yields to other tasks.
const TURNS_PER_POLL: usize = 256;
/// A connection that waits for its client with nothing in hand gives back
/// buffers that messages past this size made grow (they grow by doubling,
/// so what it keeps is at most about twice this per buffer): 10,000 idle
/// connections must not each hold the size of the largest message they
/// ever read or wrote.
const KEEP_IDLE: usize = 64 << 10;
/// Messages held while reading on for answers at the in-flight limit, in
/// bytes (at most [`Limits::max_message_len`], and never unbounded).
const MAX_HELD: usize = crate::Parser::DEFAULT_MAX_MESSAGE_LEN;
/// Messages held at the in-flight limit when no handler waits for an
/// answer, in bytes (at most [`Limits::max_message_len`]): the client is
/// read then only to see it leave (a close frame, the end of the stream, a
/// reset) and to answer its pings, so a little is enough; every connection
/// at its cap may hold this much.
const WATCH_HELD: usize = 64 << 10;
/// What a ping read while the socket takes no writes counts at least
/// against [`WATCH_HELD`] (`Driver::pongs_buffered`).
const PONG_FLOOR: usize = 64;

/// A JSON-RPC server over WebSocket; see the [module docs](self).
///
/// ```no_run
/// use rpcwire::server::ws::WsServer;
/// use rpcwire::{Call, Dispatcher};
/// # async fn run() -> std::io::Result<()> {
/// let d = Dispatcher::builder(0x1b4u64)
///     .method("eth_blockNumber", |c: Call<'_, u64>| c.reply.u64(*c.state))
///     .build()
///     .unwrap();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8546").await?;
/// WsServer::new(d).serve(listener).await
/// # }
/// ```
pub struct WsServer<S = (), K = SyncOnly> {
    dispatcher: Dispatcher<S, K>,
    limits: Limits,
    /// One place per open connection, [`Limits::max_connections`] in all,
    /// shared by every way in (a listener of its own, upgrades on an HTTP
    /// port) and by clones.
    places: Places,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
    subscriptions: SubscriptionConfig,
    handshake_timeout: Duration,
    /// The pages allowed to open connections; `None`: any.
    origins: Option<Arc<Cors>>,
    /// The host names handshakes may name; `None`: any.
    hosts: Option<Arc<AllowedHosts>>,
}

impl<S, K> Clone for WsServer<S, K> {
    fn clone(&self) -> Self {
        WsServer {
            dispatcher: self.dispatcher.clone(),
            limits: self.limits.clone(),
            places: self.places.clone(),
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.clone(),
            subscriptions: self.subscriptions.clone(),
            handshake_timeout: self.handshake_timeout,
            origins: self.origins.clone(),
            hosts: self.hosts.clone(),
        }
    }
}

impl<S, K> std::fmt::Debug for WsServer<S, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsServer")
            .field("limits", &self.limits)
            .field("subscriptions", &self.subscriptions)
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static, K: 'static> WsServer<S, K> {
    /// A server for `dispatcher`, with the default limits, no metrics, its
    /// own shutdown signal and the default subscription settings.
    pub fn new(dispatcher: Dispatcher<S, K>) -> Self {
        let limits = Limits::default();
        WsServer {
            dispatcher,
            places: Places::new(&limits),
            limits,
            metrics: None,
            shutdown: Shutdown::new(),
            subscriptions: SubscriptionConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            origins: None,
            hosts: None,
        }
    }

    /// The limits every connection is served with.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.places = Places::new(&limits);
        self.limits = limits.clocked();
        self
    }

    /// Where connections and limit hits are counted (install the same
    /// `Metrics` as the dispatcher's observer to count calls).
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The shutdown signal (share one between servers to stop them
    /// together).
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// How each connection's subscriptions behave.
    pub fn subscriptions(mut self, config: SubscriptionConfig) -> Self {
        self.subscriptions = config;
        self
    }

    /// How long a new TCP connection may take to complete the opening
    /// handshake (default 10 s), so that connections that never send one
    /// do not hold a place (counted as [`LimitKind::Header`], as the HTTP
    /// server counts a request head that does not arrive in time).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout.min(super::NEVER);
        self
    }

    /// Only pages of the origins `cors` allows may open connections from a
    /// browser: an opening handshake whose `Origin` it does not allow is
    /// refused with `403` (browsers do not preflight WebSocket upgrades, so
    /// without this any page the user visits can connect, as geth's
    /// `--ws.origins` guards against). Handshakes without `Origin` (from
    /// programs, not pages) are accepted. Default: every origin.
    ///
    /// ```
    /// # use rpcwire::{Call, Dispatcher, server::{cors::Cors, ws::WsServer}};
    /// # let d = Dispatcher::builder(()).method("ping", |c: Call<'_, ()>| c.reply.str("pong")).build()?;
    /// let server = WsServer::new(d).origins(Cors::origins(["https://app.example.org"])?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn origins(mut self, cors: Cors) -> Self {
        self.origins = Some(Arc::new(cors));
        self
    }

    /// Only opening handshakes naming one of `hosts` (in `Host`, any
    /// port, any case) or an IP address are served: a page that made its
    /// own domain resolve to this server's address (DNS rebinding) names
    /// that domain, and gets `403` with a -32600 body naming it; a
    /// handshake without one `Host` gets `400` (without a list too: RFC
    /// 9112 §3.2). Both are counted as [`LimitKind::Host`]. See
    /// [`hosts`](super::hosts) for when to turn it on (a server on a
    /// loopback or private address that browsers can reach); unlike
    /// [`origins`](WsServer::origins) it also guards against pages whose
    /// origin is allowed but whose name is not this server's.
    /// Default: any host. On a combined port (`server::combined`) the
    /// HTTP service's list applies to upgrades.
    ///
    /// ```
    /// # use rpcwire::{Call, Dispatcher, server::{hosts::AllowedHosts, ws::WsServer}};
    /// # let d = Dispatcher::builder(()).method("ping", |c: Call<'_, ()>| c.reply.str("pong")).build()?;
    /// let server = WsServer::new(d).allowed_hosts(AllowedHosts::list(["localhost"])?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.hosts = (!hosts.is_any()).then(|| Arc::new(hosts));
        self
    }

    /// The `Origin` of an opening handshake with these headers when
    /// [`origins`](WsServer::origins) refuses it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(super) fn refuses<'h>(
        &self,
        headers: &'h http::HeaderMap,
    ) -> Option<&'h http::HeaderValue> {
        self.origins.as_ref()?.refuses(headers)
    }

    /// The most connections served at once ([`Limits::max_connections`],
    /// at least 1).
    #[cfg(feature = "http")]
    pub(super) fn connection_limit(&self) -> usize {
        self.places.max as usize
    }

    /// The shutdown signal: [`trigger`](Shutdown::trigger) it to stop.
    pub fn shutdown_signal(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Accepts connections on `listener` until the shutdown is triggered,
    /// each served in a task of its own; then closes the listener and waits
    /// for the connections to close (at most [`Limits::shutdown_grace`] and
    /// a moment to close).
    ///
    /// Past [`Limits::max_connections`] open connections (counting those
    /// upgraded on an HTTP port, `server::combined`), new ones are closed
    /// at once (counted as [`LimitKind::Connections`]).
    pub async fn serve(&self, listener: TcpListener) -> io::Result<()> {
        let mut stop = std::pin::pin!(self.shutdown.triggered());
        loop {
            let accepted = tokio::select! {
                biased;
                _ = &mut stop => break,
                accepted = listener.accept() => accepted,
            };
            let (tcp, addr) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    super::accept_backoff(&e).await;
                    continue;
                }
            };
            let Some(place) = self.place() else {
                drop(tcp);
                continue;
            };
            let server = self.clone();
            tokio::spawn(async move {
                let _place = place;
                let _ = server.accept_tcp(tcp, addr).await;
            });
        }
        // Closed now, not when the drain ends: a client connecting during
        // the grace is refused, not queued unserved in the backlog.
        drop(listener);
        self.closed().await;
        Ok(())
    }

    /// A place for one more connection, held while it is open; `None` past
    /// [`Limits::max_connections`] (counted as [`LimitKind::Connections`]).
    pub(super) fn place(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let place = Arc::clone(&self.places.open).try_acquire_owned().ok();
        if place.is_none() {
            self.count(LimitKind::Connections);
        }
        place
    }

    /// Waits until every connection [`serve`](WsServer::serve) and
    /// `combined::serve` accepted has closed (after a shutdown: at most
    /// [`Limits::shutdown_grace`] and a moment for the closing handshakes);
    /// both end with it. Connections handed to
    /// [`accept`](WsServer::accept) or
    /// [`serve_connection`](WsServer::serve_connection) by the caller's own
    /// loop are not waited for: their futures end when they close.
    pub async fn closed(&self) {
        let wait = self.limits.shutdown_grace + CLOSE_TIMEOUT * 2;
        let all = self.places.open.acquire_many(self.places.max);
        let _ = tokio::time::timeout(wait, all).await;
    }

    async fn accept_tcp(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
    ) -> Result<CloseReason, HandshakeError> {
        super::accepted(&tcp, self.limits.tcp_keepalive);
        self.accept(tcp, crate::Context::builder().peer_addr(addr))
            .await
    }

    /// Does the opening handshake on `io` (a connection that has sent
    /// nothing yet; at most [`handshake_timeout`](WsServer::handshake_timeout)),
    /// then serves it. The handlers' context is built from `ctx`, with the
    /// request's headers ([`rpcwire::http::HeaderMap`](crate::http::HeaderMap))
    /// as an extension.
    ///
    /// A request that is not a valid upgrade is answered as an HTTP server
    /// answers it (RFC 6455 §4.2.2): `426` with the version this server
    /// speaks for another `Sec-WebSocket-Version`, `400` with a -32600 body
    /// saying why otherwise, `431` for a head past 64 KiB or 100 fields (counted as
    /// [`LimitKind::Header`], as is a handshake past the
    /// [`handshake_timeout`](WsServer::handshake_timeout)).
    ///
    /// The connection holds no place among [`Limits::max_connections`]:
    /// a caller with its own accept loop decides how many it serves (the
    /// other limits and the shutdown signal apply).
    pub async fn accept<T>(
        &self,
        mut io: T,
        ctx: ContextBuilder,
    ) -> Result<CloseReason, HandshakeError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let opening = tokio::time::timeout(
            self.handshake_timeout,
            open(&mut io, self.origins.as_deref(), self.hosts.as_deref()),
        )
        .await;
        let (headers, early) = match opening {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                match e.0 {
                    Kind::HeadTooLarge => self.count(LimitKind::Header),
                    Kind::Host(_) => self.count(LimitKind::Host),
                    _ => {}
                }
                return Err(e);
            }
            Err(_) => {
                self.count(LimitKind::Header);
                return Err(HandshakeError(Kind::Timeout));
            }
        };
        // Frames the client sent right behind its request are the stream's.
        let mut early = early;
        let io = Watched::new(io, &mut early, self.limits.max_message_len);
        let ws =
            WebSocketStream::from_partially_read(io, early, Role::Server, Some(self.ws_config()))
                .await;
        Ok(self.drive(ws, ctx.extension(headers)).await)
    }

    /// Serves one connection whose handshake is done (the HTTP server
    /// answered the upgrade; see [`upgrade_response`]). Returns when the
    /// connection is closed, and why. As with [`accept`](WsServer::accept),
    /// the connection holds no place among [`Limits::max_connections`].
    pub async fn serve_connection<T>(&self, io: T, ctx: ContextBuilder) -> CloseReason
    where
        T: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let io = Watched::new(io, &mut Vec::new(), self.limits.max_message_len);
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(self.ws_config())).await;
        self.drive(ws, ctx).await
    }

    fn ws_config(&self) -> WebSocketConfig {
        let max = self.limits.max_message_len.max(1);
        WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .write_buffer_size(WRITE_BUFFER)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
    }

    fn count(&self, kind: LimitKind) {
        if let Some(m) = &self.metrics {
            m.limit_hit(kind);
        }
    }

    async fn drive<T>(&self, ws: WebSocketStream<Watched<T>>, ctx: ContextBuilder) -> CloseReason
    where
        T: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let _open = self.metrics.as_ref().map(|m| m.connection());
        let (outbox, outbox_rx) = Outbox::new(self.limits.max_queued, self.metrics.clone());
        let gate = Arc::new(ReplyGate::default());
        let subs = Subscriptions::with_gate(
            self.subscriptions.clone(),
            self.metrics.clone(),
            Some(Arc::clone(&gate)),
        );
        let ctx = ctx
            .transport("ws")
            .outbound(Arc::new(outbox))
            .extension(subs.clone())
            .build();
        // However the connection ends, this future dropped before it
        // finishes included (a `select!` or a timeout of the caller's).
        let _ends = super::stream::Ends {
            subs: subs.clone(),
            context: ctx.clone(),
        };
        let mut conn = self.dispatcher.connection(ctx);
        conn.set_reply_gate(gate);
        let tick = (self.limits.idle_timeout / 2).max(Duration::from_millis(1));
        let shutdown = self.shutdown.clone();
        let mut driver = Driver {
            server: self,
            ws,
            conn,
            replies: Frames::default(),
            outbox: outbox_rx,
            subs,
            write_ready: true,
            unflushed: false,
            read_blocked: false,
            heard: false,
            silent: 0,
            tick,
            ticker: Box::pin(tokio::time::sleep(tick)),
            peer_deadlines: super::PeerDeadlines::default(),
            held_stall: super::HeldStall::default(),
            shutdown: Box::pin(async move { shutdown.triggered().await }),
            drain: None,
            pong: None,
            pongs_buffered: 0,
            invalid_utf8: false,
            unread_frame: false,
            client_closed: false,
            held: HeldMessages::default(),
            unmatched: super::UnmatchedSeen::default(),
        };
        let reason = std::future::poll_fn(|cx| {
            let polled = driver.poll_open(cx);
            let metrics = driver.server.metrics.as_deref();
            driver.unmatched.report(&driver.conn, metrics);
            polled
        })
        .await;
        driver.close(reason).await;
        reason
    }
}

/// Serves one connection whose WebSocket handshake is done (for example
/// upgraded by an HTTP server on the same port, hyper's `Upgraded` through
/// `hyper_util::rt::TokioIo`) with `server`'s dispatcher and settings;
/// handlers see a context built from `ctx`. The same as
/// [`WsServer::serve_connection`].
pub async fn serve_websocket<S, K, T>(
    io: T,
    server: &WsServer<S, K>,
    ctx: ContextBuilder,
) -> CloseReason
where
    S: Send + Sync + 'static,
    K: 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send,
{
    server.serve_connection(io, ctx).await
}

/// The places of a server's open connections.
#[derive(Clone, Debug)]
struct Places {
    open: Arc<tokio::sync::Semaphore>,
    max: u32,
}

impl Places {
    fn new(limits: &Limits) -> Places {
        let max = limits.max_connections.clamp(
            1,
            tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize),
        );
        Places {
            open: Arc::new(tokio::sync::Semaphore::new(max)),
            max: max as u32,
        }
    }
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The client closed it (a close frame, or the TCP connection ended).
    Client,
    /// The client was silent for [`Limits::idle_timeout`] (pings
    /// unanswered, or it stopped reading).
    Idle,
    /// A graceful shutdown.
    Shutdown,
    /// A message larger than [`Limits::max_message_len`].
    MessageTooLarge,
    /// The client broke the WebSocket protocol (a bad frame, a text message
    /// that is not UTF-8).
    Protocol,
    /// An I/O error.
    Io,
}

/// The largest opening handshake request head read.
const MAX_HANDSHAKE_HEAD: usize = 64 << 10;
const HEAD_TOO_LARGE: &str = "the request head is too large";

/// Reads the opening handshake's request from `io` and answers it: `101`
/// and the request's headers with the bytes read past its head, or the
/// HTTP error a bad request gets (see [`WsServer::accept`]).
async fn open<T>(
    io: &mut T,
    origins: Option<&Cors>,
    hosts: Option<&AllowedHosts>,
) -> Result<(http::HeaderMap, Vec<u8>), HandshakeError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::with_capacity(1024);
    // Parsing starts from the head's first byte each time, so it is done
    // only when it can tell more than last time: once the head's end (a
    // blank line) has come, which is looked for in the new bytes only; when
    // the bytes have doubled since the last parse (so that bytes that are
    // not HTTP are refused early, at linear cost: a head in 1-byte reads
    // once cost its length squared); and at the size limit.
    let mut searched: usize = 0;
    let mut parsed = 0;
    let (request, len) = loop {
        let read = io.read_buf(&mut buf).await.map_err(Kind::Io)?;
        if read == 0 {
            return Err(HandshakeError(Kind::Closed));
        }
        // A blank line of three bytes at most may start before the new
        // ones.
        let ended = ends_head(&buf[searched.saturating_sub(3)..]);
        searched = buf.len();
        if !ended && buf.len() < parsed * 2 && buf.len() < MAX_HANDSHAKE_HEAD {
            continue;
        }
        parsed = buf.len();
        match read_request(&buf) {
            Ok(Some(request)) => break request,
            Ok(None) if buf.len() < MAX_HANDSHAKE_HEAD => {}
            Ok(None) | Err(Unread::TooManyFields) => {
                let _ = io.write_all(&refusal(431, HEAD_TOO_LARGE, None)).await;
                return Err(HandshakeError(Kind::HeadTooLarge));
            }
            Err(Unread::Invalid(reason)) => {
                let _ = io.write_all(&refusal(400, reason, None)).await;
                return Err(HandshakeError(Kind::Invalid(reason)));
            }
        }
    };
    // A handshake without one `Host` is refused with a list or without
    // (`hosts::lacks_one_host`): this is its HTTP server.
    let any = AllowedHosts::any();
    if let Some(refused) = hosts.unwrap_or(&any).refuses(&request) {
        let (status, body, why) = match refused {
            Refusal::NotListed(host) => (403, super::hosts::forbidden_body(host), HOST_REFUSED),
            // RFC 6455 §4.1: a handshake sends one `Host`.
            Refusal::NoOneHost => (400, super::hosts::NO_HOST_BODY.to_owned(), NO_ONE_HOST),
        };
        let _ = io.write_all(&http_error(status, &body, None)).await;
        return Err(HandshakeError(Kind::Host(why)));
    }
    if let Some(origin) = origins.and_then(|o| o.refuses(request.headers())) {
        let body = super::cors::forbidden_body(origin);
        let _ = io.write_all(&http_error(403, &body, None)).await;
        return Err(HandshakeError(Kind::Invalid(ORIGIN_REFUSED)));
    }
    let response = match upgrade_response(&request) {
        Ok(response) => response,
        Err(e) => {
            let refused = if asks_another_version(request.headers()) {
                // RFC 9110 15.5.22: a 426 names the protocol to upgrade to.
                refusal(
                    426,
                    &e.to_string(),
                    Some("sec-websocket-version: 13\r\nupgrade: websocket\r\n"),
                )
            } else {
                refusal(400, &e.to_string(), None)
            };
            let _ = io.write_all(&refused).await;
            return Err(e);
        }
    };
    let mut head = b"HTTP/1.1 101 Switching Protocols\r\n".to_vec();
    for (name, value) in response.headers() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    io.write_all(&head).await.map_err(Kind::Io)?;
    io.flush().await.map_err(Kind::Io)?;
    buf.drain(..len);
    Ok((request.into_parts().0.headers, buf))
}

/// Whether `bytes` hold a line end followed by an empty line (`\n\n` or
/// `\n\r\n`: the parser takes bare `\n` line ends too), with which a
/// request head ends.
fn ends_head(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', bytes)
        .any(|at| matches!(bytes[at + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// Header fields a handshake may have: as many as hyper allows (the
/// combined port's handshakes are read by hyper), past which the head is
/// refused as too large (`431`).
const MAX_HANDSHAKE_FIELDS: usize = 100;

/// Why a handshake's head was refused.
#[derive(Debug, PartialEq)]
enum Unread {
    /// More than [`MAX_HANDSHAKE_FIELDS`] header fields.
    TooManyFields,
    /// Not HTTP.
    Invalid(&'static str),
}

/// The request whose head is at the front of `buf` and the head's length;
/// `None` while it is incomplete.
fn read_request(buf: &[u8]) -> Result<Option<(http::Request<()>, usize)>, Unread> {
    #[cfg(test)]
    tests::HEAD_PARSED.with(|parsed| parsed.set(parsed.get() + buf.len()));
    let mut fields = [httparse::EMPTY_HEADER; MAX_HANDSHAKE_FIELDS];
    let mut parsed = httparse::Request::new(&mut fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Unread::TooManyFields),
        Err(_) => return Err(Unread::Invalid("not an HTTP request")),
    };
    let mut request = http::Request::builder()
        .method(parsed.method.unwrap_or_default())
        .uri(parsed.path.unwrap_or("/"))
        .version(if parsed.version == Some(0) {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        });
    for field in parsed.headers.iter() {
        request = request.header(field.name, field.value);
    }
    match request.body(()) {
        Ok(request) => Ok(Some((request, len))),
        Err(_) => Err(Unread::Invalid("not an HTTP request")),
    }
}

/// An HTTP error response (closing the connection) with a -32600 body
/// saying why.
fn refusal(status: u16, reason: &str, extra: Option<&str>) -> Vec<u8> {
    http_error(status, &bad_upgrade_body(reason), extra)
}

/// Why a handshake from a page of an origin not allowed failed.
const ORIGIN_REFUSED: &str = "origin not allowed";
/// Why a handshake naming a host not allowed failed.
const HOST_REFUSED: &str = "host not allowed";
/// Why a handshake without one `Host` failed (with an allowlist or
/// without).
const NO_ONE_HOST: &str = "an opening handshake needs exactly one Host header, with a valid host";

/// An HTTP error response with a JSON `body`, closing the connection.
fn http_error(status: u16, body: &str, extra: Option<&str>) -> Vec<u8> {
    let reason_phrase = match status {
        403 => "Forbidden",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    format!(
        "HTTP/1.1 {status} {reason_phrase}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}connection: {}close\r\n\r\n{body}",
        body.len(),
        extra.unwrap_or(""),
        // A sender of `Upgrade` also lists it in `Connection` (RFC 9110
        // 7.8).
        if status == 426 { "upgrade, " } else { "" }
    )
    .into_bytes()
}

/// Whether an upgrade request asks for another WebSocket version than 13:
/// it gets 426 and the version this server speaks (RFC 6455 §4.2.2).
pub(super) fn asks_another_version(headers: &http::HeaderMap) -> bool {
    headers
        .get("sec-websocket-version")
        .is_some_and(|v| v.as_bytes() != b"13")
}

/// The body of the answer to an upgrade request that is not valid: -32600,
/// `data.reason` saying why.
pub(super) fn bad_upgrade_body(reason: &str) -> String {
    let reason = serde_json::to_string(reason).unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"Invalid Request","data":{{"reason":{reason}}}}}}}"#
    )
}

/// Why an opening handshake failed.
#[derive(Debug)]
pub struct HandshakeError(Kind);

#[derive(Debug)]
enum Kind {
    Timeout,
    /// The connection closed before its request was whole.
    Closed,
    Io(io::Error),
    /// Not an HTTP request.
    Invalid(&'static str),
    /// A request head past [`MAX_HANDSHAKE_HEAD`] or
    /// [`MAX_HANDSHAKE_FIELDS`].
    HeadTooLarge,
    /// Refused for its `Host`: by the allowlist, or none or two.
    Host(&'static str),
    Rejected(tungstenite::Error),
}

impl From<Kind> for HandshakeError {
    fn from(kind: Kind) -> Self {
        HandshakeError(kind)
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::Timeout => f.write_str("no WebSocket handshake before the deadline"),
            Kind::Closed => f.write_str("the connection closed during the WebSocket handshake"),
            Kind::Io(e) => write!(f, "the WebSocket handshake failed: {e}"),
            Kind::Invalid(reason) => write!(f, "not a WebSocket handshake: {reason}"),
            Kind::HeadTooLarge => write!(f, "not a WebSocket handshake: {HEAD_TOO_LARGE}"),
            Kind::Host(reason) => write!(f, "WebSocket handshake refused: {reason}"),
            Kind::Rejected(e) => write!(f, "not a WebSocket handshake: {e}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// Whether `request` asks for a WebSocket upgrade (RFC 6455 §4.2.1:
/// `GET`, `Connection: upgrade`, `Upgrade: websocket`): for an HTTP server
/// deciding which requests to hand over.
pub fn is_upgrade_request<B>(request: &http::Request<B>) -> bool {
    let headers = request.headers();
    request.method() == http::Method::GET
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        && headers
            .get(http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The `101 Switching Protocols` response to a WebSocket upgrade request
/// (headers `Connection`, `Upgrade` and `Sec-WebSocket-Accept`), or why
/// the request is not a valid one (method, version, `Upgrade`,
/// `Connection`, `Sec-WebSocket-Version: 13`, `Sec-WebSocket-Key`). An HTTP
/// server sends it, then serves the upgraded stream with
/// [`serve_websocket`].
pub fn upgrade_response<B>(
    request: &http::Request<B>,
) -> Result<http::Response<()>, HandshakeError> {
    let mut lines = request.headers().get_all(http::header::CONNECTION).iter();
    if let (Some(_), Some(_)) = (lines.next(), lines.next()) {
        // Lines of a list field are one list (RFC 9110 §5.3), which
        // tungstenite, reading the first line only, would refuse.
        let joined: Vec<&[u8]> = request
            .headers()
            .get_all(http::header::CONNECTION)
            .iter()
            .map(http::HeaderValue::as_bytes)
            .collect();
        let mut merged = http::Request::new(());
        *merged.method_mut() = request.method().clone();
        *merged.uri_mut() = request.uri().clone();
        *merged.version_mut() = request.version();
        *merged.headers_mut() = request.headers().clone();
        if let Ok(one) = http::HeaderValue::from_bytes(&joined.join(&b", "[..])) {
            merged.headers_mut().insert(http::header::CONNECTION, one);
        }
        return tungstenite::handshake::server::create_response_with_body(&merged, || ())
            .map_err(|e| HandshakeError(Kind::Rejected(e)));
    }
    tungstenite::handshake::server::create_response_with_body(request, || ())
        .map_err(|e| HandshakeError(Kind::Rejected(e)))
}

/// The `Sec-WebSocket-Accept` value for a request's `Sec-WebSocket-Key`.
///
/// ```
/// // RFC 6455's example.
/// assert_eq!(
///     rpcwire::server::ws::accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
///     "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
/// );
/// ```
pub fn accept_key(key: &[u8]) -> String {
    tungstenite::handshake::derive_accept_key(key)
}

/// The replies the dispatcher writes, one after the other, with where each
/// ends: each is sent as a message of its own, split off without a copy.
#[derive(Default)]
struct Frames {
    buf: BytesMut,
    /// The lengths of the complete replies at the front of `buf`.
    lens: VecDeque<usize>,
    /// Bytes of `buf` that are complete replies.
    marked: usize,
    /// The most `buf` held (the size of what it allocated, give or take
    /// the doubling: `BytesMut::capacity` counts only what is left past
    /// the replies split off).
    high: usize,
}

impl Frames {
    fn next(&mut self) -> Option<Bytes> {
        let len = self.lens.pop_front()?;
        self.marked -= len;
        Some(self.buf.split_to(len).freeze())
    }

    fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
}

impl ReplyBuf for Frames {
    #[inline]
    fn len(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        debug_assert!(len >= self.marked, "a reply cut into a complete one");
        self.buf.truncate(len)
    }
    #[inline]
    fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional)
    }
    #[inline]
    fn end_reply(&mut self) {
        self.lens.push_back(self.buf.len() - self.marked);
        self.marked = self.buf.len();
        self.high = self.high.max(self.marked);
    }
}

/// The connection's socket as tungstenite sees it: it notes where the
/// frames it reads begin and end, and whether a large message went
/// through, so that the driver knows when tungstenite's buffers can be
/// dropped without losing a byte (see `Driver::release_idle_buffers`).
struct Watched<T> {
    /// Taken when the `WebSocketStream` is made anew.
    io: Option<T>,
    frames: FrameWalk,
    /// A frame or a write past [`KEEP_IDLE`] went through since this
    /// stream was made: tungstenite's buffers grew.
    large: bool,
    /// A write waited for the socket.
    write_waited: bool,
    /// Since the driver last looked (`Driver::on_tick`), the bytes that
    /// came from the client and those of writes that had waited for the
    /// socket (the client read): from [`MOVING`] a tick, a transfer in
    /// progress (a message or a reply longer than the idle timeout) is not
    /// silence. A write that never waited proves nothing (the kernel takes
    /// it whether the client reads or not), nor does the server's own ping
    /// getting through (2 bytes).
    client_moved: usize,
}

/// Bytes a transfer moves between two idle ticks that make it traffic
/// (`Watched::client_moved`).
const MOVING: usize = 4 << 10;

impl<T> Watched<T> {
    /// `io`, whose stream starts with `early` (bytes already read from it,
    /// cut where a message past `max_message_len` starts), for messages of
    /// at most `max_message_len` bytes.
    fn new(io: T, early: &mut Vec<u8>, max_message_len: usize) -> Self {
        let mut watched = Watched {
            io: Some(io),
            frames: FrameWalk::new(max_message_len),
            large: false,
            write_waited: false,
            client_moved: 0,
        };
        let walked = watched.frames.walk(early);
        watched.large = walked.large;
        early.truncate(walked.passed);
        watched
    }

    /// Notes a write's outcome for [`client_moved`](Self::client_moved).
    fn note_write(&mut self, written: &Poll<io::Result<usize>>) {
        match written {
            Poll::Pending => self.write_waited = true,
            Poll::Ready(Ok(n)) if *n > 0 && self.write_waited => {
                self.write_waited = false;
                self.client_moved += n;
            }
            _ => {}
        }
    }

    fn io(&mut self) -> io::Result<Pin<&mut T>>
    where
        T: Unpin,
    {
        match &mut self.io {
            Some(io) => Ok(Pin::new(io)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.frames.refused {
            return Poll::Ready(Err(this.frames.refusal()));
        }
        let before = buf.filled().len();
        let read = this.io()?.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            let fresh = &buf.filled()[before..];
            this.client_moved += fresh.len();
            let walked = this.frames.walk(fresh);
            this.large |= walked.large;
            // What precedes the refused frame is read (the messages before
            // it are started); the next read fails. None of it: this one
            // fails (read as nothing, it would be an end of stream).
            buf.set_filled(before + walked.passed);
            if this.frames.refused && walked.passed == 0 {
                return Poll::Ready(Err(this.frames.refusal()));
            }
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // tungstenite writes its whole write buffer each time.
        this.large |= buf.len() > KEEP_IDLE;
        let written = this.io()?.poll_write(cx, buf);
        this.note_write(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.large |= bufs.iter().map(|b| b.len()).sum::<usize>() > KEEP_IDLE;
        let written = this.io()?.poll_write_vectored(cx, bufs);
        this.note_write(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io()?.poll_shutdown(cx)
    }
}

/// What [`Watched`]'s reads fail with once a data frame's header took its
/// message past the size limit: tungstenite refuses a frame past it from
/// its header, but a message's fragments only as it adds each one read
/// whole, which held twice the limit (the message so far and the
/// fragment) before the refusal.
#[derive(Debug)]
struct FragmentsTooLarge;

impl fmt::Display for FragmentsTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a fragmented message larger than the size limit")
    }
}

impl std::error::Error for FragmentsTooLarge {}

/// What [`Watched`]'s reads fail with once a control frame's header
/// announced more than 125 bytes or no final bit.
#[derive(Debug)]
struct BadControlFrame;

impl fmt::Display for BadControlFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a control frame longer than 125 bytes or fragmented")
    }
}

impl std::error::Error for BadControlFrame {}

/// Follows the frame headers in the bytes read from a client (RFC 6455
/// §5.2), to tell when they end between two messages, and to refuse a
/// message past the size limit from the header that takes it there. Only
/// the lengths and the fragmentation are read: tungstenite checks the
/// rest.
struct FrameWalk {
    /// The header being read, `have` bytes of it so far (at most 14: two,
    /// an extended length of eight, a mask of four).
    head: [u8; 14],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// A data frame without its final bit was read, and no final
    /// continuation frame since.
    fragmented: bool,
    /// The payload of the message being read, its frames so far.
    message: u64,
    /// The largest message payload let through.
    max: u64,
    /// A data frame's header took its message past `max`, or a control
    /// frame's header broke RFC 6455 5.5 (`bad_control`): nothing from
    /// that header on is passed.
    refused: bool,
    /// The refused header was a control frame's: longer than 125 bytes,
    /// or fragmented (a protocol error, 1002, not a message too large).
    bad_control: bool,
}

/// What [`FrameWalk::walk`] found in the bytes it was given.
struct Walked {
    /// A frame's payload is larger than half [`KEEP_IDLE`] (tungstenite's
    /// read buffer grows to hold a whole frame).
    large: bool,
    /// How many of the bytes to pass on: all, or those before the header
    /// of the frame that took its message past the limit.
    passed: usize,
}

impl FrameWalk {
    fn new(max_message_len: usize) -> Self {
        FrameWalk {
            head: [0; 14],
            have: 0,
            left: 0,
            fragmented: false,
            message: 0,
            max: max_message_len.max(1) as u64,
            refused: false,
            bad_control: false,
        }
    }

    /// Follows `bytes`, the next ones read.
    fn walk(&mut self, bytes: &[u8]) -> Walked {
        let mut large = false;
        let mut at = 0;
        // Where the header being read starts in `bytes` (0 if it started
        // in an earlier read).
        let mut header_at = 0;
        while at < bytes.len() {
            if self.left > 0 {
                let n = (bytes.len() - at).min(usize::try_from(self.left).unwrap_or(usize::MAX));
                self.left -= n as u64;
                at += n;
                continue;
            }
            if self.have == 0 {
                header_at = at;
            }
            self.head[self.have] = bytes[at];
            self.have += 1;
            at += 1;
            if let Some(len) = self.header_len() {
                let (fin, opcode) = (self.head[0] & 0x80 != 0, self.head[0] & 0x0f);
                match opcode {
                    // Text or binary: a message starts, fragmented unless
                    // final.
                    0x1 | 0x2 => {
                        self.fragmented = !fin;
                        self.message = len;
                    }
                    // A continuation of nothing is tungstenite's to refuse
                    // (1002), not a message past the limit.
                    0x0 if self.fragmented => {
                        self.fragmented = !fin;
                        self.message = self.message.saturating_add(len);
                    }
                    0x0 => self.message = 0,
                    _ => {}
                }
                // A control frame is at most 125 bytes and never fragmented
                // (RFC 6455 5.5): refused from its header, as tungstenite
                // would only once it had read (and reserved) the whole
                // announced payload, up to the message limit.
                let bad_control = opcode >= 0x8 && (len > 125 || !fin);
                if bad_control || (opcode <= 0x2 && self.message > self.max) {
                    self.refused = true;
                    self.bad_control = bad_control;
                    return Walked {
                        large,
                        passed: header_at,
                    };
                }
                large |= len > (KEEP_IDLE / 2) as u64;
                self.have = 0;
                self.left = len;
            }
        }
        Walked {
            large,
            passed: bytes.len(),
        }
    }

    /// What reads fail with once a header was refused.
    fn refusal(&self) -> io::Error {
        if self.bad_control {
            io::Error::other(BadControlFrame)
        } else {
            io::Error::other(FragmentsTooLarge)
        }
    }

    /// The payload length, once the header is whole.
    fn header_len(&self) -> Option<u64> {
        let h = &self.head;
        if self.have < 2 {
            return None;
        }
        let extended = match h[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if h[1] & 0x80 != 0 { 4 } else { 0 };
        if self.have < 2 + extended + mask {
            return None;
        }
        Some(match extended {
            0 => u64::from(h[1] & 0x7f),
            2 => u64::from(u16::from_be_bytes([h[2], h[3]])),
            _ => u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
        })
    }

    /// The bytes so far end a message: no frame partly read, no
    /// fragmented message unfinished.
    fn between_messages(&self) -> bool {
        self.have == 0 && self.left == 0 && !self.fragmented
    }
}

/// One connection's state; see the module docs.
struct Driver<'s, S, K, T> {
    server: &'s WsServer<S, K>,
    ws: WebSocketStream<Watched<T>>,
    conn: Connection,
    replies: Frames,
    outbox: mpsc::Receiver<Bytes>,
    subs: Subscriptions,
    /// The sink takes more messages (its buffer is below its limit).
    write_ready: bool,
    /// Messages were written since the last flush.
    unflushed: bool,
    /// The last read found no whole frame (tungstenite's read buffer holds
    /// at most the start of one).
    read_blocked: bool,
    /// A frame came from the client since the last tick.
    heard: bool,
    /// Ticks in a row without a frame from the client.
    silent: u8,
    tick: Duration,
    ticker: Pin<Box<Sleep>>,
    /// The peer's request deadlines.
    peer_deadlines: super::PeerDeadlines,
    /// Reading stopped at the held messages' bound with answers awaited.
    held_stall: super::HeldStall,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send + 's>>,
    /// Set when the shutdown started: the end of the grace period.
    drain: Option<Pin<Box<Sleep>>>,
    /// The client sent a text message that is not UTF-8.
    invalid_utf8: bool,
    /// Draining, a frame was refused (too large, from its header) or
    /// could not be read (a protocol error): what follows is unread on
    /// the socket.
    unread_frame: bool,
    /// Draining, the client's close frame was read (the connection ends
    /// as the shutdown, and tungstenite answers that close).
    client_closed: bool,
    /// A ping read while the socket took no writes: answered once it does
    /// (the latest only, as RFC 6455 allows).
    pong: Option<Bytes>,
    /// What the pings read since the socket last took every write cost in
    /// pongs tungstenite buffers (it moves its own pong into its write
    /// buffer at each read, blocked socket or not): past [`WATCH_HELD`]
    /// nothing more is read until the socket takes writes again.
    pongs_buffered: usize,
    /// Messages read while the calls in flight were at the limit (reading
    /// on to watch the client, or for its answers to its handlers'
    /// requests) that are not only answers: started in order as calls
    /// finish. Each is a copy, so that it does not keep tungstenite's read
    /// buffer alive.
    ///
    /// What they cost (`HeldMessages::bytes`): past [`WATCH_HELD`]
    /// ([`MAX_HELD`] while answers are awaited; at most
    /// [`Limits::max_message_len`]), nothing more is read.
    held: HeldMessages,
    /// What of `conn`'s unmatched responses the metrics have.
    unmatched: super::UnmatchedSeen,
}

impl<S, K, T> Driver<'_, S, K, T>
where
    S: Send + Sync + 'static,
    K: 'static,
    T: AsyncRead + AsyncWrite + Unpin,
{
    /// The shutdown was triggered: the grace starts, and only answers to
    /// the handlers' requests are read from here.
    fn start_drain(&mut self) {
        let grace = self.server.limits.shutdown_grace;
        self.drain = Some(Box::pin(tokio::time::sleep(grace)));
        // Not started: as the messages not read yet.
        self.held.clear();
    }

    /// Drives the open connection until it must close, and says why.
    fn poll_open(&mut self, cx: &mut TaskContext<'_>) -> Poll<CloseReason> {
        if self.drain.is_none() && self.shutdown.as_mut().poll(cx).is_ready() {
            self.start_drain();
        }
        if let Some(drain) = &mut self.drain
            && drain.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(CloseReason::Shutdown);
        }
        while self.ticker.as_mut().poll(cx).is_ready() {
            if let Some(reason) = self.on_tick(cx) {
                return Poll::Ready(reason);
            }
        }
        self.peer_deadlines.poll(&self.conn, cx);
        if !self.write_ready {
            match self.ws.poll_ready_unpin(cx) {
                Poll::Ready(Ok(())) => {
                    self.write_ready = true;
                    // Flushed: tungstenite's pongs went with the rest.
                    self.pongs_buffered = 0;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(reason_of(&e)),
                Poll::Pending => {}
            }
        }
        let mut turns = 0;
        loop {
            let mut progress = false;
            if self.drain.is_none() && self.server.shutdown.is_triggered() {
                // By a handler that just ran (or ended): nothing read
                // after its message is acted on, as with the stream
                // driver.
                self.start_drain();
            }
            // Messages handlers queued before their replies go first (an MCP
            // progress notification precedes the result).
            if !self.outbox.is_empty() {
                match self.drain_outbox(cx) {
                    Ok(sent) => progress |= sent,
                    Err(reason) => return Poll::Ready(reason),
                }
            }
            if self.write_ready
                && let Some(data) = self.pong.take()
                && let Err(reason) = self.send(cx, Message::Pong(data))
            {
                return Poll::Ready(reason);
            }
            if let Err(reason) = self.send_replies(cx) {
                return Poll::Ready(reason);
            }
            turns += 1;
            if !self.write_ready {
                // The socket takes nothing: the client may be writing its
                // answers to the handlers' requests before it reads ours
                // (two peers pipelining large replies to each other would
                // wait on each other for good), so those are still read
                // while awaited; other messages are held (`on_message`),
                // up to the held bound.
                let for_answers = if self.drain.is_some() {
                    self.pongs_buffered < WATCH_HELD && self.conn.awaits_client_answers()
                } else {
                    self.awaits_answers()
                };
                let mut moved = false;
                if for_answers {
                    moved = match self.read_next(cx) {
                        Ok(read) => read,
                        Err(reason) => return Poll::Ready(reason),
                    };
                }
                // The calls go on meanwhile, as on the stream transports
                // (their replies wait with the others; no message is
                // started, so what waits is bounded by the calls in
                // flight): a handler's notifications past the outbox are
                // refused (`SendError::Full`), not its work stalled until
                // the client reads (its timeout could not fire either),
                // and an answer read lets its call end.
                if self.conn.in_flight() > 0 || self.conn.messages_in_flight() > 0 {
                    moved |= self
                        .conn
                        .poll_replies(&self.server.dispatcher, cx, &mut self.replies)
                        .is_ready();
                }
                if moved && turns <= TURNS_PER_POLL {
                    continue;
                }
                if moved {
                    cx.waker().wake_by_ref();
                }
                break;
            }
            if turns > TURNS_PER_POLL {
                // Let other connections run; come back at once.
                cx.waker().wake_by_ref();
                break;
            }
            if (self.conn.in_flight() > 0 || self.conn.messages_in_flight() > 0)
                && self
                    .conn
                    .poll_replies(&self.server.dispatcher, cx, &mut self.replies)
                    .is_ready()
            {
                // The outbox, then these replies, before anything else: a
                // subscription's id reaches the client before its first
                // notification.
                continue;
            }
            if self.subs.has_queued() {
                match self.drain_subscriptions(cx) {
                    Ok(sent) => progress |= sent,
                    Err(reason) => return Poll::Ready(reason),
                }
            }
            let draining = self.drain.is_some();
            if draining
                && self.conn.in_flight() == 0
                && self.conn.messages_in_flight() == 0
                && self.replies.is_empty()
                && self.outbox.is_empty()
            {
                return Poll::Ready(CloseReason::Shutdown);
            }
            // Shutting down, only answers to the handlers' requests are
            // read (the calls waiting for them can then end in the grace
            // period): see `on_message`.
            let reads = if draining {
                self.conn.awaits_client_answers()
            } else {
                !self.at_limit() || self.reads_at_limit()
            };
            if !draining && self.write_ready && !self.held.is_empty() && !self.at_limit() {
                // Held messages first, one a turn as those read are.
                if let Some(held) = self.held.pop_front() {
                    self.conn
                        .start_held(&self.server.dispatcher, &held, &mut self.replies);
                    progress = true;
                }
            } else if self.write_ready && reads {
                match self.read_next(cx) {
                    Ok(read) => progress |= read,
                    Err(reason) => return Poll::Ready(reason),
                }
            }
            let stalled = !draining && !reads && self.conn.awaits_client_answers();
            if self.held_stall.is_over(stalled, cx) {
                progress |= self.give_up_on_answers();
            }
            if !progress && self.write_ready {
                // About to wait: register for the outbox and the
                // subscriptions (the checks above do not).
                let next = match self.outbox.poll_recv(cx) {
                    Poll::Ready(Some(message)) => Some(message),
                    _ => match self.subs.poll_next(cx) {
                        Poll::Ready(message) => Some(message),
                        Poll::Pending => None,
                    },
                };
                if let Some(message) = next {
                    if let Err(reason) = self.send_text(cx, message) {
                        return Poll::Ready(reason);
                    }
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        if self.unflushed {
            match self.ws.poll_flush_unpin(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Poll::Ready(reason_of(&e)),
                Poll::Pending => {}
            }
        }
        self.release_idle_buffers(cx);
        self.peer_deadlines.poll(&self.conn, cx);
        Poll::Pending
    }

    /// Whether the connection's [slots in use] are at
    /// [`Limits::max_in_flight`] (0 taken as 1, as the other servers take
    /// it): no more are started.
    ///
    /// [slots in use]: Connection::slots_in_use
    fn at_limit(&self) -> bool {
        self.conn.slots_in_use() >= self.server.limits.max_in_flight.max(1)
    }

    /// Whether reading goes on at the in-flight limit: handlers wait for
    /// their client's answers to their requests ([`Context::peer`]), which
    /// must be read for those calls to finish (else each would hang until
    /// its timeout, and the connection with it). Answers are taken at
    /// once; other messages are held, in order, up to about [`MAX_HELD`]
    /// bytes (past that the requests are given up on:
    /// [`give_up_on_answers`](Self::give_up_on_answers)), and started as
    /// calls finish.
    ///
    /// [`Context::peer`]: crate::Context::peer
    fn awaits_answers(&self) -> bool {
        self.held.bytes() < self.server.limits.max_message_len.min(MAX_HELD)
            && self.pongs_buffered < WATCH_HELD
            && self.conn.awaits_client_answers()
    }

    /// Whether reading goes on at the in-flight limit: for answers
    /// ([`awaits_answers`](Self::awaits_answers)), and otherwise to watch
    /// the client, so that one that leaves (a close frame, the end of the
    /// stream, a reset) has its calls dropped at once rather than when one
    /// of them ends, and its pings are answered. Messages read meanwhile
    /// are held, up to [`WATCH_HELD`] bytes (backpressure resumes past
    /// that: a client pipelining without end is not buffered).
    fn reads_at_limit(&self) -> bool {
        self.awaits_answers()
            || self.held.bytes() < self.server.limits.max_message_len.min(WATCH_HELD)
    }

    /// Reading stopped at the in-flight limit with the held messages at
    /// their bound ([`awaits_answers`](Self::awaits_answers)) for
    /// [`HELD_STALL_GRACE`](super::HELD_STALL_GRACE): if handlers still
    /// wait for the client's answers, which may be behind what is not
    /// read, their requests are given up on
    /// ([`PeerError::Backlog`](crate::peer::PeerError::Backlog), each
    /// announced with the protocol's cancellation): else the asking calls,
    /// holding their slots, and the connection with them, would wait for
    /// good. Their calls then end, and the held messages start in their
    /// turn.
    fn give_up_on_answers(&mut self) -> bool {
        let given_up = self.conn.give_up_on_answers();
        if given_up {
            self.server.count(LimitKind::Held);
        }
        given_up
    }

    /// What to do with `input` at the in-flight limit
    /// ([`Connection::take_answers_at_limit`]): answers to the handlers'
    /// requests are taken now.
    fn at_limit_action(&self, input: &Bytes) -> AtLimit {
        if !self.conn.awaits_client_answers() {
            return AtLimit::Hold;
        }
        // Only read at the limit: a scratch arena of its own, given back
        // at once.
        let arena = bumpalo::Bump::new();
        match self
            .server
            .dispatcher
            .parser()
            .parse_incoming(input, &arena)
        {
            Ok(message) => self.conn.take_answers_at_limit(&message, input),
            Err(e) => self
                .conn
                .take_refused_answers_at_limit(&self.server.dispatcher, e, input),
        }
    }

    /// Gives back the buffers a large message made grow (past
    /// [`KEEP_IDLE`]) when the connection waits for its client with
    /// nothing in hand: no reply to send or to wait for, nothing written
    /// and not flushed, no frame partly read.
    ///
    /// tungstenite's read and write buffers are never shrunk, and can only
    /// be dropped with the `WebSocketStream` that holds them: it is made
    /// anew over the same socket, which loses nothing when its read buffer
    /// is empty (checked by [`Watched`]), no fragmented message is partly
    /// read, and all it wrote (pongs included) is flushed.
    fn release_idle_buffers(&mut self, cx: &mut TaskContext<'_>) {
        if !self.replies.is_empty()
            || !self.held.is_empty()
            || self.conn.in_flight() > 0
            || self.conn.messages_in_flight() > 0
            || self.drain.is_some()
        {
            return;
        }
        if self.replies.buf.is_empty() && self.replies.high > KEEP_IDLE / 2 {
            self.replies = Frames::default();
        }
        // The dispatcher's: the arena, async batches' reply buffers.
        self.conn.release_idle(KEEP_IDLE);
        let watched = self.ws.get_ref();
        if !watched.large || !watched.frames.between_messages() {
            return;
        }
        // Only bytes of whole frames reached tungstenite, and it took them
        // all: its read buffer is empty.
        if !self.read_blocked
            || !self.write_ready
            || self.unflushed
            || !self.outbox.is_empty()
            || self.subs.has_queued()
        {
            return;
        }
        // Pongs tungstenite queued while reading.
        if !matches!(self.ws.poll_flush_unpin(cx), Poll::Ready(Ok(()))) {
            return;
        }
        let Some(io) = self.ws.get_mut().io.take() else {
            return;
        };
        let fresh = WebSocketStream::from_raw_socket(
            Watched::new(io, &mut Vec::new(), self.server.limits.max_message_len),
            Role::Server,
            Some(self.server.ws_config()),
        );
        // Ready at once: there is no handshake to do. (Were it not, the
        // old stream, left without its socket, fails the next read and
        // the connection closes.)
        if let Poll::Ready(ws) = std::pin::pin!(fresh).poll(cx) {
            self.ws = ws;
            self.read_blocked = false;
            // Come back to read from the new stream.
            cx.waker().wake_by_ref();
        }
    }

    /// Hands a message to the dispatcher, answers a ping; `Err` when the
    /// connection must close.
    fn on_message(
        &mut self,
        cx: &mut TaskContext<'_>,
        message: Message,
    ) -> Result<(), CloseReason> {
        self.heard = true;
        let input = match message {
            Message::Text(text) => Bytes::from(text),
            Message::Binary(bytes) => bytes,
            Message::Close(_) if self.drain.is_some() => {
                self.client_closed = true;
                return Err(CloseReason::Shutdown);
            }
            Message::Close(_) => return Err(CloseReason::Client),
            // tungstenite queued the pong already, out of sight of the
            // writer's backpressure: a client that pings and never reads
            // would have its pongs buffered without bound. Sending it as
            // a message of ours takes the place of that one and counts
            // as a write (reading stops while the socket takes nothing).
            Message::Ping(data) if !self.write_ready => {
                // A frame's head and payload, with a floor for the
                // smallest (a flood of empty pings costs as much).
                self.pongs_buffered += (data.len() + 2).max(PONG_FLOOR);
                self.pong = Some(data);
                return Ok(());
            }
            Message::Ping(data) => return self.send(cx, Message::Pong(data)),
            Message::Pong(_) | Message::Frame(_) => return Ok(()),
        };
        // A message read after a large one is a slice of tungstenite's read
        // buffer, grown to the large one's size, which a call running on
        // it would keep (a 100-byte call, a megabyte): small ones are
        // copied until `release_idle_buffers` makes the stream anew.
        let input = if self.ws.get_ref().large && input.len() <= KEEP_IDLE / 2 {
            Bytes::copy_from_slice(&input)
        } else {
            input
        };
        if self.drain.is_some() {
            // Shutting down: answers are taken, other messages dropped (as
            // those not read yet are), a cancellation after it reached the
            // call it names (the call is ended by the client, as the drain
            // wants: LSP's -32800 goes out within the grace).
            match self.at_limit_action(&input) {
                AtLimit::Start => {
                    self.conn
                        .start(&self.server.dispatcher, &input, &mut self.replies);
                }
                action => {
                    let mut dropped = HeldMessages::default();
                    self.conn.hold(
                        &self.server.dispatcher,
                        Bytes::copy_from_slice(&input),
                        action == AtLimit::HoldAnswered,
                        &mut dropped,
                        &mut self.replies,
                    );
                }
            }
            return Ok(());
        }
        // Past the limit, or while the socket takes nothing (read then
        // only for answers): the others wait.
        let action = if self.at_limit() || !self.held.is_empty() || !self.write_ready {
            self.at_limit_action(&input)
        } else {
            AtLimit::Start
        };
        if action != AtLimit::Start {
            // A cancellation reaches the call it names now, not once a
            // slot frees (never, for calls that run until cancelled).
            self.conn.hold(
                &self.server.dispatcher,
                Bytes::copy_from_slice(&input),
                action == AtLimit::HoldAnswered,
                &mut self.held,
                &mut self.replies,
            );
            return Ok(());
        }
        self.conn
            .start(&self.server.dispatcher, &input, &mut self.replies);
        Ok(())
    }

    /// Reads the next message, if one is there, and takes it
    /// ([`on_message`](Self::on_message)); whether one was.
    fn read_next(&mut self, cx: &mut TaskContext<'_>) -> Result<bool, CloseReason> {
        self.conn.note_read();
        let next = self.ws.poll_next_unpin(cx);
        self.read_blocked = next.is_pending();
        match next {
            Poll::Ready(Some(Ok(message))) => self.on_message(cx, message).map(|()| true),
            Poll::Ready(Some(Err(e))) => match self.read_error(&e) {
                // Draining: what cannot be read is dropped, as the messages
                // read then are; the connection ends as the shutdown. (A
                // socket that failed ends as it is.)
                CloseReason::MessageTooLarge | CloseReason::Protocol if self.drain.is_some() => {
                    self.unread_frame = true;
                    Err(CloseReason::Shutdown)
                }
                reason => Err(reason),
            },
            Poll::Ready(None) if self.drain.is_some() => Err(CloseReason::Shutdown),
            Poll::Ready(None) => Err(CloseReason::Client),
            Poll::Pending => Ok(false),
        }
    }

    /// Sends the complete replies while the sink takes them.
    fn send_replies(&mut self, cx: &mut TaskContext<'_>) -> Result<(), CloseReason> {
        while self.write_ready {
            let Some(reply) = self.replies.next() else {
                break;
            };
            self.send_text(cx, reply)?;
        }
        Ok(())
    }

    /// Sends what the outbox holds (at most its capacity).
    fn drain_outbox(&mut self, cx: &mut TaskContext<'_>) -> Result<bool, CloseReason> {
        let mut sent = false;
        for _ in 0..self.server.limits.max_queued.max(1) {
            if !self.write_ready {
                break;
            }
            match self.outbox.poll_recv(cx) {
                Poll::Ready(Some(message)) => {
                    self.send_text(cx, message)?;
                    sent = true;
                }
                _ => break,
            }
        }
        Ok(sent)
    }

    /// Sends a batch of the subscriptions' notifications.
    fn drain_subscriptions(&mut self, cx: &mut TaskContext<'_>) -> Result<bool, CloseReason> {
        let mut sent = false;
        for _ in 0..PUMP_BATCH {
            if !self.write_ready {
                break;
            }
            match self.subs.try_next() {
                Some(message) => {
                    self.send_text(cx, message)?;
                    sent = true;
                }
                None => break,
            }
        }
        Ok(sent)
    }

    /// The reason to close for an error reading; remembers whether it was
    /// a text message that is not UTF-8 (closed with 1007).
    fn read_error(&mut self, e: &tungstenite::Error) -> CloseReason {
        self.invalid_utf8 = matches!(e, tungstenite::Error::Utf8(_));
        reason_of(e)
    }

    /// Writes one JSON-RPC message as a text message: the dispatcher's
    /// replies and the peer's messages are UTF-8 JSON already, so the
    /// frame is made from the bytes as they are.
    fn send_text(&mut self, cx: &mut TaskContext<'_>, payload: Bytes) -> Result<(), CloseReason> {
        let frame = Frame::message(payload, OpCode::Data(Data::Text), true);
        self.send(cx, Message::Frame(frame))
    }

    fn send(&mut self, cx: &mut TaskContext<'_>, message: Message) -> Result<(), CloseReason> {
        self.ws
            .start_send_unpin(message)
            .map_err(|e| reason_of(&e))?;
        self.unflushed = true;
        match self.ws.poll_ready_unpin(cx) {
            Poll::Ready(Ok(())) => Ok(()),
            Poll::Ready(Err(e)) => Err(reason_of(&e)),
            Poll::Pending => {
                self.write_ready = false;
                Ok(())
            }
        }
    }

    /// Every `idle_timeout / 2`: ping a silent client, close one silent for
    /// two ticks in a row.
    fn on_tick(&mut self, cx: &mut TaskContext<'_>) -> Option<CloseReason> {
        let next = Instant::now() + self.tick;
        self.ticker.as_mut().reset(next);
        if self.drain.is_some() {
            // Draining, the client is not read (its pongs neither): the
            // grace bounds the connection.
            return None;
        }
        // Frames unread because this server stopped reading (its cap on
        // calls in flight) are not the client's silence.
        // A socket that refuses writes is not such a pause: the replies of
        // finished calls have nowhere to go, so the cap would hold for as
        // long as the client does not read. Nor is one whose flush waits
        // (tungstenite takes messages into its buffer and stays ready
        // while the socket refuses what it holds).
        let paused =
            self.write_ready && !self.unflushed && self.at_limit() && !self.awaits_answers();
        let moved = std::mem::take(&mut self.ws.get_mut().client_moved) >= MOVING;
        if std::mem::take(&mut self.heard) || moved || paused {
            self.silent = 0;
            // Not read any more (held messages at their bound): the end of
            // the stream waits behind what the client sent, but a client
            // that closed its socket answers a write with a reset, which
            // fails the next write, and the connection closes. A ping is
            // that write; a client still there just answers it.
            if paused
                && !self.reads_at_limit()
                && self.write_ready
                && let Err(reason) = self.send(cx, Message::Ping(Bytes::new()))
            {
                return Some(reason);
            }
            return None;
        }
        self.silent = self.silent.saturating_add(1);
        if self.silent >= 2 {
            self.server.count(LimitKind::Idle);
            return Some(CloseReason::Idle);
        }
        if self.write_ready
            && let Err(reason) = self.send(cx, Message::Ping(Bytes::new()))
        {
            return Some(reason);
        }
        None
    }

    /// Ends the connection: subscriptions and outbound requests fail, the
    /// replies ready are sent, then a close frame (unless the client
    /// closed first, whose close tungstenite answers), and the client's
    /// close is awaited, all within [`CLOSE_TIMEOUT`].
    async fn close(&mut self, reason: CloseReason) {
        self.subs.close_all();
        if let Some(peer) = self.conn.context().peer() {
            peer.close();
        }
        let frame = |code: CloseCode, why: &'static str| CloseFrame {
            code,
            reason: Utf8Bytes::from_static(why),
        };
        let close = match reason {
            CloseReason::Io => return,
            // tungstenite answers the client's close (it refuses to send
            // anything after it, so ours would end the wait unanswered).
            _ if self.client_closed => None,
            CloseReason::Client => None,
            CloseReason::Idle => Some(frame(CloseCode::Away, "idle timeout")),
            CloseReason::Shutdown => Some(frame(CloseCode::Away, "server shutting down")),
            CloseReason::MessageTooLarge => {
                self.server.count(LimitKind::MessageLen);
                Some(frame(CloseCode::Size, "message too large"))
            }
            CloseReason::Protocol if self.invalid_utf8 => {
                Some(frame(CloseCode::Invalid, "text message not UTF-8"))
            }
            CloseReason::Protocol => Some(frame(CloseCode::Protocol, "protocol error")),
        };
        let limit = self.server.limits.max_message_len;
        let ws = &mut self.ws;
        let replies = &mut self.replies;
        let outbox = &mut self.outbox;
        let unread_frame = self.unread_frame;
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
            if let Some(close) = close {
                // What handlers sent before their replies goes first, as
                // while the connection ran (a socket that took no writes
                // when the grace ended left it in the outbox: the replies
                // went out without it).
                while let Ok(message) = outbox.try_recv() {
                    let frame = Frame::message(message, OpCode::Data(Data::Text), true);
                    ws.feed(Message::Frame(frame)).await?;
                }
                while let Some(reply) = replies.next() {
                    let frame = Frame::message(reply, OpCode::Data(Data::Text), true);
                    ws.feed(Message::Frame(frame)).await?;
                }
                if reason == CloseReason::MessageTooLarge {
                    let error = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\"data\":{{\"reason\":\"message larger than the size limit\",\"limit\":{limit}}}}}}}"
                    );
                    ws.feed(Message::text(error)).await?;
                }
                ws.send(Message::Close(Some(close))).await?;
            }
            // Read until the client's close (tungstenite answers it and
            // ends the stream); messages still arriving are dropped.
            while let Some(Ok(_)) = ws.next().await {}
            if matches!(reason, CloseReason::MessageTooLarge | CloseReason::Protocol)
                || unread_frame
            {
                // tungstenite ended its stream at the refused frame's
                // header (or at the frame it could not read: a protocol
                // error), leaving what follows unread: a socket closed
                // with data unread sends a reset, which cuts the client's
                // write short and may overtake the replies and the close
                // (its 1002 or 1007 lost). This side ends (the client reads
                // that after the close), and what the client still sends
                // is dropped until its end.
                // Read from the socket itself: `Watched` fails every read
                // past a refused header.
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                if let Some(raw) = ws.get_mut().io.as_mut() {
                    let _ = raw.shutdown().await;
                    let mut dropped = [0u8; 8192];
                    while matches!(raw.read(&mut dropped).await, Ok(n) if n > 0) {}
                }
            }
            Ok::<(), tungstenite::Error>(())
        })
        .await;
    }
}

/// The reason to close for an error reading or writing.
fn reason_of(e: &tungstenite::Error) -> CloseReason {
    use tungstenite::Error;
    match e {
        Error::Capacity(_) => CloseReason::MessageTooLarge,
        Error::Io(e) if e.get_ref().is_some_and(|e| e.is::<FragmentsTooLarge>()) => {
            CloseReason::MessageTooLarge
        }
        Error::Io(e) if e.get_ref().is_some_and(|e| e.is::<BadControlFrame>()) => {
            CloseReason::Protocol
        }
        // The TCP connection ended without a close frame: the client left
        // (nothing can be told to it, and a 1002 would be written into a
        // socket nobody reads).
        Error::Protocol(tungstenite::error::ProtocolError::ResetWithoutClosingHandshake) => {
            CloseReason::Client
        }
        Error::Utf8(_) | Error::Protocol(_) => CloseReason::Protocol,
        Error::ConnectionClosed | Error::AlreadyClosed => CloseReason::Client,
        _ => CloseReason::Io,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{Kind, MAX_HANDSHAKE_HEAD, open};

    thread_local! {
        /// Bytes handed to the head parser (`read_request`) on this thread.
        pub(super) static HEAD_PARSED: Cell<usize> = const { Cell::new(0) };
    }

    /// `head` delivered to [`open`] a byte at a time (a pipe of one byte);
    /// what `open` made of it, what the client got back, and how many
    /// bytes the head parser was handed meanwhile.
    async fn open_bytewise(
        head: Vec<u8>,
    ) -> (
        Result<(super::http::HeaderMap, Vec<u8>), super::HandshakeError>,
        Vec<u8>,
        usize,
    ) {
        let (client, mut server) = tokio::io::duplex(1);
        HEAD_PARSED.with(|parsed| parsed.set(0));
        let opened = async move {
            let opened = open(&mut server, None, None).await;
            drop(server);
            opened
        };
        // Written and read at once: the server answers a bad head before
        // it has all been sent.
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let write = async move {
            for byte in &head {
                if to_server
                    .write_all(std::slice::from_ref(byte))
                    .await
                    .is_err()
                {
                    break;
                }
            }
            to_server
        };
        let read = async move {
            let mut answer = Vec::new();
            let _ = from_server.read_to_end(&mut answer).await;
            answer
        };
        let (opened, _, answer) = tokio::join!(opened, write, read);
        (opened, answer, HEAD_PARSED.with(Cell::get))
    }

    const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

    /// A head arriving a byte at a time is parsed in linear work: each read
    /// once re-parsed the whole head from its start, about 2 GB of parsing
    /// for a 64 KiB head in 1-byte segments.
    #[tokio::test]
    async fn a_head_read_a_byte_at_a_time_is_parsed_in_linear_work() {
        let pad = "p".repeat(32 << 10);
        let head = format!("{UPGRADE}X-Pad: {pad}\r\n\r\n");
        let (opened, answer, parsed) = open_bytewise(head.clone().into_bytes()).await;
        let (headers, early) = opened.expect("accepted");
        assert_eq!(headers["x-pad"], pad.as_str());
        assert!(early.is_empty());
        assert!(answer.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(
            parsed <= 4 * head.len(),
            "{parsed} bytes parsed for a head of {}",
            head.len()
        );
        // Bare line ends, which the parser takes too.
        let bare = head.replace("\r\n", "\n");
        let (opened, _, parsed) = open_bytewise(bare.clone().into_bytes()).await;
        assert_eq!(opened.expect("accepted").0["x-pad"], pad.as_str());
        assert!(parsed <= 4 * bare.len(), "{parsed} bytes parsed");
        // Past the limit: 431, as before, in linear work too.
        let huge = format!("{UPGRADE}X-Pad: {}", "p".repeat(MAX_HANDSHAKE_HEAD));
        let (opened, answer, parsed) = open_bytewise(huge.into_bytes()).await;
        assert!(matches!(
            opened,
            Err(super::HandshakeError(Kind::HeadTooLarge))
        ));
        assert!(answer.starts_with(b"HTTP/1.1 431 "));
        assert!(parsed <= 4 * MAX_HANDSHAKE_HEAD, "{parsed} bytes parsed");
        // Not HTTP: refused from its first bytes, without waiting for the
        // head's end.
        let (opened, answer, _) = open_bytewise(b"\x01\x02 hello".to_vec()).await;
        assert!(matches!(
            opened,
            Err(super::HandshakeError(Kind::Invalid(_)))
        ));
        assert!(answer.starts_with(b"HTTP/1.1 400 "));
    }
}
