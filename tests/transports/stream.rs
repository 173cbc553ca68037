//! The stream transports (feature `server`): TCP, Unix sockets and stdio
//! over the framers, pipelined; hostile clients (oversized frames, garbage,
//! slowloris, a client that never reads, connection floods); end of input
//! and graceful shutdown with calls in flight. Every server listens on
//! 127.0.0.1 or a Unix socket in a temporary directory, and is stopped by
//! its test.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::{Concatenated, Framer, Lines, Lsp};
#[cfg(unix)]
use rpcwire::server::stream::serve_unix;
use rpcwire::server::stream::{CloseReason, Driver, serve_tcp};
use rpcwire::server::{LimitKind, Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
#[cfg(unix)]
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::eventually::eventually;
use crate::example_binary::example_binary;

/// A bound for waits that should take well under a second: a test that
/// hangs fails instead.
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Default)]
struct State {
    /// Notified when a `slow` or `forever` call starts.
    started: Notify,
    /// `slow` and `forever` calls started.
    slow_calls: AtomicUsize,
    /// Lets an `ask_client_after` call (notified as it starts) go on.
    proceed: Notify,
}

type D = Dispatcher<State, WithAsync>;

fn dispatcher() -> D {
    Dispatcher::builder(State::default())
        .method("add", |c: Call<'_, State>| {
            let (a, b): (u64, u64) = c.decode()?;
            c.reply.u64(a + b)
        })
        .method("big", |c: Call<'_, State>| {
            let (n,): (usize,) = c.decode()?;
            c.reply.str(&"x".repeat(n))
        })
        .method("whoami", |c: Call<'_, State>| {
            let peer = c.ctx.peer_addr().map(|a| a.to_string());
            c.reply
                .json(&json!({"transport": c.ctx.transport(), "peer": peer}))
        })
        .async_method("echo", |call: AsyncCall<State>| async move {
            tokio::task::yield_now().await;
            let (v,): (Value,) = call.decode()?;
            Ok::<_, RpcError>(v)
        })
        .async_method("slow", |call: AsyncCall<State>| async move {
            call.state.slow_calls.fetch_add(1, Ordering::SeqCst);
            call.state.started.notify_one();
            let (v, ms): (Value, u64) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(v)
        })
        .async_method("forever", |call: AsyncCall<State>| async move {
            call.state.slow_calls.fetch_add(1, Ordering::SeqCst);
            call.state.started.notify_one();
            std::future::pending::<Result<(), RpcError>>().await
        })
        .async_method("notify_me", |call: AsyncCall<State>| async move {
            let sent = call.ctx.notify(
                "note",
                &json!({"for": call.id().map(|id| String::from_utf8_lossy(id).into_owned())}),
            );
            Ok::<_, RpcError>(sent)
        })
        .method("bye", |c: Call<'_, State>| {
            let sent = c.ctx.notify_no_params("exit");
            c.reply.json(&sent)
        })
        .async_method("ask_client", |call: AsyncCall<State>| async move {
            ping_the_client(&call.ctx, "hello").await
        })
        .async_method("ask_client_twice", |call: AsyncCall<State>| async move {
            let mut answers = Vec::new();
            for turn in ["first", "second"] {
                answers.push(ping_the_client(&call.ctx, turn).await?);
            }
            Ok::<_, RpcError>(answers)
        })
        .async_method("ask_client_after", |call: AsyncCall<State>| async move {
            call.state.started.notify_one();
            call.state.proceed.notified().await;
            ping_the_client(&call.ctx, "later").await
        })
        .build()
        .unwrap()
}

/// `client/ping` with `[what]` through the connection's peer, the answer's
/// result decoded.
async fn ping_the_client(ctx: &rpcwire::Context, what: &str) -> Result<Value, RpcError> {
    let peer = ctx.peer().ok_or_else(|| RpcError::internal("one-way"))?;
    let answer = peer
        .request("client/ping", Some(&json!([what])), Duration::from_secs(30))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
    answer
        .decode::<Value>()
        .map_err(|e| RpcError::internal(e.to_string()))
}

// ---------------------------------------------------------------------------
// Clients: the tests read replies with their own framing code, not the
// crate's framers.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    Lines,
    Concatenated,
    Lsp,
}

impl Framing {
    fn encode(self, message: &[u8], out: &mut Vec<u8>) {
        match self {
            Framing::Lines => {
                out.extend_from_slice(message);
                out.push(b'\n');
            }
            Framing::Concatenated => out.extend_from_slice(message),
            Framing::Lsp => {
                out.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", message.len()).as_bytes(),
                );
                out.extend_from_slice(message);
            }
        }
    }
}

/// Reads messages off a stream in one framing.
struct Messages<R> {
    r: R,
    buf: Vec<u8>,
    chunk: Vec<u8>,
    framing: Framing,
}

impl<R: AsyncRead + Unpin> Messages<R> {
    fn new(r: R, framing: Framing) -> Self {
        Messages {
            r,
            buf: Vec::new(),
            chunk: vec![0; 64 * 1024],
            framing,
        }
    }

    /// The next message; `None` at the end of the stream (or a reset),
    /// which must not cut a message short.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(v) = self.parse() {
                return Some(v);
            }
            let n = match self.r.read(&mut self.chunk).await {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                Err(e) => panic!("read: {e}"),
            };
            if n == 0 {
                assert!(
                    self.buf.iter().all(u8::is_ascii_whitespace),
                    "a message cut short: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }

    async fn expect(&mut self) -> Value {
        tokio::time::timeout(PATIENCE, self.next())
            .await
            .expect("a message in time")
            .expect("a message, not the end of the stream")
    }

    /// Waits for the end of the stream, which must come with no message.
    async fn expect_end(&mut self) {
        let next = tokio::time::timeout(PATIENCE, self.next())
            .await
            .expect("the end in time");
        assert_eq!(next, None, "no more messages");
    }

    fn parse(&mut self) -> Option<Value> {
        let (at, len) = match self.framing {
            Framing::Lines => {
                let nl = self.buf.iter().position(|&b| b == b'\n')?;
                assert!(!self.buf[..nl].contains(&b'\r'));
                (0, nl + 1)
            }
            Framing::Concatenated => {
                let mut values =
                    serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
                match values.next() {
                    None => return None,
                    Some(Err(e)) if e.is_eof() => return None,
                    Some(Err(e)) => panic!("not JSON: {e}"),
                    Some(Ok(_)) => (0, values.byte_offset()),
                }
            }
            Framing::Lsp => {
                let end = self.buf.windows(4).position(|w| w == b"\r\n\r\n")?;
                let header = std::str::from_utf8(&self.buf[..end]).unwrap();
                let n: usize = header
                    .strip_prefix("Content-Length: ")
                    .expect("one Content-Length header")
                    .parse()
                    .unwrap();
                if self.buf.len() < end + 4 + n {
                    return None;
                }
                (end + 4, end + 4 + n)
            }
        };
        let v: Value = serde_json::from_slice(&self.buf[at..len]).expect("each message is JSON");
        self.buf.drain(..len);
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        Some(v)
    }
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .unwrap()
}

fn framed(framing: Framing, messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        framing.encode(m, &mut out);
    }
    out
}

struct Server {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

impl Server {
    async fn tcp<F, M>(framer: M, limits: Limits) -> Server
    where
        F: Framer + Send + 'static,
        M: FnMut() -> F + Send + 'static,
    {
        Self::tcp_with(dispatcher(), framer, limits).await
    }

    async fn tcp_with<F, M>(d: D, framer: M, limits: Limits) -> Server
    where
        F: Framer + Send + 'static,
        M: FnMut() -> F + Send + 'static,
    {
        // A backlog for bursts of connections (`TcpListener::bind` gives
        // 128: a burst past it waits for SYN retransmits, a second or more).
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let (metrics, shutdown) = (Arc::new(Metrics::default()), Shutdown::new());
        let task = tokio::spawn(serve_tcp(
            listener,
            d,
            framer,
            limits,
            Some(metrics.clone()),
            shutdown.clone(),
        ));
        Server {
            addr,
            metrics,
            shutdown,
            task,
        }
    }

    async fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Shuts the server down and waits for it.
    async fn stop(self) -> Arc<Metrics> {
        self.shutdown.trigger();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the server stops in time")
            .unwrap();
        self.metrics
    }
}

#[cfg(unix)]
fn temp_socket(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rpcwire-stream-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rpc.sock");
    (dir, path)
}

// ---------------------------------------------------------------------------
// Pipelining.

/// 100,000 requests sent without waiting (sync, async and slow async
/// handlers mixed) on one connection: every reply arrives exactly once,
/// with the right result.
async fn pipelined(framing: Framing, framer: fn() -> Box<dyn Framer + Send>) {
    const N: u64 = 100_000;
    let server = Server::tcp(framer, Limits::default()).await;
    let stream = server.connect().await;
    let (r, mut w) = stream.into_split();
    let writer = tokio::spawn(async move {
        let mut out = Vec::with_capacity(1 << 20);
        for i in 0..N {
            let message = match i % 50 {
                0 => request(i, "slow", json!([i, 1 + i % 20])),
                1..=24 => request(i, "add", json!([i, 1])),
                _ => request(i, "echo", json!([format!("e{i}")])),
            };
            framing.encode(&message, &mut out);
            if out.len() >= 1 << 16 {
                w.write_all(&out).await.unwrap();
                out.clear();
            }
        }
        w.write_all(&out).await.unwrap();
        w
    });
    let mut replies = Messages::new(r, framing);
    let mut seen = vec![false; N as usize];
    for _ in 0..N {
        let reply = replies.expect().await;
        let id = reply["id"].as_u64().expect("a numeric id");
        assert!(
            !std::mem::replace(&mut seen[id as usize], true),
            "reply {id} twice"
        );
        let expected = match id % 50 {
            0 => json!(id),
            1..=24 => json!(id + 1),
            _ => json!(format!("e{id}")),
        };
        assert_eq!(reply["result"], expected, "{reply}");
    }
    assert!(seen.iter().all(|&s| s));
    // The connection is still open, and nothing more comes.
    let w = writer.await.unwrap();
    drop(w);
    replies.expect_end().await;
    let metrics = server.stop().await;
    assert_eq!(metrics.connections_open(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_100k_requests_newline_framing() {
    pipelined(Framing::Lines, || Box::new(Lines::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_100k_requests_concatenated_framing() {
    pipelined(Framing::Concatenated, || Box::new(Concatenated::new())).await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsp_framing_over_a_unix_socket() {
    const N: u64 = 10_000;
    let (dir, path) = temp_socket("lsp");
    let listener = UnixListener::bind(&path).unwrap();
    let (metrics, shutdown) = (Arc::new(Metrics::default()), Shutdown::new());
    let server = tokio::spawn(serve_unix(
        listener,
        dispatcher(),
        Lsp::new,
        Limits::default(),
        Some(metrics.clone()),
        shutdown.clone(),
    ));
    let (r, mut w) = UnixStream::connect(&path).await.unwrap().into_split();
    let mut messages: Vec<Vec<u8>> = (0..N)
        .map(|i| match i % 3 {
            0 => request(i, "add", json!([i, 2])),
            1 => request(i, "echo", json!([i])),
            _ => request(i, "slow", json!([i, i % 5])),
        })
        .collect();
    messages.push(request(N, "whoami", json!([])));
    let bytes = framed(Framing::Lsp, &messages);
    let writer = tokio::spawn(async move {
        // In uneven pieces, cutting headers and bodies anywhere.
        for piece in bytes.chunks(1000 + 7) {
            w.write_all(piece).await.unwrap();
        }
        w
    });
    let mut replies = Messages::new(r, Framing::Lsp);
    let mut seen = vec![false; N as usize + 1];
    for _ in 0..=N {
        let reply = replies.expect().await;
        let id = reply["id"].as_u64().unwrap();
        assert!(!std::mem::replace(&mut seen[id as usize], true));
        match id {
            N => assert_eq!(reply["result"], json!({"transport": "ipc", "peer": null})),
            _ if id % 3 == 0 => assert_eq!(reply["result"], id + 2),
            _ => assert_eq!(reply["result"], id),
        }
    }
    drop(writer.await.unwrap());
    replies.expect_end().await;
    shutdown.trigger();
    server.await.unwrap();
    assert_eq!(metrics.connections_open(), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

// ---------------------------------------------------------------------------
// stdio, through the example, as a child process.

/// The example started, its stdin and stdout piped.
fn stdio_server(stderr: std::process::Stdio) -> tokio::process::Child {
    let bin = example_binary("stdio_server", "server");
    tokio::process::Command::new(&bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn stdio_server_answers_and_exits_cleanly_when_stdin_closes_mid_call() {
    let mut child = stdio_server(std::process::Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = Messages::new(child.stdout.take().unwrap(), Framing::Lines);
    let mut stderr = child.stderr.take().unwrap();

    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"add\",\"params\":[2,3]}\n")
        .await
        .unwrap();
    assert_eq!(
        stdout.expect().await,
        json!({"jsonrpc": "2.0", "id": 1, "result": 5})
    );
    // Garbage, an unknown method, an error: answered, and it keeps running.
    stdin
        .write_all(b"not json\n{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"server/discover\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"div\",\"params\":[1,0]}\n")
        .await
        .unwrap();
    assert_eq!(stdout.expect().await["error"]["code"], -32700);
    assert_eq!(stdout.expect().await["error"]["code"], -32601);
    assert_eq!(
        stdout.expect().await["error"]["data"],
        json!({"dividend": 1})
    );

    // A slow call, then stdin closes while it runs: its notification and
    // its reply still arrive, and the process exits with status 0.
    stdin
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"slow_add\",\"params\":[20,22,300]}\n",
        )
        .await
        .unwrap();
    drop(stdin);
    let note = stdout.expect().await;
    assert_eq!(note["method"], "log");
    assert_eq!(
        stdout.expect().await,
        json!({"jsonrpc": "2.0", "id": 3, "result": 42})
    );
    stdout.expect_end().await;
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    // Its logging went to stderr (stdout held only JSON-RPC, checked above).
    let mut logs = String::new();
    stderr.read_to_string(&mut logs).await.unwrap();
    assert!(logs.contains("ready"), "{logs}");
    assert!(logs.contains("slow_add(20, 22)"), "{logs}");
    assert!(logs.contains("stopped (Eof)"), "{logs}");
}

/// A client that closes the example's stdout but keeps its stdin open
/// (it stopped reading): the next reply fails, and the process exits with
/// status 1. It returned from `main` instead, and tokio's runtime then
/// waited for its stdin reader (a blocking thread) for as long as stdin
/// stayed open (found by a review of the examples).
#[tokio::test]
async fn stdio_server_exits_when_its_output_is_closed() {
    let mut child = stdio_server(std::process::Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    drop(child.stdout.take());
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"add\",\"params\":[2,3]}\n")
        .await
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("it exits with its stdin still open")
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status}");
    drop(stdin);
}

// ---------------------------------------------------------------------------
// Hostile input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_are_answered_counted_and_skipped() {
    // The framer refuses lines over 4 KiB; the server's own limit is 1 KiB.
    let limits = Limits {
        max_message_len: 1024,
        ..Limits::default()
    };
    let server = Server::tcp(|| Lines::new().max_frame(4096), limits).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    let mut big_line = vec![b'x'; 100_000];
    big_line.push(b'\n');
    let padded = request(2, "echo", json!(["y".repeat(2000)]));
    let mut input = big_line;
    for m in [
        request(1, "add", json!([1, 1])),
        padded,
        request(3, "add", json!([3, 3])),
    ] {
        Framing::Lines.encode(&m, &mut input);
    }
    w.write_all(&input).await.unwrap();
    let refused = replies.expect().await;
    assert_eq!(refused["id"], Value::Null);
    assert_eq!(refused["error"]["code"], -32600);
    assert_eq!(refused["error"]["data"]["limit"], 4096);
    assert_eq!(replies.expect().await["result"], 2);
    let too_long = replies.expect().await;
    assert_eq!(too_long["id"], Value::Null);
    assert_eq!(too_long["error"]["code"], -32600);
    assert_eq!(too_long["error"]["data"]["limit"], 1024);
    assert_eq!(replies.expect().await["result"], 6);
    assert_eq!(server.metrics.limit_count(LimitKind::MessageLen), 2);

    // LSP: a body over the limit is refused before it is buffered, then
    // skipped; the stream carries on.
    let lsp = Server::tcp(|| Lsp::new().max_frame(1024), Limits::default()).await;
    let (r, mut w) = lsp.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lsp);
    let mut input = format!("Content-Length: 50000\r\n\r\n{}", " ".repeat(50_000)).into_bytes();
    Framing::Lsp.encode(&request(7, "add", json!([3, 4])), &mut input);
    w.write_all(&input).await.unwrap();
    assert_eq!(replies.expect().await["error"]["data"]["limit"], 1024);
    assert_eq!(replies.expect().await["result"], 7);
    assert_eq!(lsp.metrics.limit_count(LimitKind::MessageLen), 1);
    drop(w);
    replies.expect_end().await;
    server.stop().await;
    lsp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_between_messages() {
    // Newline framing: a bad line is answered -32700, the next line is read.
    let server = Server::tcp(Lines::new, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    let mut input = b"}{ garbage\n\x00\x01\x02\n".to_vec();
    Framing::Lines.encode(&request(1, "add", json!([1, 2])), &mut input);
    input.extend_from_slice(b"[1,\n");
    Framing::Lines.encode(&request(2, "echo", json!(["ok"])), &mut input);
    w.write_all(&input).await.unwrap();
    for _ in 0..2 {
        let bad = replies.expect().await;
        assert_eq!(
            (bad["id"].clone(), bad["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
    }
    assert_eq!(replies.expect().await["result"], 3);
    assert_eq!(replies.expect().await["error"]["code"], -32700);
    assert_eq!(replies.expect().await["result"], "ok");
    drop(w);
    replies.expect_end().await;

    // Concatenated JSON has nothing to resynchronise on: what came before
    // is answered, then the error, then the connection closes.
    let concat = Server::tcp(Concatenated::new, Limits::default()).await;
    let (r, mut w) = concat.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Concatenated);
    let mut input = request(1, "slow", json!([1, 50]));
    input.extend_from_slice(b" xyz");
    input.extend_from_slice(&request(2, "add", json!([1, 1])));
    w.write_all(&input).await.unwrap();
    let closed = replies.expect().await;
    assert_eq!(closed["error"]["code"], -32700);
    assert_eq!(
        closed["error"]["data"]["reason"],
        "unexpected byte between messages 0x78"
    );
    // The slow call in flight is still answered before the close.
    assert_eq!(replies.expect().await["result"], 1);
    replies.expect_end().await;
    server.stop().await;
    concat.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_closed_by_the_idle_timeout_while_others_are_served() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(2500),
        ..Limits::default()
    };
    let server = Server::tcp(Lines::new, limits).await;
    // A byte a second, never a whole message: bytes alone are not activity.
    let loris = server.connect().await;
    let (mut loris_r, mut loris_w) = loris.into_split();
    let sent = Arc::new(AtomicUsize::new(0));
    let trickle = tokio::spawn({
        let sent = sent.clone();
        async move {
            for &b in br#"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#
                .iter()
                .cycle()
            {
                if loris_w.write_all(&[b]).await.is_err() {
                    return;
                }
                sent.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    // Meanwhile another client is served, again and again.
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    let mut served = 0u64;
    let closed = async {
        let mut buf = [0u8; 64];
        if let Ok(n @ 1..) = loris_r.read(&mut buf).await {
            panic!("the slowloris got {n} bytes of reply");
        }
    };
    tokio::pin!(closed);
    loop {
        tokio::select! {
            () = &mut closed => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                w.write_all(&framed(Framing::Lines, &[request(served, "add", json!([served, 1]))])).await.unwrap();
                assert_eq!(replies.expect().await["result"], served + 1);
                served += 1;
            }
        }
    }
    trickle.abort();
    // It was sending all along, and was closed anyway.
    assert!(sent.load(Ordering::SeqCst) >= 2);
    assert!(served > 0);
    assert_eq!(server.metrics.limit_count(LimitKind::Idle), 1);
    // The other client is still served.
    w.write_all(&framed(
        Framing::Lines,
        &[request(999, "add", json!([1, 1]))],
    ))
    .await
    .unwrap();
    assert_eq!(replies.expect().await["result"], 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_costs_bounded_memory() {
    const REPLY: usize = 16 * 1024;
    const REQUESTS: usize = 400_000;
    let limits = Limits {
        max_in_flight: 32,
        max_queued: 256,
        ..Limits::default()
    };
    let max_output = 256 * 1024;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut stream, _) = listener.accept().await.unwrap();
    let driver = Driver::new(Lines::new())
        .limits(limits.clone())
        .max_pending_output(max_output);
    let stats = driver.stats();
    let d = dispatcher();
    let server = tokio::spawn(async move {
        let (r, w) = stream.split();
        driver.run(&d, r, w).await
    });
    // Sends requests for large replies, as fast as it can, and never reads.
    let (client_r, mut client_w) = client.into_split();
    let one = framed(Framing::Lines, &[request(1, "big", json!([REPLY]))]);
    let writer = tokio::spawn(async move {
        let chunk = one.repeat(1000);
        for _ in 0..REQUESTS / 1000 {
            if client_w.write_all(&chunk).await.is_err() {
                break;
            }
        }
        client_w
    });
    // The server stops reading once its output is full...
    eventually("reading paused", || stats.reading_paused()).await;
    // ...and stays stopped: what it has written stops growing.
    let mut last = stats.bytes_written();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = stats.bytes_written();
        if now == last {
            break;
        }
        last = now;
    }
    assert!(stats.reading_paused());
    assert!(
        !writer.is_finished(),
        "the client is blocked: the server stopped reading"
    );
    let framed_reply = REPLY + 40;
    // Output: the bound, passed by at most the replies of the calls in
    // flight and of the message that filled it.
    assert!(
        stats.peak_output_bytes() <= max_output + (limits.max_in_flight + 1) * framed_reply,
        "{stats:?}"
    );
    assert!(stats.peak_output_messages() <= limits.max_queued + limits.max_in_flight + 1);
    assert!(stats.peak_in_flight() <= limits.max_in_flight);
    // What was read and not answered on the wire is bounded the same way.
    let read = stats.messages_read() as usize;
    let on_the_wire = stats.bytes_written() as usize / framed_reply;
    assert!(
        read <= on_the_wire + limits.max_queued + limits.max_in_flight + 1,
        "{read} read, {on_the_wire} written"
    );
    assert!(read < REQUESTS / 2, "{read} of {REQUESTS} requests read");
    assert!(
        stats.peak_read_buffer() <= 128 * 1024,
        "read buffer {}",
        stats.peak_read_buffer()
    );
    // The client goes away: the connection ends.
    writer.abort();
    drop(client_r);
    let _ = tokio::time::timeout(PATIENCE, server)
        .await
        .expect("the driver ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_opened_and_dropped() {
    let server = Server::tcp(Lines::new, Limits::default()).await;
    // A client connected before the flood, served during and after it.
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    let addr = server.addr;
    for wave in 0..40u64 {
        let mut opened = tokio::task::JoinSet::new();
        for i in 0..250u64 {
            opened.spawn(async move {
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    return;
                };
                match i % 3 {
                    // Half a request, then gone.
                    0 => {
                        let _ = s.write_all(br#"{"jsonrpc":"2.0","id":1,"met"#).await;
                    }
                    // A whole one, gone before the reply.
                    1 => {
                        let _ = s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"slow\",\"params\":[1,20]}\n").await;
                    }
                    _ => {}
                }
            });
        }
        while opened.join_next().await.is_some() {}
        w.write_all(&framed(
            Framing::Lines,
            &[request(wave, "add", json!([wave, 1]))],
        ))
        .await
        .unwrap();
        assert_eq!(replies.expect().await["result"], wave + 1);
    }
    eventually("every dropped connection closed", || {
        server.metrics.connections_open() == 1
    })
    .await;
    w.write_all(&framed(
        Framing::Lines,
        &[request(7, "echo", json!(["still here"]))],
    ))
    .await
    .unwrap();
    assert_eq!(replies.expect().await["result"], "still here");
    drop(w);
    replies.expect_end().await;
    eventually("the last connection closed", || {
        server.metrics.connections_open() == 0
    })
    .await;
    assert!(
        server
            .metrics
            .render()
            .contains("rpcwire_connections_total 10001\n")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_refused_and_counted() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = Server::tcp(Lines::new, limits).await;
    let mut clients = Vec::new();
    for i in 0..2u64 {
        let (r, mut w) = server.connect().await.into_split();
        let mut replies = Messages::new(r, Framing::Lines);
        w.write_all(&framed(Framing::Lines, &[request(i, "add", json!([i, 1]))]))
            .await
            .unwrap();
        assert_eq!(replies.expect().await["result"], i + 1);
        clients.push((replies, w));
    }
    // The third is closed at once, unanswered.
    let (r, mut w) = server.connect().await.into_split();
    let _ = w
        .write_all(&framed(Framing::Lines, &[request(3, "add", json!([1, 1]))]))
        .await;
    Messages::new(r, Framing::Lines).expect_end().await;
    assert_eq!(server.metrics.limit_count(LimitKind::Connections), 1);
    // One leaves; a new one is served.
    drop(clients.pop());
    eventually("a connection closed", || {
        server.metrics.connections_open() == 1
    })
    .await;
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    w.write_all(&framed(Framing::Lines, &[request(4, "add", json!([4, 1]))]))
        .await
        .unwrap();
    assert_eq!(replies.expect().await["result"], 5);
    drop(clients);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// End of input, shutdown.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_input_finishes_the_calls_in_flight_then_closes() {
    let server = Server::tcp(Lines::new, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let messages: Vec<Vec<u8>> = (0..50u64)
        .map(|i| match i % 5 {
            0 => request(i, "slow", json!([i, 100])),
            _ => request(i, "add", json!([i, 0])),
        })
        .collect();
    w.write_all(&framed(Framing::Lines, &messages))
        .await
        .unwrap();
    w.shutdown().await.unwrap();
    let mut replies = Messages::new(r, Framing::Lines);
    let mut ids = Vec::new();
    while let Some(reply) = replies.next().await {
        assert_eq!(reply["result"], reply["id"]);
        ids.push(reply["id"].as_u64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
    eventually("the connection closed", || {
        server.metrics.connections_open() == 0
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_a_slow_call_finish_and_writes_its_reply_whole() {
    let d = dispatcher();
    let server = Server::tcp_with(d.clone(), Lines::new, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    // A reply of 1 MiB, made slowly.
    let slow = request(1, "slow", json!(["z".repeat(1 << 20), 300]));
    w.write_all(&framed(Framing::Lines, &[slow])).await.unwrap();
    tokio::time::timeout(PATIENCE, d.state().started.notified())
        .await
        .unwrap();
    let addr = server.addr;
    let metrics = server.metrics.clone();
    let stopped = tokio::spawn(server.stop());
    let reply = replies.expect().await;
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["result"].as_str().map(str::len), Some(1 << 20));
    replies.expect_end().await;
    tokio::time::timeout(PATIENCE, stopped)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(metrics.connections_open(), 0);
    // Not accepting any more.
    assert!(TcpStream::connect(addr).await.is_err());
}

/// At a shutdown, a call waiting for its client's answer gets it: the
/// driver reads on for answers through the grace period (as the WebSocket
/// driver does), drops the other messages it reads then (a new request
/// gets no reply), and ends once no answer is awaited and no call runs (a
/// call that asks again after its first answer gets the second). It
/// stopped reading at once, so the call failed (`PeerError::Closed`) with
/// its answer on the way. With each framer: the parser-framed path and
/// the framer's; the call asks once (`ask_client`) or twice.
async fn a_shutdown_reads_the_answers_calls_wait_for(
    framing: Framing,
    framer: fn() -> Box<dyn Framer + Send>,
    twice: bool,
) {
    let server = Server::tcp(framer, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut messages = Messages::new(r, framing);
    let method = if twice {
        "ask_client_twice"
    } else {
        "ask_client"
    };
    w.write_all(&framed(framing, &[request(1, method, json!([]))]))
        .await
        .unwrap();
    let answer = |asked: &Value, result: Value| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": result})).unwrap()
    };
    let mut asked = messages.expect().await;
    assert_eq!(asked["method"], "client/ping", "{asked}");
    server.shutdown.trigger();
    // The driver's task takes the signal as it wakes; what follows must
    // come after (were it taken first, request 2 would be answered).
    tokio::time::sleep(Duration::from_millis(100)).await;
    if twice {
        w.write_all(&framed(framing, &[answer(&asked, json!(1))]))
            .await
            .unwrap();
        asked = messages.expect().await;
        assert_eq!(asked["params"], json!(["second"]), "{framing:?}: {asked}");
    }
    w.write_all(&framed(
        framing,
        &[request(2, "add", json!([1, 2])), answer(&asked, json!(2))],
    ))
    .await
    .unwrap();
    let reply = messages.expect().await;
    let want = if twice { json!([1, 2]) } else { json!(2) };
    assert_eq!(reply["id"], 1, "{framing:?}: {reply}");
    assert_eq!(reply["result"], want, "{framing:?}: {reply}");
    messages.expect_end().await;
    tokio::time::timeout(PATIENCE, server.task)
        .await
        .expect("the server stops once the call is answered")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_reads_answers_with_each_framer() {
    for twice in [false, true] {
        a_shutdown_reads_the_answers_calls_wait_for(
            Framing::Lines,
            || Box::new(Lines::new()),
            twice,
        )
        .await;
        a_shutdown_reads_the_answers_calls_wait_for(
            Framing::Concatenated,
            || Box::new(Concatenated::new()),
            twice,
        )
        .await;
        a_shutdown_reads_the_answers_calls_wait_for(Framing::Lsp, || Box::new(Lsp::new()), twice)
            .await;
    }
}

/// A call running at a shutdown that asks its client something only
/// afterwards (within the grace) gets the answer, as the WebSocket driver
/// reads on for it: the stream driver read on only when an answer was
/// awaited at the moment of the shutdown, and otherwise closed the peer,
/// so the call's request failed at once (`PeerError::Closed`), never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_after_the_shutdown_gets_its_answer() {
    let d = dispatcher();
    let server = Server::tcp_with(d.clone(), Lines::new, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut messages = Messages::new(r, Framing::Lines);
    w.write_all(&framed(
        Framing::Lines,
        &[request(1, "ask_client_after", json!([]))],
    ))
    .await
    .unwrap();
    // Running (a fixed sleep left a busy host reading the request after
    // the trigger), then shut down, and only then does it ask.
    tokio::time::timeout(PATIENCE, d.state().started.notified())
        .await
        .unwrap();
    server.shutdown.trigger();
    d.state().proceed.notify_one();
    let asked = messages.expect().await;
    assert_eq!(asked["method"], "client/ping", "{asked}");
    assert_eq!(asked["params"], json!(["later"]), "{asked}");
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": "pong"});
    w.write_all(&framed(
        Framing::Lines,
        &[serde_json::to_vec(&answer).unwrap()],
    ))
    .await
    .unwrap();
    let reply = messages.expect().await;
    assert_eq!(reply["id"], 1, "{reply}");
    assert_eq!(reply["result"], "pong", "{reply}");
    messages.expect_end().await;
    tokio::time::timeout(PATIENCE, server.task)
        .await
        .expect("the server stops once the call is answered")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_grace_bounds_a_call_that_never_finishes() {
    let d = dispatcher();
    let limits = Limits {
        shutdown_grace: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = Server::tcp_with(d.clone(), Lines::new, limits).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut replies = Messages::new(r, Framing::Lines);
    let input = framed(
        Framing::Lines,
        &[
            request(1, "forever", json!([])),
            request(2, "add", json!([1, 1])),
        ],
    );
    w.write_all(&input).await.unwrap();
    assert_eq!(replies.expect().await["result"], 2);
    tokio::time::timeout(PATIENCE, d.state().started.notified())
        .await
        .unwrap();
    server.stop().await;
    // No reply for the call dropped, and no part of one.
    replies.expect_end().await;
}

// ---------------------------------------------------------------------------
// Two-way traffic, context.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_notify_and_ask_their_client_on_the_same_connection() {
    let server = Server::tcp(Lines::new, Limits::default()).await;
    let stream = server.connect().await;
    let local = stream.local_addr().unwrap();
    let (r, mut w) = stream.into_split();
    let mut messages = Messages::new(r, Framing::Lines);

    w.write_all(&framed(Framing::Lines, &[request(1, "whoami", json!([]))]))
        .await
        .unwrap();
    assert_eq!(
        messages.expect().await["result"],
        json!({"transport": "tcp", "peer": local.to_string()})
    );

    // A notification sent by the handler arrives before its reply.
    w.write_all(&framed(
        Framing::Lines,
        &[request(2, "notify_me", json!([]))],
    ))
    .await
    .unwrap();
    assert_eq!(
        messages.expect().await,
        json!({"jsonrpc": "2.0", "method": "note", "params": {"for": "2"}})
    );
    assert_eq!(messages.expect().await["result"], true);

    // The handler asks the client; the client answers; the handler replies
    // with the answer.
    w.write_all(&framed(
        Framing::Lines,
        &[request(3, "ask_client", json!([]))],
    ))
    .await
    .unwrap();
    let asked = messages.expect().await;
    assert_eq!(asked["method"], "client/ping");
    assert_eq!(asked["params"], json!(["hello"]));
    let answer =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"pong": true}}))
            .unwrap();
    w.write_all(&framed(Framing::Lines, &[answer]))
        .await
        .unwrap();
    let reply = messages.expect().await;
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["result"], json!({"pong": true}));
    server.stop().await;
}

/// `Context::notify_no_params` sends a notification without a `params`
/// member (LSP's `exit`), before the reply of the call that sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_notifies_its_client_without_params() {
    let server = Server::tcp(Lines::new, Limits::default()).await;
    let (r, mut w) = server.connect().await.into_split();
    let mut messages = Messages::new(r, Framing::Lines);
    w.write_all(&framed(Framing::Lines, &[request(1, "bye", json!([]))]))
        .await
        .unwrap();
    assert_eq!(
        messages.expect().await,
        json!({"jsonrpc": "2.0", "method": "exit"})
    );
    assert_eq!(
        messages.expect().await,
        json!({"jsonrpc": "2.0", "id": 1, "result": true})
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------
// The driver on its own.

/// A writer that keeps what it is given and counts the write calls.
#[derive(Default)]
struct CountingWriter {
    bytes: Vec<u8>,
    writes: usize,
}

impl AsyncWrite for CountingWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.writes += 1;
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn replies_ready_together_go_out_in_one_write() {
    let messages: Vec<Vec<u8>> = (0..300u64)
        .map(|i| request(i, "add", json!([i, 1])))
        .collect();
    let input = framed(Framing::Lines, &messages);
    let mut out = CountingWriter::default();
    let d = dispatcher();
    let reason = Driver::new(Lines::new())
        .run(&d, &input[..], &mut out)
        .await
        .unwrap();
    assert_eq!(reason, CloseReason::Eof);
    assert_eq!(out.writes, 1, "300 replies, one write");
    let mut replies = Messages::new(&out.bytes[..], Framing::Lines);
    for i in 0..300u64 {
        assert_eq!(replies.expect().await["result"], i + 1);
    }
    replies.expect_end().await;
}

#[tokio::test(start_paused = true)]
async fn reading_pauses_while_max_in_flight_calls_run() {
    let limits = Limits {
        max_in_flight: 4,
        ..Limits::default()
    };
    let messages: Vec<Vec<u8>> = (0..100u64)
        .map(|i| request(i, "slow", json!([i, 10])))
        .collect();
    let input = framed(Framing::Lines, &messages);
    let mut out = CountingWriter::default();
    let d = dispatcher();
    let driver = Driver::new(Lines::new()).limits(limits);
    let stats = driver.stats();
    let reason = driver.run(&d, &input[..], &mut out).await.unwrap();
    assert_eq!(reason, CloseReason::Eof);
    assert_eq!(stats.peak_in_flight(), 4);
    assert!(stats.read_pauses() >= 1);
    let mut replies = Messages::new(&out.bytes[..], Framing::Lines);
    let mut ids = Vec::new();
    while let Some(reply) = replies.next().await {
        ids.push(reply["id"].as_u64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..100).collect::<Vec<_>>());
}

/// An LSP frame shorter than its `Content-Length` (a client that died
/// mid-write), its body or its header section cut, is answered with a
/// -32700 that says so and where it started, not dropped unseen.
#[tokio::test]
async fn the_end_of_input_answers_a_message_cut_short_and_closes() {
    let d = dispatcher();
    for tail in [
        &b"Content-Length: 100\r\n\r\n{\"jsonrpc\""[..],
        b"Content-Length: 60\r\nContent-Ty",
        b"Content-Length: 6",
    ] {
        let mut input = framed(Framing::Lsp, &[request(1, "add", json!([1, 0]))]);
        let first = input.len();
        input.extend_from_slice(tail);
        let mut out = CountingWriter::default();
        let driver = Driver::new(Lsp::new());
        let stats = driver.stats();
        let reason = driver.run(&d, &input[..], &mut out).await.unwrap();
        assert_eq!(reason, CloseReason::Eof);
        let mut replies = Messages::new(&out.bytes[..], Framing::Lsp);
        assert_eq!(replies.expect().await["result"], 1);
        let cut = replies.expect().await;
        let at = first + tail.iter().position(|b| !b.is_ascii_whitespace()).unwrap();
        assert_eq!(
            cut,
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error",
                "data":{"reason":"message cut short by the end of the input","offset":at}}}),
        );
        replies.expect_end().await;
        assert_eq!(stats.messages_read(), 2);
        assert_eq!(stats.pending_output_bytes(), 0);
    }
    // Blanks alone after the last frame are no message.
    let mut input = framed(Framing::Lsp, &[request(1, "add", json!([1, 0]))]);
    input.extend_from_slice(b"  ");
    let mut out = CountingWriter::default();
    let reason = Driver::new(Lsp::new())
        .run(&d, &input[..], &mut out)
        .await
        .unwrap();
    assert_eq!(reason, CloseReason::Eof);
    let mut replies = Messages::new(&out.bytes[..], Framing::Lsp);
    assert_eq!(replies.expect().await["result"], 1);
    replies.expect_end().await;
}

#[tokio::test]
async fn a_last_line_without_its_newline_is_answered_and_one_cut_short_gets_minus_32700() {
    let d = dispatcher();
    for (framer, tail, want) in [
        (
            Box::new(Lines::new()) as Box<dyn Framer + Send>,
            &br#"  {"jsonrpc":"2.0","id":2,"method":"add","params":[2,3]}"#[..],
            json!({"jsonrpc":"2.0","id":2,"result":5}),
        ),
        (
            Box::new(Lines::new()),
            br#"{"jsonrpc":"2.0","id":2,"method":"ad"#,
            json!(-32700),
        ),
        (
            Box::new(Concatenated::new()),
            br#"{"jsonrpc":"2.0","id":2,"method""#,
            json!(-32700),
        ),
    ] {
        let mut input = framed(Framing::Lines, &[request(1, "add", json!([1, 1]))]);
        input.extend_from_slice(tail);
        let mut out = CountingWriter::default();
        let driver = Driver::new(framer);
        let stats = driver.stats();
        let reason = driver.run(&d, &input[..], &mut out).await.unwrap();
        assert_eq!(reason, CloseReason::Eof);
        let mut replies = Messages::new(&out.bytes[..], Framing::Lines);
        assert_eq!(replies.expect().await["result"], 2);
        let last = replies.expect().await;
        if want.is_object() {
            assert_eq!(last, want);
        } else {
            assert_eq!(last["error"]["code"], want, "{last}");
            assert_eq!(last["id"], Value::Null);
        }
        replies.expect_end().await;
        assert_eq!(stats.messages_read(), 2);
    }
}

#[tokio::test]
async fn a_framing_error_is_answered_then_the_connection_closes() {
    let d = dispatcher();
    let input = b"Content-Length: 2\r\n\r\n[]Content-Type: x\r\n\r\n{}".to_vec();
    let mut out = CountingWriter::default();
    let reason = Driver::new(Lsp::new())
        .run(&d, &input[..], &mut out)
        .await
        .unwrap();
    let CloseReason::Framing(error) = reason else {
        panic!("{reason:?}")
    };
    assert_eq!(error.code(), -32700);
    let mut replies = Messages::new(&out.bytes[..], Framing::Lsp);
    assert_eq!(
        replies.expect().await["error"]["code"],
        -32600,
        "[] is an invalid request"
    );
    let closing = replies.expect().await;
    assert_eq!(
        closing["error"]["data"]["reason"],
        "missing Content-Length header"
    );
    replies.expect_end().await;
}

/// The driver future can run on a spawned task (it is `Send`).
#[allow(dead_code)]
fn driver_future_is_send() {
    fn send<T: Send>(_: T) {}
    send(async move {
        let d = dispatcher();
        let (a, _b) = tokio::io::duplex(64);
        let (r, w) = tokio::io::split(a);
        Driver::new(Lines::new()).run(&d, r, w).await
    });
}

/// A reader handing out `chunk` bytes per read, as a socket may.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self
            .chunk
            .min(self.data.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// `Concatenated` with the parser's framing turned off: the framer finds
/// every message end and the dispatcher parses each frame, as before the
/// two were fused.
struct FramerOnly(Concatenated);

/// A driver over `framer`, framing by parsing (`fused`) or framer first.
fn concatenated_driver(framer: Concatenated, fused: bool) -> Driver<Box<dyn Framer + Send>> {
    if fused {
        Driver::new(Box::new(framer))
    } else {
        Driver::new(Box::new(FramerOnly(framer)))
    }
}

impl Framer for FramerOnly {
    fn next_frame(&mut self, buf: &[u8]) -> rpcwire::frame::Step {
        self.0.next_frame(buf)
    }
    fn encode(&self, message: &[u8], out: &mut Vec<u8>) {
        self.0.encode(message, out)
    }
    fn reset(&mut self) {
        self.0.reset()
    }
    fn resynchronises(&self) -> bool {
        self.0.resynchronises()
    }
}

/// Concatenated JSON is read and framed by the parser in one pass; the
/// framer takes over for a message cut by the end of a read, one that is
/// not valid, or one over a limit. Whatever the reads' sizes, the replies
/// (bytes, order, the framing error's offset) and the counts are exactly
/// those of framing first and parsing each frame after. (A message that
/// is not JSON ends the stream: `stream_edges.rs`,
/// `a_message_that_is_not_json_ends_a_concatenated_stream`.)
#[tokio::test]
async fn concatenated_json_parsed_and_framed_in_one_pass_answers_as_framing_first() {
    let d = dispatcher();
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"add","params":["{}"]}}"#,
        "z".repeat(700)
    );
    let refused = format!(r#"[{}]"#, "1,".repeat(1500) + "1");
    let parts: Vec<&[u8]> = vec![
        br#"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#,
        b"\n  \t",
        br#"[{"jsonrpc":"2.0","id":2,"method":"add","params":[2,3]},{"jsonrpc":"2.0","method":"add","params":[0,0]}]"#,
        br#"{"jsonrpc":"2.0","id":"a\"b","method":"a\u0064d","params":[5,6]}"#,
        b"\r\n",
        br#"{"foo":1}"#,
        b"[]",
        br#"{"jsonrpc":"2.0","id":99,"result":1}"#,
        br#"{"jsonrpc":"2.0","id":4,"method":"nope"}"#,
        oversized.as_bytes(),
        br#"{"jsonrpc":"2.0","id":5,"method":"big","params":[3]}"#,
        refused.as_bytes(),
        b" ",
        br#"{"jsonrpc":"2.0","id":6,"method":"add","params":[6,6]}"#,
        b"\n",
    ];
    let mut input = parts.concat();
    let ends_clean = input.clone();
    input.extend_from_slice(b" x {}");
    let limits = Limits {
        max_message_len: 512,
        ..Limits::default()
    };
    let run = |data: Vec<u8>, chunk: usize, fused: bool| {
        let (d, limits) = (&d, &limits);
        async move {
            let reader = Chunked { data, at: 0, chunk };
            let mut out = CountingWriter::default();
            let framer = Concatenated::new().max_frame(2048);
            let driver = concatenated_driver(framer, fused).limits(limits.clone());
            let stats = driver.stats();
            let reason = driver.run(d, reader, &mut out).await.unwrap();
            (out.bytes, reason, stats.messages_read())
        }
    };
    let (want, reason, read) = run(input.clone(), input.len(), false).await;
    let CloseReason::Framing(error) = reason else {
        panic!("{reason:?}")
    };
    assert_eq!(error.offset(), ends_clean.len() as u64 + 1);
    let replies: Vec<Value> = serde_json::Deserializer::from_slice(&want)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let shape: Vec<String> = replies
        .iter()
        .map(|r| match (r.get("result"), r.pointer("/error/code")) {
            (Some(v), _) => v.to_string(),
            (None, Some(code)) if r.is_object() => code.to_string(),
            _ => format!("batch of {}", r.as_array().unwrap().len()),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "3",
            "batch of 1",
            "11",
            "-32600",
            "-32600",
            "-32601",
            "-32600",
            "\"xxx\"",
            "-32600",
            "12",
            "-32700"
        ],
        "{replies:#?}"
    );
    assert_eq!(read, 11);
    for chunk in [1, 2, 3, 7, 16, 61, 200, 4096, input.len()] {
        let got = run(input.clone(), chunk, true).await;
        assert_eq!(
            String::from_utf8_lossy(&got.0),
            String::from_utf8_lossy(&want),
            "reads of {chunk} bytes"
        );
        assert_eq!((got.1, got.2), (reason, read), "reads of {chunk} bytes");
        // Ending cleanly, with or without the last newline.
        for end in [ends_clean.len(), ends_clean.len() - 1] {
            let (clean, _, _) = run(ends_clean[..end].to_vec(), end, false).await;
            let got = run(ends_clean[..end].to_vec(), chunk, true).await;
            assert_eq!(got.0, clean, "reads of {chunk} bytes, {end} bytes");
            assert_eq!((got.1, got.2), (CloseReason::Eof, 11));
        }
    }
}

/// The same comparison on pseudo-random streams: requests of every kind
/// (with strings holding brackets, quotes and escapes), values that are not
/// valid JSON-RPC or not valid JSON (closing their brackets or not: the
/// first such ends the stream), whitespace of
/// every kind between them, and sometimes garbage or a value cut short at
/// the end; each stream read in pseudo-random read sizes.
#[tokio::test]
async fn concatenated_json_one_pass_matches_framing_first_on_random_streams() {
    let d = dispatcher();
    let pieces: &[&[u8]] = &[
        br#"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#,
        br#"{"method":"add","params":[3,4],"id":"x}]\"","jsonrpc":"2.0"}"#,
        br#"{"jsonrpc": "2.0", "method": "big", "params": [2], "id": 7}"#,
        br#"[{"jsonrpc":"2.0","id":2,"method":"add","params":[2,3]},{"jsonrpc":"2.0","method":"add","params":[0,0]}]"#,
        br#"{"jsonrpc":"2.0","id":"\\","method":"\u0061dd","params":[5,6]}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":add}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"add","params":[1,2],}"#,
        br#"{"jsonrpc":"2.0","id":4,"method":"nope","params":{"a":["]"]}}"#,
        br#"{"jsonrpc":"2.0","id":99,"result":{"k":"{"}}"#,
        br#"{"foo":[1,{"b":"]}"}]}"#,
        // Not JSON, and never closing (without the parser the framer
        // would swallow everything after them).
        br#"{"jsonrpc":"2.0","id":8,"method":"add","params":[1}"#,
        br#"["x"y"]"#,
        b"[]",
        b"{}",
        b"[1,2]",
        br#"{"jsonrpc":"2.0","id":5,"method":"add","params":[1,2]"#,
        b"\xff",
    ];
    let gaps: &[&[u8]] = &[b"", b"\n", b" ", b"\r\n", b"\t \n"];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let limits = Limits {
        max_message_len: 96,
        ..Limits::default()
    };
    for case in 0..300 {
        let mut input = Vec::new();
        for _ in 0..1 + next(12) {
            // The last two pieces (cut short, not JSON) only end a stream.
            input.extend_from_slice(pieces[next(pieces.len() - 2)]);
            input.extend_from_slice(gaps[next(gaps.len())]);
        }
        match next(6) {
            0 => input.extend_from_slice(pieces[pieces.len() - 2]),
            1 => input.extend_from_slice(b"x{}"),
            2 => input.extend_from_slice(pieces[pieces.len() - 1]),
            _ => {}
        }
        let mut results = Vec::new();
        for (fused, chunk) in [
            (false, input.len()),
            (true, 1 + next(40)),
            (true, input.len()),
        ] {
            let reader = Chunked {
                data: input.clone(),
                at: 0,
                chunk,
            };
            let mut out = CountingWriter::default();
            let framer = Concatenated::new().max_frame(160);
            let driver = concatenated_driver(framer, fused).limits(limits.clone());
            let stats = driver.stats();
            let reason = driver.run(&d, reader, &mut out).await.unwrap();
            results.push((out.bytes, reason, stats.messages_read()));
        }
        for got in &results[1..] {
            assert_eq!(
                (String::from_utf8_lossy(&got.0), got.1, got.2),
                (
                    String::from_utf8_lossy(&results[0].0),
                    results[0].1,
                    results[0].2
                ),
                "case {case}: {}",
                String::from_utf8_lossy(&input)
            );
        }
    }
}

/// One pass under backpressure: with one call in flight at a time, reading
/// pauses after every async message; the messages read but not yet taken
/// wait as they are, and every one is answered, in order, as when framing
/// first.
#[tokio::test]
async fn concatenated_json_one_pass_pauses_for_backpressure_and_loses_nothing() {
    let d = dispatcher();
    let messages: Vec<Vec<u8>> = (0..300u64)
        .map(|i| match i % 3 {
            0 => request(i, "echo", json!([i])),
            1 => request(i, "add", json!([i, 1])),
            _ => request(i, "slow", json!([i, 0])),
        })
        .collect();
    let input = framed(Framing::Concatenated, &messages);
    let limits = Limits {
        max_in_flight: 1,
        ..Limits::default()
    };
    let mut outputs = Vec::new();
    for (fused, chunk) in [
        (false, input.len()),
        (true, input.len()),
        (true, 1000),
        (true, 7),
    ] {
        let reader = Chunked {
            data: input.clone(),
            at: 0,
            chunk,
        };
        let mut out = CountingWriter::default();
        let framer = Concatenated::new();
        let driver = concatenated_driver(framer, fused).limits(limits.clone());
        let stats = driver.stats();
        let reason = driver.run(&d, reader, &mut out).await.unwrap();
        assert_eq!(reason, CloseReason::Eof);
        assert_eq!(stats.messages_read(), 300);
        assert!(stats.read_pauses() > 0, "reads of {chunk}: never paused");
        let replies: Vec<Value> = serde_json::Deserializer::from_slice(&out.bytes)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let ids: Vec<u64> = replies.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, (0..300).collect::<Vec<_>>(), "reads of {chunk}");
        outputs.push(out.bytes);
    }
    for got in &outputs[1..] {
        assert_eq!(got, &outputs[0]);
    }
}

/// Serves `d` over an in-memory pipe: the client writes `input`, closes
/// its side, and reads all the server writes until it closes.
async fn exchange_to_the_end<K: Send + Sync + 'static>(
    d: Dispatcher<(), K>,
    input: &[u8],
) -> String {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    let served = tokio::spawn(async move { Driver::new(Lines::new()).run(&d, sr, sw).await });
    let (mut cr, mut cw) = tokio::io::split(client);
    cw.write_all(input).await.unwrap();
    cw.shutdown().await.unwrap();
    let mut got = String::new();
    tokio::time::timeout(Duration::from_secs(10), cr.read_to_string(&mut got))
        .await
        .expect("the server closes")
        .unwrap();
    served.await.unwrap().unwrap();
    got
}

/// A notification a call sends before it ends goes out when the client's
/// input has ended too, with no reply behind it (a notification's call),
/// from an async handler still running at the end of the input or a sync
/// one run on a last line without its newline: both were lost (the
/// outbox was not read once the calls were over).
#[tokio::test]
async fn what_a_call_sends_before_the_end_of_input_is_written() {
    let done = "{\"jsonrpc\":\"2.0\",\"method\":\"done\",\"params\":{\"ok\":true}}\n";
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .async_method("work", |c: AsyncCall<()>| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(c.ctx.notify("done", &json!({"ok": true})), "queued");
            Ok::<_, RpcError>(())
        })
        .build()
        .unwrap();
    let got = exchange_to_the_end(d, b"{\"jsonrpc\":\"2.0\",\"method\":\"work\"}\n").await;
    assert_eq!(got, done, "an async notification's own notification");
    for input in [
        &b"{\"jsonrpc\":\"2.0\",\"method\":\"work\"}"[..],
        &b"{\"jsonrpc\":\"2.0\",\"method\":\"work\"}\n"[..],
    ] {
        let d: Dispatcher<()> = Dispatcher::builder(())
            .method("work", |c: Call<'_, ()>| {
                assert!(c.ctx.notify("done", &json!({"ok": true})), "queued");
                Ok::<_, RpcError>(())
            })
            .build()
            .unwrap();
        let got = exchange_to_the_end(d, input).await;
        assert_eq!(got, done, "after {:?}", String::from_utf8_lossy(input));
    }
}

/// A cancellation read while shutting down (read on for the answers a
/// call awaits) still reaches the call it names: LSP's -32800 answers it
/// within the grace (it was dropped, and the call with it at the grace's
/// end, unanswered).
#[tokio::test]
async fn a_cancellation_read_while_shutting_down_reaches_its_call() {
    use rpcwire::dispatch::CancelledReply;
    use tokio::io::{AsyncBufReadExt, BufReader};
    let d: Dispatcher<(), WithAsync> = Dispatcher::builder(())
        .timeout(None)
        .async_method("ask", |c: AsyncCall<()>| async move {
            let peer = c.ctx.peer().unwrap();
            let r = peer
                .request(
                    "workspace/configuration",
                    None::<&()>,
                    Duration::from_secs(60),
                )
                .await;
            r.map(|_| "answered")
                .map_err(|e| RpcError::internal(e.to_string()))
        })
        .cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let limits = Limits {
        shutdown_grace: Duration::from_secs(30),
        ..Limits::default()
    };
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    let driver = Driver::new(Lines::new())
        .limits(limits)
        .shutdown(shutdown.clone());
    let served = tokio::spawn(async move { driver.run(&d, sr, sw).await });
    let (cr, mut cw) = tokio::io::split(client);
    let mut lines = BufReader::new(cr).lines();
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ask\"}\n")
        .await
        .unwrap();
    let asked: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(asked["method"], "workspace/configuration");
    shutdown.trigger();
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"$/cancelRequest\",\"params\":{\"id\":7}}\n")
        .await
        .unwrap();
    // Within the 30 s grace (a guard against a hang, not a measure); the
    // server tells the client to drop what the cancelled call asked.
    let mut before = Vec::new();
    let reply = loop {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("the cancelled call is answered before the grace ends")
            .unwrap()
            .unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message.get("method").is_none() {
            break message;
        }
        before.push(message);
    };
    assert_eq!(reply["id"], 7, "{reply}");
    assert_eq!(reply["error"]["code"], -32800, "{reply}");
    assert_eq!(
        before,
        [json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":asked["id"]}})]
    );
    // Nothing left: the connection closes.
    assert_eq!(lines.next_line().await.unwrap(), None);
    served.await.unwrap().unwrap();
}
