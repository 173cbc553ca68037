//! MCP's Streamable HTTP transport: one endpoint (`/mcp` by default) on
//! hyper 1.x.
//!
//! What a client gets, by case:
//!
//! | request | answer |
//! | --- | --- |
//! | with [`HttpConfig::allowed_hosts`] (none by default): its host (an absolute-form target's authority, else `Host`) a name not listed; IP addresses are served | 403, -32600 without id, `data.host` naming it, then the connection closes: as rpcwire's JSON-RPC HTTP server answers it (see [`hosts`](crate::server::hosts)); checked first once the path matched (any method, with a session or not), before the body is read |
//! | an `Origin` header that is not a localhost origin (`localhost`, `127.0.0.1`, `[::1]`, any scheme and port) or one of [`HttpConfig::allowed_origins`] | 403, a JSON-RPC error without id |
//! | an HTTP/1.1 request without `Host`, or with two (RFC 9112 §3.2), to [`serve`] ([`Endpoint::handle`] leaves it to its server, unless [`HttpConfig::allowed_hosts`] is set) | 400, -32600, then the connection closes |
//! | `POST` whose `Accept` does not take both `application/json` and `text/event-stream` (`*/*`, `application/*`, `text/*` count) | 406 |
//! | `POST` whose `Content-Type` is not `application/json` | 415 |
//! | `POST` with a `Content-Encoding` other than `identity` | 415, -32600 with `data.reason`, `Accept-Encoding: identity` |
//! | a body over [`HttpConfig::max_body`] | 413 |
//! | a body that stops coming for [`HttpConfig::body_timeout`] | 408, -32600 with `data.timeout_ms`, then the connection closes |
//! | a request head slower than [`HttpConfig::header_timeout`] | the connection closes |
//! | a body that is not JSON | 400, -32700 with `data.offset` and `data.reason` |
//! | a JSON array (a batch) | 400, one -32600 |
//! | a notification, or a response (to a request a call of the session sent the client) | 202, no body |
//! | JSON that is none of request, notification, response (`5`, `{}`, a wrong `jsonrpc`, a response without `result` or `error`) | 400, -32600 |
//! | a request answered without notifications first | 200, `application/json` |
//! | a request whose id a running request of the same session uses | 200, -32600 with that id (the running one goes on) |
//! | a request whose call sends progress or log notifications before its result | 200, `text/event-stream`: the notifications, then the response, then the stream ends |
//! | `GET` with a session (initialize lifecycle), `Accept: text/event-stream` | 200, an SSE stream carrying `notifications/tools/list_changed` (a session may open several: each message goes to one of them, the newest still read, not to each) |
//! | `GET` or `DELETE` without `Mcp-Session-Id` | 405 |
//! | `DELETE` with a session | 200, the session ends: its calls still running are cancelled (their POSTs' streams end without a reply) |
//! | `OPTIONS` with `Origin` and `Access-Control-Request-Method` (a browser's CORS preflight) from one of [`HttpConfig::allowed_origins`] | 204, `Access-Control-Allow-Origin` (that origin), `-Allow-Methods: GET, POST, DELETE, OPTIONS`, `-Allow-Headers` (those asked for), `-Max-Age: 600` |
//! | any other method | 405 |
//! | any request above with an `Origin` of [`HttpConfig::allowed_origins`] | also `Access-Control-Allow-Origin` (that origin), `Access-Control-Expose-Headers: mcp-session-id, mcp-protocol-version` (so that a page's client can read the session id), `Vary: origin` (other localhost origins are served without CORS: a browser lets their pages send no JSON POST) |
//!
//! The initialize lifecycle (2025-06-18, 2025-11-25): a successful
//! `initialize` (a `POST` without session) returns a new `Mcp-Session-Id`
//! header; every later request must carry it (400 without, 404 when unknown
//! or ended). A session ends on `DELETE`, when pushed out past
//! [`HttpConfig::max_sessions`], or after
//! [`HttpConfig::session_idle_timeout`] (30 minutes) with nothing running.
//! An `MCP-Protocol-Version` header naming a revision this layer
//! does not speak is 400 (a request without the header is served in the
//! session's revision). `notifications/cancelled` stops the named call of
//! the session, whose response stream then ends without a reply. A client
//! that closes a call's response stream has not cancelled it (the
//! transport's rule): the call runs on, its reply dropped, until it ends,
//! is cancelled, or its session ends (deleted or evicted). A call outside a
//! session (2026-07-28) has no other way to be cancelled: closing its
//! stream stops it.
//!
//! A tool's requests to the client (sampling, elicitation, `roots/list`,
//! `ping`, through [`Context::peer`](crate::Context::peer)) go out on its
//! POST's event stream, with ids unique in the session; the client POSTs
//! each answer with the session's `Mcp-Session-Id`, and it reaches the
//! call that asked (an answer no call waits for is dropped, still 202).
//! When the session ends (`DELETE`, or evicted), requests still waiting
//! fail at once with [`PeerError::Closed`].
//! A request sent to the client (through
//! [`ToolContext::ask_client`](super::ToolContext::ask_client) or the
//! call's raw [`Peer`]) that the call stops waiting for (its timeout, the
//! call cancelled or timed out, the session ended) is followed on the
//! same POST stream by `notifications/cancelled` naming it.
//! Revision 2026-07-28 has no requests from the server (and no session to
//! answer them in): there they fail at once with `Closed`, and nothing is
//! sent.
//!
//! Revision 2026-07-28 (a request whose `_meta` names
//! `io.modelcontextprotocol/protocolVersion`): no sessions (an
//! `Mcp-Session-Id` header is ignored). `MCP-Protocol-Version` and
//! `Mcp-Method` must be present and match the body, and so must `Mcp-Name`
//! for `tools/call` (plain or `=?base64?…?=`): otherwise 400 with -32020
//! `HeaderMismatch`. An unsupported version is 400 with -32022 and
//! `data.supported`; an unknown method is 404 with -32601. Closing the
//! response stream cancels the call.

use std::borrow::Cow;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::handlers::unsupported_version;
use super::session::Registered;
use super::{
    LEGACY_VERSIONS, MODERN_VERSION, McpServer, SUPPORTED_VERSIONS, SessionState, codes, is_batch,
    write_batch_refusal,
};
use crate::RpcError;
use crate::peer::{Outbound, Peer, PeerError, SendError};
use crate::server::hosts::{AllowedHosts, Refusal};

/// The header carrying the session id (initialize lifecycle).
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The header carrying the protocol revision.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The header mirroring the method (2026-07-28).
pub const METHOD_HEADER: &str = "mcp-method";
/// The header mirroring `params.name` of `tools/call` (2026-07-28).
pub const NAME_HEADER: &str = "mcp-name";

/// How the endpoint is served. A wait of `Duration::MAX` means no limit
/// (each is taken as at most thirty years).
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The endpoint's path (default `/mcp`); other paths are 404.
    pub path: String,
    /// Origins accepted besides localhost ones, compared exactly
    /// (`https://app.example`). Every other `Origin` is refused with 403:
    /// the defence against DNS rebinding that the specification requires.
    /// Pages of these origins (not other localhost ones) get CORS (a
    /// preflight answered, the answers readable, `Mcp-Session-Id`
    /// exposed), so a client running in a browser works: list
    /// `http://localhost:6274` for the MCP Inspector's direct connection.
    pub allowed_origins: Vec<String>,
    /// The host names the endpoint answers to (a request's `Host`, or its
    /// target's authority when it has one; any port, any case; IP
    /// addresses always), or `None` (the default, the same as
    /// `Some(AllowedHosts::any())`): any, as everywhere in rpcwire. Others
    /// get `403`, a -32600 body naming the host, as from rpcwire's
    /// JSON-RPC HTTP server; see [`hosts`](crate::server::hosts) for what is
    /// answered how, why there is no check by default, and when to turn it
    /// on (an endpoint on a loopback or private address that browsers can
    /// reach). The check behind the official MCP SDKs' DNS-rebinding
    /// protection: a page of an attacker's domain that makes the domain
    /// resolve to `127.0.0.1` once loaded (DNS rebinding) reaches the
    /// endpoint with same-origin requests, which
    /// [`allowed_origins`](HttpConfig::allowed_origins) cannot always
    /// tell apart (browsers send no `Origin` on some, a same-origin `GET`
    /// among them); each carries the attacker's name in `Host`.
    ///
    /// ```
    /// use rpcwire::mcp::http::HttpConfig;
    /// use rpcwire::server::hosts::AllowedHosts;
    /// let config = HttpConfig {
    ///     allowed_hosts: Some(AllowedHosts::list(["localhost"])?),
    ///     ..HttpConfig::default()
    /// };
    /// # let _ = config;
    /// # Ok::<(), rpcwire::server::hosts::InvalidHost>(())
    /// ```
    pub allowed_hosts: Option<AllowedHosts>,
    /// The largest request body, in bytes (default 4 MiB); larger ones are
    /// 413.
    pub max_body: usize,
    /// Sessions open at once (default 10,000). A new one past the limit
    /// ends the session unused for longest (its client gets 404 and, as
    /// the specification says, starts a new one), so that sessions nobody
    /// ended cannot lock new clients out, even before they expire
    /// ([`session_idle_timeout`](HttpConfig::session_idle_timeout)).
    pub max_sessions: usize,
    /// How long a session may go with no request in flight (no call
    /// running, no GET stream open) before it ends (default 30 minutes,
    /// as the official Python SDK's server; `None`: never), so that
    /// sessions their clients forgot do not hold their memory until
    /// [`max_sessions`](HttpConfig::max_sessions) pushes them out. Its
    /// client then gets 404 and starts a new session. Idle sessions are
    /// looked for as requests arrive (at most every tenth of the timeout,
    /// and every 10 s), so an endpoint with no traffic keeps them, at no
    /// cost, until its next request.
    pub session_idle_timeout: Option<std::time::Duration>,
    /// Connections [`serve`] serves at once (default 10,000; 0 is taken as
    /// 1); one more is closed at once, so that clients that never finish
    /// cannot take every file descriptor.
    pub max_connections: usize,
    /// How long a request's head may take to arrive (default 30 s), on a
    /// new connection and between the requests of a kept-alive one: a
    /// client sending it a byte at a time (slowloris) is disconnected.
    pub header_timeout: std::time::Duration,
    /// How long a request's body may take to arrive once its head has
    /// (default 30 s): a client that stops sending it midway gets `408` and
    /// is disconnected, instead of holding its connection (and its place
    /// among [`max_connections`](HttpConfig::max_connections)) forever.
    pub body_timeout: std::time::Duration,
    /// How long [`serve`]'s writes may wait for a client that takes none
    /// of what it is sent (default 30 s): past it the connection is
    /// dropped, so that a client that stops reading a reply (a large
    /// result, an event stream) while keeping its connection open does not
    /// hold it, its call and its place among
    /// [`max_connections`](HttpConfig::max_connections) for good.
    pub write_timeout: std::time::Duration,
    /// TCP keepalive on [`serve`]'s connections (default 15 s), so that a
    /// client that vanished without closing (its GET stream open) is
    /// found: as [`Limits::tcp_keepalive`](crate::server::Limits::tcp_keepalive).
    pub tcp_keepalive: Option<std::time::Duration>,
    /// How long [`serve`]'s connections have, once it is told to stop, to
    /// finish the requests they are answering (default 10 s, as
    /// [`Limits::shutdown_grace`](crate::server::Limits::shutdown_grace)).
    pub shutdown_grace: std::time::Duration,
    /// How long a response may send nothing (default 15 s): a call whose
    /// reply has not come by then is answered as an event stream, its
    /// headers sent at once, and every event stream (a call's, the GET
    /// stream) gets an SSE comment (`: keepalive`) whenever it has sent
    /// nothing for this long. Proxies end a response that sends nothing
    /// for a while (nginx's `proxy_read_timeout`: 60 s), and so do both
    /// official SDK clients (read timeouts of 300 s): a long tool call
    /// without progress notifications lost its result.
    pub stream_keepalive: std::time::Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            path: "/mcp".into(),
            allowed_origins: Vec::new(),
            allowed_hosts: None,
            max_body: 4 << 20,
            max_sessions: 10_000,
            session_idle_timeout: Some(std::time::Duration::from_secs(30 * 60)),
            max_connections: 10_000,
            header_timeout: std::time::Duration::from_secs(30),
            body_timeout: std::time::Duration::from_secs(30),
            write_timeout: std::time::Duration::from_secs(30),
            tcp_keepalive: Some(crate::server::DEFAULT_TCP_KEEPALIVE),
            shutdown_grace: std::time::Duration::from_secs(10),
            stream_keepalive: std::time::Duration::from_secs(15),
        }
    }
}

/// The Streamable HTTP endpoint of one [`McpServer`]: sessions and the
/// rules above. Cheap to clone; serve it with [`serve`] or call
/// [`handle`](Endpoint::handle) from a hyper service of your own.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointInner>,
}

struct EndpointInner {
    server: McpServer,
    config: HttpConfig,
    sessions: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// A counter that orders session uses (no clock read per request).
    ticks: AtomicU64,
    /// When the endpoint was made: the origin of the sessions' idle clocks.
    epoch: std::time::Instant,
    /// When (ms after `epoch`) idle sessions are next looked for.
    next_reap: AtomicU64,
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Its client sent `DELETE`: done with it and its calls.
    Deleted,
    /// Past `max_sessions`, as the one unused for longest.
    Evicted,
    /// Idle for `session_idle_timeout` (nothing of it running).
    Expired,
    /// [`serve`] was told to stop: as [`Evicted`](Ending::Evicted), its
    /// calls finish within the grace.
    Stopped,
}

struct HttpSession {
    state: Arc<SessionState>,
    /// Says how the session ended, when it does (closing its GET
    /// streams). Set with `send_replace`: a plain `send` with nobody
    /// subscribed stores nothing, and a subscriber that comes after the
    /// end (a GET that found the session just before a `DELETE`) would
    /// read it as running for good.
    ended: tokio::sync::watch::Sender<Option<Ending>>,
    /// When it was last used: a tick of the endpoint's session clock
    /// (`EndpointInner::ticks`), for evicting the one unused for longest.
    used: AtomicU64,
    /// Its calls running and GET streams open: while any is, it is not
    /// idle.
    busy: AtomicUsize,
    /// When (ms after `epoch`) it was last looked up or last stopped being
    /// busy: its idle clock.
    active: AtomicU64,
    /// The endpoint's `epoch`.
    epoch: std::time::Instant,
    /// Its open GET streams, oldest first, by a number of their own: a
    /// message goes to one of them (the newest whose client still reads:
    /// a client that opens another stream has often lost the one before
    /// without the server noticing yet), never to each (the
    /// specification's "MUST NOT broadcast").
    streams: Mutex<Vec<(u64, mpsc::Sender<Bytes>)>>,
    next_stream: AtomicU64,
    /// The peers of the session's running calls: a response the client
    /// POSTs to the session goes to the one that sent its id.
    asking: Mutex<Calls>,
    next_call: AtomicU64,
    /// The ids of the requests the session's calls send the client, one
    /// count for all of them (each answer must name one call's request).
    request_ids: Arc<AtomicU64>,
    /// Its requests running at once, at most the server's `max_in_flight`
    /// (each POST is a connection of its own to the dispatcher, whose cap
    /// counts per connection): more wait for a place.
    calls: Arc<tokio::sync::Semaphore>,
}

impl HttpSession {
    fn new(
        state: Arc<SessionState>,
        used: u64,
        max_in_flight: usize,
        epoch: std::time::Instant,
    ) -> HttpSession {
        HttpSession {
            busy: AtomicUsize::new(0),
            active: AtomicU64::new(millis_since(epoch)),
            epoch,
            calls: Arc::new(tokio::sync::Semaphore::new(
                max_in_flight.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            state,
            ended: tokio::sync::watch::channel(None).0,
            used: AtomicU64::new(used),
            streams: Mutex::new(Vec::new()),
            next_stream: AtomicU64::new(0),
            asking: Mutex::new(Calls::default()),
            next_call: AtomicU64::new(0),
            request_ids: Arc::new(AtomicU64::new(1)),
        }
    }

    fn asking(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.asking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a call's peer, until the returned guard goes; a session that
    /// ended closes it at once.
    /// Restarts the idle clock.
    fn touch(&self) {
        self.active
            .store(millis_since(self.epoch), Ordering::Relaxed);
    }

    /// A call started or a GET stream opened: not idle until it ends.
    fn busy(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A call or GET stream ended; the idle clock starts when the last one
    /// does.
    fn unbusy(&self) {
        self.touch();
        self.busy.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether it has had nothing running for `timeout` at `now` (ms
    /// after `epoch`).
    fn idle_for(&self, timeout: std::time::Duration, now: u64) -> bool {
        self.busy.load(Ordering::Acquire) == 0
            && now.saturating_sub(self.active.load(Ordering::Relaxed))
                >= u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
    }

    fn enlist(self: &Arc<Self>, peer: &Peer) -> Asking {
        self.busy();
        let key = self.next_call.fetch_add(1, Ordering::Relaxed);
        let ended = {
            let mut calls = self.asking();
            if !calls.ended {
                calls.peers.push((key, peer.clone()));
            }
            calls.ended
        };
        if ended {
            peer.close();
        }
        Asking {
            session: Some((Arc::clone(self), key)),
            peer: peer.clone(),
        }
    }

    /// Ends the session: its GET streams close, and its calls' requests to
    /// the client fail at once (no answer can reach them any more). When
    /// its client ended it, its running calls are cancelled first (their
    /// POSTs end with no reply, as for `notifications/cancelled`); the
    /// calls of an evicted session run on while their POSTs are open, and
    /// get their replies (a call whose POST closed stops).
    fn end(&self, ending: Ending) {
        self.ended.send_replace(Some(ending));
        if ending == Ending::Deleted {
            // Before the peers close: a call then sees its cancellation,
            // not its requests failing, whichever it is polled for first.
            self.state.end();
        }
        let peers = {
            let mut calls = self.asking();
            calls.ended = true;
            std::mem::take(&mut calls.peers)
        };
        for (_, peer) in peers {
            peer.close();
        }
    }

    /// Hands the response in `body` (one message) to the call that sent
    /// its request; answers nobody waits for are dropped. An invalid
    /// response ends the request it names (its answer cannot be read, and
    /// waiting on would last until the request's deadline); what was wrong
    /// with it is returned.
    fn answer(&self, body: &Bytes) -> Result<(), crate::Error> {
        use crate::message::{Incoming, Message};
        let arena = bumpalo::Bump::new();
        // Batches were refused before (400).
        let Message::Single(incoming) = crate::Parser::new().parse_incoming(body, &arena)? else {
            return Ok(());
        };
        let peers =
            || -> Vec<Peer> { self.asking().peers.iter().map(|(_, p)| p.clone()).collect() };
        // Ids are the session's: one peer at most waits for each.
        match incoming {
            Incoming::Response(r) => {
                let _ = peers().iter().any(|p| p.complete(Some(body), r));
                Ok(())
            }
            Incoming::InvalidResponse(r) => {
                if let Some(id) = r.id() {
                    let failed = PeerError::InvalidResponse(r.error());
                    let _ = peers().iter().any(|p| p.fail(id, failed));
                }
                Err(r.error())
            }
            // A bare answer (`"jsonrpc"` and an id, nothing else a
            // message needs): it ends the request it names, as an invalid
            // response does.
            Incoming::Invalid(i) => {
                let missing = crate::error::ErrorKind::Missing(crate::error::Member::Result);
                let error = crate::Error::new(missing, i.error().offset());
                let _ = peers()
                    .iter()
                    .any(|p| p.fail(i.id(), PeerError::InvalidResponse(error)));
                Err(error)
            }
            // Only response-shaped bodies are brought here.
            Incoming::Request(_) => Ok(()),
        }
    }

    /// Whether `body` is a bare answer to a request a call of this session
    /// sent: `"jsonrpc":"2.0"` and an id the session gave, no `method`,
    /// `result` or `error` (the dispatcher would answer the client's own
    /// answer -32600, and the call would wait on).
    fn is_bare_answer(&self, body: &[u8]) -> bool {
        use crate::message::{Incoming, Message};
        let arena = bumpalo::Bump::new();
        let Ok(Message::Single(Incoming::Invalid(i))) =
            crate::Parser::new().parse_incoming(body, &arena)
        else {
            return false;
        };
        let given = 1..self.request_ids.load(Ordering::Relaxed);
        i.error().kind() == crate::error::ErrorKind::Missing(crate::error::Member::Method)
            && i.id().as_u64().is_some_and(|id| given.contains(&id))
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, Vec<(u64, mpsc::Sender<Bytes>)>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether stream `id` is the one that carries the session's next
    /// message: the newest of those whose client has not gone.
    fn carries(&self, id: u64) -> bool {
        self.streams()
            .iter()
            .rev()
            .find(|(_, tx)| !tx.is_closed())
            .is_some_and(|(first, _)| *first == id)
    }
}

/// The calls of a session that may ask its client something.
#[derive(Default)]
struct Calls {
    /// The session ended: calls that start now are not listed.
    ended: bool,
    /// Their peers, by a number of their own.
    peers: Vec<(u64, Peer)>,
}

/// A call's peer, listed with its session while the call runs: when the
/// call ends it is taken off the list and closed (no answer reaches it
/// any more).
struct Asking {
    session: Option<(Arc<HttpSession>, u64)>,
    peer: Peer,
}

impl Drop for Asking {
    fn drop(&mut self) {
        if let Some((session, key)) = &self.session {
            session.asking().peers.retain(|(k, _)| k != key);
            session.unbusy();
        }
        self.peer.close();
    }
}

/// Takes a GET stream off its session's list when its task ends.
struct StreamEntry {
    session: Arc<HttpSession>,
    id: u64,
}

impl Drop for StreamEntry {
    fn drop(&mut self) {
        self.session.streams().retain(|(id, _)| *id != self.id);
        self.session.unbusy();
    }
}

/// Milliseconds from `epoch` to now.
fn millis_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The body of every answer: a whole body, or a stream fed by a call.
pub enum Body {
    /// Nothing, or one chunk.
    Full(Option<Bytes>),
    /// Server-sent events (or one JSON reply) from a running call.
    Stream(mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(chunk) => Poll::Ready(chunk.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Full(b) => f.debug_tuple("Full").field(b).finish(),
            Body::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// Serves `endpoint` on `listener` until `shutdown` completes, at most
/// [`HttpConfig::max_connections`] at once, each request head within
/// [`HttpConfig::header_timeout`] and each body within
/// [`HttpConfig::body_timeout`]. An HTTP/1.1 request without one `Host`
/// is answered `400` here, before the endpoint sees it (RFC 9112 §3.2 asks
/// it of the server, as rpcwire's HTTP servers do).
///
/// Then it drains: accepting stops; every session ends (its GET streams
/// close; its calls' requests to the client fail, as when a session is
/// pushed out); each connection finishes the request it is answering, its
/// reply saying `connection: close`, and reads no more; connections still
/// open after [`HttpConfig::shutdown_grace`] are dropped with their calls.
/// It returns once no connection is left.
pub async fn serve(
    endpoint: Endpoint,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let config = &endpoint.inner.config;
    let max_connections = config
        .max_connections
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
        .min(u32::MAX as usize);
    let places = Arc::new(tokio::sync::Semaphore::new(max_connections));
    // What the connections are told: 0 serve, 1 finish and close, 2 drop.
    let (stage, _) = tokio::sync::watch::channel(0u8);
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            // The shutdown first: with connections waiting, an unbiased
            // select took one after the shutdown had completed half the
            // time (and served it).
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    crate::server::accept_backoff(&e).await;
                    continue;
                }
            },
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        crate::server::accepted(&stream, config.tcp_keepalive);
        let endpoint = endpoint.clone();
        let http1 = http1.clone();
        let mut told = stage.subscribe();
        let write_timeout = config.write_timeout;
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let endpoint = endpoint.clone();
                async move {
                    // The server's rule, as rpcwire's HTTP servers apply it.
                    if crate::server::hosts::lacks_one_host(&req) {
                        return Ok::<_, Infallible>(no_one_host());
                    }
                    Ok(endpoint.handle(req).await)
                }
            });
            let stream = WriteDeadline::new(stream, write_timeout);
            let conn = http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    changed = told.changed() => {
                        if changed.is_err() || *told.borrow_and_update() >= 2 {
                            break;
                        }
                        if !closing {
                            conn.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                }
            }
            drop(place);
        });
    }
    drop(listener);
    stage.send_replace(1);
    endpoint.end_sessions();
    let all = max_connections as u32;
    let grace = endpoint.inner.config.shutdown_grace;
    if tokio::time::timeout(grace, places.acquire_many(all))
        .await
        .is_err()
    {
        stage.send_replace(2);
        let _ = places.acquire_many(all).await;
    }
    Ok(())
}

/// A connection whose writes wait for its client at most `limit` at a
/// time: past it they fail (`TimedOut`), and hyper drops the connection.
struct WriteDeadline<T> {
    io: T,
    limit: std::time::Duration,
    /// Allocated at the first wait and reset at later ones.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `timer` times the wait now going on.
    waiting: bool,
}

impl<T> WriteDeadline<T> {
    fn new(io: T, limit: std::time::Duration) -> Self {
        WriteDeadline {
            io,
            limit,
            timer: None,
            waiting: false,
        }
    }

    /// `r`, or the timeout's error when the write has waited too long.
    fn timed<R>(
        &mut self,
        cx: &mut TaskContext<'_>,
        r: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        if r.is_ready() {
            self.waiting = false;
            return r;
        }
        let due = tokio::time::Instant::now() + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if !std::mem::replace(&mut self.waiting, true) {
            timer.as_mut().reset(due);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, r)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, r)
    }
}

impl McpServer {
    /// Serves Streamable HTTP at `addr` (path `/mcp`), forever.
    pub async fn serve_http(&self, addr: SocketAddr) -> std::io::Result<()> {
        let listener = TcpListener::bind(addr).await?;
        serve(
            Endpoint::new(self.clone(), HttpConfig::default()),
            listener,
            std::future::pending(),
        )
        .await
    }
}

/// A per-request outbound queue: notifications of the call, then its
/// reply, as SSE events or one JSON body. Each message sent also wakes the
/// call's task (`sent`), which then sees the deadline of a request just
/// made ([`Peer::next_deadline`]).
struct CallOutbound {
    events: mpsc::Sender<Event>,
    sent: Arc<tokio::sync::Notify>,
    /// Whether what the call sends can reach its client: not for a
    /// message without id, answered by a bare 202 (its notifications were
    /// dropped while the tool was told they went out).
    answerable: bool,
}

enum Event {
    Note(Bytes),
    Reply(Vec<u8>),
}

/// A call's events, as its POST's answer takes them.
struct CallEvents {
    rx: mpsc::Receiver<Event>,
    /// Closed when the call's task ends, however it does.
    task: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Events queued when the task ended: the last ones taken.
    left: usize,
}

impl CallEvents {
    /// The next event; `None` once the task has ended and what it had
    /// queued is taken. Not the channel's closing: a clone of the call's
    /// context that a tool keeps (handed to a task of its own, say) holds
    /// a sender for as long as it lives, and the POST waited for it (the
    /// 202 of a notification, the end of a cancelled call's stream); nor
    /// what such a clone sends after the task ended.
    async fn next(&mut self) -> Option<Event> {
        if let Some(task) = &mut self.task {
            tokio::select! {
                biased;
                // Everything the task sent is queued by then.
                _ = task => {
                    self.task = None;
                    self.left = self.rx.len();
                }
                event = self.rx.recv() => return event,
            }
        }
        self.left = self.left.checked_sub(1)?;
        self.rx.try_recv().ok()
    }
}

impl Outbound for CallOutbound {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        if !self.answerable {
            return Err(SendError::Closed);
        }
        self.sent.notify_one();
        self.events
            .try_send(Event::Note(message))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => SendError::Full,
                mpsc::error::TrySendError::Closed(_) => SendError::Closed,
            })
    }
}

/// What the endpoint reads of a message before dispatching it.
#[derive(Deserialize)]
struct Peek<'a> {
    /// `Some` whenever the member is there, `null` included (a request
    /// with a null id is a request, answered as over stdio).
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

impl Peek<'_> {
    /// An object that is a response, valid or not: `result` or `error` and
    /// no `method`, as the dispatcher tells them apart (the session reads
    /// it: a valid one goes to the call that asked, an invalid one ends
    /// that call's request and is refused).
    fn looks_like_response(&self) -> bool {
        self.method.is_none() && (self.result.is_some() || self.error.is_some())
    }
}

/// A member that is there, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize, Default)]
struct PeekParams<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<PeekMeta<'a>>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct PeekMeta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    version: Option<&'a RawValue>,
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The answer to an HTTP/1.1 request without one `Host`: what rpcwire's
/// HTTP servers answer (`server::hosts`), closing the connection (the body
/// is not read).
fn no_one_host() -> Response<Body> {
    let body = crate::server::hosts::NO_HOST_BODY.as_bytes().to_vec();
    let mut r = json_response(StatusCode::BAD_REQUEST, body);
    r.headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The answer to a request [`HttpConfig::allowed_hosts`] refuses, as
/// rpcwire's HTTP servers give it (`HttpService::allowed_hosts`): `403`
/// naming the host, or, for an HTTP/1.1 request without one `Host` (which
/// [`serve`] answers before), `400`; the connection closes (the body is
/// not read).
fn host_refused(refused: Refusal<'_>) -> Response<Body> {
    match refused {
        Refusal::NotListed(host) => {
            let body = crate::server::hosts::forbidden_body(host).into_bytes();
            let mut r = json_response(StatusCode::FORBIDDEN, body);
            r.headers_mut()
                .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
        Refusal::NoOneHost => no_one_host(),
    }
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::Full(None));
    *r.status_mut() = status;
    r
}

/// An error response with a JSON-RPC error body (`id` as given, or null).
fn rpc_error(status: StatusCode, id: Option<&RawValue>, error: &RpcError) -> Response<Body> {
    let mut body = Vec::with_capacity(128);
    body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    body.extend_from_slice(id.map_or("null", |i| i.get()).as_bytes());
    body.extend_from_slice(b",\"error\":{\"code\":");
    body.extend_from_slice(error.code().to_string().as_bytes());
    body.extend_from_slice(b",\"message\":");
    body.extend_from_slice(
        serde_json::to_string(error.message())
            .unwrap_or_default()
            .as_bytes(),
    );
    if let Some(data) = error.data() {
        body.extend_from_slice(b",\"data\":");
        body.extend_from_slice(data.as_bytes());
    }
    body.extend_from_slice(b"}}");
    json_response(status, body)
}

/// [`poll_drain`](super::poll_drain), which also waits for calls that
/// write no reply (a notification's).
fn poll_calls(
    conn: &mut crate::Connection,
    dispatcher: &crate::Dispatcher<super::ServerInner, crate::dispatch::WithAsync>,
    cx: &mut TaskContext<'_>,
    out: &mut Vec<u8>,
) -> Poll<usize> {
    match conn.poll_replies(dispatcher, cx, out) {
        Poll::Pending if conn.messages_in_flight() == 0 && conn.in_flight() == 0 => Poll::Ready(0),
        other => other,
    }
}

/// The `400` for a message with an id that is no valid request (an id of
/// the wrong type, a `"jsonrpc"` other than `"2.0"`, params neither array
/// nor object, ...): its -32600 under the id the parser read (`null` when
/// the id itself is wrong). The transport answers input it cannot accept
/// with an HTTP error status; a 200 with an error of id `null` would leave
/// the client waiting for its request's answer.
fn refuse_invalid(parser: &crate::Parser, body: &[u8]) -> Option<Response<Body>> {
    use crate::message::Message;
    use crate::request::Entry;
    let arena = bumpalo::Bump::new();
    let invalid = match parser.parse(body, &arena) {
        Ok(Message::Single(Entry::Invalid(invalid))) => invalid,
        // JSON serde_json's peek read but the parser refuses whole (nested
        // past its depth: serde skips `params` without a depth limit),
        // answered as a parse error is: 400, id null.
        Err(e) => return Some(rpc_error(StatusCode::BAD_REQUEST, None, &refusal(e))),
        Ok(_) => return None,
    };
    let reply = refusal(invalid.error());
    let id =
        RawValue::from_string(String::from_utf8_lossy(invalid.id().as_bytes()).into_owned()).ok();
    Some(rpc_error(StatusCode::BAD_REQUEST, id.as_deref(), &reply))
}

/// The error answering a message the parser refused: its code, message
/// and `data` (the reason, and the limit for a limit's refusal).
fn refusal(e: crate::Error) -> RpcError {
    let mut data = Vec::new();
    e.write_data(&mut data);
    RpcError::new(e.code(), e.message()).with_raw_data(String::from_utf8_lossy(&data))
}

fn bad_request(reason: &'static str) -> Response<Body> {
    rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        &RpcError::new(crate::codes::INVALID_REQUEST, reason),
    )
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The answer's headers a page's script may read besides the safelisted
/// ones: the session id the client must send back, and the revision.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version";

/// The answer to a CORS preflight from an origin the endpoint accepts:
/// the methods it serves, the headers asked for (a client sends
/// `Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`,
/// `Authorization`, ... as its revision and setup need), kept for ten
/// minutes.
fn preflight(origin: &HeaderValue, request: &HeaderMap) -> Response<Body> {
    let mut r = status_only(StatusCode::NO_CONTENT);
    let headers = r.headers_mut();
    headers.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.insert(
        hyper::header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
    );
    if let Some(asked) = request.get(hyper::header::ACCESS_CONTROL_REQUEST_HEADERS) {
        headers.insert(hyper::header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
    }
    headers.insert(
        hyper::header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    headers.insert(hyper::header::VARY, HeaderValue::from_static("origin"));
    r
}

/// Whether `origin` is one of `allowed` (compared exactly).
fn listed(origin: &HeaderValue, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a.as_bytes() == origin.as_bytes())
}

/// Whether `Origin` is absent, a localhost origin, or allowed.
fn origin_ok(origin: Option<&HeaderValue>, allowed: &[String]) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    if listed(origin, allowed) {
        return true;
    }
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, tail)) if tail.is_empty() || tail.starts_with(':') => h,
            _ => return false,
        }
    } else {
        rest.split(':').next().unwrap_or("")
    };
    if rest.contains('/') {
        return false;
    }
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Which of JSON and SSE an `Accept` header takes. The most specific range
/// that names a type decides it (RFC 9110 §12.5.1), and `q=0` is "not
/// acceptable": `*/*, application/json;q=0` takes SSE only.
fn accepts(headers: &HeaderMap) -> (bool, bool) {
    // For each type: how specific its best range was (0: none, 1: `*/*`,
    // 2: `type/*`, 3: exact) and whether that range accepts it.
    let (mut json, mut sse) = ((0, false), (0, false));
    let take = |best: &mut (u8, bool), specific: u8, accepted: bool| {
        // Of equally specific ranges, one that accepts wins.
        if specific > best.0 || (specific == best.0 && accepted) {
            *best = (specific, accepted);
        }
    };
    for value in headers.get_all(hyper::header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let (name, value) = p.split_once('=').unwrap_or((p, ""));
                name.trim().eq_ignore_ascii_case("q")
                    && value.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
            });
            let accepted = !refused;
            match media.as_str() {
                "*/*" => {
                    take(&mut json, 1, accepted);
                    take(&mut sse, 1, accepted);
                }
                "application/*" => take(&mut json, 2, accepted),
                "application/json" => take(&mut json, 3, accepted),
                "text/*" => take(&mut sse, 2, accepted),
                "text/event-stream" => take(&mut sse, 3, accepted),
                _ => {}
            }
        }
    }
    (json.1, sse.1)
}

/// Decodes a header value that may use the `=?base64?…?=` form.
fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(base64_decode(b64)?).ok(),
        None => Some(value.to_owned()),
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return None,
        }
    }
    Some(out)
}

/// A new session id: 128 random bits, hex.
fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to a hash of the time and a counter
        // (unguessable enough for a local server, never repeated).
        use std::hash::{BuildHasher, Hasher};
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        bytes[..8].copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn header_mismatch(id: Option<&RawValue>, message: String) -> Response<Body> {
    // The message quotes the client's header values and params: cut, as
    // the other errors' echoes are.
    rpc_error(
        StatusCode::BAD_REQUEST,
        id,
        &RpcError::new(codes::HEADER_MISMATCH, super::handlers::clipped(message)),
    )
}

impl Endpoint {
    /// The endpoint of `server`.
    pub fn new(server: McpServer, config: HttpConfig) -> Endpoint {
        // `Duration::MAX`, the usual way to say "never", overflowed the
        // clock where hyper and the write deadline add a limit to now.
        let never = crate::server::NEVER;
        let config = HttpConfig {
            session_idle_timeout: config.session_idle_timeout.map(|t| t.min(never)),
            header_timeout: config.header_timeout.min(never),
            body_timeout: config.body_timeout.min(never),
            write_timeout: config.write_timeout.min(never),
            shutdown_grace: config.shutdown_grace.min(never),
            tcp_keepalive: config.tcp_keepalive.map(|t| t.min(never)),
            stream_keepalive: config
                .stream_keepalive
                .clamp(std::time::Duration::from_millis(1), never),
            ..config
        };
        Endpoint {
            inner: Arc::new(EndpointInner {
                server,
                config,
                sessions: Mutex::new(HashMap::new()),
                ticks: AtomicU64::new(0),
                epoch: std::time::Instant::now(),
                next_reap: AtomicU64::new(0),
            }),
        }
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.sessions_lock().len()
    }

    fn sessions_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<HttpSession>>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn session(&self, id: &str) -> Option<Arc<HttpSession>> {
        let session = self.sessions_lock().get(id).cloned()?;
        let tick = self.inner.ticks.fetch_add(1, Ordering::Relaxed);
        session.used.store(tick, Ordering::Relaxed);
        session.touch();
        Some(session)
    }

    /// Ends the sessions idle for `session_idle_timeout`, when it is time
    /// to look (at most every tenth of the timeout, and every 10 s: one
    /// pass over the sessions under their lock).
    fn reap_idle(&self) {
        let Some(timeout) = self.inner.config.session_idle_timeout else {
            return;
        };
        let now = millis_since(self.inner.epoch);
        let next = self.inner.next_reap.load(Ordering::Relaxed);
        let every = u64::try_from((timeout / 10).as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, 10_000);
        if now < next
            || self
                .inner
                .next_reap
                .compare_exchange(next, now + every, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let mut expired = Vec::new();
        self.sessions_lock().retain(|_, session| {
            let idle = session.idle_for(timeout, now);
            if idle {
                expired.push(Arc::clone(session));
            }
            !idle
        });
        for session in expired {
            session.end(Ending::Expired);
        }
    }

    /// Ends every session ([`serve`] stopping).
    fn end_sessions(&self) {
        let ended: Vec<_> = self.sessions_lock().drain().map(|(_, s)| s).collect();
        for session in ended {
            session.end(Ending::Stopped);
        }
    }

    /// Makes room for one more session: past `max_sessions`, the one unused
    /// for longest ends (its GET streams close; its client gets 404).
    fn make_room(&self) {
        let mut sessions = self.sessions_lock();
        while sessions.len() >= self.inner.config.max_sessions.max(1) {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.used.load(Ordering::Relaxed))
                .map(|(id, _)| id.clone());
            let Some(session) = oldest.and_then(|id| sessions.remove(&id)) else {
                return;
            };
            session.end(Ending::Evicted);
        }
    }

    /// The 400 for an `MCP-Protocol-Version` header naming a revision this
    /// server does not speak (on every request of a session: POST, GET and
    /// DELETE alike).
    fn refuse_version_header(headers: &HeaderMap, id: Option<&RawValue>) -> Option<Response<Body>> {
        // Present but not visible ASCII is an invalid version, not an
        // absent one (it was served under the session's revision).
        let raw = headers.get(VERSION_HEADER)?;
        let v = raw.to_str().unwrap_or("");
        if SUPPORTED_VERSIONS.contains(&v) {
            return None;
        }
        let v = String::from_utf8_lossy(raw.as_bytes());
        Some(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            &RpcError::new(
                crate::codes::INVALID_REQUEST,
                "Bad Request: unsupported MCP-Protocol-Version",
            )
            .with_data(&serde_json::json!({"supported": SUPPORTED_VERSIONS, "requested": v})),
        ))
    }

    /// Answers one HTTP request.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let config = &self.inner.config;
        if req.uri().path() != config.path {
            return status_only(StatusCode::NOT_FOUND);
        }
        self.reap_idle();
        // Before anything else, as rpcwire's HTTP servers check it: a
        // rebound page's request may carry no `Origin`.
        if let Some(refused) = config
            .allowed_hosts
            .as_ref()
            .filter(|hosts| !hosts.is_any())
            .and_then(|hosts| hosts.refuses(&req))
        {
            return host_refused(refused);
        }
        if !origin_ok(
            req.headers().get(hyper::header::ORIGIN),
            &config.allowed_origins,
        ) {
            return rpc_error(
                StatusCode::FORBIDDEN,
                None,
                &RpcError::new(
                    crate::codes::INVALID_REQUEST,
                    "Forbidden: Origin not allowed",
                ),
            );
        }
        // A page of a listed origin may call: a browser client (the MCP
        // Inspector's direct mode at localhost:6274, a web app) needs CORS
        // to send its POSTs and read the answers and the session id. Only
        // listed ones: other local pages (any dev server's) are accepted
        // past the DNS-rebinding check but not given CORS, so a browser
        // lets them send no JSON POST.
        let origin = req
            .headers()
            .get(hyper::header::ORIGIN)
            .filter(|o| listed(o, &config.allowed_origins))
            .cloned();
        if let Some(origin) = &origin
            && req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(hyper::header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return preflight(origin, req.headers());
        }
        let mut response = match *req.method() {
            Method::POST => self.post(req).await,
            Method::GET => self.get(req),
            Method::DELETE => self.delete(req.headers()),
            _ => {
                let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED);
                r.headers_mut().insert(
                    hyper::header::ALLOW,
                    HeaderValue::from_static("GET, POST, DELETE"),
                );
                r
            }
        };
        if let Some(origin) = origin {
            let headers = response.headers_mut();
            headers.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(
                hyper::header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED_HEADERS),
            );
            headers.append(hyper::header::VARY, HeaderValue::from_static("origin"));
        }
        response
    }

    fn no_session_method() -> Response<Body> {
        let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        r
    }

    fn delete(&self, headers: &HeaderMap) -> Response<Body> {
        let Some(id) = header(headers, SESSION_HEADER) else {
            return Self::no_session_method();
        };
        if let Some(refused) = Self::refuse_version_header(headers, None) {
            return refused;
        }
        match self.sessions_lock().remove(id) {
            Some(session) => {
                session.end(Ending::Deleted);
                status_only(StatusCode::OK)
            }
            None => status_only(StatusCode::NOT_FOUND),
        }
    }

    fn get(&self, req: Request<Incoming>) -> Response<Body> {
        let Some(id) = header(req.headers(), SESSION_HEADER) else {
            return Self::no_session_method();
        };
        if let Some(refused) = Self::refuse_version_header(req.headers(), None) {
            return refused;
        }
        if !accepts(req.headers()).1 {
            return status_only(StatusCode::NOT_ACCEPTABLE);
        }
        let Some(session) = self.session(id) else {
            return status_only(StatusCode::NOT_FOUND);
        };
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let mut changes = self.inner.server.inner().changes.subscribe();
        let mut ended = session.ended.subscribe();
        // Ended between the lookup and the subscription: the change is
        // already seen, so `changed()` would never fire.
        if ended.borrow().is_some() {
            return status_only(StatusCode::NOT_FOUND);
        }
        let stream_id = session.next_stream.fetch_add(1, Ordering::Relaxed);
        session.streams().push((stream_id, tx.clone()));
        session.busy();
        let entry = StreamEntry {
            session,
            id: stream_id,
        };
        let keepalive = self.inner.config.stream_keepalive;
        tokio::spawn(async move {
            // A comment first, so that the client sees the stream open.
            if tx.send(Bytes::from_static(b": open\n\n")).await.is_err() {
                return;
            }
            let mut quiet = keepalive_timer(keepalive);
            loop {
                tokio::select! {
                    _ = quiet.tick() => {
                        // Not awaited, as below: a full queue has
                        // something to send already.
                        if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(Bytes::from_static(KEEPALIVE)) {
                            return;
                        }
                    }
                    changed = changes.recv() => match changed {
                        Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            // Every stream of the session hears of the
                            // change; one of them tells the client.
                            if !entry.session.carries(entry.id) {
                                continue;
                            }
                            let event = Bytes::from_static(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n");
                            // Not awaited: a client that stops reading
                            // would hold this task (and its session) past
                            // the session's end. With 16 queued, it has
                            // list_changed to read already.
                            if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(event) {
                                return;
                            }
                        }
                        Err(_) => return,
                    },
                    _ = ended.changed() => return,
                    _ = tx.closed() => return,
                }
            }
        });
        sse_response(Body::Stream(rx))
    }

    async fn post(&self, req: Request<Incoming>) -> Response<Body> {
        let (json_ok, sse_ok) = accepts(req.headers());
        if !(json_ok && sse_ok) {
            return rpc_error(
                StatusCode::NOT_ACCEPTABLE,
                None,
                &RpcError::new(
                    crate::codes::INVALID_REQUEST,
                    "Not Acceptable: Accept must list application/json and text/event-stream",
                ),
            );
        }
        let content_type = header(req.headers(), "content-type").unwrap_or("");
        if !content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
        {
            return rpc_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                &RpcError::new(
                    crate::codes::INVALID_REQUEST,
                    "Unsupported Media Type: Content-Type must be application/json",
                ),
            );
        }
        // A compressed body is not read as JSON (as rpcwire's HTTP
        // transport answers it: 415, send it uncompressed).
        if req
            .headers()
            .get_all(hyper::header::CONTENT_ENCODING)
            .iter()
            .any(|coding| !crate::server::is_identity(coding.as_bytes()))
        {
            let mut r = rpc_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                &RpcError::new(crate::codes::INVALID_REQUEST, "Invalid Request").with_data(
                    &serde_json::json!({
                        "reason": "unsupported Content-Encoding: send the body uncompressed"
                    }),
                ),
            );
            r.headers_mut().insert(
                hyper::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
            return r;
        }
        let (parts, body) = req.into_parts();
        let collect = http_body_util::Limited::new(body, self.inner.config.max_body).collect();
        let Ok(collected) = tokio::time::timeout(self.inner.config.body_timeout, collect).await
        else {
            // The body stopped coming: hyper closes the connection after
            // this answer, as the body was not read whole.
            let mut r = rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                None,
                &RpcError::new(
                    crate::codes::INVALID_REQUEST,
                    "Request Timeout: the body did not arrive in time",
                )
                .with_data(&serde_json::json!({
                    "timeout_ms": self.inner.config.body_timeout.as_millis() as u64
                })),
            );
            r.headers_mut()
                .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        };
        let body = match collected {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return rpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    None,
                    &RpcError::new(crate::codes::INVALID_REQUEST, "Request body too large")
                        .with_data(&serde_json::json!({"limit": self.inner.config.max_body})),
                );
            }
            Err(_) => return status_only(StatusCode::BAD_REQUEST),
        };
        if is_batch(&body) {
            let mut out = Vec::new();
            write_batch_refusal(&mut out);
            return json_response(StatusCode::BAD_REQUEST, out);
        }
        let peek: Peek<'_> = match serde_json::from_slice(&body) {
            Ok(p) => p,
            // JSON that is not a request (a method that is not a string):
            // the dispatcher answers it (-32600, with its id).
            Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok() => {
                // Not a request, so 400 whatever its id (the dispatcher's
                // -32600 names the id): run as a message without one.
                return self.run(body.clone(), None, None, None, false).await;
            }
            // Not JSON: the dispatcher's -32700 says where and why, as on
            // every other transport (400 here: no id).
            Err(_) => return self.run(body.clone(), None, None, None, false).await,
        };
        // An object's: serde's derive would read an array's values as the
        // members (`[[..]]` as `_meta`), and MCP's params are an object.
        let params: PeekParams<'_> = peek
            .params
            .filter(|p| p.get().starts_with('{'))
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let modern_version =
            params.meta.as_ref().and_then(|m| m.version).map(|v| {
                serde_json::from_str::<Cow<'_, str>>(v.get()).unwrap_or(Cow::Borrowed(""))
            });
        let Some(method) = peek.method.as_deref() else {
            // A response to a request a call sent the client, or garbage
            // that the dispatcher answers (400).
            if peek.looks_like_response()
                || (peek.id.is_some() && self.bare_answer(&body, &parts.headers))
            {
                return self.post_response(&body, &parts.headers);
            }
            return self.run(body.clone(), None, None, None, false).await;
        };
        let is_request = peek.id.is_some();
        match modern_version {
            // A handshake revision named in `_meta` is served as the
            // session is (as over stdio).
            Some(version) if method != "initialize" && !LEGACY_VERSIONS.contains(&&*version) => {
                self.post_modern(
                    body.clone(),
                    &peek,
                    method,
                    &version,
                    &params,
                    &parts.headers,
                )
                .await
            }
            _ => {
                self.post_legacy(body.clone(), peek.id, method, is_request, &parts.headers)
                    .await
            }
        }
    }

    async fn post_modern(
        &self,
        body: Bytes,
        peek: &Peek<'_>,
        method: &str,
        version: &str,
        params: &PeekParams<'_>,
        headers: &HeaderMap,
    ) -> Response<Body> {
        let id = peek.id;
        match header(headers, VERSION_HEADER) {
            None => {
                return header_mismatch(
                    id,
                    "Header mismatch: MCP-Protocol-Version is required".into(),
                );
            }
            Some(h) if h != version => {
                return header_mismatch(
                    id,
                    format!(
                        "Header mismatch: MCP-Protocol-Version header value '{h}' does not match body value '{version}'"
                    ),
                );
            }
            Some(_) => {}
        }
        if version != MODERN_VERSION {
            return rpc_error(StatusCode::BAD_REQUEST, id, &unsupported_version(version));
        }
        if id.is_none() {
            // Notifications of this revision carry no meaning over HTTP
            // (closing a stream is the cancellation): accepted.
            return status_only(StatusCode::ACCEPTED);
        }
        match header(headers, METHOD_HEADER) {
            Some(h) if h == method => {}
            Some(h) => {
                return header_mismatch(
                    id,
                    format!(
                        "Header mismatch: Mcp-Method header value '{h}' does not match body value '{method}'"
                    ),
                );
            }
            None => return header_mismatch(id, "Header mismatch: Mcp-Method is required".into()),
        }
        if method == "tools/call" {
            let body_name = params
                .name
                .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
            let header_name = header(headers, NAME_HEADER).and_then(decode_header_value);
            match (body_name, header_name) {
                (Some(b), Some(h)) if b == h => {}
                (Some(b), Some(h)) => {
                    return header_mismatch(
                        id,
                        format!(
                            "Header mismatch: Mcp-Name header value '{h}' does not match body value '{b}'"
                        ),
                    );
                }
                (Some(_), None) => {
                    return header_mismatch(id, "Header mismatch: Mcp-Name is required".into());
                }
                // No name in the body: the dispatcher answers -32602.
                (None, _) => {}
            }
        }
        if !self.inner.server.dispatcher.methods().any(|m| m == method) {
            return rpc_error(
                StatusCode::NOT_FOUND,
                id,
                &RpcError::new(crate::codes::METHOD_NOT_FOUND, "Method not found")
                    .with_data(&serde_json::json!({"method": method})),
            );
        }
        self.run(body, None, None, id, false).await
    }

    /// Whether `body`, which has an id and no `method`, `result` or
    /// `error`, answers a request a call of the session named in `headers`
    /// sent.
    fn bare_answer(&self, body: &[u8], headers: &HeaderMap) -> bool {
        header(headers, SESSION_HEADER)
            .and_then(|id| self.session(id))
            .is_some_and(|session| session.is_bare_answer(body))
    }

    /// A response to a request a call of the session sent: handed to that
    /// call, 202 (also when no call waits for it any more).
    fn post_response(&self, body: &Bytes, headers: &HeaderMap) -> Response<Body> {
        if let Some(refused) = Self::refuse_version_header(headers, None) {
            return refused;
        }
        let Some(session_id) = header(headers, SESSION_HEADER) else {
            return bad_request("Bad Request: Mcp-Session-Id header is required");
        };
        let Some(session) = self.session(session_id) else {
            return rpc_error(
                StatusCode::NOT_FOUND,
                None,
                &RpcError::new(crate::codes::INVALID_REQUEST, "Session not found"),
            );
        };
        match session.answer(body) {
            Ok(()) => status_only(StatusCode::ACCEPTED),
            // The transport's "cannot accept the input": 400, with an error
            // of no id (answering a response under its id could start a
            // loop between two peers).
            Err(e) => rpc_error(StatusCode::BAD_REQUEST, None, &refusal(e)),
        }
    }

    async fn post_legacy(
        &self,
        body: Bytes,
        id: Option<&RawValue>,
        method: &str,
        is_request: bool,
        headers: &HeaderMap,
    ) -> Response<Body> {
        // `initialize` negotiates in its body: a client offering a later
        // revision (its header saying so too) gets the server's counter-
        // offer, not a 400 (the header is for the requests after it; the
        // Python SDK's server exempts it as well).
        let initialize = method == "initialize" && is_request;
        if !initialize && let Some(refused) = Self::refuse_version_header(headers, id) {
            return refused;
        }
        if initialize {
            let state = Arc::new(SessionState::default());
            let session_id = new_session_id();
            let mut response = self.run(body, Some(state.clone()), None, id, false).await;
            if state.version().is_some() {
                // Answered with a result: the session exists from now on.
                self.make_room();
                let used = self.inner.ticks.fetch_add(1, Ordering::Relaxed);
                let max_in_flight = self.inner.server.dispatcher.inner.max_in_flight;
                let session = Arc::new(HttpSession::new(
                    state,
                    used,
                    max_in_flight,
                    self.inner.epoch,
                ));
                self.sessions_lock().insert(session_id.clone(), session);
                if let Ok(v) = HeaderValue::from_str(&session_id) {
                    response.headers_mut().insert(SESSION_HEADER, v);
                }
            }
            return response;
        }
        let Some(session_id) = header(headers, SESSION_HEADER) else {
            if method == "ping" || method == "server/discover" {
                // Harmless without a session: answered statelessly.
                return self.run(body, None, None, id, false).await;
            }
            return bad_request("Bad Request: Mcp-Session-Id header is required");
        };
        let Some(session) = self.session(session_id) else {
            return rpc_error(
                StatusCode::NOT_FOUND,
                id,
                &RpcError::new(crate::codes::INVALID_REQUEST, "Session not found"),
            );
        };
        // Every message that starts a call takes a place among the
        // session's calls: a `tools/call` sent without an id runs as one
        // too (past the cap, and on after its client had gone, as nothing
        // can cancel it). Notifications of the protocol skip the queue, so
        // that a cancellation reaches a full session, and so does `ping`,
        // which MCP says the receiver "MUST respond promptly" to.
        let takes_place =
            method != "ping" && (id.is_some() || !method.starts_with("notifications/"));
        self.run(
            body,
            Some(session.state.clone()),
            Some(&session),
            id,
            takes_place,
        )
        .await
    }

    /// Runs one message on a connection of its own (sharing the session's
    /// lifecycle state, if any) and answers with its reply: JSON, or SSE
    /// when the call sends notifications first; 202 when there is none.
    /// Requests the call sends the client go out on its stream; their
    /// answers, POSTed to `asking`'s session, come back to it.
    async fn run(
        &self,
        body: Bytes,
        session: Option<Arc<SessionState>>,
        asking: Option<&Arc<HttpSession>>,
        id: Option<&RawValue>,
        takes_place: bool,
    ) -> Response<Body> {
        let server = self.inner.server.clone();
        if id.is_some()
            && let Some(refused) = refuse_invalid(&server.dispatcher.inner.parser, &body)
        {
            return refused;
        }
        // A call of a session waits for a place among its calls.
        let place = match asking {
            Some(session) if takes_place => Arc::clone(&session.calls).acquire_owned().await.ok(),
            _ => None,
        };
        let session_state = session.unwrap_or_default();
        let (tx, rx) = mpsc::channel::<Event>(64);
        // Dropped when the call's task ends, however it does.
        let (task_alive, task_ended) = tokio::sync::oneshot::channel::<()>();
        let mut events = CallEvents {
            rx,
            task: Some(task_ended),
            left: 0,
        };
        let sent = Arc::new(tokio::sync::Notify::new());
        let peer = Peer::with_ids(
            Arc::new(CallOutbound {
                events: tx.clone(),
                sent: Arc::clone(&sent),
                answerable: id.is_some(),
            }),
            asking.map(|s| Arc::clone(&s.request_ids)),
        );
        let listed = asking.map(|session| session.enlist(&peer));
        if asking.is_none() || id.is_none() {
            // No session (revision 2026-07-28, which has no requests from
            // the server, or a message outside one), or a message without
            // id, answered by a 202 that carries nothing: no request could
            // reach the client, so its call's requests fail at once (they
            // waited for their timeout, the 202 held back with them).
            peer.close();
        }
        // Its requests' deadlines (`Peer::request_with`) are kept while
        // the call runs (when it ends, the listing's end closes the peer).
        let expiring = peer.clone();
        let ctx = McpServer::context_with("http", session_state.clone())
            .peer(peer)
            .build();
        let id_bytes: Option<Box<[u8]>> = id.map(|i| i.get().as_bytes().into());
        let is_request = id_bytes.is_some();
        let mut session_ended = asking.map(|s| s.ended.subscribe());
        let mut session_deleted = session_ended.clone();
        let mut cancel = None;
        if let Some(i) = &id_bytes {
            match session_state.register(i) {
                Registered::Run(rx) => cancel = Some(rx),
                Registered::Untracked => {}
                // Cancelled before it got here: not run, no reply.
                Registered::Cancelled => return sse_response(Body::Full(None)),
                Registered::InUse => {
                    return rpc_error(
                        StatusCode::OK,
                        id,
                        &RpcError::new(crate::codes::INVALID_REQUEST, "Invalid Request").with_data(
                            &serde_json::json!({
                                "reason": "a request of this session with this id is still running"
                            }),
                        ),
                    );
                }
            }
        }
        let task = async move {
            let _alive = task_alive;
            // Ends the listing when the call ends, however it does.
            let _listed = listed;
            let _place = place;
            let mut conn = server.dispatcher.connection(ctx);
            let mut out = Vec::new();
            // Cancellations this message asks for reach their calls through
            // the session (their waiters, or the early ones it keeps for
            // requests still on their way).
            conn.start(&server.dispatcher, &body, &mut out);
            let mut stream_closed = false;
            // A notification's async call too: its 202 goes once it is
            // done (dropping the connection here would drop the call).
            while conn.messages_in_flight() > 0 || conn.in_flight() > 0 {
                tokio::select! {
                    // A cancellation first: one that comes with the call's
                    // end (its session deleted as its requests to the
                    // client fail) wins, whatever order they are seen in.
                    biased;
                    _ = async { cancel.as_mut().expect("guarded").await }, if cancel.is_some() => {
                        cancel = None;
                        if let Some(i) = &id_bytes { conn.cancel(i); }
                    }
                    // The client closed the response stream. Disconnection
                    // is not cancellation (the transport's "SHOULD NOT be
                    // interpreted as the client cancelling"): a session's
                    // call runs on, its reply dropped, until it ends, its
                    // client cancels it or its session ends (deleted, or
                    // evicted: below). Without a session nothing could
                    // ever cancel it, so it stops at once.
                    _ = tx.closed(), if !stream_closed => stream_closed = true,
                    // A notification's call (a `tools/call` without id) of
                    // a session its client deletes stops as the session's
                    // requests do (they are cancelled through their ids).
                    _ = async {
                        if let Some(ended) = session_deleted.as_mut()
                            && ended.wait_for(|e| *e == Some(Ending::Deleted)).await.is_ok()
                        {
                            return;
                        }
                        std::future::pending::<()>().await
                    }, if !is_request => break,
                    _ = async {
                        if let Some(ended) = session_ended.as_mut() {
                            // An error: the session is gone, ended too.
                            let _ = ended.wait_for(Option::is_some).await;
                        }
                    }, if stream_closed => {
                        if let Some(i) = &id_bytes { conn.cancel(i); }
                        break;
                    }
                    _ = std::future::poll_fn(|cx| poll_calls(&mut conn, &server.dispatcher, cx, &mut out)) => {}
                    _ = async {
                        match expiring.next_deadline() {
                            Some(due) => tokio::time::sleep_until(due.into()).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        // Tokio's clock, which the timer above keeps (it
                        // may be paused in tests).
                        expiring.expire(tokio::time::Instant::now().into_std());
                    }
                    // A message sent (maybe a request with a deadline):
                    // the deadline above is read again.
                    _ = sent.notified() => {}
                }
            }
            if let Some(i) = &id_bytes {
                session_state.unregister(i);
            }
            if !out.is_empty() {
                let _ = tx.send(Event::Reply(out)).await;
            }
        };
        tokio::spawn(task);
        if !is_request {
            // Notifications are handled inline and answered with 202 once
            // done. A reply to a message without id is the error of one
            // that is no notification (an invalid message, answered with
            // id null): that input is not accepted, 400 ("the server MUST
            // return an HTTP error status code").
            let mut refusal = None;
            while let Some(event) = events.next().await {
                if let Event::Reply(r) = event {
                    refusal = Some(r);
                }
            }
            return match refusal {
                Some(r) => json_response(StatusCode::BAD_REQUEST, r),
                None => status_only(StatusCode::ACCEPTED),
            };
        }
        let keepalive = self.inner.config.stream_keepalive;
        let first = match tokio::time::timeout(keepalive, events.next()).await {
            Ok(Some(Event::Reply(reply))) => return json_response(StatusCode::OK, reply),
            // Cancelled before anything was sent: an empty event stream.
            Ok(None) => return sse_response(Body::Full(None)),
            Ok(Some(Event::Note(first))) => sse_event(&first),
            // Nothing yet: an event stream from now on, its headers and a
            // comment sent at once.
            Err(_) => Bytes::from_static(KEEPALIVE),
        };
        let (sse_tx, sse_rx) = mpsc::channel::<Bytes>(64);
        let _ = sse_tx.try_send(first);
        tokio::spawn(async move {
            let mut quiet = keepalive_timer(keepalive);
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Event::Note(n)) => {
                            if sse_tx.send(sse_event(&n)).await.is_err() {
                                return;
                            }
                            quiet.reset();
                        }
                        Some(Event::Reply(r)) => { let _ = sse_tx.send(sse_event(&r)).await; return; }
                        None => return,
                    },
                    _ = quiet.tick() => {
                        if sse_tx.send(Bytes::from_static(KEEPALIVE)).await.is_err() {
                            return;
                        }
                    }
                    // Dropping `rx` tells the call its stream closed.
                    _ = sse_tx.closed() => return,
                }
            }
        });
        sse_response(Body::Stream(sse_rx))
    }
}

/// The SSE comment an event stream sends when it has sent nothing for
/// [`HttpConfig::stream_keepalive`].
const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// Ticks every `every`, the first one `every` from now.
fn keepalive_timer(every: std::time::Duration) -> tokio::time::Interval {
    let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    timer
}

/// One SSE event carrying `json`. JSON may span lines (whitespace between
/// tokens, as in a progress token echoed as the client wrote it): each line
/// gets its own `data:` field, which the client joins back with a line
/// feed, so the event's data is the same JSON value. Line breaks inside
/// JSON strings are always escaped, so splitting never cuts a string.
fn sse_event(json: &[u8]) -> Bytes {
    let mut e = Vec::with_capacity(json.len() + 24);
    e.extend_from_slice(b"event: message\n");
    let mut rest = json;
    loop {
        e.extend_from_slice(b"data: ");
        match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                e.extend_from_slice(&rest[..i]);
                e.push(b'\n');
                // CRLF is one line break.
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
            None => {
                e.extend_from_slice(rest);
                break;
            }
        }
    }
    e.extend_from_slice(b"\n\n");
    Bytes::from(e)
}

fn sse_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let ok = |o: &str| origin_ok(Some(&HeaderValue::from_str(o).unwrap()), &[]);
        assert!(ok("http://localhost:3000"));
        assert!(ok("http://127.0.0.1"));
        assert!(ok("https://[::1]:8080"));
        assert!(!ok("http://evil.example"));
        assert!(!ok("http://localhost.evil.example"));
        assert!(!ok("null"));
        assert!(origin_ok(None, &[]));
        assert!(origin_ok(
            Some(&HeaderValue::from_static("https://app.example")),
            &["https://app.example".into()]
        ));
    }

    #[test]
    fn accept_takes_the_most_specific_range_and_q_zero_refuses() {
        let takes = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                hyper::header::ACCEPT,
                HeaderValue::from_str(accept).unwrap(),
            );
            accepts(&headers)
        };
        assert_eq!(takes("application/json, text/event-stream"), (true, true));
        assert_eq!(takes("*/*"), (true, true));
        assert_eq!(takes("application/*;q=0.5, text/*"), (true, true));
        // RFC 9110 §12.5.1: q=0 is "not acceptable".
        assert_eq!(
            takes("application/json;q=0, text/event-stream"),
            (false, true)
        );
        assert_eq!(takes("application/json; Q=0.000"), (false, false));
        assert_eq!(takes("*/*, application/json;q=0"), (false, true));
        assert_eq!(takes("*/*;q=0, text/event-stream"), (false, true));
        assert_eq!(takes("application/json;q=0.001"), (true, false));
        assert_eq!(takes("text/plain"), (false, false));
    }

    /// A GET that found its session just before a `DELETE` ended it
    /// subscribes after the end: it must read the session as ended (a
    /// plain watch `send` with nobody subscribed stored nothing, and the
    /// stream opened on the deleted session for good). Found by a review.
    #[test]
    fn an_ended_session_reads_as_ended_to_a_late_subscriber() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let server = McpServer::builder("t", "1").build().unwrap();
        let endpoint = Endpoint::new(server, HttpConfig::default());
        let session = Arc::new(HttpSession::new(
            Arc::new(SessionState::default()),
            0,
            4,
            endpoint.inner.epoch,
        ));
        endpoint
            .sessions_lock()
            .insert("s".into(), Arc::clone(&session));
        let found = endpoint.session("s").expect("listed");
        let removed = endpoint.sessions_lock().remove("s").unwrap();
        removed.end(Ending::Deleted);
        let ended = found.ended.subscribe();
        assert_eq!(*ended.borrow(), Some(Ending::Deleted));
    }

    #[test]
    fn sse_events_give_each_line_its_data_field() {
        assert_eq!(
            &sse_event(br#"{"a":1}"#)[..],
            b"event: message\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(
            &sse_event(b"{\"a\":\n1,\r\n\"b\":\r2}")[..],
            b"event: message\ndata: {\"a\":\ndata: 1,\ndata: \"b\":\ndata: 2}\n\n"
        );
    }

    #[test]
    fn base64_header_values() {
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_header_value("=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        assert_eq!(decode_header_value("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(decode_header_value("=?base64?!!?="), None);
    }
}
