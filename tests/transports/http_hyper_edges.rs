//! The HTTP transport's hyper path (HTTP/2, and hyper's HTTP/1.1 with
//! `Server::own_http1(false)`) and its observability, from a review:
//! each test failed before the fix it names.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http_replies::{request, responses_of, summary};

const HANG: Duration = Duration::from_secs(30);
const TIMEOUT_CODE: i32 = -32002;

fn dispatcher(metrics: Arc<Metrics>) -> Dispatcher<(), WithAsync> {
    with_timeout(metrics, Some(Duration::from_millis(100)))
}

fn with_timeout(metrics: Arc<Metrics>, timeout: Option<Duration>) -> Dispatcher<(), WithAsync> {
    Dispatcher::builder(())
        .method("echo", |_c: Call<'_, ()>| Ok::<_, RpcError>("ok"))
        .async_method("hold", |call: AsyncCall<()>| async move {
            let (ms,): (u64,) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>("held")
        })
        .observer(metrics)
        .timeout(timeout)
        .timeout_code(TIMEOUT_CODE)
        .build()
        .unwrap()
}

struct Srv {
    addr: SocketAddr,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(own: bool) -> Srv {
    let metrics = Arc::new(Metrics::default());
    let limits = Limits::default();
    let svc = HttpService::new(dispatcher(metrics.clone()), &limits, Some(metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).metrics(metrics.clone()).own_http1(own);
    let task = tokio::spawn(server.serve(listener, svc, shutdown.clone()));
    Srv {
        addr,
        shutdown,
        metrics,
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

/// One HTTP/1.1 request on a connection of its own; the raw response.
async fn h1(addr: SocketAddr, body: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut out))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------
// A call answered with the timeout error was not counted at all: neither
// under its method nor under the timeout code (the engine answered it
// without telling the observer), so a gateway's dashboard showed no
// timeouts, ever.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_calls_are_counted_once_under_their_method_and_code() {
    const SINGLE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"hold","params":[20000]}"#;
    const BATCH: &str = r#"[{"jsonrpc":"2.0","id":1,"method":"hold","params":[20000]},{"jsonrpc":"2.0","id":2,"method":"echo"}]"#;
    // rpcwire's own loop, then hyper's HTTP/1.1 and HTTP/2.
    for own in [true, false] {
        let srv = start(own).await;
        let text = h1(srv.addr, SINGLE).await;
        assert!(text.contains(r#""code":-32002"#), "own {own}: {text}");
        let text = h1(srv.addr, BATCH).await;
        assert!(text.contains(r#""code":-32002"#), "own {own}: {text}");
        let m = &srv.metrics;
        assert_eq!(m.error_count(TIMEOUT_CODE), 2, "own {own}:\n{}", m.render());
        assert_eq!(m.call_count("hold"), 2, "own {own}:\n{}", m.render());
        assert_eq!(m.call_count("echo"), 1, "own {own}:\n{}", m.render());
        srv.stop().await;
    }
    let srv = start(true).await;
    let stream = TcpStream::connect(srv.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let r = sender.send_request(post(SINGLE)).await.unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v["error"]["code"], TIMEOUT_CODE, "{v}");
    // A notification that times out: no reply, but its error counted as
    // a failing notification's is.
    let r = sender
        .send_request(post(
            r#"{"jsonrpc":"2.0","method":"hold","params":[20000]}"#,
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let m = srv.metrics.clone();
    tokio::time::timeout(HANG, async {
        while m.call_count("hold") < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the timed-out notification is counted:\n{}", m.render()));
    assert_eq!(m.error_count(TIMEOUT_CODE), 2, "{}", m.render());
    srv.stop().await;
}

// ---------------------------------------------------------------------------
// Feature `tracing`: a call's span records the error code it was answered
// with; a timed-out call's span recorded none (it looked like a success),
// and every span closes, the calls cancelled by a layer's timeout too.

#[cfg(feature = "tracing")]
mod spans {
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, Once};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// A span as the subscriber saw it.
    #[derive(Clone, Debug, Default)]
    pub struct Seen {
        pub fields: HashMap<String, String>,
        /// Handles alive (0: closed).
        pub refs: usize,
    }

    /// Keeps every span's fields and whether it closed.
    #[derive(Default)]
    pub struct Spans {
        pub spans: Mutex<HashMap<u64, Seen>>,
    }

    thread_local! {
        /// The collector of the test running on this thread.
        static CURRENT: Cell<Option<&'static Spans>> = const { Cell::new(None) };
    }

    /// Span ids, unique across tests.
    static NEXT: AtomicU64 = AtomicU64::new(1);

    /// Collects the spans made on this thread into `spans` until the guard
    /// drops. One global subscriber hands them to each thread's collector:
    /// with a scoped subscriber per test (`set_default`), tests running at
    /// once on other threads, with none, raced it for the span callsites'
    /// interest and level, and a test saw no span at all (about 1 run in
    /// 20).
    pub fn install(spans: &'static Spans) -> Installed {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| tracing::subscriber::set_global_default(Global).unwrap());
        CURRENT.with(|c| c.set(Some(spans)));
        Installed
    }

    pub struct Installed;

    impl Drop for Installed {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(None));
        }
    }

    fn current() -> Option<&'static Spans> {
        CURRENT.with(Cell::get)
    }

    struct Fields<'a>(&'a mut HashMap<String, String>);
    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().into(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().into(), value.into());
        }
    }

    struct Global;

    impl Subscriber for Global {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &Attributes<'_>) -> Id {
            let id = NEXT.fetch_add(1, Ordering::Relaxed);
            if let Some(spans) = current() {
                let mut seen = Seen {
                    refs: 1,
                    ..Seen::default()
                };
                attrs.record(&mut Fields(&mut seen.fields));
                spans.spans.lock().unwrap().insert(id, seen);
            }
            Id::from_u64(id)
        }
        fn record(&self, span: &Id, values: &Record<'_>) {
            let Some(spans) = current() else { return };
            if let Some(seen) = spans.spans.lock().unwrap().get_mut(&span.into_u64()) {
                values.record(&mut Fields(&mut seen.fields));
            }
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
        fn clone_span(&self, id: &Id) -> Id {
            if let Some(spans) = current()
                && let Some(seen) = spans.spans.lock().unwrap().get_mut(&id.into_u64())
            {
                seen.refs += 1;
            }
            id.clone()
        }
        fn try_close(&self, id: Id) -> bool {
            let Some(spans) = current() else { return true };
            let mut spans = spans.spans.lock().unwrap();
            let Some(seen) = spans.get_mut(&id.into_u64()) else {
                return true;
            };
            seen.refs -= 1;
            seen.refs == 0
        }
    }
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn timed_out_and_cancelled_calls_spans_say_so_and_close() {
    use tower::{Service, ServiceBuilder, ServiceExt};
    let spans: &'static spans::Spans = Box::leak(Box::default());
    let _installed = spans::install(spans);
    let metrics = Arc::new(Metrics::default());
    let svc = HttpService::new(dispatcher(metrics), &Limits::default(), None);
    // The dispatcher's timeout (100 ms): answered -32002.
    let r = svc
        .clone()
        .oneshot(post(
            r#"{"jsonrpc":"2.0","id":7,"method":"hold","params":[20000]}"#,
        ))
        .await
        .unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v["error"]["code"], TIMEOUT_CODE, "{v}");
    // A layer's timeout (shorter) drops the call before it answers.
    let mut layered = ServiceBuilder::new()
        .timeout(Duration::from_millis(20))
        .service(svc.clone());
    let r = ServiceExt::<Request<Full<Bytes>>>::ready(&mut layered)
        .await
        .unwrap()
        .call(post(
            r#"{"jsonrpc":"2.0","id":8,"method":"hold","params":[20000]}"#,
        ))
        .await;
    assert!(r.is_err());
    drop((layered, svc));
    let seen: Vec<spans::Seen> = spans.spans.lock().unwrap().values().cloned().collect();
    let by_id = |id: &str| {
        seen.iter()
            .find(|s| s.fields.get("id").is_some_and(|v| v.contains(id)))
            .unwrap_or_else(|| panic!("a span with id {id}: {seen:?}"))
    };
    let timed_out = by_id("7");
    assert_eq!(
        timed_out.fields.get("method").map(String::as_str),
        Some("hold")
    );
    assert_eq!(
        timed_out.fields.get("code").map(String::as_str),
        Some("-32002"),
        "{timed_out:?}"
    );
    assert_eq!(timed_out.refs, 0, "closed: {timed_out:?}");
    let cancelled = by_id("8");
    assert_eq!(cancelled.refs, 0, "closed: {cancelled:?}");
    assert_eq!(cancelled.fields.get("code"), None, "{cancelled:?}");
}

// ---------------------------------------------------------------------------
// The service wrapped in tower layers (as `PerConnection`'s docs show) and
// a layer fails a request (its timeout): hyper closed the HTTP/1.1
// connection without an answer (the client saw only the close, and lost
// the connection's other requests) and reset the HTTP/2 stream. Now the
// client gets a 500 with a JSON-RPC -32603 body, and the connection
// serves on.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_layer_is_answered_500_with_a_json_rpc_error() {
    let metrics = Arc::new(Metrics::default());
    let limits = Limits::default();
    // No timeout of the dispatcher's: the layer's (1 s) is the one.
    let d = with_timeout(metrics.clone(), None);
    let svc = HttpService::new(d, &limits, Some(metrics.clone()));
    let make = move |peer| {
        tower::ServiceBuilder::new()
            .timeout(Duration::from_secs(1))
            .service(svc.clone().with_peer_addr(peer))
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).metrics(metrics.clone()).serve(
        listener,
        make,
        shutdown.clone(),
    ));
    let hold = r#"{"jsonrpc":"2.0","id":1,"method":"hold","params":[60000]}"#;
    let echo = r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#;

    // HTTP/1.1, keep-alive: the failed request, then another on the same
    // connection (pipelined).
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut both = request("content-type: application/json\r\n", hold);
    both.push_str(&request(
        "content-type: application/json\r\nconnection: close\r\n",
        echo,
    ));
    s.write_all(both.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut raw))
        .await
        .expect("the answers")
        .unwrap();
    let responses = responses_of(&raw);
    assert_eq!(responses.len(), 2, "{}", summary(&responses, true));
    let (status, headers, body) = &responses[0];
    assert_eq!(status, "500 Internal Server Error");
    assert!(headers.contains(&("content-type".into(), "application/json".into())));
    let v = json_of(body.as_bytes());
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    let (status, _, body) = &responses[1];
    assert_eq!(status, "200 OK");
    assert_eq!(json_of(body.as_bytes())["result"], "ok");

    // HTTP/2: the failed stream gets the 500, the next one its answer.
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let r = sender.send_request(post(hold)).await.unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v["error"]["code"], -32603, "{v}");
    let r = sender.send_request(post(echo)).await.unwrap();
    let st = r.status();
    let b = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));

    shutdown.trigger();
    tokio::time::timeout(HANG, task).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------
// `Limits::max_in_flight: 0` (taken as 1 by the stream transports,
// and by rpcwire's own HTTP/1.1 loop, which answers one request
// at a time) was sent as HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS = 0:
// every HTTP/2 request was refused, on a server HTTP/1.1 clients used fine.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_with_max_in_flight_zero_still_serves_one_stream_at_a_time() {
    let metrics = Arc::new(Metrics::default());
    let limits = Limits {
        max_in_flight: 0,
        ..Limits::default()
    };
    let svc = HttpService::new(dispatcher(metrics.clone()), &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).serve(listener, svc, shutdown.clone()));
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    for _ in 0..2 {
        let r = tokio::time::timeout(
            HANG,
            sender.send_request(post(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)),
        )
        .await
        .expect("an answer")
        .expect("the stream is not refused");
        assert_eq!(r.status(), 200);
    }
    shutdown.trigger();
    tokio::time::timeout(HANG, task).await.unwrap().unwrap();
}

// A call whose deadline passed while it waited for a slot (past the
// dispatcher's `max_in_flight`) is answered -32002 without running: its
// span had an empty method and no id.
#[cfg(feature = "tracing")]
#[tokio::test(start_paused = true)]
async fn a_call_timed_out_in_the_queue_has_a_span_naming_it() {
    use tower::ServiceExt;
    let spans: &'static spans::Spans = Box::leak(Box::default());
    let _installed = spans::install(spans);
    let d = Dispatcher::builder(())
        .async_method("hold", |call: AsyncCall<()>| async move {
            let (ms,): (u64,) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>("held")
        })
        .max_in_flight(1)
        .timeout(Some(Duration::from_millis(100)))
        .timeout_code(TIMEOUT_CODE)
        .build()
        .unwrap();
    let svc = HttpService::new(d, &Limits::default(), None);
    // The clock is paused: both wait from the same instant, so the second
    // one's deadline has passed when the first's slot frees.
    let batch = r#"[{"jsonrpc":"2.0","id":"a","method":"hold","params":[20000]},{"jsonrpc":"2.0","id":"b","method":"hold","params":[20000]}]"#;
    let r = svc.oneshot(post(batch)).await.unwrap();
    let v = json_of(&r.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(v[0]["error"]["code"], TIMEOUT_CODE, "{v}");
    assert_eq!(v[1]["error"]["code"], TIMEOUT_CODE, "{v}");
    let seen: Vec<spans::Seen> = spans.spans.lock().unwrap().values().cloned().collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for id in ["a", "b"] {
        let span = seen
            .iter()
            .find(|s| s.fields.get("id") == Some(&format!("\"{id}\"")))
            .unwrap_or_else(|| panic!("a span with id {id}: {seen:?}"));
        assert_eq!(
            span.fields.get("method").map(String::as_str),
            Some("hold"),
            "{span:?}"
        );
        assert_eq!(
            span.fields.get("code").map(String::as_str),
            Some("-32002"),
            "{span:?}"
        );
        assert_eq!(span.refs, 0, "closed: {span:?}");
    }
}
