//! Clients that leave while their call is forwarded: the forward must end
//! with them, giving back its `--upstream-connections` permit and closing
//! its upstream connection (a request written, its reply never read: not
//! reusable), instead of holding both until the upstream answers or
//! `--timeout` passes. Under overload that hold turned slow upstreams into
//! an outage (clients retried, each abandoned forward kept a permit, new
//! forwards queued for permits and timed out). A client that only
//! half-closes after its request is still answered. Everything on
//! 127.0.0.1; deadlines only detect hangs (the gateway's timeout is a
//! minute, far past them).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use super::*;
use crate::http_request::{json_200, read_request_buffered};

/// Long enough to mean "it hangs"; far below the gateway's timeout.
const HANG: Duration = Duration::from_secs(10);
/// The gateway's `--timeout`: a forward that lasts until it has waited it
/// out, not until its client left.
const TIMEOUT: Duration = Duration::from_secs(60);

/// What the fake upstream saw: requests (connection, method) and the
/// connections the gateway closed.
#[derive(Default)]
struct Seen {
    requests: Vec<(usize, String)>,
    closed: Vec<usize>,
}

/// An HTTP/1.1 upstream: `hang` is never answered (the connection is kept
/// open and read, so its close is seen), `slow` is answered after 300 ms,
/// anything else at once with `"0x1"`.
async fn upstream() -> (SocketAddr, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for conn in 0.. {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(body) = read_request_buffered(&mut s, &mut buf).await else {
                        log.lock().unwrap().closed.push(conn);
                        return;
                    };
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let method = v["method"].as_str().unwrap_or("").to_string();
                    log.lock().unwrap().requests.push((conn, method.clone()));
                    match method.as_str() {
                        "hang" => {
                            // Read on until the gateway closes.
                            let mut rest = [0u8; 1024];
                            while matches!(s.read(&mut rest).await, Ok(n) if n > 0) {}
                            log.lock().unwrap().closed.push(conn);
                            return;
                        }
                        "slow" => tokio::time::sleep(Duration::from_millis(300)).await,
                        _ => {}
                    }
                    let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":"0x1"}).to_string();
                    let http = json_200(&reply);
                    if s.write_all(http.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Waits (at most [`HANG`]) until `done` holds for what the upstream saw.
async fn wait_until(seen: &Mutex<Seen>, what: &str, done: impl Fn(&Seen) -> bool) {
    let deadline = tokio::time::Instant::now() + HANG;
    while !done(&seen.lock().unwrap()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {HANG:?} (requests {:?}, closed {:?})",
            seen.lock().unwrap().requests,
            seen.lock().unwrap().closed
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn gateway_config(upstream: SocketAddr, hyper_client: bool) -> config::Config {
    config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: TIMEOUT,
        hyper_client,
        // One permit: a forward that keeps it stops every other.
        upstream_connections: 1,
        ..Default::default()
    }
}

const HANG_CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"hang"}"#;

/// How client A sends its call, to be left before the answer.
#[derive(Clone, Copy, Debug)]
enum Transport {
    /// A plain HTTP/1.1 `POST`: rpcwire's own HTTP/1.1 loop.
    Http,
    /// A chunked `POST`, which the own loop hands to hyper's connection.
    HttpChunked,
    /// A WebSocket connection on the same port.
    WebSocket,
    /// A WebSocket connection on the same port with as many `hang` calls
    /// as it may have in flight (`max_in_flight`, the default 256): the
    /// first holds the permit, the others wait for it.
    WebSocketAtCap,
}

/// Sends the `hang` call over `transport` and returns what keeps the
/// connection open (dropping it closes it).
async fn send_hang(addr: SocketAddr, transport: Transport) -> Box<dyn Send> {
    match transport {
        Transport::Http => {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{HANG_CALL}",
                HANG_CALL.len()
            );
            s.write_all(request.as_bytes()).await.unwrap();
            Box::new(s)
        }
        Transport::HttpChunked => {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{HANG_CALL}\r\n0\r\n\r\n",
                HANG_CALL.len()
            );
            s.write_all(request.as_bytes()).await.unwrap();
            Box::new(s)
        }
        Transport::WebSocket => {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
                .await
                .unwrap();
            ws.send(Message::text(HANG_CALL)).await.unwrap();
            Box::new(ws)
        }
        Transport::WebSocketAtCap => {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
                .await
                .unwrap();
            for id in 0..rpcwire::server::Limits::default().max_in_flight {
                let call = json!({"jsonrpc": "2.0", "id": id, "method": "hang"});
                ws.feed(Message::text(call.to_string())).await.unwrap();
            }
            ws.flush().await.unwrap();
            Box::new(ws)
        }
    }
}

/// A `POST` of `body` on a connection of its own, `connection: close`;
/// the whole response as read.
async fn post(addr: SocketAddr, body: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).await.unwrap();
    String::from_utf8(response).unwrap()
}

/// Client A sends a call the upstream never answers, over `transport`,
/// and leaves (its connection closed, not half-closed); with one permit
/// per upstream, client B's call must still be forwarded and answered,
/// and A's upstream connection closed, long before the gateway's
/// timeout. They waited for it: the forward of a client that left held
/// its permit and its upstream connection until then.
async fn a_left_client_frees_its_permit(transport: Transport, hyper_client: bool) {
    let what = format!("{transport:?}, hyper client {hyper_client}");
    let (up, seen) = upstream().await;
    let gw = start(gateway_config(up, hyper_client)).await;
    let a = send_hang(gw.addr, transport).await;
    wait_until(&seen, &format!("{what}: A's call upstream"), |s| {
        s.requests.iter().any(|(_, m)| m == "hang")
    })
    .await;
    drop(a);
    let b = r#"{"jsonrpc":"2.0","id":8,"method":"eth_blockNumber"}"#;
    let answer = tokio::time::timeout(HANG, post(gw.addr, b))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: B's call unanswered after {HANG:?} (A's forward still holds the permit)"
            )
        });
    assert!(
        answer.starts_with("HTTP/1.1 200 ")
            && answer.ends_with(r#"{"jsonrpc":"2.0","id":8,"result":"0x1"}"#),
        "{what}: {answer}"
    );
    // A's exchange cannot be reused (its request was written, its reply
    // never read): its connection is closed, not pooled nor left open.
    let hang_conn = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .find(|(_, m)| m == "hang")
        .unwrap()
        .0;
    wait_until(
        &seen,
        &format!("{what}: A's upstream connection closed"),
        |s| s.closed.contains(&hang_conn),
    )
    .await;
    let requests = seen.lock().unwrap().requests.clone();
    assert!(
        !requests.iter().any(|(c, m)| *c == hang_conn && m != "hang"),
        "{what}: a call sent on the abandoned connection: {requests:?}"
    );
}

#[tokio::test]
async fn a_client_leaving_an_http_call_frees_its_permit() {
    for hyper_client in [false, true] {
        a_left_client_frees_its_permit(Transport::Http, hyper_client).await;
    }
}

#[tokio::test]
async fn a_client_leaving_a_chunked_http_call_frees_its_permit() {
    for hyper_client in [false, true] {
        a_left_client_frees_its_permit(Transport::HttpChunked, hyper_client).await;
    }
}

#[tokio::test]
async fn a_client_leaving_a_websocket_call_frees_its_permit() {
    for hyper_client in [false, true] {
        a_left_client_frees_its_permit(Transport::WebSocket, hyper_client).await;
    }
}

/// The same, from a WebSocket client at its cap on calls in flight: the
/// server did not read such a client, so it never saw it leave.
#[tokio::test]
async fn a_client_leaving_a_websocket_at_its_cap_frees_its_permit() {
    for hyper_client in [false, true] {
        a_left_client_frees_its_permit(Transport::WebSocketAtCap, hyper_client).await;
    }
}

/// A client that half-closes after its request (`shutdown(Write)`, as
/// scripts piping requests do) has not left: its call is forwarded and
/// answered (after an interim `100 Continue` at most).
#[tokio::test]
async fn a_client_that_half_closes_is_still_answered() {
    let (up, _seen) = upstream().await;
    let gw = start(gateway_config(up, false)).await;
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"slow"}"#;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut response))
        .await
        .expect("the answer before the deadline")
        .unwrap();
    let text = String::from_utf8(response).unwrap();
    let last = text.rsplit("HTTP/1.1 ").next().unwrap();
    assert!(
        last.starts_with("200 ") && last.ends_with(r#"{"jsonrpc":"2.0","id":9,"result":"0x1"}"#),
        "{text}"
    );
    for interim in text.split("HTTP/1.1 ").filter(|r| !r.is_empty()) {
        assert!(
            interim.starts_with("200 ") || interim == "100 Continue\r\n\r\n",
            "{text}"
        );
    }
}
