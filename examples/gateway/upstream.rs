//! Talking to upstream nodes: HTTP (the gateway's own pooled HTTP/1.1
//! client, or hyper-util's) and WebSocket (tokio-tungstenite's client,
//! one shared connection per `ws://` upstream that multiplexes calls and
//! subscriptions).
//!
//! Every call gets an id of the gateway's own (one counter for all
//! upstreams), so an upstream never sees two requests in flight with one
//! id whatever its clients sent; the reply's id must be that id, or the
//! reply is refused (but for an HTTP reply's error with `id: null`, which
//! answers the one call of its exchange). The client's params go upstream
//! byte for byte.
//!
//! Upstream choice: first healthy. Calls go to the first upstream in the
//! order given that is not resting; an upstream that refuses a connection,
//! resets one, or times out rests for [`REST`]. A call whose connection
//! could not be made, or that a WebSocket upstream's full queue refused
//! (so nothing was sent), moves on to the next upstream;
//! a call that may have reached an upstream is never sent twice (it may be
//! a transaction), it fails with a clear error instead. First-healthy
//! rather than round-robin keeps filters (`eth_newFilter` then
//! `eth_getFilterChanges`) and nonces on one node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rpcwire::bytes::{BufMut, Bytes};
use rpcwire::eth::codes::REQUEST_TIMEOUT;
use rpcwire::message::{Incoming, Message as RpcMessage};
use rpcwire::response::ResponseMessage;
use rpcwire::server::subscriptions::{Sink, SinkError, SubscriptionId};
use rpcwire::{Parser, RpcError};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use crate::config::Config;
use crate::errors;
use crate::h1::{Body, H1Error, H1Pool};

/// How long an upstream that failed rests before it is tried first again.
pub const REST: Duration = Duration::from_secs(2);
/// How long closing a WebSocket upstream's connection (the close frame
/// written and flushed) may take.
const WS_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// For how many call timeouts an `eth_subscribe` whose caller left is
/// remembered, in case the upstream subscribes after all (it is then
/// unsubscribed at once); an upstream that answers later than that has
/// bigger problems.
const ABANDONED_TIMEOUTS: u32 = 3;
/// Why a connection found dead by its pings was closed.
const SILENT: &str = "the WebSocket upstream stopped answering pings";
/// The largest message read from a WebSocket upstream at least (tungstenite's
/// default): a larger one ends the connection.
const WS_MIN_MESSAGE: usize = 64 << 20;
/// The most bytes of requests queued for a WebSocket upstream's writer
/// (one request larger than this is sent when nothing else waits): past
/// it, calls fail at once. An upstream that stopped reading with its
/// connection open otherwise let every call's request wait in an
/// unbounded queue, kept even after its caller had timed out.
const WS_QUEUE_BYTES: usize = 16 << 20;
/// Why a connection whose writes failed was closed.
const WRITE_FAILED: &str = "writing to the WebSocket connection failed";

/// An upstream's answer to one call: its `result`, copied out of a small
/// reply, a slice of a large one.
#[derive(Clone, Debug)]
pub struct Answer(pub Bytes);

/// The upstreams and how they are reached.
pub struct Upstreams {
    /// The `--upstream` list, in the order given (`http://` and `ws://`).
    http: Vec<HttpUpstream>,
    /// `--upstream-idle`.
    max_idle: Duration,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The WebSocket upstream of `eth_subscribe` (shared with the list's
    /// entry when it is one of its `ws://` upstreams).
    pub ws: Option<Arc<WsUpstream>>,
    ids: AtomicU64,
    timeout: Duration,
    /// [`Config::connect_timeout`]: named in the reason of a connect that
    /// ran out of it.
    connect_timeout: Duration,
    parser: Parser,
    max_response: usize,
    epoch: Instant,
    /// The failures of calls forwarded over [`ws`](Upstreams::ws) when
    /// there is no `--upstream` list.
    ws_stats: UpstreamStats,
    /// When the latest forward that some upstream answered started, in
    /// milliseconds after `epoch`, plus one (0: none yet): what `/health`
    /// needs to know, learnt without asking.
    answered: AtomicU64,
}

/// At most `cap` exchanges in flight: a counter on the common path (one
/// atomic update each way, where a tokio semaphore took a lock to give
/// its permit back), a wait for a freed place past it.
struct ExchangeCap {
    in_flight: AtomicUsize,
    cap: usize,
    freed: tokio::sync::Notify,
}

/// A place under an [`ExchangeCap`], given back when dropped.
struct ExchangePermit<'a>(&'a ExchangeCap);

impl ExchangeCap {
    fn new(cap: usize) -> ExchangeCap {
        ExchangeCap {
            in_flight: AtomicUsize::new(0),
            cap: cap.max(1),
            freed: tokio::sync::Notify::new(),
        }
    }

    /// A place, if one is free now.
    fn try_enter(&self) -> Option<ExchangePermit<'_>> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| ExchangePermit(self))
    }

    /// A place, waiting for one to be freed.
    async fn enter(&self) -> ExchangePermit<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the second look, so a place freed in
            // between wakes it.
            freed.as_mut().enable();
            if let Some(permit) = self.try_enter() {
                return permit;
            }
            freed.await;
        }
    }
}

impl Drop for ExchangePermit<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        // One wake per place freed (without a waiter, one stored for the
        // next): waking only when the count was at the cap lost places
        // freed before a woken waiter took its own.
        self.0.freed.notify_one();
    }
}

/// One `--upstream`: HTTP, or `ws://` (then `ws` is set, and calls go
/// over its WebSocket connection).
struct HttpUpstream {
    uri: http::Uri,
    /// The gateway's own HTTP/1.1 client ([`H1Pool`]), unless
    /// `--client hyper` chose hyper-util's.
    h1: Option<H1Pool>,
    /// What errors name: `host:port`, never the path (which may hold an
    /// API key).
    name: String,
    /// Milliseconds since `epoch` before which it rests.
    rest_until: AtomicU64,
    /// A `ws://` upstream's connection.
    ws: Option<Arc<WsUpstream>>,
    /// One permit per HTTP exchange in flight (`--upstream-connections`):
    /// each takes a connection of its own, and a batch of 1000 entries
    /// opened 1000 at once (past a node's accept queue, some then waited
    /// out a SYN retry and timed out). Calls past the cap wait for a
    /// permit, within their timeout.
    exchanges: ExchangeCap,
    /// Its failures, for the metrics endpoint.
    stats: UpstreamStats,
}

impl HttpUpstream {
    /// Whether it takes calls at `now` (milliseconds since the epoch of
    /// [`Upstreams`]): not resting.
    fn healthy_at(&self, now: u64) -> bool {
        self.rest_until.load(Ordering::Relaxed) <= now
    }
}

/// What went wrong with one upstream, for the metrics endpoint: counted on
/// the failure paths only (a call answered at once counts nothing here),
/// with relaxed atomics.
#[derive(Default)]
pub struct UpstreamStats {
    /// Calls not sent: no connection could be made.
    pub connect: AtomicU64,
    /// Calls with no answer within the per-request timeout.
    pub timeout: AtomicU64,
    /// Exchanges that failed once the request may have been sent (a
    /// connection reset or closed, an HTTP error status without a JSON-RPC
    /// reply, a WebSocket failure).
    pub exchange: AtomicU64,
    /// Replies that were no JSON-RPC response to the call.
    pub malformed: AtomicU64,
    /// Calls this upstream took over after the ones tried before it could
    /// not be reached.
    pub failovers: AtomicU64,
}

impl UpstreamStats {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call's error that is not the upstream's own error object.
    fn failed(&self, e: &RpcError) {
        if e.raw_object().is_some() || e.is_too_large() {
            return;
        }
        Self::count(if e.code() == REQUEST_TIMEOUT {
            &self.timeout
        } else {
            &self.exchange
        });
    }
}

/// One upstream as the metrics endpoint shows it.
pub struct UpstreamState<'a> {
    /// `host:port`.
    pub name: &'a str,
    /// Not resting after a failure.
    pub healthy: bool,
    /// HTTP exchanges in flight (`None` for a `ws://` upstream).
    pub in_flight: Option<usize>,
    /// Its failures so far.
    pub stats: &'a UpstreamStats,
}

/// Room for a reply's envelope around a result of `--max-response` bytes:
/// a reply up to that much larger is read and parsed, so that a result
/// just past the limit gets the dispatcher's -32003, not a parse error.
const ENVELOPE_ROOM: usize = 1024;

/// The parser of upstream replies, for results up to `max_response`.
fn reply_parser(max_response: usize) -> Parser {
    Parser::new()
        // As deep as the parser reads (1,024 levels): the default (128)
        // keeps a server's handlers from recursing on a client's params,
        // but results are passed on as they are, and geth's `callTracer`
        // writes two levels per nested call (a transaction whose calls
        // nest 64 deep was "malformed", and hung over a WebSocket).
        .max_depth(u32::MAX)
        .max_message_len(max_response.saturating_add(ENVELOPE_ROOM))
        .max_batch_len(u32::MAX)
}

/// The id of one of the gateway's own requests to a WebSocket upstream.
fn upstream_id(id: &[u8]) -> Option<u64> {
    std::str::from_utf8(id).ok()?.parse().ok()
}

/// `host:port` of a URL, for error messages.
pub fn display_name(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority
        .rsplit('@')
        .next()
        .unwrap_or(authority)
        .to_string()
}

/// Names for `urls` that tell them apart, in order: `host:port`; where
/// two share it, with the scheme (`http://n:8545`, `ws://n:8545`); and
/// where even those are alike, that and its place in the list (`… #2`).
/// Never the path, the query or user info: a provider's path holds the
/// API key (`/v3/<key>`), and these names are in `/metrics`, `/health`
/// and the errors clients get. `/metrics` labels each upstream's series by
/// its name: two alike made duplicate series, which Prometheus refuses,
/// and `/health` listed the same name twice.
pub fn distinct_names(urls: &[String]) -> Vec<String> {
    let count = |names: &[String], name: &str| names.iter().filter(|n| *n == name).count();
    let short: Vec<String> = urls.iter().map(|u| display_name(u)).collect();
    let long: Vec<String> = urls
        .iter()
        .zip(&short)
        .map(|(url, name)| match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://{name}"),
            None => name.clone(),
        })
        .collect();
    (0..urls.len())
        .map(|i| {
            if count(&short, &short[i]) == 1 {
                short[i].clone()
            } else if count(&long, &long[i]) == 1 {
                long[i].clone()
            } else {
                format!("{} #{}", long[i], i + 1)
            }
        })
        .collect()
}

impl Upstreams {
    /// From the `--upstream` URLs (http:// ones are HTTP upstreams; a
    /// ws:// one is the WebSocket upstream if `--upstream-ws` is not
    /// given) and `--upstream-ws`, with the other upstream options.
    pub fn new(config: &Config) -> Result<Upstreams, String> {
        let urls = &config.upstreams;
        let upstream_ws = config.upstream_ws.as_deref();
        let (timeout, max_response) = (config.timeout, config.max_response);
        let (hyper_client, ws_ping) = (config.hyper_client, config.ws_ping);
        let connect_timeout = config.connect_timeout();
        let mut http = Vec::new();
        let ws_upstream = |url: String| {
            Arc::new(WsUpstream::new(
                url,
                timeout,
                connect_timeout,
                max_response,
                ws_ping,
            ))
        };
        let mut ws = upstream_ws.map(|url| ws_upstream(url.into()));
        for (url, name) in urls.iter().zip(distinct_names(urls)) {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("bad upstream URL {}: {e}", crate::config::shown_url(url)))?;
            // A ws:// upstream takes its place in the list (it was once
            // taken out of it: calls never failed over to or from it, and
            // a second one was ignored); the first is also the
            // `eth_subscribe` upstream unless `--upstream-ws` names one.
            let via_ws = url.starts_with("ws://").then(|| {
                let conn = ws_upstream(url.clone());
                ws.get_or_insert_with(|| Arc::clone(&conn));
                conn
            });
            let h1 = if hyper_client || via_ws.is_some() {
                None
            } else {
                Some(H1Pool::new(url, connect_timeout, config.upstream_idle)?)
            };
            http.push(HttpUpstream {
                uri,
                h1,
                name,
                rest_until: AtomicU64::new(0),
                ws: via_ws,
                exchanges: ExchangeCap::new(config.upstream_connections),
                stats: UpstreamStats::default(),
            });
        }
        // By default the WebSocket upstream is the first HTTP upstream's
        // address with ws:// (geth and anvil serve both on one port).
        if ws.is_none()
            && let Some(first) = urls.iter().find(|u| u.starts_with("http://"))
        {
            let url = format!("ws://{}", &first["http://".len()..]);
            ws = Some(ws_upstream(url));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.upstream_idle)
            .pool_max_idle_per_host(1024)
            .build(connector);
        Ok(Upstreams {
            max_idle: config.upstream_idle,
            http,
            client,
            ws,
            ids: AtomicU64::new(1),
            timeout,
            connect_timeout,
            parser: reply_parser(max_response),
            max_response,
            epoch: Instant::now(),
            ws_stats: UpstreamStats::default(),
            answered: AtomicU64::new(0),
        })
    }

    /// Closes this worker's pooled HTTP connections that were left idle
    /// too long or that their upstream closed (hyper-util's pool, with
    /// `--client hyper`, has a timer of its own).
    pub fn reap_idle(&self, now: Instant) {
        for up in &self.http {
            if let Some(pool) = &up.h1 {
                pool.reap(now);
            }
        }
    }

    /// How long a pooled HTTP connection may be idle.
    pub fn max_idle(&self) -> Duration {
        self.max_idle
    }

    /// Reads the WebSocket upstream's reply to the call with gateway id
    /// `id`.
    pub fn read(&self, reply: Bytes, id: u64, name: &str) -> Result<Answer, RpcError> {
        // A WebSocket message is read whole (up to `max_message`): one past
        // the limit is -32003, as over HTTP, not a parse error.
        if reply.len() > self.reply_limit() {
            return Err(RpcError::too_large());
        }
        read_answer(&self.parser, Body::Shared(&reply), id, name)
    }

    /// The largest reply read: `--max-response` and room for the envelope
    /// (saturating: `--max-response` as large as it goes once overflowed
    /// the sum).
    fn reply_limit(&self) -> usize {
        self.max_response.saturating_add(ENVELOPE_ROOM)
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long making a connection may take ([`Config::connect_timeout`]).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The upstreams in the order given, with their state and failures
    /// (the WebSocket upstream alone when there is no `--upstream` list).
    pub fn states(&self) -> Vec<UpstreamState<'_>> {
        let now = self.now_ms();
        if self.http.is_empty() {
            return self
                .ws
                .iter()
                .map(|ws| UpstreamState {
                    name: &ws.name,
                    // Not rested: healthy while its last connection
                    // attempt succeeded.
                    healthy: lock(&ws.failure).is_none(),
                    in_flight: None,
                    stats: &self.ws_stats,
                })
                .collect();
        }
        self.http
            .iter()
            .map(|up| UpstreamState {
                name: &up.name,
                healthy: up.healthy_at(now),
                in_flight: up
                    .ws
                    .is_none()
                    .then(|| up.exchanges.in_flight.load(Ordering::Relaxed)),
                stats: &up.stats,
            })
            .collect()
    }

    /// Whether calls go to another upstream than the first now: it rests
    /// and another does not (what answers learnt from the first may not be
    /// given for; with one upstream, or all resting, calls still go to the
    /// first).
    pub fn a_fallback_serves(&self) -> bool {
        let now = self.now_ms();
        match self.http.split_first() {
            Some((first, others)) => {
                !first.healthy_at(now) && others.iter().any(|up| up.healthy_at(now))
            }
            None => false,
        }
    }

    /// Subscriptions relayed from the WebSocket upstream now.
    pub fn relayed_subscriptions(&self) -> usize {
        match &self.ws {
            Some(ws) => ws.current().map_or(0, |c| c.relayed()),
            None => 0,
        }
    }

    /// Whether some upstream answers: `eth_chainId` forwarded as a call
    /// would be (the healthy upstreams first, failing over), within
    /// `within` (at least the connect deadline and a second more: a first
    /// upstream that takes no connection costs that deadline before the
    /// next is asked) and the per-request timeout, with a result: an error
    /// object (a rate limiter's, an expired key's) is no answer. `Err`
    /// says why none did.
    pub async fn probe(&self, within: Duration) -> Result<(), String> {
        let within = within
            .max(self.connect_timeout + Duration::from_secs(1))
            .min(self.timeout);
        match tokio::time::timeout(within, self.forward("eth_chainId", None)).await {
            Ok(Ok(_)) => Ok(()),
            // A node answers `eth_chainId`: an error object is a rate
            // limiter's, an expired key's, a proxy's in front of a node
            // that is down.
            Ok(Err(e)) => Err(match e.raw_object() {
                Some(object) => format!(
                    "eth_chainId answered with an error: {}",
                    String::from_utf8_lossy(&object[..object.len().min(256)])
                ),
                None => e
                    .data()
                    .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                    .and_then(|d| {
                        let reason = d.get("reason")?.as_str()?;
                        Some(match d.get("upstream").and_then(|u| u.as_str()) {
                            Some(up) => format!("{up}: {reason}"),
                            None => reason.to_string(),
                        })
                    })
                    .unwrap_or_else(|| e.message().to_string()),
            }),
            Err(_) => Err(format!(
                "no upstream answered eth_chainId within {} ms",
                within.as_millis()
            )),
        }
    }

    /// Whether some upstream answered a forward with a result less than
    /// `within` ago.
    pub fn answered_within(&self, within: Duration) -> bool {
        match self.answered.load(Ordering::Relaxed) {
            0 => false,
            at => self.now_ms() < at - 1 + within.as_millis() as u64,
        }
    }

    /// Notes that an upstream answered a forward with a result, now.
    /// Error objects do not count: a rate limiter's or an expired key's
    /// (`429` or `401` with a JSON-RPC error) answers every call so, and
    /// the probe tells a node's own errors apart. Stamped with the time of
    /// the answer, not the call's start: calls that waited for an
    /// `--upstream-connections` place or took seconds were stale stamps,
    /// so `/health` probed behind them and said 503 under load. Written
    /// only when it moves the time on, so that calls at the same
    /// millisecond on other workers leave the cache line alone.
    fn note_answer(&self, outcome: &Result<Answer, RpcError>) {
        if outcome.is_err() {
            return;
        }
        let at = self.now_ms() + 1;
        if self.answered.load(Ordering::Relaxed) < at {
            self.answered.fetch_max(at, Ordering::Relaxed);
        }
    }

    /// A fresh id for an upstream request.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn rest(&self, i: usize) {
        let until = self.now_ms() + REST.as_millis() as u64;
        self.http[i].rest_until.store(until, Ordering::Relaxed);
    }

    /// Upstream indexes in the order to try: the healthy ones first, in
    /// the order given, then the resting ones.
    fn order(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let now = now.duration_since(self.epoch).as_millis() as u64;
        let healthy = move |i: &usize| self.http[*i].healthy_at(now);
        let n = self.http.len();
        (0..n)
            .filter(healthy)
            .chain((0..n).filter(move |i| !healthy(i)))
    }

    /// Forwards one call: `method` with `params` (raw JSON, unchanged)
    /// under a gateway id; the upstream's result, or its error object
    /// (as [`RpcError::raw`]), or a clear error for a failure of the
    /// exchange.
    pub async fn forward(&self, method: &str, params: Option<&[u8]>) -> Result<Answer, RpcError> {
        self.forward_from(method, params, None).await.0
    }

    /// [`forward`](Upstreams::forward), and whether the first upstream
    /// (the first `--upstream`, or the WebSocket upstream when it is the
    /// only one) answered: what the response cache keeps, since nothing
    /// checks that a fallback serves the same chain. `deadline` is the
    /// client's call's ([`AsyncCall::deadline`](rpcwire::dispatch::AsyncCall::deadline)),
    /// if it forwards one: its future dropped then is a timeout of the
    /// upstream it waited on, however long the call waited before it got
    /// here (without one, a drop a timeout after the upstream got the call
    /// is), unless it was waiting for an `--upstream-connections` place:
    /// the upstream's time counts from then.
    pub async fn forward_from(
        &self,
        method: &str,
        params: Option<&[u8]>,
        deadline: Option<Instant>,
    ) -> (Result<Answer, RpcError>, bool) {
        let id = self.next_id();
        // The request is built where it goes: in the HTTP connection's
        // buffer ([`H1Pool::post`]), in a WebSocket message of its own.
        let call = Call { id, method, params };
        if self.http.is_empty() {
            let Some(ws) = &self.ws else {
                return (Err(errors::no_upstream()), false);
            };
            let started = Instant::now();
            let mut guard = TimeoutOnDrop {
                stats: &self.ws_stats,
                started,
                timeout: self.timeout,
                deadline,
                armed: true,
            };
            // Boxed, as hyper's client below: the common path's future
            // (moved into the dispatcher's box at each call) stays small.
            // A connection that cannot be made is counted as `connect`,
            // as over HTTP.
            let reply = Box::pin(async {
                let conn = ws.connection().await.map_err(|e| (e, true))?;
                let reply = conn.call(id, call.body(), None, self.timeout).await;
                reply.map_err(|e| (e, false))
            })
            .await;
            guard.armed = false;
            let (reply, unconnected) = match reply {
                Ok(reply) => (Ok(reply), false),
                Err((e, unconnected)) => (Err(e), unconnected),
            };
            let answer = reply.and_then(|reply| self.read(reply, id, &ws.name));
            self.note_answer(&answer);
            if let Err(e) = &answer {
                if unconnected {
                    UpstreamStats::count(&self.ws_stats.connect);
                } else if e.raw_object().is_none() && e.message() == errors::MALFORMED {
                    UpstreamStats::count(&self.ws_stats.malformed);
                } else {
                    self.ws_stats.failed(e);
                }
            }
            return (answer, true);
        }
        let mut last = None;
        // The clock read once for the forward (each reading costs tens of
        // nanoseconds on a virtual machine; `note_answer` reads it again
        // for an answer, for `/health`).
        let now = Instant::now();
        for i in self.order(now) {
            let up = &self.http[i];
            if last.is_some() {
                UpstreamStats::count(&up.stats.failovers);
            }
            // The dispatcher's deadline (the per-request timeout) drops this
            // future: the upstream that let it pass then rests.
            let mut guard = RestOnDrop {
                upstreams: self,
                index: i,
                started: now,
                deadline,
                armed: true,
            };
            let outcome = match &up.ws {
                // Boxed: the common path's future stays small.
                Some(ws) => Box::pin(self.post_ws(ws, &call, &up.name)).await,
                None => self.post(up, &call, &mut guard).await,
            };
            guard.armed = false;
            match outcome {
                Ok(answer) => {
                    self.note_answer(&answer);
                    let answer = answer.inspect_err(|e| {
                        if e.raw_object().is_none() {
                            UpstreamStats::count(&up.stats.malformed);
                        }
                    });
                    return (answer, i == 0);
                }
                Err(Failure::Connect(reason)) => {
                    // Nothing was sent: the next upstream may take it.
                    self.rest(i);
                    UpstreamStats::count(&up.stats.connect);
                    last = Some(errors::upstream_failed(&up.name, &reason));
                }
                Err(Failure::WsConnect(e)) => {
                    // Nothing was sent either.
                    self.rest(i);
                    UpstreamStats::count(&up.stats.connect);
                    last = Some(e);
                }
                Err(Failure::Ws(e)) => {
                    self.rest(i);
                    up.stats.failed(&e);
                    return (Err(e), false);
                }
                Err(Failure::TooLarge) => return (Err(RpcError::too_large()), false),
                Err(Failure::Other(reason)) => {
                    self.rest(i);
                    UpstreamStats::count(&up.stats.exchange);
                    return (Err(errors::upstream_failed(&up.name, &reason)), false);
                }
            }
        }
        (Err(last.unwrap_or_else(errors::no_upstream)), false)
    }

    /// POSTs `call` to `up` and reads the reply: the call's outcome (its
    /// result, the upstream's error object, or a malformed reply), or the
    /// failure of the exchange. `guard` judges the upstream if the call is
    /// dropped meanwhile.
    async fn post(&self, up: &HttpUpstream, call: &Call<'_>, guard: &mut RestOnDrop<'_>) -> Posted {
        let _permit = match up.exchanges.try_enter() {
            Some(permit) => permit,
            None => {
                // A wait in the gateway's own queue for a place under
                // `--upstream-connections` says nothing of the upstream: a
                // call dropped there does not rest it, and its time with
                // the upstream counts from its place (a saturated but
                // healthy upstream was rested, its traffic sent to the
                // fallbacks).
                guard.armed = false;
                // Boxed: the common path's future stays small (it is boxed
                // by the dispatcher with every call, and a tokio
                // semaphore's wait in it pushed it past the allocator's
                // fast size classes).
                let permit = Box::pin(up.exchanges.enter()).await;
                guard.started = Instant::now();
                guard.armed = true;
                permit
            }
        };
        let now = guard.started;
        if let Some(h1) = &up.h1 {
            let max = self.reply_limit();
            // Read while a small reply is still in the connection's buffer.
            let read = |status: u16, body: Body<'_>| {
                if !(200..300).contains(&status) {
                    return failed_status(&self.parser, status, body, call.id);
                }
                Ok(read_answer(&self.parser, body, call.id, &up.name))
            };
            return match h1.post(|out| call.write(out), max, now, read).await {
                Ok(outcome) => outcome,
                Err(H1Error::Connect(e)) => {
                    Err(Failure::Connect(format!("connection failed: {e}")))
                }
                Err(H1Error::TooLarge) => Err(Failure::TooLarge),
                Err(H1Error::Other(reason)) => Err(Failure::Other(reason)),
            };
        }
        Box::pin(self.post_hyper(up, call)).await
    }

    /// Sends `call` over a `ws://` upstream's connection (`name`), made if
    /// there is none, and reads the reply as [`post`](Upstreams::post)
    /// does.
    async fn post_ws(&self, ws: &WsUpstream, call: &Call<'_>, name: &str) -> Posted {
        let conn = ws.connection().await.map_err(Failure::WsConnect)?;
        let reply = conn
            .try_call(call.id, call.body(), self.timeout)
            .await
            .map_err(|e| match e {
                // Nothing was sent: the next upstream may take it, as when
                // no connection could be made (it failed, unsent).
                WsCallError::Unsent(e) => Failure::WsConnect(e),
                WsCallError::Failed(e) => Failure::Ws(e),
            })?;
        // A WebSocket message is read whole: one past the limit is
        // -32003, as over HTTP.
        if reply.len() > self.reply_limit() {
            return Err(Failure::TooLarge);
        }
        Ok(read_answer(
            &self.parser,
            Body::Shared(&reply),
            call.id,
            name,
        ))
    }

    /// [`post`](Upstreams::post) with hyper-util's pooled client (`--client
    /// hyper`).
    async fn post_hyper(&self, up: &HttpUpstream, call: &Call<'_>) -> Posted {
        let request = http::Request::post(up.uri.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(call.body())))
            .map_err(|e| Failure::Other(e.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() && timed_out(&e) {
                    Failure::Connect(format!(
                        "connection failed: no connection within {} ms",
                        self.connect_timeout.as_millis()
                    ))
                } else if e.is_connect() {
                    Failure::Connect(format!("connection failed: {}", source_text(&e)))
                } else {
                    Failure::Other(format!("connection lost: {}", source_text(&e)))
                }
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), self.reply_limit())
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        Failure::TooLarge
                    } else {
                        Failure::Other(format!("connection lost while reading the reply: {e}"))
                    }
                })?
                .to_bytes();
            if !status.is_success() {
                return failed_status(&self.parser, status, Body::Shared(&body), call.id);
            }
            Ok(read_answer(
                &self.parser,
                Body::Shared(&body),
                call.id,
                &up.name,
            ))
        };
        exchange.await
    }
}

fn looks_like_json(body: &[u8]) -> bool {
    matches!(body.trim_ascii_start().first(), Some(b'{' | b'['))
}

/// Whether an I/O error in `e`'s chain is a timeout (hyper-util's connect
/// deadline, in the reason as `deadline has elapsed`).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// The text of an error and its sources (hyper's top-level messages are
/// terse: "client error (Connect)").
fn source_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A call sent upstream: its outcome as the reply gave it, or the failure
/// of the exchange.
type Posted = Result<Result<Answer, RpcError>, Failure>;

enum Failure {
    /// No connection could be made: the request was not sent.
    Connect(String),
    TooLarge,
    Other(String),
    /// No WebSocket connection could be made: the request was not sent.
    WsConnect(RpcError),
    /// The WebSocket exchange failed after the request may have been sent.
    Ws(RpcError),
}

/// `{"jsonrpc":"2.0","id":N,"method":…,"params":…}`, the params copied.
pub fn request_body(id: u64, method: &str, params: Option<&[u8]>) -> Vec<u8> {
    Call { id, method, params }.body()
}

/// One call as it goes upstream, under the gateway's id.
struct Call<'a> {
    id: u64,
    method: &'a str,
    /// Raw JSON, sent as it is.
    params: Option<&'a [u8]>,
}

impl Call<'_> {
    /// The request in a buffer of its own ([`request_body`]).
    fn body(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(64 + self.method.len() + self.params.map_or(0, <[u8]>::len));
        self.write(&mut out);
        out
    }

    /// Appends the request to `out`.
    fn write(&self, out: &mut impl BufMut) {
        out.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.put_slice(Decimal::new(self.id).as_bytes());
        out.put_slice(b",\"method\":");
        let method = self.method;
        if method
            .bytes()
            .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
        {
            out.put_u8(b'"');
            out.put_slice(method.as_bytes());
            out.put_u8(b'"');
        } else {
            // Escapes as needed (a method name is a JSON string).
            let _ = serde_json::to_writer(out.writer(), method);
        }
        if let Some(params) = self.params {
            out.put_slice(b",\"params\":");
            out.put_slice(params);
        }
        out.put_u8(b'}');
    }
}

/// Whether a call's future dropped now was dropped at its deadline (the
/// per-request timeout) after the upstream had its share of it, not
/// because its client left: by the call's own deadline when known, which
/// counts from the request's arrival (a call that asked the full node for
/// the head, or waited on it before its archive retry, is dropped sooner
/// after it got here), the upstream having had a quarter of the timeout at
/// least (a call that waited for a slot until its last milliseconds says
/// nothing of the upstream it then went to); else a timeout after
/// forwarding began.
fn dropped_at_deadline(deadline: Option<Instant>, started: Instant, timeout: Duration) -> bool {
    const MARGIN: Duration = Duration::from_millis(10);
    let spent = started.elapsed() + MARGIN;
    match deadline {
        Some(deadline) => Instant::now() + MARGIN >= deadline && spent >= timeout / 4,
        None => spent >= timeout,
    }
}

/// Rests an upstream whose call was dropped at the per-request deadline.
struct RestOnDrop<'a> {
    upstreams: &'a Upstreams,
    index: usize,
    /// When the upstream got the call: when forwarding began, or when a
    /// wait for an `--upstream-connections` place ended.
    started: Instant,
    deadline: Option<Instant>,
    armed: bool,
}

impl Drop for RestOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed && dropped_at_deadline(self.deadline, self.started, self.upstreams.timeout) {
            self.upstreams.rest(self.index);
            UpstreamStats::count(&self.upstreams.http[self.index].stats.timeout);
        }
    }
}

/// Counts a call over the WebSocket upstream dropped at the per-request
/// deadline as a timeout.
struct TimeoutOnDrop<'a> {
    stats: &'a UpstreamStats,
    started: Instant,
    timeout: Duration,
    deadline: Option<Instant>,
    armed: bool,
}

impl Drop for TimeoutOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed && dropped_at_deadline(self.deadline, self.started, self.timeout) {
            UpstreamStats::count(&self.stats.timeout);
        }
    }
}

/// `n` in decimal, on the stack.
pub struct Decimal {
    buf: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn new(mut n: u64) -> Decimal {
        let mut buf = [0u8; 20];
        let mut start = 20;
        loop {
            start -= 1;
            buf[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Decimal { buf, start };
            }
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Reads the upstream's reply to the call with gateway id `id`.
pub fn read_answer(
    parser: &Parser,
    reply: Body<'_>,
    id: u64,
    name: &str,
) -> Result<Answer, RpcError> {
    match read_reply(parser, reply, id) {
        Ok(outcome) => outcome,
        Err(reason) => Err(errors::malformed(name, &reason)),
    }
}

/// [`read_answer`]'s reading: the call's outcome (its result, or the
/// upstream's error object), or why the reply is no JSON-RPC response to
/// the call.
fn read_reply(
    parser: &Parser,
    reply: Body<'_>,
    id: u64,
) -> Result<Result<Answer, RpcError>, String> {
    let arena = rpcwire::bumpalo::Bump::new();
    let response = match parser.parse_response(reply.bytes(), &arena) {
        Ok(ResponseMessage::Single(r)) => r,
        Ok(ResponseMessage::Batch(_)) => {
            return Err("a batch in reply to a single request".into());
        }
        Err(e) => return Err(format!("not a JSON-RPC response: {e}")),
    };
    // An error with `id: null` is the spec's answer when the upstream could
    // not read the request's id (and what rate limiters send with 429): on
    // an HTTP exchange, which carries one call, it is that call's error,
    // passed through (and on a WebSocket, when that call was the only one
    // waiting: `WsConn::to_the_only_call`). A
    // result must carry the call's id.
    if response.id().as_bytes() != Decimal::new(id).as_bytes()
        && !(response.is_error() && response.id().as_bytes() == b"null")
    {
        return Err(format!(
            "answered id {} to request id {id}",
            String::from_utf8_lossy(response.id().as_bytes())
        ));
    }
    match response.result() {
        Ok(result) => Ok(Ok(Answer(reply.keep(result.as_bytes())))),
        Err(error) => {
            // The whole error object, byte for byte.
            let code = error.code().clamp(i32::MIN as i64, i32::MAX as i64) as i32;
            Ok(Err(RpcError::raw(code, error.as_bytes())))
        }
    }
}

/// A reply with a failed HTTP status (not 2xx) to the call with gateway id
/// `id`: taken when it is a JSON-RPC response to the call (nodes and rate
/// limiters send their error objects with 4xx and 5xx), else a failure
/// naming the status (a JSON body that is no JSON-RPC response, such as
/// `{"message":"slow down"}` with 429, once made "upstream reply
/// malformed" with the status lost).
fn failed_status(
    parser: &Parser,
    status: impl std::fmt::Display,
    body: Body<'_>,
    id: u64,
) -> Posted {
    if !looks_like_json(body.bytes()) {
        return Err(Failure::Other(format!("HTTP status {status}")));
    }
    read_reply(parser, body, id)
        .map_err(|reason| Failure::Other(format!("HTTP status {status}: {reason}")))
}

/// The WebSocket upstream: one connection, made when first needed and
/// again after it drops.
pub struct WsUpstream {
    url: String,
    pub name: String,
    conn: tokio::sync::Mutex<Option<Arc<WsConn>>>,
    /// The connection last made, for [`current`](Self::current), which
    /// must not wait behind `conn`'s lock: it is held through a connection
    /// attempt (up to `--connect-timeout`).
    live: Mutex<Option<Arc<WsConn>>>,
    timeout: Duration,
    /// How long making the connection may take ([`Config::connect_timeout`]).
    connect_timeout: Duration,
    /// `--max-response`.
    max_response: usize,
    parser: Parser,
    /// The largest message and frame read: a reply up to `--max-response`
    /// in one frame (tungstenite's default frame limit, 16 MiB, is below
    /// the default `--max-response`, and nodes on tungstenite or jsonrpsee
    /// send a message as one frame: a larger one ended the connection,
    /// with every call and subscription on it).
    max_message: usize,
    /// Connection attempts made, and the last one's error if it failed:
    /// callers that waited for `conn` while an attempt was made take its
    /// outcome, instead of each making one of its own in turn (each up to
    /// `--connect-timeout` against a node that never answers the
    /// handshake, so that callers
    /// behind a few reached the per-request timeout unanswered).
    attempts: AtomicU64,
    failure: Mutex<Option<RpcError>>,
    /// How often an idle connection is pinged (`--ws-ping`); a connection
    /// from which neither a pong nor a reply arrives for two of these is
    /// closed as dead: a silent network partition otherwise left its
    /// subscriptions waiting for good and its calls to time out one by
    /// one. Notifications do not count: a node whose reading side is
    /// stuck still sends them.
    ping: Option<Duration>,
}

/// What [`WsConn::end_relay`] did.
pub enum EndRelay {
    /// No relay for that id on this connection.
    NotRelayed,
    /// Relayed, but for another client: left as it was.
    NotOwned,
    /// Ended; the upstream's subscription id, to unsubscribe.
    Ended(Box<str>),
}

/// A message for the upstream, in the writer's queue.
struct Outgoing {
    message: Message,
    /// A call's request: its [`Sending`] state, shared with the caller.
    sending: Option<Arc<Sending>>,
}

/// Where a call's request is: queued, then either written (handed to the
/// socket) or given up (its caller learnt it was never sent, or left), and
/// never both, so that a request the caller may send elsewhere is not
/// written here after all: an `eth_sendTransaction` timed out, or failed
/// over when the connection ended, must not reach this upstream later.
struct Sending(std::sync::atomic::AtomicU8);

impl Sending {
    const QUEUED: u8 = 0;
    const WRITTEN: u8 = 1;
    const GIVEN_UP: u8 = 2;

    fn new() -> Sending {
        Sending(std::sync::atomic::AtomicU8::new(Self::QUEUED))
    }

    /// The writer's side: whether to write it (it was not given up).
    fn write(&self) -> bool {
        self.move_from_queued(Self::WRITTEN)
    }

    /// The caller's side: whether it was never written (and now never
    /// will be).
    fn give_up(&self) -> bool {
        self.move_from_queued(Self::GIVEN_UP)
    }

    fn move_from_queued(&self, to: u8) -> bool {
        self.0
            .compare_exchange(Self::QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Outgoing {
    /// Whether to write it: a call's request only if its caller has not
    /// given up on it (and is still there: only the queue holding it means
    /// it left).
    fn take_for_writing(&self) -> bool {
        match &self.sending {
            None => true,
            Some(sending) if Arc::strong_count(sending) > 1 => sending.write(),
            Some(_) => false,
        }
    }
}

/// One live WebSocket connection to the upstream.
pub struct WsConn {
    out: mpsc::UnboundedSender<Outgoing>,
    /// Bytes of requests in `out` and the writer's hands, bounded by
    /// [`WS_QUEUE_BYTES`].
    queued: AtomicUsize,
    pending: Mutex<HashMap<u64, Waiter>>,
    /// Upstream subscription id -> the client's sink.
    subs: Mutex<HashMap<Box<str>, Sink>>,
    /// The client's subscription id -> the upstream's.
    ups: Mutex<HashMap<SubscriptionId, Box<str>>>,
    closed: AtomicBool,
    /// Ids of the gateway's own `eth_unsubscribe` calls (from 2^62, apart
    /// from the gateway counter's).
    own_ids: AtomicU64,
    name: String,
    parser: Parser,
    /// When the connection was made; `heard` counts from it.
    born: Instant,
    /// Milliseconds after `born` when the last frame arrived.
    heard: AtomicU64,
    /// `eth_subscribe` calls whose callers left, oldest first (their
    /// waiters are `Waiter::Abandoned`), so that they are forgotten after
    /// [`ABANDONED_TIMEOUTS`] timeouts even when the upstream never
    /// answers them (they were kept until the connection closed).
    abandoned: Mutex<std::collections::VecDeque<(Instant, u64)>>,
    /// How long a call may wait.
    timeout: Duration,
    /// `--max-response`: a notification whose result is larger is not
    /// relayed (its subscription ends with -32003).
    max_response: usize,
    /// Set when the pings found the connection dead (its calls say so).
    silent: AtomicBool,
    /// Told when the connection closes, so that its pinger ends then: it
    /// waited for its next tick (a whole `--ws-ping` interval, 20 s by
    /// default), and an upstream that dropped connection after connection
    /// left a task, its timer and the connection's allocation behind for
    /// each meanwhile.
    ended: Arc<tokio::sync::Notify>,
}

enum Waiter {
    Call(oneshot::Sender<Result<Bytes, RpcError>>),
    /// An `eth_subscribe`: on success, the sink is registered under the
    /// upstream's id before the next frame is read, so no notification
    /// is missed.
    /// It fails if the upstream answers with an id already relayed.
    Subscribe(oneshot::Sender<Result<Bytes, RpcError>>, Sink),
    /// An `eth_subscribe` whose caller left (its timeout passed): if the
    /// upstream subscribes after all, it is unsubscribed at once.
    Abandoned,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WsUpstream {
    fn new(
        url: String,
        timeout: Duration,
        connect_timeout: Duration,
        max_response: usize,
        ping: Option<Duration>,
    ) -> WsUpstream {
        let max_message = max_response
            .saturating_add(ENVELOPE_ROOM)
            .max(WS_MIN_MESSAGE);
        WsUpstream {
            name: display_name(&url),
            url,
            conn: tokio::sync::Mutex::new(None),
            live: Mutex::new(None),
            timeout,
            connect_timeout,
            max_response,
            // Every message the connection reads is matched to its call,
            // even one past `--max-response` (the caller answers -32003):
            // one left unmatched kept its caller waiting for the timeout.
            parser: reply_parser(max_message - ENVELOPE_ROOM),
            max_message,
            attempts: AtomicU64::new(0),
            failure: Mutex::new(None),
            ping,
        }
    }

    /// The live connection, if there is one (none is made, and none being
    /// made is waited for: while one is, no relay can exist).
    pub fn current(&self) -> Option<Arc<WsConn>> {
        lock(&self.live)
            .as_ref()
            .filter(|c| !c.closed.load(Ordering::Acquire))
            .cloned()
    }

    /// The live connection, made if there is none.
    pub async fn connection(&self) -> Result<Arc<WsConn>, RpcError> {
        let attempts = self.attempts.load(Ordering::Acquire);
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.closed.load(Ordering::Acquire)
        {
            return Ok(Arc::clone(c));
        }
        if self.attempts.load(Ordering::Acquire) != attempts
            && let Some(e) = lock(&self.failure).clone()
        {
            return Err(e);
        }
        let outcome = self.connect(&mut slot).await;
        *lock(&self.failure) = outcome.as_ref().err().cloned();
        self.attempts.fetch_add(1, Ordering::Release);
        outcome
    }

    /// Makes the connection into `slot`.
    async fn connect(&self, slot: &mut Option<Arc<WsConn>>) -> Result<Arc<WsConn>, RpcError> {
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(self.max_message))
            .max_frame_size(Some(self.max_message));
        // `true`: TCP_NODELAY, as the HTTP clients set. With Nagle's
        // algorithm a request written while an earlier one's bytes were
        // unacknowledged waited for the upstream's delayed ACK (~40 ms).
        let connect =
            tokio_tungstenite::connect_async_with_config(self.url.as_str(), Some(config), true);
        let (ws, _) = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(ws)) => ws,
            Ok(Err(e)) => {
                return Err(errors::upstream_failed(
                    &self.name,
                    &format!("WebSocket connection failed: {e}"),
                ));
            }
            Err(_) => {
                return Err(errors::upstream_failed(
                    &self.name,
                    &format!(
                        "no WebSocket connection within {} ms",
                        self.connect_timeout.as_millis()
                    ),
                ));
            }
        };
        let (mut write, mut read) = ws.split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let conn = Arc::new(WsConn {
            out: tx,
            queued: AtomicUsize::new(0),
            pending: Mutex::new(HashMap::new()),
            subs: Mutex::new(HashMap::new()),
            ups: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            own_ids: AtomicU64::new(1 << 62),
            name: self.name.clone(),
            parser: self.parser,
            born: Instant::now(),
            heard: AtomicU64::new(0),
            abandoned: Mutex::default(),
            timeout: self.timeout,
            max_response: self.max_response,
            silent: AtomicBool::new(false),
            ended: Arc::new(tokio::sync::Notify::new()),
        });
        // Dropped by the reader when the upstream's side ends: the writer
        // then closes ours, which sends the reply to the upstream's close
        // frame (queued by tungstenite, written only by the write half) and
        // ends the TCP connection.
        let (read_done, mut reader_ended) = tokio::sync::oneshot::channel::<()>();
        let reader = Arc::clone(&conn);
        let reading = tokio::spawn(async move {
            let _read_done = read_done;
            while let Some(frame) = read.next().await {
                let bytes = match frame {
                    Ok(Message::Text(t)) => Bytes::from(t),
                    Ok(Message::Binary(b)) => b,
                    Ok(Message::Pong(_)) => {
                        reader.heard();
                        continue;
                    }
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                reader.route(bytes);
            }
            reader.close("the WebSocket connection closed");
        });
        let conn_of_writer = Arc::downgrade(&conn);
        let stop_reading = reading.abort_handle();
        let writer = tokio::spawn(async move {
            let mut failed = false;
            loop {
                let first = tokio::select! {
                    first = rx.recv() => match first {
                        Some(first) => first,
                        None => break,
                    },
                    _ = &mut reader_ended => break,
                };
                // Everything queued goes out in one flush. Raced against
                // the reader's end: an upstream that stopped reading and
                // then closed its side would otherwise hold this task and
                // the socket for good, stuck in the flush (the reader has
                // failed the calls; what is half written stays in
                // tungstenite's buffer, ahead of the close below).
                let sending = async {
                    let mut sent = 0;
                    let mut ok = true;
                    let mut next = Some(first);
                    while ok && let Some(item) = next.take() {
                        sent += item.message.len();
                        if item.take_for_writing() {
                            ok = write.feed(item.message).await.is_ok();
                        }
                        next = rx.try_recv().ok();
                    }
                    (ok && write.flush().await.is_ok(), sent)
                };
                let (ok, sent) = tokio::select! {
                    done = sending => done,
                    _ = &mut reader_ended => break,
                };
                if let Some(conn) = conn_of_writer.upgrade() {
                    conn.queued.fetch_sub(sent, Ordering::AcqRel);
                }
                if !ok {
                    failed = true;
                    break;
                }
            }
            if failed {
                // The reader may wait on a socket that only fails for
                // writes: the connection stayed the live one, and every
                // call on it failed until the upstream's side ended.
                stop_reading.abort();
                if let Some(conn) = conn_of_writer.upgrade() {
                    conn.close(WRITE_FAILED);
                }
                return;
            }
            // Bounded: an upstream that stopped reading cannot hold it.
            let _ = tokio::time::timeout(WS_CLOSE_TIMEOUT, write.close()).await;
        });
        if let Some(every) = self.ping {
            tokio::spawn(keep_alive(
                Arc::downgrade(&conn),
                Arc::clone(&conn.ended),
                every,
                [reading.abort_handle(), writer.abort_handle()],
            ));
        }
        *slot = Some(Arc::clone(&conn));
        *lock(&self.live) = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Sends one request (already carrying id `id`) and waits for its
    /// reply; `subscribe` is the client's sink for an `eth_subscribe`.
    pub async fn call(
        &self,
        id: u64,
        body: Vec<u8>,
        subscribe: Option<Sink>,
    ) -> Result<Bytes, RpcError> {
        let conn = self.connection().await?;
        conn.call(id, body, subscribe, self.timeout).await
    }
}

/// Pings `conn` every `every`; when nothing has arrived from it for two
/// of them, ends its tasks (`tasks`: the reader and the writer, which
/// would otherwise wait on the dead socket for good) and closes it: its
/// calls fail, its subscriptions end with an error, and the next call
/// connects again. Also forgets abandoned subscriptions in time. Ends
/// as soon as `ended` says the connection closed.
async fn keep_alive(
    conn: std::sync::Weak<WsConn>,
    ended: Arc<tokio::sync::Notify>,
    every: Duration,
    tasks: [tokio::task::AbortHandle; 2],
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = ended.notified() => return,
        }
        let Some(conn) = conn.upgrade() else { return };
        if conn.closed.load(Ordering::Acquire) {
            return;
        }
        conn.forget_abandoned();
        let silent = conn
            .since_born()
            .saturating_sub(conn.heard.load(Ordering::Relaxed));
        if silent >= 2 * every.as_millis() as u64 {
            for task in &tasks {
                task.abort();
            }
            conn.close(SILENT);
            return;
        }
        // Not counted in `queued`: no length, and one per interval.
        let _ = conn.out.send(Outgoing {
            message: Message::Ping(Bytes::new()),
            sending: None,
        });
    }
}

/// Removes a call's waiter when the call ends, however it ends (a client
/// that went away, a timeout).
struct PendingGuard<'a> {
    conn: &'a WsConn,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let mut pending = lock(&self.conn.pending);
        if let Some(Waiter::Subscribe(..)) = pending.remove(&self.id) {
            // A subscription the upstream may still make, with nobody to
            // relay it to.
            pending.insert(self.id, Waiter::Abandoned);
            drop(pending);
            lock(&self.conn.abandoned).push_back((Instant::now(), self.id));
            self.conn.forget_abandoned();
        }
    }
}

/// Why a call over a WebSocket upstream got no reply.
pub enum WsCallError {
    /// The request was never sent: the connection closed (before it was
    /// queued, or while it waited in the queue), or the upstream stopped
    /// reading (its queue of requests is full).
    Unsent(RpcError),
    /// It was sent and no reply came, or it could not be sent as text:
    /// what the client is told.
    Failed(RpcError),
}

impl WsCallError {
    fn into_rpc(self) -> RpcError {
        match self {
            WsCallError::Unsent(e) | WsCallError::Failed(e) => e,
        }
    }
}

impl WsConn {
    /// Sends a request and waits for its reply, at most `timeout`.
    pub async fn call(
        &self,
        id: u64,
        body: Vec<u8>,
        subscribe: Option<Sink>,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        self.call_queued(id, body, subscribe, timeout)
            .await
            .map_err(WsCallError::into_rpc)
    }

    /// [`call`](Self::call), saying whether the request was never sent
    /// (the connection closed, or the upstream stopped reading: its queue
    /// is full), so that another upstream may take it.
    pub async fn try_call(
        &self,
        id: u64,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Bytes, WsCallError> {
        self.call_queued(id, body, None, timeout).await
    }

    /// Unsubscribes the upstream subscription `up` (a client's
    /// `eth_unsubscribe`, its relay ended), not waiting for the answer: sent
    /// even past the queue's bound, as the gateway's own unsubscribes are (a
    /// few bytes), since a refusal would leave the upstream subscription
    /// running for the connection's life.
    pub fn unsubscribe_upstream(&self, up: &str) {
        let params = serde_json::to_vec(&[up]).unwrap_or_default();
        self.unsubscribe_params(&params);
    }

    async fn call_queued(
        &self,
        id: u64,
        body: Vec<u8>,
        subscribe: Option<Sink>,
        timeout: Duration,
    ) -> Result<Bytes, WsCallError> {
        let (tx, rx) = oneshot::channel();
        let waiter = match subscribe {
            Some(sink) => Waiter::Subscribe(tx, sink),
            None => Waiter::Call(tx),
        };
        lock(&self.pending).insert(id, waiter);
        let _guard = PendingGuard { conn: self, id };
        let text = String::from_utf8(body)
            .map_err(|_| WsCallError::Failed(RpcError::internal("request not UTF-8")))?;
        let sending = Arc::new(Sending::new());
        // Bounded: a call's request waits its turn in the queue.
        if let Err(why) = self.send(text, true, Some(Arc::clone(&sending))) {
            return Err(WsCallError::Unsent(errors::upstream_failed(
                &self.name, why,
            )));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(outcome)) => outcome.map_err(WsCallError::Failed),
            Ok(Err(_)) => {
                let why = if self.silent.load(Ordering::Acquire) {
                    SILENT
                } else {
                    "the WebSocket connection closed before the reply"
                };
                let error = errors::upstream_failed(&self.name, why);
                // Still queued when the connection ended: never sent (nor
                // to be), so the next upstream may take it.
                Err(if sending.give_up() {
                    WsCallError::Unsent(error)
                } else {
                    WsCallError::Failed(error)
                })
            }
            // The request, if still queued, is not sent now.
            Err(_) => {
                sending.give_up();
                Err(WsCallError::Failed(errors::upstream_timeout(
                    &self.name, timeout,
                )))
            }
        }
    }

    /// Ends the relay of the client's subscription `down` if `release`
    /// (the client's own unsubscribe) succeeds, and returns the upstream's
    /// id. The relay table stays locked from the lookup to the removal, so
    /// another client's subscription is never taken out, not even for a
    /// moment (its notifications keep flowing), and the relay task that
    /// sees the sink close finds nothing left to unsubscribe.
    pub fn end_relay(&self, down: SubscriptionId, release: impl FnOnce() -> bool) -> EndRelay {
        let mut ups = lock(&self.ups);
        let Some(up) = ups.get(&down).cloned() else {
            return EndRelay::NotRelayed;
        };
        if !release() {
            return EndRelay::NotOwned;
        }
        ups.remove(&down);
        lock(&self.subs).remove(&up);
        EndRelay::Ended(up)
    }

    /// Queues `text` for the writer. A call's request (`bounded`) is
    /// refused while [`WS_QUEUE_BYTES`] of others wait; the gateway's own
    /// unsubscribes, a few bytes each, always go. `sending` is a call's
    /// (see [`Sending`]); the gateway's own messages have none.
    fn send(
        &self,
        text: String,
        bounded: bool,
        sending: Option<Arc<Sending>>,
    ) -> Result<(), &'static str> {
        const CLOSED: &str = "the WebSocket connection closed";
        if self.closed.load(Ordering::Acquire) {
            return Err(CLOSED);
        }
        let len = text.len();
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if bounded && before > 0 && before + len > WS_QUEUE_BYTES {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(
                "the WebSocket upstream is not reading its requests (the queue of requests to send is full)",
            );
        }
        let outgoing = Outgoing {
            message: Message::text(text),
            sending,
        };
        if self.out.send(outgoing).is_err() {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(CLOSED);
        }
        Ok(())
    }

    /// Something came that proves the upstream reads what it is sent (a
    /// pong, a reply): its notifications alone do not.
    fn heard(&self) {
        self.heard.store(self.since_born(), Ordering::Relaxed);
    }

    /// Milliseconds since the connection was made.
    fn since_born(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Drops the waiters of subscriptions abandoned longer ago than
    /// [`ABANDONED_TIMEOUTS`] timeouts that the upstream never answered.
    fn forget_abandoned(&self) {
        let keep = self.timeout * ABANDONED_TIMEOUTS;
        let mut abandoned = lock(&self.abandoned);
        while let Some(&(at, id)) = abandoned.front() {
            if at.elapsed() < keep {
                break;
            }
            abandoned.pop_front();
            let mut pending = lock(&self.pending);
            if let Some(Waiter::Abandoned) = pending.get(&id) {
                pending.remove(&id);
            }
        }
    }

    /// Subscriptions relayed over this connection now.
    pub fn relayed(&self) -> usize {
        lock(&self.subs).len()
    }

    /// One frame from the upstream: a reply to a waiting call, or a
    /// subscription notification to relay.
    /// An error that names no call it answers (`"id": null`) goes to the
    /// one call waiting, if only one waits, and is passed on as an HTTP
    /// exchange's is: its caller learns at once instead of at its timeout.
    /// (With more waiting, which one it answers is unknown.)
    fn to_the_only_call(&self, frame: &Bytes) {
        let mut pending = lock(&self.pending);
        if pending.len() != 1 {
            return;
        }
        let Some((&id, Waiter::Call(_))) = pending.iter().next() else {
            return;
        };
        if let Some(Waiter::Call(tx)) = pending.remove(&id) {
            let _ = tx.send(Ok(frame.clone()));
        }
    }

    fn route(self: &Arc<Self>, frame: Bytes) {
        let arena = rpcwire::bumpalo::Bump::new();
        let Ok(message) = self.parser.parse_incoming(&frame, &arena) else {
            return; // Nothing to match it to.
        };
        let items: Vec<Incoming<'_>> = match message {
            RpcMessage::Single(item) => vec![item],
            RpcMessage::Batch(batch) => batch.collect(),
        };
        for item in items {
            match item {
                Incoming::Response(r) => {
                    self.heard();
                    let Some(id) = upstream_id(r.id().as_bytes()) else {
                        // An error with `"id": null` (a rate limiter's, or
                        // an upstream that could not read the request)
                        // answers something this side sent; other ids not
                        // ours are strays, ignored.
                        if r.is_error() && r.id().as_bytes() == b"null" {
                            self.to_the_only_call(&frame);
                        }
                        continue;
                    };
                    let Some(waiter) = lock(&self.pending).remove(&id) else {
                        continue; // Its caller left, or our own unsubscribe.
                    };
                    match waiter {
                        Waiter::Call(tx) => {
                            let _ = tx.send(Ok(frame.clone()));
                        }
                        Waiter::Subscribe(tx, sink) => {
                            let mut outcome = Ok(frame.clone());
                            let made = r.result().ok();
                            match made.map(|result| (result, result.as_json_str())) {
                                // A subscription made under an id that is
                                // not a string: the call fails (the caller
                                // refuses it), and the subscription is
                                // ended, or it would notify for the life of
                                // the connection.
                                Some((result, None)) => self.unsubscribe_raw(result.as_bytes()),
                                Some((result, Some(id))) => {
                                    let Some(up) = id.decode() else {
                                        // Not text (an unpaired surrogate).
                                        self.unsubscribe_raw(result.as_bytes());
                                        let reason =
                                            "eth_subscribe answered with an id that is no text";
                                        let _ = tx.send(Err(errors::malformed(&self.name, reason)));
                                        continue;
                                    };
                                    if lock(&self.subs).contains_key(&*up) {
                                        // Another client's relay (an upstream
                                        // that shares identical subscriptions,
                                        // or a bug): taking it over left that
                                        // client silent, and an unsubscribe by
                                        // either ended both. Refused, and not
                                        // unsubscribed (the id is in use).
                                        outcome = Err(errors::malformed(
                                            &self.name,
                                            "eth_subscribe answered with a subscription id already relayed to another subscription",
                                        ));
                                    } else if !self.register(up.into(), sink) {
                                        outcome = Err(errors::upstream_failed(
                                            &self.name,
                                            "the WebSocket connection closed before the subscription was made",
                                        ));
                                    }
                                }
                                // An error: passed on to the caller as it came.
                                None => {}
                            }
                            let _ = tx.send(outcome);
                        }
                        Waiter::Abandoned => {
                            // Unsubscribed, unless the id is one relayed
                            // (an upstream that shares subscriptions).
                            if let Ok(result) = r.result()
                                && let Some(up) = result.as_json_str().and_then(|s| s.decode())
                                && !lock(&self.subs).contains_key(&*up)
                            {
                                self.forget(&up);
                            }
                        }
                    }
                }
                Incoming::InvalidResponse(_) | Incoming::Invalid(_) => {
                    // An invalid answer that names a waiting call (both
                    // `result` and `error`, no `jsonrpc`, neither `result`
                    // nor `error`; an upstream sends no requests with ids):
                    // the call reads it and fails as malformed, as over
                    // HTTP. It waited for its timeout, blamed on a slow
                    // upstream.
                    let id = match item {
                        Incoming::InvalidResponse(r) => r.id(),
                        Incoming::Invalid(i) => Some(i.id()),
                        _ => None,
                    };
                    let Some(id) = id.and_then(|id| upstream_id(id.as_bytes())) else {
                        continue;
                    };
                    self.heard();
                    let waiter = lock(&self.pending).remove(&id);
                    match waiter {
                        Some(Waiter::Call(tx)) => {
                            let _ = tx.send(Ok(frame.clone()));
                        }
                        Some(Waiter::Subscribe(tx, _)) => {
                            self.unsubscribe_invalid_answer(&frame, id);
                            let _ = tx.send(Ok(frame.clone()));
                        }
                        Some(Waiter::Abandoned) => self.unsubscribe_invalid_answer(&frame, id),
                        None => {}
                    }
                }
                Incoming::Request(n) if n.id().is_none() => {
                    let Some(params) = n.params() else { continue };
                    let Some(sub) = params.get("subscription") else {
                        continue;
                    };
                    let Some(result) = params.get("result") else {
                        // The upstream ended the subscription with an error
                        // (a gateway in front, jsonrpsee): the client is
                        // told so, as when the connection drops (it was
                        // skipped, the relay kept for ever in silence).
                        if let Some(error) = params.get("error")
                            && let Some(up) = sub.as_json_str().and_then(|s| s.decode())
                        {
                            let removed = lock(&self.subs).remove(&*up);
                            if let Some(sink) = removed {
                                lock(&self.ups).remove(&sink.id());
                                sink.close_with_error(&errors::subscription_ended_upstream(
                                    &self.name,
                                    error.as_bytes(),
                                ));
                            }
                        }
                        continue;
                    };
                    // Escapes decoded: the id as the upstream's answer to
                    // `eth_subscribe` gave it, however either writes it
                    // (only ids without escapes were matched: one with an
                    // escape was answered as subscribed, never relayed).
                    let Some(up) = sub.as_json_str().and_then(|s| s.decode()) else {
                        continue;
                    };
                    let up = &*up;
                    let Some(sink) = lock(&self.subs).get(up).cloned() else {
                        continue;
                    };
                    if result.as_bytes().len() > self.max_response {
                        // Past `--max-response`, as a reply would be (such
                        // a notification was relayed at any size the
                        // connection reads, up to 64 MiB, and a slow
                        // client's queue held that much for each): the
                        // subscription ends with -32003, not in silence.
                        self.forget(up);
                        let error = errors::notification_too_large(&self.name, self.max_response);
                        sink.close_with_error(&error);
                    } else if sink.send_raw(result.as_bytes()) == Err(SinkError::Closed) {
                        self.forget(up);
                    }
                }
                _ => {}
            }
        }
    }

    /// Relays the upstream subscription `up` to `sink`, until the client's
    /// side closes (it unsubscribed, or left): then unsubscribes upstream.
    /// `false` when the connection has closed meanwhile (nothing is
    /// registered: [`WsConn::close`] has ended the relays already, and one
    /// added after it would wait for notifications that never come).
    #[must_use]
    fn register(self: &Arc<Self>, up: Box<str>, sink: Sink) -> bool {
        {
            // Both locked, in `end_relay`'s order, around the check:
            // `close` marks the connection before it drains them.
            let mut ups = lock(&self.ups);
            let mut subs = lock(&self.subs);
            if self.closed.load(Ordering::Acquire) {
                return false;
            }
            ups.insert(sink.id(), up.clone());
            subs.insert(up.clone(), sink.clone());
        }
        let conn = Arc::downgrade(self);
        tokio::spawn(async move {
            sink.closed().await;
            if let Some(conn) = conn.upgrade()
                && lock(&conn.ups).get(&sink.id()) == Some(&up)
            {
                conn.forget(&up);
            }
        });
        true
    }

    /// Drops the relay of `up` and unsubscribes upstream (the reply is
    /// not awaited).
    fn forget(&self, up: &str) {
        let removed = lock(&self.subs).remove(up);
        if let Some(sink) = removed {
            lock(&self.ups).remove(&sink.id());
        }
        self.unsubscribe_upstream(up);
    }

    /// An invalid answer to `eth_subscribe` (`result` beside `error`, a
    /// wrong `jsonrpc`) may still have subscribed upstream: the `result`
    /// of the answer with `id` in `frame`, unless no relay can be told
    /// from it or one holds it, is unsubscribed. It ran on for the
    /// connection's life, its notifications dropped (the caller is told
    /// the answer was malformed). A cold path: `frame` is read again.
    fn unsubscribe_invalid_answer(&self, frame: &[u8], id: u64) {
        use serde_json::Value;
        let Ok(value) = serde_json::from_slice::<Value>(frame) else {
            return;
        };
        let answers = match &value {
            Value::Array(items) => items.as_slice(),
            one => std::slice::from_ref(one),
        };
        let Some(result) = answers
            .iter()
            .find(|a| a.get("id").and_then(Value::as_u64) == Some(id))
            .and_then(|a| a.get("result"))
        else {
            return;
        };
        if result.is_null()
            || result
                .as_str()
                .is_some_and(|up| lock(&self.subs).contains_key(up))
        {
            return;
        }
        let params = serde_json::to_vec(&[result]).unwrap_or_default();
        self.unsubscribe_params(&params);
    }

    /// Unsubscribes upstream the subscription whose id is the JSON value
    /// `id`, as the upstream wrote it (one no relay can hold).
    fn unsubscribe_raw(&self, id: &[u8]) {
        let mut params = Vec::with_capacity(id.len() + 2);
        params.push(b'[');
        params.extend_from_slice(id);
        params.push(b']');
        self.unsubscribe_params(&params);
    }

    /// Sends `eth_unsubscribe` with `params`, answered to nobody.
    fn unsubscribe_params(&self, params: &[u8]) {
        let id = self.own_ids.fetch_add(1, Ordering::Relaxed);
        let body = request_body(id, "eth_unsubscribe", Some(params));
        if let Ok(text) = String::from_utf8(body) {
            let _ = self.send(text, false, None);
        }
    }

    /// The connection dropped (`why`): every waiting call fails, every
    /// relayed subscription ends with an error notification.
    fn close(&self, why: &str) {
        self.silent.store(why == SILENT, Ordering::Release);
        self.closed.store(true, Ordering::Release);
        // A permit kept if the pinger is not waiting right now.
        self.ended.notify_one();
        lock(&self.pending).clear();
        lock(&self.abandoned).clear();
        let subs: Vec<Sink> = lock(&self.subs).drain().map(|(_, s)| s).collect();
        lock(&self.ups).clear();
        let error = errors::upstream_failed(&self.name, why);
        for sink in subs {
            sink.close_with_error(&error);
        }
    }
}
