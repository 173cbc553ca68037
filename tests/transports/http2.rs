//! What goes through hyper rather than rpcwire's own HTTP/1.1 loop:
//! HTTP/2 (prior knowledge) streams, resets, limits, graceful shutdown and
//! idle close; hyper's HTTP/1.1 (chunked bodies, trailers, 100-continue
//! past the limit); the service under tower layers and on a sub-path; the
//! metrics per method and per code. Three findings of a review are among
//! them, each failing before its fix: a body past the limit that then
//! stalls got no answer, ever; successful notifications were counted as
//! -32000 errors; batch entries answered "too large" without running were
//! not counted.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{LimitKind, Limits, Metrics, Shutdown, UNKNOWN_METHOD};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::h2_client::{ChannelBody, h2};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const HANG: Duration = Duration::from_secs(30);

#[derive(Default)]
struct St {
    /// `hold` calls alive (their future not dropped).
    live: AtomicUsize,
    started: Notify,
}

struct Live(Arc<St>);
impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn dispatcher(metrics: Arc<Metrics>, timeout: Option<Duration>) -> Dispatcher<St, WithAsync> {
    Dispatcher::builder(St::default())
        .method("echo", |_c: Call<'_, St>| Ok::<_, RpcError>("ok"))
        .method("big", |call: Call<'_, St>| {
            let (n,): (usize,) = call.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .method("header", |call: Call<'_, St>| {
            let (name,): (String,) = call.decode()?;
            let v = call
                .ctx
                .extension::<HeaderMap>()
                .and_then(|h| h.get(name.as_str()));
            Ok::<_, RpcError>(v.map(|v| v.to_str().unwrap().to_owned()))
        })
        .async_method("hold", |call: AsyncCall<St>| async move {
            let (ms,): (u64,) = call.decode()?;
            let st: Arc<St> = call.state.clone();
            st.live.fetch_add(1, Ordering::SeqCst);
            let _live = Live(st.clone());
            st.started.notify_one();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>("held")
        })
        .observer(metrics)
        .timeout(timeout)
        .max_response_len(10_000)
        .too_large_code(-32003)
        .timeout_code(-32002)
        .build()
        .unwrap()
}

struct Srv {
    addr: SocketAddr,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    state: Arc<St>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(limits: Limits, own: bool) -> Srv {
    let metrics = Arc::new(Metrics::default());
    let d = dispatcher(metrics.clone(), Some(Duration::from_millis(500)));
    let state = d.state().clone();
    let service = HttpService::new(d, &limits, Some(metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).metrics(metrics.clone()).own_http1(own);
    let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
    Srv {
        addr,
        shutdown,
        metrics,
        state,
        task,
    }
}

impl Srv {
    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(HANG, self.task)
            .await
            .expect("server stops")
            .unwrap();
    }
}

fn post(body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::post("/")
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap()
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

fn chan_req(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Request<ChannelBody> {
    Request::post("/")
        .header("content-type", "application/json")
        .body(ChannelBody(rx))
        .unwrap()
}

/// Sends a request whose body stops after its first byte, and waits for
/// its `408`; returns the body's sender, still open.
async fn stall_until_408(
    sender: &mut hyper::client::conn::http2::SendRequest<ChannelBody>,
) -> tokio::sync::mpsc::Sender<Bytes> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(Bytes::from_static(b"[")).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), sender.send_request(chan_req(rx)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), 408);
    tx
}

fn small(body_timeout_ms: u64) -> Limits {
    Limits {
        max_message_len: 1024,
        body_timeout: Duration::from_millis(body_timeout_ms),
        idle_timeout: Duration::from_millis(600),
        ..Limits::default()
    }
}

// ---------------------------------------------------------------------------
// A body that passes the limit and then stalls (no END_STREAM, no last
// chunk): the 413 at the body timeout (the draining once had no timer).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_body_past_the_limit_then_stalled_is_answered() {
    let _s = SERIAL.lock().await;
    let srv = start(small(300), true).await;
    let mut sender = h2::<ChannelBody>(srv.addr).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(Bytes::from(vec![b' '; 1500])).await.unwrap();
    // tx kept alive: the body never ends.
    let r = tokio::time::timeout(Duration::from_secs(5), sender.send_request(chan_req(rx))).await;
    let status = r
        .expect("no answer 5 s after a stalled over-limit body (body_timeout 300 ms)")
        .unwrap()
        .status();
    assert!(
        status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::REQUEST_TIMEOUT,
        "{status}"
    );
    drop(tx);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_hyper_chunked_body_past_the_limit_then_stalled_is_answered() {
    let _s = SERIAL.lock().await;
    for own in [true, false] {
        let srv = start(small(300), own).await;
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let mut req = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(format!("{:x}\r\n{}\r\n", 1500, " ".repeat(1500)).as_bytes());
        s.write_all(&req).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!("own_http1({own}): no answer 5 s after a stalled over-limit chunked body")
            })
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.starts_with("HTTP/1.1 413") || text.starts_with("HTTP/1.1 408"),
            "{text}"
        );
        drop(s);
        srv.stop().await;
    }
}

// ---------------------------------------------------------------------------

// A stream reset by the client while its call runs: the call is cancelled.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_stream_reset_cancels_the_call() {
    let _s = SERIAL.lock().await;
    let srv = start(Limits::default(), true).await;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let started = srv.state.started.notified();
    let fut = tokio::spawn(async move {
        sender
            .send_request(post(
                r#"{"jsonrpc":"2.0","id":1,"method":"hold","params":[20000]}"#,
            ))
            .await
    });
    started.await;
    assert_eq!(srv.state.live.load(Ordering::SeqCst), 1);
    fut.abort(); // drops the response future: hyper's client resets the stream
    let st = srv.state.clone();
    tokio::time::timeout(Duration::from_secs(3), async {
        while st.live.load(Ordering::SeqCst) != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the call is dropped after its stream was reset");
    srv.stop().await;
}

// A body reset mid-way (the client's body errors): the stream goes, the
// connection serves on.
struct FailingBody(u8);
impl Body for FailingBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0 += 1;
        if self.0 == 1 {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"[{\"jsonrpc\":")))))
        } else {
            Poll::Ready(Some(Err(std::io::Error::other("boom"))))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_body_reset_midway_then_connection_serves_on() {
    let _s = SERIAL.lock().await;
    let srv = start(Limits::default(), true).await;
    let stream = TcpStream::connect(srv.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake::<
        _,
        _,
        http_body_util::Either<FailingBody, Full<Bytes>>,
    >(TokioExecutor::new(), TokioIo::new(stream))
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::post("/")
        .header("content-type", "application/json")
        .body(http_body_util::Either::Left(FailingBody(0)))
        .unwrap();
    let _ = sender.send_request(req).await;
    let r = sender
        .send_request(
            post(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#).map(http_body_util::Either::Right),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    srv.stop().await;
}

// ---------------------------------------------------------------------------
// Graceful shutdown with h2 streams in flight: every reply whole.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_graceful_shutdown_finishes_streams() {
    let _s = SERIAL.lock().await;
    let srv = start(Limits::default(), true).await;
    let sender = h2::<Full<Bytes>>(srv.addr).await;
    let mut calls = Vec::new();
    for i in 0..8 {
        let mut s = sender.clone();
        calls.push(tokio::spawn(async move {
            let r = s
                .send_request(post(format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"hold","params":[300]}}"#
                )))
                .await
                .unwrap();
            let st = r.status();
            (st, r.into_body().collect().await.unwrap().to_bytes())
        }));
    }
    while srv.state.live.load(Ordering::SeqCst) < 8 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    srv.shutdown.trigger();
    for c in calls {
        let (st, body) = c.await.unwrap();
        assert_eq!(st, 200);
        assert_eq!(json_of(&body)["result"], "held");
    }
    // A new stream after GOAWAY is refused.
    let mut s = sender.clone();
    assert!(
        s.send_request(post(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#))
            .await
            .is_err()
    );
    tokio::time::timeout(HANG, srv.task).await.unwrap().unwrap();
    assert_eq!(srv.metrics.connections_open(), 0);
}

/// An HTTP/2 client that PINGs every 100 ms, busy or not (hyper's
/// keepalive, as gRPC's): its sender and its connection's future.
async fn pinging_h2(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    hyper::client::conn::http2::Connection<TokioIo<TcpStream>, Full<Bytes>, TokioExecutor>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(100))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap()
}

/// Waits (5 s at most) for the server's connections to close, and checks
/// that one was closed as idle.
async fn closed_as_idle(metrics: &Metrics, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while metrics.connections_open() != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect(what);
    assert_eq!(metrics.limit_count(LimitKind::Idle), 1);
}

// An idle h2 connection with no streams: closed and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_idle_connection_is_closed_and_counted() {
    let _s = SERIAL.lock().await;
    let srv = start(small(5000), true).await;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let r = sender
        .send_request(post(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    closed_as_idle(&srv.metrics, "idle h2 connection closed").await;
    srv.stop().await;
}

/// A client that keeps its connection alive with PINGs (hyper's and
/// gRPC's keepalive, every 100 ms here) but asks for nothing is idle: its
/// connection is closed at the idle timeout. Every frame counted as
/// traffic, so such a connection was never closed (found by a review).
/// One whose request is being answered meanwhile is not (the PINGs go on
/// through a call longer than the idle timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_pings_alone_do_not_keep_a_connection_open() {
    let _s = SERIAL.lock().await;
    let srv = start(small(5000), true).await;
    let (mut sender, conn) = pinging_h2(srv.addr).await;
    let ended = tokio::spawn(conn);
    // A call twice the idle timeout (600 ms) long: not idle meanwhile.
    let r = sender
        .send_request(post(
            r#"{"jsonrpc":"2.0","id":1,"method":"hold","params":[1200]}"#,
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(srv.metrics.limit_count(LimitKind::Idle), 0);
    closed_as_idle(&srv.metrics, "a connection with PINGs alone closed as idle").await;
    let _ = tokio::time::timeout(HANG, ended).await.unwrap();
    srv.stop().await;
}

/// A response body streamed over HTTP/2 for longer than the idle timeout
/// (a download, an event stream: here 12 chunks 100 ms apart, the idle
/// timeout 600 ms), from a service of the user's own, is traffic: the
/// connection is not closed as idle under it. The first form of the fix
/// above counted frames only while a request was being answered, and a
/// request's count ends with its response's head (found by a review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_a_streamed_body_keeps_its_connection_busy() {
    use futures_util::StreamExt;
    let _s = SERIAL.lock().await;
    const CHUNKS: usize = 12;
    let srv = serve_streamed(Duration::from_millis(600), || {
        let chunks = futures_util::stream::iter(0..CHUNKS).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(Frame::data(Bytes::from(format!("chunk {i}\n"))))
        });
        Box::pin(chunks)
    })
    .await;
    let metrics = &srv.metrics;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let r = sender.send_request(post("")).await.unwrap();
    assert_eq!(r.status(), 200);
    let body = tokio::time::timeout(HANG, r.into_body().collect())
        .await
        .unwrap()
        .expect("the whole body, not cut by an idle close")
        .to_bytes();
    assert_eq!(body.iter().filter(|&&b| b == b'\n').count(), CHUNKS);
    assert_eq!(metrics.limit_count(LimitKind::Idle), 0);
    // Then quiet: closed as idle.
    closed_as_idle(metrics, "the quiet connection closed").await;
    srv.stop().await;
}

/// A response body that stays open and sends nothing (an event stream
/// waiting for an event) while its client PINGs is idle, as it would be
/// over HTTP/1.1: the frames a body sends count, not the client's PINGs
/// around an open one (counting every frame while a body was open kept
/// such a connection for good; found by a review of the mend above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_a_silent_open_body_with_pings_is_idle() {
    let _s = SERIAL.lock().await;
    let srv = serve_streamed(Duration::from_millis(300), || {
        Box::pin(futures_util::stream::pending())
    })
    .await;
    let (mut sender, conn) = pinging_h2(srv.addr).await;
    tokio::spawn(conn);
    let r = sender.send_request(post("")).await.unwrap();
    assert_eq!(r.status(), 200);
    let _open = r.into_body();
    closed_as_idle(&srv.metrics, "a silent open body with PINGs closed as idle").await;
    srv.stop().await;
}

/// A response body's frames, streamed.
type Chunks = Pin<
    Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> + Send>,
>;

/// A server that is not one of rpcwire's own services: `serve` with a
/// service of the user's own answering every request with `body()`
/// streamed, under an idle timeout of `idle`.
async fn serve_streamed(idle: Duration, body: fn() -> Chunks) -> Streamed {
    let limits = Limits {
        idle_timeout: idle,
        ..Limits::default()
    };
    let metrics = Arc::new(Metrics::default());
    let service = tower::service_fn(move |_: Request<hyper::body::Incoming>| async move {
        let body = http_body_util::StreamBody::new(body());
        Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).metrics(metrics.clone());
    let task = tokio::spawn(server.serve(listener, move |_| service, shutdown.clone()));
    Streamed {
        addr,
        metrics,
        shutdown,
        task,
    }
}

/// [`serve_streamed`]'s server.
struct Streamed {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

impl Streamed {
    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(HANG, self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

// ---------------------------------------------------------------------------
// Metrics for batches, notifications, timeouts, oversize replies, over h2.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_metrics_batches_notifications_timeouts() {
    let _s = SERIAL.lock().await;
    let srv = start(Limits::default(), true).await;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":2,"method":"echo"},
        {"jsonrpc":"2.0","id":3,"method":"nope"},{"jsonrpc":"2.0","method":"echo"},
        {"jsonrpc":"2.0","id":4,"method":"hold","params":[2000]},{"jsonrpc":"2.0","id":5,"method":"big","params":[20000]}]"#;
    let r = sender.send_request(post(batch)).await.unwrap();
    assert_eq!(r.status(), 200);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let v = json_of(&body);
    assert_eq!(v.as_array().unwrap().len(), 5, "{v}");
    let m = &srv.metrics;
    assert_eq!(m.call_count("echo"), 3, "{}", m.render());
    // An unknown name is counted under one label, not its own.
    assert_eq!(m.call_count("nope"), 0, "{}", m.render());
    assert_eq!(m.call_count(UNKNOWN_METHOD), 1, "{}", m.render());
    assert_eq!(m.call_count("hold"), 1, "{}", m.render());
    assert_eq!(m.call_count("big"), 1, "{}", m.render());
    assert_eq!(m.error_count(-32601), 1, "{}", m.render());
    // `big`'s reply is refused; `hold`, running then, keeps its own
    // (its timeout: it holds past the server's 500 ms).
    assert_eq!(v[3]["error"]["code"], -32002, "{v}");
    assert_eq!(v[4]["error"]["code"], -32003, "{v}");
    assert_eq!(m.error_count(-32003), 1, "too large: {}", m.render());
    // Notification only: 204, counted.
    let r = sender
        .send_request(post(r#"{"jsonrpc":"2.0","method":"echo"}"#))
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(r.into_body().collect().await.unwrap().to_bytes().is_empty());
    assert_eq!(m.call_count("echo"), 4);
    // Reply past max_response_len alone over h2: a whole error reply.
    let r = sender
        .send_request(post(
            r#"{"jsonrpc":"2.0","id":9,"method":"big","params":[50000]}"#,
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v["error"]["code"], -32003, "{v}");
    srv.stop().await;
}

// Status codes and their LimitKind, over h2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_statuses_and_limit_counts() {
    let _s = SERIAL.lock().await;
    let srv = start(small(300), true).await;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#;
    for (ct, want) in [
        ("application/json", 200),
        ("Application/JSON; charset=UTF-8", 200),
        ("application/json-rpc", 200),
        ("application/jsonrequest", 200),
        ("text/plain", 415),
        ("application/json-patch+json", 415),
    ] {
        let req = Request::post("/")
            .header("content-type", ct)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let r = sender.send_request(req).await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{ct}");
    }
    let r = sender
        .send_request(Request::get("/").body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    let r = sender.send_request(post(vec![b' '; 2000])).await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(srv.metrics.limit_count(LimitKind::MessageLen), 1);
    // 408 over h2.
    let mut s2 = h2::<ChannelBody>(srv.addr).await;
    let tx = stall_until_408(&mut s2).await;
    assert_eq!(srv.metrics.limit_count(LimitKind::BodyTimeout), 1);
    drop(tx);
    srv.stop().await;
}

/// After its `408` an HTTP/2 connection ends, as an HTTP/1.1 one does
/// (the docs' "disconnected"): a GOAWAY, then the close. It served on, so
/// that a client could stall one stream after another on it. The idle
/// timeout (60 s) is far from the 5 s this waits. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connection_ends_after_a_408() {
    let _s = SERIAL.lock().await;
    let limits = Limits {
        body_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let srv = start(limits, true).await;
    let mut sender = h2::<ChannelBody>(srv.addr).await;
    let tx = stall_until_408(&mut sender).await;
    drop(tx);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while sender.ready().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the connection served on after its 408");
    srv.stop().await;
}

/// An HTTP/2 frame: its header (length, type, flags, stream) and payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A header field in HPACK's "literal without indexing, new name" form.
fn hpack_literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

/// [`h2_connection_ends_after_a_408`] for a client that never answers the
/// PING of the server's graceful shutdown: h2 sends its final GOAWAY only
/// at the answer, so the connection went on taking streams, each stalled
/// for a body timeout and answered 408, for as long as the client liked.
/// It is dropped once the shutdown grace (1 s here) has passed since its
/// first 408. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connection_ended_by_a_408_is_dropped_if_its_client_ignores_the_ping() {
    let _s = SERIAL.lock().await;
    let limits = Limits {
        body_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(60),
        shutdown_grace: Duration::from_secs(1),
        ..Limits::default()
    };
    let srv = start(limits, true).await;
    let (mut from_server, mut to_server) = TcpStream::connect(srv.addr).await.unwrap().into_split();
    // The server's frames' types and flags, read on a task of their own;
    // `None` once the connection is closed.
    let (frames, mut frames_rx) = tokio::sync::mpsc::unbounded_channel::<Option<(u8, u8)>>();
    tokio::spawn(async move {
        loop {
            let mut head = [0u8; 9];
            if from_server.read_exact(&mut head).await.is_err() {
                let _ = frames.send(None);
                return;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            if from_server.read_exact(&mut payload).await.is_err() {
                let _ = frames.send(None);
                return;
            }
            let _ = frames.send(Some((head[3], head[4])));
        }
    });
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend(h2_frame(4, 0, 0, &[]));
    to_server.write_all(&preface).await.unwrap();
    let start = tokio::time::Instant::now();
    let mut stream = 1;
    let closed = 'streams: loop {
        if start.elapsed() > Duration::from_secs(10) {
            break false;
        }
        // A stream whose body stalls after its first byte.
        let mut block = Vec::new();
        hpack_literal(&mut block, ":method", "POST");
        hpack_literal(&mut block, ":scheme", "http");
        hpack_literal(&mut block, ":path", "/");
        hpack_literal(&mut block, ":authority", "localhost");
        hpack_literal(&mut block, "content-type", "application/json");
        let mut frames_out = h2_frame(1, 0x4, stream, &block);
        frames_out.extend(h2_frame(0, 0, stream, b"["));
        if to_server.write_all(&frames_out).await.is_err() {
            break true;
        }
        stream += 2;
        // What comes back within a second: SETTINGS acknowledged, PINGs
        // never answered.
        let window = tokio::time::Instant::now() + Duration::from_secs(1);
        while let Ok(frame) = tokio::time::timeout_at(window, frames_rx.recv()).await {
            match frame.flatten() {
                None => break 'streams true,
                Some((4, flags)) if flags & 1 == 0 => {
                    let _ = to_server.write_all(&h2_frame(4, 1, 0, &[])).await;
                }
                Some(_) => {}
            }
        }
    };
    assert!(closed, "the connection took streams for 10 s after its 408");
    srv.stop().await;
}

/// A `HEAD` over HTTP/2 is answered with the headers a `GET` would get
/// (405, `allow: POST`, the length of the refusal) and no content, as is
/// one for a host not listed (403). The refusal's JSON went out in DATA
/// frames, which the client's h2 takes as a protocol error: it reset the
/// stream and the caller never saw the status. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_head_is_answered_without_content() {
    let _s = SERIAL.lock().await;
    let srv = start(Limits::default(), true).await;
    let mut sender = h2::<Full<Bytes>>(srv.addr).await;
    let get = sender
        .send_request(Request::get("/").body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let refusal = get.into_body().collect().await.unwrap().to_bytes();
    let head = sender
        .send_request(Request::head("/").body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(head.status(), 405);
    assert_eq!(head.headers()["allow"], "POST");
    assert_eq!(
        head.headers()["content-length"],
        refusal.len().to_string().as_str()
    );
    let content = head.into_body().collect().await.expect("no reset");
    assert!(content.to_bytes().is_empty());
    srv.stop().await;

    // A host not listed.
    let metrics = Arc::new(Metrics::default());
    let limits = Limits::default();
    let hosts = rpcwire::server::hosts::AllowedHosts::list(["rpc.example"]).unwrap();
    let service = HttpService::new(dispatcher(metrics.clone(), None), &limits, Some(metrics))
        .allowed_hosts(hosts);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).serve(listener, service, shutdown.clone()));
    let mut sender = h2::<Full<Bytes>>(addr).await;
    let head = Request::head("http://elsewhere.example/")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let head = sender.send_request(head).await.unwrap();
    assert_eq!(head.status(), 403);
    assert_ne!(head.headers()["content-length"], "0");
    let content = head.into_body().collect().await.expect("no reset");
    assert!(content.to_bytes().is_empty());
    shutdown.trigger();
    tokio::time::timeout(HANG, task).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------
// hyper's HTTP/1.1: Expect 100-continue past the limit, trailers.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_hyper_expect_continue_past_the_limit_and_trailers() {
    let _s = SERIAL.lock().await;
    for own in [false, true] {
        let srv = start(small(2000), own).await;
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5000\r\nexpect: 100-continue\r\n\r\n").await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(text.starts_with("HTTP/1.1 413"), "own {own}: {text}");
        // Trailers on a chunked body.
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"header","params":["x-t"]}"#;
        let req = format!(
            "POST / HTTP/1.1\r\nhost: x\r\nx-t: v\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\nx-trailer: 1\r\n\r\n",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with(r#""result":"v"}"#),
            "own {own}: {text}"
        );
        srv.stop().await;
    }
}

// ---------------------------------------------------------------------------
// The service under tower layers, without the server: timeout drops the
// call; a sub-path; headers still seen.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_timeout_drops_the_call_and_subpath_sees_headers() {
    use tower::{Service, ServiceBuilder, ServiceExt};
    let _s = SERIAL.lock().await;
    let metrics = Arc::new(Metrics::default());
    let d = dispatcher(metrics.clone(), None);
    let st = d.state().clone();
    let svc = HttpService::new(d, &Limits::default(), Some(metrics.clone()));
    let mut layered = ServiceBuilder::new()
        // Long enough for the quick calls on a busy host.
        .timeout(Duration::from_secs(5))
        .concurrency_limit(2)
        .service(svc.clone());
    let req = post(r#"{"jsonrpc":"2.0","id":1,"method":"hold","params":[60000]}"#);
    let r = ServiceExt::<Request<Full<Bytes>>>::ready(&mut layered)
        .await
        .unwrap()
        .call(req)
        .await;
    assert!(r.is_err());
    assert_eq!(
        st.live.load(Ordering::SeqCst),
        0,
        "the timed-out call was dropped"
    );
    // Concurrency permits came back.
    for _ in 0..4 {
        let r = ServiceExt::<Request<Full<Bytes>>>::ready(&mut layered)
            .await
            .unwrap()
            .call(post(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Mounted on a sub-path with a body of another type.
    let req = Request::post("/api/v1/rpc?x=1")
        .header("content-type", "application/json")
        .header("x-key", "k")
        .body(
            http_body_util::Full::new(Bytes::from(
                r#"{"jsonrpc":"2.0","id":1,"method":"header","params":["x-key"]}"#,
            ))
            .map_err(|e| match e {})
            .boxed_unsync(),
        )
        .unwrap();
    let r = svc.clone().oneshot(req).await.unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v, json!({"jsonrpc":"2.0","id":1,"result":"k"}));
}

// Per-code counters: notifications and batch entries not run.
fn counting_dispatcher(metrics: Arc<Metrics>) -> Dispatcher<St> {
    Dispatcher::builder(St::default())
        .method("echo", |_c: Call<'_, St>| Ok::<_, RpcError>("ok"))
        .method("big", |call: Call<'_, St>| {
            let (n,): (usize,) = call.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .observer(metrics)
        .max_response_len(10_000)
        .too_large_code(-32003)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successful_notifications_are_not_counted_as_errors() {
    let _s = SERIAL.lock().await;
    let metrics = Arc::new(Metrics::default());
    let limits = Limits::default();
    let service = HttpService::new(counting_dispatcher(metrics.clone()), &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).serve(listener, service, shutdown.clone()));
    let mut sender = h2::<Full<Bytes>>(addr).await;
    let r = sender
        .send_request(post(r#"{"jsonrpc":"2.0","method":"echo"}"#))
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = sender
        .send_request(post(
            r#"[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"echo"}]"#,
        ))
        .await
        .unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v, json!([{"jsonrpc":"2.0","id":1,"result":"ok"}]));
    assert_eq!(metrics.call_count("echo"), 3);
    assert_eq!(
        metrics.error_count(-32000),
        0,
        "two notifications that succeeded are counted as errors:\n{}",
        metrics.render()
    );
    shutdown.trigger();
    tokio::time::timeout(HANG, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_entries_answered_too_large_are_all_counted() {
    use tower::ServiceExt;
    let _s = SERIAL.lock().await;
    let metrics = Arc::new(Metrics::default());
    let svc = HttpService::new(
        counting_dispatcher(metrics.clone()),
        &Limits::default(),
        None,
    );
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"big","params":[20000]},{"jsonrpc":"2.0","id":2,"method":"echo"}]"#;
    let r = svc.oneshot(post(batch)).await.unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v[0]["error"]["code"], -32003);
    assert_eq!(v[1]["error"]["code"], -32003, "{v}");
    assert_eq!(
        metrics.error_count(-32003),
        2,
        "two replies carry -32003:\n{}",
        metrics.render()
    );
}
