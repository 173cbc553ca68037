//! A TCP client's liveness: a connection that holds subscriptions is not
//! idle (its client waits for notifications, and line-delimited JSON has
//! no ping), and a client that vanishes without a FIN or a reset is found
//! by TCP keepalive probes. Over loopback; time bounds only tell a hang.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcwire::frame::Lines;
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::subscriptions::Subscriptions;
use rpcwire::server::{LimitKind, Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const PATIENCE: Duration = Duration::from_secs(30);

fn dispatcher() -> Dispatcher<()> {
    Dispatcher::builder(())
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        // A subscription that sends nothing (a log filter no block matches).
        .method("eth_subscribe", |c: Call<'_, ()>| {
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
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

async fn start(limits: Limits) -> (SocketAddr, Arc<Metrics>, Shutdown) {
    let metrics = Arc::new(Metrics::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    tokio::spawn(serve_tcp(
        listener,
        dispatcher(),
        Lines::new,
        limits,
        Some(metrics.clone()),
        shutdown.clone(),
    ));
    (addr, metrics, shutdown)
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

    async fn call(&mut self, id: u64, method: &str, params: Value) -> Option<Value> {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = serde_json::to_vec(&msg).unwrap();
        line.push(b'\n');
        if self.w.write_all(&line).await.is_err() {
            return None;
        }
        let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("an answer or the end in time")
            .ok()??;
        Some(serde_json::from_str(&line).unwrap())
    }
}

fn short_idle() -> Limits {
    Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_subscriber_waiting_for_notifications_is_not_idle() {
    let (addr, _metrics, _shutdown) = start(short_idle()).await;
    let mut client = Client::connect(addr).await;
    let sub = client
        .call(1, "eth_subscribe", json!(["logs"]))
        .await
        .unwrap();
    let id = sub["result"]
        .as_str()
        .expect("a subscription id")
        .to_owned();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answer = client.call(2, "eth_blockNumber", json!([])).await;
    assert_eq!(
        answer.map(|a| a["result"].clone()),
        Some(json!("0x1b4")),
        "the subscriber's connection was closed as idle"
    );
    // Once its subscriptions end, the connection is idle again.
    let gone = client
        .call(3, "eth_unsubscribe", json!([id]))
        .await
        .unwrap();
    assert_eq!(gone["result"], json!(true));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(client.call(4, "eth_blockNumber", json!([])).await, None);
}

/// A subscriber whose notifications pile up unread (its process hung or
/// stopped, its kernel still acknowledging keepalive probes) is idle: the
/// subscription keeps a connection open while its client waits, not while
/// what is written to it goes nowhere. One that reads them stays.
#[tokio::test]
async fn a_subscriber_that_stops_reading_is_closed_as_idle() {
    let metrics = Arc::new(Metrics::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A busy feed: 16 KiB notifications, one a millisecond, until the
    // subscription ends.
    let d = Dispatcher::builder(())
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        .method("eth_subscribe", |c: Call<'_, ()>| {
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
            tokio::spawn(async move {
                let block = "b".repeat(16 * 1024);
                while sink.send(&block).is_ok() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            Ok::<_, RpcError>(id)
        })
        .build()
        .unwrap();
    tokio::spawn(serve_tcp(
        listener,
        d,
        Lines::new,
        short_idle(),
        Some(metrics.clone()),
        Shutdown::new(),
    ));
    let subscribe =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_subscribe\",\"params\":[\"newHeads\"]}\n";
    // Reads everything that comes, for five idle timeouts, then calls.
    let mut reader = Client::connect(addr).await;
    reader.w.write_all(subscribe).await.unwrap();
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(subscribe).await.unwrap();
    let read_for = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut notifications = 0u64;
    while tokio::time::Instant::now() < read_for {
        let line = tokio::time::timeout(PATIENCE, reader.lines.next_line())
            .await
            .expect("notifications in time")
            .unwrap()
            .expect("the reader's connection stays open");
        notifications += u64::from(line.contains("eth_subscription"));
    }
    assert!(notifications > 0);
    // The stalled one never read: once the buffers between it and the
    // server filled, nothing more went out, and it was closed as idle.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metrics.limit_count(LimitKind::Idle) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a subscriber that reads nothing is never closed ({} connections open)",
            metrics.connections_open()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metrics.limit_count(LimitKind::Idle), 1);
    let msg = b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"eth_blockNumber\"}\n";
    reader.w.write_all(msg).await.unwrap();
    loop {
        let line = tokio::time::timeout(PATIENCE, reader.lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("the reader's connection is still open");
        if line.contains("\"id\":2") {
            assert!(line.contains("0x1b4"), "{line}");
            break;
        }
    }
    drop(stalled);
}

/// The kernel's view of the server's end of the connection from the
/// client socket at `client` to the server at `server`: the timer that
/// `/proc/net/tcp` reports for it (`2`: the keepalive timer) and the
/// clock ticks left before it fires.
#[cfg(target_os = "linux")]
fn server_side_timer(server: SocketAddr, client: SocketAddr) -> Option<(u8, u64)> {
    let fields = crate::proc_tcp::row(server, client)?;
    let (timer, when) = fields[5].split_once(':').unwrap();
    Some((
        u8::from_str_radix(timer, 16).unwrap(),
        u64::from_str_radix(when, 16).unwrap(),
    ))
}

/// Clock ticks per second in `/proc/net/tcp` (`USER_HZ`, 100 on Linux).
#[cfg(target_os = "linux")]
const TICKS: u64 = 100;

/// Checks the keepalive timer of the server's end of a connection that
/// just had a round trip: armed and due within `every` when set, not
/// armed when `None`. Its last write may wait for the client's (delayed)
/// acknowledgement first, with the retransmission timer (`1`) armed.
#[cfg(target_os = "linux")]
async fn assert_keepalive(
    server: SocketAddr,
    client: SocketAddr,
    every: Option<Duration>,
    what: &str,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (timer, when) = loop {
        let found = server_side_timer(server, client)
            .unwrap_or_else(|| panic!("{what}: the server's socket in /proc/net/tcp"));
        if found.0 != 1 || tokio::time::Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    match every {
        Some(every) => {
            assert_eq!(timer, 2, "{what}: the keepalive timer armed");
            assert!(
                when <= every.as_secs() * TICKS,
                "{what}: the first probe due within {every:?}, not in {when} ticks"
            );
        }
        None => assert_eq!(timer, 0, "{what}: no keepalive timer"),
    }
}

#[cfg(target_os = "linux")]
fn keepalive(every: Option<Duration>) -> Limits {
    Limits {
        tcp_keepalive: every,
        ..Limits::default()
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn tcp_connections_are_probed_by_keepalive() {
    assert_eq!(
        Limits::default().tcp_keepalive,
        Some(Duration::from_secs(15))
    );
    for every in [Some(Duration::from_secs(7)), None] {
        let (addr, _metrics, _shutdown) = start(keepalive(every)).await;
        let mut client = Client::connect(addr).await;
        let answer = client.call(1, "eth_blockNumber", json!([])).await.unwrap();
        assert_eq!(answer["result"], json!("0x1b4"));
        let local = client.w.local_addr().unwrap();
        assert_keepalive(addr, local, every, "serve_tcp").await;
    }
}

#[cfg(all(target_os = "linux", feature = "http"))]
#[tokio::test]
async fn http_connections_are_probed_by_keepalive() {
    use rpcwire::server::http::{HttpService, Server};
    use tokio::io::AsyncReadExt;
    for every in [Some(Duration::from_secs(7)), None] {
        let limits = keepalive(every);
        let service = HttpService::new(dispatcher(), &limits, None);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        tokio::spawn(Server::new(limits).serve(listener, service, shutdown.clone()));
        let mut s = TcpStream::connect(addr).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
        let request = format!(
            "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("0x1b4") {
            let mut chunk = [0u8; 1024];
            let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
                .await
                .expect("an answer in time")
                .unwrap();
            assert!(
                n > 0,
                "closed before the answer: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&chunk[..n]);
        }
        assert_keepalive(addr, s.local_addr().unwrap(), every, "HTTP").await;
        shutdown.trigger();
    }
}

#[cfg(all(target_os = "linux", feature = "ws"))]
#[tokio::test]
async fn websocket_connections_are_probed_by_keepalive() {
    use futures_util::{SinkExt, StreamExt};
    use rpcwire::server::ws::WsServer;
    use tokio_tungstenite::MaybeTlsStream;
    use tokio_tungstenite::tungstenite::Message;
    for every in [Some(Duration::from_secs(7)), None] {
        let server = WsServer::new(dispatcher()).limits(keepalive(every));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = server.shutdown_signal().clone();
        tokio::spawn(async move { server.serve(listener).await });
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
        ws.send(Message::text(request)).await.unwrap();
        let answer = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("an answer in time")
            .unwrap()
            .unwrap();
        assert!(answer.to_text().unwrap().contains("0x1b4"), "{answer:?}");
        let MaybeTlsStream::Plain(tcp) = ws.get_ref() else {
            unreachable!("a ws:// connection is plain TCP")
        };
        assert_keepalive(addr, tcp.local_addr().unwrap(), every, "WebSocket").await;
        shutdown.trigger();
    }
}

/// A Unix-socket client holding a subscription that goes away (its
/// process ended: the kernel closes its end; no keepalive is needed) has
/// its connection closed and its subscription ended, however long the
/// idle timeout: the subscription that keeps the connection from being
/// idle does not keep it open past its client's end.
#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_subscriber_that_goes_away_frees_its_subscription() {
    use rpcwire::server::stream::serve_unix;
    use tokio::sync::mpsc;
    let (ended, mut ends) = mpsc::unbounded_channel::<()>();
    let d = Dispatcher::builder(ended)
        .method("eth_subscribe", |c: Call<'_, mpsc::UnboundedSender<()>>| {
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
            let ended = c.state.clone();
            tokio::spawn(async move {
                sink.closed().await;
                let _ = ended.send(());
            });
            Ok::<_, RpcError>(id)
        })
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rpcwire-liveness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("subs.ipc");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let metrics = Arc::new(Metrics::default());
    let shutdown = Shutdown::new();
    // The default idle timeout (120 s): only the client's end can close it
    // within the test's patience.
    let server = tokio::spawn(serve_unix(
        listener,
        d,
        Lines::new,
        Limits::default(),
        Some(metrics.clone()),
        shutdown.clone(),
    ));
    for _ in 0..3 {
        let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        w.write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_subscribe\",\"params\":[\"logs\"]}\n",
        )
        .await
        .unwrap();
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("an answer");
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert!(answer["result"].is_string(), "{answer}");
        drop((lines, w));
        tokio::time::timeout(PATIENCE, ends.recv())
            .await
            .expect("the subscription ends once its client is gone")
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metrics.connections_open() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the connections close once their clients are gone"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.trigger();
    tokio::time::timeout(PATIENCE, server)
        .await
        .expect("the server stops")
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
