//! Which WebSocket crate the `ws` transport is built on: tokio-tungstenite
//! or fastwebsockets, measured as echo servers over loopback.
//!
//! `cargo bench --features peers --bench ws_echo` runs each crate's echo
//! server in a child process (this binary, started with `--serve <crate>`),
//! and the same client (tokio-tungstenite) against both, the servers
//! alternated over several rounds (`ROUNDS`, default 3). Three cases:
//! 100,000 and 1,000,000 small text messages (a 52-byte `eth_blockNumber`
//! request) sent pipelined on one connection, and 1,000 text messages of
//! 1 MiB. For each: wall time, messages (or MiB) per second, and the
//! server's CPU time per message (time on a CPU summed over its threads,
//! from `/proc/<pid>/task/*/schedstat`).
//!
//! Each server is written the way its crate is meant to be used:
//! tokio-tungstenite as a `Stream` + `Sink` (messages fed while more are
//! readable, one flush when reading would wait); fastwebsockets with
//! `read_frame` / `write_frame` (its read future is not cancel-safe, so it
//! cannot be polled "only if ready": each frame is written when read).
//! `fastwebsockets+buf` gives fastwebsockets the same write batching: its
//! stream buffers writes and flushes them when a read would wait.
//! All get the same hand-written handshake.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};

const SERVERS: [&str; 3] = ["tokio-tungstenite", "fastwebsockets", "fastwebsockets+buf"];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        return serve(&args[i + 1]);
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let small = Case {
        name: "100k x 52 B",
        count: 100_000,
        message: Utf8Bytes::from_static(r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#),
    };
    let many = Case {
        name: "1M x 52 B",
        count: 1_000_000,
        message: small.message.clone(),
    };
    let large = Case {
        name: "1k x 1 MiB",
        count: 1_000,
        message: Utf8Bytes::from(format!("\"{}\"", "ab".repeat((1 << 19) - 1))),
    };
    println!("server              case           wall      rate            server CPU / msg");
    for round in 0..rounds {
        for k in 0..SERVERS.len() {
            // Alternate which server goes first.
            let server = SERVERS[(k + round) % SERVERS.len()];
            let child = Server::start(server);
            for case in [&small, &many, &large] {
                let cpu0 = child.cpu();
                let wall = rt.block_on(case.run(child.port));
                let cpu = child.cpu() - cpu0;
                let per_sec = case.count as f64 / wall.as_secs_f64();
                let rate = if case.message.len() > 1000 {
                    format!(
                        "{:.0} MiB/s",
                        per_sec * case.message.len() as f64 / (1 << 20) as f64
                    )
                } else {
                    format!("{per_sec:.0} msg/s")
                };
                println!(
                    "{server:<19} {:<14} {:>7.3} s {rate:>15} {:>10.2} µs",
                    case.name,
                    wall.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / case.count as f64,
                );
            }
            child.stop();
        }
    }
}

struct Case {
    name: &'static str,
    count: usize,
    message: Utf8Bytes,
}

impl Case {
    /// Sends `count` copies of the message on one connection, pipelined,
    /// and reads as many echoes; returns the time from the first send to
    /// the last echo.
    async fn run(&self, port: u16) -> Duration {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://127.0.0.1:{port}/"), tcp)
            .await
            .unwrap();
        let (mut tx, mut rx) = ws.split();
        let started = Instant::now();
        let count = self.count;
        let message = self.message.clone();
        let writer = tokio::spawn(async move {
            for _ in 0..count {
                tx.feed(Message::Text(message.clone())).await.unwrap();
            }
            tx.flush().await.unwrap();
            tx
        });
        let mut bytes = 0;
        for _ in 0..count {
            match rx.next().await {
                Some(Ok(Message::Text(t))) => bytes += t.len(),
                other => panic!("unexpected {other:?}"),
            }
        }
        let wall = started.elapsed();
        assert_eq!(bytes, count * self.message.len());
        let mut ws = writer.await.unwrap().reunite(rx).unwrap();
        let _ = ws.close(None).await;
        wall
    }
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(name: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", name])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap();
        Server { child, port }
    }

    /// The child's CPU time so far: the sum over its threads of the time
    /// on a CPU, in nanoseconds (`/proc/<pid>/task/*/schedstat`; `stat`'s
    /// user + system times count in 10 ms ticks, too coarse here).
    fn cpu(&self) -> Duration {
        let mut nanos = 0u64;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap() {
            let path = task.unwrap().path().join("schedstat");
            if let Ok(stat) = std::fs::read_to_string(path) {
                nanos += stat.split(' ').next().unwrap().parse::<u64>().unwrap();
            }
        }
        Duration::from_nanos(nanos)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child: an echo server on 127.0.0.1, one thread.
fn serve(name: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let name = name.to_owned();
            tokio::spawn(async move {
                let tcp = handshake(tcp).await;
                match name.as_str() {
                    "tokio-tungstenite" => echo_tungstenite(tcp).await,
                    "fastwebsockets" => echo_fastwebsockets(tcp, true).await,
                    "fastwebsockets+buf" => echo_fastwebsockets(FlushOnRead::new(tcp), false).await,
                    other => panic!("unknown server {other}"),
                }
            });
        }
    });
}

/// The server side of the opening handshake, by hand, for both crates.
async fn handshake(mut tcp: TcpStream) -> TcpStream {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed during the handshake");
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8(buf).unwrap();
    let key = text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim())
        })
        .unwrap();
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    tcp.write_all(response.as_bytes()).await.unwrap();
    tcp
}

async fn echo_tungstenite(tcp: TcpStream) {
    use std::task::Poll;
    let config = tungstenite::protocol::WebSocketConfig::default();
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        tcp,
        tungstenite::protocol::Role::Server,
        Some(config),
    )
    .await;
    loop {
        // Take what is readable now; flush once before waiting.
        let next = std::future::poll_fn(|cx| match ws.poll_next_unpin(cx) {
            Poll::Ready(m) => Poll::Ready(Some(m)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        let next = match next {
            Some(m) => m,
            None => {
                if ws.flush().await.is_err() {
                    return;
                }
                ws.next().await
            }
        };
        match next {
            Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => {
                if ws.feed(m).await.is_err() {
                    return;
                }
            }
            Some(Ok(_)) => {}
            _ => return,
        }
    }
}

async fn echo_fastwebsockets<S>(tcp: S, writev: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use fastwebsockets::{FragmentCollector, Frame, OpCode, Role, WebSocket};
    let mut ws = WebSocket::after_handshake(tcp, Role::Server);
    ws.set_writev(writev);
    let mut ws = FragmentCollector::new(ws);
    loop {
        let frame = match ws.read_frame().await {
            Ok(f) => f,
            Err(_) => return,
        };
        match frame.opcode {
            OpCode::Close => return,
            OpCode::Text | OpCode::Binary => {
                let reply = Frame::new(true, frame.opcode, None, frame.payload);
                if ws.write_frame(reply).await.is_err() {
                    return;
                }
            }
            _ => {}
        }
    }
}

/// A stream that buffers writes and flushes them when a read would wait:
/// fastwebsockets with tungstenite's write batching.
struct FlushOnRead<S> {
    inner: S,
    buf: Vec<u8>,
    at: usize,
}

impl<S> FlushOnRead<S> {
    fn new(inner: S) -> Self {
        FlushOnRead {
            inner,
            buf: Vec::with_capacity(128 << 10),
            at: 0,
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> FlushOnRead<S> {
    fn drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while self.at < self.buf.len() {
            match std::pin::Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.at..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.buf.clear();
        self.at = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncRead
    for FlushOnRead<S>
{
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        loop {
            match std::pin::Pin::new(&mut self.inner).poll_read(cx, out) {
                Poll::Pending if !self.buf.is_empty() => match self.drain(cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                },
                other => return other,
            }
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for FlushOnRead<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        if self.buf.len() >= 128 << 10 {
            match self.drain(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        match self.drain(cx) {
            Poll::Ready(Ok(())) => std::pin::Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        match self.drain(cx) {
            Poll::Ready(Ok(())) => std::pin::Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }
}
