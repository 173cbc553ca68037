//! WebSocket clients that leave while the server is at their
//! `max_in_flight` cap: the server notices (a close frame, the end of the
//! TCP stream, a reset) and drops the running calls (their futures, and
//! whatever they hold: a proxy's upstream permit) instead of running them
//! to their end for a reply nobody reads, and the connection's place is
//! given back. A client that merely goes quiet keeps its calls, and its
//! pings are answered. On the WebSocket server's own listener and on an
//! HTTP port's upgrade alike. Everything on 127.0.0.1; deadlines only
//! detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::combined_server::StartCombined;
use crate::held_calls::{HANG, State, dispatcher, dropped_at_the_cap, wait_until};

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How the WebSocket connection is reached.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// The WebSocket server's own listener.
    Listener,
    /// An upgrade on an HTTP port (`server::combined`).
    HttpPort,
}

struct TestServer {
    addr: SocketAddr,
    state: Arc<State>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// A server whose connections run at most `cap` messages at once, and
/// of which one connection is open at a time.
async fn start(via: Via, cap: usize, idle_timeout: Duration) -> TestServer {
    let state = Arc::new(State::default());
    let metrics = Arc::new(Metrics::default());
    let limits = Limits {
        max_in_flight: cap,
        max_connections: 1,
        idle_timeout,
        ..Limits::default()
    };
    let d = dispatcher(Arc::clone(&state), Arc::clone(&metrics));
    let shutdown = Shutdown::new();
    let ws = WsServer::new(d.clone())
        .limits(limits.clone())
        .metrics(Arc::clone(&metrics))
        .shutdown(shutdown.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    match via {
        Via::Listener => {
            tokio::spawn(async move { ws.serve(listener).await });
        }
        Via::HttpPort => {
            // The HTTP side's connection limit must not be what refuses.
            let http_limits = Limits {
                max_connections: 100,
                ..limits
            };
            StartCombined::new(d)
                .ws(ws)
                .http_limits(http_limits)
                .start_on(listener);
        }
    }
    TestServer {
        addr,
        state,
        metrics,
        shutdown,
    }
}

async fn connect(addr: SocketAddr) -> Client {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    ws
}

fn request(id: u64, method: &str) -> Message {
    Message::text(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": [id]}).to_string())
}

/// The next JSON message (pings and pongs skipped), within [`HANG`].
async fn next_json(ws: &mut Client) -> Value {
    loop {
        let message = tokio::time::timeout(HANG, ws.next())
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

/// Opens a connection and fills its cap with `wait` calls (and pipelines
/// `extra` more behind them), waiting until the calls run.
async fn fill_the_cap(server: &TestServer, cap: usize, extra: usize, what: &str) -> Client {
    let mut ws = connect(server.addr).await;
    let before = server.state.started.load(Ordering::SeqCst);
    for id in 0..(cap + extra) as u64 {
        ws.send(request(id, "wait")).await.unwrap();
    }
    wait_until(&server.state, &format!("{what}: started"), |st| {
        st.started.load(Ordering::SeqCst) == before + cap
    })
    .await;
    ws
}

/// The connection's place is given back: it is no longer counted open,
/// and a new client is served (one connection at a time).
async fn the_place_is_given_back(server: &TestServer, what: &str) {
    let deadline = tokio::time::Instant::now() + HANG;
    while server.metrics.connections_open() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the connection still counted open after {HANG:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The place is given back a moment after the count: a refused
    // handshake is tried again.
    let mut ws = loop {
        if let Ok((ws, _)) =
            tokio_tungstenite::connect_async(format!("ws://{}/", server.addr)).await
        {
            break ws;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: no new connection within {HANG:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ws.send(request(7, "echo")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["result"], json!([7]), "{what}");
    ws.close(None).await.unwrap();
}

/// How the client leaves.
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// Closes its socket (a FIN) without a close frame.
    Close,
    /// Resets it (linger 0).
    Reset,
    /// Sends a close frame, and reads on until the server closes.
    CloseFrame,
    /// Closes its socket with requests pipelined behind the running ones.
    CloseAfterPipelined,
}

/// A client fills its cap with calls that never end and leaves: the calls
/// are dropped, the connection's place given back. The server did not read
/// a client at its cap, so it never saw it leave: the calls ran for ever
/// (a gateway's forwards held their upstream permits until the upstream
/// answered or timed out).
async fn a_left_client_s_calls_are_dropped(via: Via, cap: usize, leave: Leave) {
    let what = format!("{via:?}, cap {cap}, {leave:?}");
    let server = start(via, cap, Duration::from_secs(120)).await;
    let extra = match leave {
        Leave::CloseAfterPipelined => 3,
        _ => 0,
    };
    let mut ws = fill_the_cap(&server, cap, extra, &what).await;
    match leave {
        Leave::Close | Leave::CloseAfterPipelined => drop(ws),
        Leave::Reset => {
            match ws.get_ref() {
                MaybeTlsStream::Plain(tcp) => tcp.set_zero_linger().unwrap(),
                _ => unreachable!("plain TCP"),
            }
            drop(ws);
        }
        Leave::CloseFrame => {
            ws.close(None).await.unwrap();
            // A well-behaved client reads until the server's close.
            tokio::spawn(async move { while let Some(Ok(_)) = ws.next().await {} });
        }
    }
    dropped_at_the_cap(&server.state, cap, &what).await;
    the_place_is_given_back(&server, &what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_client_that_closed_at_its_cap_are_dropped() {
    for via in [Via::Listener, Via::HttpPort] {
        for cap in [1, 2] {
            a_left_client_s_calls_are_dropped(via, cap, Leave::Close).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_client_that_reset_at_its_cap_are_dropped() {
    for via in [Via::Listener, Via::HttpPort] {
        a_left_client_s_calls_are_dropped(via, 1, Leave::Reset).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_client_that_sent_a_close_frame_at_its_cap_are_dropped() {
    for via in [Via::Listener, Via::HttpPort] {
        for cap in [1, 2] {
            a_left_client_s_calls_are_dropped(via, cap, Leave::CloseFrame).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_client_that_closed_with_requests_pipelined_are_dropped() {
    a_left_client_s_calls_are_dropped(Via::Listener, 1, Leave::CloseAfterPipelined).await;
}

/// A client at its cap that goes quiet (sends nothing, reads nothing)
/// through several idle ticks has not left: its calls keep running, and
/// their replies, and those of the requests it pipelined, come when they
/// end. Its pings are answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_client_at_its_cap_keeps_its_calls_and_is_answered_its_pings() {
    let idle = Duration::from_millis(200);
    let server = start(Via::Listener, 1, idle).await;
    let mut ws = fill_the_cap(&server, 1, 1, "quiet").await;
    // Quiet through five idle ticks.
    tokio::time::sleep(idle * 5 / 2).await;
    assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0);
    // A ping is answered at the cap (the client is read).
    ws.send(Message::Ping(Bytes::from_static(b"there?")))
        .await
        .unwrap();
    let pong = loop {
        match tokio::time::timeout(HANG, ws.next())
            .await
            .expect("a pong in time")
            .expect("the connection open")
            .unwrap()
        {
            Message::Pong(data) => break data,
            Message::Ping(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(&pong[..], b"there?");
    server.state.release.add_permits(2);
    assert_eq!(
        next_json(&mut ws).await,
        json!({"jsonrpc": "2.0", "id": 0, "result": true})
    );
    assert_eq!(
        next_json(&mut ws).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": true})
    );
    assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0);
    assert_eq!(server.state.started.load(Ordering::SeqCst), 2);
    ws.close(None).await.unwrap();
}
