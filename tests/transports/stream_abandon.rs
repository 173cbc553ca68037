//! Stream clients (TCP, Unix sockets) that leave while the server is at
//! their `max_in_flight` cap: the server notices and drops the running
//! calls (their futures, and whatever they hold) instead of running them
//! to their end for a reply nobody reads, and the connection's place is
//! given back. A client that only goes quiet, or only shuts down its
//! sending side (a half-close, which the stream transports answer), keeps
//! its calls. Everything on loopback; deadlines only detect hangs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rpcwire::frame::Lines;
use rpcwire::server::stream::{serve_tcp, serve_unix};
use rpcwire::server::{Limits, Metrics, Shutdown};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::held_calls::{HANG, State, dispatcher, dropped_at_the_cap, wait_until};

/// Where the server listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Tcp,
    Unix,
}

enum Addr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

struct TestServer {
    addr: Addr,
    state: Arc<State>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Addr::Unix(path) = &self.addr {
            let _ = std::fs::remove_dir_all(path.parent().unwrap());
        }
    }
}

/// A server whose connections run at most `cap` messages at once, and of
/// which one connection is open at a time.
async fn start(via: Via, cap: usize, idle_timeout: Duration) -> TestServer {
    static N: AtomicUsize = AtomicUsize::new(0);
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
    let addr = match via {
        Via::Tcp => {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(serve_tcp(
                listener,
                d,
                Lines::new,
                limits,
                Some(Arc::clone(&metrics)),
                shutdown.clone(),
            ));
            Addr::Tcp(addr)
        }
        Via::Unix => {
            let dir = std::env::temp_dir().join(format!(
                "rpcwire-stream-abandon-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("rpc.ipc");
            let listener = UnixListener::bind(&path).unwrap();
            tokio::spawn(serve_unix(
                listener,
                d,
                Lines::new,
                limits,
                Some(Arc::clone(&metrics)),
                shutdown.clone(),
            ));
            Addr::Unix(path)
        }
    };
    TestServer {
        addr,
        state,
        metrics,
        shutdown,
    }
}

enum Client {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Client {
    fn io(self) -> Box<dyn Io> {
        match self {
            Client::Tcp(s) => Box::new(s),
            Client::Unix(s) => Box::new(s),
        }
    }
}

async fn connect(addr: &Addr) -> Client {
    match addr {
        Addr::Tcp(a) => Client::Tcp(TcpStream::connect(a).await.unwrap()),
        Addr::Unix(p) => Client::Unix(UnixStream::connect(p).await.unwrap()),
    }
}

fn request(id: u64, method: &str) -> Vec<u8> {
    let mut line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": [id]})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

/// Opens a connection and fills its cap with `wait` calls (and pipelines
/// `extra` more behind them), waiting until the calls run.
async fn fill_the_cap(server: &TestServer, cap: usize, extra: usize, what: &str) -> Client {
    let mut client = connect(&server.addr).await;
    let before = server.state.started.load(Ordering::SeqCst);
    let mut bytes = Vec::new();
    for id in 0..(cap + extra) as u64 {
        bytes.extend(request(id, "wait"));
    }
    match &mut client {
        Client::Tcp(s) => s.write_all(&bytes).await.unwrap(),
        Client::Unix(s) => s.write_all(&bytes).await.unwrap(),
    }
    wait_until(&server.state, &format!("{what}: started"), |st| {
        st.started.load(Ordering::SeqCst) == before + cap
    })
    .await;
    client
}

/// The next line from `lines` parsed, within [`HANG`]; `None` at the end.
async fn next_json(
    lines: &mut tokio::io::Lines<BufReader<tokio::io::ReadHalf<Box<dyn Io>>>>,
) -> Option<Value> {
    let line = tokio::time::timeout(HANG, lines.next_line())
        .await
        .expect("a line in time")
        .ok()??;
    Some(serde_json::from_str(&line).unwrap())
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
    // A connection refused (closed at once) is tried again.
    loop {
        let (r, mut w) = tokio::io::split(connect(&server.addr).await.io());
        let mut lines = BufReader::new(r).lines();
        if w.write_all(&request(7, "echo")).await.is_ok()
            && let Some(reply) = next_json(&mut lines).await
        {
            assert_eq!(reply["result"], json!([7]), "{what}");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: no new connection served within {HANG:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How the client leaves.
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// Closes its socket.
    Close,
    /// Resets it (TCP, linger 0).
    Reset,
}

/// A client fills its cap with calls that never end (and pipelines `extra`
/// requests behind them) and leaves: the calls are dropped, the pipelined
/// requests never started, the connection's place given back. The server
/// did not read a client at its cap, so it never saw it leave: the calls
/// ran until they ended (here: never), holding the connection's place.
async fn a_left_client_s_calls_are_dropped(via: Via, cap: usize, extra: usize, leave: Leave) {
    let what = format!("{via:?}, cap {cap}, {extra} pipelined, {leave:?}");
    let server = start(via, cap, Duration::from_secs(120)).await;
    let client = fill_the_cap(&server, cap, extra, &what).await;
    match (leave, client) {
        (Leave::Reset, Client::Tcp(tcp)) => {
            tcp.set_zero_linger().unwrap();
            drop(tcp);
        }
        (Leave::Reset, Client::Unix(_)) => unreachable!("a TCP reset"),
        (Leave::Close, client) => drop(client),
    }
    dropped_at_the_cap(&server.state, cap, &what).await;
    the_place_is_given_back(&server, &what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_tcp_client_that_reset_at_its_cap_are_dropped() {
    for cap in [1, 2] {
        for extra in [0, 3] {
            a_left_client_s_calls_are_dropped(Via::Tcp, cap, extra, Leave::Reset).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_unix_socket_client_that_closed_at_its_cap_are_dropped() {
    for cap in [1, 2] {
        for extra in [0, 3] {
            a_left_client_s_calls_are_dropped(Via::Unix, cap, extra, Leave::Close).await;
        }
    }
}

/// A client at its cap that shuts down its sending side (TCP or Unix)
/// has not left: it reads on, and is answered every message it sent
/// (the stream transports answer what was read before the end of the
/// input), the calls running and those pipelined behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closed_client_at_its_cap_keeps_its_calls_and_is_answered() {
    for via in [Via::Tcp, Via::Unix] {
        let what = format!("{via:?}");
        let server = start(via, 1, Duration::from_secs(120)).await;
        let client = fill_the_cap(&server, 1, 0, &what).await;
        let (r, mut w) = tokio::io::split(client.io());
        w.write_all(&request(1, "echo")).await.unwrap();
        w.shutdown().await.unwrap();
        // Time for the server to read the end of the input, and not to
        // take it for a leave.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0, "{what}");
        server.state.release.add_permits(1);
        let mut lines = BufReader::new(r).lines();
        assert_eq!(
            next_json(&mut lines).await,
            Some(json!({"jsonrpc": "2.0", "id": 0, "result": true})),
            "{what}"
        );
        assert_eq!(
            next_json(&mut lines).await,
            Some(json!({"jsonrpc": "2.0", "id": 1, "result": [1]})),
            "{what}"
        );
        assert_eq!(next_json(&mut lines).await, None, "{what}");
        assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0, "{what}");
        the_place_is_given_back(&server, &what).await;
    }
}

/// A client at its cap that goes quiet through several idle timeouts has
/// not left: its calls keep running, and their replies, and those of the
/// requests it pipelined, come when they end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_client_at_its_cap_keeps_its_calls() {
    for via in [Via::Tcp, Via::Unix] {
        let what = format!("{via:?}");
        let idle = Duration::from_millis(200);
        let server = start(via, 1, idle).await;
        let client = fill_the_cap(&server, 1, 1, &what).await;
        tokio::time::sleep(idle * 5 / 2).await;
        assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0, "{what}");
        server.state.release.add_permits(2);
        let (r, _w) = tokio::io::split(client.io());
        let mut lines = BufReader::new(r).lines();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let reply = next_json(&mut lines).await.expect("a reply");
            assert_eq!(reply["result"], true, "{what}");
            ids.push(reply["id"].as_u64().unwrap());
        }
        ids.sort_unstable();
        assert_eq!(ids, [0, 1], "{what}");
        assert_eq!(server.state.dropped.load(Ordering::SeqCst), 0, "{what}");
        assert_eq!(server.state.started.load(Ordering::SeqCst), 2, "{what}");
    }
}
