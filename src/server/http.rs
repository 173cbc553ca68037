//! The HTTP transport (feature `http`): JSON-RPC 2.0 over HTTP `POST`, on
//! hyper 1.x, HTTP/1.1 (keep-alive) and HTTP/2 (prior knowledge, `h2c`).
//!
//! Two pieces, usable apart:
//!
//! * [`HttpService`]: a [`tower_service::Service`] answering one HTTP request
//!   with one JSON-RPC reply. It is generic over the request body, so it can
//!   be mounted in axum or wrapped in tower layers (timeouts, concurrency
//!   limits, CORS): limits and policies are layers around it, not flags in
//!   it.
//! * [`serve`] (and [`Server`] for its HTTP knobs): the accept loop, with
//!   [`Limits::max_connections`], an idle timeout, a header read timeout
//!   (slowloris), and graceful shutdown on [`Shutdown`].
//!
//! Served as it is (not wrapped in layers), an [`HttpService`] (or a
// `Combined` is built only with `ws` too; its link must not break the
// docs of `http` alone.
#![cfg_attr(feature = "ws", doc = "[`Combined`](super::combined::Combined))")]
#![cfg_attr(
    not(feature = "ws"),
    doc = "`server::combined::Combined`, feature `ws`)"
)]
//! answers a connection's plain
//! HTTP/1.1 requests (keep-alive `POST`s with a `Content-Length` body,
//! pipelined or not) in a loop of rpcwire's own, which allocates nothing
//! per request; the first request that needs more of HTTP (HTTP/2, an
//! upgrade, a chunked body, an error status) hands the connection to hyper
//! with what was read of it. The answers are the same either way (a test
//! compares them on the same conversations); see [`Server::own_http1`].
//!
//! # What is answered how
//!
//! | request | response |
//! | --- | --- |
//! | `POST`, `Content-Type` `application/json` (or `application/json-rpc`, `application/jsonrequest`; any case, any `; charset=…`) | `200`, the JSON-RPC reply (`application/json`) |
//! | the same, but the message needs no reply (notifications only, or responses) | `204 No Content`, empty |
//! | the body is not valid JSON | `200`, the -32700 reply |
//! | any other method (`GET`, `OPTIONS`…) | `405`, `Allow: POST`, a -32600 body |
//! | with a [`Cors`] policy ([`HttpService::cors`]): a browser's preflight, or a request from another origin | see [`cors`](super::cors): `204` with the CORS headers, `Access-Control-Allow-Origin` on the answer, or `403` for an origin not allowed |
//! | with a `Host` allowlist ([`HttpService::allowed_hosts`]): a request for a host not listed, or an HTTP/1.1 request without one valid `Host` | see [`hosts`](super::hosts): `403` (`400`), a -32600 body, before anything else and before the body is read |
//! | served by [`serve`] (or [`Server`]), allowlist or not: an HTTP/1.1 request without `Host`, or with two (RFC 9112 §3.2) | `400`, the same -32600 body, before anything else (in tower layers: before they see it); the connection closes after it. Mounted in another server (axum) or called in memory, the service leaves that to its server |
//! | any other `Content-Type`, or none | `415`, a -32600 body |
//! | a body that has not all arrived [`Limits::body_timeout`] after it started | `408`, a -32600 body with `data.timeout_ms`, then the connection closes (HTTP/2: a GOAWAY, its other streams answered first) |
//! | a body longer than [`Limits::max_message_len`] | `413`, a -32600 body with `data.limit`; refused from `Content-Length` before any of it is read, or as soon as a streamed HTTP/2 body passes the limit; a chunked HTTP/1.1 body is read on (dropped) up to the limit again first, so that a client writing it to its end reads the `413` rather than a reset (at most until the body timeout), then the connection closes if it did not end |
//! | served by [`serve`] (or [`Server`]), an HTTP/2 stream whose body would take the bodies its connection holds past [`Limits::max_connection_body_bytes`] | `503`, a -32600 body with `data.limit`, as soon as the chunk that would pass it arrives (the other streams go on) |
//! | served by [`serve`] (or [`Server`]), an HTTP/2 reply that would take what its connection holds unwritten (bodies, and replies waiting for the client's window) past the same limit, while others are held | `503`, a -32000 "Response too large" body with `data.limit` (its call has run) |
//! | served by [`serve`] in tower layers, a layer fails the request (its timeout, a load shedder) | `500`, a -32603 body; the connection serves on |
//!
//! A request refused from its head (`405`, `415`, the CORS refusals) has
//! its body read and dropped first, so that the connection serves on, unless it waits for a `100 Continue` to send it
//! (`Expect: 100-continue`): the refusal then comes at once, and the
//! connection closes after it.
//!
//! A message that gets no reply is answered `204` with an empty body, not
//! `200` with `null` (as jsonrpsee does): `null` is not a JSON-RPC response,
//! and a client parsing the body as one would fail. Async handlers of
//! notifications keep running after the `204` (bounded by the dispatcher's
//! timeout), and count against the dispatcher's `max_in_flight` for their
//! connection: once a connection has that many left running, a request's
//! answer waits until they leave room for its own calls, or its own calls
//! end (so at most the cap, and the calls of the request being answered,
//! run; each holds its body). A
//! service not given its peer's address
//! ([`with_peer_addr`](HttpService::with_peer_addr), which rpcwire's
//! server calls for each connection), mounted in another server, does not
//! count them.
//!
//! Handlers see the request's headers and the client's address in their
//! [`Context`]: [`header(&call.ctx, "user-agent")`](header) for one header,
//! `ctx.extension::<rpcwire::http::HeaderMap>()` for them all, and
//! [`ctx.peer_addr()`](Context::peer_addr); `ctx.transport()` is `"http"`.
//!
//! # Metrics
//!
//! Give the same [`Metrics`] to the dispatcher (as its observer), to the
//! service and to the server: every limit hit is counted there (`413` as
//! [`LimitKind::MessageLen`], refused connections as
//! [`LimitKind::Connections`], header timeouts and oversized headers as
//! [`LimitKind::Header`] (on HTTP/1.1: on HTTP/2 the `h2` crate answers an
//! oversized header list with 431 itself, and it is not counted), slow
//! bodies as [`LimitKind::BodyTimeout`], idle connections closed as
//! [`LimitKind::Idle`], HTTP/2 clients the `h2` crate cuts off for abuse
//! (rapid reset, floods; `GOAWAY` with `ENHANCE_YOUR_CALM`) as
//! [`LimitKind::Flood`], requests refused for their `Host` (by the
//! allowlist, or HTTP/1.1 without one) as [`LimitKind::Host`], HTTP/2
//! streams refused for their connection's body budget as
//! [`LimitKind::ConnectionBodyBytes`]),
//! and [`Metrics::render`] is the text a `/metrics` endpoint returns (mount
//! it next to the service, in axum or in a `tower` router of your own).

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker, ready};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::future::Either;
use futures_util::task::AtomicWaker;
use http::header::{
    ACCEPT_ENCODING, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, ALLOW, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ORIGIN,
    VARY,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

use super::cors::Cors;
use super::h1::LazyHeaders;
use super::hosts::{AllowedHosts, Refusal};
use super::{LimitKind, Limits, Metrics, Shutdown};
use crate::conn::{Connection, Context};
use crate::dispatch::{Dispatcher, SyncOnly};

pub use super::h1::plain_head::read_plain_fields;

/// The body of every response [`HttpService`] gives: the whole reply, in
/// one buffer.
pub type ResponseBody = Full<Bytes>;

/// Errors a body or a service may fail with.
type BoxError = Box<dyn StdError + Send + Sync>;

/// The least room a body's buffer is given when it grows (else twice what
/// has arrived, up to the length it announces and the limit).
const BODY_ROOM: usize = 4 * 1024;

/// The most idle [`Connection`]s (per-request scratch) a service keeps for
/// reuse.
const POOL_CAP: usize = 64;
/// The most arena memory a pooled [`Connection`] keeps between requests.
const POOL_RETAINED: usize = 256 * 1024;

/// Answers JSON-RPC over HTTP: a [`tower_service::Service`] from
/// `http::Request<B>` (any body `B`) to `http::Response<`[`ResponseBody`]`>`
/// that never fails (every problem is an HTTP status with a JSON-RPC error
/// body); see the [module docs](self) for what is answered how.
///
/// Every request goes through
/// [`Dispatcher::handle_async`](crate::Dispatcher::handle_async)'s path, so
/// one service works for sync-only and async dispatchers alike. The body is
/// collected into one [`Bytes`] (a single-chunk body as it is, with no copy)
/// and async handlers get their params as slices of it. Per-request scratch
/// (the [`Connection`]: arena, running calls, and the [`Context`], refilled
/// with each request's headers in place) comes from a small pool shared by
/// the clones of a service, so in steady state a request costs the service
/// four allocations: the reply buffer and its `Bytes` handle, and the
/// response's header map (eight without the pool). Served by [`serve`] as
/// it is, plain HTTP/1.1 requests cost none: see [`Server::own_http1`].
///
/// Cloning is cheap (one reference count); clones share the dispatcher,
/// limits, metrics and pool.
///
/// ```
/// use rpcwire::server::{Limits, http::HttpService};
/// use rpcwire::{Call, Dispatcher};
/// use tower::ServiceExt;
/// use http_body_util::{BodyExt, Full};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let d = Dispatcher::builder(())
///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
///     .build()?;
/// let service = HttpService::new(d, &Limits::default(), None);
/// let request = rpcwire::http::Request::post("/")
///     .header("content-type", "application/json")
///     .body(Full::new(rpcwire::bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#)))?;
/// let response = service.oneshot(request).await?;
/// assert_eq!(response.status(), 200);
/// let body = response.into_body().collect().await?.to_bytes();
/// assert_eq!(body, br#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#[..]);
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub struct HttpService<S = (), K = SyncOnly> {
    shared: Arc<Shared<S, K>>,
    peer: Option<SocketAddr>,
    cors: Option<Arc<Cors>>,
    /// [`HttpService::allowed_hosts`]'s list; `None`: no check.
    hosts: Option<Arc<AllowedHosts>>,
    /// Whether rpcwire's server serves it (set by
    /// [`PerConnection::for_peer`]): it then answers for the server what
    /// RFC 9112 asks of any (an HTTP/1.1 request without one valid `Host`:
    /// `400`), counted in its metrics as the allowlist's refusals are. A
    /// service mounted in another server (axum), or called in memory
    /// (`oneshot`, as in a test, with no `Host`), leaves that to its server.
    for_server: bool,
    /// [`HttpService::gzip`]'s threshold.
    gzip_above: Option<usize>,
    /// The async calls this connection's requests left running after their
    /// replies went (set by [`with_peer_addr`](HttpService::with_peer_addr),
    /// which makes the service a connection's).
    lingering: Option<Arc<Lingering>>,
}

/// Async calls (notifications) a connection's requests left running after
/// their replies went, on tasks of their own: counted against the
/// dispatcher's `max_in_flight` for that connection, as the stream and
/// WebSocket drivers count theirs. Past it, a request's answer waits until
/// they leave room for its own calls, or its own calls end (the client's
/// next request then waits for that answer).
///
/// Under [`Server::serve`] the connection's place among
/// [`Limits::max_connections`] is held until they end, and at the end of
/// the shutdown grace they are dropped: `serve` returns with none running.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Lingering {
    calls: AtomicUsize,
    /// Woken as the count reaches zero.
    ended: tokio::sync::Notify,
    /// Woken as the count drops: a request waiting at the cap may go once
    /// it is below (apart from `ended`, whose waiters, one per task of
    /// calls left running, need only zero).
    room: Arc<tokio::sync::Notify>,
    /// Set (and `ended` woken) when the server drops them.
    dropped: AtomicBool,
}

impl Lingering {
    /// Whether `calls` more would pass `cap`.
    fn full(&self, calls: usize, cap: usize) -> bool {
        self.calls.load(Ordering::Acquire).saturating_add(calls) > cap
    }

    fn end(&self, calls: usize) {
        if calls > 0 {
            let before = self.calls.fetch_sub(calls, Ordering::AcqRel);
            self.room.notify_waiters();
            if before == calls {
                self.ended.notify_waiters();
            }
        }
    }

    /// Ready once `calls` more would no longer pass `cap`; pending, the
    /// task is woken as the count drops (the calls the connection's other
    /// tasks run end, and nothing else of the waiting request's wakes it).
    /// `wait` keeps the registration between polls.
    fn poll_room(
        &self,
        calls: usize,
        cap: usize,
        wait: &mut Option<Pin<Box<tokio::sync::futures::OwnedNotified>>>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<()> {
        loop {
            if !self.full(calls, cap) {
                *wait = None;
                return Poll::Ready(());
            }
            let w = wait.get_or_insert_with(|| Box::pin(Arc::clone(&self.room).notified_owned()));
            // Registered, then looked again: a call ending between the
            // two looks wakes it.
            w.as_mut().enable();
            if !self.full(calls, cap) {
                *wait = None;
                return Poll::Ready(());
            }
            ready!(w.as_mut().poll(cx));
            *wait = None;
        }
    }

    /// Completes once no call runs, the calls dropped when `hard_stop`
    /// is triggered (the end of the server's shutdown grace).
    async fn all_ended(&self, hard_stop: &Shutdown) {
        if self.calls.load(Ordering::Acquire) == 0 {
            // The common case: no subscription to the signal.
            return;
        }
        let hard = hard_stop.triggered();
        tokio::pin!(hard);
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.calls.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::select! {
                _ = &mut ended => {}
                _ = &mut hard, if !self.dropped.load(Ordering::Acquire) => {
                    self.dropped.store(true, Ordering::Release);
                    self.ended.notify_waiters();
                }
            }
        }
    }

    /// Completes when the server drops the calls.
    async fn dropped(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.dropped.load(Ordering::Acquire) {
                return;
            }
            ended.await;
        }
    }
}

/// A task's part of its connection's [`Lingering`] count, given back as its
/// calls end (and whole if the task is dropped).
struct Held {
    lingering: Arc<Lingering>,
    calls: usize,
}

impl Held {
    fn new(lingering: Arc<Lingering>, calls: usize) -> Held {
        lingering.calls.fetch_add(calls, Ordering::AcqRel);
        Held { lingering, calls }
    }

    /// The task's calls still running are `calls` (never more than before).
    fn set(&mut self, calls: usize) {
        let ended = self.calls.saturating_sub(calls);
        self.calls -= ended;
        self.lingering.end(ended);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.lingering.end(self.calls);
    }
}

struct Shared<S, K> {
    dispatcher: Dispatcher<S, K>,
    max_body: usize,
    body_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
    /// The 413 body (it names the limit).
    too_large: Bytes,
    /// Idle per-request scratch, boxed: it moves into each request's
    /// state and back (a pointer, not the connection's few hundred bytes,
    /// which made the waiting state clippy's `large_enum_variant`), and
    /// the boxes are reused as the connections are.
    #[allow(clippy::vec_box)]
    pool: Mutex<Vec<Box<Connection>>>,
}

impl<S, K> Clone for HttpService<S, K> {
    fn clone(&self) -> Self {
        HttpService {
            shared: Arc::clone(&self.shared),
            peer: self.peer,
            cors: self.cors.clone(),
            hosts: self.hosts.clone(),
            for_server: self.for_server,
            gzip_above: self.gzip_above,
            lingering: self.lingering.clone(),
        }
    }
}

impl<S, K> std::fmt::Debug for HttpService<S, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpService")
            .field("max_body", &self.shared.max_body)
            .field("peer", &self.peer)
            .finish()
    }
}

impl<S: Send + Sync + 'static, K> HttpService<S, K> {
    /// A service answering with `dispatcher`, bodies limited to
    /// [`limits.max_message_len`](Limits::max_message_len), limit hits
    /// counted in `metrics` when given.
    pub fn new(
        dispatcher: Dispatcher<S, K>,
        limits: &Limits,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        let max_body = limits.max_message_len;
        let too_large = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
             \"data\":{{\"reason\":\"message larger than the size limit\",\"limit\":{max_body}}}}}}}"
        );
        HttpService {
            shared: Arc::new(Shared {
                dispatcher,
                max_body,
                body_timeout: limits.body_timeout.min(super::NEVER),
                metrics,
                too_large: Bytes::from(too_large),
                pool: Mutex::new(Vec::new()),
            }),
            peer: None,
            cors: None,
            hosts: None,
            for_server: false,
            gzip_above: None,
            lingering: None,
        }
    }

    /// The same service, answering browsers' cross-origin calls as `cors`
    /// says (preflights, `Access-Control-Allow-Origin`; other origins'
    /// preflights get `403`); see [`cors`](super::cors). Without it
    /// `Origin` is ignored.
    ///
    /// ```
    /// # use rpcwire::{Call, Dispatcher, server::{Limits, cors::Cors, http::HttpService}};
    /// let d = Dispatcher::builder(())
    ///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
    ///     .build()?;
    /// let service = HttpService::new(d, &Limits::default(), None)
    ///     .cors(Cors::origins(["https://app.example.org"])?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cors(mut self, cors: Cors) -> Self {
        self.cors = Some(Arc::new(cors));
        self
    }

    /// The same service, answering only requests for these host names
    /// (`Host`, or HTTP/2's `:authority`; the port is not compared): the
    /// defence against DNS rebinding, geth's `--http.vhosts`. Others get
    /// `403` before their body is read, HTTP/1.1 requests without one
    /// `Host` `400` (which [`serve`] answers without a list too); see
    /// [`hosts`](super::hosts) for what is answered how,
    /// and why there is no check by default (geth's is `localhost`): turn
    /// it on for a server on a loopback or private address that browsers
    /// can reach.
    ///
    /// ```
    /// # use rpcwire::{Call, Dispatcher, server::{Limits, hosts::AllowedHosts, http::HttpService}};
    /// let d = Dispatcher::builder(())
    ///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
    ///     .build()?;
    /// let service = HttpService::new(d, &Limits::default(), None)
    ///     .allowed_hosts(AllowedHosts::list(["localhost", "127.0.0.1", "::1"])?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.hosts = (!hosts.is_any()).then(|| Arc::new(hosts));
        self
    }

    /// The `Host` allowlist, when there is one (rpcwire's own HTTP/1.1
    /// loop hands requests it refuses, and any without one valid `Host`, to
    /// hyper's path, which answers them).
    pub(super) fn host_check(&self) -> Option<&AllowedHosts> {
        self.hosts.as_deref()
    }

    /// The same service, served by rpcwire's server (see `for_server`).
    pub(super) fn on_server(mut self) -> Self {
        self.for_server = true;
        self
    }

    /// The answer to a request refused for its `Host` (counted): by the
    /// allowlist, or, served by rpcwire's server, an HTTP/1.1 request
    /// without one (`hosts::lacks_one_host`); `None` when it may be served.
    pub(super) fn refuse_host<B>(&self, req: &Request<B>) -> Option<Response<ResponseBody>> {
        let refused = match &self.hosts {
            Some(hosts) => hosts.refuses(req)?,
            None if self.for_server && super::hosts::lacks_one_host(req) => Refusal::NoOneHost,
            None => return None,
        };
        let response = match refused {
            Refusal::NotListed(host) => json_response(
                StatusCode::FORBIDDEN,
                Bytes::from(super::hosts::forbidden_body(host)),
            ),
            Refusal::NoOneHost => json_response(
                StatusCode::BAD_REQUEST,
                Bytes::from_static(super::hosts::NO_HOST_BODY.as_bytes()),
            ),
        };
        if let Some(m) = &self.shared.metrics {
            m.limit_hit(LimitKind::Host);
        }
        let mut response = if req.method() == Method::HEAD {
            headers_only(response)
        } else {
            response
        };
        // As every answer while origins are listed (the module `cors`).
        if self.cors_varies() {
            response
                .headers_mut()
                .append(VARY, HeaderValue::from_static("origin"));
        }
        Some(closing(response))
    }

    /// The same service, compressing answers of at least `min_len` bytes
    /// with gzip for clients that accept it (`Accept-Encoding: gzip`, as
    /// web3.py, ethers and curl's `--compressed` send), as geth does: an
    /// `eth_getLogs` or block answer of megabytes, hex text, shrinks at
    /// least 2x for clients across a network (2.1-2.3x on the benchmarks'
    /// random hashes; the zero-padded words and repeated addresses and
    /// topics of real logs shrink more). The fastest level is used: 6-8 ms
    /// of CPU per MiB (miniz_oxide, on the benchmarks' answers), added to
    /// the answer's latency. Answers of 64 KiB or more are compressed on
    /// tokio's blocking pool, a few at once (as many as the machine has
    /// CPUs, process-wide; more wait their turn), so that the other
    /// connections of the runtime thread are served meanwhile (a 5 MiB
    /// answer takes about 35 ms); shorter ones are compressed on the
    /// connection's task, where handing them over would cost about as
    /// much as compressing them, as are all answers when the service runs
    /// outside a tokio runtime. Answers shorter than `min_len`, which gain
    /// little, go as they are.
    /// Answers at or above `min_len` say `Vary: Accept-Encoding`. Off by
    /// default: on a local network the CPU costs more than the bytes save.
    ///
    /// ```
    /// # use rpcwire::{Call, Dispatcher, server::{Limits, http::HttpService}};
    /// let d = Dispatcher::builder(())
    ///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
    ///     .build()?;
    /// let service = HttpService::new(d, &Limits::default(), None).gzip(4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gzip(mut self, min_len: usize) -> Self {
        self.gzip_above = Some(min_len);
        self
    }

    /// [`gzip`](Self::gzip)'s threshold, if answers are compressed.
    pub(super) fn gzip_above(&self) -> Option<usize> {
        self.gzip_above
    }

    /// Whether requests' `Origin` matters (rpcwire's own HTTP/1.1 loop
    /// hands those requests to hyper's path, which answers them).
    pub(super) fn cors_enabled(&self) -> bool {
        self.cors.is_some()
    }

    /// Whether answers depend on the request's `Origin`, and so carry
    /// `Vary: Origin` whether or not the request had one.
    pub(super) fn cors_varies(&self) -> bool {
        self.cors.as_ref().is_some_and(|cors| cors.varies())
    }

    /// The `Origin` of a request with these headers when the CORS policy
    /// refuses it (`None` without a policy).
    #[cfg_attr(not(feature = "ws"), allow(dead_code))]
    pub(super) fn refuses<'h>(&self, headers: &'h HeaderMap) -> Option<&'h HeaderValue> {
        self.cors.as_ref()?.refuses(headers)
    }

    /// Whether answers vary with `Origin` (the CORS policy lists origins).
    #[cfg(feature = "ws")]
    pub(super) fn varies_with_origin(&self) -> bool {
        self.cors.as_ref().is_some_and(|cors| cors.varies())
    }

    /// The same service, telling handlers that requests come from `peer`
    /// ([`Context::peer_addr`]). [`serve`] makes one per connection; mounted
    /// elsewhere, a `SocketAddr` in the request's extensions is used
    /// instead.
    pub fn with_peer_addr(self, peer: SocketAddr) -> Self {
        self.on_connection(peer, Arc::default())
    }

    /// [`with_peer_addr`](HttpService::with_peer_addr), the async calls its
    /// requests leave running counted in `lingering`, a server's
    /// ([`PerConnection::for_peer_on_server`]).
    pub(super) fn on_connection(mut self, peer: SocketAddr, lingering: Arc<Lingering>) -> Self {
        self.peer = Some(peer);
        self.lingering = Some(lingering);
        self
    }

    /// The dispatcher.
    pub fn dispatcher(&self) -> &Dispatcher<S, K> {
        &self.shared.dispatcher
    }

    pub(super) fn max_body(&self) -> usize {
        self.shared.max_body
    }

    pub(super) fn body_timeout(&self) -> Duration {
        self.shared.body_timeout
    }

    /// The `408`'s body, counted as a limit hit.
    pub(super) fn slow_body_reply(&self) -> Bytes {
        self.shared.slow_body_reply()
    }

    /// Dispatches a collected `body` with `headers` in its handlers'
    /// context and appends the reply to `out` (nothing when the message
    /// gets none): what [`ResponseFuture`] does once it has the body, for
    /// rpcwire's own HTTP/1.1 loop. Dropping it cancels the calls it
    /// started.
    ///
    /// `scratch` is the connection's: taken from the service's pool at its
    /// first request, kept between requests (no pool lock per request),
    /// given back with [`release`](HttpService::release).
    pub(super) async fn answer(
        &self,
        scratch: &mut Option<Box<Connection>>,
        headers: LazyHeaders,
        body: Bytes,
        out: &mut Vec<u8>,
    ) where
        S: Send + Sync + 'static,
        K: 'static,
    {
        let shared = &self.shared;
        let conn = scratch.get_or_insert_with(|| shared.take_scratch());
        let mut headers = Some(headers);
        let refilled = conn
            .context
            .refill_lazy::<HeaderMap, LazyHeaders>(self.peer, |lazy| {
                if let Some(headers) = headers.take() {
                    *lazy = headers;
                }
            });
        if !refilled && let Some(headers) = headers {
            conn.context = context(self.peer)
                .lazy_extension::<HeaderMap>(headers)
                .build();
        }
        conn.start(&shared.dispatcher, &body, out);
        let cap = shared.dispatcher.inner.max_in_flight;
        let lingering = self.lingering.as_deref();
        let waits = |conn: &Connection| {
            conn.messages_in_flight() > 0
                || (conn.in_flight() > 0
                    && lingering.is_some_and(|l| l.full(conn.in_flight(), cap)))
        };
        let mut room = None;
        std::future::poll_fn(|cx| {
            while waits(conn) {
                // Asked again after a pending poll: calls that end with no
                // reply (notifications) end in it, and nothing wakes the
                // task after.
                if conn.poll_replies(&shared.dispatcher, cx, out).is_pending() && waits(conn) {
                    // Waiting on the calls other tasks run too: woken as
                    // they end.
                    if conn.messages_in_flight() == 0
                        && let Some(l) = lingering
                        && l.poll_room(conn.in_flight(), cap, &mut room, cx).is_ready()
                    {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
            Poll::Ready(())
        })
        .await;
        shared.report_unmatched(conn);
        // The request's head goes now (it holds the connection's read
        // buffer), and calls still running (async notifications) go with
        // the scratch to a task of their own.
        if conn.in_flight() > 0 {
            self.release(scratch.take());
            return;
        }
        // The next request's `start` would wake this task, which polls
        // right after it anyway.
        conn.forget_waker();
        if !conn
            .context
            .refill_lazy::<HeaderMap, LazyHeaders>(None, LazyHeaders::clear)
        {
            conn.context = Context::empty();
        }
    }

    /// Gives a connection's scratch back to the service's pool.
    pub(super) fn release(&self, scratch: Option<Box<Connection>>)
    where
        S: Send + Sync + 'static,
        K: 'static,
    {
        if let Some(conn) = scratch {
            // HTTP/1.1 bodies are not counted against a budget.
            self.shared
                .release(conn, BodyShare::default(), self.lingering.clone());
        }
    }

    /// Answers one request (what [`Service::call`] does).
    fn respond<B: Body>(&self, req: Request<B>) -> ResponseFuture<S, K, B> {
        // A request for a host not listed: answered at once, its body not
        // read (the connection closes after the answer).
        if let Some(response) = self.refuse_host(&req) {
            return ResponseFuture {
                body: req.into_body(),
                state: State::Ready(Some(response)),
                shared: Arc::clone(&self.shared),
                allow_origin: None,
                gzip: None,
                lingering: self.lingering.clone(),
            };
        }
        let (mut parts, body) = req.into_parts();
        let shared = Arc::clone(&self.shared);
        // A request refused before its body is read: the body (up to the
        // size limit) is read and dropped first, so that the connection
        // stays usable for the next request whatever the pace the body
        // came at (hyper would keep it only if the body had all arrived
        // by the time the answer went out).
        // Unless the client waits for a `100 Continue` to send it (RFC 9110
        // §10.1.1): the refusal is the final answer it waits for instead
        // (reading the body made hyper send the `100` first, and the client
        // send a body only to have it dropped), and, the body never sent,
        // the connection closes after it.
        let head = parts.method == Method::HEAD;
        // Read only for a refusal: not on every request's way.
        let headers = &parts.headers;
        let waits_to_send = || {
            headers.get_all(http::header::EXPECT).iter().any(|v| {
                v.as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"100-continue")
            })
        };
        let early = |body: B, response: Response<ResponseBody>| {
            let response = if head {
                headers_only(response)
            } else {
                response
            };
            let state = if body.is_end_stream() {
                State::Ready(Some(response))
            } else if waits_to_send() {
                State::Ready(Some(closing(response)))
            } else {
                State::Draining {
                    left: shared.max_body,
                    deadline: None,
                    then: Some(response),
                }
            };
            ResponseFuture {
                body,
                state,
                shared: Arc::clone(&self.shared),
                allow_origin: None,
                gzip: None,
                lingering: self.lingering.clone(),
            }
        };
        // A browser's call from another origin: answered by the CORS
        // policy, if there is one. When it lists origins, every answer
        // says it varies with `Origin` (with or without one, and from an
        // origin not listed), so that a cache between browsers and the
        // server keeps an answer for the `Origin` it was made for.
        let mut allow_origin = self
            .cors
            .as_ref()
            .filter(|cors| cors.varies())
            .map(|_| (None, true));
        if let Some(cors) = &self.cors
            && let Some(origin) = parts.headers.get(ORIGIN)
        {
            let asks = parts.method == Method::OPTIONS
                && parts.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD);
            match cors.allow_origin(origin) {
                Some(allowed) if asks => {
                    return early(body, preflight(cors, allowed, &parts.headers));
                }
                Some(allowed) => allow_origin = Some((Some(allowed), cors.varies())),
                None if asks => {
                    // Varies with `Origin` too, as every answer while
                    // origins are listed.
                    let mut refused = early(body, forbidden_origin(origin));
                    refused.allow_origin = allow_origin;
                    return refused;
                }
                // Served without the header, which a browser does not let
                // the page read: a page cannot send this request without a
                // preflight (JSON is not a "simple" content type), and
                // browser extensions, which send their own `Origin` and are
                // not held to CORS (a wallet's background page), are
                // clients like any other.
                None => {}
            }
        }
        let early = |body: B, response: Response<ResponseBody>| {
            let mut future = early(body, response);
            future.allow_origin = allow_origin.clone();
            future
        };
        let gzip = self.gzip_above.map(|min_len| Gzip {
            min_len,
            accepted: {
                let mut accept = AcceptEncoding::default();
                for value in parts.headers.get_all(ACCEPT_ENCODING) {
                    accept.read(value.as_bytes());
                }
                accept.gzip()
            },
        });
        if parts.method != Method::POST {
            return early(body, not_allowed());
        }
        if !parts
            .headers
            .get(CONTENT_TYPE)
            .is_some_and(|v| is_json_content_type(v.as_bytes()))
        {
            return early(body, unsupported_media_type());
        }
        if parts
            .headers
            .get_all(CONTENT_ENCODING)
            .iter()
            .any(|coding| !super::is_identity(coding.as_bytes()))
        {
            return early(body, unsupported_encoding());
        }
        // hyper's bodies know their `Content-Length`: refuse before reading.
        let hint = body.size_hint().lower();
        if hint > shared.max_body as u64 {
            // Not read: the connection closes after the 413.
            return ResponseFuture {
                body,
                state: State::Ready(Some(closing(shared.refuse_too_large()))),
                shared: Arc::clone(&self.shared),
                allow_origin,
                gzip: None,
                lingering: self.lingering.clone(),
            };
        }
        let peer = self
            .peer
            .or_else(|| parts.extensions.get::<SocketAddr>().copied());
        let share = BodyShare {
            budget: parts.extensions.remove::<ConnectionBodies>().map(|c| c.0),
            bytes: 0,
        };
        ResponseFuture {
            body,
            state: State::Reading {
                first: Bytes::new(),
                rest: BytesMut::new(),
                len: 0,
                hint: hint as usize,
                request: Some((parts.headers, peer)),
                deadline: None,
                share,
                http2: parts.version == http::Version::HTTP_2,
            },
            shared,
            allow_origin,
            gzip,
            lingering: self.lingering.clone(),
        }
    }
}

impl<S, K> Shared<S, K> {
    /// Per-request scratch (a pooled connection, or a new one) whose
    /// context shows this request's headers and peer.
    fn checkout(&self, headers: HeaderMap, peer: Option<SocketAddr>) -> Box<Connection> {
        let mut conn = self.take_scratch();
        // Refilled in place when no handler kept it.
        if let Err(headers) = conn.context.refill(peer, headers) {
            conn.context = context(peer).extension(headers).build();
        }
        conn
    }

    /// Per-request scratch from the pool, or a new one.
    fn take_scratch(&self) -> Box<Connection> {
        let pooled = super::lock(&self.pool).pop();
        pooled.unwrap_or_else(|| Box::new(Connection::new().max_retained(POOL_RETAINED)))
    }

    /// Gives scratch back once the reply is out. Calls still running (async
    /// notifications) are driven to their end on a task of their own first,
    /// and `share`, the body's part of its connection's budget, goes with
    /// them: their params are slices of the body, which they keep alive, so
    /// its bytes are held until they end (or are dropped), not until the
    /// reply.
    fn release(
        self: &Arc<Self>,
        mut conn: Box<Connection>,
        share: BodyShare,
        lingering: Option<Arc<Lingering>>,
    ) where
        S: Send + Sync + 'static,
        K: 'static,
    {
        if conn.in_flight() > 0 {
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return; // No executor: dropping it cancels them.
            };
            let shared = Arc::clone(self);
            let watched = lingering.clone();
            let mut held = lingering.map(|l| Held::new(l, conn.in_flight()));
            rt.spawn(async move {
                let _share = share;
                let run = std::future::poll_fn(|cx| {
                    let mut sink = Vec::new();
                    loop {
                        let progress = conn.poll_replies(&shared.dispatcher, cx, &mut sink);
                        if let Some(held) = held.as_mut() {
                            held.set(conn.in_flight());
                        }
                        if conn.in_flight() == 0 {
                            return Poll::Ready(());
                        }
                        if progress.is_pending() {
                            return Poll::Pending;
                        }
                    }
                });
                let dropped = async {
                    match &watched {
                        Some(lingering) => lingering.dropped().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = run => shared.park(conn),
                    // The server's shutdown grace is over: the calls go
                    // with the scratch, before their count does (the
                    // server waits for that).
                    _ = dropped => drop(conn),
                }
                drop(held);
            });
            return;
        }
        self.park(conn);
    }

    fn park(&self, mut conn: Box<Connection>) {
        // The request's headers go now, not when the scratch is reused
        // (`HeaderMap::new` allocates nothing).
        if conn.context.refill(None, HeaderMap::new()).is_err() {
            conn.context = Context::empty();
        }
        let mut pool = super::lock(&self.pool);
        if pool.len() < POOL_CAP {
            pool.push(conn);
        }
    }

    /// The `503` for an HTTP/2 stream whose body would take its
    /// connection's past `limit` ([`Limits::max_connection_body_bytes`]),
    /// counted.
    fn refuse_over_budget(&self, limit: usize) -> Response<ResponseBody> {
        if let Some(m) = &self.metrics {
            m.limit_hit(LimitKind::ConnectionBodyBytes);
        }
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
             \"data\":{{\"reason\":\"request bodies of this connection over their limit\",\"limit\":{limit}}}}}}}"
        );
        json_response(StatusCode::SERVICE_UNAVAILABLE, Bytes::from(body))
    }

    /// Counts in the metrics the responses `conn`'s last request carried
    /// that answered nothing (HTTP has no way back: every response posted
    /// is one).
    #[inline]
    fn report_unmatched(&self, conn: &Connection) {
        let unmatched = conn.take_unmatched_responses();
        if unmatched > 0
            && let Some(m) = &self.metrics
        {
            m.unmatched_responses(unmatched);
        }
    }

    fn refuse_too_large(&self) -> Response<ResponseBody> {
        if let Some(m) = &self.metrics {
            m.limit_hit(LimitKind::MessageLen);
        }
        json_response(StatusCode::PAYLOAD_TOO_LARGE, self.too_large.clone())
    }

    /// The `408`'s body for a body that did not arrive within
    /// [`Limits::body_timeout`], counted.
    fn slow_body_reply(&self) -> Bytes {
        if let Some(m) = &self.metrics {
            m.limit_hit(LimitKind::BodyTimeout);
        }
        Bytes::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
             \"data\":{{\"reason\":\"the request body did not arrive in time\",\"timeout_ms\":{}}}}}}}",
            self.body_timeout.as_millis()
        ))
    }

    /// The `408` for a body that did not arrive within
    /// [`Limits::body_timeout`]; the connection closes after it (HTTP/2,
    /// which has no `connection: close`: [`EndsConnection`]).
    fn refuse_slow_body(&self) -> Response<ResponseBody> {
        let mut response = json_response(StatusCode::REQUEST_TIMEOUT, self.slow_body_reply());
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        response.extensions_mut().insert(EndsConnection);
        response
    }
}

/// In a response's extensions: its connection ends after it. rpcwire's
/// server shuts an HTTP/2 connection down (GOAWAY) on seeing it; HTTP/1.1
/// has the response's `connection: close`. Only for the `408`: the other
/// refusals that close an HTTP/1.1 connection do so because its body was
/// not read, which an HTTP/2 stream's reset settles alone.
#[derive(Clone, Copy, Debug)]
struct EndsConnection;

/// A context for an HTTP request from `peer`, but for its headers.
fn context(peer: Option<SocketAddr>) -> crate::conn::ContextBuilder {
    let ctx = Context::builder().transport("http");
    match peer {
        Some(peer) => ctx.peer_addr(peer),
        None => ctx,
    }
}

impl<S, K, B> Service<Request<B>> for HttpService<S, K>
where
    S: Send + Sync + 'static,
    K: 'static,
    B: Body,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture<S, K, B>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.respond(req)
    }
}

pin_project_lite::pin_project! {
    /// The response to one request: reads the body, dispatches it, and
    /// resolves to the reply. Dropping it (the client went away) cancels the
    /// calls it started.
    pub struct ResponseFuture<S, K, B> {
        #[pin]
        body: B,
        state: State,
        shared: Arc<Shared<S, K>>,
        // The CORS headers the answer carries: `Access-Control-Allow-Origin`
        // (an allowed origin's request) and whether it varies with
        // `Origin` (origins are listed).
        allow_origin: Option<(Option<HeaderValue>, bool)>,
        // Whether the reply may be compressed (`HttpService::gzip`).
        gzip: Option<Gzip>,
        // The connection's calls left running (`HttpService::lingering`).
        lingering: Option<Arc<Lingering>>,
    }
}

/// The request-body bytes one HTTP/2 connection's streams hold, and its
/// limit ([`Limits::max_connection_body_bytes`], at least one body of
/// [`Limits::max_message_len`]), shared by its streams' requests.
#[derive(Debug)]
struct BodyBudget {
    held: AtomicUsize,
    limit: usize,
    /// The async calls the connection's streams run, against the
    /// dispatcher's `max_in_flight` (each stream has a scratch
    /// `Connection` of its own, whose cap alone let one connection run
    /// `max_concurrent_streams` times it).
    calls: AtomicUsize,
    /// Woken as calls end, for the streams waiting for a slot.
    freed: Arc<tokio::sync::Notify>,
}

/// A stream's calls counted among its HTTP/2 connection's
/// ([`BodyBudget::calls`]), given back when it is dropped (its stream
/// reset, its response dropped).
#[derive(Debug, Default)]
struct CountedCalls {
    budget: Option<Arc<BodyBudget>>,
    calls: usize,
}

impl CountedCalls {
    fn set(&mut self, calls: usize) {
        if let Some(budget) = &self.budget {
            budget.recount(self.calls, calls);
            self.calls = calls;
        }
    }
}

impl Drop for CountedCalls {
    fn drop(&mut self) {
        self.set(0);
    }
}

impl BodyBudget {
    fn new(limit: usize) -> BodyBudget {
        BodyBudget {
            held: AtomicUsize::new(0),
            limit,
            calls: AtomicUsize::new(0),
            freed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Takes a slot for a stream about to start its calls, if fewer than
    /// `cap` run.
    fn admit(&self, cap: usize) -> bool {
        self.calls
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c < cap).then_some(c + 1)
            })
            .is_ok()
    }

    /// A stream's count moves from `from` to `to` calls.
    fn recount(&self, from: usize, to: usize) {
        if to > from {
            self.calls.fetch_add(to - from, Ordering::AcqRel);
        } else if from > to {
            self.calls.fetch_sub(from - to, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }
}

/// A request's way to its connection's [`BodyBudget`]: put in the
/// extensions of each HTTP/2 request by the server ([`Counted`]), taken
/// out by the [`HttpService`] that reads the body, in whatever layers
/// there are between them. Private: only the server can give one.
#[derive(Clone, Debug)]
struct ConnectionBodies(Arc<BodyBudget>);

/// The bytes of its connection's [`BodyBudget`] one body holds, given
/// back when it is dropped: the body answered, refused, cut off by a
/// reset, or its response dropped (hyper drops it when the client resets
/// the stream). `budget` is `None` for a request not counted (HTTP/1, a
/// server other than rpcwire's).
#[derive(Debug, Default)]
struct BodyShare {
    budget: Option<Arc<BodyBudget>>,
    bytes: usize,
}

impl BodyShare {
    /// Takes `n` more bytes, or answers the limit they would pass
    /// (nothing taken).
    fn take(&mut self, n: usize) -> Result<(), usize> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        // Checked before it is added: an addition undone after would have
        // other streams refused meanwhile for bytes never held.
        budget
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(n).filter(|&t| t <= budget.limit)
            })
            .map_err(|_| budget.limit)?;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget
            && self.bytes > 0
        {
            budget.held.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

/// [`HttpService::gzip`] for one request: the threshold, and whether the
/// client accepts gzip.
#[derive(Clone, Copy, Debug)]
struct Gzip {
    min_len: usize,
    accepted: bool,
}

enum State {
    /// Collecting the body.
    Reading {
        /// The first chunk: the whole body when it comes in one.
        first: Bytes,
        /// Later chunks, after a copy of the first.
        rest: BytesMut,
        len: usize,
        /// The body's announced length (a capacity hint).
        hint: usize,
        /// The request's headers and peer, for its context.
        request: Option<(HeaderMap, Option<SocketAddr>)>,
        /// Armed the first time the body is not all there: a body that
        /// comes with its head costs no timer.
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        /// What of its connection's budget the body holds (HTTP/2).
        share: BodyShare,
        /// An HTTP/2 stream: refused at once, its rest not read (the
        /// stream ends alone, RFC 9113 §8.1).
        http2: bool,
    },
    /// Reading the rest of the body of a refused request (at most `left`
    /// more bytes), dropping it, before the answer `then`: a body past the
    /// limit (then the 413), or one of a request refused for its method or
    /// `Content-Type`. At most until the body timeout (a reading's deadline
    /// is carried on); a body not read to its end (past `left`, late, cut)
    /// closes the connection after the answer.
    Draining {
        left: usize,
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        then: Option<Response<ResponseBody>>,
    },
    /// Waiting for async calls.
    /// A whole body of an HTTP/2 stream waiting for a slot among its
    /// connection's calls ([`BodyBudget::admit`]).
    Queued {
        input: Bytes,
        request: Option<(HeaderMap, Option<SocketAddr>)>,
        share: BodyShare,
        wait: Option<Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    },
    Dispatching {
        conn: Option<Box<Connection>>,
        out: Vec<u8>,
        /// The message, kept alive while its calls run.
        _input: Bytes,
        /// Its share of the connection's budget, handed on with calls
        /// still running after the reply ([`Shared::release`]).
        share: BodyShare,
        /// Its calls counted among its connection's (HTTP/2).
        counted: CountedCalls,
        /// Registered to hear the connection's lingering calls end, while
        /// waiting at the cap for them ([`Lingering::poll_room`]).
        room: Option<Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    },
    /// Compressing a large reply on tokio's blocking pool
    /// ([`gzip_packed`]); dropped, the compression's result is dropped.
    Compressing(Pin<Box<dyn Future<Output = Vec<u8>> + Send>>),
    /// Answered without dispatching, or done.
    Ready(Option<Response<ResponseBody>>),
}

/// The `200` carrying `packed`, a reply compressed with gzip.
fn gzip_response(packed: Vec<u8>) -> Response<ResponseBody> {
    let mut response = json_response(StatusCode::OK, Bytes::from(packed));
    let headers = response.headers_mut();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    headers.append(VARY, HeaderValue::from_static("accept-encoding"));
    response
}

impl<S, K, B> std::fmt::Debug for ResponseFuture<S, K, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Reading { .. } => "reading",
            State::Draining { .. } => "draining",
            State::Queued { .. } => "queued",
            State::Dispatching { .. } => "dispatching",
            State::Compressing(_) => "compressing",
            State::Ready(_) => "ready",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, K, B> Future for ResponseFuture<S, K, B>
where
    S: Send + Sync + 'static,
    K: 'static,
    B: Body,
{
    type Output = Result<Response<ResponseBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let shared = &**this.shared;
        loop {
            match this.state {
                State::Ready(response) => {
                    let mut response = response.take().expect("polled after completion");
                    if let Some((allowed, varies)) = this.allow_origin.take() {
                        let headers = response.headers_mut();
                        if let Some(allowed) = allowed {
                            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
                        }
                        if varies {
                            headers.append(VARY, HeaderValue::from_static("origin"));
                        }
                    }
                    return Poll::Ready(Ok(response));
                }
                State::Reading {
                    first,
                    rest,
                    len,
                    hint,
                    request,
                    deadline,
                    share,
                    http2,
                } => {
                    let frame = match this.body.as_mut().poll_frame(cx) {
                        Poll::Ready(frame) => frame,
                        Poll::Pending => {
                            ready!(poll_body_deadline(deadline, shared.body_timeout, cx));
                            *this.state = State::Ready(Some(shared.refuse_slow_body()));
                            continue;
                        }
                    };
                    match frame {
                        Some(Ok(frame)) => {
                            let Ok(mut data) = frame.into_data() else {
                                continue; // Trailers: ignored.
                            };
                            let n = data.remaining();
                            if n == 0 {
                                continue;
                            }
                            *len += n;
                            if *len > shared.max_body && *http2 {
                                // At once: the stream ends alone (hyper
                                // resets it once the 413 is sent), the
                                // connection serves on.
                                *this.state = State::Ready(Some(shared.refuse_too_large()));
                                continue;
                            }
                            if *len > shared.max_body {
                                // HTTP/1.1: read on (discarding) up to the
                                // limit again, so a client that finishes
                                // writing its body reads the 413 instead of
                                // a reset.
                                *this.state = State::Draining {
                                    left: shared.max_body,
                                    deadline: deadline.take(),
                                    then: Some(shared.refuse_too_large()),
                                };
                                continue;
                            }
                            if let Err(limit) = share.take(n) {
                                // Answered now, not when other streams give
                                // their share back: they may never (a client
                                // holding them open), and the client learns
                                // at once that this stream went unserved.
                                *this.state = State::Ready(Some(shared.refuse_over_budget(limit)));
                                continue;
                            }
                            if first.is_empty() && rest.is_empty() && this.body.is_end_stream() {
                                // The whole body in one chunk: `Bytes` hands
                                // itself over without a copy. A first chunk
                                // with more to come is copied like the rest:
                                // a slice of the connection's read buffer
                                // (hyper's HTTP/2 DATA frames are) kept while
                                // the rest comes would pin all of that buffer
                                // for a few counted bytes.
                                *first = data.copy_to_bytes(n);
                            } else {
                                if rest.capacity() - rest.len() < n {
                                    // The announced length is a claim, not
                                    // bytes: room for it only as it comes
                                    // (a client announcing the limit on
                                    // each HTTP/2 stream and sending two
                                    // bytes would otherwise cost the limit
                                    // per stream), doubling, and never
                                    // past the announced length or the
                                    // limit (which `BytesMut`'s own growth
                                    // would double past).
                                    let room = (*len).saturating_mul(2).max(BODY_ROOM);
                                    let target = if *hint > *len { *hint } else { room };
                                    let cap = target.min(room).min(shared.max_body).max(*len);
                                    let mut grown = BytesMut::with_capacity(cap);
                                    grown.put_slice(if rest.is_empty() { first } else { rest });
                                    *rest = grown;
                                }
                                rest.put(data);
                            }
                        }
                        Some(Err(_)) => {
                            *this.state = State::Ready(Some(unreadable_body()));
                        }
                        None => {
                            let input = if rest.is_empty() {
                                std::mem::take(first)
                            } else {
                                std::mem::take(rest).freeze()
                            };
                            *this.state = State::Queued {
                                input,
                                request: Some(request.take().unwrap_or_default()),
                                share: std::mem::take(share),
                                wait: None,
                            };
                        }
                    }
                }
                State::Draining {
                    left,
                    deadline,
                    then,
                } => {
                    let frame = match this.body.as_mut().poll_frame(cx) {
                        Poll::Ready(frame) => frame,
                        Poll::Pending => {
                            // A client that stops sending gets the answer at
                            // the body timeout, not never.
                            ready!(poll_body_deadline(deadline, shared.body_timeout, cx));
                            *this.state = State::Ready(then.take().map(closing));
                            continue;
                        }
                    };
                    match frame {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                let n = data.remaining();
                                if n >= *left {
                                    *this.state = State::Ready(then.take().map(closing));
                                } else {
                                    *left -= n;
                                }
                            }
                        }
                        Some(Err(_)) => *this.state = State::Ready(then.take().map(closing)),
                        None => *this.state = State::Ready(then.take()),
                    }
                }
                State::Queued {
                    input,
                    request,
                    share,
                    wait,
                } => {
                    let cap = shared.dispatcher.inner.max_in_flight;
                    let budget = share.budget.clone();
                    if let Some(budget) = &budget {
                        // An HTTP/2 stream starts once its connection runs
                        // fewer calls than the cap (the cap is the
                        // connection's, as over HTTP/1.1 and WebSocket).
                        // A slot free at once (the common case) costs no
                        // registration.
                        while !budget.admit(cap) {
                            let waiting = wait.get_or_insert_with(|| {
                                Box::pin(Arc::clone(&budget.freed).notified_owned())
                            });
                            // Registered, then looked again: a call ending
                            // between the two looks wakes it.
                            waiting.as_mut().enable();
                            if budget.admit(cap) {
                                break;
                            }
                            if waiting.as_mut().poll(cx).is_pending() {
                                return Poll::Pending;
                            }
                            *wait = None;
                        }
                        *wait = None;
                    }
                    let (headers, peer) = request.take().unwrap_or_default();
                    let mut conn = shared.checkout(headers, peer);
                    let input = std::mem::take(input);
                    let mut out = Vec::with_capacity(input.len().clamp(128, 64 * 1024));
                    conn.start(&shared.dispatcher, &input, &mut out);
                    // The slot taken stands for the calls it started.
                    let mut counted = CountedCalls { budget, calls: 1 };
                    counted.set(conn.in_flight());
                    *this.state = State::Dispatching {
                        conn: Some(conn),
                        out,
                        _input: input,
                        share: std::mem::take(share),
                        counted,
                        room: None,
                    };
                }
                State::Dispatching {
                    conn,
                    out,
                    share,
                    counted,
                    room,
                    ..
                } => {
                    let c = conn.as_mut().expect("connection present while dispatching");
                    let cap = shared.dispatcher.inner.max_in_flight;
                    let lingering = this.lingering.as_deref();
                    let waits = |c: &Connection| {
                        c.messages_in_flight() > 0
                            || (c.in_flight() > 0
                                && lingering.is_some_and(|l| l.full(c.in_flight(), cap)))
                    };
                    while waits(c) {
                        let polled = c.poll_replies(&shared.dispatcher, cx, out);
                        counted.set(c.in_flight());
                        // Asked again: calls that end with no reply
                        // (notifications) end in a pending poll, and
                        // nothing wakes the task after.
                        if polled.is_pending() && waits(c) {
                            // Waiting on the calls other tasks run too:
                            // woken as they end.
                            if c.messages_in_flight() == 0
                                && let Some(l) = lingering
                                && l.poll_room(c.in_flight(), cap, room, cx).is_ready()
                            {
                                continue;
                            }
                            return Poll::Pending;
                        }
                    }
                    // Calls left running after the reply are the
                    // lingering ones, counted there.
                    counted.set(0);
                    let conn = conn.take().expect("connection present while dispatching");
                    shared.report_unmatched(&conn);
                    let mut out = std::mem::take(out);
                    // The reply waits for the client to read it (an HTTP/2
                    // stream, for its window) in the buffer it was written
                    // in, whose doubling growth left up to twice its size:
                    // given back (a large block shrinks in place).
                    if out.capacity() - out.len() > 4096 {
                        out.shrink_to_fit();
                    }
                    this.shared
                        .release(conn, std::mem::take(share), this.lingering.clone());
                    let response = match *this.gzip {
                        _ if out.is_empty() => no_content(),
                        Some(gzip) if out.len() >= gzip.min_len && gzip.accepted => {
                            if out.len() >= GZIP_OFF_THREAD
                                && tokio::runtime::Handle::try_current().is_ok()
                            {
                                // Off the connection's task: see
                                // `GZIP_OFF_THREAD`.
                                *this.state =
                                    State::Compressing(Box::pin(gzip_packed(Bytes::from(out), 0)));
                                continue;
                            }
                            let mut packed = Vec::new();
                            gzip_into(&out, &mut packed);
                            gzip_response(packed)
                        }
                        Some(gzip) if out.len() >= gzip.min_len => {
                            let mut response = json_response(StatusCode::OK, Bytes::from(out));
                            response
                                .headers_mut()
                                .append(VARY, HeaderValue::from_static("accept-encoding"));
                            response
                        }
                        _ => json_response(StatusCode::OK, Bytes::from(out)),
                    };
                    *this.state = State::Ready(Some(response));
                }
                State::Compressing(packing) => {
                    let packed = ready!(packing.as_mut().poll(cx));
                    *this.state = State::Ready(Some(gzip_response(packed)));
                }
            }
        }
    }
}

/// What a request's `Accept-Encoding` fields say about gzip. Several
/// fields are one list (RFC 9110, 5.3), so each is read into the same
/// state: `gzip;q=0` in one and `*` in another refuse gzip, as
/// `gzip;q=0, *` does. `x-gzip` is `gzip` (8.4.1.3), and a coding listed
/// with `q=0` anywhere is "not acceptable" (12.5.3) however else it is
/// listed: contradictory listings (`gzip, x-gzip;q=0`, in either order)
/// get the answer uncompressed, never by which came last. An element
/// whose weight is not a qvalue (12.4.2: `q=abc`, `q=1.5`, `q=`) is left
/// out, as if absent.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AcceptEncoding {
    /// `gzip` (or `x-gzip`) listed with a weight above 0.
    gzip: bool,
    /// `gzip` (or `x-gzip`) listed with `q=0`.
    gzip_refused: bool,
    /// `*` listed with a weight above 0.
    any: bool,
    /// `*` listed with `q=0`.
    any_refused: bool,
}

impl AcceptEncoding {
    /// Reads one `Accept-Encoding` field's value.
    pub(super) fn read(&mut self, value: &[u8]) {
        for item in value.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let coding = parts.next().unwrap_or_default().trim_ascii();
            // An element whose weight is not a qvalue says nothing one
            // can trust (`q=abc`, `q=1.5`): left out, as if absent, so
            // that it neither accepts gzip nor refuses it.
            let mut refused = false;
            let mut malformed = false;
            for p in parts {
                let Some((name, q)) = split_once(p, b'=') else {
                    continue;
                };
                if !name.trim_ascii().eq_ignore_ascii_case(b"q") {
                    continue;
                }
                match qvalue_is_zero(q.trim_ascii()) {
                    Some(zero) => refused |= zero,
                    None => malformed = true,
                }
            }
            if malformed {
                continue;
            }
            let (listed, refusal) =
                if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
                    (&mut self.gzip, &mut self.gzip_refused)
                } else if coding == b"*" {
                    (&mut self.any, &mut self.any_refused)
                } else {
                    continue;
                };
            if refused {
                *refusal = true;
            } else {
                *listed = true;
            }
        }
    }

    /// Whether the fields read accept gzip: `gzip` (or `x-gzip`) listed,
    /// never with `q=0`; or, gzip not named at all, `*` listed, never
    /// with `q=0`.
    pub(super) fn gzip(&self) -> bool {
        if self.gzip_refused {
            false
        } else if self.gzip {
            true
        } else {
            self.any && !self.any_refused
        }
    }
}

/// Whether `q`, a weight's value, is zero; `None` when it is not a
/// qvalue (RFC 9110, 12.4.2: `"0" [ "." 0*3DIGIT ] / "1" [ "." 0*3("0") ]`).
fn qvalue_is_zero(q: &[u8]) -> Option<bool> {
    let (first, rest) = q.split_first()?;
    let decimals = match rest {
        [] => &[][..],
        [b'.', decimals @ ..] if decimals.len() <= 3 => decimals,
        _ => return None,
    };
    match first {
        b'0' if decimals.iter().all(u8::is_ascii_digit) => {
            Some(decimals.iter().all(|&b| b == b'0'))
        }
        b'1' if decimals.iter().all(|&b| b == b'0') => Some(false),
        _ => None,
    }
}

/// `bytes` split at the first `at`, which neither half holds.
fn split_once(bytes: &[u8], at: u8) -> Option<(&[u8], &[u8])> {
    let i = memchr::memchr(at, bytes)?;
    Some((&bytes[..i], &bytes[i + 1..]))
}

/// Answers at least this long are compressed on tokio's blocking pool
/// rather than on the connection's task; shorter ones inline.
///
/// Measured (release build, miniz_oxide's fastest level, eth_getLogs-like
/// hex, on a shared 2-core machine): compressing costs 6-9 ms per MiB
/// (0.1 ms for 16 KiB, 0.4-0.5 ms for 64 KiB, 35-45 ms for 5 MiB); handing
/// a job to a blocking-pool thread and waking on its end costs 5-10 us of
/// the runtime thread and 11 us of latency when the thread is idle and
/// waiting, but 65-260 us of latency added to the answer on that loaded
/// machine (the pool thread's wake-up, and caches). Below 64 KiB that
/// added latency is as long as the compression it saves the thread, for a
/// stall of under half a millisecond. Above it the stall grows with the
/// answer (35 ms for a 5 MiB `eth_getLogs` page, every other connection of
/// a one-thread runtime waiting) while the handoff's cost does not. It
/// is also the size past which rpcwire's HTTP/1.1 loop does not keep a
/// reply's buffer for the next, so handing the buffer over loses nothing.
pub(super) const GZIP_OFF_THREAD: usize = 64 * 1024;

/// How many answers are compressed on tokio's blocking pool at once,
/// process-wide: as many as the machine has CPUs. The pool itself would
/// start up to 512 threads (tokio's default) for a flood of large
/// answers, each holding its own buffers, all competing for the same
/// CPUs as the runtime threads they were taken off; more than one per
/// CPU compresses nothing sooner. Process-wide, not per service, because
/// the CPUs are: a program serving several services (or one service per
/// runtime thread, as the gateway) still compresses on at most that many
/// threads. A large answer that finds every slot taken waits for one
/// (its connection's task is free meanwhile) rather than compressing on
/// its runtime thread, which would bring the stall back under load.
fn gzip_slots() -> &'static Arc<tokio::sync::Semaphore> {
    static SLOTS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Arc::new(tokio::sync::Semaphore::new(cpus))
    })
}

/// `body` compressed with gzip at the fastest level, behind `room` zero
/// bytes (for a head to be written in front of it): on tokio's blocking
/// pool when `body` is at least [`GZIP_OFF_THREAD`] bytes long and a tokio
/// runtime is current (one slot of [`gzip_slots`] held while it runs),
/// inline otherwise (another executor has no blocking pool to use).
///
/// Cancel-safe: dropped (the client left), a compression under way runs
/// to its end on its thread and its result is dropped; the slot is given
/// back when it ends, so that slots bound threads at work, not answers
/// still wanted.
pub(super) async fn gzip_packed(body: Bytes, room: usize) -> Vec<u8> {
    fn pack(body: &[u8], room: usize) -> Vec<u8> {
        let mut packed = Vec::with_capacity(room + body.len() / 4 + 64);
        packed.resize(room, 0);
        gzip_into(body, &mut packed);
        packed
    }
    if body.len() < GZIP_OFF_THREAD {
        return pack(&body, room);
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return pack(&body, room);
    };
    // The semaphore is never closed.
    let Ok(slot) = Arc::clone(gzip_slots()).acquire_owned().await else {
        return pack(&body, room);
    };
    let job = body.clone();
    let packing = runtime.spawn_blocking(move || {
        let _slot = slot;
        pack(&job, room)
    });
    match packing.await {
        Ok(packed) => packed,
        // The runtime shutting down (the job never ran): the body is
        // still here.
        Err(_) => pack(&body, room),
    }
}

/// Appends `body` compressed with gzip at the fastest level to `out`.
pub(super) fn gzip_into(body: &[u8], out: &mut Vec<u8>) {
    use std::io::Write as _;
    out.reserve(body.len() / 4 + 64);
    let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    // Writing into a `Vec` cannot fail.
    let _ = encoder.write_all(body);
    let _ = encoder.finish();
}

/// Whether a `Content-Type` names JSON: `application/json`,
/// `application/json-rpc` or `application/jsonrequest`, in any case, with
/// or without parameters (`; charset=utf-8`).
pub(super) fn is_json_content_type(value: &[u8]) -> bool {
    let essence = match memchr::memchr(b';', value) {
        Some(i) => &value[..i],
        None => value,
    };
    let essence = essence.trim_ascii();
    [
        &b"application/json"[..],
        b"application/json-rpc",
        b"application/jsonrequest",
    ]
    .iter()
    .any(|t| super::eq_ignore_case(essence, t))
}

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

fn json_response(status: StatusCode, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, APPLICATION_JSON);
    response
}

/// `response` as the answer to a `HEAD`: its headers, with the length its
/// content would have, and no content. hyper leaves the content out of an
/// HTTP/1 answer to `HEAD` itself, but sends it over HTTP/2, where a
/// client then resets the stream (RFC 9113 8.1.1) and never sees the
/// status.
fn headers_only(mut response: Response<ResponseBody>) -> Response<ResponseBody> {
    let len = response.body().size_hint().lower();
    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    *response.body_mut() = Full::new(Bytes::new());
    response
}

fn no_content() -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

/// `response`, saying the connection closes after it (HTTP/1.1; hyper
/// leaves the header out of HTTP/2 responses, where a stream ends alone).
fn closing(mut response: Response<ResponseBody>) -> Response<ResponseBody> {
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn not_allowed() -> Response<ResponseBody> {
    let mut response = json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"HTTP method not allowed: use POST"}}}"#,
        ),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static("POST"));
    response
}

/// The `403` for a request from an origin the CORS policy does not allow.
pub(super) fn forbidden_origin(origin: &HeaderValue) -> Response<ResponseBody> {
    json_response(
        StatusCode::FORBIDDEN,
        Bytes::from(super::cors::forbidden_body(origin)),
    )
}

/// The answer to a browser's preflight from an allowed origin: `POST`
/// with the headers it asks for (rpcwire reads only `Content-Type`, and a
/// client's own headers are for the handlers to judge).
fn preflight(cors: &Cors, allowed: HeaderValue, request: &HeaderMap) -> Response<ResponseBody> {
    let mut response = no_content();
    let headers = response.headers_mut();
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, OPTIONS"),
    );
    let asked = request
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or(HeaderValue::from_static("content-type"));
    headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked);
    headers.insert(ACCESS_CONTROL_MAX_AGE, cors.max_age_header().clone());
    headers.insert(
        VARY,
        HeaderValue::from_static(
            "origin, access-control-request-method, access-control-request-headers",
        ),
    );
    response
}

fn unsupported_media_type() -> Response<ResponseBody> {
    json_response(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"unsupported Content-Type: use application/json"}}}"#,
        ),
    )
}

/// The `415` for a request body in a content coding (`gzip`, ...): it is
/// not decoded, and read as JSON it was a bare -32700 that named no cause
/// (RFC 9110 15.5.16: the answer says which codings are taken).
fn unsupported_encoding() -> Response<ResponseBody> {
    let mut response = json_response(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"unsupported Content-Encoding: send the body uncompressed"}}}"#,
        ),
    );
    response
        .headers_mut()
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    response
}

/// Polls the body's deadline, armed (`timeout` from now) the first time
/// the body is not all there: a body that comes with its head costs no
/// timer.
fn poll_body_deadline(
    deadline: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
    cx: &mut TaskContext<'_>,
) -> Poll<()> {
    deadline
        .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)))
        .as_mut()
        .poll(cx)
}

fn unreadable_body() -> Response<ResponseBody> {
    json_response(StatusCode::BAD_REQUEST, Bytes::from_static(UNREADABLE_BODY))
}

/// The body of the `400` for a request body that could not be read.
pub(super) const UNREADABLE_BODY: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"the request body could not be read"}}}"#;

/// Makes the service for one accepted connection, given the client's
/// address: what [`serve`] takes.
///
/// [`HttpService`] implements it (each connection's clone tells handlers
/// the peer's address), and so does any `Fn(SocketAddr) -> service`, the
/// way to wrap the service in tower layers:
///
/// ```no_run
/// # async fn run(service: rpcwire::server::http::HttpService, listener: tokio::net::TcpListener) {
/// use std::time::Duration;
/// use rpcwire::server::{Limits, Shutdown, http::serve};
/// use tower::ServiceBuilder;
/// let make = move |peer| {
///     ServiceBuilder::new()
///         .timeout(Duration::from_secs(10))
///         .service(service.clone().with_peer_addr(peer))
/// };
/// serve(listener, make, Limits::default(), None, Shutdown::new()).await;
/// # }
/// ```
pub trait PerConnection: Send + 'static {
    /// The service one connection is served with.
    type Service;
    /// The service for a connection from `peer`.
    fn for_peer(&self, peer: SocketAddr) -> Self::Service;

    /// Whether the service [`for_peer`](PerConnection::for_peer) gives
    /// answers an HTTP/1.1 request without one valid `Host` itself (rpcwire's
    /// own services do, counting it in their metrics); the server answers
    /// it for any other (`400`, counted in the server's metrics). Not for
    /// use outside rpcwire.
    #[doc(hidden)]
    fn answers_host_rule(&self) -> bool {
        false
    }

    /// Serves a connection from `peer` with rpcwire's own HTTP/1.1 loop,
    /// when the service is one of rpcwire's own (without layers around
    /// it), or gives the stream back for hyper. Not for use outside
    /// rpcwire: only its own services have that loop.
    #[doc(hidden)]
    fn serve_own_http1(
        &self,
        peer: SocketAddr,
        stream: TcpStream,
        kit: &ConnectionKit,
        lingering: &Arc<Lingering>,
    ) -> Result<OwnConnection, TcpStream> {
        let _ = (peer, kit, lingering);
        Err(stream)
    }

    /// [`for_peer`](PerConnection::for_peer), the async calls its requests
    /// leave running counted in `lingering` (the server waits for them,
    /// and drops them at the end of its shutdown grace). Not for use
    /// outside rpcwire: only its own services leave calls running.
    #[doc(hidden)]
    fn for_peer_on_server(&self, peer: SocketAddr, lingering: &Arc<Lingering>) -> Self::Service {
        let _ = lingering;
        self.for_peer(peer)
    }
}

/// A connection served by rpcwire's own HTTP/1.1 loop (see
/// [`PerConnection::serve_own_http1`]).
#[doc(hidden)]
pub type OwnConnection = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a connection's task needs from its server: hyper's builder (for
/// what rpcwire's own loop hands over), the timers' settings, the shutdown
/// signals. Not for use outside rpcwire.
#[doc(hidden)]
#[derive(Clone)]
pub struct ConnectionKit {
    pub(super) builder: Arc<auto::Builder<TokioExecutor>>,
    pub(super) config: Arc<ConnConfig>,
    pub(super) max_header_bytes: usize,
    pub(super) shutdown: Shutdown,
    pub(super) hard_stop: Shutdown,
}

impl std::fmt::Debug for ConnectionKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionKit").finish_non_exhaustive()
    }
}

impl ConnectionKit {
    /// Serves `stream` with rpcwire's own HTTP/1.1 loop answering with
    /// `http`, handing it to hyper with `service` (which answers what
    /// `http` does, and maybe more) when a request needs hyper.
    pub(super) fn own_http1<S, K, Svc>(
        &self,
        stream: TcpStream,
        http: HttpService<S, K>,
        service: Svc,
    ) -> OwnConnection
    where
        S: Send + Sync + 'static,
        K: 'static,
        Svc: Service<Request<Incoming>, Response = Response<ResponseBody>> + Clone + Send + 'static,
        Svc::Future: Send + 'static,
        Svc::Error: Into<BoxError>,
    {
        let kit = self.clone();
        Box::pin(async move {
            if let super::h1::Ended::HandOver(stream, read, header_deadline, client) =
                super::h1::serve(stream, &http, &kit).await
            {
                let handed = HandedOver {
                    read,
                    header_deadline,
                    client,
                };
                serve_connection(kit, stream, handed, service, false).await;
            }
        })
    }
}

impl<S: Send + Sync + 'static, K: 'static> PerConnection for HttpService<S, K> {
    type Service = HttpService<S, K>;
    fn for_peer(&self, peer: SocketAddr) -> Self::Service {
        self.clone().with_peer_addr(peer).on_server()
    }

    fn answers_host_rule(&self) -> bool {
        true
    }

    fn serve_own_http1(
        &self,
        peer: SocketAddr,
        stream: TcpStream,
        kit: &ConnectionKit,
        lingering: &Arc<Lingering>,
    ) -> Result<OwnConnection, TcpStream> {
        let service = self.for_peer_on_server(peer, lingering);
        Ok(kit.own_http1(stream, service.clone(), service))
    }

    fn for_peer_on_server(&self, peer: SocketAddr, lingering: &Arc<Lingering>) -> Self::Service {
        self.clone()
            .on_connection(peer, Arc::clone(lingering))
            .on_server()
    }
}

impl<F, T> PerConnection for F
where
    F: Fn(SocketAddr) -> T + Send + 'static,
{
    type Service = T;
    fn for_peer(&self, peer: SocketAddr) -> T {
        self(peer)
    }
}

/// Serves HTTP on `listener` until `shutdown` is triggered, with the
/// default HTTP settings of [`Server`]; see [`Server::serve`].
///
/// ```no_run
/// use std::sync::Arc;
/// use rpcwire::server::{Limits, Metrics, Shutdown, http::{HttpService, serve}};
/// use rpcwire::{Call, Dispatcher};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let metrics = Arc::new(Metrics::default());
/// let d = Dispatcher::builder(())
///     .method("eth_chainId", |call: Call<'_, ()>| call.reply.str("0x1"))
///     .observer(metrics.clone())
///     .build()?;
/// let limits = Limits::default();
/// let service = HttpService::new(d, &limits, Some(metrics.clone()));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8545").await?;
/// let shutdown = Shutdown::new();
/// let stop = shutdown.clone();
/// tokio::spawn(async move {
///     let _ = tokio::signal::ctrl_c().await;
///     stop.trigger();
/// });
/// serve(listener, service, limits, Some(metrics), shutdown).await;
/// # Ok(()) }
/// ```
pub fn serve<M, B>(
    listener: TcpListener,
    service: M,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
) -> impl Future<Output = ()> + Send
where
    M: PerConnection,
    M::Service: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    <M::Service as Service<Request<Incoming>>>::Future: Send + 'static,
    <M::Service as Service<Request<Incoming>>>::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut server = Server::new(limits);
    if let Some(metrics) = metrics {
        server = server.metrics(metrics);
    }
    server.serve(listener, service, shutdown)
}

/// The HTTP server: [`Limits`] and [`Metrics`], plus the settings that are
/// HTTP's own. [`serve`] is `Server::new(limits).metrics(m).serve(..)`.
#[derive(Clone, Debug)]
pub struct Server {
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    header_read_timeout: Duration,
    max_header_bytes: usize,
    own_http1: bool,
}

impl Server {
    /// Default for [`header_read_timeout`](Server::header_read_timeout):
    /// 10 s.
    pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default for [`max_header_bytes`](Server::max_header_bytes): 64 KiB.
    pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

    /// A server enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Server {
            limits: limits.clocked(),
            metrics: None,
            header_read_timeout: Self::DEFAULT_HEADER_READ_TIMEOUT,
            max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES,
            own_http1: true,
        }
    }

    /// Counts connections and limit hits in `metrics`.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// How long a client may take to send a request head (default 10 s):
    /// a client trickling its headers (slowloris) is dropped then, and
    /// counted as [`LimitKind::Header`]. The clock runs from a connection's
    /// start to its first request (whatever the protocol: a silent client,
    /// a trickled HTTP/2 preface), and on HTTP/1 from the first byte of
    /// each later request head until the head is complete; a kept-alive
    /// connection waiting for its next request is under
    /// [`Limits::idle_timeout`] instead.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.min(super::NEVER);
        self
    }

    /// The largest request head (request line and headers) read, in bytes
    /// (default 64 KiB, at least 8 KiB): past it an HTTP/1 client gets `431`
    /// and is disconnected (counted as [`LimitKind::Header`]); an HTTP/2
    /// client gets the same limit as `SETTINGS_MAX_HEADER_LIST_SIZE`.
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes.max(8192);
        self
    }

    /// Whether rpcwire's own HTTP/1.1 loop answers the plain requests of
    /// connections served with rpcwire's own services (default `true`).
    ///
    /// When the service is an [`HttpService`] or a
    #[cfg_attr(feature = "ws", doc = "[`Combined`](super::combined::Combined)")]
    #[cfg_attr(
        not(feature = "ws"),
        doc = "`server::combined::Combined` (feature `ws`)"
    )]
    /// (not wrapped in layers), a
    /// connection's keep-alive `POST`s with a `Content-Length` body are
    /// read, dispatched and answered by a loop of rpcwire's own; the first
    /// request it does not take (HTTP/2, an upgrade, a chunked body,
    /// another method or content type, a body past the limit, HTTP/1.0)
    /// hands the connection, with what was read of it, to hyper. Same
    /// answers, same limits and timers, no allocation per request, less
    /// CPU (on the gateway's load test hyper's server connection was about
    /// a third of its user time per forwarded request). `false` serves
    /// every connection with hyper.
    pub fn own_http1(mut self, on: bool) -> Self {
        self.own_http1 = on;
        self
    }

    /// Serves HTTP/1.1 and HTTP/2 (prior knowledge) on `listener`, one
    /// service per connection from `make`, until `shutdown` is triggered.
    ///
    /// * Connections past [`Limits::max_connections`] are accepted and
    ///   closed at once (counted as [`LimitKind::Connections`]).
    /// * A connection with no traffic and no request being answered for
    ///   [`Limits::idle_timeout`] is shut down gracefully, and dropped if it
    ///   still cannot finish (a client that does not read its reply) after
    ///   another such period (counted as [`LimitKind::Idle`]). Over HTTP/2,
    ///   frames count as traffic only while a request is being answered or
    ///   a response body is still being sent: a client's PINGs (a
    ///   keepalive) do not keep an otherwise quiet connection open.
    /// * HTTP/2 streams per connection are capped at
    ///   [`Limits::max_in_flight`] (0 counts as 1, as on the stream
    ///   transports: 0 streams would refuse every HTTP/2 request), and the
    ///   bytes of request bodies they hold together at
    ///   [`Limits::max_connection_body_bytes`] (a stream past it is
    ///   answered `503`, counted as [`LimitKind::ConnectionBodyBytes`]).
    /// * On shutdown the listener is closed at once (new connections are
    ///   refused), idle connections close, requests in flight are answered
    ///   and their replies written whole, saying `connection: close`
    ///   (requests pipelined behind them are not started); connections
    ///   still busy after [`Limits::shutdown_grace`] are dropped. Async
    ///   notifications left running after their `204` (rpcwire's own
    ///   services) keep their connection's place until they end, and are
    ///   dropped with the busy connections. The future completes when
    ///   every connection is closed and no such call runs (a service
    ///   wrapped by the caller, through a closure, leaves its calls to the
    ///   dispatcher's timeout).
    pub async fn serve<M, B>(self, listener: TcpListener, make: M, shutdown: Shutdown)
    where
        M: PerConnection,
        M::Service: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        <M::Service as Service<Request<Incoming>>>::Future: Send + 'static,
        <M::Service as Service<Request<Incoming>>>::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            // Ours runs instead: hyper's also runs while a kept-alive
            // connection waits for its next request.
            .header_read_timeout(None)
            // An end of stream read while a request is answered may be a
            // half-close (the client still reads the reply): hyper would
            // drop the call for it. `serve_connection` watches the client
            // instead (see `watch_client`).
            .half_close(true)
            .max_buf_size(self.max_header_bytes);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.limits.max_in_flight.clamp(1, u32::MAX as usize) as u32)
            .max_header_list_size(self.max_header_bytes.min(u32::MAX as usize) as u32);
        let builder = Arc::new(builder);
        // 0 is 1, as on every server.
        let max_connections = self.limits.max_connections.clamp(1, u32::MAX as usize);
        let permits = Arc::new(tokio::sync::Semaphore::new(max_connections));
        let hard_stop = Shutdown::new();
        let kit = ConnectionKit {
            builder,
            config: Arc::new(ConnConfig {
                idle: self.limits.idle_timeout.max(Duration::from_millis(10)),
                shutdown_grace: self.limits.shutdown_grace,
                header_timeout: self.header_read_timeout,
                metrics: self.metrics.clone(),
                body_budget: self
                    .limits
                    .max_connection_body_bytes
                    .max(self.limits.max_message_len),
            }),
            max_header_bytes: self.max_header_bytes,
            shutdown: shutdown.clone(),
            hard_stop: hard_stop.clone(),
        };
        {
            let listener = listener; // Closed when accepting stops.
            let stop = shutdown.triggered();
            tokio::pin!(stop);
            loop {
                let accepted = tokio::select! {
                    biased;
                    _ = &mut stop => break,
                    accepted = listener.accept() => accepted,
                };
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        super::accept_backoff(&e).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                    // Counted before the close the client sees.
                    if let Some(m) = &self.metrics {
                        m.limit_hit(LimitKind::Connections);
                    }
                    drop(stream);
                    continue;
                };
                super::accepted(&stream, self.limits.tcp_keepalive);
                let guard = self.metrics.as_ref().map(|m| m.connection());
                let lingering = Arc::new(Lingering::default());
                let own = if self.own_http1 {
                    make.serve_own_http1(peer, stream, &kit, &lingering)
                } else {
                    Err(stream)
                };
                let task = match own {
                    Ok(task) => Either::Left(task),
                    Err(stream) => Either::Right(serve_connection(
                        kit.clone(),
                        stream,
                        HandedOver::default(),
                        make.for_peer_on_server(peer, &lingering),
                        !make.answers_host_rule(),
                    )),
                };
                let hard_stop = hard_stop.clone();
                tokio::spawn(async move {
                    task.await;
                    // Its async notifications still running keep its
                    // place, so that the shutdown waits for them (and
                    // drops them at the end of its grace).
                    lingering.all_ended(&hard_stop).await;
                    drop((guard, permit));
                });
            }
        }
        let all = max_connections as u32;
        let drained = tokio::time::timeout(self.limits.shutdown_grace, permits.acquire_many(all));
        if drained.await.is_err() {
            hard_stop.trigger();
            let _ = permits.acquire_many(all).await;
        }
    }
}

/// What every connection task shares.
pub(super) struct ConnConfig {
    pub(super) idle: Duration,
    /// How long a connection that ends after a response
    /// ([`EndsConnection`]) gives its calls in flight.
    pub(super) shutdown_grace: Duration,
    /// How long a request head may take.
    pub(super) header_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
    /// An HTTP/2 connection's [`BodyBudget`] limit.
    body_budget: usize,
}

impl ConnConfig {
    pub(super) fn hit(&self, kind: LimitKind) {
        if let Some(m) = &self.metrics {
            m.limit_hit(kind);
        }
    }
}

/// One connection's traffic, as its timers see it.
#[derive(Default)]
struct Activity {
    /// Bytes moved since the idle timer last looked.
    touched: AtomicBool,
    /// Requests being answered.
    active: AtomicUsize,
    /// Bytes arrived while no request was being answered, and no request
    /// was dispatched since: a request head on its way.
    head: AtomicBool,
    /// Whether any request was dispatched.
    served: AtomicBool,
    /// The connection speaks HTTP/2 (it opened with the preface).
    h2: AtomicBool,
    /// The last request dispatched was HTTP/1.0 (which no 1xx may answer).
    http10: AtomicBool,
    /// An HTTP/2 response that ends its connection ([`EndsConnection`]:
    /// the `408` of a body that did not arrive in time) was answered: the
    /// connection shuts down gracefully (a GOAWAY, its other streams
    /// answered), as an HTTP/1.1 one closes after it.
    close_asked: AtomicBool,
    /// The server's graceful shutdown: once triggered, each HTTP/1 response
    /// says `connection: close`, so that hyper starts nothing pipelined
    /// behind it (it looks at its own graceful shutdown only when polled).
    shutdown: Option<Shutdown>,
    /// HTTP/2: the connection's [`BodyBudget`], made at its first request.
    bodies: std::sync::OnceLock<ConnectionBodies>,
}

impl Activity {
    #[inline]
    fn touch(&self) {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
    }

    /// Bytes moved on the socket: traffic for the idle timer, except over
    /// HTTP/2 while no request is being answered and its connection holds
    /// no body and no reply unwritten. Frames then (a client's PINGs and
    /// their acks, SETTINGS, WINDOW_UPDATEs) kept a connection that asked
    /// for nothing open for good; HTTP/2's idle time counts from its last
    /// stream, as Go's and nginx's servers count it, and a response body
    /// still being sent counts by its own frames ([`BodyProgress`]), so
    /// that one waiting for an event with PINGs alone going on is idle, as
    /// over HTTP/1.1.
    #[inline]
    fn touch_io(&self) {
        if self.h2.load(Ordering::Relaxed)
            && self.active.load(Ordering::Relaxed) == 0
            && self
                .bodies
                .get()
                .is_none_or(|b| b.0.held.load(Ordering::Relaxed) == 0)
        {
            return;
        }
        self.touch();
    }
}

/// Wakes a connection's task for its timers and shutdown signals, and
/// notes that one of them fired.
pub(super) struct Signal {
    pub(super) fired: AtomicBool,
    pub(super) task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// What rpcwire's own HTTP/1.1 loop hands hyper's side with a connection:
/// the bytes read and not answered, the header deadline already running,
/// and what it knew of the client's side.
struct HandedOver {
    read: Bytes,
    header_deadline: Option<tokio::time::Instant>,
    client: super::h1::Client,
}

impl Default for HandedOver {
    fn default() -> Self {
        HandedOver {
            read: Bytes::new(),
            header_deadline: None,
            client: super::h1::Client::Sending,
        }
    }
}

/// How a connection ended, when it ended on our side.
enum End {
    Hyper(Result<(), BoxError>),
    HeaderTimeout,
    Dropped,
}

/// Serves one connection: hyper's, under the header and idle timers and
/// both shutdown signals.
///
/// The header timer runs from a connection's start to its first request,
/// and on HTTP/1 from the first byte of each later request head to its
/// dispatch: a kept-alive connection waiting for its next request is under
/// the idle timer only (hyper's own header timer, which also runs while a
/// connection waits, is off). `handed` is what rpcwire's own loop hands
/// over with a connection (nothing for a fresh one).
async fn serve_connection<Svc, B>(
    kit: ConnectionKit,
    stream: TcpStream,
    handed: HandedOver,
    service: Svc,
    host_rule: bool,
) where
    Svc: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let ConnectionKit {
        builder,
        config,
        shutdown,
        hard_stop,
        ..
    } = kit;
    let HandedOver {
        read,
        header_deadline,
        client,
    } = handed;
    // A request handed over is answered whole in a graceful shutdown that
    // began while its head came in (as on hyper's path): hyper has to read
    // it before it is told to shut down, which would otherwise cancel the
    // connection that has not read its request yet.
    let mut handed_a_request = !read.is_empty();
    let activity = Arc::new(Activity {
        shutdown: Some(shutdown.clone()),
        ..Activity::default()
    });
    let socket = Arc::new(Mutex::new(Socket {
        stream,
        pipelined: BytesMut::new(),
        client,
        reset: None,
        hyper_reading: false,
        end_seen: client != super::h1::Client::Sending,
    }));
    let io = TokioIo::new(Tracked {
        socket: Arc::clone(&socket),
        read,
        activity: Arc::clone(&activity),
        preface: 0,
    });
    let service = Counted {
        inner: service,
        activity: Arc::clone(&activity),
        host_rule: host_rule.then(|| Arc::clone(&config)),
        body_budget: config.body_budget,
    };
    // With upgrades: a service may answer `101` and take the connection
    // over (WebSocket on the same port, `server::combined`); for every
    // other response this is the same as `serve_connection`.
    // Boxed, so that it can be dropped (with the socket it holds) before
    // the close lingers.
    let mut conn = Box::pin(builder.serve_connection_with_upgrades(io, service));
    let stop = shutdown.triggered();
    tokio::pin!(stop);
    let hard = hard_stop.triggered();
    tokio::pin!(hard);
    // Armed from the start: the first request must come in time.
    let header = tokio::time::sleep_until(
        header_deadline.unwrap_or_else(|| tokio::time::Instant::now() + config.header_timeout),
    );
    tokio::pin!(header);
    let mut header_armed = true;
    let period = config.idle / 2;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut graceful, mut quiet, mut idle_closing) = (false, 0u32, false);
    // Armed when a response ends the connection ([`EndsConnection`]).
    let mut ending: Option<Pin<Box<tokio::time::Sleep>>> = None;
    // Timers and shutdown signals are polled with a waker of their own,
    // only when one of them fired: a wake-up for I/O costs no lock of the
    // shared shutdown channel and no timer registration.
    let signal = Arc::new(Signal {
        fired: AtomicBool::new(true),
        task: AtomicWaker::new(),
    });
    let signal_waker = Waker::from(Arc::clone(&signal));
    let end = std::future::poll_fn(|cx| {
        signal.task.register(cx.waker());
        let due = signal.fired.swap(false, Ordering::AcqRel);
        let mut scx = TaskContext::from_waker(&signal_waker);
        if due {
            if hard.as_mut().poll(&mut scx).is_ready() {
                return Poll::Ready(End::Dropped);
            }
            if !graceful && !handed_a_request && stop.as_mut().poll(&mut scx).is_ready() {
                conn.as_mut().graceful_shutdown();
                graceful = true;
            }
            if ending
                .as_mut()
                .is_some_and(|ending| ending.as_mut().poll(&mut scx).is_ready())
            {
                return Poll::Ready(End::Dropped);
            }
        }
        // Set by a stream's task before hyper hands its response here.
        if ending.is_none() && activity.close_asked.load(Ordering::Acquire) {
            if !graceful {
                conn.as_mut().graceful_shutdown();
                graceful = true;
            }
            // h2 sends its final GOAWAY when the client answers the
            // shutdown's PING: one that never does would keep the
            // connection taking streams (and stalling them). Dropped once
            // the calls in flight had their grace.
            let mut deadline = Box::pin(tokio::time::sleep(config.shutdown_grace));
            if deadline.as_mut().poll(&mut scx).is_ready() {
                return Poll::Ready(End::Dropped);
            }
            ending = Some(deadline);
        }
        if let Poll::Ready(done) = conn.as_mut().poll(cx) {
            return Poll::Ready(End::Hyper(done));
        }
        if handed_a_request {
            // Read now: the shutdown is looked at from the next poll.
            handed_a_request = false;
            signal.fired.store(true, Ordering::Release);
            cx.waker().wake_by_ref();
        }
        if activity.active.load(Ordering::Relaxed) > 0 && !activity.h2.load(Ordering::Relaxed) {
            match watch_client(&socket, &activity, cx) {
                Watched::Gone => return Poll::Ready(End::Dropped),
                // For hyper to read when it wants them.
                Watched::Read => cx.waker().wake_by_ref(),
                Watched::Nothing => {}
            }
        }
        // What hyper read just now decides the header timer.
        let served = activity.served.load(Ordering::Relaxed);
        let waiting_head = !served
            || (!activity.h2.load(Ordering::Relaxed) && activity.head.load(Ordering::Relaxed));
        let rearmed = waiting_head && !header_armed;
        if rearmed {
            let deadline = tokio::time::Instant::now() + config.header_timeout;
            header.as_mut().reset(deadline);
        }
        header_armed = waiting_head;
        if header_armed && (due || rearmed) && header.as_mut().poll(&mut scx).is_ready() {
            return Poll::Ready(End::HeaderTimeout);
        }
        while due && ticks.poll_tick(&mut scx).is_ready() {
            let busy = activity.touched.swap(false, Ordering::Relaxed)
                || activity.active.load(Ordering::Relaxed) > 0;
            quiet = if busy { 0 } else { quiet + 1 };
            if quiet < 2 {
                continue;
            }
            quiet = 0;
            if idle_closing {
                // Still stuck (writing a reply nobody reads): dropped.
                return Poll::Ready(End::Dropped);
            }
            idle_closing = true;
            config.hit(LimitKind::Idle);
            if !graceful {
                conn.as_mut().graceful_shutdown();
                graceful = true;
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    })
    .await;
    drop(conn);
    let linger = matches!(end, End::Hyper(_));
    match end {
        End::Hyper(Err(e)) => classify(&config, &*e),
        End::HeaderTimeout => config.hit(LimitKind::Header),
        End::Hyper(Ok(())) | End::Dropped => {}
    }
    // hyper closed the connection (not a timeout, nor one dropped at the
    // hard stop) and no upgrade took the socket over: the close lingers.
    if linger && let Ok(socket) = Arc::try_unwrap(socket) {
        let socket = socket.into_inner().unwrap_or_else(|e| e.into_inner());
        close_lingering(socket.stream, &hard_stop).await;
    }
}

/// How long a closing connection reads what its client still sends
/// ([`close_lingering`]).
const LINGER: Duration = Duration::from_secs(2);
/// How long a closing connection waits for more from its client once it
/// sent nothing: a client that is quiet (an idle kept-alive connection, a
/// pool that neither reads nor closes) is let go after this, not after
/// [`LINGER`] (which held every graceful shutdown 2 s for such a client).
const LINGER_QUIET: Duration = Duration::from_millis(200);
/// The most a closing connection reads and discards.
const LINGER_BYTES: usize = 64 << 20;

/// Closes an HTTP connection in stages (RFC 9112 §9.6): the write side
/// first (a `FIN` after the last reply), then what the client still sends
/// is read and discarded until its own close, for at most [`LINGER`] and
/// [`LINGER_BYTES`], and no longer than [`LINGER_QUIET`] after the last
/// bytes it sent, unless the hard stop comes first. Dropping the socket
/// with bytes unread (a request pipelined behind a `connection: close`
/// one, the CRLF some clients send after a body, the rest of a body
/// refused with 413) made the kernel answer with a reset, which discarded
/// the part of the last reply not yet sent: a 200 KB reply arrived cut at
/// 128 KB, with `ECONNRESET`.
pub(super) async fn close_lingering(mut stream: TcpStream, hard_stop: &Shutdown) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if hard_stop.is_triggered() {
        return;
    }
    let _ = stream.shutdown().await;
    let until = tokio::time::sleep(LINGER);
    tokio::pin!(until);
    let hard = hard_stop.triggered();
    tokio::pin!(hard);
    let quiet = tokio::time::sleep(LINGER_QUIET);
    tokio::pin!(quiet);
    let mut scratch = vec![0u8; 4096];
    let mut left = LINGER_BYTES;
    loop {
        tokio::select! {
            biased;
            () = &mut hard => return,
            () = &mut until => return,
            () = &mut quiet => return,
            read = stream.read(&mut scratch) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    left = left.saturating_sub(n);
                    if left == 0 {
                        return;
                    }
                    quiet
                        .as_mut()
                        .reset(tokio::time::Instant::now() + LINGER_QUIET);
                }
            },
        }
    }
}

/// Counts what hyper reports of a connection that ended in error.
fn classify(config: &ConnConfig, e: &(dyn StdError + 'static)) {
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_timeout() || h.is_parse_too_large())
        {
            config.hit(LimitKind::Header);
            return;
        }
        // h2 cut the client off for abuse. Which abuse it names only in
        // the GOAWAY it sent, not in the error it returns.
        if let Some(h) = e.downcast_ref::<h2::Error>()
            && h.is_go_away()
            && h.is_library()
            && h.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
        {
            config.hit(LimitKind::Flood);
            return;
        }
        source = e.source();
    }
}

/// What an HTTP/2 connection opens with (RFC 9113, 3.4).
pub(super) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the watch on an HTTP/1 client found.
enum Watched {
    Nothing,
    /// Bytes the client pipelined, kept in [`Socket::pipelined`], or its
    /// end of stream: hyper's turn.
    Read,
    Gone,
}

/// Whether the client of the HTTP/1 request being answered (hyper's
/// connection waits for the service) left, as rpcwire's own loop finds out
/// ([`super::h1::gone`]): a reset, or an end of stream and then a reset of
/// the interim `100 Continue` written after it (HTTP/1.0: the end of
/// stream itself). Not hyper's own watch (`half_close` off), which takes
/// every end of stream for a close, dropping half-closed clients' calls,
/// and stops watching once it holds bytes the client pipelined. A
/// half-closed client is answered after the `100`.
///
/// Not while a response body is written (hyper no longer reads then
/// either): a client that leaves then is found out by the writes.
fn watch_client(socket: &Mutex<Socket>, activity: &Activity, cx: &mut TaskContext<'_>) -> Watched {
    let mut socket = socket
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Socket {
        stream,
        pipelined,
        client,
        reset,
        hyper_reading,
        end_seen,
    } = &mut *socket;
    if *hyper_reading {
        return Watched::Nothing;
    }
    if !*end_seen && *client == super::h1::Client::Sending {
        let mut byte = [0u8; 1];
        let mut peeked = ReadBuf::new(&mut byte);
        if let Poll::Ready(Ok(0)) = stream.poll_peek(cx, &mut peeked) {
            // The end of stream: hyper has a turn first, in which it reads
            // it if a body it reads stops there (and answers that).
            *end_seen = true;
            return Watched::Read;
        }
    }
    let before = pipelined.len();
    let mut touched = false;
    let stream: &TcpStream = stream;
    let reset = std::pin::pin!(std::future::poll_fn(|cx| {
        reset
            .get_or_insert_with(|| reset_of(stream))
            .as_mut()
            .poll(cx)
    }));
    let probe = !activity.http10.load(Ordering::Relaxed);
    if super::h1::gone(stream, pipelined, client, &mut touched, probe, reset, cx) {
        return Watched::Gone;
    }
    if touched {
        activity.touch();
    }
    if pipelined.len() > before {
        Watched::Read
    } else {
        Watched::Nothing
    }
}

/// What resolves when `stream` is reset (`stream` read at its end, a probe
/// written since): its error readiness, on a second descriptor of the
/// socket, since `stream`'s own is borrowed from the [`Socket`] it is in,
/// and its write readiness must be left to hyper's writes. Made only for a
/// client that stopped sending while it was answered. Where that cannot be
/// had (not on Unix), never: a client that closed is found out by the
/// reply's write.
fn reset_of(stream: &TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    #[cfg(unix)]
    if let Ok(fd) = std::os::fd::AsFd::as_fd(stream).try_clone_to_owned()
        && let Ok(second) = TcpStream::from_std(std::net::TcpStream::from(fd))
    {
        return Box::pin(async move {
            let _ = second.ready(tokio::io::Interest::ERROR).await;
        });
    }
    let _ = stream;
    Box::pin(std::future::pending())
}

/// The socket, shared by hyper's connection (through [`Tracked`]) and
/// [`watch_client`], which look at it in turn (one task).
struct Socket {
    stream: TcpStream,
    /// Bytes [`watch_client`] read while a request was answered, read
    /// before the socket's.
    pipelined: BytesMut,
    client: super::h1::Client,
    /// Once a probe went out: see [`reset_of`].
    reset: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// hyper waits for bytes from the socket (a request body still coming):
    /// its end of stream or reset is hyper's to see, and a probe would
    /// come before hyper's answer to a body cut short.
    hyper_reading: bool,
    /// The client's end of stream was seen, and hyper given a turn to read
    /// it (for a body cut short) before the probe.
    end_seen: bool,
}

impl Socket {
    /// Writes what is left of a probe cut short, so that nothing else goes
    /// out in its middle.
    fn finish_probe(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        use super::h1::{Client, PROBE};
        while let Client::Ended { sent } = self.client
            && sent > 0
            && sent < PROBE.len()
        {
            let n = ready!(Pin::new(&mut self.stream).poll_write(cx, &PROBE[sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.client = Client::Ended { sent: sent + n };
        }
        Poll::Ready(Ok(()))
    }
}

/// The socket, noting each transfer for the timers.
struct Tracked {
    socket: Arc<Mutex<Socket>>,
    /// Bytes read from it before hyper took it over (by rpcwire's own
    /// HTTP/1.1 loop), read first.
    read: Bytes,
    activity: Arc<Activity>,
    /// How many bytes of the HTTP/2 preface were seen; all of them when it
    /// is HTTP/2, `u8::MAX` when it is not. The whole preface, as hyper's
    /// auto connection reads it: an HTTP/1.1 request with the method `PRI`
    /// is HTTP/1.1, whose heads the header timer keeps timing.
    preface: u8,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = if self.read.is_empty() {
            let mut socket = self
                .socket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if socket.pipelined.is_empty() {
                let r = Pin::new(&mut socket.stream).poll_read(cx, buf);
                socket.hyper_reading = r.is_pending();
                r
            } else {
                let n = socket.pipelined.len().min(buf.remaining());
                buf.put_slice(&socket.pipelined.split_to(n));
                Poll::Ready(Ok(()))
            }
        } else {
            let n = self.read.len().min(buf.remaining());
            buf.put_slice(&self.read.split_to(n));
            Poll::Ready(Ok(()))
        };
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            let activity = &self.activity;
            activity.touch_io();
            // Empty lines before a request line begin no head (RFC 9112
            // 2.2: ignored), so they arm no header timer.
            if activity.active.load(Ordering::Relaxed) == 0
                && !activity.head.load(Ordering::Relaxed)
                && new.iter().any(|&b| b != b'\r' && b != b'\n')
            {
                activity.head.store(true, Ordering::Relaxed);
            }
            if usize::from(self.preface) < H2_PREFACE.len() {
                for &b in new {
                    if b != H2_PREFACE[usize::from(self.preface)] {
                        self.preface = u8::MAX;
                        break;
                    }
                    self.preface += 1;
                    if usize::from(self.preface) == H2_PREFACE.len() {
                        self.activity.h2.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut socket = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ready!(socket.finish_probe(cx))?;
        let r = Pin::new(&mut socket.stream).poll_write(cx, buf);
        drop(socket);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_io();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut socket = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ready!(socket.finish_probe(cx))?;
        let r = Pin::new(&mut socket.stream).poll_write_vectored(cx, bufs);
        drop(socket);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_io();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let mut socket = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ready!(socket.finish_probe(cx))?;
        Pin::new(&mut socket.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let mut socket = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ready!(socket.finish_probe(cx))?;
        Pin::new(&mut socket.stream).poll_shutdown(cx)
    }
}

/// A tower service as hyper wants it (`call(&self)`), counting the requests
/// being answered for the idle timer.
struct Counted<Svc> {
    inner: Svc,
    activity: Arc<Activity>,
    /// For a service that is not one of rpcwire's own (which answer it
    /// themselves, see [`PerConnection::answers_host_rule`]): the server's
    /// settings, to answer what RFC 9112 asks of the server (an HTTP/1.1
    /// request without one valid `Host`: `400`) before the service sees it, and
    /// count it in the server's metrics.
    host_rule: Option<Arc<ConnConfig>>,
    /// The limit of the connection's [`BodyBudget`].
    body_budget: usize,
}

impl<Svc, B> hyper::service::Service<Request<Incoming>> for Counted<Svc>
where
    Svc: Service<Request<Incoming>, Response = Response<B>> + Clone,
    Svc::Error: Into<BoxError>,
    B: Body,
{
    type Response = Response<Served<B>>;
    type Error = Infallible;
    type Future = CountedFuture<Svc, Svc::Future>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let mut replies = None;
        if req.version() == http::Version::HTTP_2 {
            let bodies = self
                .activity
                .bodies
                .get_or_init(|| ConnectionBodies(Arc::new(BodyBudget::new(self.body_budget))));
            replies = Some(Arc::clone(&bodies.0));
            req.extensions_mut().insert(bodies.clone());
        }
        let activity = &self.activity;
        activity.active.fetch_add(1, Ordering::Relaxed);
        activity.head.store(false, Ordering::Relaxed);
        activity
            .http10
            .store(req.version() == http::Version::HTTP_10, Ordering::Relaxed);
        if !activity.served.load(Ordering::Relaxed) {
            activity.served.store(true, Ordering::Relaxed);
        }
        let state = if let Some(config) = &self.host_rule
            && super::hosts::lacks_one_host(&req)
        {
            // Counted as the allowlist counts the same refusal.
            config.hit(LimitKind::Host);
            Oneshot::NoOneHost
        } else {
            Oneshot::Waiting {
                service: self.inner.clone(),
                req: Some(req),
            }
        };
        CountedFuture {
            state,
            active: Some(ActiveGuard(Arc::clone(&self.activity))),
            replies,
        }
    }
}

/// One request counted as being answered until it is, or is dropped.
struct ActiveGuard(Arc<Activity>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

pin_project_lite::pin_project! {
    /// Waits for the service to be ready, calls it, and waits for its
    /// response.
    struct CountedFuture<Svc, F> {
        #[pin]
        state: Oneshot<Svc, F>,
        active: Option<ActiveGuard>,
        // HTTP/2: the connection's budget, which its replies count against
        // until h2 has written them.
        replies: Option<Arc<BodyBudget>>,
    }
}

pin_project_lite::pin_project! {
    #[project = OneshotProj]
    enum Oneshot<Svc, F> {
        Waiting { service: Svc, req: Option<Request<Incoming>> },
        Called { #[pin] future: F },
        /// Refused without calling the service: [`no_one_host`].
        NoOneHost,
    }
}

impl<Svc, B> Future for CountedFuture<Svc, Svc::Future>
where
    Svc: Service<Request<Incoming>, Response = Response<B>>,
    B: Body,
{
    type Output = Result<Response<Served<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                OneshotProj::Waiting { service, req } => {
                    if ready!(service.poll_ready(cx)).is_err() {
                        this.active.take();
                        return Poll::Ready(Ok(service_failed()));
                    }
                    let req = req.take().expect("request present until called");
                    let future = service.call(req);
                    this.state.set(Oneshot::Called { future });
                }
                OneshotProj::Called { future } => {
                    let out = ready!(future.poll(cx));
                    let mut response = match out {
                        Ok(response) => match this.replies.take() {
                            // HTTP/2: its body's frames count as traffic
                            // (the request's own count ends here).
                            Some(budget) => {
                                let progress = this
                                    .active
                                    .as_ref()
                                    .map(|ActiveGuard(a)| BodyProgress(Arc::clone(a)));
                                held_reply(response, budget, progress)
                            }
                            None => response.map(|body| Served::Service {
                                body,
                                held: BodyShare::default(),
                                progress: None,
                            }),
                        },
                        Err(_) => service_failed(),
                    };
                    if let Some(ActiveGuard(activity)) = this.active.as_ref()
                        && activity.h2.load(Ordering::Relaxed)
                        && response
                            .extensions_mut()
                            .remove::<EndsConnection>()
                            .is_some()
                    {
                        activity.close_asked.store(true, Ordering::Release);
                    }
                    if let Some(ActiveGuard(activity)) = this.active.take().as_ref()
                        && !activity.h2.load(Ordering::Relaxed)
                        && response.status() != StatusCode::SWITCHING_PROTOCOLS
                        && activity
                            .shutdown
                            .as_ref()
                            .is_some_and(Shutdown::is_triggered)
                    {
                        response
                            .headers_mut()
                            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    return Poll::Ready(Ok(response));
                }
                OneshotProj::NoOneHost => {
                    this.active.take();
                    return Poll::Ready(Ok(no_one_host()));
                }
            }
        }
    }
}

/// An HTTP/2 reply counted against its connection's budget until h2 has
/// written it: a client that gives no window (or reads nothing) held
/// every reply of its streams, up to `max_in_flight` times the response
/// limit on one connection. One that would take the connection past the
/// budget (unless nothing else is held) is answered `503` instead; the
/// call has run (as for a reply past the response limit).
fn held_reply<B: Body>(
    response: Response<B>,
    budget: Arc<BodyBudget>,
    progress: Option<BodyProgress>,
) -> Response<Served<B>> {
    let hint = response.body().size_hint();
    let len = hint.exact().unwrap_or(hint.lower());
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let taken = budget
        .held
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            let total = held.checked_add(len)?;
            (held == 0 || total <= budget.limit).then_some(total)
        })
        .is_ok();
    if !taken {
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32000,\"message\":\"Response too large\",\"data\":{{\"reason\":\"the replies this connection holds unread would pass its limit\",\"limit\":{}}}}}}}",
            budget.limit
        );
        let mut refused = served_error(StatusCode::SERVICE_UNAVAILABLE, body);
        // The service's CORS headers stay: a browser reads the refusal
        // only with them (as the other error answers carry them).
        for (name, value) in response.headers() {
            if name.as_str().starts_with("access-control-") || name == hyper::header::VARY {
                refused.headers_mut().append(name.clone(), value.clone());
            }
        }
        return refused;
    }
    let held = BodyShare {
        budget: Some(budget),
        bytes: len,
    };
    response.map(|body| Served::Service {
        body,
        held,
        progress,
    })
}

/// An HTTP/2 response body's connection: each frame the body yields is
/// traffic for its idle timer (h2 asks for frames as the client's window
/// lets it send them, so a download or an event stream that sends keeps
/// the connection busy, and one stalled by its client does not), and so
/// is its end.
struct BodyProgress(Arc<Activity>);

impl Drop for BodyProgress {
    fn drop(&mut self) {
        self.0.touch();
    }
}

/// The answer to a request the service failed (an error of a layer around
/// it: a timeout, a load shedder): `500` with a -32603 body. hyper would
/// close an HTTP/1.1 connection without a word (the client's other
/// requests on it lost too) and reset an HTTP/2 stream.
fn service_failed<B>() -> Response<Served<B>> {
    served_error(StatusCode::INTERNAL_SERVER_ERROR, SERVICE_FAILED)
}

/// The server's answer to an HTTP/1.1 request without one valid `Host`
/// ([`hosts::lacks_one_host`](super::hosts::lacks_one_host)) for a service
/// not of rpcwire's own: `400`, the body and the close rpcwire's services
/// answer it with ([`HttpService::refuse_host`]).
fn no_one_host<B>() -> Response<Served<B>> {
    let body = super::hosts::NO_HOST_BODY.as_bytes();
    let mut response = served_error(StatusCode::BAD_REQUEST, body);
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A response of [`serve`]'s own: `status`, a JSON `body`.
fn served_error<B>(status: StatusCode, body: impl Into<Bytes>) -> Response<Served<B>> {
    let mut response = Response::new(Served::Failed {
        body: Some(body.into()),
    });
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, APPLICATION_JSON);
    response
}

const SERVICE_FAILED: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error","data":{"reason":"the service failed to answer the request"}}}"#;

pin_project_lite::pin_project! {
    /// A response body as [`serve`] gives it to hyper: the service's, or
    /// one of its own ([`service_failed`]'s, [`no_one_host`]'s).
    #[project = ServedProj]
    enum Served<B> {
        Service {
            #[pin]
            body: B,
            // What of its connection's budget the reply holds (HTTP/2):
            // it goes with the reply's data to h2, given back once that is
            // written or dropped.
            held: BodyShare,
            // HTTP/2: its frames are traffic.
            progress: Option<BodyProgress>,
        },
        Failed { body: Option<Bytes> },
    }
}

impl<B: Body> Body for Served<B> {
    type Data = ServedData<B::Data>;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match self.project() {
            ServedProj::Service {
                body,
                held,
                progress,
            } => {
                let frame = ready!(body.poll_frame(cx));
                if let (Some(BodyProgress(activity)), Some(_)) = (progress.as_ref(), &frame) {
                    activity.touch();
                }
                // The share goes with the first data: hyper hands it to h2,
                // which keeps it until it is written (for a window the
                // client may never give).
                Poll::Ready(frame.map(|r| {
                    r.map(|f| {
                        f.map_data(|data| ServedData::Service {
                            data,
                            _held: std::mem::take(held),
                        })
                    })
                }))
            }
            ServedProj::Failed { body } => Poll::Ready(
                body.take()
                    .map(|b| Ok(http_body::Frame::data(ServedData::Failed(b)))),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Served::Service { body, .. } => body.is_end_stream(),
            Served::Failed { body } => body.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Served::Service { body, .. } => body.size_hint(),
            Served::Failed { body } => {
                http_body::SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// The data of a [`Served`] body.
enum ServedData<D> {
    /// The service's data, and what of its connection's budget it holds
    /// (HTTP/2: given back when h2 has written it and drops it).
    Service {
        data: D,
        _held: BodyShare,
    },
    Failed(Bytes),
}

impl<D: Buf> Buf for ServedData<D> {
    fn remaining(&self) -> usize {
        match self {
            ServedData::Service { data: d, .. } => d.remaining(),
            ServedData::Failed(b) => b.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            ServedData::Service { data: d, .. } => d.chunk(),
            ServedData::Failed(b) => b.chunk(),
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [io::IoSlice<'a>]) -> usize {
        match self {
            ServedData::Service { data: d, .. } => d.chunks_vectored(dst),
            ServedData::Failed(b) => b.chunks_vectored(dst),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            ServedData::Service { data: d, .. } => d.advance(n),
            ServedData::Failed(b) => b.advance(n),
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self {
            ServedData::Service { data: d, .. } => d.copy_to_bytes(len),
            ServedData::Failed(b) => b.copy_to_bytes(len),
        }
    }
}

/// The request's headers, as handlers find them in their [`Context`].
///
/// ```
/// # fn f(call: rpcwire::Call<'_, ()>) {
/// let agent = rpcwire::server::http::header(&call.ctx, "user-agent");
/// # }
/// ```
pub fn header<'c>(ctx: &'c Context, name: &str) -> Option<&'c HeaderValue> {
    ctx.extension::<HeaderMap>()?.get(name)
}

#[cfg(test)]
mod tests {
    use super::{AcceptEncoding, is_json_content_type, qvalue_is_zero};

    /// The lingering close on a paused clock: a quiet client is let go
    /// after [`LINGER_QUIET`](super::LINGER_QUIET), one that keeps sending
    /// is read for the whole [`LINGER`](super::LINGER), and the hard stop
    /// ends it at once (virtual time, so the bounds are exact).
    #[tokio::test(start_paused = true)]
    async fn a_lingering_close_lets_a_quiet_client_go_early() {
        use super::{LINGER, LINGER_QUIET, close_lingering};
        use crate::server::Shutdown;
        use tokio::io::AsyncWriteExt;
        use tokio::net::{TcpListener, TcpStream};

        async fn pair() -> (TcpStream, TcpStream) {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            (listener.accept().await.unwrap().0, client)
        }

        // Quiet: 200 ms, not the 2 s linger.
        let (server, _client) = pair().await;
        let started = tokio::time::Instant::now();
        close_lingering(server, &Shutdown::new()).await;
        assert_eq!(started.elapsed(), LINGER_QUIET);

        // A byte every 150 ms keeps it reading until the linger's end.
        let (server, mut client) = pair().await;
        let talker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LINGER_QUIET * 3 / 4).await;
                if client.write_all(b"x").await.is_err() {
                    return;
                }
            }
        });
        let started = tokio::time::Instant::now();
        close_lingering(server, &Shutdown::new()).await;
        assert_eq!(started.elapsed(), LINGER);
        talker.abort();

        // The hard stop, triggered while it lingers, ends it then.
        let (server, _client) = pair().await;
        let hard = Shutdown::new();
        let trigger = hard.clone();
        tokio::spawn(async move {
            tokio::time::sleep(LINGER_QUIET / 2).await;
            trigger.trigger();
        });
        let started = tokio::time::Instant::now();
        close_lingering(server, &hard).await;
        assert_eq!(started.elapsed(), LINGER_QUIET / 2);
    }

    #[test]
    fn qvalues() {
        for (q, zero) in [
            ("0", Some(true)),
            ("0.", Some(true)),
            ("0.000", Some(true)),
            ("0.001", Some(false)),
            ("0.5", Some(false)),
            ("0.999", Some(false)),
            ("1", Some(false)),
            ("1.", Some(false)),
            ("1.000", Some(false)),
            ("", None),
            ("abc", None),
            ("1.5", None),
            ("1.001", None),
            ("0.0001", None),
            ("0.5000", None),
            ("-1", None),
            ("2", None),
            (".5", None),
            ("00", None),
            ("0,5", None),
            ("0.5x", None),
            ("0x1", None),
            ("+1", None),
        ] {
            assert_eq!(qvalue_is_zero(q.as_bytes()), zero, "{q:?}");
        }
    }

    #[test]
    fn accept_encoding_leaves_out_elements_with_malformed_weights() {
        for (fields, gzip) in [
            (&["gzip;q=abc"][..], false),
            (&["gzip;q="], false),
            (&["gzip;q=abc, *;q=1"], true),
            (&["gzip;q=, *"], true),
            (&["gzip;q=0.0001, *"], true),
            (&["gzip;q=1.5", "*;q=0"], false),
            (&["gzip, gzip;q="], true),
            (&["*;q=-1"], false),
            (&["*;q=-1, gzip"], true),
            (&["gzip;Q=0"], false),
            (&["gzip ; q = 0 , *"], false),
            (&["gzip;q=0.5;q=abc, *"], true),
            (&["gzip;level=1"], true),
            (&["gzip;q"], true),
        ] {
            let mut accept = AcceptEncoding::default();
            for field in fields {
                accept.read(field.as_bytes());
            }
            assert_eq!(accept.gzip(), gzip, "{fields:?}");
        }
    }

    #[test]
    fn json_content_types() {
        for (value, ok) in [
            ("application/json", true),
            ("Application/JSON", true),
            ("application/json; charset=utf-8", true),
            ("application/json;charset=UTF-8", true),
            (" application/json ; charset=utf-8", true),
            ("application/json-rpc", true),
            ("application/jsonrequest", true),
            ("APPLICATION/JSONREQUEST; charset=utf-8", true),
            ("application/jsonx", false),
            ("text/json", false),
            ("application/x-www-form-urlencoded", false),
            ("text/plain", false),
            ("", false),
            ("application/json,text/plain", false),
        ] {
            assert_eq!(is_json_content_type(value.as_bytes()), ok, "{value:?}");
        }
    }
}
