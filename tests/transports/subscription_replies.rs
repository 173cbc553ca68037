//! A subscription is only worth keeping when its id reaches the client: a
//! handler that subscribed and whose reply was then replaced (by the
//! too-large error in a batch past `max_response_len`, by its own error or
//! panic, by the timeout of an async call) must leave no subscription
//! behind. Checked over real loopback connections, WebSocket and TCP (one
//! message per line): the subscription is closed (the connection's
//! `Subscriptions::len()` is 0, its producer sees its sink closed), none
//! of its notifications reach the client, and it does not hold the place
//! a later subscription needs under `max_per_connection = 1`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rpcwire::dispatch::{AsyncCall, CallRecord, Observer, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::server::Shutdown;
use rpcwire::server::stream::Driver;
use rpcwire::server::subscriptions::{Sink, SubscriptionConfig, Subscriptions};
use rpcwire::server::ws::WsServer;
use rpcwire::{Call, Context, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Generous: only for not hanging forever, never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

/// The response size limit of every server here: `big_later`'s result
/// passes it.
const MAX_RESPONSE_LEN: usize = 2000;

#[derive(Default)]
struct Lab {
    /// Notified when a `big_later` call has been answered (its reply is
    /// in its batch): `subscribe_after_big` waits for it, so that it is
    /// answered after the batch went past the limit.
    big_answered: tokio::sync::Notify,
    /// Producers that saw their subscription end.
    producers_stopped: AtomicUsize,
    stopped: tokio::sync::Notify,
}

/// Tells `subscribe_after_big` that `big_later` has been answered.
struct BigWatch(Arc<Lab>);

impl Observer for BigWatch {
    fn on_call(&self, call: &CallRecord<'_>) {
        if call.method == Some("big_later") {
            self.0.big_answered.notify_one();
        }
    }
}

/// Subscribes on the connection of `ctx` and starts a producer that sends a
/// notification every millisecond until the subscription ends.
fn subscribe_ticking(ctx: &Context, lab: &Arc<Lab>) -> Result<String, RpcError> {
    let (id, sink) = Subscriptions::of(ctx)?.subscribe()?;
    tokio::spawn(tick(sink, Arc::clone(lab)));
    Ok(id.to_string())
}

async fn tick(sink: Sink, lab: Arc<Lab>) {
    for i in 0u64.. {
        tokio::select! {
            _ = sink.closed() => break,
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        let _ = sink.send(&i);
    }
    lab.producers_stopped.fetch_add(1, Ordering::SeqCst);
    lab.stopped.notify_one();
}

fn dispatcher(lab: Arc<Lab>, timeout: Duration) -> Dispatcher<Arc<Lab>, WithAsync> {
    Dispatcher::builder(Arc::clone(&lab))
        .max_response_len(MAX_RESPONSE_LEN)
        .too_large_code(-32003)
        .timeout(Some(timeout))
        .timeout_code(-32002)
        .quiet_panics(true)
        .observer(Arc::new(BigWatch(lab)))
        .method("eth_subscribe", |c: Call<'_, Arc<Lab>>| {
            subscribe_ticking(c.ctx, c.state)
        })
        .method("subscribe_then_fail", |c: Call<'_, Arc<Lab>>| {
            subscribe_ticking(c.ctx, c.state)?;
            Err::<(), _>(RpcError::invalid_params("changed my mind"))
        })
        .method("subscribe_then_panic", |c: Call<'_, Arc<Lab>>| {
            subscribe_ticking(c.ctx, c.state)?;
            panic!("after subscribing");
            #[allow(unreachable_code)]
            Ok::<(), RpcError>(())
        })
        .method("subs_len", |c: Call<'_, Arc<Lab>>| {
            Ok::<_, RpcError>(Subscriptions::of(c.ctx)?.len())
        })
        .async_method("big_later", |c: AsyncCall<Arc<Lab>>| async move {
            let (n,): (usize,) = c.decode()?;
            tokio::task::yield_now().await;
            Ok::<_, RpcError>("x".repeat(n))
        })
        // Subscribes at once, answers once `big_later` has been answered
        // (as an upstream's answer comes after other calls' in a gateway).
        .async_method("subscribe_after_big", |c: AsyncCall<Arc<Lab>>| async move {
            let id = subscribe_ticking(&c.ctx, &c.state)?;
            c.state.big_answered.notified().await;
            Ok::<_, RpcError>(id)
        })
        // Asks its client to confirm; the waiter of the client's answer
        // (run by the transport, not handler code of any request)
        // subscribes.
        .method("subscribe_when_confirmed", |c: Call<'_, Arc<Lab>>| {
            let (ctx, lab) = (c.ctx.clone(), Arc::clone(c.state));
            let peer = c.ctx.peer().expect("a two-way transport");
            peer.request_with("confirm", None::<&()>, None, move |_| {
                subscribe_ticking(&ctx, &lab).expect("a place for the subscription");
            })
            .map_err(|e| RpcError::internal(e.to_string()))?;
            Ok::<_, RpcError>("asked")
        })
        .async_method("fail_later", |_: AsyncCall<Arc<Lab>>| async move {
            tokio::task::yield_now().await;
            Err::<(), _>(RpcError::invalid_params("changed my mind"))
        })
        // Subscribes, then answers with a result past the size limit: the
        // reply is the too-large error, without the subscription's id.
        .async_method("subscribe_then_big", |c: AsyncCall<Arc<Lab>>| async move {
            subscribe_ticking(&c.ctx, &c.state)?;
            tokio::task::yield_now().await;
            Ok::<_, RpcError>("x".repeat(MAX_RESPONSE_LEN))
        })
        // Subscribes, then never answers: the call times out.
        .async_method("subscribe_then_hang", |c: AsyncCall<Arc<Lab>>| async move {
            subscribe_ticking(&c.ctx, &c.state)?;
            std::future::pending::<Result<(), RpcError>>().await
        })
        .build()
        .unwrap()
}

fn one_subscription() -> SubscriptionConfig {
    SubscriptionConfig {
        max_per_connection: 1,
        ..Default::default()
    }
}

enum Client {
    Ws(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
    Tcp(BufReader<TcpStream>),
}

impl Client {
    async fn send(&mut self, message: Value) {
        match self {
            Client::Ws(ws) => ws.send(Message::text(message.to_string())).await.unwrap(),
            Client::Tcp(tcp) => {
                let mut line = message.to_string().into_bytes();
                line.push(b'\n');
                tcp.get_mut().write_all(&line).await.unwrap();
            }
        }
    }

    /// The next JSON message (WebSocket pings and pongs skipped).
    async fn next_json(&mut self) -> Value {
        tokio::time::timeout(PATIENCE, async {
            match self {
                Client::Ws(ws) => loop {
                    match ws.next().await.expect("the connection open").unwrap() {
                        Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                        Message::Ping(_) | Message::Pong(_) => {}
                        other => panic!("unexpected {other:?}"),
                    }
                },
                Client::Tcp(tcp) => {
                    let mut line = String::new();
                    assert!(
                        tcp.read_line(&mut line).await.unwrap() > 0,
                        "connection open"
                    );
                    serde_json::from_str(&line).unwrap()
                }
            }
        })
        .await
        .expect("a message in time")
    }

    /// The next message that is not a subscription's notification.
    async fn next_skipping_notifications(&mut self) -> Value {
        loop {
            let m = self.next_json().await;
            if m.get("method") != Some(&json!("eth_subscription")) {
                return m;
            }
        }
    }

    /// The reply to `request`, checking that no notification comes before
    /// it (no subscription of this client's is open when this is called).
    async fn call(&mut self, request: Value) -> Value {
        self.send(request).await;
        let reply = self.next_json().await;
        assert!(
            reply.get("method").is_none(),
            "a reply, got {reply} (a notification of a subscription the client has no id for)"
        );
        reply
    }
}

/// A server of `transport` ("ws" or "tcp") on 127.0.0.1 port 0.
struct Server {
    addr: SocketAddr,
    transport: &'static str,
    lab: Arc<Lab>,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(transport: &'static str, timeout: Duration) -> Server {
        let lab = Arc::new(Lab::default());
        let d = dispatcher(Arc::clone(&lab), timeout);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let task = match transport {
            "ws" => {
                let server = WsServer::new(d)
                    .subscriptions(one_subscription())
                    .shutdown(shutdown.clone());
                tokio::spawn(async move { server.serve(listener).await.unwrap() })
            }
            _ => {
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    loop {
                        let (mut stream, _) = tokio::select! {
                            accepted = listener.accept() => accepted.unwrap(),
                            _ = shutdown.triggered() => return,
                        };
                        let d = d.clone();
                        let driver = Driver::new(Lines::new())
                            .subscriptions(one_subscription())
                            .shutdown(shutdown.clone());
                        tokio::spawn(async move {
                            let (r, w) = stream.split();
                            let _ = driver.run(&d, r, w).await;
                        });
                    }
                })
            }
        };
        Server {
            addr,
            transport,
            lab,
            shutdown,
            task,
        }
    }

    async fn connect(&self) -> Client {
        match self.transport {
            "ws" => {
                let url = format!("ws://{}/", self.addr);
                Client::Ws(Box::new(
                    tokio_tungstenite::connect_async(url).await.unwrap().0,
                ))
            }
            _ => Client::Tcp(BufReader::new(TcpStream::connect(self.addr).await.unwrap())),
        }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the server stopped")
            .unwrap();
    }

    /// Waits until `n` producers saw their subscription end.
    async fn producers_stopped(&self, n: usize) {
        tokio::time::timeout(PATIENCE, async {
            while self.lab.producers_stopped.load(Ordering::SeqCst) < n {
                self.lab.stopped.notified().await;
            }
        })
        .await
        .expect("the producer saw its subscription end");
    }
}

fn req(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// What must hold after a reply that did not carry the subscription's id:
/// no subscription is open, its producer was told, and the one place
/// `max_per_connection` allows is free: a new subscription works, and the
/// notifications that follow are all its own.
async fn nothing_left_open(server: &Server, client: &mut Client) {
    let open = client.call(req(100, "subs_len", json!([]))).await;
    assert_eq!(open["result"], 0, "{}: {open}", server.transport);
    server.producers_stopped(1).await;
    let reply = client.call(req(101, "eth_subscribe", json!([]))).await;
    let id = reply["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: a subscription id, got {reply}", server.transport))
        .to_owned();
    for _ in 0..5 {
        let n = client.next_json().await;
        assert_eq!(n["method"], "eth_subscription");
        assert_eq!(
            n["params"]["subscription"], id,
            "{}: only the subscription the client knows",
            server.transport
        );
    }
}

#[tokio::test]
async fn a_subscribe_answered_with_the_too_large_error_in_a_batch_is_closed() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        let batch = json!([
            req(1, "big_later", json!([1])),
            req(2, "subscribe_then_big", json!([])),
        ]);
        let reply = client.call(batch).await;
        assert_eq!(reply[0]["result"], "x", "{transport}: {reply}");
        assert_eq!(reply[1]["error"]["code"], -32003, "{transport}: {reply}");
        nothing_left_open(&server, &mut client).await;
        server.stop().await;
    }
}

/// A subscribe already running when another entry's reply is refused as
/// too large keeps its reply (it fits the room held for it), and so its
/// subscription: the client learns the id, and the notifications that
/// follow the reply are that subscription's.
#[tokio::test]
async fn a_subscribe_running_when_its_batch_passes_the_limit_keeps_its_id() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        let batch = json!([
            req(1, "big_later", json!([MAX_RESPONSE_LEN])),
            req(2, "subscribe_after_big", json!([])),
        ]);
        client.send(batch).await;
        let reply = client.next_json().await;
        assert_eq!(reply[0]["error"]["code"], -32003, "{transport}: {reply}");
        let id = reply[1]["result"]
            .as_str()
            .unwrap_or_else(|| panic!("{transport}: an id, got {reply}"))
            .to_owned();
        for _ in 0..3 {
            let n = client.next_json().await;
            assert_eq!(n["params"]["subscription"], id, "{transport}");
        }
        assert_eq!(server.lab.producers_stopped.load(Ordering::SeqCst), 0);
        server.stop().await;
    }
}

#[tokio::test]
async fn a_subscribe_answered_with_its_id_in_a_batch_stays_open() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        let batch = json!([
            req(1, "big_later", json!([10])),
            req(2, "subscribe_after_big", json!([])),
        ]);
        client.send(batch).await;
        // The reply (with the id) comes before any notification.
        let reply = client.next_json().await;
        let id = reply[1]["result"].as_str().expect("an id").to_owned();
        for _ in 0..3 {
            let n = client.next_json().await;
            assert_eq!(n["params"]["subscription"], id, "{transport}");
        }
        assert_eq!(server.lab.producers_stopped.load(Ordering::SeqCst), 0);
        server.stop().await;
    }
}

#[tokio::test]
async fn a_handler_that_fails_after_subscribing_leaves_nothing_open() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        let reply = client.call(req(1, "subscribe_then_fail", json!([]))).await;
        assert_eq!(reply["error"]["code"], -32602, "{transport}: {reply}");
        nothing_left_open(&server, &mut client).await;
        server.stop().await;
    }
}

#[tokio::test]
async fn a_handler_that_panics_after_subscribing_leaves_nothing_open() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        // In a batch beside an async call too: the reply is deferred.
        let batch = json!([
            req(1, "subscribe_then_panic", json!([])),
            req(2, "big_later", json!([1])),
        ]);
        let reply = client.call(batch).await;
        assert_eq!(reply[0]["error"]["code"], -32603, "{transport}: {reply}");
        assert_eq!(reply[1]["result"], "x", "{transport}: {reply}");
        nothing_left_open(&server, &mut client).await;
        server.stop().await;
    }
}

#[tokio::test]
async fn an_async_call_timed_out_after_subscribing_leaves_nothing_open() {
    for transport in ["ws", "tcp"] {
        // Only the hanging call is async here: nothing else can time out.
        let server = Server::start(transport, Duration::from_millis(200)).await;
        let mut client = server.connect().await;
        let reply = client.call(req(1, "subscribe_then_hang", json!([]))).await;
        assert_eq!(reply["error"]["code"], -32002, "{transport}: {reply}");
        nothing_left_open(&server, &mut client).await;
        server.stop().await;
    }
}

#[tokio::test]
async fn a_subscription_opened_by_a_peer_answer_in_a_batch_is_not_taken_for_a_call() {
    for transport in ["ws", "tcp"] {
        let server = Server::start(transport, Duration::from_secs(30)).await;
        let mut client = server.connect().await;
        client
            .send(req(1, "subscribe_when_confirmed", json!([])))
            .await;
        // The server's request and the reply, in either order.
        let mut confirm = None;
        for _ in 0..2 {
            let m = client.next_json().await;
            if m["method"] == "confirm" {
                confirm = Some(m["id"].clone());
            } else {
                assert_eq!(m["result"], "asked", "{transport}: {m}");
            }
        }
        let confirm = confirm.expect("the server's request");
        // The answer comes in a batch beside an async call that fails:
        // the subscription its waiter opens belongs to no request.
        let batch = json!([
            {"jsonrpc": "2.0", "id": confirm, "result": true},
            req(2, "fail_later", json!([])),
        ]);
        client.send(batch).await;
        let reply = client.next_skipping_notifications().await;
        assert_eq!(reply[0]["error"]["code"], -32602, "{transport}: {reply}");
        client.send(req(3, "subs_len", json!([]))).await;
        let open = client.next_skipping_notifications().await;
        assert_eq!(open["result"], 1, "{transport}: {open}");
        let n = client.next_json().await;
        assert_eq!(n["method"], "eth_subscription", "{transport}: {n}");
        assert_eq!(server.lab.producers_stopped.load(Ordering::SeqCst), 0);
        server.stop().await;
    }
}
