//! Edges of the servers: subscriptions, graceful shutdown, limits and metrics
//! across transports, over loopback with real clients. Every server
//! listens on 127.0.0.1 port 0; time bounds are generous deadlines that
//! only tell a hang, never measurements.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::subscriptions::{SubscriptionConfig, Subscriptions};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::combined_server::{CombinedServer, StartCombined};
use crate::http_request::post_close;

/// Producers of `watched` subscriptions that saw their subscription end.
static WATCHED_ENDED: AtomicUsize = AtomicUsize::new(0);

/// `sleep_noted` calls started (one test makes them).
static SLEEPS_NOTED: AtomicUsize = AtomicUsize::new(0);

/// Generous: only for not hanging forever, never a measurement.
const PATIENCE: Duration = Duration::from_secs(30);

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn dispatcher(metrics: Arc<Metrics>) -> Dispatcher<(), WithAsync> {
    Dispatcher::builder(())
        .observer(metrics)
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        .async_method("sleep", |c: AsyncCall<()>| async move {
            let (ms,): (u64,) = c.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(ms)
        })
        // `sleep`, counted in `SLEEPS_NOTED` as it starts.
        .async_method("sleep_noted", |c: AsyncCall<()>| async move {
            SLEEPS_NOTED.fetch_add(1, Ordering::SeqCst);
            let (ms,): (u64,) = c.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(ms)
        })
        // `count`, n: notifications 0..n at once, then open until the end.
        .method("eth_subscribe", |c: Call<'_, ()>| {
            let (kind, n): (String, u64) = c.decode()?;
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
            tokio::spawn(async move {
                for i in 0..n {
                    if sink.send(&i).is_err() {
                        return;
                    }
                }
                sink.closed().await;
                if kind == "watched" {
                    WATCHED_ENDED.fetch_add(1, Ordering::SeqCst);
                }
            });
            Ok::<_, RpcError>(id)
        })
        // An async handler that subscribes, lets its producer send, and
        // only then (after `ms`) returns the id.
        .async_method("subscribe_later", |c: AsyncCall<()>| async move {
            let (n, ms): (u64, u64) = c.decode()?;
            let (id, sink) = Subscriptions::of(&c.ctx)?.subscribe()?;
            for i in 0..n {
                sink.send(&i)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tokio::spawn(async move { sink.closed().await });
            Ok::<_, RpcError>(id)
        })
        .method("eth_unsubscribe", |c: Call<'_, ()>| {
            let (id,): (&str,) = c.decode()?;
            Ok::<_, RpcError>(Subscriptions::of(c.ctx)?.unsubscribe(id))
        })
        .build()
        .unwrap()
}

async fn start_ws(
    limits: Limits,
    config: SubscriptionConfig,
) -> (
    SocketAddr,
    Arc<Metrics>,
    Shutdown,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let metrics = Arc::new(Metrics::default());
    let server = WsServer::new(dispatcher(metrics.clone()))
        .limits(limits)
        .metrics(metrics.clone())
        .subscriptions(config);
    let shutdown = server.shutdown_signal().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { server.serve(listener).await });
    (addr, metrics, shutdown, task)
}

/// A line-framed TCP server of [`dispatcher`] under `limits`, its
/// metrics counted in `metrics`, on a port of its own.
async fn start_tcp(
    limits: Limits,
    metrics: Arc<Metrics>,
) -> (SocketAddr, Shutdown, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(serve_tcp(
        listener,
        dispatcher(metrics.clone()),
        Lines::new,
        limits,
        Some(metrics),
        shutdown.clone(),
    ));
    (addr, shutdown, task)
}

async fn connect(addr: SocketAddr) -> Client {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    ws
}

/// The next JSON message (pings and pongs skipped).
async fn next_json(ws: &mut Client) -> Value {
    loop {
        let message = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("a message in time")
            .expect("the connection open")
            .unwrap();
        match message {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A shutdown triggered before any server has started waiting for it (a
/// signal handler firing early, or `trigger` right after `spawn`) must
/// still stop the server: `Shutdown` promises "servers stop accepting".
#[test]
fn a_shutdown_triggered_before_anyone_waits_is_kept() {
    let shutdown = Shutdown::new();
    shutdown.trigger();
    assert!(shutdown.is_triggered());
}

#[tokio::test(flavor = "current_thread")]
async fn a_ws_server_triggered_before_it_first_runs_stops() {
    let metrics = Arc::new(Metrics::default());
    let server = WsServer::new(dispatcher(metrics));
    let shutdown = server.shutdown_signal().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    // Spawned, not yet run (one thread): the trigger comes first.
    let task = tokio::spawn(async move { server.serve(listener).await });
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn tcp_and_http_servers_triggered_before_they_first_run_stop() {
    let metrics = Arc::new(Metrics::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = Shutdown::new();
    let tcp = tokio::spawn(serve_tcp(
        listener,
        dispatcher(metrics.clone()),
        Lines::new,
        Limits::default(),
        Some(metrics.clone()),
        shutdown.clone(),
    ));
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, tcp)
        .await
        .expect("the TCP server stops")
        .unwrap();

    let limits = Limits::default();
    let service = HttpService::new(dispatcher(metrics.clone()), &limits, Some(metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = Shutdown::new();
    let http = tokio::spawn(Server::new(limits).serve(listener, service, shutdown.clone()));
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, http)
        .await
        .expect("the HTTP server stops")
        .unwrap();
}

/// Reads `n` notifications of subscription `id` and checks they carry
/// `0..n` in order.
async fn expect_counted(ws: &mut Client, id: &str, n: u64) {
    for i in 0..n {
        let notification = next_json(ws).await;
        assert_eq!(notification["params"]["subscription"], id, "{notification}");
        assert_eq!(notification["params"]["result"], i);
    }
}

/// The subscription docs: the client learns the id before its first
/// notification, also when the reply comes later (geth holds a batch's
/// notifications until the batch's reply is written). A synchronous
/// `eth_subscribe` in a batch whose other entry awaits must not see its
/// notifications arrive before the reply carrying its id (they did, before
/// the transports shared a `ReplyGate` with the registry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_in_a_batch_is_announced_before_its_notifications() {
    let (addr, _metrics, shutdown, task) =
        start_ws(Limits::default(), SubscriptionConfig::default()).await;
    let mut ws = connect(addr).await;
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["count", 3]},
        {"jsonrpc":"2.0","id":2,"method":"sleep","params":[300]},
    ]);
    ws.send(Message::text(batch.to_string())).await.unwrap();
    let first = next_json(&mut ws).await;
    assert!(
        first.is_array(),
        "the batch's reply (with the subscription id) comes first, got {first}"
    );
    let id = first[0]["result"].as_str().unwrap().to_owned();
    expect_counted(&mut ws, &id, 3).await;
    drop(ws);
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// The same for an async handler that subscribes, lets its producer send,
/// and returns the id only later: the notifications wait for its reply;
/// and a subscription opened by a message answered at once is not held
/// (its notifications follow its reply without waiting for a slow call
/// running beside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_subscribe_is_announced_before_its_notifications() {
    let (addr, _metrics, shutdown, task) =
        start_ws(Limits::default(), SubscriptionConfig::default()).await;
    let mut ws = connect(addr).await;
    let call = json!({"jsonrpc":"2.0","id":7,"method":"subscribe_later","params":[2, 300]});
    ws.send(Message::text(call.to_string())).await.unwrap();
    let first = next_json(&mut ws).await;
    assert_eq!(
        first["id"], 7,
        "the reply with the id comes first, got {first}"
    );
    let id = first["result"].as_str().unwrap().to_owned();
    expect_counted(&mut ws, &id, 2).await;
    // A slow call in flight does not hold back a subscription made by
    // another message, answered at once.
    let slow = json!({"jsonrpc":"2.0","id":8,"method":"sleep","params":[1000]});
    ws.send(Message::text(slow.to_string())).await.unwrap();
    let sub = json!({"jsonrpc":"2.0","id":9,"method":"eth_subscribe","params":["count", 2]});
    ws.send(Message::text(sub.to_string())).await.unwrap();
    let reply = next_json(&mut ws).await;
    assert_eq!(reply["id"], 9, "{reply}");
    let id = reply["result"].as_str().unwrap().to_owned();
    expect_counted(&mut ws, &id, 2).await;
    assert_eq!(next_json(&mut ws).await["id"], 8);
    drop(ws);
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// Over TCP too: a batch's subscription is announced (the batch reply)
/// before its notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_subscription_over_tcp_is_announced_first() {
    let (addr, shutdown, task) = start_tcp(Limits::default(), Arc::default()).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    w.write_all(
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_subscribe\",\"params\":[\"count\",3]},\
          {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sleep\",\"params\":[300]}]\n",
    )
    .await
    .unwrap();
    let mut received = Vec::new();
    for _ in 0..4 {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("the connection open");
        received.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert!(
        received[0].is_array(),
        "the batch reply first: {received:?}"
    );
    let id = received[0][0]["result"].as_str().unwrap();
    for (i, n) in received[1..].iter().enumerate() {
        assert_eq!(n["params"]["subscription"], id);
        assert_eq!(n["params"]["result"], i);
    }
    drop(w);
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
}

/// Response size: a batch whose too-large replies alone pass
/// `max_response_len` is answered with one too-large error, and that
/// breach is counted like every other too-large reply (the error counter
/// of its code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_whole_for_its_response_size_is_counted() {
    let metrics = Arc::new(Metrics::default());
    let d = Dispatcher::builder(())
        .observer(metrics.clone())
        .max_response_len(200)
        .too_large_code(-32003)
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        .build()
        .unwrap();
    let limits = Limits::default();
    let service = HttpService::new(d, &limits, Some(metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).metrics(metrics.clone()).serve(
        listener,
        service,
        shutdown.clone(),
    ));
    // First a single call that is answered: the counter works.
    let entries: Vec<Value> = (0..20)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"eth_blockNumber"}))
        .collect();
    let body = Value::Array(entries).to_string();
    let (_, response) = post_close(addr, &body).await;
    let reply: Value = serde_json::from_str(&response).unwrap();
    assert_eq!(reply["error"]["code"], -32003, "{reply}");
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(
        metrics.error_count(-32003),
        1,
        "the refused batch is counted: {}",
        metrics.render()
    );
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();

    // The synchronous entry point takes the same decision: counted too.
    let sync_metrics = Arc::new(Metrics::default());
    let d = Dispatcher::builder(())
        .observer(sync_metrics.clone())
        .max_response_len(200)
        .too_large_code(-32003)
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        .build()
        .unwrap();
    let mut out = Vec::new();
    d.handle(body.as_bytes(), &mut rpcwire::Connection::new(), &mut out);
    let reply: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(reply["error"]["code"], -32003, "{reply}");
    assert_eq!(sync_metrics.error_count(-32003), 1);
}

/// `Limits::max_connections` is "connections open at once": a server told
/// "no limit" (`usize::MAX`) serves, as the WebSocket and HTTP servers do,
/// instead of panicking in its accept loop (a second connection served
/// beside the first); and one told 0 serves one at a time, as every server
/// takes 0 (a second refused while the first is open; it refused every
/// connection, where the WebSocket and MCP servers took 0 as 1; found by a
/// review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_server_with_no_or_a_zero_connection_limit_serves() {
    for max_connections in [usize::MAX, 0] {
        a_tcp_server_serves_with(max_connections).await;
    }
}

async fn a_tcp_server_serves_with(max_connections: usize) {
    let metrics = Arc::new(Metrics::default());
    let limits = Limits {
        max_connections,
        ..Limits::default()
    };
    let (addr, shutdown, task) = start_tcp(limits, metrics.clone()).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_blockNumber\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    let _ = tokio::time::timeout(PATIENCE, BufReader::new(r).read_line(&mut line))
        .await
        .expect("an answer or a close in time");
    assert_eq!(
        line,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0x1b4\"}\n"
    );
    // A second at once, while the first is open: with 0 (one at a time)
    // closed unanswered and counted, with no limit served.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"eth_blockNumber\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    let _ = tokio::time::timeout(PATIENCE, BufReader::new(&mut second).read_line(&mut line))
        .await
        .expect("an answer or a close in time");
    let refused = metrics.limit_count(rpcwire::server::LimitKind::Connections);
    if max_connections == 0 {
        assert_eq!((line.as_str(), refused), ("", 1));
    } else {
        assert_eq!(
            (line.as_str(), refused),
            ("{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":\"0x1b4\"}\n", 0)
        );
    }
    drop(w);
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the server stops")
        .expect("the server did not panic");
}

/// [`a_tcp_server_with_no_or_a_zero_connection_limit_serves`] over HTTP,
/// on both HTTP/1.1 paths: 0 connections at once is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_with_a_zero_connection_limit_serves() {
    let zero = Limits {
        max_connections: 0,
        ..Limits::default()
    };
    for own in [true, false] {
        let service = HttpService::new(dispatcher(Arc::new(Metrics::default())), &zero, None);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server = Server::new(zero.clone()).own_http1(own);
        let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
        let (status, body) = post_close(
            addr,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        )
        .await;
        assert_eq!(status, 200, "own loop {own}: {body}");
        assert!(
            body.ends_with(r#""result":"0x1b4"}"#),
            "own loop {own}: {body}"
        );
        shutdown.trigger();
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the HTTP server stops")
            .expect("the HTTP server did not panic");
    }
}

/// Subscriptions over TCP / IPC, as geth and reth serve `eth_subscribe` on
/// their IPC socket: the stream transports are two-way (handlers notify
/// their client), and `Subscriptions::of` is documented to fail only on a
/// transport without server-pushed messages (plain HTTP). The id comes
/// before the notifications, unsubscribing answers `true` once, and a
/// connection that ends tells its producers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_over_a_tcp_connection() {
    let metrics = Arc::new(Metrics::default());
    let (addr, shutdown, task) = start_tcp(Limits::default(), metrics.clone()).await;
    let before = WATCHED_ENDED.load(Ordering::SeqCst);
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("the connection open");
        serde_json::from_str(&line).unwrap()
    };
    w.write_all(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_subscribe\",\"params\":[\"watched\",3]}\n",
    )
    .await
    .unwrap();
    let reply = next().await;
    let id = reply["result"]
        .as_str()
        .unwrap_or_else(|| panic!("an id, got {reply}"))
        .to_owned();
    for i in 0..3 {
        let n = next().await;
        assert_eq!(n["method"], "eth_subscription");
        assert_eq!(n["params"]["subscription"], id.as_str());
        assert_eq!(n["params"]["result"], i);
    }
    let unsubscribe = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"eth_unsubscribe\",\"params\":[\"{id}\"]}}\n"
    );
    w.write_all(unsubscribe.as_bytes()).await.unwrap();
    assert_eq!(next().await, json!({"jsonrpc":"2.0","id":2,"result":true}));
    w.write_all(unsubscribe.replace("\"id\":2", "\"id\":3").as_bytes())
        .await
        .unwrap();
    assert_eq!(next().await, json!({"jsonrpc":"2.0","id":3,"result":false}));
    // A subscription left open when the client goes: its producer is told.
    w.write_all(
        b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"eth_subscribe\",\"params\":[\"watched\",0]}\n",
    )
    .await
    .unwrap();
    assert!(next().await["result"].is_string());
    drop(w);
    drop(lines);
    tokio::time::timeout(PATIENCE, async {
        while WATCHED_ENDED.load(Ordering::SeqCst) < before + 2 || metrics.connections_open() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the producers are told ({} of 2), the connection counted closed ({} open)",
            WATCHED_ENDED.load(Ordering::SeqCst) - before,
            metrics.connections_open()
        )
    });
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
}

/// On one port, a WebSocket connection's handlers see the upgrade
/// request's headers as HTTP calls see theirs (the `combined` docs say
/// so): one `Authorization` check serves both transports.
#[tokio::test]
async fn combined_websocket_handlers_see_the_upgrade_headers() {
    let d = Dispatcher::builder(())
        .method("whoami", |call: Call<'_, ()>| {
            let Some(auth) = rpcwire::server::http::header(call.ctx, "authorization") else {
                return Err(RpcError::new(-32001, "Unauthorized"));
            };
            let addr = call.ctx.peer_addr().map(|a| a.ip().to_string());
            Ok(json!([
                call.ctx.transport(),
                auth.to_str().unwrap_or(""),
                addr
            ]))
        })
        .build()
        .unwrap();
    let CombinedServer {
        addr,
        shutdown,
        task,
    } = StartCombined::new(d).start().await;

    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}/").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", "Bearer t0k3n".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"whoami"}).to_string();
    ws.send(Message::text(call.clone())).await.unwrap();
    assert_eq!(
        next_json(&mut ws).await["result"],
        json!(["ws", "Bearer t0k3n", "127.0.0.1"])
    );

    let mut anonymous = connect(addr).await;
    anonymous.send(Message::text(call)).await.unwrap();
    assert_eq!(next_json(&mut anonymous).await["error"]["code"], -32001);

    drop((ws, anonymous));
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
}

/// `Duration::MAX` is how a user says "never" (as the dispatcher's
/// timeout takes it): every server took it, and every connection's task
/// then panicked adding it to the clock ("overflow when adding duration
/// to instant"): the HTTP server's idle, header and body clocks, the
/// WebSocket server's shutdown wait. Each serves and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_told_never_to_time_out_serve_and_stop() {
    let never = Limits {
        idle_timeout: Duration::MAX,
        shutdown_grace: Duration::MAX,
        body_timeout: Duration::MAX,
        tcp_keepalive: Some(Duration::MAX),
        ..Limits::default()
    };
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#;
    for own in [true, false] {
        let metrics = Arc::new(Metrics::default());
        let service = HttpService::new(dispatcher(metrics.clone()), &never, None);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server = Server::new(never.clone())
            .header_read_timeout(Duration::MAX)
            .own_http1(own);
        let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
        // The body after its head: the body clock starts.
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            request.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.write_all(request.as_bytes()).await.unwrap();
        let mut got = String::new();
        let _ = tokio::time::timeout(
            PATIENCE,
            tokio::io::AsyncReadExt::read_to_string(&mut s, &mut got),
        )
        .await
        .expect("an answer or a close in time");
        assert!(
            got.starts_with("HTTP/1.1 200") && got.ends_with(answer),
            "own loop {own}: {got:?}"
        );
        shutdown.trigger();
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the HTTP server stops")
            .expect("the HTTP server did not panic");
    }

    let (addr, _, shutdown, task) = start_ws(never.clone(), SubscriptionConfig::default()).await;
    let mut ws = connect(addr).await;
    ws.send(Message::text(request)).await.unwrap();
    assert_eq!(
        next_json(&mut ws).await,
        serde_json::from_str::<Value>(answer).unwrap()
    );
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the WebSocket server stops")
        .expect("the WebSocket server did not panic")
        .unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(serve_tcp(
        listener,
        dispatcher(Arc::new(Metrics::default())),
        Lines::new,
        never,
        None,
        shutdown.clone(),
    ));
    let (r, mut w) = TcpStream::connect(addr).await.unwrap().into_split();
    // A call still running when the shutdown comes: its grace clock starts.
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sleep_noted\",\"params\":[200]}\n")
        .await
        .unwrap();
    // Started (a fixed 50 ms left a busy host reading it after the
    // trigger: not started, not answered).
    crate::eventually::eventually("the call started", || {
        SLEEPS_NOTED.load(Ordering::SeqCst) > 0
    })
    .await;
    shutdown.trigger();
    let mut line = String::new();
    let _ = tokio::time::timeout(PATIENCE, BufReader::new(r).read_line(&mut line))
        .await
        .expect("an answer or a close in time");
    assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":200}\n");
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the TCP server stops")
        .expect("the TCP server did not panic");
}

/// Counts the calls that run at once, the most that ever did, and those
/// done: a handler's state in the tests of `max_in_flight`.
#[derive(Default)]
struct Running {
    now: AtomicUsize,
    peak: AtomicUsize,
    done: AtomicUsize,
}

impl Running {
    /// Runs for `time`, counted.
    async fn hold(&self, time: Duration) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(time).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// An HTTP server (rpcwire's HTTP/1.1 loop, or hyper's) whose `note`
/// notification holds for `hold`, at a dispatcher cap of `cap`.
struct Notes {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
    running: Arc<Running>,
}

impl Notes {
    async fn start(cap: usize, hold: Duration, own: bool) -> Notes {
        let running = Arc::new(Running::default());
        let d = Dispatcher::builder(running.clone())
            .max_in_flight(cap)
            // Holds for `hold`, or for the milliseconds its params name.
            .async_method("note", move |c: AsyncCall<Arc<Running>>| async move {
                let named: Option<(u64,)> = c.decode().ok();
                let time = named.map_or(hold, |(ms,)| Duration::from_millis(ms));
                c.state.hold(time).await;
                Ok::<_, RpcError>(())
            })
            .build()
            .unwrap();
        // Calls still running at the stop are dropped soon after it.
        let limits = Limits {
            shutdown_grace: Duration::from_millis(200),
            ..Limits::default()
        };
        let service = HttpService::new(d, &limits, None);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let task = tokio::spawn(Server::new(limits).own_http1(own).serve(
            listener,
            service,
            shutdown.clone(),
        ));
        Notes {
            addr,
            shutdown,
            task,
            running,
        }
    }

    /// Sends a `note` on `s` and reads its answer's head (a `204`), within
    /// `patience`; `Err` if it did not come.
    async fn send(
        s: &mut TcpStream,
        patience: Duration,
    ) -> Result<(), tokio::time::error::Elapsed> {
        Notes::send_body(s, r#"{"jsonrpc":"2.0","method":"note"}"#, patience).await
    }

    /// [`send`](Notes::send), failing the test with `what` and the calls
    /// done so far if the answer does not come within `patience`.
    async fn expect_answer(&self, s: &mut TcpStream, patience: Duration, what: &str) {
        if Notes::send(s, patience).await.is_err() {
            panic!(
                "{what} unanswered {patience:?} on, {} calls done",
                self.running.done.load(Ordering::SeqCst)
            );
        }
    }

    /// [`send`](Notes::send) with this body.
    async fn send_body(
        s: &mut TcpStream,
        body: &str,
        patience: Duration,
    ) -> Result<(), tokio::time::error::Elapsed> {
        let request = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            tokio::time::timeout(patience, tokio::io::AsyncReadExt::read_exact(s, &mut byte))
                .await?
                .unwrap();
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 204"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        Ok(())
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the server stops")
            .unwrap();
    }
}

/// Async notifications still running when their request's `204` went
/// out ran on tasks of their own, outside the connection's count: one
/// keep-alive connection sending notifications one after another ran all
/// of them at once (200 under a cap of 8), each holding its body. The
/// calls a connection left running now count against the dispatcher's
/// `max_in_flight` for that connection: past it, a request's answer waits
/// for its own calls (so at most the cap, and the calls of the request
/// being answered, run). On rpcwire's HTTP/1.1 loop and on hyper's alike.
/// Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_left_running_over_http_count_against_the_cap() {
    const CAP: usize = 8;
    for own in [true, false] {
        let notes = Notes::start(CAP, Duration::from_millis(300), own).await;
        let mut s = TcpStream::connect(notes.addr).await.unwrap();
        for _ in 0..40 {
            Notes::send(&mut s, PATIENCE)
                .await
                .expect("an answer in time");
        }
        let peak = notes.running.peak.load(Ordering::SeqCst);
        assert!(
            peak <= CAP + 1,
            "own loop {own}: {peak} notifications ran at once"
        );
        assert!(peak >= CAP / 2, "own loop {own}: only {peak} ran at once");
        notes.stop().await;
    }
}

/// A request waiting at the cap for its own calls (the connection's
/// others left running fill it) was answered only when something else
/// woke its task: its calls, notifications, end with no reply, and the
/// dispatcher's poll reports only replies, so the wait went on after they
/// ended (a run of the test above under load waited out its 30 s).
/// Here each request's call holds 200 ms at a cap of 1: the second's
/// answer comes once its own call ends, not at the client's next bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_waiting_at_the_cap_goes_when_its_own_calls_end() {
    for own in [true, false] {
        let notes = Notes::start(1, Duration::from_millis(200), own).await;
        let mut s = TcpStream::connect(notes.addr).await.unwrap();
        for n in 1..=3 {
            // Far above the 200 ms a call holds, and below the 10 s after
            // which the connection's own timers woke the task anyway; the
            // client sends nothing more until the answer comes.
            let what = format!("own loop {own}: request {n}");
            notes
                .expect_answer(&mut s, Duration::from_secs(8), &what)
                .await;
        }
        assert!(notes.running.peak.load(Ordering::SeqCst) <= 2);
        notes.stop().await;
    }
}

/// A request waiting at the cap only because its connection's calls
/// left running fill it may go once those end (its own calls run on, as
/// the first request's did); nothing woke it when they ended, so it
/// waited for its own call (60 s here). Found by a review of the crate's
/// waits for lost wakeups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_waiting_at_the_cap_goes_when_the_calls_left_running_end() {
    for own in [true, false] {
        let notes = Notes::start(1, Duration::from_secs(60), own).await;
        let mut s = TcpStream::connect(notes.addr).await.unwrap();
        // Answered at once, its call left running for 300 ms.
        let first = r#"{"jsonrpc":"2.0","method":"note","params":[300]}"#;
        Notes::send_body(&mut s, first, PATIENCE)
            .await
            .expect("the first answered");
        // Its call (60 s) finds the cap full: answered once the first's
        // ends, well within 8 s.
        let what = format!("own loop {own}: the second");
        notes
            .expect_answer(&mut s, Duration::from_secs(8), &what)
            .await;
        drop(s);
        notes.stop().await;
    }
}

/// An async notification holds no message slot: the WebSocket driver
/// counted messages alone against `Limits::max_in_flight`, so a client's
/// stream of notifications was read without end and every one started or
/// queued with its input (a review's reproduction: 40,000 of 16 KiB, RSS
/// 3 -> 656 MiB). Calls count too now, as the stream driver counts them:
/// past the limit the connection is not read until calls finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_notifications_over_websocket_count_against_the_limit() {
    const LIMIT: usize = 4;
    let running = Arc::new(Running::default());
    let d = Dispatcher::builder(running.clone())
        .async_method("note", |c: AsyncCall<Arc<Running>>| async move {
            c.state.hold(Duration::from_millis(100)).await;
            Ok::<_, RpcError>(())
        })
        .build()
        .unwrap();
    let limits = Limits {
        max_in_flight: LIMIT,
        ..Limits::default()
    };
    let server = WsServer::new(d).limits(limits);
    let shutdown = server.shutdown_signal().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { server.serve(listener).await });
    let mut ws = connect(addr).await;
    for _ in 0..40 {
        ws.send(Message::text(r#"{"jsonrpc":"2.0","method":"note"}"#))
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while running.done.load(Ordering::SeqCst) < 40 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the 40 notifications ran in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let peak = running.peak.load(Ordering::SeqCst);
    assert!(
        peak <= LIMIT,
        "{peak} notifications ran at once under a limit of {LIMIT}"
    );
    assert!(peak >= LIMIT / 2, "only {peak} ran at once");
    shutdown.trigger();
    drop(ws);
    let _ = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the server stops");
}

/// `Limits::max_queued` of `usize::MAX` (no limit) is served: tokio's
/// channel under the outbox panics past its semaphore's permits, and every
/// WebSocket and stream connection's task died as it opened.
#[tokio::test]
async fn max_queued_of_usize_max_is_served() {
    let limits = Limits {
        max_queued: usize::MAX,
        ..Limits::default()
    };
    let (addr, _, shutdown, task) = start_ws(limits.clone(), SubscriptionConfig::default()).await;
    let mut ws = connect(addr).await;
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["result"], "0x1b4");
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    let (addr, shutdown, tcp) = start_tcp(limits, Arc::default()).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"eth_blockNumber\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, BufReader::new(r).read_line(&mut line))
        .await
        .expect("a reply in time")
        .unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(reply["result"], "0x1b4");
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, tcp).await.unwrap().unwrap();
}
