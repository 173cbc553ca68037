//! The gateway example as operators run it: stopped by its service manager
//! (SIGTERM, as Docker, Kubernetes and systemd send) with requests in
//! flight, the example's binary run as a child process in front of fake
//! upstreams that answer when the test says so. Everything on 127.0.0.1;
//! deadlines only detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::*;
use crate::gateway_child::GatewayChild;
use crate::http_request::{json_200, read_request};

/// Long enough to mean "it hangs", never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// An HTTP upstream that reads every request and answers it (`"0x2a"`,
/// under the request's id) only once [`Held::release`] is called; counts
/// the requests, and the connections the gateway closed while their
/// request waited.
struct Held {
    addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    release: tokio::sync::watch::Sender<bool>,
}

impl Held {
    async fn start() -> Held {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let (count, gone) = (Arc::clone(&seen), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (count, gone, mut released) =
                    (Arc::clone(&count), Arc::clone(&gone), released.clone());
                tokio::spawn(async move {
                    while let Some(body) = read_request(&mut s).await {
                        count.fetch_add(1, Ordering::SeqCst);
                        let v: Value = serde_json::from_slice(&body).unwrap();
                        // The gateway sends nothing more before the
                        // answer: a read that ends is its close.
                        let mut byte = [0u8; 1];
                        tokio::select! {
                            r = released.wait_for(|r| *r) => if r.is_err() {
                                return;
                            },
                            _ = s.read(&mut byte) => {
                                gone.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                        }
                        let reply =
                            format!(r#"{{"jsonrpc":"2.0","id":{},"result":"0x2a"}}"#, v["id"]);
                        let out = json_200(&reply);
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Held {
            addr,
            seen,
            closed,
            release,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `n` requests have arrived.
    async fn until_seen(&self, n: usize) {
        tokio::time::timeout(HANG, async {
            while self.seen.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hang: the requests did not reach the upstream");
    }

    fn release(&self) {
        self.release.send_replace(true);
    }
}

/// Waits until `gw`'s port refuses new connections.
async fn until_refused(gw: &GatewayChild) {
    let addr = gw.addr();
    tokio::time::timeout(HANG, async {
        loop {
            match TcpStream::connect(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                // Caught in a listener's queue as it closed.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                Err(e) => panic!("connecting: {e}"),
                Ok(s) => drop(s),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("hang: the gateway kept accepting connections");
}

/// POSTs `body` on a connection of its own; the status and the body, or
/// `None` when the connection closed without a reply.
async fn post(addr: SocketAddr, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8(response).unwrap();
    if text.len() < 12 {
        return None;
    }
    let status = text[9..12].parse().unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    Some((status, body.to_string()))
}

/// What the task `task` returns, at most [`HANG`] away.
async fn within<T>(what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(HANG, task)
        .await
        .unwrap_or_else(|_| panic!("hang: {what}"))
        .unwrap()
}

type WsClient = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// The messages a WebSocket client receives until the connection ends:
/// the JSON ones, and the close frame's code if one came.
async fn ws_rest(ws: &mut WsClient) -> (Vec<Value>, Option<CloseCode>) {
    let mut messages = Vec::new();
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Text(t) => messages.push(serde_json::from_str(&t).unwrap()),
            Message::Close(frame) => return (messages, frame.map(|f| f.code)),
            _ => {}
        }
    }
    (messages, None)
}

/// SIGTERM (what Docker, Kubernetes and systemd stop a service with)
/// drains the gateway as Ctrl-C does: the port refuses new connections at
/// once, the forwards in flight (a single call, a batch, a WebSocket
/// client's call) are answered when the upstream answers, the WebSocket
/// client is then closed with 1001 (going away), and the process exits
/// with status 0. (It was killed by the signal at once, every forward in
/// flight lost.)
#[tokio::test]
async fn sigterm_drains_requests_in_flight_and_exits_0() {
    let (upstream, mut gw) = behind_held(&[]).await;
    let addr = gw.addr();
    let single = tokio::spawn(post(
        addr,
        r#"{"jsonrpc":"2.0","id":"single","method":"eth_blockNumber"}"#,
    ));
    let batch = tokio::spawn(post(
        addr,
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_gasPrice"}]"#,
    ));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .unwrap();
    let call = json!({"jsonrpc":"2.0","id":"ws","method":"eth_blockNumber"});
    ws.send(Message::text(call.to_string())).await.unwrap();
    let ws = tokio::spawn(async move { ws_rest(&mut ws).await });
    upstream.until_seen(4).await;

    gw.signal("TERM");
    until_refused(&gw).await;
    upstream.release();

    let (status, body) = within("the single call", single)
        .await
        .expect("the single call answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, json!({"jsonrpc":"2.0","id":"single","result":"0x2a"}));
    let (status, body) = within("the batch", batch)
        .await
        .expect("the batch answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!([
            {"jsonrpc":"2.0","id":1,"result":"0x2a"},
            {"jsonrpc":"2.0","id":2,"result":"0x2a"}
        ])
    );
    let (messages, close) = within("the WebSocket client", ws).await;
    assert_eq!(
        messages,
        [json!({"jsonrpc":"2.0","id":"ws","result":"0x2a"})]
    );
    assert_eq!(close, Some(CloseCode::Away));

    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}: {:?}", gw.log());
    // Each forward went upstream once.
    assert_eq!(upstream.seen.load(Ordering::SeqCst), 4);
}

/// SIGINT drains the same way (it did before SIGTERM did).
#[tokio::test]
async fn sigint_drains_too() {
    let (upstream, mut gw) = behind_held(&[]).await;
    let single = tokio::spawn(post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;
    gw.signal("INT");
    until_refused(&gw).await;
    upstream.release();
    let (status, body) = within("the call", single).await.expect("answered");
    assert_eq!((status, body.contains("0x2a")), (200, true), "{body}");
    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}");
}

/// A second signal during the drain ends the gateway at once (an operator
/// who does not want to wait), with a failure status; the grace here is
/// far longer than the test waits.
#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let (upstream, mut gw) = behind_held(&["--shutdown-grace", "600000"]).await;
    let single = tokio::spawn(post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":4,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;
    gw.signal("TERM");
    until_refused(&gw).await;
    gw.signal("TERM");
    let status = gw.exit_status().await;
    assert_ne!(status.code(), Some(0), "{status}");
    assert!(status.code().is_some(), "exited, not killed: {status}");
    // Its client's connection ended with the process, unanswered.
    let answer = within("the call", single).await;
    assert_eq!(answer, None);
}

/// `--shutdown-grace` bounds the drain: a forward the upstream never
/// answers is dropped once it passes (its client's connection closed
/// unanswered), and the gateway says so: on standard error, how many calls
/// it abandoned, and in its exit status, 3 (a service manager sees a
/// failed stop, not a clean one). (It exited 0, the lost calls unsaid.)
#[tokio::test]
async fn the_drain_ends_after_the_grace_with_status_3() {
    let (upstream, mut gw) = behind_held(&["--shutdown-grace", "200"]).await;
    let single = tokio::spawn(post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":5,"method":"eth_blockNumber"}"#,
    ));
    let batch = tokio::spawn(post(
        gw.addr(),
        r#"[{"jsonrpc":"2.0","id":6,"method":"eth_gasPrice"},{"jsonrpc":"2.0","id":7,"method":"vendor_custom"}]"#,
    ));
    upstream.until_seen(3).await;
    gw.signal("TERM");
    let status = gw.exit_status().await;
    let log = gw.final_log().await;
    assert_eq!(status.code(), Some(3), "{status}: {log:?}");
    assert!(
        log.iter().any(|l| l.contains("3 calls abandoned")),
        "{log:?}"
    );
    assert_eq!(within("the call", single).await, None);
    assert_eq!(within("the batch", batch).await, None);
}

/// A drain that ends within the grace abandons nothing, even when a
/// client left during it (its call ended with it, as at any time): status
/// 0, and no abandoned calls reported.
#[tokio::test]
async fn a_client_leaving_during_the_drain_is_no_abandoned_call() {
    let (upstream, mut gw) = behind_held(&[]).await;
    let mut leaving = TcpStream::connect(gw.addr()).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":8,"method":"eth_blockNumber"}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    leaving.write_all(request.as_bytes()).await.unwrap();
    let staying = tokio::spawn(post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":9,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(2).await;
    gw.signal("TERM");
    until_refused(&gw).await;
    drop(leaving);
    // The forward that lost its client ends (its upstream connection
    // closed) before the other is let through.
    tokio::time::timeout(HANG, async {
        while upstream.closed.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("hang: the left call's forward did not end");
    upstream.release();
    let (status, body) = within("the call", staying).await.expect("answered");
    assert_eq!(status, 200, "{body}");
    let status = gw.exit_status().await;
    let log = gw.final_log().await;
    assert_eq!(status.code(), Some(0), "{status}: {log:?}");
    assert!(!log.iter().any(|l| l.contains("abandoned")), "{log:?}");
}

/// `--shutdown-grace MS` is the servers' drain deadline; 10 s unless given.
#[test]
fn shutdown_grace_is_an_option() {
    let parse = |args: &[&str]| config::Config::from_args(args.iter().map(|a| a.to_string()));
    let default = parse(&[]).unwrap();
    assert_eq!(default.limits().shutdown_grace, Duration::from_secs(10));
    let c = parse(&["--shutdown-grace", "250"]).unwrap();
    assert_eq!(c.limits().shutdown_grace, Duration::from_millis(250));
    let c = parse(&["--shutdown-grace=0"]).unwrap();
    assert_eq!(c.limits().shutdown_grace, Duration::ZERO);
    assert!(parse(&["--shutdown-grace", "soon"]).is_err());
    assert!(config::USAGE.contains("--shutdown-grace"));
    assert!(config::USAGE.contains("SIGTERM"));
}

/// `GET path` on a connection of its own: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut response))
        .await
        .expect("hang: no answer")
        .unwrap();
    let text = String::from_utf8(response).unwrap();
    let status = text[9..12].parse().unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    (status, body.to_string())
}

/// The samples of a Prometheus text exposition: `name{labels}` to value.
fn samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// The value of sample `name` (0 when absent: counters not yet moved are
/// left out).
fn sample(text: &str, name: &str) -> f64 {
    samples(text).get(name).copied().unwrap_or(0.0)
}

/// The gateway binary in front of a [`Held`] upstream, with `extra`
/// options (`--timeout` far past any test's wait).
async fn behind_held(extra: &[&str]) -> (Held, GatewayChild) {
    let upstream = Held::start().await;
    let url = upstream.url();
    let mut args = vec!["--upstream", url.as_str(), "--timeout", "600000"];
    args.extend_from_slice(extra);
    let gw = GatewayChild::start(2, &args).await;
    (upstream, gw)
}

/// The operators' endpoint of a gateway started with `--metrics`, from the
/// line it says it on.
fn ops_addr(gw: &GatewayChild) -> SocketAddr {
    gw.log()
        .iter()
        .find_map(|l| l.strip_prefix("gateway metrics on http://"))
        .unwrap_or_else(|| panic!("no metrics line: {:?}", gw.log()))
        .split_once('/')
        .unwrap()
        .0
        .parse()
        .unwrap()
}

/// `--metrics ADDR` serves `/metrics` and `/health` on a port of their
/// own (the RPC port does not answer them), and stops with the rest.
#[tokio::test]
async fn the_binary_serves_metrics_and_health_on_a_port_of_its_own() {
    let mut gw = GatewayChild::start(2, &["--metrics", "127.0.0.1:0"]).await;
    let ops = ops_addr(&gw);
    assert_ne!(ops, gw.addr());
    let (status, body) = post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, text) = get(ops, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        sample(&text, r#"rpcwire_calls_total{method="eth_chainId"}"#),
        1.0,
        "{text}"
    );
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "ok", "{v}");
    // Not on the RPC port.
    let (status, body) = get(gw.addr(), "/metrics").await;
    assert_ne!(status, 200, "{body}");
    assert!(!body.contains("rpcwire_calls_total"), "{body}");
    let (status, _) = get(ops, "/nothing").await;
    assert_eq!(status, 404);

    gw.signal("TERM");
    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}");
}

/// While the gateway drains, its operators' endpoint stays up: `/health`
/// answers 503 saying it is draining and what is still in flight (a load
/// balancer takes it out of rotation on a clear answer), `/metrics` goes
/// on serving; the endpoint closes when the process exits. (It closed when
/// the drain started: probes were refused, the drain's counters could not
/// be scraped.)
#[tokio::test]
async fn metrics_and_health_stay_up_during_the_drain() {
    let (upstream, mut gw) = behind_held(&["--metrics", "127.0.0.1:0"]).await;
    let ops = ops_addr(&gw);
    let single = tokio::spawn(post(
        gw.addr(),
        r#"{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;

    gw.signal("TERM");
    until_refused(&gw).await;
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "draining", "{v}");
    assert_eq!(v["inFlight"], 1, "{v}");
    let (status, text) = get(ops, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    // The held call's connection, at least (those until_refused opened
    // may not all be closed yet).
    assert!(sample(&text, "rpcwire_connections_open") >= 1.0, "{text}");

    upstream.release();
    let (status, body) = within("the call", single).await.expect("answered");
    assert_eq!(status, 200, "{body}");
    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}");
    let refused = TcpStream::connect(ops).await;
    assert!(refused.is_err(), "the endpoint outlived the process");
}

/// A gateway in this process with `config` (`--metrics` on), and its
/// operators' endpoint on a port of its own.
async fn start_with_ops(config: config::Config) -> (Gateway, SocketAddr) {
    let config = config::Config {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..config
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    let ops = Arc::clone(app.ops().expect("--metrics builds the endpoint"));
    let ops_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ops_addr = ops_listener.local_addr().unwrap();
    tokio::spawn(ops::serve(ops_listener, ops, shutdown.clone()));
    tokio::spawn(app.run(listener, config.limits(), shutdown.clone()));
    (Gateway { addr, shutdown }, ops_addr)
}

/// An HTTP upstream answering by method: `eth_blockNumber` with a result,
/// `eth_getBalance` with an error object of its own, `eth_gasPrice`
/// never; one request per connection (closed after each reply, so that
/// stopping it leaves no kept-alive connection to answer). Aborting the
/// returned task stops it: connections are refused from then on.
async fn by_method() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut s, _)) = listener.accept().await {
            conns.spawn(async move {
                let Some(body) = read_request(&mut s).await else {
                    return;
                };
                let v: Value = serde_json::from_slice(&body).unwrap();
                let reply = match v["method"].as_str().unwrap() {
                    "eth_getBalance" => json!({"jsonrpc":"2.0","id":v["id"],"error":{"code":-32000,"message":"header not found"}}),
                    "eth_gasPrice" => {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                        return;
                    }
                    _ => json!({"jsonrpc":"2.0","id":v["id"],"result":"0x10"}),
                }
                .to_string();
                let out = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{reply}",
                    reply.len()
                );
                let _ = s.write_all(out.as_bytes()).await;
            });
        }
    });
    (addr, task)
}

/// Forwards of every outcome move their counters: calls per method,
/// replies per error code (the upstream's own error, the timeout, the
/// denial), the upstream's timeouts; an upstream's error object is no
/// failure of the upstream.
#[tokio::test]
async fn metrics_count_forwards_by_outcome() {
    let (upstream, _task) = by_method().await;
    let (gw, ops) = start_with_ops(config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let name = upstream.to_string();
    let (_, before) = get(ops, "/metrics").await;
    let addr = gw.addr;
    let rpc = |id: u64, method: &str| {
        let body = json!({"jsonrpc":"2.0","id":id,"method":method}).to_string();
        async move { post(addr, &body).await }
    };
    for id in 0..3 {
        let (_, body) = rpc(id, "eth_blockNumber").await.unwrap();
        assert!(body.contains("0x10"), "{body}");
    }
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}]"#;
    let (_, body) = post(gw.addr, batch).await.unwrap();
    assert_eq!(body.matches("0x10").count(), 2, "{body}");
    let (_, body) = rpc(4, "eth_getBalance").await.unwrap();
    assert!(body.contains("-32000"), "{body}");
    let (_, body) = rpc(5, "eth_gasPrice").await.unwrap();
    assert!(body.contains("-32002"), "{body}");
    let (_, body) = rpc(6, "admin_addPeer").await.unwrap();
    assert!(body.contains("-32601"), "{body}");
    let (_, body) = rpc(7, "vendor_custom").await.unwrap();
    assert!(body.contains("0x10"), "{body}");

    let (status, text) = get(ops, "/metrics").await;
    assert_eq!(status, 200);
    let n = |name: &str| sample(&text, name) - sample(&before, name);
    assert_eq!(
        n(r#"rpcwire_calls_total{method="eth_blockNumber"}"#),
        5.0,
        "{text}"
    );
    assert_eq!(
        n(r#"rpcwire_calls_total{method="eth_getBalance"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(
        n(r#"rpcwire_calls_total{method="eth_gasPrice"}"#),
        1.0,
        "{text}"
    );
    // Answered by the fallback (forwarded, or denied by its rule): a
    // client's name, not a label.
    assert_eq!(n(r#"rpcwire_calls_total{method="(other)"}"#), 2.0, "{text}");
    assert!(!text.contains("vendor_custom"), "{text}");
    assert!(!text.contains("admin_addPeer"), "{text}");
    assert_eq!(n(r#"rpcwire_errors_total{code="-32000"}"#), 1.0, "{text}");
    assert_eq!(n(r#"rpcwire_errors_total{code="-32002"}"#), 1.0, "{text}");
    assert_eq!(n(r#"rpcwire_errors_total{code="-32601"}"#), 1.0, "{text}");
    let failures = |kind: &str| {
        n(&format!(
            r#"gateway_upstream_failures_total{{upstream="{name}",kind="{kind}"}}"#
        ))
    };
    assert_eq!(failures("timeout"), 1.0, "{text}");
    assert_eq!(failures("connect"), 0.0, "{text}");
    assert_eq!(failures("exchange"), 0.0, "{text}");
    assert_eq!(failures("malformed"), 0.0, "{text}");
    // The timeout rests it.
    assert_eq!(
        sample(
            &text,
            &format!(r#"gateway_upstream_up{{upstream="{name}"}}"#)
        ),
        0.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "gateway_subscriptions_relayed"),
        0.0,
        "{text}"
    );
    assert!(text.contains("rpcwire_connections_open "), "{text}");
}

/// A gateway in front of `upstreams`: its `/metrics` text after one
/// `eth_blockNumber` forwarded (answered `0x10`).
async fn metrics_after_one_call(upstreams: Vec<String>) -> String {
    let (body, text) = answer_and_metrics(config::Config {
        upstreams,
        ..Default::default()
    })
    .await;
    assert!(body.contains("0x10"), "{body}");
    text
}

/// A gateway with `config` (a 10 s timeout): the answer to one
/// `eth_blockNumber`, and its `/metrics` text after.
async fn answer_and_metrics(config: config::Config) -> (String, String) {
    let (gw, ops) = start_with_ops(config::Config {
        timeout: Duration::from_secs(10),
        ..config
    })
    .await;
    let (_, body) = post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    )
    .await
    .unwrap();
    (body, get(ops, "/metrics").await.1)
}

/// A call that fails over counts a connection failure for the upstream
/// it left and a failover for the one that took it.
#[tokio::test]
async fn metrics_count_failovers() {
    let refusing = refusing::refusing();
    let dead = refusing.addr;
    let (live, _task) = by_method().await;
    let text =
        metrics_after_one_call(vec![format!("http://{dead}"), format!("http://{live}")]).await;
    let at = |family: &str, up: SocketAddr, extra: &str| {
        sample(&text, &format!(r#"{family}{{upstream="{up}"{extra}}}"#))
    };
    assert_eq!(
        at(
            "gateway_upstream_failures_total",
            dead,
            r#",kind="connect""#
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        at("gateway_upstream_failovers_total", live, ""),
        1.0,
        "{text}"
    );
    assert_eq!(
        at("gateway_upstream_failovers_total", dead, ""),
        0.0,
        "{text}"
    );
    assert_eq!(at("gateway_upstream_up", dead, ""), 0.0, "{text}");
    assert_eq!(at("gateway_upstream_up", live, ""), 1.0, "{text}");
}

/// A WebSocket upstream alone (`--upstream-ws`, no HTTP one) that takes
/// no connection: the call fails, counted as a connection failure (it was
/// counted as a failed exchange, as if the request may have been sent).
#[tokio::test]
async fn metrics_count_a_websocket_upstream_that_takes_no_connection_as_connect() {
    let refusing = refusing::refusing();
    let dead = refusing.addr;
    let (body, text) = answer_and_metrics(config::Config {
        upstream_ws: Some(format!("ws://{dead}")),
        ..Default::default()
    })
    .await;
    assert!(body.contains("WebSocket connection failed"), "{body}");
    let failures = |kind: &str| {
        sample(
            &text,
            &format!(r#"gateway_upstream_failures_total{{upstream="{dead}",kind="{kind}"}}"#),
        )
    };
    assert_eq!(failures("connect"), 1.0, "{text}");
    assert_eq!(failures("exchange"), 0.0, "{text}");
}

/// `/health` behind a first upstream that takes no connection, with a
/// connect deadline past the probe's 5 s: the probe gave up before the
/// forward failed over to the live second upstream (503 for a gateway
/// that serves). It now waits for the connect deadline and a second more.
#[tokio::test]
async fn health_waits_out_a_long_connect_deadline_to_fail_over() {
    let silent = refusing::silent();
    let (live, _task) = by_method().await;
    let (_gw, ops) = start_with_ops(config::Config {
        upstreams: vec![format!("http://{}", silent.addr), format!("http://{live}")],
        timeout: Duration::from_secs(20),
        connect_timeout: Some(Duration::from_millis(5_500)),
        ..Default::default()
    })
    .await;
    let (status, body) = tokio::time::timeout(HANG, get(ops, "/health"))
        .await
        .expect("/health answered");
    assert_eq!(status, 200, "{body}");
}

/// Upstreams that share a `host:port` (one node over HTTP and WebSocket,
/// two routes of one proxy) are told apart in `/metrics` and `/health`:
/// each series had the label `upstream="host:port"` twice, which
/// Prometheus refuses as duplicate samples. By scheme and place, never by
/// path: a provider's path holds the API key, and the names are in the
/// errors clients get (found by a review).
#[tokio::test]
async fn upstreams_on_one_address_get_distinct_names() {
    let names = |urls: &[&str]| {
        let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        upstream::distinct_names(&urls)
    };
    assert_eq!(
        names(&["http://a:1", "http://b:1/x", "ws://user:pw@c:2/"]),
        ["a:1", "b:1", "c:2"]
    );
    assert_eq!(
        names(&["http://n:8545", "ws://n:8545", "http://m:1"]),
        ["http://n:8545", "ws://n:8545", "m:1"]
    );
    // Never the path (a provider's API key) or user info: places instead.
    assert_eq!(
        names(&[
            "http://u:p@n:1/v3/KEY?key=1",
            "http://n:1/b",
            "ws://n:1/KEY2"
        ]),
        ["http://n:1 #1", "http://n:1 #2", "ws://n:1"]
    );
    assert_eq!(
        names(&["http://n:1", "http://n:1"]),
        ["http://n:1 #1", "http://n:1 #2"]
    );

    let (live, _task) = by_method().await;
    let text =
        metrics_after_one_call(vec![format!("http://{live}/a"), format!("http://{live}/b")]).await;
    for place in [1, 2] {
        let series = format!(r#"gateway_upstream_up{{upstream="http://{live} #{place}"}}"#);
        assert_eq!(sample(&text, &series), 1.0, "{text}");
    }
    assert!(!text.contains("/a") && !text.contains("/b"), "{text}");
    let ups = text
        .lines()
        .filter(|l| l.starts_with("gateway_upstream_up{"))
        .count();
    assert_eq!(ups, 2, "{text}");
}

/// `/health` is 200 while the only upstream answers and 503, saying why,
/// once it is gone (as soon as the upstream's state, kept a second, is
/// found again); the built-in chain is always healthy.
#[tokio::test]
async fn health_follows_the_upstream() {
    let (upstream, task) = by_method().await;
    let (_gw, ops) = start_with_ops(config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .await;
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["upstreams"][0]["upstream"], upstream.to_string(), "{v}");

    task.abort();
    let _ = task.await;
    let body = tokio::time::timeout(HANG, async {
        loop {
            let (status, body) = get(ops, "/health").await;
            if status == 503 {
                return body;
            }
            assert_eq!(status, 200, "{body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("hang: /health stayed 200 with its upstream gone");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "unavailable", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains(&upstream.to_string()) && reason.contains("connection"),
        "{v}"
    );
    assert_eq!(v["upstreams"][0]["healthy"], false, "{v}");

    let (_chain, ops) = start_with_ops(config::Config::default()).await;
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("built-in chain"), "{body}");
    let (status, _) = post_to(ops, "/health").await;
    assert_eq!(status, 405);
}

/// The operations port lets idle connections go within seconds (a
/// connection that sends nothing, one kept alive after its request): with
/// the RPC port's waits (120 s idle, 30 s for a head) and 64 places,
/// anything that reached the port could hold every place and lock the
/// load balancer's health checks out for minutes (found by a review).
#[tokio::test]
async fn the_operations_port_lets_idle_connections_go() {
    let (_chain, ops) = start_with_ops(config::Config::default()).await;
    let silent = TcpStream::connect(ops).await.unwrap();
    let mut kept = TcpStream::connect(ops).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let closed = |mut s: TcpStream| async move {
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got))
            .await
            .expect("closed within seconds")
            .ok();
        got
    };
    let (nothing, answered) = tokio::join!(closed(silent), closed(kept));
    assert!(nothing.is_empty());
    assert!(answered.starts_with(b"HTTP/1.1 200"), "{answered:?}");
    // The port still answers.
    let (status, _) = get(ops, "/health").await;
    assert_eq!(status, 200);
    // And takes 256 at once: past 150 silent ones (accepted first, as
    // they came), a health check is answered (at 64 places it was closed
    // unanswered until the idle ones went).
    let mut held = Vec::new();
    for _ in 0..150 {
        held.push(TcpStream::connect(ops).await.unwrap());
    }
    let (status, _) = get(ops, "/health").await;
    assert_eq!(status, 200);
    drop(held);
}

/// An upstream that answers every call with an error object (a rate
/// limiter's `429`, an expired key's `401`: `"id": null`) answers nothing:
/// `/health` is 503, saying so. Error objects counted as answers, so such a
/// gateway stayed healthy while it could serve no call (found by a review).
#[tokio::test]
async fn health_is_503_while_the_upstream_answers_only_errors() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while crate::http_request::read_request_buffered(&mut s, &mut buf)
                    .await
                    .is_some()
                {
                    let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"rate limit exceeded"}}"#;
                    let reply = format!(
                        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (gw, ops) = start_with_ops(config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .await;
    // Calls get the upstream's error, as it is.
    let (status, body) = crate::http_request::post_close(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("-32005"), "{body}");
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("rate limit exceeded"),
        "{v}"
    );
}

/// An HTTP upstream that counts the connections it accepts and the
/// requests it reads; answers each (`"0x10"`) when `answers`, else closes
/// the connection on it unanswered (an upstream failing every exchange).
async fn counting(answers: bool) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, r) = (Arc::clone(&accepted), Arc::clone(&requests));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let r = Arc::clone(&r);
            tokio::spawn(async move {
                while let Some(body) = read_request(&mut s).await {
                    r.fetch_add(1, Ordering::SeqCst);
                    if !answers {
                        return;
                    }
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":"0x10"}).to_string();
                    let out = json_200(&reply);
                    if s.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted, requests)
}

/// `n` probes of `/health` one after another, then `n` at once; each
/// status is `expected`.
async fn probes(ops: SocketAddr, n: usize, expected: u16) {
    for _ in 0..n {
        let (status, body) = get(ops, "/health").await;
        assert_eq!(status, expected, "{body}");
    }
    let burst: Vec<_> = (0..n).map(|_| tokio::spawn(get(ops, "/health"))).collect();
    for probe in burst {
        let (status, body) = within("a probe", probe).await;
        assert_eq!(status, expected, "{body}");
    }
}

/// A burst of `/health` probes costs the upstream at most one request a
/// second, whether it answers or fails: the upstream's state is kept for
/// a second, and probes that come while one asks wait for its answer.
/// (Each probe forwarded an `eth_chainId`: 40 probes, 40 requests, a
/// load balancer's probes multiplied onto the node.) The bound counts the
/// seconds the test took, so a slow machine loosens it instead of failing.
#[tokio::test]
async fn health_probes_cost_the_upstream_at_most_one_request_a_second() {
    // An upstream that answers (its requests counted), then one that
    // fails (its connections counted), probes answered 200 and 503.
    for (answers, status, counted) in [(true, 200, "requests"), (false, 503, "connections")] {
        let (upstream, accepted, requests) = counting(answers).await;
        let (_gw, ops) = start_with_ops(config::Config {
            upstreams: vec![format!("http://{upstream}")],
            timeout: Duration::from_secs(10),
            ..Default::default()
        })
        .await;
        let started = std::time::Instant::now();
        probes(ops, 20, status).await;
        let bound = 1 + started.elapsed().as_secs() as usize;
        let n = if answers { &requests } else { &accepted }.load(Ordering::SeqCst);
        assert!(
            n <= bound,
            "{n} upstream {counted} for 40 probes (at most {bound})"
        );
    }
}

/// A forward the upstream just answered is the probe's answer: `/health`
/// right after it asks the upstream nothing.
#[tokio::test]
async fn health_reuses_what_forwards_learned() {
    let (upstream, _, requests) = counting(true).await;
    let (gw, ops) = start_with_ops(config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .await;
    let started = std::time::Instant::now();
    let (_, body) = post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    )
    .await
    .unwrap();
    assert!(body.contains("0x10"), "{body}");
    let (status, body) = get(ops, "/health").await;
    assert_eq!(status, 200, "{body}");
    // The forward, and a probe only if a second passed since it.
    let bound = 1 + started.elapsed().as_secs() as usize;
    let n = requests.load(Ordering::SeqCst);
    assert!(n <= bound, "{n} upstream requests (at most {bound})");
}

/// `POST path` with an empty body: the status.
async fn post_to(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8(response).unwrap();
    (text[9..12].parse().unwrap(), text)
}

/// Without `--metrics` nothing is counted (no observer on the dispatcher).
#[tokio::test]
async fn no_metrics_without_the_option() {
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config::Config::default(), &shutdown).unwrap();
    assert!(app.ops().is_none());
    let c = config::Config::from_args(
        ["--metrics".to_string(), "127.0.0.1:9545".to_string()].into_iter(),
    )
    .unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9545".parse().unwrap()));
    assert!(
        config::Config::from_args(["--metrics".to_string(), "nope".to_string()].into_iter())
            .is_err()
    );
}

// ---------------------------------------------------------------------------
// Workers sharing an upstream connection.

/// A WebSocket upstream: `eth_chainId` answered at once (`"0x1"`),
/// `eth_blockNumber` held (counted in `held`) until `release` says so,
/// then answered `"0x2a"`.
async fn held_ws_upstream() -> (
    SocketAddr,
    tokio::sync::watch::Sender<bool>,
    Arc<AtomicUsize>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = tokio::sync::watch::channel(false);
    let held = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&held);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (released, count) = (released.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(s).await else {
                    return;
                };
                let (mut write, mut read) = ws.split();
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        if write.send(Message::text(m)).await.is_err() {
                            return;
                        }
                    }
                });
                while let Some(Ok(m)) = read.next().await {
                    let Message::Text(t) = m else { continue };
                    let v: Value = serde_json::from_str(&t).unwrap();
                    let (id, tx) = (v["id"].clone(), tx.clone());
                    if v["method"] == "eth_blockNumber" {
                        count.fetch_add(1, Ordering::SeqCst);
                        let mut released = released.clone();
                        tokio::spawn(async move {
                            let _ = released.wait_for(|r| *r).await;
                            let _ = tx
                                .send(json!({"jsonrpc":"2.0","id":id,"result":"0x2a"}).to_string());
                        });
                    } else {
                        let _ =
                            tx.send(json!({"jsonrpc":"2.0","id":id,"result":"0x1"}).to_string());
                    }
                }
            });
        }
    });
    (addr, release, held)
}

/// A call in flight at SIGTERM over the `ws://` upstream is answered when
/// the upstream answers within the grace, whichever worker holds it. The
/// upstream's one shared WebSocket connection is made on the runtime of
/// the worker whose client called first; that worker, with nothing left
/// to drain, ended its runtime at once and the connection's reader and
/// writer with it: a call of another worker (here the `--ipc` client's,
/// on the main runtime) waited for a reply nothing read, past the grace,
/// and the gateway exited 3 with the call unanswered (found by a review;
/// every runtime now stays up until all have drained, `AllDrained`).
/// Which worker the first client lands on is the kernel's choice
/// (SO_REUSEPORT), so this tries a few gateways.
#[tokio::test]
async fn a_drain_answers_calls_over_a_ws_upstream_connection_another_worker_made() {
    use tokio::io::AsyncBufReadExt;
    let dir = std::env::temp_dir().join(format!("rpcwire-gateway-drain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut failed = Vec::new();
    for round in 0..6 {
        let (up, release, held) = held_ws_upstream().await;
        let path = dir.join(format!("gw{round}.ipc"));
        let upstream = format!("ws://{up}");
        let mut gw = GatewayChild::start(
            2,
            &[
                "--upstream",
                &upstream,
                "--ipc",
                path.to_str().unwrap(),
                "--shutdown-grace",
                "3000",
            ],
        )
        .await;
        // The upstream connection, made by the worker that takes this
        // client.
        let (status, body) = post(
            gw.addr(),
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
        )
        .await
        .expect("answered");
        assert_eq!((status, body.contains("0x1")), (200, true), "{body}");
        // A call held upstream from the IPC socket (the main runtime's).
        let ipc = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = ipc.into_split();
        write
            .write_all(br#"{"jsonrpc":"2.0","id":7,"method":"eth_blockNumber"}"#)
            .await
            .unwrap();
        tokio::time::timeout(HANG, async {
            while held.load(Ordering::SeqCst) < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hang: the call did not reach the upstream");
        gw.signal("TERM");
        until_refused(&gw).await;
        // The idle worker has ended by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        release.send_replace(true);
        let mut lines = tokio::io::BufReader::new(read).lines();
        let line = tokio::time::timeout(HANG, lines.next_line())
            .await
            .expect("hang: the IPC call");
        let status = gw.exit_status().await;
        let answered = matches!(&line, Ok(Some(l)) if l.contains("0x2a"));
        if !answered || status.code() != Some(0) {
            failed.push(format!(
                "round {round}: reply {line:?}, {status}, {:?}",
                gw.final_log().await
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The gateway binary with `args`: its exit status (`None` if it still
/// served after `wait`: then killed), standard output and error.
fn run_binary(args: &[&str], wait: Duration) -> (Option<i32>, String, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(crate::example_binary::example_binary("gateway", "gateway"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if start.elapsed() > wait {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (status, text(out.stdout), text(out.stderr))
}

/// Output that cannot be written ends in an exit status, not a panic:
/// `--help` into a full device (`println!` panicked, status 101, a
/// backtrace), and a usage error with standard error closed. Found by an
/// operator's trial.
#[cfg(target_os = "linux")]
#[test]
fn unwritable_output_is_no_panic() {
    use std::process::{Command, Stdio};
    let gateway = crate::example_binary::example_binary("gateway", "gateway");
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let out = Command::new(&gateway)
        .arg("--help")
        .stdout(full())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let status = Command::new(&gateway)
        .arg("--no-such-option")
        .stdout(Stdio::null())
        .stderr(full())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}

/// A command line the gateway cannot serve exits with status 2 and says
/// why: an upstream URL without a host or with a port out of range (the
/// first failed the start with status 1, the second started and failed
/// every call), the built-in chain's options beside `--upstream` (taken
/// without a word, they changed nothing), an empty `--deny` prefix (it
/// denied every method). Found by a review.
#[test]
fn a_command_line_it_cannot_serve_is_refused() {
    let parse = |args: &[&str]| config::Config::from_args(args.iter().map(|a| a.to_string()));
    let up = ["--upstream", "http://127.0.0.1:8545"];
    for (args, says) in [
        (&["--upstream", "http://"][..], "--upstream http://"),
        (&["--upstream", "http://127.0.0.1:99999"][..], "99999"),
        (&["--upstream", "ws://[::1]:70000"][..], "70000"),
        (
            &[up[0], up[1], "--upstream-ws", "ws://"][..],
            "--upstream-ws",
        ),
        (
            &[up[0], up[1], "--archive", "http://:8545"][..],
            "--archive",
        ),
        (&[up[0], up[1], "--chain-id", "1"][..], "--chain-id"),
        (&[up[0], up[1], "--block-time", "2"][..], "--block-time"),
        (
            &["--upstream-ws", "ws://h:1", "--chain-tx-bytes", "9"][..],
            "--chain-tx-bytes",
        ),
        (&["--deny", ""][..], "--deny"),
        // User info: refused by the clients when the first request was
        // sent, after the start (status 1, the option unnamed).
        (&["--upstream", "http://u:p@127.0.0.1:1"][..], "--upstream"),
        (
            &[up[0], up[1], "--upstream-ws", "ws://u@h:1"][..],
            "--upstream-ws",
        ),
        // A count that aborted the process (an allocation of terabytes).
        (&["--threads", "100000000000"][..], "--threads"),
        (&["--threads", "1025"][..], "--threads"),
        // A 0 that was quietly raised to 1: said, as for the limits.
        (&["--threads", "0"][..], "--threads: at least 1, not 0"),
        (&["--timeout", "0"][..], "--timeout: at least 1, not 0"),
        (
            &["--connect-timeout", "0"][..],
            "--connect-timeout: at least 1",
        ),
        (&["--block-time", "0"][..], "--block-time: at least 1"),
        (&["--max-body", "0"][..], "--max-body: at least 1"),
        (
            &["--upstream-connections", "0"][..],
            "--upstream-connections: at least 1",
        ),
        (
            &["--upstream-connections", "1048577"][..],
            "at most 1048576",
        ),
    ] {
        let refused = parse(args).expect_err(&format!("{args:?} taken"));
        assert!(refused.contains(says), "{args:?}: {refused}");
    }
    for args in [
        &["--upstream", "http://[::1]:8545"][..],
        &["--upstream", "http://node.example:8545/path?k=1"][..],
        &["--chain-id", "1", "--block-time", "2"][..],
    ] {
        assert!(parse(args).is_ok(), "{args:?}");
    }
    for args in [
        &["--upstream", "http://"][..],
        &["--upstream", "http://u:p@127.0.0.1:1"][..],
        &["--threads", "18446744073709551615"][..],
    ] {
        let (status, _, stderr) = run_binary(args, HANG);
        assert_eq!(status, Some(2), "{args:?}: {stderr}");
    }
}

/// A worker whose runtime cannot be built (file descriptors run out)
/// fails the start (status 1, naming `--threads`); it panicked on its own
/// thread, the gateway said it listened with all its workers, and a stop
/// then waited for the dead one for ever. Found by a review.
#[cfg(unix)]
#[tokio::test]
async fn a_worker_that_cannot_start_fails_the_start_and_never_hangs_a_stop() {
    use std::os::unix::process::CommandExt;
    use tokio::io::AsyncBufReadExt;
    let binary = crate::example_binary::example_binary("gateway", "gateway");
    let mut refused = 0;
    for limit in (14..=30).step_by(2) {
        let mut cmd = tokio::process::Command::new(&binary);
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--threads",
            "4",
            "--shutdown-grace",
            "200",
        ])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
        // SAFETY: between fork and exec only `setrlimit` runs, which is
        // async-signal-safe, on a value of this stack.
        unsafe {
            cmd.as_std_mut().pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = Vec::new();
        let listening = tokio::time::timeout(HANG, async {
            while let Ok(Some(line)) = lines.next_line().await {
                let up = line.starts_with("gateway listening");
                log.push(line);
                if up {
                    return true;
                }
            }
            false
        })
        .await
        .expect("hang: neither listening nor refused");
        if !listening {
            let status = tokio::time::timeout(HANG, child.wait())
                .await
                .expect("hang")
                .unwrap();
            assert_eq!(status.code(), Some(1), "limit {limit}: {log:?}");
            if log.iter().any(|l| l.contains("--threads")) {
                refused += 1;
            }
            continue;
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let pid = child.id().unwrap();
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        let exited = tokio::time::timeout(HANG, child.wait()).await;
        assert!(
            exited.is_ok(),
            "limit {limit}: still running after SIGTERM (grace 200 ms): {log:?}"
        );
    }
    // Some limit let the main runtime start and not every worker.
    assert!(refused > 0, "no limit tried failed at the workers");
}

/// `--help` prints the usage on standard output (`--help | less` showed
/// nothing) and exits 0; a port that cannot be bound is named by its
/// option (`--listen` and `--metrics` failed alike with the OS's words
/// alone). Found by a review.
#[test]
fn help_goes_to_stdout_and_a_busy_port_is_named() {
    let (status, stdout, _) = run_binary(&["--help"], HANG);
    assert_eq!(status, Some(0));
    assert!(stdout.contains("--listen"), "stdout: {stdout:?}");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = busy.local_addr().unwrap().to_string();
    for (args, names) in [
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--threads",
                "1",
                "--metrics",
                &at,
            ],
            "--metrics",
        ),
        (vec!["--listen", &at, "--threads", "1"], "--listen"),
    ] {
        let (status, _, stderr) = run_binary(&args, HANG);
        assert_eq!(status, Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{names} {at}")),
            "which port? {stderr}"
        );
    }
}
