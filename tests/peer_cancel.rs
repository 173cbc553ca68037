//! Requests a server sends its client and then gives up on (its timeout,
//! its waiting future dropped because the call that sent it was cancelled)
//! are announced to the client with the protocol's cancellation
//! notification, the one the dispatcher knows from `cancel_notification`:
//! LSP's `$/cancelRequest {id}`, MCP's `notifications/cancelled
//! {requestId, reason}`. Plain JSON-RPC has none: nothing is sent. Over
//! real TCP connections on loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, CancelledReply, DispatcherBuilder, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

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
        Arc::new(Metrics::default()),
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
    let (addr, shutdown) = serve(asking(|b| {
        b.cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
    }))
    .await;
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
    let (addr, shutdown) = serve(asking(|b| {
        b.cancel_notification(
            "notifications/cancelled",
            "requestId",
            CancelledReply::Nothing,
        )
        .cancel_reason("reason")
    }))
    .await;
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
