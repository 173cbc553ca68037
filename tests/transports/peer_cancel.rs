//! Requests a server sends its client and then gives up on (its timeout,
//! its waiting future dropped because the call that sent it was cancelled)
//! are announced to the client with the protocol's cancellation
//! notification, the one the dispatcher knows from `cancel_notification`:
//! LSP's `$/cancelRequest {id}`, MCP's `notifications/cancelled
//! {requestId, reason}`. Plain JSON-RPC has none: nothing is sent. Over
//! real TCP connections on loopback (rpcwire's stream server, and a
//! transport of one's own driving its `Connection` by hand).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcwire::dispatch::{AsyncCall, CancelledReply, DispatcherBuilder, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::peer::{Outbound, SendError};
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Context, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// LSP's cancellation: `$/cancelRequest` with `{"id": ..}`, a cancelled
/// call answered -32800.
fn lsp_cancel<K>(b: DispatcherBuilder<(), K>) -> DispatcherBuilder<(), K> {
    b.cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
}

/// MCP's: `notifications/cancelled` with `requestId` and a `reason`, a
/// cancelled call not answered.
fn mcp_cancel(b: DispatcherBuilder<(), WithAsync>) -> DispatcherBuilder<(), WithAsync> {
    b.cancel_notification(
        "notifications/cancelled",
        "requestId",
        CancelledReply::Nothing,
    )
    .cancel_reason("reason")
}

/// A dispatcher whose `configure` asks the client `workspace/configuration`
/// through the raw peer, waiting `params.ms`, and answers what came back
/// (or the peer error's text); `ping` answers `"pong"`. `cancel` adds the
/// protocol's cancellation.
fn asking(
    cancel: impl FnOnce(DispatcherBuilder<(), WithAsync>) -> DispatcherBuilder<(), WithAsync>,
) -> Dispatcher<(), WithAsync> {
    let b = Dispatcher::builder(())
        .timeout(None)
        .method("ping", |c: Call<'_, ()>| c.reply.str("pong"))
        .async_method("configure", |c: AsyncCall<()>| async move {
            let ms = c
                .params
                .as_ref()
                .and_then(|p| serde_json::from_slice::<Value>(p.as_bytes()).ok())
                .and_then(|v| v["ms"].as_u64())
                .unwrap_or(0);
            let peer = c.ctx.peer().expect("two-way").clone();
            let asked = peer
                .request(
                    "workspace/configuration",
                    Some(&json!({"items": [{"section": "example"}]})),
                    Duration::from_millis(ms),
                )
                .await;
            match asked {
                Ok(r) => Ok::<_, RpcError>(Value::String(format!(
                    "answered {}",
                    String::from_utf8_lossy(r.result().unwrap_or(b"error"))
                ))),
                Err(e) => Ok(Value::String(format!("no answer: {e}"))),
            }
        });
    cancel(b).build().unwrap()
}

/// Serves `d` on a loopback port, newline-framed.
async fn serve(d: Dispatcher<(), WithAsync>) -> (SocketAddr, Shutdown) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    tokio::spawn(serve_tcp(
        listener,
        d,
        Lines::new,
        Limits::default(),
        None,
        shutdown.clone(),
    ));
    (addr, shutdown)
}

struct Client {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let (r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        Client {
            lines: BufReader::new(r).lines(),
            w,
        }
    }

    async fn send(&mut self, msg: &str) {
        self.w.write_all(msg.as_bytes()).await.unwrap();
        self.w.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message within 10 s (hang guard)")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }

    /// The next two messages, the notification first, whichever order
    /// they came in (the notification and the reply go through different
    /// queues).
    async fn note_and_reply(&mut self) -> (Value, Value) {
        let (a, b) = (self.recv().await, self.recv().await);
        if a.get("method").is_some() {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Sends `configure` with id `id` waiting `ms`; returns the server's
    /// request to the client.
    async fn configure(&mut self, id: u64, ms: u64) -> Value {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"configure","params":{{"ms":{ms}}}}}"#
        ))
        .await;
        let asked = self.recv().await;
        assert_eq!(asked["method"], "workspace/configuration", "{asked}");
        assert!(asked["id"].is_u64(), "{asked}");
        asked
    }

    /// Answers the server's request `asked` late, then checks the answer
    /// was dropped quietly: the next message is the reply to a `ping`.
    async fn late_answer_is_ignored(&mut self, asked: &Value, ping: u64) {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":[{{"late":true}}]}}"#,
            asked["id"]
        ))
        .await;
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{ping},"method":"ping"}}"#
        ))
        .await;
        assert_eq!(
            self.recv().await,
            json!({"jsonrpc":"2.0","id":ping,"result":"pong"})
        );
    }
}

/// LSP: a handler's `workspace/configuration` that times out, or whose
/// call the client cancels (`$/cancelRequest`) while it waits, was
/// forgotten silently, and the client kept working on it. The client is
/// now sent `$/cancelRequest {"id": <that id>}`, once; its late answer is
/// ignored. A request the client answers is not cancelled.
#[tokio::test]
async fn lsp_a_request_the_server_gives_up_on_is_cancelled_with_cancel_request() {
    let (addr, shutdown) = serve(asking(lsp_cancel)).await;
    let mut c = Client::connect(addr).await;

    // Timed out.
    let asked = c.configure(1, 20).await;
    let (note, reply) = c.note_and_reply().await;
    assert_eq!(
        note,
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}})
    );
    assert_eq!(
        reply,
        json!({"jsonrpc":"2.0","id":1,"result":"no answer: no response before the deadline"})
    );
    c.late_answer_is_ignored(&asked, 2).await;

    // The call cancelled by the client while it waits: its future is
    // dropped, and with it the wait.
    let asked = c.configure(3, 3_600_000).await;
    c.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#)
        .await;
    let (note, reply) = c.note_and_reply().await;
    assert_eq!(
        note,
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}})
    );
    assert_eq!(reply["id"], 3, "{reply}");
    assert_eq!(reply["error"]["code"], -32800, "{reply}");
    c.late_answer_is_ignored(&asked, 4).await;

    // Answered: nothing to cancel (the message after the reply is the
    // ping's reply, not a `$/cancelRequest`).
    let asked = c.configure(5, 3_600_000).await;
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":[null]}}"#,
        asked["id"]
    ))
    .await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","id":5,"result":"answered [null]"})
    );
    c.send(r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#).await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","id":6,"result":"pong"})
    );
    shutdown.trigger();
}

/// Plain JSON-RPC has no cancellation: a dispatcher without
/// `cancel_notification` sends nothing for a request it gives up on (the
/// reply, then the ping's reply, nothing between).
#[tokio::test]
async fn without_a_cancellation_nothing_is_sent_for_an_abandoned_request() {
    let (addr, shutdown) = serve(asking(|b| b)).await;
    let mut c = Client::connect(addr).await;
    let asked = c.configure(1, 20).await;
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","id":1,"result":"no answer: no response before the deadline"})
    );
    c.late_answer_is_ignored(&asked, 2).await;
    shutdown.trigger();
}

/// MCP's cancellation on a plain dispatcher (`notifications/cancelled`
/// with `requestId`, and `reason` named by `cancel_reason`): a handler's
/// request through the raw peer that times out, or whose call the client
/// cancels, was forgotten silently. The client is now sent
/// `notifications/cancelled` naming it, with a reason; the cancelled call
/// gets no reply (MCP's way), and a late answer is ignored.
#[tokio::test]
async fn mcp_a_request_the_server_gives_up_on_is_cancelled_with_notifications_cancelled() {
    let (addr, shutdown) = serve(asking(mcp_cancel)).await;
    let mut c = Client::connect(addr).await;
    let told_to_stop = |note: &Value, asked: &Value| {
        assert_eq!(note["jsonrpc"], "2.0", "{note}");
        assert_eq!(note["method"], "notifications/cancelled", "{note}");
        assert!(note.get("id").is_none(), "a notification: {note}");
        assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
        assert!(
            note["params"]["reason"]
                .as_str()
                .is_some_and(|r| !r.is_empty()),
            "{note}"
        );
        assert_eq!(note["params"].as_object().unwrap().len(), 2, "{note}");
    };

    // Timed out.
    let asked = c.configure(1, 20).await;
    let (note, reply) = c.note_and_reply().await;
    told_to_stop(&note, &asked);
    assert_eq!(
        reply,
        json!({"jsonrpc":"2.0","id":1,"result":"no answer: no response before the deadline"})
    );
    c.late_answer_is_ignored(&asked, 2).await;

    // Cancelled by the client: told to stop, and no reply to the call
    // (the next message is the ping's reply).
    let asked = c.configure(3, 3_600_000).await;
    c.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user stopped"}}"#)
        .await;
    told_to_stop(&c.recv().await, &asked);
    c.late_answer_is_ignored(&asked, 4).await;
    shutdown.trigger();
}

/// Where a hand-driven connection's peer writes: a channel that its
/// writer task empties onto the socket, one message a line.
struct Lane(tokio::sync::mpsc::UnboundedSender<Bytes>);

impl Outbound for Lane {
    fn send(&self, message: Bytes) -> Result<(), SendError> {
        self.0.send(message).map_err(|_| SendError::Closed)
    }
}

/// A transport of one's own on a loopback port, its `Connection` (made by
/// `Dispatcher::connection`) driven by hand, for one client: on
/// connecting, before the client sent anything, the server asks it
/// `window/workDoneProgress/create` (as an LSP server that reports
/// progress at once does), waiting 20 ms, and tells the client how that
/// ended (a `greeted` notification with the peer's error text); then it
/// answers the client's lines.
async fn serve_greeting(d: Dispatcher<(), WithAsync>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let (r, mut w) = tcp.into_split();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if w.write_all(&m).await.is_err() || w.write_all(b"\n").await.is_err() {
                    break;
                }
            }
        });
        let ctx = Context::builder()
            .transport("tcp")
            .outbound(Arc::new(Lane(tx.clone())))
            .build();
        let mut conn = d.connection(ctx);
        let peer = conn.context().peer().expect("two-way").clone();
        let asked = peer
            .request(
                "window/workDoneProgress/create",
                Some(&json!({"token": "boot"})),
                Duration::from_millis(20),
            )
            .await;
        let how = match asked {
            Ok(_) => "answered".to_string(),
            Err(e) => e.to_string(),
        };
        let _ = peer.notify("greeted", &json!({ "how": how }));
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut out = Vec::new();
            if d.handle_async(&Bytes::from(line), &mut conn, &mut out)
                .await
            {
                let _ = tx.send(Bytes::from(out));
            }
        }
        peer.close();
    });
    addr
}

/// A request the server sends before the client sent anything, and gives
/// up on, was forgotten silently: the peer learnt the protocol's
/// cancellation only when the dispatcher handled the connection's first
/// message, and a transport of one's own had no way to give it earlier.
/// A connection made by `Dispatcher::connection` knows it from the start:
/// the client is sent `$/cancelRequest` for it (before the server's
/// `greeted`), and its late answer is ignored.
#[tokio::test]
async fn lsp_a_request_sent_before_the_client_sent_anything_is_cancelled_too() {
    let addr = serve_greeting(asking(lsp_cancel)).await;
    let mut c = Client::connect(addr).await;
    let asked = c.recv().await;
    assert_eq!(asked["method"], "window/workDoneProgress/create", "{asked}");
    assert!(asked["id"].is_u64(), "{asked}");
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}})
    );
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","method":"greeted","params":{"how":"no response before the deadline"}})
    );
    c.late_answer_is_ignored(&asked, 1).await;
}

/// The same with MCP's shape of the cancellation (on a plain dispatcher):
/// `notifications/cancelled` naming the request, with a reason.
#[tokio::test]
async fn mcp_a_request_sent_before_the_client_sent_anything_is_cancelled_too() {
    let addr = serve_greeting(asking(mcp_cancel)).await;
    let mut c = Client::connect(addr).await;
    let asked = c.recv().await;
    assert_eq!(asked["method"], "window/workDoneProgress/create", "{asked}");
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","method":"notifications/cancelled",
               "params":{"requestId":asked["id"],"reason":"no response before the deadline"}})
    );
    assert_eq!(
        c.recv().await["method"],
        "greeted",
        "the cancellation came first"
    );
    c.late_answer_is_ignored(&asked, 1).await;
}

/// A dispatcher whose `progress` asks the client
/// `window/workDoneProgress/create` with `request_with` and a deadline
/// `params.ms` away (fire and forget, as an LSP server reporting progress
/// does), telling `heard` how it ended, and answers `"asked"` at once.
fn asking_with_a_deadline(heard: Arc<std::sync::Mutex<Vec<String>>>) -> Dispatcher<()> {
    let b = Dispatcher::builder(()).method("progress", move |c: Call<'_, ()>| {
        let ms = c
            .params
            .and_then(|p| serde_json::from_slice::<Value>(p.as_bytes()).ok())
            .and_then(|v| v["ms"].as_u64())
            .unwrap_or(0);
        let deadline = std::time::Instant::now() + Duration::from_millis(ms);
        let heard = Arc::clone(&heard);
        c.ctx
            .peer()
            .expect("two-way")
            .request_with_raw(
                "window/workDoneProgress/create",
                Some(br#"{"token":"t"}"#),
                Some(deadline),
                move |answer| {
                    let how = match answer {
                        Ok(_) => "answered".to_string(),
                        Err(e) => e.to_string(),
                    };
                    heard.lock().unwrap().push(how);
                },
            )
            .map_err(|e| RpcError::internal(e.to_string()))?;
        c.reply.str("asked")
    });
    lsp_cancel(b).build().unwrap()
}

/// A request sent with `request_with` and a deadline, over rpcwire's
/// stream server: when the client does not answer, the deadline fails it
/// (the waiter hears "no response before the deadline", the client gets
/// `$/cancelRequest`), and the connection, silent since, is then closed
/// by its idle timeout. Nothing called `Peer::expire` on the built-in
/// drivers: the request waited for ever, and as a request awaiting its
/// answer it kept the connection from ever idling out. Found by a review.
#[tokio::test]
async fn a_request_with_a_deadline_expires_on_the_stream_server() {
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let limits = Limits {
        idle_timeout: Duration::from_millis(600),
        ..Limits::default()
    };
    tokio::spawn(serve_tcp(
        listener,
        asking_with_a_deadline(Arc::clone(&heard)),
        Lines::new,
        limits,
        None,
        shutdown.clone(),
    ));
    let mut c = Client::connect(addr).await;
    c.send(r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"ms":100}}"#)
        .await;
    let (asked, reply) = c.note_and_reply().await;
    assert_eq!(asked["method"], "window/workDoneProgress/create", "{asked}");
    assert_eq!(reply, json!({"jsonrpc":"2.0","id":1,"result":"asked"}));
    assert_eq!(
        c.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}})
    );
    assert_eq!(*heard.lock().unwrap(), ["no response before the deadline"]);
    // Silent since: closed as idle (an end of stream, not a hang).
    let end = tokio::time::timeout(Duration::from_secs(10), c.lines.next_line())
        .await
        .expect("the idle connection closed within 10 s (hang guard)");
    assert!(matches!(end, Ok(None)), "{end:?}");
    shutdown.trigger();
}

/// The same over rpcwire's WebSocket server: the deadline fails the
/// request and the client gets `$/cancelRequest`.
#[cfg(feature = "ws")]
#[tokio::test]
async fn a_request_with_a_deadline_expires_on_the_websocket_server() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = rpcwire::server::ws::WsServer::new(asking_with_a_deadline(Arc::clone(&heard)));
    let shutdown = server.shutdown_signal().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { server.serve(listener).await });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":1,"method":"progress","params":{"ms":100}}"#,
    ))
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a message within 10 s (hang guard)")
            .expect("open")
            .unwrap();
        if let Message::Text(t) = m {
            got.push(serde_json::from_str::<Value>(t.as_str()).unwrap());
        }
    }
    let asked = got
        .iter()
        .find(|m| m["method"] == "window/workDoneProgress/create")
        .expect("the request");
    assert!(
        got.contains(&json!({"jsonrpc":"2.0","id":1,"result":"asked"})),
        "{got:?}"
    );
    assert_eq!(
        got[2],
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}}),
        "{got:?}"
    );
    assert_eq!(*heard.lock().unwrap(), ["no response before the deadline"]);
    shutdown.trigger();
}
