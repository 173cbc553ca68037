//! The gateway example (`examples/gateway`), its modules compiled into this
//! test: fake upstreams that hang, reset, answer garbage or the wrong id,
//! or answer out of order; id rewriting; batch split and merge; the
//! policy; limits; WebSocket on the HTTP port; the built-in chain's
//! transfer flow with transactions signed here. Everything on 127.0.0.1,
//! every server started and stopped by its test.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_consensus::{TxEip1559, TxEip2930, TxEnvelope, TxLegacy};
use alloy_primitives::{Address, B256, Bytes as ABytes, TxKind, U256};
use futures_util::{SinkExt, StreamExt};
use rpcwire::dispatch::AsyncCall;
use rpcwire::server::Shutdown;
use rpcwire::server::http::HttpService;
use rpcwire::{Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use super::*;
use crate::http_request::{json_200, post_close as post, read_request};

/// A gateway with `workers` workers, as the example runs by default: this
/// runtime's and `workers - 1` threads of their own, each with a listening
/// socket on the port.
async fn start_workers(config: config::Config, workers: usize) -> Gateway {
    let port = app::claim_port("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = app::shared_listener(port).unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    let limits = config.limits();
    let all_drained = app::AllDrained::new(workers);
    app::spawn_workers(&app, addr, workers - 1, &limits, &shutdown, &all_drained).unwrap();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        app.run(listener, limits, stop).await;
        all_drained.drained().await;
    });
    Gateway { addr, shutdown }
}

fn proxy_config_with(upstreams: &[SocketAddr], hyper_client: bool) -> config::Config {
    config::Config {
        hyper_client,
        ..proxy_config(upstreams)
    }
}

fn proxy_config(upstreams: &[SocketAddr]) -> config::Config {
    config::Config {
        upstreams: upstreams.iter().map(|a| format!("http://{a}")).collect(),
        timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

async fn call(addr: SocketAddr, body: &str) -> Value {
    let (status, body) = post(addr, body).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// How a fake upstream answers.
#[derive(Clone, Copy, PartialEq)]
enum Fake {
    /// Reads the request and never answers.
    Hang,
    /// Reads the request and closes the connection.
    Reset,
    /// `200` with a body that is not JSON.
    Garbage,
    /// A valid response with another id.
    WrongId,
    /// A valid response, `Transfer-Encoding: chunked`, in small chunks.
    Chunked,
    /// A valid response, then the connection closes without a word (as a
    /// server closing an idle kept-alive connection does).
    CloseSilently,
}

/// A raw HTTP/1.1 upstream that misbehaves as told; counts requests.
async fn fake_upstream(kind: Fake) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                loop {
                    let Some(body) = read_request(&mut s).await else {
                        return;
                    };
                    seen.fetch_add(1, Ordering::SeqCst);
                    let reply = match kind {
                        Fake::Hang => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                        // Closed with the request unanswered.
                        Fake::Reset => return,
                        Fake::Garbage => "<html>bad gateway</html>".to_string(),
                        Fake::WrongId => {
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            let id = v["id"].as_u64().unwrap() + 1000;
                            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"0x1"}}"#)
                        }
                        Fake::Chunked => {
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            let reply =
                                format!(r#"{{"jsonrpc":"2.0","id":{},"result":"0xc4"}}"#, v["id"]);
                            let mut out = String::from(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
                            );
                            for piece in reply.as_bytes().chunks(7) {
                                out.push_str(&format!(
                                    "{:x}\r\n{}\r\n",
                                    piece.len(),
                                    std::str::from_utf8(piece).unwrap()
                                ));
                            }
                            out.push_str("0\r\n\r\n");
                            if s.write_all(out.as_bytes()).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        Fake::CloseSilently => {
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            let reply =
                                format!(r#"{{"jsonrpc":"2.0","id":{},"result":"0xc5"}}"#, v["id"]);
                            let out = json_200(&reply);
                            let _ = s.write_all(out.as_bytes()).await;
                            // Closed only once the client has pooled it.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            return;
                        }
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    if s.write_all(head.as_bytes()).await.is_err()
                        || s.write_all(reply.as_bytes()).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}

/// What a scripted upstream does with request number `n` (0-based, over
/// all its connections).
enum Act {
    /// Write these bytes, keep the connection.
    Write(Vec<u8>),
    /// Write these bytes, then close.
    WriteClose(Vec<u8>),
    /// Write these bytes, then reset (RST) the connection after `ms`.
    WriteThenRst(Vec<u8>, u64),
    /// Close without a word.
    Close,
}

type Script = Arc<dyn Fn(usize, &Value) -> Act + Send + Sync>;

/// The bodies a scripted upstream received.
type Log = Arc<Mutex<Vec<Value>>>;

async fn scripted(script: Script) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let (seen, script) = (Arc::clone(&seen), Arc::clone(&script));
            tokio::spawn(async move {
                loop {
                    let Some(body) = read_request(&mut s).await else {
                        return;
                    };
                    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                        return; // not JSON-RPC (a WebSocket upgrade): closed
                    };
                    let n = {
                        let mut l = seen.lock().unwrap();
                        l.push(v.clone());
                        l.len() - 1
                    };
                    match script(n, &v) {
                        Act::Write(b) => {
                            if s.write_all(&b).await.is_err() {
                                return;
                            }
                        }
                        Act::WriteClose(b) => {
                            let _ = s.write_all(&b).await;
                            return;
                        }
                        #[allow(deprecated)]
                        Act::WriteThenRst(b, ms) => {
                            let _ = s.write_all(&b).await;
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            let _ = s.set_linger(Some(Duration::ZERO));
                            return;
                        }
                        Act::Close => return,
                    }
                }
            });
        }
    });
    (addr, log)
}

/// `eth_blockNumber` with id `id` through the gateway at `addr`.
async fn block_number(addr: SocketAddr, id: u64) -> Value {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_blockNumber"}}"#);
    call(addr, &body).await
}

/// `HTTP/1.1 <status>` with a content-length body.
fn http(status: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A JSON-RPC result for request `v`.
fn result_for(v: &Value, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, v["id"])
}

/// Answers every call with its own params (or `null`), HTTP 200.
fn echo_params() -> Script {
    Arc::new(|_, v| {
        let p = v
            .get("params")
            .map_or("\"<absent>\"".to_string(), |p| p.to_string());
        Act::Write(http("200 OK", "", &result_for(v, &p)))
    })
}

/// A call that may have reached an upstream is never sent twice (it may be
/// a transaction): an upstream that read the request on a kept-alive
/// connection and closed it without a reply (a crash, a proxy restart) gets
/// it once, and the client an error (it was once taken for a stale
/// connection and sent again).
#[tokio::test]
async fn a_delivered_request_on_a_reused_connection_is_not_sent_twice() {
    for hyper_client in [true, false] {
        delivered_once(hyper_client).await;
    }
}

async fn delivered_once(hyper_client: bool) {
    let (up, log) = scripted(Arc::new(|n, v| match n {
        1 => Act::Close, // read the transaction, then died
        _ => Act::Write(http("200 OK", "", &result_for(v, "\"0x1\""))),
    }))
    .await;
    let gw = start(config::Config {
        hyper_client,
        ..proxy_config(&[up])
    })
    .await;
    let r = block_number(gw.addr, 1).await;
    assert_eq!(r["result"], "0x1", "{r}");
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":["0x02f8"]}"#,
    )
    .await;
    let sent = log
        .lock()
        .unwrap()
        .iter()
        .filter(|v| v["method"] == "eth_sendRawTransaction")
        .count();
    assert_eq!(
        sent, 1,
        "hyper {hyper_client}: the upstream received the transaction {sent} times; reply {r}"
    );
}

/// Replies with dozens of header lines (CDNs and cloud load balancers add
/// many) are read, up to hyper's 100 (the gateway's client once refused
/// more than 32).
#[tokio::test]
async fn a_reply_with_many_headers_is_read() {
    let extra: String = (0..40).map(|i| format!("x-h-{i}: v\r\n")).collect();
    let (up, _) = scripted(Arc::new(move |_, v| {
        Act::Write(http("200 OK", &extra, &result_for(v, "\"0x2\"")))
    }))
    .await;
    let gw = start(proxy_config(&[up])).await;
    let r = block_number(gw.addr, 1).await;
    assert_eq!(r["result"], "0x2", "{r}");
}

/// A reply just past --max-response is -32003, as one far past it is (it
/// was once "upstream reply malformed", the reply parser's limit being
/// tighter than the reader's).
#[tokio::test]
async fn a_reply_just_past_the_limit_is_32003_like_a_larger_one() {
    let (up, _) = scripted(Arc::new(|_, v| {
        let n = v["params"][0].as_u64().unwrap() as usize;
        let big = format!("\"{}\"", "x".repeat(n));
        Act::Write(http("200 OK", "", &result_for(v, &big)))
    }))
    .await;
    let mut config = proxy_config(&[up]);
    config.max_response = 2048;
    let gw = start(config).await;
    for n in [2100, 2500, 5000] {
        let r = call(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"big","params":[{n}]}}"#),
        )
        .await;
        assert_eq!(r["error"]["code"], -32003, "{n}: {r}");
    }
}

/// A chunk size near u64::MAX after a first chunk: too large, for that
/// request only, and the gateway goes on (the sum with it once overflowed).
#[tokio::test]
async fn an_overflowing_chunk_size_is_a_clear_error() {
    let (up, _) = scripted(Arc::new(|n, v| {
        if n == 0 {
            Act::WriteClose(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\nffffffffffffffff\r\n"
                    .to_vec(),
            )
        } else {
            Act::Write(http("200 OK", "", &result_for(v, "\"0x3\"")))
        }
    }))
    .await;
    let gw = start(proxy_config(&[up])).await;
    let r = block_number(gw.addr, 1).await;
    assert_eq!(r["id"], 1, "{r}");
    // A chunk past the limit, as a Content-Length past it: too large (not a
    // caught panic of the gateway's, -32603 with `data.panic`).
    assert_eq!(r["error"]["code"], -32003, "{r}");
    let r = block_number(gw.addr, 2).await;
    assert_eq!(r["result"], "0x3", "{r}");
}

/// An invalid entry (answered -32600 with `id: null`) next to a forwarded
/// one: the batch gets both answers (the dispatcher's engine once panicked
/// on it; tests/dispatch_async.rs has the core's case).
#[tokio::test]
async fn an_invalid_entry_next_to_a_forwarded_one() {
    let (up, _) = scripted(echo_params()).await;
    let gw = start(proxy_config(&[up])).await;
    for bad in [
        "1",
        r#"{"jsonrpc":"2.0","id":{},"method":"eth_call"}"#,
        r#"{"jsonrpc":"2.0","id":2}"#,
    ] {
        let body =
            format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[1]}},{bad}]"#);
        let (status, text) = post(gw.addr, &body).await;
        assert_eq!(status, 200, "{bad}: {text}");
        let r: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(r[0]["result"], json!([1]), "{bad}: {text}");
        assert_eq!(r[1]["error"]["code"], -32600, "{bad}: {text}");
    }
}

/// A WebSocket upstream whose `eth_subscribe` answers after `delay_ms`;
/// counts `eth_unsubscribe` calls and pushes a head every 50 ms.
async fn slow_ws_upstream(delay_ms: u64) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use rpcwire::Call;
    use rpcwire::dispatch::AsyncCall;
    use rpcwire::server::subscriptions::Subscriptions;
    use rpcwire::server::ws::WsServer;
    use rpcwire::{Dispatcher, RpcError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    type S = Arc<AtomicUsize>;
    let unsubscribed: S = Arc::default();
    let d = Dispatcher::builder(Arc::clone(&unsubscribed))
        .async_method("eth_subscribe", move |c: AsyncCall<S>| async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let (id, sink) = Subscriptions::of(&c.ctx)?.subscribe()?;
            tokio::spawn(async move {
                for n in 0u64.. {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if sink.send(&json!({ "number": n })).is_err() {
                        break;
                    }
                }
            });
            Ok::<_, RpcError>(id)
        })
        .method("eth_unsubscribe", |c: Call<'_, S>| {
            let (id,): (String,) = c.decode()?;
            c.state.fetch_add(1, Ordering::SeqCst);
            Ok::<_, RpcError>(Subscriptions::of(c.ctx)?.unsubscribe(&id))
        })
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { WsServer::new(d).serve(listener).await });
    (addr, unsubscribed)
}

/// A client's `eth_subscribe` that timed out (-32002) leaves no
/// subscription running upstream: the upstream's late id is unsubscribed
/// at once.
#[tokio::test]
async fn a_timed_out_subscribe_is_unsubscribed_upstream() {
    use std::sync::atomic::Ordering;
    let (up, unsubscribed) = slow_ws_upstream(600).await;
    let gw = start(config::Config {
        upstream_ws: Some(format!("ws://{up}")),
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let (_ws, r) = subscribe_new_heads(gw.addr).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    // The upstream's late answer (a subscription id) arrives at 600 ms.
    eventually::eventually("the late subscription unsubscribed", || {
        unsubscribed.load(Ordering::SeqCst) > 0
    })
    .await;
    assert_eq!(
        unsubscribed.load(Ordering::SeqCst),
        1,
        "the upstream subscription the client never got is still running"
    );
}

/// `--upstream http://host:port?key=…` (an API key in the query, no path)
/// is served, and the key is in no error (it was once taken for the port).
#[tokio::test]
async fn an_upstream_url_with_a_query_and_no_path() {
    let (up, _) = scripted(echo_params()).await;
    let mut config = proxy_config(&[]);
    config.upstreams = vec![format!("http://{up}?apikey=secret")];
    let gw = start(config).await;
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[1]}"#,
    )
    .await;
    assert_eq!(r["result"], json!([1]), "{r}");
}

/// What a well-behaved fake upstream records.
#[derive(Default)]
struct Seen {
    /// Every id it was sent, as JSON text.
    ids: Mutex<Vec<String>>,
    /// Requests in flight right now, and the most at once.
    in_flight: AtomicUsize,
    most: AtomicUsize,
    calls: AtomicUsize,
}

/// A well-behaved upstream on rpcwire itself: `echo` answers its params
/// after `params[0]` milliseconds (so replies finish out of order),
/// `revert` answers with an error object carrying `data`, `eth_chainId`
/// answers `0x7a69`, `big` a 4 KB string.
async fn echo_upstream() -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let d = Dispatcher::builder(Arc::clone(&seen))
        .async_fallback(|c: AsyncCall<Arc<Seen>>| async move {
            let seen = &c.state;
            seen.calls.fetch_add(1, Ordering::SeqCst);
            seen.ids
                .lock()
                .unwrap()
                .push(String::from_utf8(c.id().unwrap().to_vec()).unwrap());
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most.fetch_max(now, Ordering::SeqCst);
            let out: Result<Value, RpcError> = match c.method() {
                "echo" => {
                    let p: Value = c.decode()?;
                    let ms = p[0].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!({ "echo": p }))
                }
                "revert" => Err(RpcError::raw(
                    3,
                    &br#"{"code":3,"message":"execution reverted: nope","data":"0x08c379a0"}"#[..],
                )),
                "eth_chainId" => Ok(json!("0x7a69")),
                "net_version" => Ok(json!("31337")),
                "big" => Ok(json!("x".repeat(4096))),
                other => Err(RpcError::new(-32601, format!("no {other}"))),
            };
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            out
        })
        .build()
        .unwrap();
    let limits = rpcwire::server::Limits::default();
    let service = HttpService::new(d, &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(rpcwire::server::http::serve(
        listener,
        service,
        limits,
        None,
        Shutdown::new(),
    ));
    (addr, seen)
}

#[tokio::test]
async fn a_hanging_upstream_times_out_with_32002_for_that_request_only() {
    for hyper_client in [false, true] {
        hanging_upstream(hyper_client).await;
    }
}

async fn hanging_upstream(hyper_client: bool) {
    let (hang, _) = fake_upstream(Fake::Hang).await;
    let gw = start(proxy_config_with(&[hang], hyper_client)).await;
    let started = std::time::Instant::now();
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":"h","method":"eth_blockNumber"}"#,
    )
    .await;
    assert_eq!(r["id"], "h");
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["timeout_ms"], 500);
    // The 500 ms timeout, not the client's patience (a busy host has room).
    assert!(started.elapsed() < Duration::from_secs(10));
    // A batch: the denied entry is answered at once, the hanging one times
    // out, in request order.
    let r = call(
        gw.addr,
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"admin_peers"}]"#,
    )
    .await;
    assert_eq!(r[0]["error"]["code"], -32002);
    assert_eq!(r[1]["error"]["code"], -32601);
}

#[tokio::test]
async fn reset_and_garbage_and_wrong_ids_are_clear_errors() {
    for (kind, message, reason) in [
        (Fake::Reset, "upstream unavailable", "connection"),
        (
            Fake::Garbage,
            "upstream reply malformed",
            "not a JSON-RPC response",
        ),
        (Fake::WrongId, "upstream reply malformed", "answered id"),
    ] {
        let (up, _) = fake_upstream(kind).await;
        let gw = start(proxy_config(&[up])).await;
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":[1],"method":"eth_gasPrice"}"#,
        )
        .await;
        // An invalid id is the dispatcher's -32600, never forwarded.
        assert_eq!(r["error"]["code"], -32600);
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":42,"method":"eth_gasPrice"}"#,
        )
        .await;
        assert_eq!(r["id"], 42);
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert_eq!(r["error"]["message"], message, "{r}");
        let data = r["error"]["data"]["reason"].as_str().unwrap();
        assert!(data.contains(reason), "{data}");
        assert_eq!(r["error"]["data"]["upstream"], up.to_string());
    }
}

#[tokio::test]
async fn chunked_replies_and_silently_closed_connections() {
    for (kind, result) in [(Fake::Chunked, "0xc4"), (Fake::CloseSilently, "0xc5")] {
        for hyper_client in [false, true] {
            let (up, count) = fake_upstream(kind).await;
            let gw = start(proxy_config_with(&[up], hyper_client)).await;
            for i in 0..4 {
                let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_gasPrice"}}"#);
                let r = call(gw.addr, &body).await;
                assert_eq!(r["result"], result, "{r}");
                // Time for the fake to close the pooled connection.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(count.load(Ordering::SeqCst), 4);
        }
    }
}

#[tokio::test]
async fn a_dead_upstream_fails_over_to_the_next_without_resending() {
    // Nothing listens on `dead`: connections are refused, so nothing was
    // sent and the next upstream takes the call.
    let refusing = refusing::refusing();
    let dead = refusing.addr;
    let (good, seen) = echo_upstream().await;
    let gw = start(proxy_config(&[dead, good])).await;
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[0]}"#,
    )
    .await;
    assert_eq!(r["result"]["echo"], json!([0]), "{r}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    // A reset after sending is not retried elsewhere (it may have been a
    // transaction).
    let (reset, resets) = fake_upstream(Fake::Reset).await;
    let gw = start(proxy_config(&[reset, good])).await;
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[0]}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32603);
    assert_eq!(resets.load(Ordering::SeqCst), 1);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    // The reset upstream now rests: the next call goes to the good one.
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":[0]}"#,
    )
    .await;
    assert_eq!(r["result"]["echo"], json!([0]), "{r}");
}

/// An upstream that drops connection attempts without a word (a host gone
/// from the network) fails its calls over at `--connect-timeout`, as a
/// refusing one does at once: the connect had no deadline of its own, so
/// every call waited out `--timeout` and was answered -32002 although the
/// next upstream was up. Over the own client, hyper's and a ws:// upstream
/// alike. Found by a review.
#[tokio::test]
async fn an_upstream_that_drops_connection_attempts_fails_over_at_the_connect_timeout() {
    let silent = refusing::silent();
    let (good, seen) = echo_upstream().await;
    let mut calls = 0;
    for (scheme, hyper_client) in [("http", false), ("http", true), ("ws", false)] {
        let silent_url = format!("{scheme}://{}", silent.addr);
        let config = |upstreams: Vec<String>| config::Config {
            upstreams,
            // Far longer than the connect's deadline: a call that waited
            // for the connect would be answered -32002.
            timeout: Duration::from_secs(20),
            connect_timeout: Some(Duration::from_millis(300)),
            hyper_client,
            ..Default::default()
        };
        let both = config(vec![silent_url.clone(), format!("http://{good}")]);
        let alone = config(vec![silent_url]);
        let gw = start(both).await;
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[0]}"#,
        )
        .await;
        assert_eq!(
            r["result"]["echo"],
            json!([0]),
            "{scheme} hyper {hyper_client}: {r}"
        );
        calls += 1;
        assert_eq!(seen.calls.load(Ordering::SeqCst), calls);
        // Alone, the silent upstream's calls fail at the connect's
        // deadline with a reason, not at the call's with -32002.
        let gw = start(alone).await;
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":[0]}"#,
        )
        .await;
        assert_eq!(r["id"], 2);
        assert_eq!(
            r["error"]["code"], -32603,
            "{scheme} hyper {hyper_client}: {r}"
        );
        assert_eq!(r["error"]["message"], "upstream unavailable", "{r}");
        let reason = r["error"]["data"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("within 300 ms"),
            "{scheme} hyper {hyper_client}: {r}"
        );
    }
}

#[test]
fn the_connect_timeout_is_shorter_than_the_call_s() {
    let with = |timeout_ms: u64, connect_ms: Option<u64>| {
        config::Config {
            timeout: Duration::from_millis(timeout_ms),
            connect_timeout: connect_ms.map(Duration::from_millis),
            ..Default::default()
        }
        .connect_timeout()
    };
    assert_eq!(with(30_000, None), Duration::from_secs(2));
    assert_eq!(with(1_000, None), Duration::from_millis(500));
    assert_eq!(with(30_000, Some(5_000)), Duration::from_secs(5));
    assert_eq!(with(1_000, Some(5_000)), Duration::from_secs(1));
    let parsed = config::Config::from_args(
        ["--timeout", "9000", "--connect-timeout", "700"]
            .map(String::from)
            .into_iter(),
    );
    assert_eq!(
        parsed.unwrap().connect_timeout(),
        Duration::from_millis(700)
    );
}

#[tokio::test]
async fn two_clients_with_one_id_get_their_own_answers() {
    let (up, seen) = echo_upstream().await;
    let gw = start(proxy_config(&[up])).await;
    clients_with_one_id(gw.addr, 8, 100, &seen).await;
    assert!(seen.most.load(Ordering::SeqCst) > 1, "the calls overlapped");
}

/// `clients` clients on connections of their own, all with id 1: each gets
/// its own answer, and the upstream saw each call under an id of its own.
async fn clients_with_one_id(addr: SocketAddr, clients: u64, delay_ms: u64, seen: &Seen) {
    let mut tasks = Vec::new();
    for client in 0..clients {
        tasks.push(tokio::spawn(async move {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":[{delay_ms},{client}]}}"#
            );
            (client, call(addr, &body).await)
        }));
    }
    for t in tasks {
        let (client, r) = t.await.unwrap();
        assert_eq!(r["id"], 1);
        assert_eq!(r["result"]["echo"][1], client, "{r}");
    }
    let ids = seen.ids.lock().unwrap().clone();
    assert_eq!(ids.len(), clients as usize);
    let distinct: HashSet<_> = ids.iter().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "the upstream saw a repeated id: {ids:?}"
    );
}

#[tokio::test]
async fn workers_share_one_upstream_id_counter_and_one_chain() {
    // Forwarding: clients on many connections, spread by the kernel over
    // four workers.
    let (up, seen) = echo_upstream().await;
    let gw = start_workers(proxy_config(&[up]), 4).await;
    clients_with_one_id(gw.addr, 32, 50, &seen).await;
    // Its port is its own: a second gateway on it is refused, not let in
    // to share it.
    let e = app::claim_port(gw.addr).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    drop(gw);

    // The built-in chain: a transfer sent through one connection is seen
    // through every other, whichever worker serves it.
    let gw = start_workers(config::Config::default(), 4).await;
    let a = gw.addr;
    assert_eq!(rpc(a, "eth_blockNumber", json!([])).await["result"], "0x0");
    let to = Address::repeat_byte(0x22);
    let raw = sign(eip1559(0, to, 7, 31337), key(0));
    let r = send(a, &raw).await;
    assert!(r["result"].is_string(), "{r}");
    for _ in 0..16 {
        assert_eq!(rpc(a, "eth_blockNumber", json!([])).await["result"], "0x1");
        assert_eq!(rpc(a, "eth_getBalance", json!([to])).await["result"], "0x7");
    }
}

#[tokio::test]
async fn batches_split_and_merge_in_request_order_with_ids_byte_for_byte() {
    let (up, seen) = echo_upstream().await;
    let gw = start(proxy_config(&[up])).await;
    // Later entries answer first upstream; ids of every form come back as
    // they were sent; the failing entries fail alone.
    let body = r#"[
        {"jsonrpc":"2.0","id":"a-1","method":"echo","params":[300,"first"]},
        {"jsonrpc":"2.0","id":1.50,"method":"echo","params":[200,{"x" : [1, 2]}]},
        {"jsonrpc":"2.0","id":null,"method":"revert","params":[]},
        {"jsonrpc":"2.0","method":"echo","params":[0,"a notification"]},
        {"jsonrpc":"2.0","id":18446744073709551616,"method":"personal_sign","params":[]},
        {"jsonrpc":"2.0","id":5,"method":"echo","params":[0,"last"]}
    ]"#;
    let (status, text) = post(gw.addr, body).await;
    assert_eq!(status, 200);
    assert!(text.contains(r#""id":1.50,"#), "{text}");
    assert!(text.contains(r#""id":18446744073709551616,"#), "{text}");
    // The upstream's error object, byte for byte.
    assert!(
        text.contains(r#"{"jsonrpc":"2.0","id":null,"error":{"code":3,"message":"execution reverted: nope","data":"0x08c379a0"}}"#),
        "{text}"
    );
    // The params went upstream byte for byte, spaces and all.
    assert!(text.contains(r#"{"echo":[200,{"x":[1,2]}]}"#), "{text}");
    let r: Value = serde_json::from_str(&text).unwrap();
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r[0]["id"], "a-1");
    assert_eq!(r[0]["result"]["echo"][1], "first");
    assert_eq!(r[2]["error"]["code"], 3);
    assert_eq!(r[3]["error"]["code"], -32601);
    assert_eq!(r[3]["error"]["data"]["rule"], "deny personal_*");
    assert_eq!(r[4]["result"]["echo"][1], "last");
    // The notification was forwarded too (and its reply dropped).
    eventually::eventually("the notification forwarded", || {
        seen.calls.load(Ordering::SeqCst) >= 5
    })
    .await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn policy_local_forward_deny() {
    let (up, seen) = echo_upstream().await;
    let mut config = proxy_config(&[up]);
    config.deny.retain(|d| d != "debug_");
    config.deny.push("echo".into());
    let gw = start(config).await;
    // Local after the first answer.
    for _ in 0..3 {
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
        )
        .await;
        assert_eq!(r["result"], "0x7a69");
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":1,"method":"net_version","params":[]}"#,
        )
        .await;
        assert_eq!(r["result"], "31337");
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    // Denied by default, and by a rule of ours.
    for (method, rule) in [("admin_nodeInfo", "deny admin_*"), ("echo", "deny echo*")] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":[0]}}"#);
        let r = call(gw.addr, &body).await;
        assert_eq!(r["error"]["code"], -32601, "{r}");
        assert_eq!(r["error"]["data"]["rule"], rule);
        assert_eq!(r["error"]["data"]["method"], method);
    }
    // `--allow debug_` lifted that rule: forwarded (the upstream has no
    // such method, and says so).
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"debug_traceCall"}"#,
    )
    .await;
    assert_eq!(r["error"]["message"], "no debug_traceCall");
    // Unknown methods are forwarded by the fallback.
    let r = call(gw.addr, r#"{"jsonrpc":"2.0","id":1,"method":"anvil_mine"}"#).await;
    assert_eq!(r["error"]["message"], "no anvil_mine");
    // `rpc.` names stay reserved, never forwarded.
    let calls = seen.calls.load(Ordering::SeqCst);
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"rpc.modules"}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(seen.calls.load(Ordering::SeqCst), calls);
}

/// An upstream on chain 1 that answers its first call, then resets every
/// connection (so it rests).
async fn chain_one_then_resets() -> SocketAddr {
    let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = first.local_addr().unwrap();
    tokio::spawn(async move {
        let mut answered = false;
        while let Ok((mut s, _)) = first.accept().await {
            if answered {
                continue;
            }
            answered = true;
            tokio::spawn(async move {
                let Some(body) = read_request(&mut s).await else {
                    return;
                };
                let v: Value = serde_json::from_slice(&body).unwrap();
                let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":"0x1"});
                let _ = s.write_all(json_200(&reply.to_string()).as_bytes()).await;
            });
        }
    });
    addr
}

/// `eth_chainId` (and `net_version`) answered by the gateway itself once
/// the first upstream told it, but not while calls go to a fallback: then
/// the kept answer told clients the first upstream's chain while every
/// call went to the fallback's (a wallet signed for one chain and sent to
/// the other; found by a review). With one upstream, resting or not, the
/// kept answer stands (no other chain can serve).
#[tokio::test]
async fn the_chain_id_kept_is_not_given_while_a_fallback_serves() {
    let (fallback, _) = echo_upstream().await;
    let chain_id = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let echo = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[0]}}"#);
    for with_fallback in [true, false] {
        let first = chain_one_then_resets().await;
        let upstreams = if with_fallback {
            vec![first, fallback]
        } else {
            vec![first]
        };
        let gw = start(proxy_config(&upstreams)).await;
        assert_eq!(call(gw.addr, chain_id).await["result"], "0x1");
        // The first upstream fails a call (sent, so not retried) and rests.
        let r = call(gw.addr, &echo(2)).await;
        assert_eq!(r["error"]["code"], -32603, "{r}");
        if with_fallback {
            let r = call(gw.addr, &echo(3)).await;
            assert_eq!(r["result"]["echo"], json!([0]), "the fallback serves: {r}");
            assert_eq!(call(gw.addr, chain_id).await["result"], "0x7a69");
        } else {
            assert_eq!(call(gw.addr, chain_id).await["result"], "0x1");
        }
    }
}

/// A `--deny` rule covers every method it names: the ones the gateway
/// answers itself (`eth_chainId`, `net_version`, the subscriptions) were
/// registered before the rules were read and stayed served, and the
/// built-in chain read no rule at all. Found by a review.
#[tokio::test]
async fn deny_rules_cover_local_answers_and_the_built_in_chain() {
    let (up, _) = echo_upstream().await;
    let mut config = proxy_config(&[up]);
    config.deny.extend(["net_".into(), "eth_chainId".into()]);
    let gw = start(config).await;
    for (method, rule) in [
        ("net_version", "deny net_*"),
        ("eth_chainId", "deny eth_chainId*"),
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#);
        let r = call(gw.addr, &body).await;
        assert_eq!(r["error"]["code"], -32601, "{r}");
        assert_eq!(r["error"]["data"]["rule"], rule, "{r}");
    }

    let mut config = config::Config::default();
    config.deny.push("eth_sendRawTransaction".into());
    let gw = start(config).await;
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_eq!(
        r["error"]["data"]["rule"], "deny eth_sendRawTransaction*",
        "{r}"
    );
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
    )
    .await;
    assert_eq!(r["result"], "0x7a69", "{r}");
}

#[tokio::test]
async fn limits_body_batch_and_response() {
    let (up, _) = echo_upstream().await;
    let mut config = proxy_config(&[up]);
    config.max_body = 1024;
    config.max_batch = 3;
    config.max_response = 2048;
    let gw = start(config).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":[0,"{}"]}}"#,
        "y".repeat(2000)
    );
    let (status, body) = post(gw.addr, &big).await;
    assert_eq!(status, 413);
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["error"]["code"], -32600);
    assert_eq!(r["error"]["data"]["limit"], 1024);
    let batch = format!(
        "[{}]",
        [r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#; 4].join(",")
    );
    let r = call(gw.addr, &batch).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r["error"]["data"].to_string().contains('3'), "{r}");
    // The upstream's 4 KB answer is past the 2 KB reply limit.
    let r = call(gw.addr, r#"{"jsonrpc":"2.0","id":9,"method":"big"}"#).await;
    assert_eq!(r["id"], 9);
    assert_eq!(r["error"]["code"], -32003, "{r}");
}

#[tokio::test]
async fn websocket_on_the_http_port_forwards_and_survives_bad_frames() {
    let (up, _) = echo_upstream().await;
    let gw = start(proxy_config(&[up])).await;
    let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{}", gw.addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    ws.send(Message::text("{not json")).await.unwrap();
    let r: Value =
        serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(r["error"]["code"], -32700);
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":"w","method":"echo","params":[0,"ws"]}"#,
    ))
    .await
    .unwrap();
    let r: Value =
        serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(r["id"], "w");
    assert_eq!(r["result"]["echo"][1], "ws");
    // No WebSocket upstream answers on the echo upstream's port: a clear
    // error, and the connection goes on.
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}"#,
    ))
    .await
    .unwrap();
    let r: Value =
        serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(r["id"], 2);
    assert!(r["error"]["code"].is_i64(), "{r}");
    // Over HTTP, eth_subscribe is refused (no connection to push on).
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["newHeads"]}"#,
    )
    .await;
    assert!(r["error"]["code"].is_i64(), "{r}");
    // A GET that is not an upgrade is not JSON-RPC.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
}

/// A WebSocket upstream with `eth_subscribe` (newHeads pushed on demand
/// through `tx`) and `eth_unsubscribe`, on rpcwire's own server.
async fn ws_upstream() -> (
    SocketAddr,
    tokio::sync::broadcast::Sender<u64>,
    Arc<AtomicUsize>,
) {
    use rpcwire::Call;
    use rpcwire::server::subscriptions::Subscriptions;
    use rpcwire::server::ws::WsServer;
    let (tx, _) = tokio::sync::broadcast::channel::<u64>(16);
    let unsubscribed = Arc::new(AtomicUsize::new(0));
    let state = (tx.clone(), Arc::clone(&unsubscribed));
    type S = (tokio::sync::broadcast::Sender<u64>, Arc<AtomicUsize>);
    let d = Dispatcher::builder(state)
        .method("eth_subscribe", |c: Call<'_, S>| {
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
            let mut rx = c.state.0.subscribe();
            tokio::spawn(async move {
                while let Ok(n) = rx.recv().await {
                    if sink.send(&json!({ "number": format!("{n:#x}") })).is_err() {
                        break;
                    }
                }
            });
            Ok::<_, RpcError>(id)
        })
        .method("eth_unsubscribe", |c: Call<'_, S>| {
            let (id,): (String,) = c.decode()?;
            c.state.1.fetch_add(1, Ordering::SeqCst);
            Ok::<_, RpcError>(Subscriptions::of(c.ctx)?.unsubscribe(&id))
        })
        .method("eth_blockNumber", |c: Call<'_, S>| {
            c.reply.raw(br#""0x10""#)
        })
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { WsServer::new(d).serve(listener).await });
    (addr, tx, unsubscribed)
}

/// The gateway in front of [`ws_upstream`], with the upstream's head
/// sender and unsubscribe count.
async fn gateway_on_ws_upstream() -> (
    Gateway,
    tokio::sync::broadcast::Sender<u64>,
    Arc<AtomicUsize>,
) {
    let (up, heads, unsubscribed) = ws_upstream().await;
    let config = config::Config {
        upstream_ws: Some(format!("ws://{up}")),
        timeout: Duration::from_secs(2),
        ..Default::default()
    };
    (start(config).await, heads, unsubscribed)
}

#[tokio::test]
async fn subscriptions_are_relayed_and_unsubscribed_upstream() {
    let (gw, heads, unsubscribed) = gateway_on_ws_upstream().await;
    let (mut ws, r) = subscribe_new_heads(gw.addr).await;
    let sub = r["result"].as_str().unwrap().to_string();
    heads.send(7).unwrap();
    let n = read_json(&mut ws).await;
    assert_eq!(n["method"], "eth_subscription");
    assert_eq!(n["params"]["subscription"], sub.as_str());
    assert_eq!(n["params"]["result"]["number"], "0x7");
    let unsub =
        format!(r#"{{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["{sub}"]}}"#);
    ws.send(Message::text(unsub.clone())).await.unwrap();
    let r = read_json(&mut ws).await;
    assert_eq!(r["id"], 2);
    assert_eq!(r["result"], true);
    // The upstream is told, not waited for.
    eventually::eventually("the upstream unsubscribed", || {
        unsubscribed.load(Ordering::SeqCst) == 1
    })
    .await;
    heads.send(8).unwrap();
    // Nothing more is relayed; a second unsubscribe is false.
    ws.send(Message::text(unsub)).await.unwrap();
    let r = read_json(&mut ws).await;
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"], false);
    // A client that leaves is unsubscribed upstream for it.
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["newHeads"]}"#,
    ))
    .await
    .unwrap();
    assert!(read_json(&mut ws).await["result"].is_string());
    drop(ws);
    for _ in 0..50 {
        if unsubscribed.load(Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(unsubscribed.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn unsubscribing_another_clients_subscription_leaves_it_running() {
    let (gw, heads, unsubscribed) = gateway_on_ws_upstream().await;
    let (mut owner, r) = subscribe_new_heads(gw.addr).await;
    let sub = r["result"].as_str().unwrap().to_string();
    let (mut other, _) = tokio_tungstenite::connect_async(format!("ws://{}", gw.addr))
        .await
        .unwrap();
    let unsub =
        format!(r#"{{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["{sub}"]}}"#);
    for _ in 0..3 {
        other.send(Message::text(unsub.clone())).await.unwrap();
        let r = read_json(&mut other).await;
        assert_eq!(r["result"], false, "{r}");
    }
    // The owner's relay was never touched: nothing unsubscribed upstream,
    // and the next head reaches it.
    heads.send(9).unwrap();
    let n = read_json(&mut owner).await;
    assert_eq!(n["params"]["subscription"], sub.as_str());
    assert_eq!(n["params"]["result"]["number"], "0x9");
    assert_eq!(unsubscribed.load(Ordering::SeqCst), 0);
    owner.send(Message::text(unsub)).await.unwrap();
    assert_eq!(read_json(&mut owner).await["result"], true);
    eventually::eventually("the upstream unsubscribed", || {
        unsubscribed.load(Ordering::SeqCst) == 1
    })
    .await;
}

type WsClient = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A WebSocket client of the gateway at `addr` that asked for new heads
/// (`eth_subscribe`, id 1), and the gateway's answer.
async fn subscribe_new_heads(addr: SocketAddr) -> (WsClient, Value) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#,
    ))
    .await
    .unwrap();
    let answer = read_json(&mut ws).await;
    (ws, answer)
}

async fn read_json<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("an answer in time")
        .unwrap()
        .unwrap();
    serde_json::from_str(m.to_text().unwrap()).unwrap()
}

// The built-in chain.

const KEY0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

async fn send(addr: SocketAddr, raw: &str) -> Value {
    call(
        addr,
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["{raw}"]}}"#
        ),
    )
    .await
}

async fn rpc(addr: SocketAddr, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    call(addr, &body).await
}

#[test]
fn the_dev_accounts_are_the_keys_addresses() {
    assert_eq!(chain::DEV_ACCOUNTS[0].1, KEY0);
    for (i, (addr, _)) in chain::DEV_ACCOUNTS.iter().enumerate() {
        let raw = sign(eip1559(0, Address::ZERO, 0, 1), key(i));
        let bytes = alloy_primitives::hex::decode(&raw[2..]).unwrap();
        let tx = <TxEnvelope as alloy_eips::eip2718::Decodable2718>::decode_2718(&mut &bytes[..])
            .unwrap();
        let from = alloy_consensus::transaction::SignerRecoverable::recover_signer(&tx).unwrap();
        assert_eq!(from, addr.parse::<Address>().unwrap(), "account {i}");
    }
}

#[tokio::test]
async fn the_built_in_chain_takes_signed_transfers() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    assert_eq!(rpc(a, "eth_chainId", json!([])).await["result"], "0x7a69");
    assert_eq!(rpc(a, "net_version", json!([])).await["result"], "31337");
    assert_eq!(rpc(a, "eth_blockNumber", json!([])).await["result"], "0x0");
    let balance0 = rpc(a, "eth_getBalance", json!([address(0), "latest"])).await;
    assert_eq!(balance0["result"], "0x21e19e0c9bab2400000"); // 10,000 ETH
    let to = Address::repeat_byte(0x11);

    // EIP-1559.
    let raw = sign(eip1559(0, to, 1_000, 31337), key(0));
    let hash = send(a, &raw).await["result"].as_str().unwrap().to_string();
    let receipt = rpc(a, "eth_getTransactionReceipt", json!([hash])).await["result"].clone();
    assert_eq!(receipt["status"], "0x1");
    assert_eq!(receipt["gasUsed"], "0x5208");
    assert_eq!(receipt["blockNumber"], "0x1");
    assert_eq!(receipt["effectiveGasPrice"], "0x77359400"); // 1 gwei base + 1 gwei tip
    assert_eq!(receipt["logs"], json!([]));
    let tx = rpc(a, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
    assert_eq!(tx["from"], format!("{:#x}", address(0)));
    assert_eq!(tx["type"], "0x2");
    assert_eq!(
        rpc(a, "eth_getBalance", json!([to])).await["result"],
        "0x3e8"
    );
    let spent = U256::from(21_000u64 * 2_000_000_000 + 1_000);
    let want = U256::from(chain::DEV_BALANCE_WEI) - spent;
    assert_eq!(
        rpc(a, "eth_getBalance", json!([address(0), "latest"])).await["result"],
        format!("{want:#x}")
    );
    // History: the balance at block 0 is unchanged.
    assert_eq!(
        rpc(a, "eth_getBalance", json!([address(0), "0x0"])).await["result"],
        "0x21e19e0c9bab2400000"
    );
    assert_eq!(
        rpc(a, "eth_getTransactionCount", json!([address(0), "pending"])).await["result"],
        "0x1"
    );
    let block = rpc(a, "eth_getBlockByNumber", json!(["latest", true])).await["result"].clone();
    assert_eq!(block["transactions"][0]["hash"], hash.as_str());
    let by_hash =
        rpc(a, "eth_getBlockByHash", json!([block["hash"], false])).await["result"].clone();
    assert_eq!(by_hash["transactions"][0], hash.as_str());
    assert_eq!(
        by_hash["parentHash"],
        rpc(a, "eth_getBlockByNumber", json!(["0x0", false])).await["result"]["hash"]
    );

    // Legacy (EIP-155) and EIP-2930, from another account.
    let legacy = TxLegacy {
        chain_id: Some(31337),
        nonce: 0,
        gas_price: 2_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(to),
        value: U256::from(1u64),
        input: ABytes::new(),
    };
    let r = send(a, &sign(legacy, key(1))).await;
    assert!(r["result"].is_string(), "{r}");
    let r = rpc(a, "eth_getTransactionByHash", json!([r["result"]])).await;
    let v = r["result"]["v"].as_str().unwrap();
    assert!(
        v == "0xf4f5" || v == "0xf4f6",
        "EIP-155 v for chain 31337: {v}"
    );
    let eip2930 = TxEip2930 {
        chain_id: 31337,
        nonce: 1,
        gas_price: 2_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(to),
        value: U256::from(1u64),
        access_list: Default::default(),
        input: ABytes::new(),
    };
    let r = send(a, &sign(eip2930, key(1))).await;
    assert!(r["result"].is_string(), "{r}");
    assert_eq!(rpc(a, "eth_blockNumber", json!([])).await["result"], "0x3");

    // Refusals, each with geth's words.
    let cases = [
        (sign(eip1559(0, to, 1, 31337), key(0)), "nonce too low"),
        (sign(eip1559(5, to, 1, 31337), key(0)), "nonce too high"),
        (sign(eip1559(0, to, 1, 1), key(2)), "invalid chain id"),
        (
            sign(eip1559(0, to, chain::DEV_BALANCE_WEI, 31337), key(2)),
            "insufficient funds for gas * price + value",
        ),
        (
            sign(
                TxEip1559 {
                    gas_limit: 20_000,
                    ..eip1559(0, to, 1, 31337)
                },
                key(2),
            ),
            "intrinsic gas too low",
        ),
        (
            sign(
                TxEip1559 {
                    to: TxKind::Create,
                    gas_limit: 100_000,
                    ..eip1559(0, to, 0, 31337)
                },
                key(2),
            ),
            "contract creation",
        ),
        ("0x02f8".to_string(), "could not be decoded"),
    ];
    for (raw, words) in cases {
        let r = send(a, &raw).await;
        assert_eq!(r["error"]["code"], -32000, "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message} lacks {words}");
    }
    // The same transaction twice: mined when first sent, so its nonce is
    // used (geth's answer for a mined transaction; "already known" is for
    // one in its pool).
    let r = send(a, &sign(eip1559(1, to, 1, 31337), key(0))).await;
    assert!(r["result"].is_string(), "{r}");
    let r = send(a, &sign(eip1559(1, to, 1, 31337), key(0))).await;
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("nonce too low"), "{r}");

    // The other methods clients call.
    assert_eq!(
        rpc(
            a,
            "eth_estimateGas",
            json!([{"from": address(0), "to": to, "value": "0x1"}])
        )
        .await["result"],
        "0x5208"
    );
    assert_eq!(
        rpc(
            a,
            "eth_call",
            json!([{"to": to, "data": "0x1234"}, "latest"])
        )
        .await["result"],
        "0x"
    );
    assert_eq!(
        rpc(a, "eth_call", json!([{"data": "0x1234"}])).await["error"]["code"],
        -32000
    );
    assert_eq!(
        rpc(a, "eth_getCode", json!([to, "latest"])).await["result"],
        "0x"
    );
    // Storage reads zero (no contract can be deployed): `cast storage`,
    // ethers' `getStorage` and viem's `getStorageAt` got -32601.
    assert_eq!(
        rpc(a, "eth_getStorageAt", json!([to, "0x0", "latest"])).await["result"],
        format!("0x{}", "0".repeat(64))
    );
    let r = rpc(a, "eth_getStorageAt", json!([to, "0xzz", "latest"])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(
        rpc(
            a,
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "toBlock": "latest"}])
        )
        .await["result"],
        json!([])
    );
    // anvil's dev accounts, as anvil lists them (built_in_chain.rs sends
    // from them).
    let accounts = rpc(a, "eth_accounts", json!([])).await["result"].clone();
    assert_eq!(accounts.as_array().map(Vec::len), Some(10), "{accounts}");
    assert_eq!(accounts[0], json!(address(0)), "{accounts}");
    assert_eq!(rpc(a, "eth_syncing", json!([])).await["result"], false);
    assert_eq!(
        rpc(a, "eth_gasPrice", json!([])).await["result"],
        "0x77359400"
    );
    assert_eq!(
        rpc(a, "eth_maxPriorityFeePerGas", json!([])).await["result"],
        "0x3b9aca00"
    );
    let fees = rpc(a, "eth_feeHistory", json!(["0x2", "latest", [50]])).await["result"].clone();
    assert_eq!(fees["baseFeePerGas"].as_array().unwrap().len(), 3);
    assert_eq!(fees["reward"][0][0], "0x3b9aca00");
    assert_eq!(
        rpc(a, "eth_getTransactionReceipt", json!([B256::ZERO])).await["result"],
        Value::Null
    );
    assert_eq!(
        rpc(a, "eth_getBlockByNumber", json!(["0x99", false])).await["result"],
        Value::Null
    );
    let v = rpc(a, "web3_clientVersion", json!([])).await;
    assert!(v["result"].as_str().unwrap().starts_with("rpcwire-gateway"));
    // A batch against the built-in chain.
    let r = call(a, r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0xbad"]}]"#).await;
    assert_eq!(r[0]["result"], "0x4");
    assert_eq!(r[1]["error"]["code"], -32602);
}

/// The built-in chain: a value near 2^256 is insufficient funds (the sum
/// `gas * price + value` once wrapped in U256, passed the balance check and
/// minted ether).
#[tokio::test]
async fn value_overflowing_the_cost_is_insufficient_funds() {
    let gw = start(config::Config::default()).await;
    let to = Address::repeat_byte(0x22);
    // 21000 gas at 1 gwei (base fee, no tip): gas*price = 21000e9.
    let k = U256::from(21_000u64 * 1_000_000_000);
    let tx = TxEip1559 {
        max_fee_per_gas: 1_000_000_000,
        max_priority_fee_per_gas: 0,
        value: U256::MAX - k + U256::from(1u8), // cost wraps to 0
        ..eip1559(0, to, 0, 31337)
    };
    let r = send(gw.addr, &sign(tx, key(0))).await;
    let bal = rpc(gw.addr, "eth_getBalance", json!([to])).await["result"].clone();
    assert!(
        err_msg(&r).contains("insufficient funds"),
        "accepted: {r}; recipient balance now {bal}"
    );
}

/// The built-in chain: each block's timestamp is after its parent's, as a
/// header's must be (blocks mined within one second once shared one).
#[tokio::test]
async fn block_timestamps_strictly_increase() {
    let gw = start(config::Config::default()).await;
    for n in 0..4 {
        let r = send(
            gw.addr,
            &sign(eip1559(n, Address::repeat_byte(1), 1, 31337), key(0)),
        )
        .await;
        assert!(r["result"].is_string(), "{r}");
    }
    let mut prev = 0u64;
    for n in 0..=4u64 {
        let b = rpc(
            gw.addr,
            "eth_getBlockByNumber",
            json!([format!("{n:#x}"), false]),
        )
        .await;
        let t = u64::from_str_radix(&b["result"]["timestamp"].as_str().unwrap()[2..], 16).unwrap();
        assert!(
            n == 0 || t > prev,
            "block {n} timestamp {t} not after parent {prev}"
        );
        prev = t;
    }
}

/// The built-in chain: `eth_estimateGas` counts the access list, so its
/// estimate is a gas limit the transaction is taken with (it once counted
/// calldata only: "intrinsic gas too low").
#[tokio::test]
async fn estimate_gas_counts_the_access_list() {
    let gw = start(config::Config::default()).await;
    let to = Address::repeat_byte(5);
    let list = json!([{"address": to, "storageKeys": [B256::ZERO]}]);
    let est = rpc(
        gw.addr,
        "eth_estimateGas",
        json!([{"from": address(0), "to": to, "value": "0x1", "accessList": list}]),
    )
    .await;
    let gas = u64::from_str_radix(&est["result"].as_str().unwrap()[2..], 16).unwrap();
    let tx = TxEip1559 {
        gas_limit: gas,
        access_list: alloy_eips::eip2930::AccessList(vec![alloy_eips::eip2930::AccessListItem {
            address: to,
            storage_keys: vec![B256::ZERO],
        }]),
        ..eip1559(0, to, 1, 31337)
    };
    let r = send(gw.addr, &sign(tx, key(0))).await;
    assert!(r["result"].is_string(), "estimate {gas} then: {r}");
    assert_eq!(gas, 21_000 + 2_400 + 1_900);
}

/// The built-in chain: bytes after a raw transaction make it invalid, as
/// geth says ("input contains more than one value"; they were once
/// ignored).
#[tokio::test]
async fn trailing_bytes_after_a_raw_transaction_are_refused() {
    let gw = start(config::Config::default()).await;
    let whole = sign(eip1559(0, Address::repeat_byte(6), 1, 31337), key(0));
    let r = send(gw.addr, &(whole.clone() + "deadbeef")).await;
    assert_eq!(
        r["error"]["code"], -32000,
        "accepted with trailing bytes: {r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("transaction could not be decoded")),
        "{r}"
    );
    // The same transaction alone: taken (the bytes behind were the fault).
    let r = send(gw.addr, &whole).await;
    assert!(r["result"].is_string(), "{r}");
}

/// The built-in chain: the priority fee goes to the block's `miner` (it
/// was once charged to the sender and credited to nobody).
#[tokio::test]
async fn the_tip_goes_to_the_miner() {
    let gw = start(config::Config::default()).await;
    let r = send(
        gw.addr,
        &sign(eip1559(0, Address::repeat_byte(7), 1, 31337), key(0)),
    )
    .await;
    assert!(r["result"].is_string());
    let b = rpc(gw.addr, "eth_getBlockByNumber", json!(["latest", false])).await["result"].clone();
    let bal = rpc(gw.addr, "eth_getBalance", json!([b["miner"], "latest"])).await;
    assert_eq!(
        bal["result"],
        format!("{:#x}", 21_000u64 * 1_000_000_000),
        "miner {}",
        b["miner"]
    );
}

/// The built-in chain: `eth_subscribe("newHeads")` over WebSocket sends
/// each block's header as it is mined, and `eth_unsubscribe` stops it
/// (the chain once answered -32601, so viem's `watchBlocks` over a
/// WebSocket and ethers' `WebSocketProvider.on("block")` failed on it).
#[tokio::test]
async fn the_built_in_chain_sends_new_heads() {
    let gw = start(config::Config::default()).await;
    let (mut ws, answer) = subscribe_new_heads(gw.addr).await;
    let id = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    let r = send(
        gw.addr,
        &sign(eip1559(0, Address::repeat_byte(8), 1, 31337), key(0)),
    )
    .await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let note = read_json(&mut ws).await;
    assert_eq!(note["method"], "eth_subscription", "{note}");
    assert_eq!(note["params"]["subscription"], id);
    let head = &note["params"]["result"];
    let receipt = rpc(gw.addr, "eth_getTransactionReceipt", json!([hash])).await["result"].clone();
    assert_eq!(head["hash"], receipt["blockHash"]);
    assert_eq!(head["number"], "0x1");
    // The header is the block's, without its body.
    let mut block =
        rpc(gw.addr, "eth_getBlockByNumber", json!(["0x1", false])).await["result"].clone();
    for body in ["transactions", "uncles", "size", "totalDifficulty"] {
        block.as_object_mut().unwrap().remove(body);
    }
    assert_eq!(*head, block);

    // Unsubscribed: `true`, then `false`; no head follows.
    for want in [true, false] {
        ws.send(Message::text(format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["{id}"]}}"#
        )))
        .await
        .unwrap();
        assert_eq!(read_json(&mut ws).await["result"], want);
    }
    let r = send(
        gw.addr,
        &sign(eip1559(1, Address::repeat_byte(8), 1, 31337), key(0)),
    )
    .await;
    assert!(r["result"].is_string(), "{r}");
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}"#,
    ))
    .await
    .unwrap();
    let next = read_json(&mut ws).await;
    assert_eq!(next["id"], 3, "a head after eth_unsubscribe: {next}");

    // `syncing` is accepted (and stays quiet: the chain never syncs), as
    // geth does; other kinds get geth's -32601; over HTTP, no
    // notifications.
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":4,"method":"eth_subscribe","params":["syncing"]}"#,
    ))
    .await
    .unwrap();
    let r = read_json(&mut ws).await;
    assert!(r["result"].is_string(), "{r}");
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newBlocks"]}"#,
    ))
    .await
    .unwrap();
    let r = read_json(&mut ws).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_eq!(
        r["error"]["message"], "no \"newBlocks\" subscription in eth namespace",
        "{r}"
    );
    let r = rpc(gw.addr, "eth_subscribe", json!(["newHeads"])).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
}

/// The built-in chain's `newPendingTransactions` subscription sends each
/// accepted transaction's hash (or, with geth's `true`, the transaction,
/// as `eth_getTransactionByHash` has it) before its block's header; a
/// `logs` subscription is accepted, its filter checked, and stays quiet
/// (nothing emits logs). Both were -32601, so ethers'
/// `WebSocketProvider.on("pending")` and contract event listeners failed.
#[tokio::test]
async fn the_built_in_chain_sends_pending_transactions() {
    let gw = start(config::Config::default()).await;
    let (mut ws, answer) = subscribe_new_heads(gw.addr).await;
    let heads = answer["result"].as_str().unwrap().to_owned();
    async fn call(ws: &mut WsClient, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
        ws.send(Message::text(request.to_string())).await.unwrap();
        read_json(ws).await
    }
    let subscribe = async |ws: &mut WsClient, id: u64, params: Value| {
        call(ws, id, "eth_subscribe", params).await
    };
    let r = subscribe(&mut ws, 2, json!(["newPendingTransactions"])).await;
    let hashes = r["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let r = subscribe(&mut ws, 3, json!(["newPendingTransactions", true])).await;
    let full = r["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let r = subscribe(
        &mut ws,
        4,
        json!(["logs", {"address": Address::repeat_byte(8)}]),
    )
    .await;
    let logs = r["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    // A logs filter is read as eth_getLogs reads one.
    let r = subscribe(&mut ws, 5, json!(["logs", {"address": "0x12"}])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = subscribe(&mut ws, 6, json!(["newPendingTransactions", "yes"])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let r = send(
        gw.addr,
        &sign(eip1559(0, Address::repeat_byte(8), 1, 31337), key(0)),
    )
    .await;
    let hash = r["result"].as_str().unwrap_or_else(|| panic!("{r}"));
    let tx = rpc(gw.addr, "eth_getTransactionByHash", json!([hash])).await["result"].clone();
    let mut got = Vec::new();
    for _ in 0..3 {
        let note = read_json(&mut ws).await;
        assert_eq!(note["method"], "eth_subscription", "{note}");
        got.push(note["params"].clone());
    }
    assert_eq!(got[0], json!({"subscription": hashes, "result": hash}));
    assert_eq!(got[1], json!({"subscription": full, "result": tx}));
    assert_eq!(got[2]["subscription"], heads);
    assert_eq!(got[2]["result"]["number"], "0x1");
    // Nothing for the logs subscription: the next message is a reply.
    let r = subscribe(&mut ws, 7, json!(["newHeads"])).await;
    assert_eq!(r["id"], 7, "{r}");
    for id in [&hashes, &full, &logs] {
        let r = call(&mut ws, 8, "eth_unsubscribe", json!([id])).await;
        assert_eq!(r["result"], true, "{r}");
    }
}

/// The built-in chain's filters, as geth's: a block filter reports the
/// hashes of the blocks mined since it was made or last polled, a pending
/// transaction filter their transactions' hashes (or with `fullTx` the
/// transactions), a log filter nothing (nothing emits logs); each poll
/// moves on; `eth_getFilterLogs` serves log filters only;
/// `eth_uninstallFilter` is `true` once; an id naming no filter is
/// -32000 "filter not found". They were -32601, so ethers' polling
/// `JsonRpcProvider.on("pending")` and contract listeners failed on it.
#[tokio::test]
async fn the_built_in_chain_keeps_filters() {
    let gw = start(config::Config::default()).await;
    let a = gw.addr;
    let new = async |method: &str, params: Value| {
        let r = rpc(a, method, params).await;
        r["result"]
            .as_str()
            .unwrap_or_else(|| panic!("{method}: {r}"))
            .to_owned()
    };
    let blocks = new("eth_newBlockFilter", json!([])).await;
    let pending = new("eth_newPendingTransactionFilter", json!([])).await;
    let full = new("eth_newPendingTransactionFilter", json!([true])).await;
    let logs = new(
        "eth_newFilter",
        json!([{"fromBlock": "0x0", "topics": [null]}]),
    )
    .await;
    assert_eq!(
        [&blocks, &pending, &full, &logs]
            .into_iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        4
    );
    let changes = async |id: &str| rpc(a, "eth_getFilterChanges", json!([id])).await;
    // Nothing mined yet.
    for id in [&blocks, &pending, &full, &logs] {
        assert_eq!(changes(id).await["result"], json!([]));
    }
    let mut sent = Vec::new();
    for nonce in 0..2 {
        let r = send(
            a,
            &sign(eip1559(nonce, Address::repeat_byte(8), 1, 31337), key(0)),
        )
        .await;
        sent.push(
            r["result"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_owned(),
        );
    }
    let mut block_hashes = Vec::new();
    let mut txs = Vec::new();
    for (n, hash) in sent.iter().enumerate() {
        let block = rpc(
            a,
            "eth_getBlockByNumber",
            json!([format!("{:#x}", n + 1), false]),
        )
        .await;
        block_hashes.push(block["result"]["hash"].clone());
        txs.push(rpc(a, "eth_getTransactionByHash", json!([hash])).await["result"].clone());
    }
    assert_eq!(changes(&blocks).await["result"], json!(block_hashes));
    assert_eq!(changes(&pending).await["result"], json!(sent));
    assert_eq!(changes(&full).await["result"], json!(txs));
    assert_eq!(changes(&logs).await["result"], json!([]));
    // Polled: only what comes after.
    assert_eq!(changes(&blocks).await["result"], json!([]));
    let r = send(
        a,
        &sign(eip1559(2, Address::repeat_byte(8), 1, 31337), key(0)),
    )
    .await;
    let third = r["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    assert_eq!(changes(&pending).await["result"], json!([third]));
    assert_eq!(
        changes(&blocks).await["result"].as_array().map(Vec::len),
        Some(1)
    );

    // eth_getFilterLogs: log filters only.
    let r = rpc(a, "eth_getFilterLogs", json!([logs])).await;
    assert_eq!(r["result"], json!([]), "{r}");
    let r = rpc(a, "eth_getFilterLogs", json!([blocks])).await;
    assert_eq!(
        (r["error"]["code"].clone(), err_msg(&r)),
        (json!(-32000), "filter not found".to_string()),
        "{r}"
    );
    // Uninstalled once; then not found.
    for want in [true, false] {
        let r = rpc(a, "eth_uninstallFilter", json!([blocks])).await;
        assert_eq!(r["result"], want, "{r}");
    }
    let r = changes(&blocks).await;
    assert_eq!(err_msg(&r), "filter not found", "{r}");
    // Ids naming nothing, and params that are not ids.
    for id in [json!("0x1"), json!("nope"), json!("")] {
        let r = changes(id.as_str().unwrap()).await;
        assert_eq!(r["error"]["code"], -32000, "{id}: {r}");
    }
    for params in [json!([]), json!([5]), json!([logs, 1])] {
        let r = rpc(a, "eth_getFilterChanges", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
    }
    // Log filters are checked as eth_getLogs' are; a reversed range is
    // geth's -32000.
    let r = rpc(a, "eth_newFilter", json!([{"address": "0x12"}])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = rpc(
        a,
        "eth_newFilter",
        json!([{"fromBlock": "0x5", "toBlock": "0x4"}]),
    )
    .await;
    assert_eq!(
        (r["error"]["code"].clone(), err_msg(&r)),
        (
            json!(-32000),
            "invalid from and to block combination".to_string()
        ),
        "{r}"
    );
    // A range past the head is waited for, not refused.
    let r = rpc(a, "eth_newFilter", json!([{"fromBlock": "0x100"}])).await;
    assert!(r["result"].is_string(), "{r}");
    let r = rpc(a, "eth_newBlockFilter", json!([1])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

/// An error reply's message.
fn err_msg(r: &Value) -> String {
    r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Pooled upstream connections are closed once idle past
/// `--upstream-idle` even when no request comes to take or return one
/// (a burst's connections otherwise kept their sockets, in `CLOSE_WAIT`
/// once the node's own idle limit closed its end, until the next call).
#[tokio::test]
async fn idle_upstream_connections_are_closed_when_traffic_stops() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (counted, all) = (Arc::clone(&open), Arc::clone(&accepted));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let open = Arc::clone(&counted);
            open.fetch_add(1, Ordering::SeqCst);
            all.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                while let Some(body) = read_request(&mut s).await {
                    // Slow enough that the calls below overlap, each on a
                    // connection of its own.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    if s.write_all(json_200(&result_for(&v, "\"0x7\"")).as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    let config = config::Config {
        // Idle time counts from an exchange's start: 1 s leaves the four
        // connections pooled well past the 200 ms replies.
        upstream_idle: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
        ..proxy_config(&[upstream])
    };
    let gw = start_workers(config, 1).await;
    let calls = (0..4).map(|id| block_number(gw.addr, id));
    for reply in futures_util::future::join_all(calls).await {
        assert_eq!(reply["result"], "0x7", "{reply}");
    }
    // Counted as made (the reaper may already have closed one on a slow
    // host).
    assert_eq!(accepted.load(Ordering::SeqCst), 4, "four connections made");
    eventually::eventually("the idle upstream connections to close", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;
    // The pool starts again from nothing.
    assert_eq!(block_number(gw.addr, 9).await["result"], "0x7");
}
