//! Soak tests of the long-lived servers: many connections that do real
//! work and then end abruptly, the ways production sees (mid-batch with
//! async handlers running, subscriptions open and notifications queued, a
//! request to the client pending, a client that never reads, a body or a
//! frame cut short, an MCP session deleted or abandoned while a tool runs
//! and its GET stream is open). After each round, once the server's own
//! counters say everything closed, the heap (a counting allocator: bytes
//! live, all threads) must be back at what it was after the warm-up,
//! whatever the number of rounds, the per-connection tables empty, and no
//! tokio task left behind.
//!
//! The allocator counts every thread: one test at a time (`SERIAL`).
#![cfg(all(feature = "ws", feature = "http", feature = "mcp"))]

#[path = "support/combined_server.rs"]
mod combined_server;
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "support/soak.rs"]
mod soak;
#[path = "support/ws_frame.rs"]
mod ws_frame;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use combined_server::{CombinedServer, StartCombined};
use counting_alloc::CountingAlloc;
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::mcp::http::{Endpoint, HttpConfig};
use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
use rpcwire::peer::Peer;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::subscriptions::{SubscriptionConfig, Subscriptions};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::json;
use soak::{HANG, soak, soak_with, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use ws_frame::client_frame;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the test handlers share: how far the connections got, and the
/// per-connection tables they saw, to check after the connections end.
#[derive(Default)]
struct Lab {
    started: AtomicUsize,
    asked: AtomicUsize,
    subscribed: AtomicUsize,
    peers: Mutex<Vec<Peer>>,
    subs: Mutex<Vec<Subscriptions>>,
}

impl Lab {
    fn progress(&self) -> [usize; 3] {
        [
            self.started.load(Ordering::SeqCst),
            self.asked.load(Ordering::SeqCst),
            self.subscribed.load(Ordering::SeqCst),
        ]
    }

    /// The tables of every connection seen are empty; then they are let go
    /// (before the heap is read).
    fn check_and_forget(&self) {
        let peers = std::mem::take(&mut *self.peers.lock().unwrap());
        for p in &peers {
            assert_eq!(p.pending(), 0, "a closed connection's peer still waits");
        }
        let subs = std::mem::take(&mut *self.subs.lock().unwrap());
        for s in &subs {
            assert_eq!(s.len(), 0, "a closed connection keeps subscriptions");
            assert_eq!(s.queued(), 0, "a closed connection keeps notifications");
        }
    }
}

fn dispatcher(lab: Arc<Lab>, metrics: Arc<Metrics>) -> Dispatcher<Arc<Lab>, WithAsync> {
    Dispatcher::builder(lab)
        .observer(metrics)
        .async_method("sleep", |c: AsyncCall<Arc<Lab>>| async move {
            let (ms,): (u64,) = c.decode()?;
            c.state.started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(ms)
        })
        .async_method("ask", |c: AsyncCall<Arc<Lab>>| async move {
            let peer = c.ctx.peer().expect("two-way").clone();
            c.state.peers.lock().unwrap().push(peer.clone());
            c.state.asked.fetch_add(1, Ordering::SeqCst);
            let answer = peer
                .request("client/ping", Some(&json!([])), Duration::from_secs(3600))
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            Ok::<_, RpcError>(answer.result().is_ok())
        })
        .method("big", |c: Call<'_, Arc<Lab>>| {
            let (n,): (usize,) = c.decode()?;
            c.reply.str(&"x".repeat(n))
        })
        // `n` notifications of `size` bytes, queued as fast as they go;
        // then the subscription stays open until the connection ends.
        .method("sub", |c: Call<'_, Arc<Lab>>| {
            let (n, size): (usize, usize) = c.decode()?;
            let subs = Subscriptions::of(c.ctx)?;
            let (id, sink) = subs.subscribe()?;
            c.state.subs.lock().unwrap().push(subs.clone());
            tokio::spawn(async move {
                let payload = "n".repeat(size);
                for _ in 0..n {
                    if sink.send(&payload).is_err() {
                        break;
                    }
                }
                sink.closed().await;
            });
            c.state.subscribed.fetch_add(1, Ordering::SeqCst);
            Ok::<_, RpcError>(id)
        })
        .build()
        .unwrap()
}

/// Waits until the lab saw `want` more of each (started, asked,
/// subscribed) than `before`.
async fn until_progress(lab: &Lab, before: [usize; 3], want: [usize; 3]) {
    let reached = wait_until(|| {
        let now = lab.progress();
        (0..3).all(|i| now[i] >= before[i] + want[i])
    })
    .await;
    assert!(
        reached,
        "the connection's work started: {:?}",
        lab.progress()
    );
}

// ------------------------------------------------------------ WebSocket

const HANDSHAKE: &str = "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Reads an HTTP response head; returns it.
async fn read_head(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        let n = tokio::time::timeout(HANG, tcp.read(&mut byte))
            .await
            .expect("a head in time")
            .unwrap();
        assert_eq!(
            n,
            1,
            "the head comes whole: {}",
            String::from_utf8_lossy(&got)
        );
        got.push(byte[0]);
    }
    String::from_utf8(got).unwrap()
}

/// The work every WebSocket and stream connection does before it ends:
/// a subscription whose notifications the client never reads, a batch
/// with async handlers running and a large reply, a request to the client
/// that it never answers.
const WORK: [&str; 3] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"sub","params":[300,200]}"#,
    r#"[{"jsonrpc":"2.0","id":2,"method":"sleep","params":[30]},{"jsonrpc":"2.0","id":3,"method":"sleep","params":[30]},{"jsonrpc":"2.0","id":4,"method":"big","params":[50000]}]"#,
    r#"{"jsonrpc":"2.0","id":5,"method":"ask"}"#,
];
const WORK_SEEN: [usize; 3] = [2, 1, 1];
/// A whole exchange before a connection's abrupt end (HTTP, and HTTP
/// before an upgrade; on TCP, the batch the `ask` waits for): [`WORK`]'s batch with sleeps of 1 ms, since the
/// cycle waits for its answer (at 30 ms, hundreds of cycles spent most of
/// the soaks' time waiting here).
fn answered() -> String {
    let batch = WORK[1].replace(r#""sleep","params":[30]"#, r#""sleep","params":[1]"#);
    assert_ne!(batch, WORK[1]);
    batch
}
/// Sent after [`WORK`]: past the in-flight limit ([`limits`]), read on
/// while `ask` waits for the client's answer, and held.
const HELD: &str = r#"{"jsonrpc":"2.0","id":6,"method":"big","params":[1000]}"#;

/// The WebSocket side of a cycle on `tcp` (a new connection, or one an
/// HTTP exchange kept alive): the upgrade, [`WORK`] and five [`HELD`]
/// messages, then, once the server has started on them, an end chosen by
/// `k`: gone without a close frame, cut mid-frame, or its side closed
/// without reading. The `ask` goes before the batch: at the in-flight cap
/// of 2 both start at once and are both still running at the end (the
/// other way round the `ask` waited for the batch's 30 ms sleeps, most of
/// the soak's time).
async fn websocket_work_then_end(tcp: &mut TcpStream, lab: &Lab, k: usize) {
    tcp.write_all(HANDSHAKE.as_bytes()).await.unwrap();
    let head = read_head(tcp).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let before = lab.progress();
    for m in [WORK[0], WORK[2], WORK[1]].iter().chain([HELD; 5].iter()) {
        tcp.write_all(&client_frame(0x1, m.as_bytes()))
            .await
            .unwrap();
    }
    until_progress(lab, before, WORK_SEEN).await;
    match k % 3 {
        0 => {}
        // A header promising 1000 bytes, 10 sent.
        1 => {
            let frame = client_frame(0x1, &[b' '; 1000]);
            let _ = tcp.write_all(&frame[..18]).await;
        }
        _ => {
            let _ = tcp.shutdown().await;
        }
    }
}

/// Two messages in flight (the batch and `ask`): what comes next is held.
fn limits() -> Limits {
    Limits {
        max_in_flight: 2,
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_connections_that_end_abruptly_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let lab = Arc::new(Lab::default());
    let metrics = Arc::new(Metrics::default());
    let server = WsServer::new(dispatcher(lab.clone(), metrics.clone()))
        .limits(limits())
        .metrics(metrics.clone())
        .subscriptions(SubscriptionConfig::default());
    let shutdown = server.shutdown_signal().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { server.serve(listener).await });

    soak(
        "ws",
        |k| {
            let lab = lab.clone();
            async move {
                // A handshake cut short first (or something that is not
                // HTTP), gone before it is answered.
                let mut cut = TcpStream::connect(addr).await.unwrap();
                let start: &[u8] = if k % 2 == 0 {
                    &HANDSHAKE.as_bytes()[..40]
                } else {
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"
                };
                let _ = cut.write_all(start).await;
                drop(cut);
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                websocket_work_then_end(&mut tcp, &lab, k).await;
            }
        },
        || metrics.connections_open() == 0,
        || lab.check_and_forget(),
    )
    .await;
    shutdown.trigger();
    tokio::time::timeout(HANG, task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}

// ----------------------------------------------------------- TCP stream

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_connections_that_end_abruptly_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let lab = Arc::new(Lab::default());
    let metrics = Arc::new(Metrics::default());
    let shutdown = Shutdown::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(serve_tcp(
        listener,
        dispatcher(lab.clone(), metrics.clone()),
        Lines::new,
        limits(),
        Some(metrics.clone()),
        shutdown.clone(),
    ));

    soak(
        "tcp",
        |k| {
            let lab = lab.clone();
            async move {
                let before = lab.progress();
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                // At the in-flight cap of 2 the batch's calls hold back
                // the `ask`, which starts only once they finish: their
                // sleeps cut to 1 ms ([`answered`]), as at 30 ms the cycle
                // waited them out (most of the soak's 16 s).
                let batch = answered();
                let work = [WORK[0], batch.as_str(), WORK[2]];
                for m in work.iter().chain([HELD; 5].iter()) {
                    tcp.write_all(m.as_bytes()).await.unwrap();
                    tcp.write_all(b"\n").await.unwrap();
                }
                until_progress(&lab, before, WORK_SEEN).await;
                match k % 3 {
                    0 => {}
                    // Mid-message.
                    1 => {
                        let _ = tcp.write_all(br#"{"jsonrpc":"2.0","id":9,"meth"#).await;
                    }
                    _ => {
                        let _ = tcp.shutdown().await;
                    }
                }
                drop(tcp);
            }
        },
        || metrics.connections_open() == 0,
        || lab.check_and_forget(),
    )
    .await;
    shutdown.trigger();
    tokio::time::timeout(HANG, task)
        .await
        .expect("the server stops")
        .unwrap();
}

// ----------------------------------------------------------------- HTTP

fn post(body: &str, content_length: usize) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {content_length}\r\n\r\n{body}"
    )
}

/// Reads one response with a `content-length` body; returns its head.
async fn read_response(tcp: &mut TcpStream) -> String {
    let head = read_head(tcp).await;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("a content-length: {head}"));
    let mut body = vec![0; len];
    tokio::time::timeout(HANG, tcp.read_exact(&mut body))
        .await
        .expect("a body in time")
        .unwrap();
    head
}

async fn http_soak(own_http1: bool) {
    let name = if own_http1 {
        "http (own loop)"
    } else {
        "http (hyper)"
    };
    let lab = Arc::new(Lab::default());
    let metrics = Arc::new(Metrics::default());
    let limits = Limits::default();
    let service = HttpService::new(
        dispatcher(lab.clone(), metrics.clone()),
        &limits,
        Some(metrics.clone()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits)
        .metrics(metrics.clone())
        .own_http1(own_http1);
    let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));

    soak(
        name,
        |k| {
            let lab = lab.clone();
            async move {
                // A head cut short first (or HTTP/2's preface and half a
                // frame), gone before it is answered.
                let mut cut = TcpStream::connect(addr).await.unwrap();
                let start: &[u8] = if k % 2 == 0 {
                    b"POST / HTTP/1.1\r\nhost: localhost\r\ncontent-le"
                } else {
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00"
                };
                let _ = cut.write_all(start).await;
                drop(cut);
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                // A whole exchange first: the connection is kept alive.
                let batch = answered();
                tcp.write_all(post(&batch, batch.len()).as_bytes())
                    .await
                    .unwrap();
                assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200"));
                match k % 3 {
                    // Mid-body: 5000 bytes announced, 100 sent.
                    0 => {
                        let body = " ".repeat(100);
                        tcp.write_all(post(&body, 5000).as_bytes()).await.unwrap();
                    }
                    // Async handlers running when it goes (and a
                    // notification that runs on after its reply).
                    1 => {
                        let before = lab.progress();
                        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"sleep","params":[30]},{"jsonrpc":"2.0","method":"sleep","params":[30]}]"#;
                        tcp.write_all(post(batch, batch.len()).as_bytes())
                            .await
                            .unwrap();
                        until_progress(&lab, before, [2, 0, 0]).await;
                    }
                    // A large reply the client never reads.
                    _ => {
                        let big = r#"{"jsonrpc":"2.0","id":1,"method":"big","params":[300000]}"#;
                        tcp.write_all(post(big, big.len()).as_bytes())
                            .await
                            .unwrap();
                        let mut first = [0u8; 1];
                        tcp.read_exact(&mut first).await.unwrap();
                    }
                }
                drop(tcp);
            }
        },
        || metrics.connections_open() == 0,
        // HTTP connections have no tables of their own (one-way).
        || {},
    )
    .await;
    shutdown.trigger();
    tokio::time::timeout(HANG, task)
        .await
        .expect("the server stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_that_end_abruptly_leave_nothing_behind_own_loop() {
    let _serial = SERIAL.lock().await;
    http_soak(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_that_end_abruptly_leave_nothing_behind_hyper() {
    let _serial = SERIAL.lock().await;
    http_soak(false).await;
}

// ------------------------------------- HTTP and WebSocket on one port

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgraded_connections_on_the_http_port_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let lab = Arc::new(Lab::default());
    let http_metrics = Arc::new(Metrics::default());
    let ws_metrics = Arc::new(Metrics::default());
    let d = dispatcher(lab.clone(), ws_metrics.clone());
    let CombinedServer {
        addr,
        shutdown,
        task,
    } = StartCombined::new(d)
        .limits(limits())
        .http_metrics(http_metrics.clone())
        .ws_metrics(ws_metrics.clone())
        .start()
        .await;

    soak(
        "combined",
        |k| {
            let lab = lab.clone();
            async move {
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                // A call over HTTP, then the upgrade on the same
                // connection (kept alive).
                let batch = answered();
                tcp.write_all(post(&batch, batch.len()).as_bytes())
                    .await
                    .unwrap();
                assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200"));
                websocket_work_then_end(&mut tcp, &lab, k).await;
            }
        },
        || http_metrics.connections_open() == 0 && ws_metrics.connections_open() == 0,
        || lab.check_and_forget(),
    )
    .await;
    shutdown.trigger();
    tokio::time::timeout(HANG, task)
        .await
        .expect("the server stops")
        .unwrap();
}

// ------------------------------------------------- MCP Streamable HTTP

/// Tools running now (a guard counts each down however it ends).
static TOOLS_RUNNING: AtomicUsize = AtomicUsize::new(0);
static TOOLS_STARTED: AtomicUsize = AtomicUsize::new(0);
/// The peers of the `ask` calls, to check that none still waits once its
/// session or call ended.
static ASKING: Mutex<Vec<Peer>> = Mutex::new(Vec::new());

struct Running;

impl Running {
    fn start() -> Running {
        TOOLS_RUNNING.fetch_add(1, Ordering::SeqCst);
        TOOLS_STARTED.fetch_add(1, Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        TOOLS_RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

fn mcp_server() -> McpServer {
    McpServer::builder("leaks", "1")
        .tool(Tool::new(
            "hold",
            json!({"type": "object"}),
            |_, _cx: ToolContext| async move {
                let _running = Running::start();
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(ToolOutput::text("held"))
            },
        ))
        .tool(Tool::new(
            "ask",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let _running = Running::start();
                let peer = cx.connection().peer().expect("two-way").clone();
                ASKING.lock().unwrap().push(peer.clone());
                let asked = peer
                    .request(
                        "sampling/createMessage",
                        Some(&json!({"messages": []})),
                        Duration::from_secs(3600),
                    )
                    .await;
                Ok(ToolOutput::text(format!("{:?}", asked.is_ok())))
            },
        ))
        .build()
        .unwrap()
}

fn mcp_request(method: &str, session: Option<&str>, body: &str) -> String {
    let session = session.map_or(String::new(), |s| {
        format!("mcp-session-id: {s}\r\nmcp-protocol-version: 2025-11-25\r\n")
    });
    format!(
        "{method} /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\n{session}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One request on a connection of its own (closed after it), its
/// response read whole; returns the response's head.
async fn mcp_exchange(addr: SocketAddr, method: &str, session: Option<&str>, body: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = mcp_request(method, session, body).replacen(
        "host: localhost\r\n",
        "host: localhost\r\nconnection: close\r\n",
        1,
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut tcp).await;
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, tcp.read_to_end(&mut rest))
        .await
        .expect("the response ends in time")
        .unwrap();
    head
}

const MAX_SESSIONS: usize = 8;

/// A call of revision 2026-07-28 (no session) whose client goes while
/// the tool runs.
async fn stateless_call_dropped(addr: SocketAddr) {
    let body = r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"hold","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let started = TOOLS_STARTED.load(Ordering::SeqCst);
    let mut call = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: hold\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    call.write_all(request.as_bytes()).await.unwrap();
    assert!(
        wait_until(|| TOOLS_STARTED.load(Ordering::SeqCst) > started).await,
        "the stateless call started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_that_end_abruptly_leave_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let endpoint = Endpoint::new(
        mcp_server(),
        HttpConfig {
            max_sessions: MAX_SESSIONS,
            ..HttpConfig::default()
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(rpcwire::mcp::http::serve(
        endpoint.clone(),
        listener,
        async {
            let _ = stopped.await;
        },
    ));

    // A call whose POST went is not cancelled (the transport's rule): it
    // runs until its session ends. The abandoned sessions still kept hold
    // one running call each (and its task); nothing else may stay.
    let abandoned_calls = || TOOLS_RUNNING.load(Ordering::SeqCst);
    soak_with(
        "mcp",
        |k| async move {
            if k % 2 == 0 {
                stateless_call_dropped(addr).await;
            }
            let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}"#;
            let head = mcp_exchange(addr, "POST", None, init).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let sid = head
                .lines()
                .find_map(|l| l.strip_prefix("mcp-session-id: "))
                .expect("a session")
                .to_owned();
            let head = mcp_exchange(
                addr,
                "POST",
                Some(&sid),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            )
            .await;
            assert!(head.starts_with("HTTP/1.1 202"), "{head}");
            // The GET stream, open.
            let mut get = TcpStream::connect(addr).await.unwrap();
            get.write_all(
                format!("GET /mcp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            assert!(read_head(&mut get).await.starts_with("HTTP/1.1 200"));
            // A tool running: one that waits, or one that asks the client
            // (its request goes out on the POST's event stream).
            let started = TOOLS_STARTED.load(Ordering::SeqCst);
            let tool = if k % 2 == 0 { "hold" } else { "ask" };
            let mut call = TcpStream::connect(addr).await.unwrap();
            call.write_all(
                mcp_request(
                    "POST",
                    Some(&sid),
                    &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#),
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            assert!(
                wait_until(|| TOOLS_STARTED.load(Ordering::SeqCst) > started).await,
                "the tool started"
            );
            match k % 3 {
                // DELETEd while the tool runs and the GET stream is open,
                // then the connections go.
                0 => {
                    let head = mcp_exchange(addr, "DELETE", Some(&sid), "").await;
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                }
                // Abandoned: the connections go, the session stays (until
                // evicted by newer ones past `max_sessions`).
                1 => {}
                // The call's connection goes first, the session is
                // DELETEd after.
                _ => {
                    drop(call);
                    let head = mcp_exchange(addr, "DELETE", Some(&sid), "").await;
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                    drop(get);
                    return;
                }
            }
            drop(call);
            drop(get);
        },
        || {
            abandoned_calls() <= endpoint.sessions() && endpoint.sessions() <= MAX_SESSIONS
        },
        || format!("{} calls running, {} sessions", abandoned_calls(), endpoint.sessions()),
        abandoned_calls,
        |_| {
            // Abandoned sessions stay until newer ones evict them.
            assert!(endpoint.sessions() <= MAX_SESSIONS);
            let mut asking = ASKING.lock().unwrap();
            assert!(!asking.is_empty(), "the ask tool ran");
            // The peers of calls still running in abandoned sessions wait
            // for their answer; every other call's peer has ended.
            asking.retain(|p| p.pending() > 0);
            assert!(
                asking.len() <= endpoint.sessions(),
                "{} peers wait, {} sessions",
                asking.len(),
                endpoint.sessions()
            );
        },
    )
    .await;
    let _ = stop.send(());
    tokio::time::timeout(HANG, task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}
