//! Browsers calling from a page of another origin: with a CORS policy on
//! the HTTP service, preflights are answered, answers carry
//! `Access-Control-Allow-Origin`, preflights and WebSocket upgrades from
//! origins not allowed get `403` and their other requests no
//! `Access-Control-Allow-Origin`; without a policy, `Origin` changes
//! nothing. On rpcwire's own
//! HTTP/1.1 loop (which hands browsers' requests to hyper's path) and on
//! hyper's path alike. Raw HTTP over 127.0.0.1; deadlines only detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rpcwire::server::cors::Cors;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher};
use tokio::net::{TcpListener, TcpStream};

use crate::combined_server::{CombinedServer, StartCombined};
use crate::http_replies::{RawResponse, exchange, h2_client, one, request};

const APP: &str = "https://app.example.org";
const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"count"}"#;

/// Counts the `count` calls that ran.
fn dispatcher(calls: Arc<AtomicUsize>) -> Dispatcher<Arc<AtomicUsize>> {
    Dispatcher::builder(calls)
        .method("count", |call: Call<'_, Arc<AtomicUsize>>| {
            let n = call.state.fetch_add(1, Ordering::SeqCst) + 1;
            call.reply.u64(n as u64)
        })
        .build()
        .unwrap()
}

struct TestServer {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    shutdown: Shutdown,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// An HTTP server with `cors`, on rpcwire's own HTTP/1.1 loop or on
/// hyper's path alone.
async fn start(cors: Option<Cors>, own_http1: bool) -> TestServer {
    let calls = Arc::new(AtomicUsize::new(0));
    let limits = Limits::default();
    let mut service = HttpService::new(dispatcher(Arc::clone(&calls)), &limits, None);
    if let Some(cors) = cors {
        service = service.cors(cors);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).own_http1(own_http1);
    tokio::spawn(server.serve(listener, service, shutdown.clone()));
    TestServer {
        addr,
        calls,
        shutdown,
    }
}

fn header<'r>(response: &'r RawResponse, name: &str) -> Option<&'r str> {
    response
        .1
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn preflight(origin: &str) -> String {
    format!(
        "OPTIONS / HTTP/1.1\r\nhost: x\r\norigin: {origin}\r\n\
         access-control-request-method: POST\r\n\
         access-control-request-headers: content-type, x-client\r\n\r\n"
    )
}

fn post_from(origin: &str, content_type: &str) -> String {
    request(
        &format!("origin: {origin}\r\ncontent-type: {content_type}\r\n"),
        CALL,
    )
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        let r = one(server.addr, &preflight(APP)).await;
        assert_eq!(r.0, "204 No Content", "own loop {own}: {r:?}");
        assert_eq!(header(&r, "access-control-allow-origin"), Some(APP));
        assert_eq!(
            header(&r, "access-control-allow-methods"),
            Some("POST, OPTIONS")
        );
        assert_eq!(
            header(&r, "access-control-allow-headers"),
            Some("content-type, x-client")
        );
        assert_eq!(header(&r, "access-control-max-age"), Some("600"));
        assert!(
            header(&r, "vary").is_some_and(|v| v.contains("origin")),
            "{r:?}"
        );
        assert_eq!(server.calls.load(Ordering::SeqCst), 0);
    }
}

/// A browser's call after other clients' on the same kept-alive
/// connection: the own loop answers the plain ones and hands the browser's
/// to hyper, which answers it with the CORS headers, and so on.
#[tokio::test]
async fn calls_from_an_allowed_origin_carry_allow_origin() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let plain = request("content-type: application/json\r\n", CALL);
        let browser = post_from(APP, "application/json");
        let raw = format!("{plain}{browser}{plain}");
        let rs = exchange(&mut stream, &raw, 3).await;
        assert_eq!(rs.len(), 3, "own loop {own}: {rs:?}");
        for (i, r) in rs.iter().enumerate() {
            assert_eq!(r.0, "200 OK", "{r:?}");
            let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
            assert_eq!(v["result"], i as u64 + 1, "{r:?}");
        }
        assert_eq!(header(&rs[0], "access-control-allow-origin"), None);
        assert_eq!(header(&rs[1], "access-control-allow-origin"), Some(APP));
        assert_eq!(header(&rs[1], "vary"), Some("origin"));
        assert_eq!(header(&rs[2], "access-control-allow-origin"), None);
        assert_eq!(server.calls.load(Ordering::SeqCst), 3);
    }
}

/// A page may read the errors it gets too.
#[tokio::test]
async fn refusals_to_an_allowed_origin_carry_allow_origin() {
    let server = start(Some(Cors::origins([APP]).unwrap()), true).await;
    let r = one(server.addr, &post_from(APP, "text/plain")).await;
    assert_eq!(r.0, "415 Unsupported Media Type", "{r:?}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some(APP));
    let get = format!("GET / HTTP/1.1\r\nhost: x\r\norigin: {APP}\r\n\r\n");
    let r = one(server.addr, &get).await;
    assert_eq!(r.0, "405 Method Not Allowed", "{r:?}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some(APP));
}

/// A page of another origin: its preflight is refused (so a browser never
/// sends its call), and a request that comes anyway (a browser extension,
/// which sends its own `Origin` and is not held to CORS, or any program)
/// is served without `Access-Control-Allow-Origin`, which a browser would
/// not let a page read.
#[tokio::test]
async fn other_origins_preflights_are_refused_and_their_answers_unreadable() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        for origin in ["https://evil.example", "null"] {
            let r = one(server.addr, &preflight(origin)).await;
            assert_eq!(r.0, "403 Forbidden", "own loop {own}: {r:?}");
            assert_eq!(header(&r, "access-control-allow-origin"), None);
            let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
            assert_eq!(v["error"]["code"], -32600, "{v}");
            assert_eq!(v["error"]["data"]["reason"], "origin not allowed", "{v}");
            assert_eq!(v["error"]["data"]["origin"], origin, "{v}");
        }
        assert_eq!(server.calls.load(Ordering::SeqCst), 0);
        for origin in ["https://evil.example", "chrome-extension://abcdef"] {
            let r = one(server.addr, &post_from(origin, "application/json")).await;
            assert_eq!(r.0, "200 OK", "own loop {own}: {r:?}");
            assert_eq!(header(&r, "access-control-allow-origin"), None, "{r:?}");
        }
        // Clients that send no `Origin` are served as ever.
        let r = one(
            server.addr,
            &request("content-type: application/json\r\n", CALL),
        )
        .await;
        assert_eq!(r.0, "200 OK", "{r:?}");
        assert_eq!(server.calls.load(Ordering::SeqCst), 3);
    }
}

/// With origins listed, an answer depends on the request's `Origin`: every
/// answer says so, those to requests without `Origin` or from other
/// origins too, or a shared cache between browsers and the server could
/// hand a page an answer made for another (one without
/// `Access-Control-Allow-Origin`, which its browser refuses to read).
#[tokio::test]
async fn every_answer_varies_with_origin_when_origins_are_listed() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        let plain = request("content-type: application/json\r\n", CALL);
        let notification = request(
            "content-type: application/json\r\n",
            r#"{"jsonrpc":"2.0","method":"count"}"#,
        );
        let wrong_type = request("content-type: text/plain\r\n", CALL);
        let cases = [
            (plain.clone(), "200 OK"),
            (notification, "204 No Content"),
            (wrong_type, "415 Unsupported Media Type"),
            (
                post_from("https://evil.example", "application/json"),
                "200 OK",
            ),
            (post_from(APP, "application/json"), "200 OK"),
        ];
        for (raw, status) in cases {
            let r = one(server.addr, &raw).await;
            assert_eq!(r.0, status, "own loop {own}: {r:?}");
            assert_eq!(header(&r, "vary"), Some("origin"), "own loop {own}: {r:?}");
        }
        // Without a policy, or with any origin allowed, nothing varies.
        for cors in [None, Some(Cors::any())] {
            let server = start(cors, own).await;
            let r = one(server.addr, &plain).await;
            assert_eq!(r.0, "200 OK", "own loop {own}: {r:?}");
            assert_eq!(header(&r, "vary"), None, "own loop {own}: {r:?}");
        }
    }
}

#[tokio::test]
async fn any_origin_is_allowed_with_a_star() {
    let server = start(Some(Cors::any()), true).await;
    let r = one(
        server.addr,
        &post_from("https://anyone.example", "application/json"),
    )
    .await;
    assert_eq!(r.0, "200 OK", "{r:?}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    assert_eq!(header(&r, "vary"), None);
    let r = one(server.addr, &preflight("http://localhost:5173")).await;
    assert_eq!(r.0, "204 No Content", "{r:?}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
}

/// The default: `Origin` is not looked at, and a preflight is an `OPTIONS`
/// like any other (`405`), which a browser takes as a refusal.
#[tokio::test]
async fn without_a_policy_origin_changes_nothing() {
    for own in [true, false] {
        let server = start(None, own).await;
        let r = one(
            server.addr,
            &post_from("https://evil.example", "application/json"),
        )
        .await;
        assert_eq!(r.0, "200 OK", "{r:?}");
        assert_eq!(header(&r, "access-control-allow-origin"), None);
        let r = one(server.addr, &preflight(APP)).await;
        assert_eq!(r.0, "405 Method Not Allowed", "{r:?}");
        assert_eq!(header(&r, "access-control-allow-origin"), None);
    }
}

fn upgrade(origin: Option<&str>) -> String {
    let origin = origin.map_or(String::new(), |o| format!("origin: {o}\r\n"));
    format!(
        "GET / HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
         sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{origin}\r\n"
    )
}

/// Browsers do not preflight WebSocket upgrades: the HTTP service's policy
/// checks their `Origin` on the port that serves both.
#[tokio::test]
async fn websocket_upgrades_from_other_origins_are_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(Arc::clone(&calls));
    let CombinedServer { addr, shutdown, .. } = StartCombined::new(d)
        .cors(Cors::origins([APP]).unwrap())
        .start()
        .await;

    let r = one(addr, &upgrade(Some("https://evil.example"))).await;
    assert_eq!(r.0, "403 Forbidden", "{r:?}");
    assert!(r.2.contains("origin not allowed"), "{r:?}");
    // Varies with `Origin`, as every answer while origins are listed.
    assert!(
        header(&r, "vary").is_some_and(|v| v.contains("origin")),
        "{r:?}"
    );
    for origin in [Some(APP), None] {
        let r = one(addr, &upgrade(origin)).await;
        assert_eq!(r.0, "101 Switching Protocols", "{origin:?}: {r:?}");
    }
    shutdown.trigger();
}

/// The refusals before the CORS policy (a `Host` not listed, no `Host`, an
/// upgrade the WebSocket side refuses) vary with `Origin` too, as every
/// answer while origins are listed: they lacked the header.
#[tokio::test]
async fn refusals_of_hosts_and_upgrades_vary_with_origin_too() {
    let d = dispatcher(Arc::new(AtomicUsize::new(0)));
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let CombinedServer { addr, shutdown, .. } = StartCombined::new(d)
        .cors(Cors::origins([APP]).unwrap())
        .allowed_hosts(rpcwire::server::hosts::AllowedHosts::list(["localhost", "x"]).unwrap())
        .ws_limits(limits)
        .start()
        .await;
    let origin = format!("origin: {APP}\r\ncontent-type: application/json\r\n");
    let other_host = request(&origin, CALL).replace("host: localhost", "host: attacker.example");
    assert!(other_host.contains("attacker.example"));
    let no_host = request(&origin, CALL).replace("host: localhost\r\n", "");
    let old_version = upgrade(Some(APP)).replace("version: 13", "version: 8");
    let cases = [
        (other_host, "403 Forbidden"),
        (no_host, "400 Bad Request"),
        (old_version, "426 Upgrade Required"),
    ];
    for (raw, status) in cases {
        let r = one(addr, &raw).await;
        assert_eq!(r.0, status, "{raw}: {r:?}");
        assert!(
            header(&r, "vary").is_some_and(|v| v.contains("origin")),
            "{raw}: {r:?}"
        );
    }
    // Past the WebSocket side's connection limit: 503.
    let mut first = TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    first
        .write_all(upgrade(Some(APP)).as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 12];
    first.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
    let r = one(addr, &upgrade(Some(APP))).await;
    assert_eq!(r.0, "503 Service Unavailable", "{r:?}");
    assert!(
        header(&r, "vary").is_some_and(|v| v.contains("origin")),
        "{r:?}"
    );
    shutdown.trigger();
}

/// A WebSocket server on a listener of its own, given `origins`, refuses
/// handshakes from other pages' origins and accepts its own and those of
/// programs (no `Origin`); on a port serving both, the WebSocket server's
/// policy holds for upgrades even when the HTTP service has none.
#[tokio::test]
async fn a_websocket_server_with_origins_refuses_other_pages() {
    let d = dispatcher(Arc::new(AtomicUsize::new(0)));
    let shutdown = Shutdown::new();
    let ws = WsServer::new(d.clone())
        .shutdown(shutdown.clone())
        .origins(Cors::origins([APP]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let own = listener.local_addr().unwrap();
    let server = ws.clone();
    tokio::spawn(async move { server.serve(listener).await });
    let both = StartCombined::new(d).ws(ws).start().await.addr;
    for addr in [own, both] {
        let r = one(addr, &upgrade(Some("https://evil.example"))).await;
        assert_eq!(r.0, "403 Forbidden", "{addr}: {r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.2).unwrap();
        assert_eq!(v["error"]["data"]["origin"], "https://evil.example", "{v}");
        for origin in [Some(APP), None] {
            let r = one(addr, &upgrade(origin)).await;
            assert_eq!(r.0, "101 Switching Protocols", "{addr} {origin:?}: {r:?}");
        }
    }
    shutdown.trigger();
}

/// Browsers' requests (another origin's, preflights with a body, an
/// `OPTIONS` that is no preflight) pipelined between plain clients' on one kept-alive
/// connection: each answered in order, bodies read past, nothing lost,
/// the connection usable after each.
#[tokio::test]
async fn pipelined_browser_and_plain_requests_are_answered_in_order() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let plain = request("content-type: application/json\r\n", CALL);
        let other = post_from("https://evil.example", "application/json");
        let preflight_with_body = format!(
            "OPTIONS / HTTP/1.1\r\nhost: x\r\norigin: {APP}\r\n\
             access-control-request-method: POST\r\ncontent-length: 5\r\n\r\nhello"
        );
        let options = format!(
            "OPTIONS / HTTP/1.1\r\nhost: x\r\norigin: {APP}\r\ncontent-length: 2\r\n\r\n{{}}"
        );
        let browser = post_from(APP, "application/json");
        let raw = format!("{other}{plain}{preflight_with_body}{options}{browser}{plain}");
        let rs = exchange(&mut stream, &raw, 6).await;
        let statuses: Vec<&str> = rs.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            statuses,
            [
                "200 OK",
                "200 OK",
                "204 No Content",
                "405 Method Not Allowed",
                "200 OK",
                "200 OK"
            ],
            "own loop {own}: {rs:?}"
        );
        let results: Vec<serde_json::Value> = [0, 1, 4, 5]
            .iter()
            .map(|&i| {
                serde_json::from_str::<serde_json::Value>(&rs[i].2).unwrap()["result"].clone()
            })
            .collect();
        assert_eq!(results, [1, 2, 3, 4], "own loop {own}: {rs:?}");
        assert_eq!(header(&rs[0], "access-control-allow-origin"), None);
        assert_eq!(header(&rs[3], "access-control-allow-origin"), Some(APP));
        assert_eq!(header(&rs[3], "allow"), Some("POST"));
        assert_eq!(
            header(&rs[2], "access-control-allow-headers"),
            Some("content-type")
        );
        // Still usable.
        let r = exchange(&mut stream, &plain, 1).await;
        assert_eq!(r[0].0, "200 OK", "own loop {own}: {r:?}");
        assert_eq!(server.calls.load(Ordering::SeqCst), 5);
    }
}

/// HTTP/2 requests get the same policy (hyper's path on the port).
#[tokio::test]
async fn http2_requests_follow_the_policy() {
    use http_body_util::{BodyExt, Full};
    let server = start(Some(Cors::origins([APP]).unwrap()), true).await;
    let mut sender = h2_client(server.addr).await;
    let post = |origin: &str| {
        http::Request::post("/")
            .header("origin", origin)
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from_static(CALL.as_bytes())))
            .unwrap()
    };
    let r = sender
        .send_request(post("https://evil.example"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let preflight = http::Request::builder()
        .method("OPTIONS")
        .uri("/")
        .header("origin", APP)
        .header("access-control-request-method", "POST")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let r = sender.send_request(preflight).await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(r.headers()["access-control-allow-origin"], APP);
    let r = sender.send_request(post(APP)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], APP);
    assert_eq!(r.headers()["vary"], "origin");
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    // The other origin's call came first.
    assert_eq!(v["result"], 2);
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);
}

/// Browsers leave a scheme's default port out of `Origin` (they send
/// `https://app.example.org`, never `…:443`): an origin listed with it
/// names the same page and is allowed as browsers send it.
#[test]
fn a_listed_default_port_matches_what_browsers_send() {
    let cors = Cors::origins([
        "https://app.example.org:443",
        "http://localhost:80",
        "http://localhost:8080",
    ])
    .unwrap();
    assert!(cors.allows(b"https://app.example.org"));
    assert!(cors.allows(b"http://localhost"));
    assert!(cors.allows(b"http://localhost:8080"));
    assert!(!cors.allows(b"http://app.example.org"));
    assert!(!cors.allows(b"https://localhost"));
}

/// A refused preflight (403) varies with `Origin` too, as every answer
/// while origins are listed (README, `server::cors`): it had no `Vary`.
#[tokio::test]
async fn refused_preflights_vary_with_origin_too() {
    for own in [true, false] {
        let server = start(Some(Cors::origins([APP]).unwrap()), own).await;
        let r = one(server.addr, &preflight("https://evil.example")).await;
        assert_eq!(r.0, "403 Forbidden", "own loop {own}: {r:?}");
        assert!(
            header(&r, "vary").is_some_and(|v| v.contains("origin")),
            "own loop {own}: no Vary: Origin on the refused preflight: {r:?}"
        );
    }
}
