//! The operators' endpoint (`--metrics ADDR`): a listener of its own, so
//! that the RPC port never exposes it (as geth's `--metrics.addr`).
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /metrics` | the counters, in the Prometheus text format |
//! | `GET /health` | `200` when some upstream answers (or the built-in chain serves), `503` otherwise; a short JSON body saying why |
//!
//! Counting stays off the forwarding path's costs: the dispatcher's
//! observer ([`Counters`]) only adds to atomics (no lock, no allocation
//! per call), the servers count connections with atomics (and limits hit,
//! rare, under a lock), and the upstreams count only their failures.
//! Everything is read when scraped. Without `--metrics` none of it is
//! installed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Incoming;
use rpcwire::bytes::Bytes;
use rpcwire::dispatch::{CallRecord, Observer};
use rpcwire::http::{Method, Request, Response, StatusCode, header};
use rpcwire::server::{LimitKind, Limits, Metrics, Shutdown, UNKNOWN_METHOD};
use tokio::net::TcpListener;

use crate::proxy::Gateway;

/// How long `/health` waits for an upstream to answer (at most the
/// per-request timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The label of calls of methods the dispatcher does not register,
/// answered by the forwarding fallback (forwarded, or denied by a rule):
/// a client's text, which is not made a label of its own.
const OTHER_METHOD: &str = "(other)";

/// Error codes counted apart: the JSON-RPC range (-32768..=-32000) and
/// small codes (such as 3, a reverted call); the rest under `other`.
const RESERVED_CODES: usize = 769;
const SMALL_CODES: usize = 256;
const CODE_SLOTS: usize = RESERVED_CODES + SMALL_CODES + 1;

fn code_slot(code: i32) -> usize {
    match code {
        -32768..=-32000 => (code + 32768) as usize,
        -128..=127 => RESERVED_CODES + (code + 128) as usize,
        _ => CODE_SLOTS - 1,
    }
}

fn slot_code(slot: usize) -> Option<i32> {
    if slot < RESERVED_CODES {
        Some(slot as i32 - 32768)
    } else if slot < CODE_SLOTS - 1 {
        Some((slot - RESERVED_CODES) as i32 - 128)
    } else {
        None
    }
}

/// FNV-1a: method names are short and chosen by the dispatcher's author
/// (a client's unknown name only misses), so a fast hash does; SipHash
/// cost more than the counting itself.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// The dispatcher's methods, each with its slot in [`Counters::calls`].
struct Table {
    index: HashMap<Box<str>, usize, BuildHasherDefault<Fnv>>,
    names: Vec<Box<str>>,
    calls: Box<[AtomicU64]>,
}

/// The dispatcher's counters, kept with atomics only: calls per method
/// (the dispatcher's own methods apart, fallback calls as `(other)`,
/// unknown ones as `(unknown)`), replies per error code, time spent. The
/// methods are set once the dispatcher is built ([`Counters::set_methods`]).
pub struct Counters {
    table: OnceLock<Table>,
    other: AtomicU64,
    unknown: AtomicU64,
    errors: Box<[AtomicU64]>,
    nanos: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            table: OnceLock::new(),
            other: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
            errors: (0..CODE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            nanos: AtomicU64::new(0),
        }
    }
}

impl Counters {
    /// The dispatcher's method names (counted apart from then on).
    pub fn set_methods<'a>(&self, methods: impl Iterator<Item = &'a str>) {
        let names: Vec<Box<str>> = methods.map(Box::from).collect();
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let calls = (0..names.len()).map(|_| AtomicU64::new(0)).collect();
        let _ = self.table.set(Table {
            index,
            names,
            calls,
        });
    }

    fn render(&self, out: &mut String) {
        out.push_str("# TYPE rpcwire_calls_total counter\n");
        let mut calls: Vec<(&str, u64)> = Vec::new();
        if let Some(t) = self.table.get() {
            calls.extend(
                t.names
                    .iter()
                    .zip(t.calls.iter())
                    .map(|(n, c)| (&**n, c.load(Ordering::Relaxed))),
            );
        }
        calls.push((OTHER_METHOD, self.other.load(Ordering::Relaxed)));
        calls.push((UNKNOWN_METHOD, self.unknown.load(Ordering::Relaxed)));
        calls.retain(|(_, n)| *n > 0);
        calls.sort_unstable();
        for (method, n) in calls {
            let _ = writeln!(
                out,
                "rpcwire_calls_total{{method=\"{}\"}} {n}",
                Label(method)
            );
        }
        out.push_str("# TYPE rpcwire_errors_total counter\n");
        for (slot, n) in self.errors.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            match slot_code(slot) {
                Some(code) => {
                    let _ = writeln!(out, "rpcwire_errors_total{{code=\"{code}\"}} {n}");
                }
                None => {
                    let _ = writeln!(out, "rpcwire_errors_total{{code=\"other\"}} {n}");
                }
            }
        }
        let _ = writeln!(
            out,
            "# TYPE rpcwire_call_seconds_total counter\nrpcwire_call_seconds_total {:.6}",
            self.nanos.load(Ordering::Relaxed) as f64 / 1e9
        );
    }
}

impl Observer for Counters {
    fn on_call(&self, call: &CallRecord<'_>) {
        let counter = match call.method {
            Some(m) if call.known => self
                .table
                .get()
                .and_then(|t| t.index.get(m).map(|&i| &t.calls[i]))
                .unwrap_or(&self.other),
            _ => &self.unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(code) = call.code {
            self.errors[code_slot(code)].fetch_add(1, Ordering::Relaxed);
        }
        self.nanos
            .fetch_add(call.elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// What the gateway serves, for `/health`.
pub enum Serving {
    /// Forwarding.
    Proxy(Arc<Gateway>),
    /// The built-in chain, with its id.
    Chain(u64),
}

/// Everything the operators' endpoint reads.
pub struct Ops {
    /// The dispatcher's observer.
    pub counters: Arc<Counters>,
    /// The servers' counters (connections, limits hit). The dispatcher's
    /// observer is `counters`, written when `Metrics` took a lock per call;
    /// it no longer does, so `counters` could become `Metrics` itself.
    pub server: Arc<Metrics>,
    serving: OnceLock<Serving>,
}

impl Ops {
    pub fn new() -> Ops {
        Ops {
            counters: Arc::default(),
            server: Arc::default(),
            serving: OnceLock::new(),
        }
    }

    /// What is served (set once, when the dispatcher is built).
    pub fn set_serving(&self, serving: Serving) {
        let _ = self.serving.set(serving);
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.counters.render(&mut out);
        out.push_str("# TYPE rpcwire_limit_hits_total counter\n");
        for (kind, name) in LIMITS {
            let n = self.server.limit_count(kind);
            let _ = writeln!(out, "rpcwire_limit_hits_total{{limit=\"{name}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# TYPE rpcwire_connections_open gauge\nrpcwire_connections_open {}",
            self.server.connections_open()
        );
        if let Some(Serving::Proxy(gateway)) = self.serving.get() {
            render_upstreams(gateway, &mut out).await;
        }
        out
    }

    /// The status and body of `/health`.
    pub async fn health(&self) -> (StatusCode, String) {
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
        let probe = gateway.up.probe(PROBE_TIMEOUT).await;
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

impl Default for Ops {
    fn default() -> Self {
        Ops::new()
    }
}

/// The limits the servers count, under rpcwire's own label values.
const LIMITS: [(LimitKind, &str); 7] = [
    (LimitKind::Connections, "connections"),
    (LimitKind::MessageLen, "message_len"),
    (LimitKind::Queue, "queue"),
    (LimitKind::Idle, "idle"),
    (LimitKind::Subscription, "subscription"),
    (LimitKind::Header, "header"),
    (LimitKind::BodyTimeout, "body_timeout"),
];

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
    let relayed = gateway.up.relayed_subscriptions().await;
    let _ = writeln!(
        out,
        "# TYPE gateway_subscriptions_relayed gauge\ngateway_subscriptions_relayed {relayed}"
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

/// Serves `/metrics` and `/health` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, ops: Arc<Ops>, shutdown: Shutdown) {
    let limits = Limits {
        max_connections: 64,
        ..Limits::default()
    };
    let endpoint = Endpoint(ops);
    let make = move |_| endpoint.clone();
    rpcwire::server::http::serve(listener, make, limits, None, shutdown).await;
}
