//! Stream transports: stdio, TCP and Unix sockets, over the
//! [framers](crate::frame).
//!
//! One connection driver, [`Driver`], serves any pair of
//! `AsyncRead` / `AsyncWrite` halves with any [`Framer`]; the entry points
//! put it on stdin/stdout ([`serve_stdio`]) and behind accept loops
//! ([`serve_tcp`], [`serve_unix`]).
//!
//! What the driver does for each connection:
//!
//! * **Reads without copying.** Bytes are read into one `BytesMut`; each
//!   frame the framer finds is split off it and handed to the dispatcher as
//!   a `Bytes` slice of it, so async handlers get their params as slices of
//!   the bytes read from the socket.
//! * **Reads concatenated JSON once.** With
//!   [`Concatenated`](crate::frame::Concatenated) (geth / reth
//!   IPC), where a message ends is where its JSON value ends, so the
//!   parser finds it ([`Framer::parser_frames`]): each complete message is
//!   parsed, framed and started in one pass over its bytes. The framer's
//!   own scan runs only for a message cut by the end of a read (until it
//!   is whole) or one that is not valid; the replies are the same either
//!   way.
//! * **Pipelines.** A client may send any number of messages without
//!   waiting: each is started at once ([`Connection::start`]), many run
//!   together, and each reply is written as soon as it is complete, in the
//!   order replies complete (JSON-RPC clients match replies by id).
//!   Handlers can also send notifications and requests to their client
//!   ([`Context::notify`], [`Context::peer`]): they go through the
//!   connection's bounded [`Outbox`] and are framed like replies.
//! * **Batches writes.** Replies that complete together go out in one write
//!   call, each framed with [`Framer::encode`].
//! * **Bounds memory.** At [`Limits::max_in_flight`] messages (or calls)
//!   being handled no more are started, and it reads on only a little:
//!   the messages read are held in order (up to 64 KiB of them) until
//!   calls finish, and past that it stops reading, as it does while the
//!   output not yet written holds [`Limits::max_queued`] messages or
//!   [`Driver::max_pending_output`] bytes; it resumes when they drain: a
//!   client that sends without reading fills its own socket buffers, not
//!   the server's memory. The read buffer never holds more than about one
//!   message (the framer's limit; match it to [`Limits::max_message_len`]).
//!   An async call's params are a slice of the read chunk its message
//!   came in (no copy): while it runs it keeps that chunk, at most 64 KiB
//!   for messages smaller than that (a larger one gets a buffer of its
//!   own), so up to 64 KiB per call in flight.
//!   One exception keeps calls from waiting on themselves: while handlers
//!   wait for their client's answers ([`Context::peer`]) at the in-flight
//!   limit, reading goes on further; answers are delivered at once, and the
//!   other messages are held in order (up to about
//!   [`Limits::max_message_len`] bytes, 5 MiB at most) until calls finish.
//! * **Notices a client that leaves.** Reading on at the in-flight limit
//!   is what sees a client that resets its connection while its calls
//!   run: the connection ends and its calls are dropped at once, instead
//!   of running to their end for nobody. The end of a client's input is
//!   a half-close, answered (below), unless a write to the client fails:
//!   with calls running the driver then writes zero bytes, which a Unix
//!   socket its client closed refuses (`EPIPE`), as does a connection
//!   reset. A TCP client that closed cannot be told from one that
//!   half-closed without sending it data, so its calls run on until a
//!   reply is written (its reset then ends the connection). Once reading
//!   has stopped (held messages at their bound, or the input ended), the
//!   same empty write probes the client each `idle_timeout / 2` while
//!   calls run. A client that only goes quiet keeps its calls.
//! * **Answers bad input and carries on.** A message the framer refuses
//!   (over its size limit) gets its error reply with `id: null` and is
//!   counted ([`LimitKind::MessageLen`]), unless its start shows an
//!   answer (`{"jsonrpc":"2.0","id":7,"result":…`): that ends the request
//!   it answers (`PeerError::InvalidResponse`) and is not answered (with
//!   [`Lines`](crate::frame::Lines) and
//!   [`Concatenated`](crate::frame::Concatenated) framing;
//!   [`Lsp`](crate::frame::Lsp) refuses a message from its header, before
//!   its body, with the answer's id, is read). Bytes
//!   the framer cannot resynchronise after are answered, then the
//!   connection closes once the calls in flight are answered.
//! * **Closes cleanly.** At the end of the input it answers every message
//!   read, writes everything, and returns ([`CloseReason::Eof`]): a
//!   client that closes its input gets the replies it asked for (the
//!   calls still running then finish, within their own timeouts; an LSP
//!   client that closes stdin to say "exit" gets its replies). rpcwire's
//!   MCP layer has a loop of its own for stdio: it gives running calls
//!   2 s, then answers the requests still unanswered with -32800.
//!   A last line without its `\n` is a message too; bytes left that are
//!   not one (a message cut short) get the parser's -32700, and with LSP
//!   framing (a frame shorter than its `Content-Length`) a -32700 whose
//!   `data` says `"message cut short by the end of the input"`
//!   ([`Framer::finish`]).
//!   On [`Shutdown`] it stops taking messages, lets the calls in flight
//!   finish within [`Limits::shutdown_grace`], writes their replies
//!   whole, and closes; messages read but not started yet (pipelined
//!   behind the calls in flight) are not run and get no answer, as if
//!   they had not been read: as with an HTTP/1.1 server closing a
//!   pipelined connection, a client resends what was not answered. While
//!   handlers wait for their client's answers to their requests
//!   ([`Context::peer`]), it reads on for those answers (as the WebSocket
//!   driver does), dropping the other messages it reads (a cancellation
//!   still reaches the call it names), so that those calls can finish
//!   within the grace. In both cases the server's own
//!   messages (notifications, subscriptions' events) go on only while
//!   calls run: once none does, the subscriptions end (their producers
//!   see it) and the connection closes when what was queued is written.
//!   A connection idle for [`Limits::idle_timeout`] is closed and
//!   counted ([`LimitKind::Idle`]); one that runs calls or holds
//!   subscriptions is not idle (its client may wait long for a
//!   notification, and a stream has no ping) unless notifications wait
//!   for it and none could be written for that long (a client that
//!   stopped reading), and a TCP client that vanished without closing is
//!   found by [`Limits::tcp_keepalive`]. Closing, the writer's shutdown
//!   (a TLS close_notify) has [`Limits::shutdown_grace`] to finish.
//!
//! ```
//! use rpcwire::frame::Lines;
//! use rpcwire::server::stream::{CloseReason, Driver};
//! use rpcwire::{Call, Dispatcher};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let d = Dispatcher::builder(())
//!     .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
//!     .build()?;
//! // Any pair of byte streams will do; here, an in-memory pipe.
//! let (client, server) = tokio::io::duplex(4096);
//! let (server_read, server_write) = tokio::io::split(server);
//! let served = tokio::spawn(async move { Driver::new(Lines::new()).run(&d, server_read, server_write).await });
//! let (mut client_read, mut client_write) = tokio::io::split(client);
//! client_write.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n").await?;
//! client_write.shutdown().await?; // end of input: the driver answers, then returns
//! let mut replies = String::new();
//! client_read.read_to_string(&mut replies).await?;
//! assert_eq!(replies, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"pong\"}\n");
//! assert_eq!(served.await.unwrap()?, CloseReason::Eof);
//! # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
//! ```
//!
//! # The client's side
//!
//! A [`Driver`] serves either side of a connection. A client (or a server
//! that also sends requests from outside its handlers) takes the driver's
//! [`Peer`](crate::peer::Peer) with [`Driver::peer`] before
//! [`run`](Driver::run): run writes what the peer sends, framed, and the
//! answers it reads settle the peer's requests; the driver's dispatcher
//! answers what the other side sends (here nothing: it has no methods).
//! A peer set with [`ContextBuilder::peer`] is replaced by the driver's.
//! Here 1000 requests are sent without waiting:
//!
//! ```
//! use rpcwire::dispatch::AsyncCall;
//! use rpcwire::frame::Lines;
//! use rpcwire::peer::PeerError;
//! use rpcwire::server::stream::Driver;
//! use rpcwire::{Call, Dispatcher, RpcError};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = Dispatcher::builder(())
//!     .method("double", |c: Call<'_, ()>| {
//!         let (n,): (u64,) = c.decode()?;
//!         Ok::<_, RpcError>(2 * n)
//!     })
//!     .async_method("never", |_: AsyncCall<()>| std::future::pending::<Result<(), RpcError>>())
//!     .build()?;
//! let (client_io, server_io) = tokio::io::duplex(4096);
//! let (r, w) = tokio::io::split(server_io);
//! tokio::spawn(async move { Driver::new(Lines::new()).run(&server, r, w).await });
//!
//! let client = Dispatcher::builder(()).build()?;
//! let mut driver = Driver::new(Lines::new());
//! let peer = driver.peer();
//! let (r, w) = tokio::io::split(client_io);
//! tokio::spawn(async move { driver.run(&client, r, w).await });
//!
//! let calls: Vec<_> = (0..1000u64)
//!     .map(|n| {
//!         let peer = peer.clone();
//!         tokio::spawn(async move { peer.request("double", Some(&[n]), Duration::from_secs(30)).await })
//!     })
//!     .collect();
//! for (n, call) in (0..1000u64).zip(calls) {
//!     assert_eq!(call.await.unwrap()?.decode::<u64>()?, 2 * n);
//! }
//! // A request the server never answers gives up at its timeout.
//! let late = peer.request_raw("never", None, Duration::from_millis(100)).await;
//! assert!(matches!(late, Err(PeerError::Timeout)));
//! # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
//! ```
//!
//! At most [`Limits::max_queued`] requests wait to be written at once
//! (more are refused at once, `PeerError::Send`); when the connection
//! ends, the requests still pending fail with `PeerError::Closed`.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use super::subscriptions::{SubscriptionConfig, Subscriptions};
use super::{LimitKind, Limits, Metrics, Outbox, Shutdown};
use crate::conn::AtLimit;
use crate::dispatch::ReplyBuf;
use crate::dispatch::engine::ReplyGate;
use crate::dispatch::held::{HeldFrame, HeldMessages, HeldRefusal};
use crate::frame::{FrameError, FrameErrorKind, Framer, Step};
use crate::{Connection, Context, ContextBuilder, Dispatcher};

#[cfg(test)]
mod shutdown_tests;
mod stdout;
pub use stdout::{Stdout, stdout};

/// Why a connection ended (when it ended without an I/O error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The client closed its side: every message it sent was answered and
    /// every reply written.
    Eof,
    /// The framer found bytes it cannot resynchronise after (this error);
    /// it was answered, and so were the calls in flight.
    Framing(FrameError),
    /// Nothing happened for [`Limits::idle_timeout`]: no message arrived
    /// whole, no call ran, no byte could be written.
    Idle,
    /// A message was not JSON with a framer that cannot find the next one
    /// after it ([`Framer::resynchronises`]: concatenated JSON, as geth's
    /// IPC): it was answered -32700, and so were the calls in flight;
    /// nothing after it was read.
    NotJson,
    /// [`Shutdown`] was triggered (by the server, or by a handler of a
    /// message read before the end of the input or before bytes the framer
    /// refused, which are then dropped unanswered).
    Shutdown,
}

/// Counters of one connection driven by a [`Driver`], readable while it
/// runs ([`Driver::stats`]): what was read and written, and how close the
/// connection came to its memory bounds.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    messages_read: AtomicU64,
    messages_queued: AtomicU64,
    pending_output_bytes: AtomicUsize,
    pending_output_messages: AtomicUsize,
    peak_output_bytes: AtomicUsize,
    peak_output_messages: AtomicUsize,
    peak_in_flight: AtomicUsize,
    peak_read_buffer: AtomicUsize,
    read_pauses: AtomicU64,
    paused: AtomicBool,
}

impl ConnectionStats {
    /// Bytes read from the client.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
    /// Bytes written to the client.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }
    /// Messages (frames) received, refused ones included.
    pub fn messages_read(&self) -> u64 {
        self.messages_read.load(Ordering::Relaxed)
    }
    /// Messages (replies, notifications, requests) queued for the client.
    pub fn messages_queued(&self) -> u64 {
        self.messages_queued.load(Ordering::Relaxed)
    }
    /// Output framed but not yet written, in bytes.
    pub fn pending_output_bytes(&self) -> usize {
        self.pending_output_bytes.load(Ordering::Relaxed)
    }
    /// Messages framed but not yet written whole.
    pub fn pending_output_messages(&self) -> usize {
        self.pending_output_messages.load(Ordering::Relaxed)
    }
    /// The most output ever pending at once, in bytes.
    pub fn peak_output_bytes(&self) -> usize {
        self.peak_output_bytes.load(Ordering::Relaxed)
    }
    /// The most messages ever pending output at once.
    pub fn peak_output_messages(&self) -> usize {
        self.peak_output_messages.load(Ordering::Relaxed)
    }
    /// The most messages or calls (whichever more) ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.peak_in_flight.load(Ordering::Relaxed)
    }
    /// The most bytes the read buffer ever held, not yet framed.
    pub fn peak_read_buffer(&self) -> usize {
        self.peak_read_buffer.load(Ordering::Relaxed)
    }
    /// How often reading stopped for backpressure.
    pub fn read_pauses(&self) -> u64 {
        self.read_pauses.load(Ordering::Relaxed)
    }
    /// Whether reading is stopped for backpressure now.
    pub fn reading_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }
}

/// Serves one connection: reads messages with a [`Framer`], dispatches
/// them pipelined, writes the replies and the handlers' outbound messages;
/// see the [module docs](self).
///
/// The entry points ([`serve_stdio`], [`serve_tcp`], [`serve_unix`]) use
/// one per connection; use it directly for other byte streams (a child
/// process's pipes, a serial line, an in-memory pipe in tests).
pub struct Driver<F> {
    framer: F,
    limits: Limits,
    idle_timeout: Option<Option<Duration>>,
    max_pending_output: usize,
    context: ContextBuilder,
    metrics: Option<Arc<Metrics>>,
    shutdown: Option<Shutdown>,
    stats: Arc<ConnectionStats>,
    subscriptions: SubscriptionConfig,
    /// The peer handed out by [`Driver::peer`] before `run`, with its
    /// outbox's receiving end.
    outbound: Option<Outgoing>,
}

/// A peer made before its connection runs ([`Driver::peer`]), and what
/// its outbox's messages are taken from.
struct Outgoing {
    peer: crate::peer::Peer,
    rx: Option<mpsc::Receiver<Bytes>>,
    /// The outbox's count of messages taken past the output's limit.
    spilled: Arc<AtomicUsize>,
}

impl Drop for Outgoing {
    /// A driver dropped without running: no answer can come, and the
    /// requests already made hear it now rather than at their timeouts.
    fn drop(&mut self) {
        if self.rx.is_some() {
            self.peer.close();
        }
    }
}

impl<F> fmt::Debug for Driver<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("limits", &self.limits)
            .field("max_pending_output", &self.max_pending_output)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Bytes read at a time (at least).
const READ_CHUNK: usize = 64 * 1024;
/// Read only when at least this much room is free, else make more.
const MIN_READ_ROOM: usize = 4 * 1024;
/// Bytes read between two looks of the idle timer (an idle timeout apart)
/// that make a message still arriving count as traffic.
const UPLOADING: u64 = 4 * 1024;
/// A frame this large gets a read buffer to itself: small messages read
/// after it do not keep its memory alive while they are handled.
const LARGE_FRAME: usize = 64 * 1024;
/// Output and reply buffers larger than this are given back when empty.
const KEEP_BUFFER: usize = 1 << 20;
/// ... and larger than this when the connection has nothing to do: one
/// that once sent a large reply kept buffers of its size (up to 1 MiB
/// each) while it idled, gigabytes over thousands of connections.
const KEEP_IDLE: usize = 64 * 1024;

/// Up to this many bytes, a message the framer follows is read by the
/// parser after every read that added to it, to tell whether it is not
/// JSON (see `Io::take_not_json`); past it, once its bytes have doubled.
const NOT_JSON_EVERY_READ: usize = 4 * 1024;
/// Messages held while reading on for answers at the in-flight limit, in
/// bytes (at most [`Limits::max_message_len`], and never unbounded).
const MAX_HELD: usize = crate::frame::DEFAULT_MAX_FRAME;
/// Messages held at the in-flight limit when no handler waits for an
/// answer, in bytes (at most [`Limits::max_message_len`]): the client is
/// read then only to see it leave (a reset, the end of its input), so a
/// little is enough; every connection at its cap may hold this much.
const WATCH_HELD: usize = 64 * 1024;
/// Rounds of work in one poll before yielding to other tasks.
const ROUNDS_PER_POLL: usize = 32;

impl<F: Framer> Driver<F> {
    /// Default for [`max_pending_output`](Driver::max_pending_output): 1 MiB.
    pub const DEFAULT_MAX_PENDING_OUTPUT: usize = 1 << 20;

    /// A driver framing with `framer`, default limits, no metrics, no
    /// shutdown signal, and a context that says nothing about the transport.
    pub fn new(framer: F) -> Self {
        Driver {
            framer,
            limits: Limits::default(),
            idle_timeout: None,
            max_pending_output: Self::DEFAULT_MAX_PENDING_OUTPUT,
            context: Context::builder(),
            metrics: None,
            shutdown: None,
            stats: Arc::default(),
            subscriptions: SubscriptionConfig::default(),
            outbound: None,
        }
    }

    /// The limits enforced ([`Limits::max_connections`] is the accept
    /// loop's and is not used here).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits.clocked();
        self
    }

    /// Overrides [`Limits::idle_timeout`]; `None` never closes an idle
    /// connection ([`serve_stdio`] does that: its client owns the process).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = Some(timeout.map(|t| t.min(super::NEVER)));
        self
    }

    /// Output not yet written, in bytes, past which the driver stops
    /// reading requests until the client reads (default 1 MiB; replies of
    /// calls already running are still queued, with the notifications
    /// handlers sent before them, so the output can pass it by at most
    /// their size and [`Limits::max_queued`] notifications).
    ///
    /// Why: a client that sends requests and never reads would otherwise
    /// make the server buffer every reply.
    pub fn max_pending_output(mut self, bytes: usize) -> Self {
        self.max_pending_output = bytes.max(1);
        self
    }

    /// What handlers see of the connection (transport name, peer address,
    /// extensions). The driver makes it two-way: [`Context::peer`] sends to
    /// this connection's client through an [`Outbox`] of
    /// [`Limits::max_queued`] messages, made by [`run`](Driver::run) (or
    /// earlier by [`peer`](Driver::peer)), so a peer set here
    /// ([`ContextBuilder::peer`]) is replaced by that one. To send
    /// requests from outside the handlers (a client), take
    /// [`Driver::peer`]; see [the client's side](self#the-clients-side).
    pub fn context(mut self, context: ContextBuilder) -> Self {
        self.context = context;
        self
    }

    /// Where limit hits are counted.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The signal for a graceful shutdown.
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = Some(shutdown);
        self
    }

    /// How the connection's [subscriptions](super::subscriptions) behave
    /// (default [`SubscriptionConfig::default`]). Every connection has a
    /// [`Subscriptions`] registry in its context, as a WebSocket
    /// connection does (geth and reth serve `eth_subscribe` over IPC too);
    /// its notifications are framed like replies, after the replies made
    /// before them, while the output has room.
    pub fn subscriptions(mut self, config: SubscriptionConfig) -> Self {
        self.subscriptions = config;
        self
    }

    /// The [`Peer`](crate::peer::Peer) of the connection, made now, for
    /// sending requests and notifications to the other side from outside
    /// the handlers: a client sends its requests with it (its own
    /// handlers, if any, see the same peer in [`Context::peer`]).
    /// [`run`](Driver::run) uses it, writes what it sends, framed, and
    /// settles its requests with the responses it reads; when the
    /// connection ends (or the driver is dropped without running), its
    /// pending requests fail with `PeerError::Closed`. Requests made
    /// before `run` starts wait in the outbox and go out when it does.
    /// Each call returns a clone of the same peer.
    ///
    /// The outbox is made by the first call, with the
    /// [`limits`](Driver::limits) ([`Limits::max_queued`] messages) and
    /// [`metrics`](Driver::metrics) set so far: set those first, as later
    /// ones do not resize it. A full outbox refuses a request at once
    /// (`PeerError::Send(SendError::Full)`): more than `max_queued`
    /// requests sent faster than the connection writes them need a larger
    /// [`Limits::max_queued`]. Pending requests are not idleness: a client
    /// waiting for a slow answer is not closed by the idle timeout (the
    /// requests' own timeouts bound the wait).
    ///
    /// Taking the peer turns the idle timeout off unless
    /// [`idle_timeout`](Driver::idle_timeout) sets one: the side that sends
    /// requests of its own is usually the client, whose connection is
    /// quiet while it waits for notifications (an `eth_subscribe` to rare
    /// logs) that live on the other side, out of this driver's sight. It
    /// was closed as idle after [`Limits::idle_timeout`] without one.
    ///
    /// ```
    /// use rpcwire::frame::Lines;
    /// use rpcwire::server::stream::Driver;
    /// use rpcwire::{Call, Dispatcher};
    /// use std::time::Duration;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let server = Dispatcher::builder(())
    ///     .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
    ///     .build()?;
    /// let (client_io, server_io) = tokio::io::duplex(4096);
    /// let (r, w) = tokio::io::split(server_io);
    /// tokio::spawn(async move { Driver::new(Lines::new()).run(&server, r, w).await });
    ///
    /// // The client: a dispatcher without methods, and the driver's peer.
    /// let client = Dispatcher::builder(()).build()?;
    /// let mut driver = Driver::new(Lines::new());
    /// let peer = driver.peer();
    /// let (r, w) = tokio::io::split(client_io);
    /// tokio::spawn(async move { driver.run(&client, r, w).await });
    /// let pong = peer.request_raw("ping", None, Duration::from_secs(5)).await?;
    /// assert_eq!(pong.decode::<String>()?, "pong");
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub fn peer(&mut self) -> crate::peer::Peer {
        self.idle_timeout.get_or_insert(None);
        let made = self.outbound.get_or_insert_with(|| {
            let (outbox, rx, spilled) =
                Outbox::spilling(self.limits.max_queued, self.metrics.clone());
            Outgoing {
                peer: crate::peer::Peer::new(Arc::new(outbox)),
                rx: Some(rx),
                spilled,
            }
        });
        made.peer.clone()
    }

    /// The connection's counters, readable while it runs.
    pub fn stats(&self) -> Arc<ConnectionStats> {
        Arc::clone(&self.stats)
    }

    /// Serves the connection until it ends: the client closes its side
    /// (every message answered first), the framer gives up, it is idle, or
    /// the shutdown is triggered. An I/O error (the client vanished) ends
    /// it at once, calls in flight dropped. Pending outbound requests of
    /// the connection's peer fail with `PeerError::Closed` when it ends,
    /// or when this future is dropped before it finishes.
    pub async fn run<S, K, R, W>(
        self,
        dispatcher: &Dispatcher<S, K>,
        reader: R,
        writer: W,
    ) -> io::Result<CloseReason>
    where
        S: Send + Sync + 'static,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        // The peer handed out by `peer()`, else one made now.
        let mut outbound = self.outbound;
        let made = (outbound.as_mut())
            .and_then(|m| Some((m.peer.clone(), m.rx.take()?, Arc::clone(&m.spilled))));
        let (peer, outbox_rx, spilled) = made.unwrap_or_else(|| {
            let (outbox, rx, spilled) =
                Outbox::spilling(self.limits.max_queued, self.metrics.clone());
            (crate::peer::Peer::new(Arc::new(outbox)), rx, spilled)
        });
        let gate = Arc::new(ReplyGate::default());
        let subs = Subscriptions::with_gate(
            self.subscriptions,
            self.metrics.clone(),
            Some(Arc::clone(&gate)),
        );
        let context = self.context.peer(peer).extension(subs.clone()).build();
        // However the connection ends, this future dropped before it
        // finishes included (a task aborted, a `select!` that lost).
        let ends = Ends {
            subs: subs.clone(),
            context: context.clone(),
        };
        let mut conn = dispatcher.connection(context);
        conn.set_reply_gate(gate);
        let idle_timeout = self.idle_timeout.unwrap_or(Some(self.limits.idle_timeout));
        let shutdown_signal = self.shutdown.clone();
        let shutdown = self
            .shutdown
            .map(|s| -> Pin<Box<dyn Future<Output = ()> + Send>> {
                Box::pin(async move { s.triggered().await })
            });
        let parser_frames = self.framer.parser_frames();
        let mut io = Io {
            dispatcher,
            framer: self.framer,
            reader,
            writer,
            conn,
            max_in_flight: self.limits.max_in_flight.max(1),
            max_queued: self.limits.max_queued.max(1),
            max_message_len: self.limits.max_message_len,
            shutdown_grace: self.limits.shutdown_grace,
            max_pending_output: self.max_pending_output,
            metrics: self.metrics,
            stats: self.stats,
            rbuf: BytesMut::new(),
            replies: Replies::default(),
            out: Output::default(),
            outbox: outbox_rx,
            spilled,
            outbox_taken_at_end: false,
            subs: subs.clone(),
            input: Input::Open,
            wants_bytes: true,
            parser_frames,
            framing: false,
            not_json_read: 0,
            parsed: Bytes::new(),
            held: HeldMessages::default(),
            arena: bumpalo::Bump::new(),
            reason: CloseReason::Eof,
            calls_dropped: false,
            draining: false,
            closing: false,
            close_deadline: None,
            paused: false,
            idle_timeout,
            idle: idle_timeout.map(|t| Box::pin(tokio::time::sleep(t))),
            peer_deadlines: super::PeerDeadlines::default(),
            held_stall: super::HeldStall::default(),
            last_activity: Instant::now(),
            messages_at_idle_check: 0,
            bytes_at_idle_check: 0,
            grace_extended: false,
            shutdown,
            shutdown_signal,
            grace: None,
            grace_unpolled: false,
            peaks: Peaks::default(),
            unmatched: super::UnmatchedSeen::default(),
        };
        let result = std::future::poll_fn(|cx| io.poll(cx)).await;
        drop(ends);
        result
    }
}

/// What goes with a connection served by [`Driver::run`] (or by the
/// WebSocket driver), when it ends or its future is dropped.
pub(super) struct Ends {
    pub(super) subs: Subscriptions,
    pub(super) context: Context,
}

impl Drop for Ends {
    fn drop(&mut self) {
        // Producers stop, and the places and buffers of the subscriptions
        // go, with the connection.
        self.subs.close_all();
        // No answer to a request sent to the client can come any more
        // (work handlers spawned may still wait for one).
        if let Some(peer) = self.context.peer() {
            peer.close();
        }
    }
}

/// The dispatcher's reply buffer: replies as it writes them, marked where
/// each ends ([`ReplyBuf::end_reply`]) so each can be framed on its own.
#[derive(Default)]
struct Replies {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl ReplyBuf for Replies {
    #[inline]
    fn len(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes)
    }
    #[inline]
    fn push(&mut self, byte: u8) {
        self.buf.push(byte)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(len)
    }
    #[inline]
    fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional)
    }
    #[inline]
    fn as_vec_mut(&mut self) -> Option<&mut Vec<u8>> {
        Some(&mut self.buf)
    }
    #[inline]
    fn end_reply(&mut self) {
        self.ends.push(self.buf.len());
    }
}

/// Framed output waiting to be written: `buf[at..]`.
#[derive(Default)]
struct Output {
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    at: usize,
    /// Output stream offset of `buf[0]`.
    base: u64,
    /// Output stream offsets where the messages not yet written whole end.
    ends: VecDeque<u64>,
    /// Something was written and not flushed yet.
    unflushed: bool,
}

impl Output {
    fn pending_bytes(&self) -> usize {
        self.buf.len() - self.at
    }

    fn is_empty(&self) -> bool {
        self.at == self.buf.len()
    }

    /// Frames `message` at the end of the output.
    fn push<F: Framer>(&mut self, framer: &F, message: &[u8]) {
        framer.encode(message, &mut self.buf);
        self.ends.push_back(self.base + self.buf.len() as u64);
    }

    /// `n` more bytes were written.
    fn advance(&mut self, n: usize) {
        self.at += n;
        let written = self.base + self.at as u64;
        while self.ends.front().is_some_and(|&end| end <= written) {
            self.ends.pop_front();
        }
        if self.at == self.buf.len() {
            self.base = written;
            self.buf.clear();
            self.at = 0;
            if self.buf.capacity() > KEEP_BUFFER {
                self.buf = Vec::new();
            }
        } else if self.at >= LARGE_FRAME && self.at >= self.buf.len() / 2 {
            // Keep the unwritten tail at the front, so the buffer does not
            // grow while a slow reader takes its bytes.
            self.buf.drain(..self.at);
            self.base = written;
            self.at = 0;
        }
    }
}

/// The highest values seen, published to the stats at the end of a poll.
#[derive(Default)]
struct Peaks {
    output_bytes: usize,
    output_messages: usize,
    in_flight: usize,
    read_buffer: usize,
    bytes_read: u64,
    bytes_written: u64,
    messages_read: u64,
    messages_queued: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Input {
    /// Reading.
    Open,
    /// The client finished sending: frame what is buffered, read no more.
    Eof,
    /// No more messages are taken (all framed, or the framer gave up, or
    /// shutdown).
    Stopped,
}

/// One connection's state, polled by [`Driver::run`].
struct Io<'d, S, K, F, R, W> {
    dispatcher: &'d Dispatcher<S, K>,
    framer: F,
    reader: R,
    writer: W,
    conn: Connection,
    max_in_flight: usize,
    max_queued: usize,
    max_message_len: usize,
    shutdown_grace: Duration,
    max_pending_output: usize,
    metrics: Option<Arc<Metrics>>,
    stats: Arc<ConnectionStats>,
    /// Bytes read and not yet consumed by the framer.
    rbuf: BytesMut,
    replies: Replies,
    out: Output,
    outbox: mpsc::Receiver<Bytes>,
    /// Messages taken from the outbox past the output's limit, ahead of a
    /// reply (`queue_replies`): the outbox counts them against its
    /// capacity until the output drains below its limit, so that handlers
    /// refilling it between replies cannot grow the output by
    /// `max_queued` messages per reply.
    spilled: Arc<AtomicUsize>,
    /// What the outbox held when the calls were over was taken (once): a
    /// notification a call sent before it ended goes out, even with no
    /// reply after it (a notification's call) or once the input ended.
    outbox_taken_at_end: bool,
    /// The connection's subscriptions, whose notifications are framed
    /// while the output has room (their own buffers and slow-subscriber
    /// policy apply meanwhile).
    subs: Subscriptions,
    input: Input,
    /// The framer found no complete message in `rbuf`: only then is more
    /// read (so the buffer holds at most one message and one read).
    wants_bytes: bool,
    /// The parser finds where messages end ([`Framer::parser_frames`]).
    parser_frames: bool,
    /// ... but the framer is following the message at the front of `rbuf`
    /// (cut short when it was parsed, or not valid).
    framing: bool,
    /// With a framer that cannot go on after bytes that are not JSON: the
    /// bytes of the message it follows that the parser last read (see
    /// [`take_not_json`](Io::take_not_json)).
    not_json_read: usize,
    /// Bytes read and not yet taken when framing by parsing paused for
    /// backpressure; `rbuf` is empty meanwhile.
    parsed: Bytes,
    /// Messages framed while the calls in flight were at the limit
    /// (reading on to watch the client, or for its answers to its
    /// handlers' requests) that are not only answers: started in order as
    /// calls finish.
    /// Past [`WATCH_HELD`] bytes of them ([`MAX_HELD`] while answers are
    /// awaited; at most [`Limits::max_message_len`]), nothing more is read.
    held: HeldMessages,
    /// Scratch for telling answers from calls while reading on.
    arena: bumpalo::Bump,
    /// Why the connection ends, once `input` is not `Open`.
    reason: CloseReason,
    /// The shutdown grace passed: calls in flight were dropped.
    calls_dropped: bool,
    /// Shut down while handlers wait for their client's answers to their
    /// requests: reading goes on for those answers (other messages read
    /// are dropped, as those not read yet are, once their cancellations
    /// reached their calls) until none is awaited.
    draining: bool,
    /// Everything is done: shutting the writer down.
    closing: bool,
    /// When the writer's shutdown is given up on (see `poll_close`).
    close_deadline: Option<Pin<Box<Sleep>>>,
    /// Reading is stopped for backpressure.
    paused: bool,
    idle_timeout: Option<Duration>,
    idle: Option<Pin<Box<Sleep>>>,
    /// The peer's request deadlines.
    peer_deadlines: super::PeerDeadlines,
    /// Reading stopped at the held messages' bound with answers awaited.
    held_stall: super::HeldStall,
    /// When a message last arrived whole, a reply was made, or bytes were
    /// written (messages are counted as they arrive, `peaks.messages_read`,
    /// and noticed by the idle timer: no clock read per message).
    last_activity: Instant,
    /// The messages read in all when the idle timer last looked.
    messages_at_idle_check: u64,
    /// The bytes read in all when the idle timer last looked.
    bytes_at_idle_check: u64,
    /// The shutdown grace was extended once (for calls dropped at its end,
    /// or for replies still being written).
    grace_extended: bool,
    shutdown: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The same signal, asked after each message started: a handler that
    /// triggers it (LSP's `exit`) ends the input there, not after the rest
    /// of what was read (messages behind `exit` in the same read ran).
    shutdown_signal: Option<Shutdown>,
    /// The shutdown's deadline: for the calls in flight, then for writing
    /// their replies.
    grace: Option<Pin<Box<Sleep>>>,
    /// The grace was started without a context to poll it with (the
    /// shutdown seen through its flag, the watch dropped): the task must
    /// poll once more, or nothing would wake it at the grace's end.
    grace_unpolled: bool,
    peaks: Peaks,
    /// What of `conn`'s unmatched responses `metrics` has.
    unmatched: super::UnmatchedSeen,
}

impl<S, K, F, R, W> Io<'_, S, K, F, R, W>
where
    S: Send + Sync + 'static,
    F: Framer,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<CloseReason>> {
        let r = self.poll_inner(cx);
        self.publish();
        if r.is_pending() && std::mem::take(&mut self.grace_unpolled) {
            cx.waker().wake_by_ref();
        }
        r
    }

    fn poll_inner(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<CloseReason>> {
        if self.closing {
            return self.poll_close(cx);
        }
        if let Some(reason) = self.poll_signals(cx) {
            return Poll::Ready(Ok(reason));
        }
        self.peer_deadlines.poll(&self.conn, cx);
        for _ in 0..ROUNDS_PER_POLL {
            let mut progress = self.take_messages();
            progress |= self.poll_engine(cx);
            progress |= self.poll_outbox(cx);
            progress |= self.poll_subscriptions(cx);
            progress |= self.poll_write(cx)?;
            progress |= self.poll_read(cx)?;
            if self.take_outbox_at_end() {
                continue;
            }
            if self.is_done() {
                self.closing = true;
                return self.poll_close(cx);
            }
            if !progress {
                let stalled = self.stalled_at_held_bound();
                if self.held_stall.is_over(stalled, cx) && self.give_up_on_answers() {
                    continue;
                }
                self.release_idle_buffers();
                self.peer_deadlines.poll(&self.conn, cx);
                return match self.poll_idle(cx)? {
                    Some(reason) => Poll::Ready(Ok(reason)),
                    None => Poll::Pending,
                };
            }
        }
        // Plenty done: let other connections run.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Gives back the output and reply buffers past [`KEEP_IDLE`] when
    /// the connection waits for its client with nothing in hand (no bytes
    /// read and not handled, no call in flight, nothing to write).
    fn release_idle_buffers(&mut self) {
        if !self.rbuf.is_empty() || self.in_flight() > 0 {
            return;
        }
        // Emptied by `advance` once all of it was written.
        if self.out.buf.is_empty() && self.out.buf.capacity() > KEEP_IDLE {
            self.out.buf = Vec::new();
        }
        if self.replies.buf.is_empty() && self.replies.buf.capacity() > KEEP_IDLE {
            self.replies.buf = Vec::new();
        }
        // The dispatcher's arena and async reply buffers, kept between
        // messages up to `Connection::max_retained`, and the scratch
        // arena that told answers from calls.
        self.conn.release_idle(KEEP_IDLE);
        if self.arena.allocated_bytes() > KEEP_IDLE {
            self.arena = bumpalo::Bump::new();
        }
    }

    /// The connection's [slots in use](Connection::slots_in_use).
    fn in_flight(&self) -> usize {
        self.conn.slots_in_use()
    }

    fn output_full(&self) -> bool {
        self.out.ends.len() >= self.max_queued
            || self.out.pending_bytes() >= self.max_pending_output
    }

    /// Whether taking more messages must wait for calls or output to drain.
    fn backpressured(&mut self) -> bool {
        let full = self.in_flight() >= self.max_in_flight || self.output_full();
        if full && !self.paused {
            self.stats.read_pauses.fetch_add(1, Ordering::Relaxed);
        }
        self.paused = full;
        full
    }

    /// Whether reading goes on past the in-flight limit: handlers wait
    /// for their client's answers to their requests ([`Context::peer`]),
    /// which must be read for those calls to finish (else each would hang
    /// until its timeout, and the connection with it). Answers are taken
    /// at once; other messages are held, in order, up to about
    /// [`MAX_HELD`] bytes (past that the requests are given up on:
    /// [`give_up_on_answers`](Self::give_up_on_answers)), and started as
    /// calls finish. A full output does not stop it: answers make no output, and the other side may be
    /// waiting for room to write them before it reads what fills ours (two
    /// peers pipelining requests with large replies to each other would
    /// otherwise wait on each other for good).
    fn awaits_answers(&self) -> bool {
        self.held.bytes() < self.max_message_len.min(MAX_HELD) && self.conn.awaits_client_answers()
    }

    /// Whether reading goes on at the in-flight limit: for answers
    /// ([`awaits_answers`](Self::awaits_answers)), and otherwise to watch
    /// the client, so that one that leaves (a reset; a Unix socket
    /// closed, found by [`probe`](Self::probe) at the end of its input)
    /// has its calls dropped at once rather than when one of them ends.
    /// Messages read meanwhile are held, up to [`WATCH_HELD`] bytes
    /// (backpressure resumes past that: a client pipelining without end is
    /// not buffered).
    fn reads_at_limit(&self) -> bool {
        self.awaits_answers()
            || (self.held.bytes() < self.max_message_len.min(WATCH_HELD) && !self.output_full())
    }

    /// Whether framing goes on at the in-flight limit: while reading does
    /// ([`reads_at_limit`](Self::reads_at_limit)), and past the held
    /// messages' bound, over what was read already, while handlers await
    /// answers (an answer read with the messages that filled the bound
    /// would otherwise wait behind them unframed, and its request be given
    /// up on): up to the bound again. What that frames is taken or held as
    /// at the limit, so that the held messages cost at most twice their
    /// bound (a read of the smallest messages holds thousands of them).
    fn frames_at_limit(&self) -> bool {
        self.reads_at_limit()
            || (self.held.bytes() < 2 * self.max_message_len.min(MAX_HELD)
                && self.conn.awaits_client_answers())
    }

    /// What to do with `frame` at the in-flight limit
    /// ([`Connection::take_answers_at_limit`]): answers to the handlers'
    /// requests are taken now. A frame over the message limit is refused
    /// whole, unread, when it starts, as it would be at any other time:
    /// answers inside it are not taken either.
    fn at_limit(&mut self, frame: &Bytes) -> AtLimit {
        if !self.conn.awaits_client_answers() || frame.len() > self.max_message_len {
            return AtLimit::Hold;
        }
        self.arena.reset();
        match self.dispatcher.parser().parse_incoming(frame, &self.arena) {
            Ok(message) => self.conn.take_answers_at_limit(&message, frame),
            Err(e) => self
                .conn
                .take_refused_answers_at_limit(self.dispatcher, e, frame),
        }
    }

    /// Starts a framed message, or holds it while the calls in flight are
    /// at the limit (answers to the handlers' requests excepted).
    fn take_frame(&mut self, mut frame: Bytes) {
        self.not_json_read = 0;
        if frame.len() > self.max_message_len
            && let Some(end) = self.not_json_end(&frame, 0, self.max_message_len)
        {
            // Not JSON within the limit, as the parser reading it in place
            // finds: answered so, as it would be however the reads cut it
            // (and then the connection closes).
            frame.truncate(end);
        }
        if frame.len() > self.max_message_len
            && self.conn.refused_answer(&frame, self.max_message_len)
        {
            // An answer too large to read: its request ended, and an
            // answer is not answered (nor held: it starts nothing).
            self.peaks.messages_read += 1;
            self.limit_hit(LimitKind::MessageLen);
            return;
        }
        if self.draining {
            match self.at_limit(&frame) {
                AtLimit::Start => self.start_message(frame),
                action => {
                    // Dropped (its answers taken): no call starts once shut
                    // down. A cancellation still reaches the call it names
                    // (LSP's -32800 answers it within the grace, rather
                    // than nothing once the grace ends).
                    self.peaks.messages_read += 1;
                    if frame.len() <= self.max_message_len {
                        let answers_taken = action == AtLimit::HoldAnswered;
                        let mut dropped = HeldMessages::default();
                        self.conn.hold(
                            self.dispatcher,
                            frame,
                            answers_taken,
                            &mut dropped,
                            &mut self.replies,
                        );
                        self.queue_replies();
                    }
                }
            }
            self.drained();
            return;
        }
        let action = if self.backpressured() || !self.held.is_empty() {
            self.at_limit(&frame)
        } else {
            AtLimit::Start
        };
        if action == AtLimit::Start {
            self.start_message(frame);
            // Stops the input (and so the framing) when it asked to.
            self.shutdown_triggered();
        } else {
            if frame.len() > self.max_message_len {
                // Refused whole when it starts, unread: not a cancellation
                // either.
                let frame = HeldFrame {
                    frame,
                    answers_taken: false,
                    ids_given_below: 0,
                    refused: None,
                };
                self.held.push_back(frame, None);
                return;
            }
            // Not JSON: nothing after it is read, as it would not be had
            // it started at once (answers and cancellations behind it
            // included); the connection ends once it is answered.
            let not_json =
                !self.framer.resynchronises() && self.not_json_end(&frame, 0, usize::MAX).is_some();
            // A cancellation reaches the call it names now, not once a
            // slot frees (never, for calls that run until cancelled).
            let answers_taken = action == AtLimit::HoldAnswered;
            self.conn.hold(
                self.dispatcher,
                frame,
                answers_taken,
                &mut self.held,
                &mut self.replies,
            );
            self.queue_replies();
            if not_json {
                self.stop_reading_after_not_json();
            }
        }
    }

    /// Frames the bytes buffered and starts each message, while allowed.
    fn take_messages(&mut self) -> bool {
        // A call that ended since the last look (an async handler, which
        // ran in `poll_engine`) may have shut down: nothing held starts
        // after that.
        self.shutdown_triggered();
        self.drained();
        let mut progress = false;
        while !self.held.is_empty() && !self.backpressured() {
            if let Some(held) = self.held.pop_front() {
                self.start_held(held);
                progress = true;
                if self.shutdown_triggered() {
                    return true;
                }
            }
        }
        while self.frames_more() {
            if self.parser_frames && !self.framing {
                progress |= self.take_parsed();
                // At the end of the input the framer decides what is left,
                // as it does without parsing.
                if !self.framing && (self.input == Input::Open || self.backpressured()) {
                    break;
                }
                // A message just parsed may have shut down (its handler
                // asked to): the framer goes on only if it still would.
                if !self.frames_more() {
                    break;
                }
            }
            match self.framer.next_frame(&self.rbuf) {
                Step::Frame { range, consumed } => {
                    let head = self.rbuf.split_to(consumed).freeze();
                    if consumed >= LARGE_FRAME {
                        // What follows a large message gets a buffer of its
                        // own, so the large one's memory goes with it.
                        self.rbuf = BytesMut::from(&self.rbuf[..]);
                    }
                    self.take_frame(head.slice(range));
                    // Back to framing by parsing, from here; but not while
                    // the calls are at their limit: each return to parsing
                    // copied the rest of the buffer back for the framer,
                    // once per message held (the framer frames in place).
                    if self.framing && !self.draining && !self.backpressured() {
                        self.framing = false;
                        self.framer.skip(0);
                    }
                    progress = true;
                }
                Step::NeedMore { consumed } => {
                    self.rbuf.advance(consumed);
                    if self.take_not_json(0, self.input == Input::Eof, usize::MAX) {
                        progress = true;
                        break;
                    }
                    self.wants_bytes = true;
                    if self.input == Input::Eof {
                        self.input = Input::Stopped;
                        // A last message without its terminator runs (or,
                        // cut short, gets the parser's -32700).
                        if let Some(range) = self.framer.finish(&self.rbuf) {
                            let rest = self.rbuf.split().freeze();
                            self.take_frame(rest.slice(range));
                            progress = true;
                        } else if let Some(at) =
                            self.rbuf.iter().position(|b| !crate::scan::is_ws(*b))
                        {
                            // A frame its framing says goes on (LSP's
                            // `Content-Length`): answered, not dropped
                            // unseen, as a cut line gets the parser's -32700.
                            let read = self.stats.bytes_read() + self.peaks.bytes_read;
                            let offset = read - (self.rbuf.len() - at) as u64;
                            self.rbuf.clear();
                            let error = FrameError::new(FrameErrorKind::CutShort, offset);
                            self.refuse_in_turn(error, false, false);
                            progress = true;
                        }
                        self.close_peer();
                    }
                    break;
                }
                Step::Garbage { consumed, error } => {
                    // The refused message starts where the framer says,
                    // or else (a framer of one's own) after the whitespace
                    // in front of the bytes it was given.
                    // Read within the framer's limit, as the parser reads a
                    // message in place (`Framer::parsed_frame_limit`).
                    let start = self.framer.refused_start(&error, consumed);
                    if let Some(limit) = error.limit().filter(|_| error.is_too_large())
                        && self.take_not_json(start.unwrap_or(0), true, limit)
                    {
                        progress = true;
                        break;
                    }
                    let answer = self.refused_answer(&error, consumed);
                    self.rbuf.advance(consumed);
                    // The framer drops that message; the next is new.
                    self.not_json_read = 0;
                    self.refuse_in_turn(error, false, answer);
                    progress = true;
                }
                Step::Close(error) => {
                    self.refuse_in_turn(error, true, false);
                    progress = true;
                }
            }
        }
        progress
    }

    /// Whether [`take_messages`](Self::take_messages) frames more of what
    /// was read. Shutting down, only while answers are awaited (the rest
    /// is dropped): calls that may still ask keep the input open, but the
    /// messages behind the shutdown are not taken, as none would be after
    /// a stop.
    fn frames_more(&mut self) -> bool {
        self.input != Input::Stopped
            && if self.draining {
                self.conn.awaits_client_answers()
            } else {
                !self.backpressured() || self.frames_at_limit()
            }
    }

    /// Whether reading stopped at the in-flight limit with the held
    /// messages at their bound while handlers wait for the client's
    /// answers ([`give_up_on_answers`](Self::give_up_on_answers)).
    fn stalled_at_held_bound(&mut self) -> bool {
        !self.draining
            && self.input != Input::Stopped
            && self.backpressured()
            && !self.reads_at_limit()
            && self.conn.awaits_client_answers()
    }

    /// Reading stopped at the in-flight limit with the held messages at
    /// their bound ([`awaits_answers`](Self::awaits_answers)) for
    /// [`HELD_STALL_GRACE`](super::HELD_STALL_GRACE): if handlers still
    /// wait for the client's answers, which may be behind what is not
    /// read, their requests are given up on
    /// ([`PeerError::Backlog`](crate::peer::PeerError::Backlog), each
    /// announced with the protocol's cancellation): else the asking calls,
    /// holding their slots, and the connection with them, would wait for
    /// good (an LSP client sending a few large `didChange`s before it
    /// answers `workspace/configuration`). Their calls then end, and the
    /// held messages start in their turn.
    fn give_up_on_answers(&mut self) -> bool {
        let given_up = self.conn.give_up_on_answers();
        if given_up {
            self.limit_hit(LimitKind::Held);
        }
        given_up
    }

    /// Reads and frames the messages buffered in one pass (a framer whose
    /// messages the parser delimits, [`Framer::parser_frames`]): each
    /// complete, valid message at the front is started where it lies. At
    /// a message cut by the end of the bytes read, or one that is not
    /// valid, the framer takes over (`framing`) until it has framed that
    /// one. Stops early under backpressure.
    fn take_parsed(&mut self) -> bool {
        let buffered = match (self.parsed.is_empty(), self.rbuf.is_empty()) {
            (true, true) => {
                self.wants_bytes = true;
                return false;
            }
            (true, false) => self.rbuf.split().freeze(),
            (false, true) => std::mem::take(&mut self.parsed),
            // Not reached (nothing is read while bytes wait here), but
            // correct: the waiting bytes come first.
            (false, false) => {
                self.rejoin_parsed();
                self.rbuf.split().freeze()
            }
        };
        let mut at = 0;
        let mut started = false;
        let mut blocked = false;
        loop {
            if self.draining {
                // Shut down by a handler of a message just started: the
                // framer takes the rest, telling answers from the others.
                break;
            }
            if self.input == Input::Stopped {
                blocked = true;
                break;
            }
            if self.backpressured() {
                // Read on (for answers, or to watch the client) through
                // the framer, which takes over from here.
                self.framing = self.frames_at_limit();
                blocked = !self.framing;
                break;
            }
            // A message starts at its first byte, as the framer's frames do
            // (error offsets count from there).
            at = crate::scan::skip_ws(&buffered, at);
            if at == buffered.len() {
                self.wants_bytes = true;
                break;
            }
            // Past the message size limit or the framer's, the parser
            // stops short and the framer refuses the message as it would
            // have, however the reads cut it.
            let limit = self.max_message_len.min(self.framer.parsed_frame_limit());
            let end = buffered.len().min(at.saturating_add(limit));
            match self.conn.start_prefix(
                self.dispatcher,
                &buffered.slice(at..end),
                &mut self.replies,
            ) {
                Some(len) => {
                    at += len;
                    self.peaks.messages_read += 1;
                    self.queue_replies();
                    started = true;
                    // Stops the input (the loop's next turn) when it
                    // asked to.
                    self.shutdown_triggered();
                }
                None if self.conn.not_json && !self.framer.resynchronises() => {
                    // Not JSON: the framer might never find its end. Taken
                    // up to the limit and answered; nothing after it is
                    // read.
                    let frame = buffered.slice(at..end);
                    at = buffered.len();
                    self.take_frame(frame);
                    self.stop_reading_after_not_json();
                    started = true;
                    break;
                }
                None => {
                    self.not_json_read = end - at;
                    self.framing = true;
                    break;
                }
            }
        }
        self.framer.skip(at);
        let rest = buffered.slice(at..);
        if blocked {
            // Held as they are until the pause ends (nothing is read
            // meanwhile): a pause per message must not copy the rest of
            // the buffer each time.
            self.parsed = rest;
        } else if buffered.len() >= LARGE_FRAME {
            // The bytes not yet taken (at most part of one message) get a
            // buffer of their own, so the messages read go with theirs once
            // handled.
            self.rbuf = BytesMut::from(&rest[..]);
        } else {
            self.rbuf.extend_from_slice(&rest);
        }
        started
    }

    /// Puts the bytes the one-pass parser paused on (`parsed`) back in
    /// front of those read since (`rbuf`).
    fn rejoin_parsed(&mut self) {
        if self.parsed.is_empty() {
            return;
        }
        let mut joined = BytesMut::from(&self.parsed[..]);
        joined.extend_from_slice(&self.rbuf);
        self.rbuf = joined;
        self.parsed = Bytes::new();
    }

    /// Starts one framed message (or refuses it, over the message limit).
    fn start_message(&mut self, frame: Bytes) {
        self.start_frame(&frame, None);
    }

    /// [`start_message`](Self::start_message) for a message held at the
    /// in-flight limit.
    fn start_held(&mut self, held: HeldFrame) {
        match held.refused {
            Some(refusal) => self.refuse_now(refusal),
            None => self.start_frame(&held.frame, Some(&held)),
        }
    }

    fn start_frame(&mut self, frame: &Bytes, held: Option<&HeldFrame>) {
        self.peaks.messages_read += 1;
        if frame.len() > self.max_message_len {
            self.limit_hit(LimitKind::MessageLen);
            too_large_reply(self.max_message_len, &mut self.replies);
        } else if let Some(held) = held {
            self.conn
                .start_held(self.dispatcher, held, &mut self.replies);
        } else {
            self.conn.start(self.dispatcher, frame, &mut self.replies);
        }
        self.queue_replies();
        if self.conn.not_json && !self.framer.resynchronises() {
            self.close_not_json();
        }
    }

    /// The message just started was not JSON, with a framer that cannot
    /// find the next one after it: nothing more is read or started
    /// (messages framed behind it while the calls were at their limit are
    /// dropped, as they would not have been read), and the connection ends
    /// once the calls in flight are answered.
    fn close_not_json(&mut self) {
        self.held.clear();
        self.rbuf.clear();
        self.parsed = Bytes::new();
        if !self.draining {
            self.reason = CloseReason::NotJson;
        }
        self.stop_reading_after_not_json();
    }

    /// Stops reading after a message that is not JSON, taken but perhaps
    /// held rather than started ([`close_not_json`](Self::close_not_json)
    /// gives the reason once it starts).
    fn stop_reading_after_not_json(&mut self) {
        if self.input != Input::Stopped {
            self.input = Input::Stopped;
            self.close_peer();
        }
    }

    /// Where the message at `start` of `bytes` is cut if the parser finds
    /// it is not JSON within `limit` bytes and the message limit (a
    /// definite syntax error, not a message cut short), with a framer that
    /// cannot go on after such bytes ([`Framer::resynchronises`]); `None`
    /// otherwise.
    fn not_json_end(&mut self, bytes: &[u8], start: usize, limit: usize) -> Option<usize> {
        if self.framer.resynchronises() {
            return None;
        }
        let limit = self.max_message_len.min(limit);
        let end = bytes.len().min(start.saturating_add(limit));
        self.arena.reset();
        match self
            .dispatcher
            .parser()
            .parse_prefix(&bytes[start..end], &self.arena)
        {
            Err(e) if e.is_not_json() => Some(end),
            _ => None,
        }
    }

    /// With a framer that cannot go on after bytes that are not JSON: if
    /// the message it follows (at `start` in `rbuf`) is not JSON by the
    /// parser's reading within `limit` bytes (the framer's, when it refused
    /// the message as too large: where the parser, reading it in place,
    /// stops) and the message limit, takes it (up to there: answered
    /// -32700, after which the connection closes) and drops the rest.
    /// The parser reads it again after a read that added to it while it is
    /// at most [`NOT_JSON_EVERY_READ`] bytes (a request a client sent in
    /// two writes and waits on: answered at once), past that once its bytes
    /// have doubled since it last did, and whenever `now` (the input ended,
    /// or the framer refuses the message as too large): a message arriving
    /// a byte at a time costs at most a few KiB of reading per read, or a
    /// logarithmic number of readings. A message whose brackets or quotes
    /// never balance (`[1}`, `["a"b"]`) swallows everything after it, and
    /// only the parser can tell.
    fn take_not_json(&mut self, start: usize, now: bool, limit: usize) -> bool {
        if self.framer.resynchronises() {
            return false;
        }
        let start = crate::scan::skip_ws(&self.rbuf, start);
        let pending = self.rbuf.len().saturating_sub(start);
        let due = now
            || (pending > self.not_json_read
                && (pending <= NOT_JSON_EVERY_READ
                    || pending >= self.not_json_read.saturating_mul(2)));
        if pending == 0 || !due {
            return false;
        }
        self.not_json_read = pending;
        let rbuf = std::mem::take(&mut self.rbuf);
        let found = self.not_json_end(&rbuf, start, limit);
        self.rbuf = rbuf;
        let Some(end) = found else {
            return false;
        };
        let frame = self.rbuf.split_to(end).freeze().slice(start..);
        self.rbuf.clear();
        self.take_frame(frame);
        self.stop_reading_after_not_json();
        true
    }

    /// Answers bytes the framer refused (and, when it `closes`, ends the
    /// connection), in their turn: behind held messages they are held too,
    /// so that a message held before them that shuts down drops them, as
    /// it would have had the reads stopped short of them. Shutting down,
    /// they are dropped as the messages around them are.
    fn refuse_in_turn(&mut self, error: FrameError, closes: bool, answer: bool) {
        if self.draining {
            if closes {
                self.stop(CloseReason::Shutdown);
            } else {
                self.peaks.messages_read += 1;
            }
        } else if !self.held.is_empty() || self.backpressured() {
            // Held at the limit too (read on while answers are awaited):
            // answered at once, a client that reads nothing grew the
            // output past every bound, a refusal at a time.
            let refusal = HeldFrame {
                frame: Bytes::new(),
                answers_taken: false,
                ids_given_below: 0,
                refused: Some(HeldRefusal {
                    error,
                    closes,
                    answer,
                }),
            };
            self.held.push_back(refusal, None);
            if closes {
                // Nothing more can be framed; the reason is the refusal's
                // once it is answered (or the shutdown's, if a held
                // message asks for one first).
                self.input = Input::Stopped;
                self.close_peer();
            }
        } else {
            self.refuse_now(HeldRefusal {
                error,
                closes,
                answer,
            });
        }
    }

    fn refuse_now(&mut self, refusal: HeldRefusal) {
        let HeldRefusal { error, closes, .. } = refusal;
        if closes {
            self.refused(refusal);
            // Held, it stopped the input already and left the reason open.
            self.reason = CloseReason::Framing(error);
            self.stop(self.reason);
        } else {
            self.peaks.messages_read += 1;
            self.refused(refusal);
        }
    }

    /// Whether a message the framer refuses as too large is an answer to
    /// a request of this side ([`Connection::refused_answer`]: its request
    /// ends now), read where the framer says it starts
    /// ([`Framer::refused_start`]).
    fn refused_answer(&self, error: &FrameError, consumed: usize) -> bool {
        let start = self.framer.refused_start(error, consumed);
        match (error.limit(), start.and_then(|at| self.rbuf.get(at..))) {
            (Some(limit), Some(message)) if !error.is_header_too_large() => {
                self.conn.refused_answer(message, limit)
            }
            _ => false,
        }
    }

    /// Answers a message the framer refused (an answer only counted).
    fn refused(&mut self, HeldRefusal { error, answer, .. }: HeldRefusal) {
        if answer {
            self.limit_hit(LimitKind::MessageLen);
            return;
        }
        if error.is_header_too_large() {
            self.limit_hit(LimitKind::Header);
        } else if error.is_too_large() {
            self.limit_hit(LimitKind::MessageLen);
        } else {
            // Not a limit: counted under its code, as the parser's -32700.
            self.dispatcher.inner.report_unframed(error.code());
        }
        error.write_reply(&mut self.replies.buf);
        self.replies.end_reply();
        self.queue_replies();
    }

    fn limit_hit(&self, kind: LimitKind) {
        if let Some(m) = &self.metrics {
            m.limit_hit(kind);
        }
    }

    /// Takes no more messages; the connection ends for `reason` once the
    /// calls in flight are answered.
    fn stop(&mut self, reason: CloseReason) {
        if reason == CloseReason::Shutdown {
            // Not started: as the messages not read yet.
            self.held.clear();
        }
        if self.input != Input::Stopped {
            self.input = Input::Stopped;
            self.reason = reason;
            self.close_peer();
        } else if reason == CloseReason::Shutdown && self.reason == CloseReason::Eof {
            // The input had ended (or the framer given up behind held
            // messages, its refusal not answered yet), and a message read
            // before that shut down: the shutdown ends the connection.
            self.reason = reason;
        }
    }

    /// Nothing more is read, so no answer to the handlers' requests to the
    /// client can come: they fail now ([`PeerError::Closed`](crate::peer::PeerError))
    /// rather than at their timeouts, and the connection ends once its
    /// calls do.
    fn close_peer(&self) {
        if let Some(peer) = self.conn.context().peer() {
            peer.close();
        }
    }

    /// Moves the replies the dispatcher wrote into the output, framed, after
    /// what handlers queued in the outbox meanwhile (a notification sent
    /// before a reply goes out before it). The outbox goes in whole, even
    /// past the output's limit: the replies go in regardless (their calls
    /// ran), and notifications left behind would follow them (an MCP
    /// client drops progress that comes after its call's result). The
    /// outbox holds at most `max_queued` messages, those taken past the
    /// limit counted (`spilled`) until the output drains, so the output
    /// stays bounded.
    fn queue_replies(&mut self) {
        if self.replies.ends.is_empty() {
            return;
        }
        while let Ok(message) = self.outbox.try_recv() {
            if self.output_full() {
                self.spilled.fetch_add(1, Ordering::Relaxed);
            }
            self.out.push(&self.framer, &message);
            self.peaks.messages_queued += 1;
        }
        let mut from = 0;
        for &end in &self.replies.ends {
            self.out.push(&self.framer, &self.replies.buf[from..end]);
            from = end;
        }
        debug_assert_eq!(from, self.replies.buf.len(), "every reply is marked");
        self.peaks.messages_queued += self.replies.ends.len() as u64;
        self.replies.buf.clear();
        self.replies.ends.clear();
        if self.replies.buf.capacity() > KEEP_BUFFER {
            self.replies.buf = Vec::new();
        }
        self.note_output();
        self.last_activity = Instant::now();
    }

    fn note_output(&mut self) {
        let p = &mut self.peaks;
        p.output_bytes = p.output_bytes.max(self.out.pending_bytes());
        p.output_messages = p.output_messages.max(self.out.ends.len());
    }

    fn poll_engine(&mut self, cx: &mut TaskContext<'_>) -> bool {
        let in_flight = self.in_flight();
        self.peaks.in_flight = self.peaks.in_flight.max(in_flight);
        if in_flight == 0 {
            return false;
        }
        match self
            .conn
            .poll_replies(self.dispatcher, cx, &mut self.replies)
        {
            Poll::Ready(_) => {
                self.queue_replies();
                true
            }
            // A call that makes no reply (a notification) finished: its
            // slot is free for a held message, which the next round starts
            // (no wake will come for it).
            Poll::Pending => self.in_flight() < in_flight,
        }
    }

    /// Nothing more is taken and every call has ended (or was dropped):
    /// messages of the server's own made from here on (notifications,
    /// subscriptions' events) would only hold the connection open, as long
    /// as something produces them as fast as the client reads.
    fn calls_over(&self) -> bool {
        self.input == Input::Stopped
            && self.held.is_empty()
            && (self.calls_dropped || self.in_flight() == 0)
    }

    /// Once the calls are over ([`calls_over`](Self::calls_over)), takes
    /// what the outbox holds, once: messages calls sent before they ended
    /// (at most `max_queued`). Later ones would only hold the connection
    /// open ([`poll_outbox`](Self::poll_outbox) takes no more).
    fn take_outbox_at_end(&mut self) -> bool {
        if self.outbox_taken_at_end || !self.calls_over() {
            return false;
        }
        self.outbox_taken_at_end = true;
        let mut any = false;
        while let Ok(message) = self.outbox.try_recv() {
            self.out.push(&self.framer, &message);
            self.peaks.messages_queued += 1;
            any = true;
        }
        if any {
            self.note_output();
        }
        any
    }

    fn poll_outbox(&mut self, cx: &mut TaskContext<'_>) -> bool {
        if self.calls_over() {
            return false;
        }
        if !self.output_full() && self.spilled.load(Ordering::Relaxed) > 0 {
            // Below the limit again: what was taken past it is counted
            // there now.
            self.spilled.store(0, Ordering::Relaxed);
        }
        let mut any = false;
        while !self.output_full() {
            match self.outbox.poll_recv(cx) {
                Poll::Ready(Some(message)) => {
                    self.out.push(&self.framer, &message);
                    self.peaks.messages_queued += 1;
                    any = true;
                }
                // Closed (cannot happen while the context lives) or empty.
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if any {
            self.note_output();
        }
        any
    }

    /// Frames the subscriptions' notifications while the output has room
    /// (after the replies queued before them: a subscription's id is
    /// written before its first notification).
    fn poll_subscriptions(&mut self, cx: &mut TaskContext<'_>) -> bool {
        if self.calls_over() {
            // Their producers see it (`Sink::closed`, `send` failing).
            self.subs.close_all();
            return false;
        }
        let mut any = false;
        while !self.output_full() {
            match self.subs.poll_next(cx) {
                Poll::Ready(message) => {
                    self.out.push(&self.framer, &message);
                    self.peaks.messages_queued += 1;
                    any = true;
                }
                Poll::Pending => break,
            }
        }
        if any {
            self.note_output();
        }
        any
    }

    fn poll_write(&mut self, cx: &mut TaskContext<'_>) -> io::Result<bool> {
        if !self.out.is_empty() {
            let pending = &self.out.buf[self.out.at..];
            return match Pin::new(&mut self.writer).poll_write(cx, pending) {
                Poll::Ready(Ok(0)) => Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    self.out.advance(n);
                    self.out.unflushed = true;
                    self.peaks.bytes_written += n as u64;
                    self.last_activity = Instant::now();
                    Ok(true)
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
                Poll::Ready(Err(e)) => Err(e),
                Poll::Pending => Ok(false),
            };
        }
        if self.out.unflushed {
            return match Pin::new(&mut self.writer).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.out.unflushed = false;
                    Ok(true)
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
                Poll::Ready(Err(e)) => Err(e),
                Poll::Pending => Ok(false),
            };
        }
        Ok(false)
    }

    fn poll_read(&mut self, cx: &mut TaskContext<'_>) -> io::Result<bool> {
        if self.input != Input::Open
            || !self.wants_bytes
            || (self.draining && !self.conn.awaits_client_answers())
            || (!self.draining && self.backpressured() && !self.reads_at_limit())
        {
            return Ok(false);
        }
        if self.rbuf.capacity() - self.rbuf.len() < MIN_READ_ROOM {
            self.rbuf.reserve(READ_CHUNK);
        }
        self.conn.note_read();
        // `read_buf` is a thin future over `poll_read`: polling a new one
        // each time loses nothing.
        let read = std::pin::pin!(self.reader.read_buf(&mut self.rbuf));
        match read.poll(cx) {
            Poll::Ready(Ok(0)) => {
                // The reason stays: `Eof` unless shutting down already.
                self.input = Input::Eof;
                if self.in_flight() > 0 {
                    // A half-close (answered) or a close (nobody to
                    // answer)? A Unix socket tells.
                    self.probe(cx)?;
                }
                Ok(true)
            }
            Poll::Ready(Ok(n)) => {
                self.wants_bytes = false;
                self.peaks.bytes_read += n as u64;
                self.peaks.read_buffer = self.peaks.read_buffer.max(self.rbuf.len());
                Ok(true)
            }
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(false),
        }
    }

    /// Writes nothing, to ask whether the client is still there: a write
    /// to a Unix socket its client closed fails (`EPIPE`), as does one to a
    /// TCP connection it reset, which ends the connection and drops its
    /// calls. A client that only half-closed, or a pipe (stdio), takes it.
    /// A TCP client that closed looks like one that half-closed until
    /// something is written to it (its reset then fails the next write).
    fn probe(&mut self, cx: &mut TaskContext<'_>) -> io::Result<()> {
        match Pin::new(&mut self.writer).poll_write(cx, &[]) {
            Poll::Ready(Err(e)) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    /// Every message taken is answered, every call finished (or dropped at
    /// the end of the shutdown grace), everything written and flushed.
    fn is_done(&self) -> bool {
        self.calls_over() && self.out.is_empty() && !self.out.unflushed
    }

    fn poll_close(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<CloseReason>> {
        // A client that is gone cannot be told more: errors do not matter.
        if Pin::new(&mut self.writer).poll_shutdown(cx).is_ready() {
            return Poll::Ready(Ok(self.reason));
        }
        // A shutdown that never ends (a TLS close_notify waiting for room
        // a client that reads nothing never makes) has the grace: neither
        // the idle timer nor a shutdown's grace runs any more.
        let shutdown_grace = self.shutdown_grace;
        let give_up = self
            .close_deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(shutdown_grace)));
        match give_up.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(self.reason)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The shutdown was triggered: no more messages are taken, the grace
    /// starts. While handlers wait for their client's answers, or calls
    /// that may still ask run, the input is still read for those answers
    /// (as the WebSocket driver does): their calls can then finish within
    /// the grace rather than fail at once.
    fn shut_down(&mut self) {
        self.shutdown = None;
        self.shutdown_signal = None;
        self.grace = Some(Box::pin(tokio::time::sleep(self.shutdown_grace)));
        self.grace_unpolled = true;
        // Calls still running on a two-way connection may ask their client
        // something within the grace, as under the WebSocket driver: read
        // on for those answers too.
        let may_ask = self.conn.context().peer().is_some() && self.in_flight() > 0;
        if self.input == Input::Open && (self.conn.awaits_client_answers() || may_ask) {
            self.draining = true;
            self.reason = CloseReason::Shutdown;
            // Not started: as the messages not read yet.
            self.held.clear();
            // Every message goes through the framer from here, which
            // tells answers from the rest (`take_frame`); it starts afresh
            // on the bytes the parser paused on (`Framer::skip` was called
            // for them).
            self.rejoin_parsed();
            self.framing = true;
        } else {
            self.stop(CloseReason::Shutdown);
        }
    }

    /// Draining, no answer awaited and no call running any more (the
    /// calls finished, or were dropped at the grace's end): nothing more
    /// is read. While calls run, one may still ask its client something
    /// (reading resumes for that answer).
    fn drained(&mut self) {
        if self.draining && !self.conn.awaits_client_answers() && self.in_flight() == 0 {
            self.draining = false;
            self.stop(CloseReason::Shutdown);
        }
    }

    /// Whether the shutdown was triggered since the last look (by a
    /// handler that just ran, say), and if so shuts down.
    fn shutdown_triggered(&mut self) -> bool {
        let triggered = self
            .shutdown_signal
            .as_ref()
            .is_some_and(Shutdown::is_triggered);
        if triggered {
            self.shut_down();
        }
        triggered
    }

    /// Watches the shutdown signal and its deadlines; returns a reason to
    /// end at once.
    fn poll_signals(&mut self, cx: &mut TaskContext<'_>) -> Option<CloseReason> {
        if let Some(signal) = self.shutdown.as_mut()
            && signal.as_mut().poll(cx).is_ready()
        {
            self.shut_down();
        }
        let calls_done = self.calls_dropped || self.in_flight() == 0;
        let grace = self.grace.as_mut()?;
        if grace.as_mut().poll(cx).is_pending() {
            return None;
        }
        if self.grace_extended || (calls_done && self.out.is_empty() && !self.out.unflushed) {
            // The replies had their time to be written (and flushed) too.
            return Some(CloseReason::Shutdown);
        }
        if !calls_done {
            // Calls still running at the deadline are dropped (a new
            // connection state, same context).
            let gate = self.conn.reply_gate();
            self.unmatched.report(&self.conn, self.metrics.as_deref());
            self.unmatched.restart();
            self.conn = Connection::with_context(self.conn.context().clone());
            if let Some(gate) = gate {
                // What the dropped calls subscribed was closed with them
                // (their replies will not come); the new state keeps the
                // gate for the messages still to be read.
                self.conn.set_reply_gate(gate);
            }
            self.calls_dropped = true;
        }
        // The replies already made (some maybe half written, or written
        // and not yet flushed) get one more grace period to be written
        // whole.
        self.grace_extended = true;
        grace.as_mut().reset(Instant::now() + self.shutdown_grace);
        if grace.as_mut().poll(cx).is_ready() {
            return Some(CloseReason::Shutdown);
        }
        None
    }

    /// Arms the idle timer; returns `Idle` when it fired for good. While
    /// calls run for a client that is not read (past its end of input, or
    /// at the in-flight limit past [`WATCH_HELD`]), it also
    /// [probes](Self::probe) the client each `idle_timeout / 2`, so that
    /// one that left is found even then (an error ends the connection).
    fn poll_idle(&mut self, cx: &mut TaskContext<'_>) -> io::Result<Option<CloseReason>> {
        let Some(timeout) = self.idle_timeout else {
            return Ok(None);
        };
        loop {
            let Some(timer) = self.idle.as_mut() else {
                return Ok(None);
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Ok(None);
            }
            // A call running is not idleness (its own timeout bounds it),
            // nor a message that arrived since the last look (a
            // notification makes no reply, but it is traffic), nor an open
            // subscription with nothing waiting to go out: its client
            // waits for notifications that may be rare (a log filter), and
            // a stream has no ping to show it is there (a client that
            // vanished is found by TCP keepalive, `Limits::tcp_keepalive`,
            // or by the write that fails). With notifications waiting,
            // only writes that go through (each one is activity) keep it:
            // a client that stopped reading (hung, stopped; its kernel
            // still answering keepalive probes) would otherwise hold its
            // connection and a full queue for ever.
            let now = Instant::now();
            // Published and unpublished counts: a total that only grows.
            let read = self.stats.messages_read() + self.peaks.messages_read;
            let arrived = read != self.messages_at_idle_check;
            self.messages_at_idle_check = read;
            // A message still arriving is traffic too (a long upload is not
            // idle), from [`UPLOADING`] bytes since the last look: a client
            // trickling a byte now and then to hold its connection is.
            let bytes = self.stats.bytes_read() + self.peaks.bytes_read;
            let uploading = bytes - self.bytes_at_idle_check >= UPLOADING;
            if uploading || arrived {
                self.bytes_at_idle_check = bytes;
            }
            // Requests of this side waiting for answers are not idleness
            // either (a client waiting for a slow call; their own
            // timeouts bound them).
            let busy = self.conn.messages_in_flight() > 0
                || self.conn.in_flight() > 0
                || self.conn.awaits_client_answers();
            // (A notification taken by a buffering writer that cannot
            // flush it, a client that stopped reading behind a TLS
            // stream or a `BufWriter`, is waiting too.)
            let waiting = !self.subs.is_empty()
                && self.out.is_empty()
                && !self.out.unflushed
                && self.subs.queued() == 0;
            if arrived || uploading || busy || waiting {
                self.last_activity = now;
            }
            let mut deadline = self.last_activity + timeout;
            if deadline <= now {
                self.limit_hit(LimitKind::Idle);
                return Ok(Some(CloseReason::Idle));
            }
            let unread =
                self.input != Input::Open || (self.backpressured() && !self.reads_at_limit());
            if busy && unread {
                self.probe(cx)?;
                deadline = deadline.min(now + (timeout / 2).max(Duration::from_millis(10)));
            }
            if let Some(timer) = self.idle.as_mut() {
                timer.as_mut().reset(deadline);
            }
        }
    }

    /// Publishes the counters.
    fn publish(&mut self) {
        self.unmatched.report(&self.conn, self.metrics.as_deref());
        let s = &self.stats;
        let p = &mut self.peaks;
        let r = Ordering::Relaxed;
        s.bytes_read.fetch_add(std::mem::take(&mut p.bytes_read), r);
        s.bytes_written
            .fetch_add(std::mem::take(&mut p.bytes_written), r);
        s.messages_read
            .fetch_add(std::mem::take(&mut p.messages_read), r);
        s.messages_queued
            .fetch_add(std::mem::take(&mut p.messages_queued), r);
        s.pending_output_bytes.store(self.out.pending_bytes(), r);
        s.pending_output_messages.store(self.out.ends.len(), r);
        s.peak_output_bytes.fetch_max(p.output_bytes, r);
        s.peak_output_messages.fetch_max(p.output_messages, r);
        s.peak_in_flight.fetch_max(p.in_flight, r);
        s.peak_read_buffer.fetch_max(p.read_buffer, r);
        s.paused.store(self.paused, r);
    }
}

/// The reply to a frame over [`Limits::max_message_len`]: -32600 with the
/// limit, as the framers and the parser answer one.
fn too_large_reply(limit: usize, out: &mut Replies) {
    out.buf.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid Request\",\"data\":{\"reason\":\"message larger than the size limit\",\"limit\":",
    );
    out.buf.extend_from_slice(limit.to_string().as_bytes());
    out.buf.extend_from_slice(b"}}}");
    out.end_reply();
}

/// Serves one JSON-RPC connection on this process's stdin and stdout, as
/// an MCP server or an LSP server does, until stdin ends (every message
/// answered first, then it returns [`CloseReason::Eof`]) or `shutdown` is
/// triggered.
///
/// Only JSON-RPC goes to stdout; log to stderr. Handlers see the transport
/// `"stdio"`. [`Limits::idle_timeout`] does not apply: the client owns the
/// process and may stay quiet as long as it likes. The connection, its
/// limit hits and its buffers are counted in `metrics` when given (as
/// [`serve_tcp`] counts them).
///
/// tokio reads stdin on a blocking thread that cannot be interrupted: after
/// a shutdown that leaves stdin open, exit the process rather than wait for
/// the runtime to stop. Output goes through [`stdout()`], frames whole per
/// write, without std's line buffering. When the driver ends before its
/// last write has (a zero [`Limits::shutdown_grace`], say), that write
/// has [`FINAL_WRITE`] more before this returns.
///
/// ```no_run
/// use rpcwire::frame::Lines;
/// use rpcwire::server::{Limits, Shutdown, stream::serve_stdio};
/// use rpcwire::{Call, Dispatcher};
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     let d = Dispatcher::builder(())
///         .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
///         .build()
///         .expect("method names are unique");
///     eprintln!("ready"); // logs on stderr: stdout is the protocol's
///     let limits = Limits::default();
///     let framer = Lines::new().max_frame(limits.max_message_len);
///     serve_stdio(d, framer, limits, None, Shutdown::new()).await?;
///     Ok(())
/// }
/// ```
pub async fn serve_stdio<S, K, F>(
    dispatcher: Dispatcher<S, K>,
    framer: F,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
) -> io::Result<CloseReason>
where
    S: Send + Sync + 'static,
    F: Framer,
{
    let _open = metrics.as_ref().map(|m| m.connection());
    let mut driver = Driver::new(framer)
        .limits(limits)
        .idle_timeout(None)
        .context(Context::builder().transport("stdio"))
        .shutdown(shutdown);
    if let Some(metrics) = metrics {
        driver = driver.metrics(metrics);
    }
    let mut out = stdout();
    let reason = driver.run(&dispatcher, tokio::io::stdin(), &mut out).await;
    // A process that exits next would cut a write still under way on its
    // blocking thread; a client that reads nothing bounds the wait.
    let _ = tokio::time::timeout(FINAL_WRITE, tokio::io::AsyncWriteExt::flush(&mut out)).await;
    reason
}

/// How long [`serve_stdio`] waits, once its driver has ended, for a
/// write still under way (the driver gives up on one at the end of its
/// shutdown grace).
pub const FINAL_WRITE: Duration = Duration::from_secs(1);

/// Serves JSON-RPC on every connection `listener` accepts, each with a
/// framer from `framer` (called once per connection), until `shutdown` is
/// triggered; then stops accepting, lets each connection finish its calls
/// within [`Limits::shutdown_grace`] and write their replies, and returns
/// once all are closed.
///
/// At most [`Limits::max_connections`] connections are served at once;
/// one more is closed at once and counted ([`LimitKind::Connections`]).
/// Handlers see the transport `"tcp"` and the client's address
/// ([`Context::peer_addr`]). Small replies are not delayed (`TCP_NODELAY`).
/// Errors of one connection end that connection only; accept errors (out
/// of file descriptors, say) pause accepting briefly. For bursts of
/// connections, make the listener with a longer backlog than
/// `TcpListener::bind`'s 128 (`tokio::net::TcpSocket::listen`): past it,
/// new connections wait for the client to retry, a second or more.
///
/// `metrics`, if given, counts connections and limits (`None`: they are
/// counted nowhere, as with [`http::serve`](super::http::serve)); calls
/// are counted by the dispatcher, given the same [`Metrics`] as its
/// observer ([`DispatcherBuilder::observer`](crate::dispatch::DispatcherBuilder::observer)).
///
/// ```
/// use rpcwire::frame::Lines;
/// use rpcwire::server::{Limits, Metrics, Shutdown, stream::serve_tcp};
/// use rpcwire::{Call, Dispatcher};
/// use std::sync::Arc;
/// use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let (metrics, shutdown) = (Arc::new(Metrics::default()), Shutdown::new());
/// let d = Dispatcher::builder(())
///     .method("whoami", |c: Call<'_, ()>| c.reply.str(c.ctx.transport()))
///     .observer(metrics.clone())
///     .build()?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let addr = listener.local_addr()?;
/// let server = tokio::spawn(serve_tcp(listener, d, Lines::new, Limits::default(), Some(metrics.clone()), shutdown.clone()));
///
/// let mut client = BufReader::new(tokio::net::TcpStream::connect(addr).await?);
/// client.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"whoami\"}\n").await?;
/// let mut reply = String::new();
/// client.read_line(&mut reply).await?;
/// assert_eq!(reply, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"tcp\"}\n");
///
/// shutdown.trigger();
/// server.await?;
/// assert_eq!(metrics.connections_open(), 0);
/// assert_eq!(metrics.call_count("whoami"), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub async fn serve_tcp<S, K, F, M>(
    listener: tokio::net::TcpListener,
    dispatcher: Dispatcher<S, K>,
    framer: M,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
) where
    S: Send + Sync + 'static,
    K: 'static,
    F: Framer + Send + 'static,
    M: FnMut() -> F,
{
    let subscriptions = SubscriptionConfig::default();
    serve_tcp_with(
        listener,
        dispatcher,
        framer,
        limits,
        metrics,
        shutdown,
        subscriptions,
    )
    .await;
}

/// [`serve_tcp`], each connection's subscriptions behaving as
/// `subscriptions` says (its slow-client policy, buffers and
/// notification method; [`serve_tcp`] gives every connection
/// [`SubscriptionConfig::default`], whose slow clients lose the oldest
/// notifications: [`SlowPolicy::Close`](super::subscriptions::SlowPolicy::Close)
/// ends their subscriptions with an error instead).
pub async fn serve_tcp_with<S, K, F, M>(
    listener: tokio::net::TcpListener,
    dispatcher: Dispatcher<S, K>,
    framer: M,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
    subscriptions: SubscriptionConfig,
) where
    S: Send + Sync + 'static,
    K: 'static,
    F: Framer + Send + 'static,
    M: FnMut() -> F,
{
    // The loop owns the listener: dropping it refuses new connections.
    let keepalive = limits.tcp_keepalive;
    let accept = move |cx: &mut TaskContext<'_>| {
        listener.poll_accept(cx).map_ok(|(stream, addr)| {
            super::accepted(&stream, keepalive);
            let context = Context::builder().transport("tcp").peer_addr(addr);
            (stream, context)
        })
    };
    let serve = |mut stream: tokio::net::TcpStream, driver: Driver<F>, d: Dispatcher<S, K>| async move {
        let (r, w) = stream.split();
        driver.run(&d, r, w).await
    };
    let every = EveryConnection {
        limits,
        metrics,
        shutdown,
        subscriptions,
    };
    accept_loop(accept, serve, dispatcher, framer, every).await;
}

/// Serves JSON-RPC on every connection a Unix-domain socket `listener`
/// accepts (the way geth and reth serve IPC); otherwise as [`serve_tcp`].
///
/// Handlers see the transport `"ipc"`, and as extensions the client's
/// socket address (`tokio::net::unix::SocketAddr`) and, where the system
/// tells, its credentials (`tokio::net::unix::UCred`: user, group,
/// process).
///
/// ```
/// use rpcwire::frame::Concatenated;
/// use rpcwire::server::{Limits, Shutdown, stream::serve_unix};
/// use rpcwire::{Call, Dispatcher};
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let d = Dispatcher::builder(())
///     .method("uid", |c: Call<'_, ()>| {
///         let cred = c.ctx.extension::<tokio::net::unix::UCred>().expect("Linux tells");
///         c.reply.u64(cred.uid().into())
///     })
///     .build()?;
/// let dir = std::env::temp_dir().join(format!("rpcwire-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("rpc.ipc");
/// let _ = std::fs::remove_file(&path);
/// let listener = tokio::net::UnixListener::bind(&path)?;
/// let shutdown = Shutdown::new();
/// let server = tokio::spawn(serve_unix(listener, d, Concatenated::new, Limits::default(), None, shutdown.clone()));
///
/// let mut client = tokio::net::UnixStream::connect(&path).await?;
/// client.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"uid"}"#).await?;
/// client.shutdown().await?;
/// let mut reply = String::new();
/// client.read_to_string(&mut reply).await?;
/// assert!(reply.starts_with(r#"{"jsonrpc":"2.0","id":1,"result":"#));
///
/// shutdown.trigger();
/// server.await?;
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub async fn serve_unix<S, K, F, M>(
    listener: tokio::net::UnixListener,
    dispatcher: Dispatcher<S, K>,
    framer: M,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
) where
    S: Send + Sync + 'static,
    K: 'static,
    F: Framer + Send + 'static,
    M: FnMut() -> F,
{
    let subscriptions = SubscriptionConfig::default();
    serve_unix_with(
        listener,
        dispatcher,
        framer,
        limits,
        metrics,
        shutdown,
        subscriptions,
    )
    .await;
}

/// [`serve_unix`], each connection's subscriptions behaving as
/// `subscriptions` says (as [`serve_tcp_with`]).
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub async fn serve_unix_with<S, K, F, M>(
    listener: tokio::net::UnixListener,
    dispatcher: Dispatcher<S, K>,
    framer: M,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
    subscriptions: SubscriptionConfig,
) where
    S: Send + Sync + 'static,
    K: 'static,
    F: Framer + Send + 'static,
    M: FnMut() -> F,
{
    // The loop owns the listener: dropping it refuses new connections.
    let accept = move |cx: &mut TaskContext<'_>| {
        listener.poll_accept(cx).map_ok(|(stream, addr)| {
            let mut context = Context::builder().transport("ipc").extension(addr);
            if let Ok(cred) = stream.peer_cred() {
                context = context.extension(cred);
            }
            (stream, context)
        })
    };
    let serve = |mut stream: tokio::net::UnixStream, driver: Driver<F>, d: Dispatcher<S, K>| async move {
        let (r, w) = stream.split();
        driver.run(&d, r, w).await
    };
    let every = EveryConnection {
        limits,
        metrics,
        shutdown,
        subscriptions,
    };
    accept_loop(accept, serve, dispatcher, framer, every).await;
}

/// The accept loop shared by [`serve_tcp`] and [`serve_unix`]: accepts
/// with `accept`, refuses connections past the limit, serves each on a task
/// of its own with `serve`, and on shutdown stops accepting and waits for
/// the connections to close.
/// What the stream servers give every connection they accept.
struct EveryConnection {
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
    subscriptions: SubscriptionConfig,
}

async fn accept_loop<T, A, V, Fut, S, K, F, M>(
    mut accept: A,
    serve: V,
    dispatcher: Dispatcher<S, K>,
    mut framer: M,
    every: EveryConnection,
) where
    A: FnMut(&mut TaskContext<'_>) -> Poll<io::Result<(T, ContextBuilder)>>,
    V: Fn(T, Driver<F>, Dispatcher<S, K>) -> Fut,
    Fut: Future<Output = io::Result<CloseReason>> + Send + 'static,
    S: Send + Sync + 'static,
    K: 'static,
    F: Framer,
    M: FnMut() -> F,
{
    let EveryConnection {
        limits,
        metrics,
        shutdown,
        subscriptions,
    } = every;
    // A semaphore holds at most `MAX_PERMITS`: a larger limit (`usize::MAX`
    // for "no limit") is that many, not a panic; 0 is 1, as on every server.
    let max_connections = limits
        .max_connections
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(shutdown.triggered());
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = std::future::poll_fn(&mut accept) => accepted,
        };
        let (stream, context) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tokio::select! {
                    () = &mut stop => break,
                    () = super::accept_backoff(&e) => continue,
                }
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            if let Some(m) = &metrics {
                m.limit_hit(LimitKind::Connections);
            }
            drop(stream);
            continue;
        };
        let open = metrics.as_ref().map(|m| m.connection());
        let mut driver = Driver::new(framer())
            .limits(limits.clone())
            .context(context)
            .shutdown(shutdown.clone())
            .subscriptions(subscriptions.clone());
        if let Some(m) = &metrics {
            driver = driver.metrics(Arc::clone(m));
        }
        let served = serve(stream, driver, dispatcher.clone());
        connections.spawn(async move {
            // An error ends this connection only: the client is gone.
            let _ = served.await;
            drop((permit, open));
        });
    }
    // New connections are refused from now on; those open finish.
    drop(accept);
    while connections.join_next().await.is_some() {}
}
