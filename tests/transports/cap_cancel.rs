//! A client at its `max_in_flight` cap cancels a running call with the
//! protocol's cancellation notification (the dispatcher's
//! `cancel_notification`: LSP's `$/cancelRequest {id}`, answered -32800;
//! MCP's `notifications/cancelled {requestId}`, not answered): the call is
//! cancelled at once, not once a slot frees (which, with calls that run
//! until cancelled, is never); a request still held at the cap is
//! answered as cancelled and never starts. Over the stream transport (TCP) and
//! WebSocket, on loopback; deadlines only detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::{SinkExt, StreamExt};
use rpcwire::dispatch::{AsyncCall, CancelledReply, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use crate::held_calls::{HANG, State, hold, wait_until};

/// The protocol whose cancellation the dispatcher knows.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    Lsp,
    Mcp,
}

impl Protocol {
    fn cancel(self, id: u64) -> String {
        match self {
            Protocol::Lsp => {
                json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}})
            }
            Protocol::Mcp => json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "no longer needed"}
            }),
        }
        .to_string()
    }
}

fn dispatcher(state: Arc<State>, protocol: Protocol) -> Dispatcher<Arc<State>, WithAsync> {
    let b = Dispatcher::builder(state)
        .timeout(None)
        // Runs until cancelled.
        .async_method("forever", |call: AsyncCall<Arc<State>>| async move {
            Ok::<_, RpcError>(hold(Arc::clone(&call.state)).await)
        })
        .method("echo", |c: Call<'_, Arc<State>>| match c.params {
            Some(p) => c.reply.raw(p.as_bytes()),
            None => c.reply.null(),
        });
    match protocol {
        Protocol::Lsp => b.cancel_notification("$/cancelRequest", "id", CancelledReply::Error),
        Protocol::Mcp => b
            .cancel_notification(
                "notifications/cancelled",
                "requestId",
                CancelledReply::Nothing,
            )
            .cancel_reason("reason"),
    }
    .build()
    .unwrap()
}

fn limits() -> Limits {
    Limits {
        max_in_flight: 1,
        ..Limits::default()
    }
}

fn request(id: u64, method: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": [id]}).to_string()
}

type WsClient = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A client of either transport.
enum Client {
    Tcp(
        tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
        tokio::net::tcp::OwnedWriteHalf,
    ),
    Ws(Box<WsClient>),
}

impl Client {
    async fn send(&mut self, message: String) {
        match self {
            Client::Tcp(_, w) => w
                .write_all(format!("{message}\n").as_bytes())
                .await
                .unwrap(),
            Client::Ws(ws) => ws.send(Message::text(message)).await.unwrap(),
        }
    }

    /// The next JSON-RPC message, within [`HANG`].
    async fn recv(&mut self) -> Value {
        match self {
            Client::Tcp(lines, _) => {
                let line = tokio::time::timeout(HANG, lines.next_line())
                    .await
                    .expect("a reply in time")
                    .unwrap()
                    .expect("the connection open");
                serde_json::from_str(&line).unwrap()
            }
            Client::Ws(ws) => loop {
                let message = tokio::time::timeout(HANG, ws.next())
                    .await
                    .expect("a reply in time")
                    .expect("the connection open")
                    .unwrap();
                if let Message::Text(t) = message {
                    return serde_json::from_str(t.as_str()).unwrap();
                }
            },
        }
    }
}

/// What the client sees: the call cancelled (its drop guard fired), the
/// reply the protocol gives a cancelled call, then the next request's.
async fn check(protocol: Protocol, via: &str, state: &State, client: &mut Client) {
    let what = format!("{via}, {protocol:?}");
    client.send(request(1, "forever")).await;
    wait_until(state, &format!("{what}: started"), |s| {
        s.started.load(Ordering::SeqCst) == 1
    })
    .await;
    // At the cap: the cancellation, then a request behind it.
    client.send(protocol.cancel(1)).await;
    client.send(request(2, "echo")).await;
    wait_until(state, &format!("{what}: cancelled"), |s| {
        s.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    if let Protocol::Lsp = protocol {
        let reply = client.recv().await;
        assert_eq!(reply["id"], 1, "{what}: {reply}");
        assert_eq!(reply["error"]["code"], -32800, "{what}: {reply}");
    }
    assert_eq!(
        client.recv().await,
        json!({"jsonrpc": "2.0", "id": 2, "result": [2]}),
        "{what}"
    );
    assert_eq!(state.started.load(Ordering::SeqCst), 1, "{what}");

    // A request held at the cap (read, not started) and cancelled there is
    // answered as a cancelled call and never starts. It once started when
    // the call ahead of it ended, and ran whole (for good, here).
    client.send(request(3, "forever")).await;
    wait_until(state, &format!("{what}: 3 started"), |s| {
        s.started.load(Ordering::SeqCst) == 2
    })
    .await;
    client.send(request(4, "forever")).await;
    client.send(protocol.cancel(4)).await;
    if let Protocol::Lsp = protocol {
        let reply = client.recv().await;
        assert_eq!(reply["id"], 4, "{what}: {reply}");
        assert_eq!(reply["error"]["code"], -32800, "{what}: {reply}");
    }
    client.send(protocol.cancel(3)).await;
    if let Protocol::Lsp = protocol {
        let reply = client.recv().await;
        assert_eq!(reply["id"], 3, "{what}: {reply}");
        assert_eq!(reply["error"]["code"], -32800, "{what}: {reply}");
    }
    client.send(request(5, "echo")).await;
    assert_eq!(
        client.recv().await,
        json!({"jsonrpc": "2.0", "id": 5, "result": [5]}),
        "{what}: the held request cancelled, not started"
    );
    assert_eq!(state.started.load(Ordering::SeqCst), 2, "{what}");
    assert_eq!(state.dropped.load(Ordering::SeqCst), 2, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_at_the_cap_reaches_its_call_over_tcp() {
    for protocol in [Protocol::Lsp, Protocol::Mcp] {
        let state = Arc::new(State::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server = tokio::spawn(serve_tcp(
            listener,
            dispatcher(Arc::clone(&state), protocol),
            Lines::new,
            limits(),
            None,
            shutdown.clone(),
        ));
        let (r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut client = Client::Tcp(BufReader::new(r).lines(), w);
        check(protocol, "TCP", &state, &mut client).await;
        shutdown.trigger();
        server.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_at_the_cap_reaches_its_call_over_websocket() {
    for protocol in [Protocol::Lsp, Protocol::Mcp] {
        let state = Arc::new(State::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let ws = WsServer::new(dispatcher(Arc::clone(&state), protocol))
            .limits(limits())
            .shutdown(shutdown.clone());
        let server = tokio::spawn(async move { ws.serve(listener).await });
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        let mut client = Client::Ws(Box::new(ws));
        check(protocol, "WebSocket", &state, &mut client).await;
        shutdown.trigger();
        let _ = server.await.unwrap();
    }
}
