//! The `Host` allowlist (`HttpService::allowed_hosts`, the defence against
//! DNS rebinding): requests for listed hosts served, with any port and in
//! any case, IPv6 literals too; others refused `403` before their body is
//! read and counted; HTTP/1.1 without one `Host` refused `400`; `*` checks
//! nothing. On rpcwire's own HTTP/1.1 loop and on hyper's path, over
//! HTTP/2, for WebSocket upgrades on the port serving both, and for the
//! opening handshakes of a WebSocket server on a port of its own
//! (`WsServer::allowed_hosts`). Raw HTTP over 127.0.0.1; deadlines only
//! detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rpcwire::server::combined::Combined;
use rpcwire::server::hosts::AllowedHosts;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{LimitKind, Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http_replies::{exchange, h2_client, one};

const HANG: Duration = Duration::from_secs(10);
const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"count"}"#;

struct TestServer {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// HTTP and WebSocket on one port, the HTTP service given `hosts`, on
/// rpcwire's own HTTP/1.1 loop or on hyper's path alone.
async fn start(hosts: &[&str], own_http1: bool) -> TestServer {
    start_with(Some(AllowedHosts::list(hosts).unwrap()), own_http1).await
}

/// `raw`, a request for `localhost`, with its `Host` line twice.
fn two_hosts(raw: &str) -> String {
    raw.replace(
        "host: localhost\r\n",
        "host: localhost\r\nhost: localhost\r\n",
    )
}

/// The answer to an HTTP/1.1 request without one `Host` (`status` line,
/// `body`): `400` with the -32600 body saying why; `context` names the case.
fn assert_needs_one_host(status: &str, body: &str, context: &str) {
    assert_eq!(status, "400 Bad Request", "{context}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], -32600, "{context}: {v}");
    assert_eq!(
        v["error"]["data"]["reason"],
        "an HTTP/1.1 request needs exactly one Host header, with a valid host",
        "{context}: {v}"
    );
}

/// A dispatcher whose `count` answers how many calls `calls` has seen.
fn counting(calls: &Arc<AtomicUsize>) -> Dispatcher<Arc<AtomicUsize>> {
    Dispatcher::builder(Arc::clone(calls))
        .method("count", |call: Call<'_, Arc<AtomicUsize>>| {
            let n = call.state.fetch_add(1, Ordering::SeqCst) + 1;
            call.reply.u64(n as u64)
        })
        .build()
        .unwrap()
}

/// [`start`], the HTTP service given `hosts` when there are some, else
/// left as built (no allowlist).
async fn start_with(hosts: Option<AllowedHosts>, own_http1: bool) -> TestServer {
    let calls = Arc::new(AtomicUsize::new(0));
    let d = counting(&calls);
    let limits = Limits::default();
    let metrics = Arc::new(Metrics::default());
    let mut http = HttpService::new(d.clone(), &limits, Some(Arc::clone(&metrics)));
    if let Some(hosts) = hosts {
        http = http.allowed_hosts(hosts);
    }
    let shutdown = Shutdown::new();
    let ws = WsServer::new(d).shutdown(shutdown.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(limits).own_http1(own_http1);
    tokio::spawn(server.serve(listener, Combined::new(http, ws), shutdown.clone()));
    TestServer {
        addr,
        calls,
        metrics,
        shutdown,
    }
}

/// Whether the server closes `stream` (its end of stream, or a reset,
/// read within the hang guard).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(HANG, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn post(host: Option<&str>) -> String {
    let host = host.map_or(String::new(), |h| format!("host: {h}\r\n"));
    format!(
        "POST / HTTP/1.1\r\n{host}content-type: application/json\r\ncontent-length: {}\r\n\r\n{CALL}",
        CALL.len()
    )
}

/// Only the name: addresses need no listing.
const LOCAL: [&str; 1] = ["localhost"];

#[tokio::test]
async fn listed_hosts_are_served_with_any_port_and_case() {
    for own in [true, false] {
        let server = start(&LOCAL, own).await;
        let port = server.addr.port();
        let hosts = [
            "localhost".to_string(),
            format!("localhost:{port}"),
            "LocalHost:8545".to_string(),
            format!("127.0.0.1:{port}"),
            "[::1]".to_string(),
            "[::1]:8545".to_string(),
            "[0:0::1]:8545".to_string(),
            // Addresses, not listed: a rebound page sends a name.
            "192.0.2.7:8545".to_string(),
            "[2001:db8::7]".to_string(),
        ];
        // One after another on one connection: each served, none closes it.
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        for host in &hosts {
            let r = exchange(&mut stream, post(Some(host)).as_bytes(), 1).await;
            assert_eq!(r[0].0, "200 OK", "own loop {own}, {host}: {r:?}");
        }
        assert_eq!(server.calls.load(Ordering::SeqCst), hosts.len());
        assert_eq!(server.metrics.limit_count(LimitKind::Host), 0);
    }
}

#[tokio::test]
async fn other_hosts_are_refused_before_their_body_is_read() {
    for own in [true, false] {
        let server = start(&LOCAL, own).await;
        for host in [
            "attacker.example",
            "attacker.example:8545",
            "localhost.attacker.example",
            "127.1",
            "",
        ] {
            let r = one(server.addr, &post(Some(host))).await;
            assert_eq!(r.0, "403 Forbidden", "own loop {own}, {host}: {r:?}");
            let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
            assert_eq!(v["error"]["code"], -32600, "{v}");
            assert_eq!(v["error"]["data"]["reason"], "host not allowed", "{v}");
            assert_eq!(v["error"]["data"]["host"], host, "{v}");
        }
        // A head announcing 5 MiB (within the size limit) and no body:
        // answered at once, the connection closed.
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let head = "POST / HTTP/1.1\r\nhost: attacker.example\r\ncontent-type: application/json\r\n\
                    content-length: 5242880\r\n\r\n";
        let r = exchange(&mut stream, head.as_bytes(), 1).await;
        assert_eq!(r[0].0, "403 Forbidden", "own loop {own}: {r:?}");
        assert!(closed(&mut stream).await, "own loop {own}");
        // After a served request on the same connection (the own loop
        // hands the connection over for it).
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let raw = format!("{}{}", post(Some("localhost")), post(Some("evil.example")));
        let r = exchange(&mut stream, raw.as_bytes(), 2).await;
        assert_eq!(r[0].0, "200 OK", "own loop {own}: {r:?}");
        assert_eq!(r[1].0, "403 Forbidden", "own loop {own}: {r:?}");
        assert!(closed(&mut stream).await, "own loop {own}");
        assert_eq!(server.calls.load(Ordering::SeqCst), 1, "own loop {own}");
        assert_eq!(server.metrics.limit_count(LimitKind::Host), 7);
    }
}

/// RFC 9112 §3.2: an HTTP/1.1 request without `Host`, or with two, is
/// answered 400. HTTP/1.0 needs none (no browser sends one without).
#[tokio::test]
async fn http11_without_one_host_is_a_bad_request() {
    for own in [true, false] {
        let server = start(&LOCAL, own).await;
        let r = one(server.addr, &post(None)).await;
        assert_eq!(r.0, "400 Bad Request", "own loop {own}: {r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
        assert_eq!(v["error"]["code"], -32600, "{v}");
        let two = two_hosts(&post(Some("localhost")));
        let r = one(server.addr, &two).await;
        assert_eq!(r.0, "400 Bad Request", "own loop {own}: {r:?}");
        let old = post(None).replace("HTTP/1.1", "HTTP/1.0");
        let r = one(server.addr, &old).await;
        assert_eq!(r.0, "200 OK", "own loop {own}: {r:?}");
        assert_eq!(server.calls.load(Ordering::SeqCst), 1);
        assert_eq!(server.metrics.limit_count(LimitKind::Host), 2);
    }
}

/// RFC 9112 §3.2 binds every server, not only one with an allowlist: an
/// HTTP/1.1 request without `Host`, or with two, is answered 400 (as Go's
/// net/http, geth's server, does), on the own loop, on hyper's path (a
/// chunked body, which the own loop hands over), after a request served
/// on the same connection, and for a WebSocket upgrade on the same port;
/// a `Host` whose value is not a host (`a b`) counts as none. HTTP/1.0
/// needs none; names are not checked.
#[tokio::test]
async fn without_an_allowlist_http11_still_needs_one_host() {
    for own in [true, false] {
        let server = start_with(None, own).await;
        let two = two_hosts(&post(Some("localhost")));
        let chunked = format!(
            "POST / HTTP/1.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
             {:x}\r\n{CALL}\r\n0\r\n\r\n",
            CALL.len()
        );
        // A `Host` whose value is not a host counts as none.
        let (spaced, listed) = (post(Some("a b")), post(Some("x, y")));
        for raw in [post(None), two, chunked, spaced, listed] {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            let r = exchange(&mut stream, raw.as_bytes(), 1).await;
            assert_needs_one_host(&r[0].0, &r[0].2, &format!("own loop {own}, {raw:?}: {r:?}"));
            assert!(closed(&mut stream).await, "own loop {own}, {raw:?}");
        }
        // Served first (by the own loop, when on), then refused.
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let raw = format!("{}{}", post(Some("localhost")), post(None));
        let r = exchange(&mut stream, raw.as_bytes(), 2).await;
        assert_eq!(r[0].0, "200 OK", "own loop {own}: {r:?}");
        assert_eq!(r[1].0, "400 Bad Request", "own loop {own}: {r:?}");
        assert!(closed(&mut stream).await, "own loop {own}");
        // HTTP/1.0 without `Host`, and any name: served.
        let old = post(None).replace("HTTP/1.1", "HTTP/1.0");
        let r = one(server.addr, &old).await;
        assert_eq!(r.0, "200 OK", "own loop {own}: {r:?}");
        let r = one(server.addr, &post(Some("attacker.example"))).await;
        assert_eq!(r.0, "200 OK", "own loop {own}: {r:?}");
        // But HTTP/1.0 with two, or an invalid one: 400 too (the RFC's
        // "any request message"; Go's net/http alike).
        let two = two_hosts(&post(Some("localhost")));
        for raw in [two, post(Some("a b")), post(Some("x, y"))] {
            let raw = raw.replace("HTTP/1.1", "HTTP/1.0");
            let r = one(server.addr, &raw).await;
            assert_eq!(r.0, "400 Bad Request", "own loop {own}, {raw:?}: {r:?}");
        }
        // A WebSocket upgrade without one `Host`.
        let none = upgrade("").replace("host: \r\n", "");
        let two = two_hosts(&upgrade("localhost"));
        for raw in [none, two] {
            let r = one(server.addr, &raw).await;
            assert_eq!(r.0, "400 Bad Request", "own loop {own}, {raw:?}: {r:?}");
            assert!(r.2.contains("exactly one Host"), "{r:?}");
        }
        assert_eq!(
            &upgrade_status(server.addr, "localhost").await,
            b"HTTP/1.1 101"
        );
        assert_eq!(server.calls.load(Ordering::SeqCst), 3, "own loop {own}");
        assert_eq!(
            server.metrics.limit_count(LimitKind::Host),
            11,
            "own loop {own}"
        );
    }
}

#[tokio::test]
async fn a_star_allows_any_host() {
    for own in [true, false] {
        let server = start(&["localhost", "*"], own).await;
        for host in ["attacker.example:1", "localhost"] {
            let r = one(server.addr, &post(Some(host))).await;
            assert_eq!(r.0, "200 OK", "own loop {own}, {host:?}: {r:?}");
        }
        assert_eq!(server.metrics.limit_count(LimitKind::Host), 0);
        // No list, but still a server: HTTP/1.1 needs one `Host`.
        let r = one(server.addr, &post(None)).await;
        assert_eq!(r.0, "400 Bad Request", "own loop {own}: {r:?}");
    }
}

/// HTTP/2 names the host in `:authority`.
#[tokio::test]
async fn http2_authorities_are_checked() {
    use http_body_util::{BodyExt, Full};
    let server = start(&LOCAL, true).await;
    let mut sender = h2_client(server.addr).await;
    let post = |uri: &str| {
        http::Request::post(uri)
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from_static(CALL.as_bytes())))
            .unwrap()
    };
    for uri in [
        "http://localhost/",
        "http://LOCALHOST:8545/",
        "http://[::1]:8545/",
    ] {
        let r = sender.send_request(post(uri)).await.unwrap();
        assert_eq!(r.status(), 200, "{uri}");
    }
    let r = sender
        .send_request(post("http://attacker.example:8545/"))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["data"]["host"], "attacker.example:8545", "{v}");
    assert_eq!(server.calls.load(Ordering::SeqCst), 3);
    assert_eq!(server.metrics.limit_count(LimitKind::Host), 1);
}

fn upgrade(host: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nhost: {host}\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
         sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// The first 12 bytes (version and status) of the answer to an upgrade
/// for `host` sent to `addr`.
async fn upgrade_status(addr: SocketAddr, host: &str) -> [u8; 12] {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(upgrade(host).as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(HANG, stream.read_exact(&mut head))
        .await
        .expect("answered")
        .unwrap();
    head
}

/// A rebound page's WebSocket upgrade names its own domain too.
#[tokio::test]
async fn websocket_upgrades_are_checked() {
    for own in [true, false] {
        let server = start(&LOCAL, own).await;
        let r = one(server.addr, &upgrade("attacker.example")).await;
        assert_eq!(r.0, "403 Forbidden", "own loop {own}: {r:?}");
        assert!(r.2.contains("host not allowed"), "{r:?}");
        let host = format!("localhost:{}", server.addr.port());
        let head = upgrade_status(server.addr, &host).await;
        assert_eq!(&head, b"HTTP/1.1 101", "own loop {own}");
        assert_eq!(server.metrics.limit_count(LimitKind::Host), 1);
    }
}

/// A `WsServer` on a port of its own answering `ping`, with `hosts` as its
/// allowlist: its address, its metrics, and what stops it (and checks it
/// stopped cleanly).
async fn ws_server(
    hosts: Option<AllowedHosts>,
) -> (
    std::net::SocketAddr,
    Arc<Metrics>,
    impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
) {
    let d = Dispatcher::builder(())
        .method("ping", |call: Call<'_, ()>| call.reply.str("pong"))
        .build()
        .unwrap();
    let metrics = Arc::new(Metrics::default());
    let shutdown = Shutdown::new();
    let mut ws = WsServer::new(d)
        .metrics(Arc::clone(&metrics))
        .shutdown(shutdown.clone());
    if let Some(hosts) = hosts {
        ws = ws.allowed_hosts(hosts);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(async move { ws.serve(listener).await });
    let stop = move || -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
        Box::pin(async move {
            shutdown.trigger();
            tokio::time::timeout(HANG, served)
                .await
                .expect("stops")
                .unwrap()
                .unwrap();
        })
    };
    (addr, metrics, stop)
}

/// A WebSocket server on a port of its own (`WsServer::serve`) checks its
/// opening handshakes' `Host` as the HTTP service checks requests: listed
/// names and addresses upgraded, other names `403`, no `Host` or two
/// `400`, each refusal counted and no connection served for it.
#[tokio::test]
async fn a_websocket_server_of_its_own_checks_hosts() {
    let (addr, metrics, stop) = ws_server(Some(AllowedHosts::list(LOCAL).unwrap())).await;

    let refused = [
        (
            upgrade("attacker.example"),
            "403 Forbidden",
            "host not allowed",
        ),
        (
            upgrade("localhost.attacker.example:80"),
            "403 Forbidden",
            "host not allowed",
        ),
        (
            upgrade("").replace("host: \r\n", ""),
            "400 Bad Request",
            "exactly one Host",
        ),
        (
            two_hosts(&upgrade("localhost")),
            "400 Bad Request",
            "exactly one Host",
        ),
    ];
    for (n, (raw, status, why)) in refused.iter().enumerate() {
        let r = one(addr, raw).await;
        assert_eq!(r.0, *status, "{raw:?}: {r:?}");
        assert!(r.2.contains(why), "{r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
        assert_eq!(v["error"]["code"], -32600, "{r:?}");
        assert_eq!(metrics.limit_count(LimitKind::Host), n as u64 + 1);
    }
    let body = one(addr, &upgrade("attacker.example")).await.2;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["data"]["host"], "attacker.example", "{body}");

    for host in [
        format!("localhost:{}", addr.port()),
        "LOCALHOST".to_string(),
        addr.to_string(),
        "[::1]:8545".to_string(),
    ] {
        assert_eq!(
            &upgrade_status(addr, &host).await,
            b"HTTP/1.1 101",
            "{host}"
        );
    }
    assert_eq!(metrics.limit_count(LimitKind::Host), 5);
    stop().await;
}

/// A WebSocket server on a port of its own, without an allowlist, is the
/// HTTP server of its opening handshakes (HTTP/1.1 requests): one without
/// `Host`, or with two, gets `400` (RFC 9112 §3.2; RFC 6455 §4.1 asks for
/// one too), counted; any name is upgraded.
#[tokio::test]
async fn a_websocket_server_without_an_allowlist_needs_one_host() {
    let (addr, metrics, stop) = ws_server(None).await;

    let none = upgrade("").replace("host: \r\n", "");
    let two = two_hosts(&upgrade("localhost"));
    for (n, raw) in [none, two].iter().enumerate() {
        let r = one(addr, raw).await;
        assert_needs_one_host(&r.0, &r.2, &format!("{raw:?}: {r:?}"));
        assert_eq!(metrics.limit_count(LimitKind::Host), n as u64 + 1);
    }
    for host in ["localhost", "attacker.example"] {
        assert_eq!(&upgrade_status(addr, host).await, b"HTTP/1.1 101", "{host}");
    }
    assert_eq!(metrics.limit_count(LimitKind::Host), 2);
    stop().await;
}

/// A service in tower layers (a `Fn(SocketAddr) -> service` given to
/// `serve`) is not one the server knows: the server itself answers an
/// HTTP/1.1 request without one `Host` `400` before the layers see it,
/// counted in the server's metrics, on hyper's path (the only one for such
/// a service).
#[tokio::test]
async fn a_layered_service_gets_the_rule_from_the_server() {
    let calls = Arc::new(AtomicUsize::new(0));
    let d = counting(&calls);
    let limits = Limits::default();
    let metrics = Arc::new(Metrics::default());
    let service = HttpService::new(d, &limits, None);
    let make = move |peer| {
        tower::ServiceBuilder::new()
            .concurrency_limit(8)
            .service(service.clone().with_peer_addr(peer))
    };
    let shutdown = Shutdown::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(limits).metrics(Arc::clone(&metrics));
    tokio::spawn(server.serve(listener, make, shutdown.clone()));
    let two = two_hosts(&post(Some("localhost")));
    for raw in [post(None), two] {
        let r = one(addr, &raw).await;
        assert_needs_one_host(&r.0, &r.2, &format!("{raw:?}: {r:?}"));
    }
    let r = one(addr, &post(None).replace("HTTP/1.1", "HTTP/1.0")).await;
    assert_eq!(r.0, "200 OK", "{r:?}");
    let r = one(addr, &post(Some("localhost"))).await;
    assert_eq!(r.0, "200 OK", "{r:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(metrics.limit_count(LimitKind::Host), 2);
    shutdown.trigger();
}
