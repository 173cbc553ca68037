//! The operators' endpoint (`--metrics ADDR`): a listener of its own, so
//! that the RPC port never exposes it (as geth's `--metrics.addr`).
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /metrics` | the counters, in the Prometheus text format |
//! | `GET /health` | `200` when some upstream answers with a result (or the built-in chain serves), `503` otherwise (an error object to `eth_chainId`, a rate limiter's or an expired key's, included); a short JSON body saying why |
//!
//! `/health` asks the upstreams (an `eth_chainId`) only when nothing
//! recent says how they are: a forward answered with a result, or a probe
//! ended, less than [`PROBE_FRESH`] ago stands, and probes arriving while one asks wait
//! for its outcome; so load balancers probing at will cost the node at
//! most one request a second.
//!
//! The endpoint outlives the RPC port: during a shutdown's drain it goes on
//! serving, `/health` answering `503` with `"status": "draining"` and what
//! is still in flight, so that a load balancer's probes get a clear answer
//! instead of a refused connection and the drain's last counters can be
//! scraped; it closes when the process exits.
//!
//! Counting stays off the forwarding path's costs: the dispatcher's
//! observer (rpcwire's `Metrics`) only adds to atomics (no lock, no
//! allocation per call; methods the gateway does not register, answered by
//! its forwarding fallback, under one label, `(other)`), the servers count
//! connections with atomics (and limits hit, rare, under a lock), and the
//! upstreams count only their failures; the response cache counts its
//! hits and misses with atomics; with `--archive`, the calls sent to the
//! archive nodes (`gateway_archive_routed_total`, by their block) and
//! retried there (`gateway_archive_retries_total`, after a full node's
//! missing-state error), and whether each archive node rests
//! (`gateway_archive_up`).
//! Everything is read when scraped. Without `--metrics` none of it is
//! installed.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Incoming;
use rpcwire::bytes::Bytes;
use rpcwire::http::{Method, Request, Response, StatusCode, header};
use rpcwire::server::{Limits, Metrics, Shutdown};
use tokio::net::TcpListener;

use crate::archive::Archive;
use crate::proxy::Gateway;

/// How long `/health` waits for an upstream to answer (at most the
/// per-request timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an upstream's state, as a probe or a forward found it, stands
/// for `/health`: a burst of probes (several load balancers, each probing
/// every few seconds) costs the upstream at most one request per this.
const PROBE_FRESH: Duration = Duration::from_secs(1);

/// What the gateway serves, for `/health`.
pub enum Serving {
    /// Forwarding.
    Proxy(Arc<Gateway>),
    /// The built-in chain, with its id.
    Chain(u64),
}

/// Everything the operators' endpoint reads.
pub struct Ops {
    /// The dispatcher's observer and the servers' counters (connections,
    /// limits hit): atomics on every call's path, no lock.
    pub metrics: Arc<Metrics>,
    serving: OnceLock<Serving>,
    /// The gateway's shutdown: once triggered, `/health` says it drains.
    stopping: Shutdown,
    /// The latest probe's outcome and when it ended; locked for a probe's
    /// whole length, so that probes arriving meanwhile wait for its
    /// outcome instead of asking too.
    last_probe: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Ops {
    /// The endpoint's state for a gateway stopped by `stopping`.
    pub fn new(stopping: &Shutdown) -> Ops {
        Ops {
            metrics: Arc::default(),
            serving: OnceLock::new(),
            stopping: stopping.clone(),
            last_probe: tokio::sync::Mutex::new(None),
        }
    }

    /// What is served (set once, when the dispatcher is built).
    pub fn set_serving(&self, serving: Serving) {
        let _ = self.serving.set(serving);
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let mut out = self.metrics.render();
        if let Some(Serving::Proxy(gateway)) = self.serving.get() {
            render_upstreams(gateway, &mut out).await;
        }
        out
    }

    /// The status and body of `/health`.
    pub async fn health(&self) -> (StatusCode, String) {
        if self.stopping.is_triggered() {
            return (StatusCode::SERVICE_UNAVAILABLE, self.draining());
        }
        let gateway = match self.serving.get() {
            Some(Serving::Proxy(gateway)) => gateway,
            Some(Serving::Chain(id)) => {
                let body =
                    serde_json::json!({"status": "ok", "serving": "built-in chain", "chainId": id});
                return (StatusCode::OK, body.to_string());
            }
            None => {
                let body = serde_json::json!({"status": "unavailable", "reason": "starting"});
                return (StatusCode::SERVICE_UNAVAILABLE, body.to_string());
            }
        };
        let probe = self.probe(gateway).await;
        let upstreams: Vec<_> = gateway
            .up
            .states()
            .iter()
            .map(|u| serde_json::json!({"upstream": u.name, "healthy": u.healthy}))
            .collect();
        match probe {
            Ok(()) => {
                let body = serde_json::json!({"status": "ok", "upstreams": upstreams});
                (StatusCode::OK, body.to_string())
            }
            Err(reason) => {
                let body = serde_json::json!({
                    "status": "unavailable",
                    "reason": format!("no upstream answered: {reason}"),
                    "upstreams": upstreams,
                });
                (StatusCode::SERVICE_UNAVAILABLE, body.to_string())
            }
        }
    }
}

impl Ops {
    /// Whether some upstream answers: yes if a forward was answered within
    /// [`PROBE_FRESH`], else the latest probe's outcome if that recent,
    /// else a probe's.
    async fn probe(&self, gateway: &Gateway) -> Result<(), String> {
        if gateway.up.answered_within(PROBE_FRESH) {
            return Ok(());
        }
        let mut last = self.last_probe.lock().await;
        if let Some((at, outcome)) = &*last
            && at.elapsed() < PROBE_FRESH
        {
            return outcome.clone();
        }
        // A forward may have been answered while this waited for the lock.
        if gateway.up.answered_within(PROBE_FRESH) {
            return Ok(());
        }
        let outcome = gateway.up.probe(PROBE_TIMEOUT).await;
        *last = Some((Instant::now(), outcome.clone()));
        outcome
    }

    /// `/health`'s body during a drain: what it still waits for, read
    /// from counters (no upstream is asked).
    fn draining(&self) -> String {
        let mut body = serde_json::json!({
            "status": "draining",
            "reason": "shutting down: requests in flight are being answered, new connections refused",
            "connections": self.metrics.connections_open(),
        });
        if let Some(Serving::Proxy(gateway)) = self.serving.get() {
            body["inFlight"] = gateway.calls.running().into();
        }
        body.to_string()
    }
}

async fn render_upstreams(gateway: &Gateway, out: &mut String) {
    let states = gateway.up.states();
    out.push_str("# TYPE gateway_upstream_up gauge\n");
    for u in &states {
        let up = u8::from(u.healthy);
        let _ = writeln!(
            out,
            "gateway_upstream_up{{upstream=\"{}\"}} {up}",
            Label(u.name)
        );
    }
    out.push_str("# TYPE gateway_upstream_failures_total counter\n");
    for u in &states {
        let s = u.stats;
        for (kind, n) in [
            ("connect", &s.connect),
            ("timeout", &s.timeout),
            ("exchange", &s.exchange),
            ("malformed", &s.malformed),
        ] {
            let _ = writeln!(
                out,
                "gateway_upstream_failures_total{{upstream=\"{}\",kind=\"{kind}\"}} {}",
                Label(u.name),
                n.load(Ordering::Relaxed)
            );
        }
    }
    out.push_str("# TYPE gateway_upstream_failovers_total counter\n");
    for u in &states {
        let _ = writeln!(
            out,
            "gateway_upstream_failovers_total{{upstream=\"{}\"}} {}",
            Label(u.name),
            u.stats.failovers.load(Ordering::Relaxed)
        );
    }
    out.push_str("# TYPE gateway_upstream_requests_in_flight gauge\n");
    for u in &states {
        if let Some(n) = u.in_flight {
            let _ = writeln!(
                out,
                "gateway_upstream_requests_in_flight{{upstream=\"{}\"}} {n}",
                Label(u.name)
            );
        }
    }
    drop(states);
    if let Some(cache) = &gateway.cache {
        let c = cache.stats();
        let _ = write!(
            out,
            "# TYPE gateway_cache_hits_total counter\ngateway_cache_hits_total {}\n\
             # TYPE gateway_cache_misses_total counter\ngateway_cache_misses_total {}\n\
             # TYPE gateway_cache_entries gauge\ngateway_cache_entries {}\n\
             # TYPE gateway_cache_bytes gauge\ngateway_cache_bytes {}\n\
             # TYPE gateway_cache_limit_bytes gauge\ngateway_cache_limit_bytes {}\n",
            c.hits, c.misses, c.entries, c.bytes, c.limit
        );
    }
    if let Some(archive) = &gateway.archive {
        render_archive(archive, out);
    }
    let relayed = gateway.up.relayed_subscriptions();
    let _ = writeln!(
        out,
        "# TYPE gateway_subscriptions_relayed gauge\ngateway_subscriptions_relayed {relayed}"
    );
}

/// The archive nodes (`--archive`): whether each rests, and the calls
/// sent to them.
fn render_archive(archive: &Archive, out: &mut String) {
    out.push_str("# TYPE gateway_archive_up gauge\n");
    for u in archive.up.states() {
        let up = u8::from(u.healthy);
        let _ = writeln!(
            out,
            "gateway_archive_up{{upstream=\"{}\"}} {up}",
            Label(u.name)
        );
    }
    let _ = write!(
        out,
        "# TYPE gateway_archive_routed_total counter\ngateway_archive_routed_total {}\n\
         # TYPE gateway_archive_retries_total counter\ngateway_archive_retries_total {}\n",
        archive.routed.load(Ordering::Relaxed),
        archive.retried.load(Ordering::Relaxed),
    );
}

/// A label value of the text format: `\`, `"` and line feeds escaped.
struct Label<'a>(&'a str);

impl std::fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// The endpoint's HTTP service.
#[derive(Clone)]
struct Endpoint(Arc<Ops>);

type Answer = Response<Full<Bytes>>;

impl tower_service::Service<Request<Incoming>> for Endpoint {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let ops = Arc::clone(&self.0);
        let get = req.method() == Method::GET || req.method() == Method::HEAD;
        let path = req.uri().path().to_owned();
        Box::pin(async move {
            Ok(match path.as_str() {
                "/metrics" | "/health" if !get => {
                    let mut r = answer(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
                    r.headers_mut()
                        .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
                    r
                }
                "/metrics" => answer(
                    StatusCode::OK,
                    "text/plain; version=0.0.4",
                    ops.metrics().await,
                ),
                "/health" => {
                    let (status, body) = ops.health().await;
                    answer(status, "application/json", body)
                }
                _ => answer(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    "not found: GET /metrics or /health\n",
                ),
            })
        })
    }
}

fn answer(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// Serves `/metrics` and `/health` on `listener` until `stop`: not the
/// gateway's shutdown, which `/health` reports while this goes on serving
/// (the binary never triggers it: the endpoint ends with the process).
pub async fn serve(listener: TcpListener, ops: Arc<Ops>, stop: Shutdown) {
    // Short waits: with the RPC port's (a 120 s idle timeout, 30 s for a
    // head), 64 connections left open by anything that reaches this port
    // locked the load balancer's health checks out (each refused past the
    // cap) for minutes at a time. Scrapers and checkers reconnect at no
    // cost.
    let limits = Limits {
        max_connections: 256,
        idle_timeout: OPS_IDLE,
        body_timeout: OPS_IDLE,
        ..Limits::default()
    };
    let endpoint = Endpoint(ops);
    let make = move |_| endpoint.clone();
    rpcwire::server::http::Server::new(limits)
        .header_read_timeout(OPS_IDLE)
        .serve(listener, make, stop)
        .await;
}

/// How long a connection to the operations port may stay idle, or take to
/// send a request's head or body.
const OPS_IDLE: Duration = Duration::from_secs(5);
