//! The gateway's WebSocket relay and the combined port's upgrade: what a
//! review found (each test failed before its fix).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use super::ws_upstream::{WsClient, client, next, send, send_big_calls, subscribe};
use super::*;

const HANG: Duration = Duration::from_secs(15);

/// The reply with id `id`, skipping everything else.
async fn ws_reply(ws: &mut WsClient, id: u64) -> Value {
    loop {
        let m = next(ws).await;
        if m["id"] == id {
            return m;
        }
    }
}

/// A WebSocket upstream that logs every request; `eth_subscribe` answers
/// `"0xsub"`, `eth_unsubscribe` `true`, anything else `"0x1"`; `pause`
/// stops reading its socket for `pause_for` (a node busy for a while),
/// then reads on.
async fn pausing_upstream(pause_for: Duration) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log2 = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let log = Arc::clone(&log2);
            tokio::spawn(async move {
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .max_message_size(None)
                    .max_frame_size(None);
                let Ok(mut ws) =
                    tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await
                else {
                    return;
                };
                while let Some(Ok(frame)) = ws.next().await {
                    let Ok(text) = frame.to_text() else { continue };
                    let Ok(v) = serde_json::from_str::<Value>(text) else {
                        continue;
                    };
                    // Big params are not kept.
                    let method = v["method"].as_str().unwrap_or("").to_string();
                    log.lock()
                        .unwrap()
                        .push(json!({"method": method, "params": if method == "eth_call" { Value::Null } else { v["params"].clone() }}));
                    let result = match method.as_str() {
                        "pause" => {
                            tokio::time::sleep(pause_for).await;
                            json!("0x1")
                        }
                        "eth_subscribe" => json!("0xsub"),
                        "eth_unsubscribe" => json!(true),
                        _ => json!("0x1"),
                    };
                    let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":result});
                    if ws.send(Message::text(reply.to_string())).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, log)
}

/// A gateway in front of a [`pausing_upstream`] (`pause_for`) with
/// `timeout`, a client subscribed through it (id `"0xsub"` upstream), and
/// the upstream then paused (reading nothing for `pause_for`).
async fn subscribed_then_paused(
    pause_for: Duration,
    timeout: Duration,
) -> (Gateway, WsClient, String, Arc<Mutex<Vec<Value>>>) {
    let (up, log) = pausing_upstream(pause_for).await;
    let gw = start(config::Config {
        upstreams: vec![format!("ws://{up}")],
        timeout,
        ..Default::default()
    })
    .await;
    let mut ws = client(gw.addr).await;
    let sub = subscribe(&mut ws, 1).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":2,"method":"pause"})).await;
    // Paused once it read `pause` (logged before it sleeps).
    crate::eventually::eventually("the upstream paused", || {
        log.lock().unwrap().iter().any(|v| v["method"] == "pause")
    })
    .await;
    (gw, ws, sub, log)
}

/// Waits until the upstream was sent `eth_unsubscribe ["0xsub"]`.
async fn upstream_told_unsubscribe(log: &Mutex<Vec<Value>>) {
    crate::eventually::eventually("the upstream told eth_unsubscribe [\"0xsub\"]", || {
        log.lock()
            .unwrap()
            .iter()
            .any(|v| v["method"] == "eth_unsubscribe" && v["params"] == json!(["0xsub"]))
    })
    .await;
}

/// Calls `eth_blockNumber` (ids from 100) until the paused upstream
/// answers: calls are refused or time out until it reads again.
async fn until_the_upstream_reads_again(ws: &mut WsClient) {
    for id in 100.. {
        send(
            ws,
            json!({"jsonrpc":"2.0","id":id,"method":"eth_blockNumber"}),
        )
        .await;
        if ws_reply(ws, id).await["result"] == "0x1" {
            return;
        }
        assert!(id < 200, "the upstream never read again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A client's `eth_unsubscribe` is answered `true` once its relay has
/// ended, whatever the upstream then does: it waited for the upstream's
/// answer, so an upstream busy past the timeout gave the client -32002 for
/// a subscription that had ended (and `false` on a retry; found by a
/// review). The upstream is told all the same.
#[tokio::test]
async fn an_unsubscribe_is_answered_without_waiting_for_a_busy_upstream() {
    let (_gw, mut ws, sub, log) =
        subscribed_then_paused(Duration::from_secs(3), Duration::from_secs(1)).await;
    send(
        &mut ws,
        json!({"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":[sub]}),
    )
    .await;
    assert_eq!(ws_reply(&mut ws, 3).await["result"], true);
    // Its retry: the subscription is gone.
    send(
        &mut ws,
        json!({"jsonrpc":"2.0","id":4,"method":"eth_unsubscribe","params":[sub]}),
    )
    .await;
    assert_eq!(ws_reply(&mut ws, 4).await["result"], false);
    upstream_told_unsubscribe(&log).await;
    drop(ws);
}

/// A client's `eth_unsubscribe` that finds the queue of requests to the
/// upstream full (an upstream busy for a moment) ended the relay and the
/// client's subscription, and then failed to send the upstream's
/// unsubscribe: the upstream subscription ran on for the connection's
/// life, unsubscribed by nobody. It goes past the bound now, as the
/// gateway's own unsubscribes do ("a few bytes each, always go").
#[tokio::test]
async fn a_client_unsubscribe_reaches_the_upstream_past_a_full_queue() {
    // The upstream stops reading for a while (8 s: the gateway's debug
    // build may take seconds to read what follows on a busy host); 60 MiB
    // of calls fill the sockets' buffers and the 16 MiB queue.
    let (_gw, mut ws, sub, log) =
        subscribed_then_paused(Duration::from_secs(8), Duration::from_secs(30)).await;
    send_big_calls(&mut ws).await;
    // Then calls of 2 MiB, 1 MiB, ... 1 byte of data, each queued if it
    // fits: the room left in the queue ends smaller than the smallest
    // call, so smaller than an `eth_unsubscribe` too.
    for k in (0..=21).rev() {
        let data = "a".repeat(1 << k);
        send(
            &mut ws,
            json!({"jsonrpc":"2.0","id":200 + k,"method":"eth_call","params":[{"data":data}]}),
        )
        .await;
    }
    send(
        &mut ws,
        json!({"jsonrpc":"2.0","id":99,"method":"eth_unsubscribe","params":[sub]}),
    )
    .await;
    let r = ws_reply(&mut ws, 99).await;
    eprintln!("eth_unsubscribe answered: {r}");
    // The upstream reads again; a call after everything queued is
    // answered once the queue has drained.
    until_the_upstream_reads_again(&mut ws).await;
    // The client's unsubscribe reached the upstream while the client is
    // still there (once it leaves, the gateway unsubscribes what it had
    // anyway, which would hide a lost one).
    assert_eq!(r["result"], true, "{r}");
    upstream_told_unsubscribe(&log).await;
    drop(ws);
}

/// A request still queued for a WebSocket upstream when its caller left
/// (its timeout) is not sent: the upstream, reading again, received every
/// queued request after its caller had been told -32002, so a transaction
/// the client then sent again elsewhere went out twice (found by a review).
#[tokio::test]
async fn a_request_whose_caller_left_is_not_sent_later() {
    let (up, log) = pausing_upstream(Duration::from_secs(6)).await;
    let gw = start(config::Config {
        upstreams: vec![format!("ws://{up}")],
        timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let mut ws = client(gw.addr).await;
    // The upstream stops reading for 6 s; 24 MiB of calls fill the
    // sockets' buffers (a few MiB) and the queue (16 MiB), then a small
    // call waits in it. Read by the gateway's debug build on a busy host:
    // 60 MiB took seconds, and with the marker read late its request was
    // still queued when the upstream read again (sent, answered).
    send(&mut ws, json!({"jsonrpc":"2.0","id":2,"method":"pause"})).await;
    crate::eventually::eventually("the upstream paused", || {
        log.lock().unwrap().iter().any(|v| v["method"] == "pause")
    })
    .await;
    let big = "ab".repeat(3 << 19);
    for id in 10..18 {
        send(
            &mut ws,
            json!({"jsonrpc":"2.0","id":id,"method":"eth_call","params":[{"data":big}]}),
        )
        .await;
    }
    let marker = format!("0x{}", "5a".repeat(20));
    send(
        &mut ws,
        json!({"jsonrpc":"2.0","id":77,"method":"eth_getBalance","params":[marker, "0x1"]}),
    )
    .await;
    let r = ws_reply(&mut ws, 77).await;
    assert_eq!(r["error"]["code"], -32002, "timed out while queued: {r}");
    until_the_upstream_reads_again(&mut ws).await;
    let seen = log.lock().unwrap().clone();
    assert!(
        seen.iter().any(|v| v["method"] == "eth_blockNumber"),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|v| v["method"] == "eth_getBalance"),
        "the timed-out request reached the upstream: {seen:?}"
    );
    drop(ws);
}

/// An upstream whose first connection works (and subscribes), then closes;
/// every later connection is taken but its handshake never answered.
async fn upstream_that_hangs_after_the_first_connection()
-> (SocketAddr, tokio::sync::mpsc::UnboundedSender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (close_tx, mut close_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    frame = ws.next() => {
                        let Some(Ok(frame)) = frame else { return };
                        let Ok(text) = frame.to_text() else { continue };
                        let Ok(v) = serde_json::from_str::<Value>(text) else { continue };
                        let result = match v["method"].as_str().unwrap_or("") {
                            "eth_subscribe" => json!("0xsub"),
                            _ => json!("0x1"),
                        };
                        let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":result});
                        let _ = ws.send(Message::text(reply.to_string())).await;
                    }
                    _ = close_rx.recv() => {
                        let _ = ws.close(None).await;
                        return;
                    }
                }
            }
        });
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp); // never answered
        }
    });
    (addr, close_tx)
}

/// `eth_unsubscribe` (and `/metrics`' relayed count) look for the live
/// upstream connection through the lock that a connection attempt holds
/// for its whole handshake (up to `--connect-timeout`): while another
/// client's call waits on an upstream that does not answer its handshake,
/// an `eth_unsubscribe` of a subscription that ended with the previous
/// connection waited too (1.9 s), though there is nothing upstream to
/// undo.
#[tokio::test]
async fn an_unsubscribe_does_not_wait_for_a_connection_attempt() {
    let (up, close) = upstream_that_hangs_after_the_first_connection().await;
    let gw = start(config::Config {
        upstreams: vec![format!("ws://{up}")],
        // A connection attempt held for 10 s: the bound below has room for
        // a busy host, and the bug (waiting for the attempt) exceeds it.
        connect_timeout: Some(Duration::from_secs(10)),
        timeout: Duration::from_secs(30),
        ..Default::default()
    })
    .await;
    let mut a = client(gw.addr).await;
    let sub = subscribe(&mut a, 1).await;
    close.send(()).unwrap();
    // The subscription ends with an error notification.
    let n = next(&mut a).await;
    assert!(n["params"]["error"].is_object(), "{n}");
    // Another client's call makes a new connection, whose handshake hangs.
    let mut b = client(gw.addr).await;
    send(
        &mut b,
        json!({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    send(
        &mut a,
        json!({"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":[sub]}),
    )
    .await;
    let r = ws_reply(&mut a, 2).await;
    let took = started.elapsed();
    assert_eq!(r["result"], false, "{r}");
    assert!(
        took < Duration::from_secs(5),
        "eth_unsubscribe of an ended subscription took {took:?} (waited for another client's connection attempt)"
    );
}

/// Sends `request` on a fresh connection to `addr` and returns what came
/// back within a moment (at most 64 KiB).
async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let read = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") && out.len() > 12 {
                    // Give a moment for what follows the head.
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(300), tcp.read(&mut buf)).await
                    {
                        out.extend_from_slice(&buf[..n]);
                    }
                    return out;
                }
            }
            _ => return out,
        }
    }
}

/// RFC 6455 §4.2.1: `Sec-WebSocket-Key` is a base64-encoded 16-byte nonce,
/// and a server that finds a handshake not matching the description MUST
/// answer with an HTTP error such as 400.
#[tokio::test]
async fn an_upgrade_with_a_malformed_key_is_refused() {
    let gw = start(config::Config::default()).await;
    for key in ["x", "not base64 at all!!", "dGhlIHNhbXBsZQ=="] {
        let request = format!(
            "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: {key}\r\n\r\n"
        );
        let answer = raw_exchange(gw.addr, request.as_bytes()).await;
        let head = String::from_utf8_lossy(&answer);
        assert!(
            head.starts_with("HTTP/1.1 400"),
            "key {key:?}: {}",
            head.lines().next().unwrap_or_default()
        );
    }
}

/// A `Connection` field sent as two lines (`keep-alive`, then `Upgrade`)
/// is one list (RFC 9110 §5.3): the port took it for an upgrade request
/// (`is_upgrade_request` reads every line) and then refused it as one
/// (tungstenite reads the first line only): 400, where the same request
/// with one line switches protocols.
#[tokio::test]
async fn an_upgrade_with_connection_on_two_lines_switches_protocols() {
    let gw = start(config::Config::default()).await;
    let request = "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: keep-alive\r\nconnection: Upgrade\r\n\
                   upgrade: websocket\r\nsec-websocket-version: 13\r\n\
                   sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let answer = raw_exchange(gw.addr, request.as_bytes()).await;
    let head = String::from_utf8_lossy(&answer);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}
