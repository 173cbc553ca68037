//! The gateway example as operators run it: stopped by its service manager
//! (SIGTERM, as Docker, Kubernetes and systemd send) with requests in
//! flight, the example's binary run as a child process in front of fake
//! upstreams that answer when the test says so. Everything on 127.0.0.1;
//! deadlines only detect hangs.

#![allow(dead_code)]

include!("support/gateway_example.rs");

#[path = "support/example_binary.rs"]
mod example_binary;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use example_binary::example_binary;

/// Long enough to mean "it hangs", never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// Reads one HTTP/1.1 request with a `content-length` body.
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf[end + 4..end + 4 + len].to_vec());
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// An HTTP upstream that reads every request and answers it (`"0x2a"`,
/// under the request's id) only once [`Held::release`] is called.
struct Held {
    addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    release: tokio::sync::watch::Sender<bool>,
}

impl Held {
    async fn start() -> Held {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let count = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (count, mut released) = (Arc::clone(&count), released.clone());
                tokio::spawn(async move {
                    while let Some(body) = read_request(&mut s).await {
                        count.fetch_add(1, Ordering::SeqCst);
                        let v: Value = serde_json::from_slice(&body).unwrap();
                        if released.wait_for(|r| *r).await.is_err() {
                            return;
                        }
                        let reply =
                            format!(r#"{{"jsonrpc":"2.0","id":{},"result":"0x2a"}}"#, v["id"]);
                        let out = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                            reply.len()
                        );
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Held {
            addr,
            seen,
            release,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `n` requests have arrived.
    async fn until_seen(&self, n: usize) {
        tokio::time::timeout(HANG, async {
            while self.seen.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hang: the requests did not reach the upstream");
    }

    fn release(&self) {
        self.release.send_replace(true);
    }
}

/// The gateway's binary running as a child process.
struct Child {
    child: tokio::process::Child,
    addr: SocketAddr,
    /// Its standard error, line by line (read all along, so that the
    /// gateway never blocks on a full pipe).
    log: Arc<Mutex<Vec<String>>>,
}

impl Child {
    /// Starts the gateway with `args` on a free loopback port, two workers;
    /// returns once it says it listens.
    async fn start(args: &[&str]) -> Child {
        let binary = example_binary("gateway", "gateway");
        let mut child = tokio::process::Command::new(binary)
            .args(["--listen", "127.0.0.1:0", "--threads", "2"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the gateway starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let keep = Arc::clone(&log);
        tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("gateway listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let addr: SocketAddr = rest.split_once(' ').unwrap().0.parse().unwrap();
                    let _ = tx.send(addr);
                }
                keep.lock().unwrap().push(line);
            }
        });
        let addr = tokio::time::timeout(HANG, rx)
            .await
            .expect("hang: the gateway did not say it listens")
            .unwrap_or_else(|_| panic!("the gateway exited: {:?}", log.lock().unwrap()));
        Child { child, addr, log }
    }

    /// Sends the gateway `signal` (`TERM`, `INT`).
    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the gateway still running");
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}: {status}");
    }

    /// Waits until the port refuses new connections.
    async fn until_refused(&self) {
        tokio::time::timeout(HANG, async {
            loop {
                match TcpStream::connect(self.addr).await {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                    // Caught in a listener's queue as it closed.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                    Err(e) => panic!("connecting: {e}"),
                    Ok(s) => drop(s),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hang: the gateway kept accepting connections");
    }

    /// The exit status, once it exits.
    async fn exit_status(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(HANG, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("hang: the gateway did not exit: {:?}", self.log()))
            .unwrap()
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// POSTs `body` on a connection of its own; the status and the body, or
/// `None` when the connection closed without a reply.
async fn post(addr: SocketAddr, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8(response).unwrap();
    if text.len() < 12 {
        return None;
    }
    let status = text[9..12].parse().unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    Some((status, body.to_string()))
}

/// What the task `task` returns, at most [`HANG`] away.
async fn within<T>(what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(HANG, task)
        .await
        .unwrap_or_else(|_| panic!("hang: {what}"))
        .unwrap()
}

type WsClient = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// The messages a WebSocket client receives until the connection ends:
/// the JSON ones, and the close frame's code if one came.
async fn ws_rest(ws: &mut WsClient) -> (Vec<Value>, Option<CloseCode>) {
    let mut messages = Vec::new();
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Text(t) => messages.push(serde_json::from_str(&t).unwrap()),
            Message::Close(frame) => return (messages, frame.map(|f| f.code)),
            _ => {}
        }
    }
    (messages, None)
}

/// SIGTERM (what Docker, Kubernetes and systemd stop a service with)
/// drains the gateway as Ctrl-C does: the port refuses new connections at
/// once, the forwards in flight (a single call, a batch, a WebSocket
/// client's call) are answered when the upstream answers, the WebSocket
/// client is then closed with 1001 (going away), and the process exits
/// with status 0. (It was killed by the signal at once, every forward in
/// flight lost.)
#[tokio::test]
async fn sigterm_drains_requests_in_flight_and_exits_0() {
    let upstream = Held::start().await;
    let mut gw = Child::start(&["--upstream", &upstream.url(), "--timeout", "600000"]).await;
    let addr = gw.addr;
    let single = tokio::spawn(post(
        addr,
        r#"{"jsonrpc":"2.0","id":"single","method":"eth_blockNumber"}"#,
    ));
    let batch = tokio::spawn(post(
        addr,
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_gasPrice"}]"#,
    ));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .unwrap();
    let call = json!({"jsonrpc":"2.0","id":"ws","method":"eth_blockNumber"});
    ws.send(Message::text(call.to_string())).await.unwrap();
    let ws = tokio::spawn(async move { ws_rest(&mut ws).await });
    upstream.until_seen(4).await;

    gw.signal("TERM");
    gw.until_refused().await;
    upstream.release();

    let (status, body) = within("the single call", single)
        .await
        .expect("the single call answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, json!({"jsonrpc":"2.0","id":"single","result":"0x2a"}));
    let (status, body) = within("the batch", batch)
        .await
        .expect("the batch answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!([
            {"jsonrpc":"2.0","id":1,"result":"0x2a"},
            {"jsonrpc":"2.0","id":2,"result":"0x2a"}
        ])
    );
    let (messages, close) = within("the WebSocket client", ws).await;
    assert_eq!(
        messages,
        [json!({"jsonrpc":"2.0","id":"ws","result":"0x2a"})]
    );
    assert_eq!(close, Some(CloseCode::Away));

    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}: {:?}", gw.log());
    // Each forward went upstream once.
    assert_eq!(upstream.seen.load(Ordering::SeqCst), 4);
}

/// SIGINT drains the same way (it did before SIGTERM did).
#[tokio::test]
async fn sigint_drains_too() {
    let upstream = Held::start().await;
    let mut gw = Child::start(&["--upstream", &upstream.url(), "--timeout", "600000"]).await;
    let single = tokio::spawn(post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;
    gw.signal("INT");
    gw.until_refused().await;
    upstream.release();
    let (status, body) = within("the call", single).await.expect("answered");
    assert_eq!((status, body.contains("0x2a")), (200, true), "{body}");
    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}");
}

/// A second signal during the drain ends the gateway at once (an operator
/// who does not want to wait), with a failure status; the grace here is
/// far longer than the test waits.
#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let upstream = Held::start().await;
    let mut gw = Child::start(&[
        "--upstream",
        &upstream.url(),
        "--timeout",
        "600000",
        "--shutdown-grace",
        "600000",
    ])
    .await;
    let single = tokio::spawn(post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":4,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;
    gw.signal("TERM");
    gw.until_refused().await;
    gw.signal("TERM");
    let status = gw.exit_status().await;
    assert_ne!(status.code(), Some(0), "{status}");
    assert!(status.code().is_some(), "exited, not killed: {status}");
    // Its client's connection ended with the process, unanswered.
    let answer = within("the call", single).await;
    assert_eq!(answer, None);
}

/// `--shutdown-grace` bounds the drain: a forward the upstream never
/// answers is dropped once it passes (its client's connection closed
/// unanswered), and the gateway exits with status 0.
#[tokio::test]
async fn the_drain_ends_after_the_grace() {
    let upstream = Held::start().await;
    let mut gw = Child::start(&[
        "--upstream",
        &upstream.url(),
        "--timeout",
        "600000",
        "--shutdown-grace",
        "200",
    ])
    .await;
    let single = tokio::spawn(post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":5,"method":"eth_blockNumber"}"#,
    ));
    upstream.until_seen(1).await;
    gw.signal("TERM");
    let status = gw.exit_status().await;
    assert_eq!(status.code(), Some(0), "{status}: {:?}", gw.log());
    let answer = within("the call", single).await;
    assert_eq!(answer, None);
}

/// `--shutdown-grace MS` is the servers' drain deadline; 10 s unless given.
#[test]
fn shutdown_grace_is_an_option() {
    let parse = |args: &[&str]| config::Config::from_args(args.iter().map(|a| a.to_string()));
    let default = parse(&[]).unwrap();
    assert_eq!(default.limits().shutdown_grace, Duration::from_secs(10));
    let c = parse(&["--shutdown-grace", "250"]).unwrap();
    assert_eq!(c.limits().shutdown_grace, Duration::from_millis(250));
    let c = parse(&["--shutdown-grace=0"]).unwrap();
    assert_eq!(c.limits().shutdown_grace, Duration::ZERO);
    assert!(parse(&["--shutdown-grace", "soon"]).is_err());
    assert!(config::USAGE.contains("--shutdown-grace"));
    assert!(config::USAGE.contains("SIGTERM"));
}
