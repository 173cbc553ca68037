//! Chaos soaks: every server transport under a hostile mix of clients
//! (random bytes, messages cut and abandoned, resets before the reply,
//! pipelining without reading, half-closes, huge declared lengths, slow
//! trickles, bad WebSocket frames) while one well-behaved client keeps
//! calling and checks that each of its requests gets exactly one reply, with
//! its id. Afterwards no connection is left open, no task and no socket is
//! left behind, the server shuts down under fire (hostile clients still
//! connecting and holding connections; within a hang guard: that the grace
//! bounds it is checked by each transport's own shutdown tests), and the
//! memory held after a second, equal phase is in line with the first.
//!
//! Seeds are fixed, so the hostile clients' choices repeat from run to run
//! (their timing does not). Time bounds are generous deadlines that only
//! tell a hang, never measurements. The soaks run one at a time (they read
//! process-wide counters: sockets, tasks, RSS).
#![cfg(all(feature = "http", feature = "ws", feature = "mcp"))]

#[path = "support/combined_server.rs"]
mod combined_server;

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use combined_server::StartCombined;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::{Concatenated, Lines, Lsp};
use rpcwire::mcp::http::{Endpoint, HttpConfig};
use rpcwire::mcp::{McpServer, Tool, ToolOutput};
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::stream::serve_tcp;
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

/// Generous: a call of the well-behaved client, a shutdown, connections
/// closing. Only for not hanging forever.
const PATIENCE: Duration = Duration::from_secs(20);
/// One soak phase; each soak runs two.
const PHASE: Duration = Duration::from_millis(1000);
/// Hostile clients at once.
const HOSTILE: usize = 24;
/// The server's message limit: small, so that hostile clients reach it.
const MAX_MESSAGE: usize = 64 * 1024;
/// The servers' grace for calls in flight at shutdown.
const GRACE: Duration = Duration::from_secs(1);

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` on a runtime of its own, one soak at a time.
fn run<F: Future<Output = ()>>(f: F) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f);
}

// ------------------------------------------------------------------ random

/// xorshift64*: deterministic and good enough to pick actions.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo) as u64) as usize
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn some_bytes(&mut self, lo: usize, hi: usize) -> Vec<u8> {
        let n = self.range(lo, hi);
        self.bytes(n)
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

// ----------------------------------------------------------------- servers

fn dispatcher(metrics: Arc<Metrics>) -> Dispatcher<(), WithAsync> {
    Dispatcher::builder(())
        .observer(metrics)
        .method("echo", |c: Call<'_, ()>| {
            let (v,): (Value,) = c.decode()?;
            Ok::<_, RpcError>(v)
        })
        .async_method("later", |c: AsyncCall<()>| async move {
            let (v, ms): (Value, u64) = c.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(v)
        })
        .build()
        .unwrap()
}

fn limits() -> Limits {
    Limits {
        max_message_len: MAX_MESSAGE,
        max_in_flight: 32,
        max_queued: 64,
        // Long: connections must close because their clients went, not
        // because a timer swept them.
        idle_timeout: Duration::from_secs(60),
        shutdown_grace: GRACE,
        body_timeout: Duration::from_secs(60),
        ..Limits::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Http,
    Ws,
    Combined,
    Lines,
    Lsp,
    Concat,
    Mcp,
}

struct Running {
    addr: SocketAddr,
    /// `None` for MCP, which counts no connections.
    metrics: Option<Arc<Metrics>>,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

async fn start(kind: Kind, own_http1: bool) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::default());
    let shutdown = Shutdown::new();
    let l = limits();
    let d = dispatcher(metrics.clone());
    let m = metrics.clone();
    let s = shutdown.clone();
    let task = match kind {
        Kind::Http => {
            let service = HttpService::new(d, &l, Some(m.clone()));
            let server = Server::new(l)
                .metrics(m)
                .header_read_timeout(Duration::from_secs(3))
                .own_http1(own_http1);
            tokio::spawn(server.serve(listener, service, s))
        }
        Kind::Ws => {
            let server = WsServer::new(d)
                .limits(l)
                .metrics(m)
                .shutdown(s)
                .handshake_timeout(Duration::from_secs(3));
            tokio::spawn(async move { server.serve(listener).await.unwrap() })
        }
        Kind::Combined => {
            StartCombined::new(d)
                .limits(l)
                .http_metrics(m.clone())
                .ws_metrics(m)
                .shutdown(s)
                .start_on(listener)
                .task
        }
        Kind::Lines => tokio::spawn(serve_tcp(listener, d, Lines::new, l, Some(m), s)),
        Kind::Lsp => tokio::spawn(serve_tcp(listener, d, Lsp::new, l, Some(m), s)),
        Kind::Concat => tokio::spawn(serve_tcp(listener, d, Concatenated::new, l, Some(m), s)),
        Kind::Mcp => {
            let config = HttpConfig {
                max_body: MAX_MESSAGE,
                max_sessions: 64,
                header_timeout: Duration::from_secs(3),
                ..HttpConfig::default()
            };
            let endpoint = Endpoint::new(mcp_server(), config);
            tokio::spawn(async move {
                rpcwire::mcp::http::serve(endpoint, listener, async move { s.triggered().await })
                    .await
                    .unwrap()
            })
        }
    };
    Running {
        addr,
        metrics: (kind != Kind::Mcp).then_some(metrics),
        shutdown,
        task,
    }
}

fn mcp_server() -> McpServer {
    McpServer::builder("chaos", "1")
        .tool(Tool::new(
            "echo",
            json!({"type": "object"}),
            |args: Value, _| async move { Ok(ToolOutput::structured(args)) },
        ))
        .build()
        .unwrap()
}

// ------------------------------------------------------------------- wire

fn request(id: u64, rng: &mut Rng) -> String {
    if rng.chance(4) {
        let ms = rng.below(20);
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"later","params":[{id},{ms}]}}"#)
    } else {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[{id}]}}"#)
    }
}

fn http_post(path: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

const MCP_ACCEPT: &str = "Accept: application/json, text/event-stream\r\n";

const WS_HANDSHAKE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// A WebSocket frame; `declared` overrides the length sent.
fn ws_frame(fin: bool, opcode: u8, mask: bool, payload: &[u8], declared: Option<u64>) -> Vec<u8> {
    let mut f = vec![if fin { 0x80 } else { 0 } | (opcode & 0x0f)];
    let len = declared.unwrap_or(payload.len() as u64);
    let m = if mask { 0x80 } else { 0 };
    if len < 126 {
        f.push(m | len as u8);
    } else if len <= 0xffff {
        f.push(m | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(m | 127);
        f.extend_from_slice(&len.to_be_bytes());
    }
    if mask {
        let key = [0x12, 0x34, 0x56, 0x78];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

/// What a connection of `kind` sends before its messages.
fn preamble(kind: Kind) -> &'static [u8] {
    match kind {
        Kind::Ws => WS_HANDSHAKE,
        _ => b"",
    }
}

/// One whole message as `kind` frames it.
fn framed(kind: Kind, msg: &[u8]) -> Vec<u8> {
    match kind {
        Kind::Http | Kind::Combined => http_post("/", msg, ""),
        Kind::Mcp => http_post("/mcp", msg, MCP_ACCEPT),
        Kind::Ws => ws_frame(true, 1, true, msg, None),
        Kind::Lines | Kind::Concat => [msg, b"\n"].concat(),
        Kind::Lsp => {
            let mut out = format!("Content-Length: {}\r\n\r\n", msg.len()).into_bytes();
            out.extend_from_slice(msg);
            out
        }
    }
}

// --------------------------------------------------------- hostile clients

/// Writes, ignoring failures (the server may have closed on us).
async fn put(s: &mut TcpStream, bytes: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_millis(300), s.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

/// Reads whatever comes within `wait`, up to EOF.
async fn drain(s: &mut TcpStream, wait: Duration) {
    let mut buf = vec![0; 16 * 1024];
    let _ = tokio::time::timeout(wait, async {
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

/// One hostile connection: connects, misbehaves one way, goes.
async fn hostile_once(addr: SocketAddr, kind: Kind, rng: &mut Rng) {
    // A combined port gets both kinds of abuse.
    let kind = match kind {
        Kind::Combined if rng.chance(2) => Kind::Ws,
        k => k,
    };
    let Ok(mut s) = TcpStream::connect(addr).await else {
        // Refused: the server has stopped.
        return tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let id = rng.below(1 << 40);
    let msg = framed(kind, request(id, rng).as_bytes());
    let pre = preamble(kind);
    let common = 9;
    let specific = match kind {
        Kind::Ws => 12,
        Kind::Http | Kind::Combined | Kind::Mcp => 9,
        _ => 4,
    };
    match rng.below(common + specific) {
        // Random bytes, maybe after a valid start.
        0 => {
            if rng.chance(2) {
                put(&mut s, pre).await;
            }
            let n = rng.range(1, 4096);
            put(&mut s, &rng.bytes(n)).await;
            if rng.chance(2) {
                drain(&mut s, rng.ms(0, 200)).await;
            }
        }
        // A message cut at a random point, then gone.
        1 => {
            let whole = [pre, &msg[..]].concat();
            let cut = rng.range(1, whole.len());
            put(&mut s, &whole[..cut]).await;
            if rng.chance(2) {
                tokio::time::sleep(rng.ms(0, 100)).await;
            }
        }
        // Valid requests, then a reset before the replies are read.
        2 => {
            put(&mut s, pre).await;
            for _ in 0..rng.range(1, 20) {
                put(&mut s, &msg).await;
            }
            if rng.chance(2) {
                tokio::time::sleep(rng.ms(0, 50)).await;
            }
            return reset(s);
        }
        // Pipelining many requests and never reading.
        3 => {
            put(&mut s, pre).await;
            let batch: Vec<u8> = (0..64).flat_map(|_| msg.iter().copied()).collect();
            let until = Instant::now() + rng.ms(50, 600);
            while Instant::now() < until {
                if !put(&mut s, &batch).await {
                    break;
                }
            }
            tokio::time::sleep(rng.ms(0, 200)).await;
            if rng.chance(2) {
                return reset(s);
            }
        }
        // Half-close mid-message, then read what the server says.
        4 => {
            let whole = [pre, &msg[..]].concat();
            let cut = rng.range(1, whole.len() + 1);
            put(&mut s, &whole[..cut]).await;
            let _ = s.shutdown().await;
            drain(&mut s, Duration::from_secs(2)).await;
        }
        // Half-close after whole requests: the replies are still owed.
        5 => {
            put(&mut s, pre).await;
            for _ in 0..rng.range(1, 5) {
                put(&mut s, &msg).await;
            }
            let _ = s.shutdown().await;
            drain(&mut s, Duration::from_secs(2)).await;
        }
        // A slow trickle, abandoned.
        6 => {
            let whole = [pre, &msg[..], &msg[..]].concat();
            let until = Instant::now() + rng.ms(50, 500);
            for b in &whole {
                if Instant::now() > until || !put(&mut s, &[*b]).await {
                    break;
                }
                tokio::time::sleep(rng.ms(1, 15)).await;
            }
        }
        // Well-formed: a request, its reply maybe half read.
        7 => {
            put(&mut s, pre).await;
            put(&mut s, &msg).await;
            let mut buf = vec![0; rng.range(1, 512)];
            let _ = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await;
        }
        // Connect and say nothing; then go (or reset).
        8 => {
            tokio::time::sleep(rng.ms(0, 300)).await;
            if rng.chance(2) {
                return reset(s);
            }
        }
        n => hostile_specific(&mut s, kind, n - common, &msg, rng).await,
    }
    if rng.chance(4) {
        // Holds the connection a while, reading nothing.
        tokio::time::sleep(rng.ms(0, 1000)).await;
    }
    if rng.chance(3) {
        reset(s);
    }
}

async fn hostile_specific(s: &mut TcpStream, kind: Kind, n: u64, msg: &[u8], rng: &mut Rng) {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    match kind {
        Kind::Ws => {
            put(s, WS_HANDSHAKE).await;
            if rng.chance(2) {
                drain(s, Duration::from_millis(20)).await;
            }
            let frames: Vec<u8> = match n {
                // Reserved opcodes.
                0 => {
                    let op = [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF][rng.range(0, 10)];
                    ws_frame(true, op, true, b"x", None)
                }
                // Unmasked (a client must mask).
                1 => ws_frame(true, 1, false, body, None),
                // A fragmented message, never finished.
                2 => ws_frame(false, 1, true, &body[..10], None),
                // A continuation with nothing to continue.
                3 => ws_frame(true, 0, true, body, None),
                // A huge declared length.
                4 => {
                    let mut f = ws_frame(true, 1, true, b"", Some(1 << 62));
                    f.extend_from_slice(&rng.bytes(1000));
                    f
                }
                // A control frame too long, or fragmented.
                5 => ws_frame(true, 9, true, &[b'p'; 200], None),
                6 => ws_frame(false, 9, true, b"p", None),
                // Invalid UTF-8 text.
                7 => ws_frame(true, 1, true, &[0xff, 0xfe, 0xfd], None),
                // A close, then more.
                8 => [ws_frame(true, 8, true, &[3, 232], None), msg.to_vec()].concat(),
                // Garbage after the upgrade.
                9 => rng.some_bytes(1, 2048),
                // RSV bits without an extension.
                10 => {
                    let mut f = ws_frame(true, 1, true, body, None);
                    f[0] |= 0x40;
                    f
                }
                // Pings, never reading the pongs.
                _ => (0..2000)
                    .flat_map(|_| ws_frame(true, 9, true, b"hello", None))
                    .collect(),
            };
            put(s, &frames).await;
            if n == 2 {
                // Then the message's data frames keep coming, unfinished.
                for _ in 0..rng.range(0, 40) {
                    if !put(s, &ws_frame(false, 0, true, &[b' '; 1000], None)).await {
                        break;
                    }
                }
            }
            if rng.chance(2) {
                drain(s, rng.ms(0, 300)).await;
            }
        }
        Kind::Http | Kind::Combined | Kind::Mcp => {
            let (path, extra) = if kind == Kind::Mcp {
                ("/mcp", MCP_ACCEPT)
            } else {
                ("/", "")
            };
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            );
            let bytes: Vec<u8> = match n {
                // A huge declared length, some of it sent.
                0 => format!("{head}Content-Length: 99999999999999\r\n\r\n{{\"jsonrpc\":")
                    .into_bytes(),
                // A body shorter than declared, then nothing more.
                1 => {
                    format!("{head}Content-Length: 5000\r\n\r\n{{\"jsonrpc\":\"2.0\"").into_bytes()
                }
                // Chunked, with a bad or huge chunk size.
                2 => format!("{head}Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n").into_bytes(),
                3 => format!("{head}Transfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n{{\"a\"")
                    .into_bytes(),
                // Expect: 100-continue, and no body.
                4 => {
                    format!("{head}Expect: 100-continue\r\nContent-Length: 50\r\n\r\n").into_bytes()
                }
                // The HTTP/2 preface, then garbage.
                5 => [
                    &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
                    &rng.some_bytes(0, 512),
                ]
                .concat(),
                // Headers without end.
                6 => {
                    let mut h = head.into_bytes();
                    for i in 0..3000 {
                        h.extend_from_slice(
                            format!("X-Junk-{i}: {}\r\n", "v".repeat(20)).as_bytes(),
                        );
                    }
                    h
                }
                // Both lengths.
                7 => format!(
                    "{head}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"a\":\r\n"
                )
                .into_bytes(),
                // An upgrade asked of an HTTP server, then garbage.
                _ => [WS_HANDSHAKE, &rng.some_bytes(0, 512)].concat(),
            };
            put(s, &bytes).await;
            if rng.chance(2) {
                drain(s, rng.ms(0, 400)).await;
            } else {
                tokio::time::sleep(rng.ms(0, 200)).await;
            }
        }
        Kind::Lines | Kind::Concat | Kind::Lsp => {
            let bytes: Vec<u8> = match (kind, n) {
                // A frame past the limit, never ended (or ended).
                (Kind::Lines, 0) | (Kind::Concat, 0) => {
                    let mut b = br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[""#.to_vec();
                    b.extend(std::iter::repeat_n(b'a', rng.range(1, 4 * MAX_MESSAGE)));
                    if rng.chance(2) {
                        b.extend_from_slice(b"\"]}\n");
                    }
                    b
                }
                (Kind::Lsp, 0) => b"Content-Length: 99999999999999999999\r\n\r\n{".to_vec(),
                (Kind::Lsp, 1) => {
                    format!("Content-Length: {}\r\n\r\n{{", MAX_MESSAGE * 4).into_bytes()
                }
                (Kind::Lsp, 2) => {
                    let mut b = b"Content-Length: 5\r\nX: ".to_vec();
                    b.extend(std::iter::repeat_n(b'h', 100_000));
                    b
                }
                (Kind::Concat, 1) => vec![b'['; rng.range(1, 200_000)],
                (Kind::Concat, 2) => {
                    let mut b = br#"{"a":""#.to_vec();
                    b.extend(std::iter::repeat_n(b'\\', rng.range(1, 3000)));
                    b
                }
                (Kind::Lines, 1) => vec![b'\n'; rng.range(1, 100_000)],
                (Kind::Lines, 2) => {
                    b"{\"jsonrpc\":\"2.0\",\"id\":1,\r\"method\":\"echo\"}\r\r\n\0\0\n".to_vec()
                }
                // Batches of requests, never read.
                _ => {
                    let batch: String = (0..rng.range(1, 50))
                        .map(|i| {
                            format!(
                                r#"{{"jsonrpc":"2.0","id":{i},"method":"echo","params":[{i}]}}"#
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(",");
                    framed(kind, format!("[{batch}]").as_bytes()).repeat(rng.range(1, 50))
                }
            };
            put(s, &bytes).await;
            if rng.chance(2) {
                drain(s, rng.ms(0, 300)).await;
            }
        }
    }
}

async fn hostile_loop(addr: SocketAddr, kind: Kind, seed: u64, until: Instant) {
    let mut rng = Rng::new(seed);
    while Instant::now() < until {
        let _ =
            tokio::time::timeout(Duration::from_secs(4), hostile_once(addr, kind, &mut rng)).await;
    }
}

// ------------------------------------------------------ the good client

/// Checks that `replies` answer exactly the requests `ids` (one each), each
/// with its own id as the result.
fn check_replies(ids: &[u64], replies: &[Value]) {
    let mut seen = HashSet::new();
    for r in replies {
        let id = r["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("a reply without our id: {r}"));
        assert!(ids.contains(&id), "a reply to no request of ours: {r}");
        assert!(seen.insert(id), "two replies to {id}");
        assert_eq!(r["result"], json!(id), "{r}");
    }
    assert_eq!(
        seen.len(),
        ids.len(),
        "replies missing: {ids:?} got {replies:?}"
    );
}

/// Requests `first..first + n`: one message per request, or one batch.
fn good_requests(first: u64, n: u64, rng: &mut Rng) -> (Vec<u64>, Vec<String>) {
    let ids: Vec<u64> = (first..first + n).collect();
    let msgs = ids.iter().map(|&i| request(i, rng)).collect();
    (ids, msgs)
}

type H1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn h1(addr: SocketAddr) -> H1 {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h1_post(
    sender: &mut H1,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, hyper::HeaderMap, Bytes) {
    sender.ready().await.expect("the connection usable");
    let mut req = hyper::Request::post(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let response = sender
        .send_request(req.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .expect("an answer");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the whole body").to_bytes();
    (parts.status.as_u16(), parts.headers, body)
}

/// The well-behaved client: calls until `until`, checking every reply.
/// Returns how many calls it made.
async fn good_loop(addr: SocketAddr, kind: Kind, seed: u64, until: Instant) -> u64 {
    let mut rng = Rng::new(seed);
    let mut next = 1;
    match kind {
        Kind::Http | Kind::Combined => {
            let mut sender = h1(addr).await;
            let mut ws = None;
            while Instant::now() < until {
                if kind == Kind::Combined && rng.chance(2) {
                    if ws.is_none() {
                        ws = Some(ws_connect(addr).await);
                    }
                    next += ws_round(ws.as_mut().unwrap(), next, &mut rng).await;
                    continue;
                }
                if rng.chance(20) {
                    sender = h1(addr).await;
                }
                let n = rng.range(1, 5) as u64;
                let (ids, msgs) = good_requests(next, n, &mut rng);
                next += n;
                let batch = n > 1 || rng.chance(3);
                let body = if batch {
                    format!("[{}]", msgs.join(","))
                } else {
                    msgs[0].clone()
                };
                let call = h1_post(&mut sender, addr, "/", &[], body);
                let (status, _, body) = tokio::time::timeout(PATIENCE, call)
                    .await
                    .expect("an HTTP answer in time");
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                let v: Value = serde_json::from_slice(&body).unwrap();
                let replies = if batch {
                    v.as_array().expect("a batch reply").clone()
                } else {
                    vec![v]
                };
                check_replies(&ids, &replies);
            }
            if let Some(mut ws) = ws {
                ws_quiet(&mut ws).await;
            }
        }
        Kind::Ws => {
            let mut ws = ws_connect(addr).await;
            while Instant::now() < until {
                if rng.chance(30) {
                    ws_quiet(&mut ws).await;
                    ws = ws_connect(addr).await;
                }
                next += ws_round(&mut ws, next, &mut rng).await;
            }
            ws_quiet(&mut ws).await;
        }
        Kind::Lines | Kind::Concat | Kind::Lsp => {
            let mut conn = BufReader::new(TcpStream::connect(addr).await.unwrap());
            while Instant::now() < until {
                if rng.chance(30) {
                    stream_quiet(&mut conn, kind).await;
                    conn = BufReader::new(TcpStream::connect(addr).await.unwrap());
                }
                let n = rng.range(1, 9) as u64;
                let (ids, msgs) = good_requests(next, n, &mut rng);
                next += n;
                let wire: Vec<u8> = msgs
                    .iter()
                    .flat_map(|m| framed(kind, m.as_bytes()))
                    .collect();
                conn.get_mut().write_all(&wire).await.unwrap();
                let mut replies = Vec::new();
                for _ in 0..n {
                    let reply = tokio::time::timeout(PATIENCE, read_stream_reply(&mut conn, kind))
                        .await
                        .expect("a reply in time");
                    replies.push(reply);
                }
                check_replies(&ids, &replies);
            }
            stream_quiet(&mut conn, kind).await;
        }
        Kind::Mcp => {
            let mut sender = h1(addr).await;
            let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"good","version":"1"}}}"#;
            let accept = ("accept", "application/json, text/event-stream");
            let (status, headers, body) =
                h1_post(&mut sender, addr, "/mcp", &[accept], init.into()).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let sid = headers["mcp-session-id"].to_str().unwrap().to_owned();
            let session = [
                accept,
                ("mcp-session-id", sid.as_str()),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            let (status, _, _) = h1_post(&mut sender, addr, "/mcp", &session, note.into()).await;
            assert_eq!(status, 202);
            while Instant::now() < until {
                if rng.chance(20) {
                    sender = h1(addr).await;
                }
                let id = next;
                next += 1;
                let (body, want) = if rng.chance(2) {
                    (
                        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
                        json!({}),
                    )
                } else {
                    (
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id}}}}}}}"#
                        ),
                        json!({"n": id}),
                    )
                };
                let call = h1_post(&mut sender, addr, "/mcp", &session, body);
                let (status, headers, body) = tokio::time::timeout(PATIENCE, call)
                    .await
                    .expect("an MCP answer in time");
                let text = String::from_utf8_lossy(&body).into_owned();
                assert_eq!(status, 200, "{text}");
                let sse = headers
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
                let replies: Vec<Value> = if sse {
                    text.lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .map(|d| serde_json::from_str::<Value>(d).unwrap())
                        .filter(|v| v.get("id").is_some())
                        .collect()
                } else {
                    vec![serde_json::from_str(&text).unwrap()]
                };
                assert_eq!(replies.len(), 1, "{text}");
                assert_eq!(replies[0]["id"], json!(id), "{text}");
                let result = &replies[0]["result"];
                if want == json!({}) {
                    assert_eq!(*result, want, "{text}");
                } else {
                    assert_eq!(result["structuredContent"], want, "{text}");
                }
            }
        }
    }
    next - 1
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn ws_connect(addr: SocketAddr) -> Ws {
    let connect = tokio_tungstenite::connect_async(format!("ws://{addr}/"));
    tokio::time::timeout(PATIENCE, connect)
        .await
        .expect("a WebSocket handshake in time")
        .expect("a WebSocket upgrade")
        .0
}

/// Pipelines a few requests on `ws` and checks their replies; returns how
/// many it sent.
async fn ws_round(ws: &mut Ws, first: u64, rng: &mut Rng) -> u64 {
    let n = rng.range(1, 9) as u64;
    let (ids, msgs) = good_requests(first, n, rng);
    for m in msgs {
        ws.send(Message::text(m)).await.unwrap();
    }
    let mut replies = Vec::new();
    while replies.len() < ids.len() {
        replies.push(ws_next(ws).await);
    }
    check_replies(&ids, &replies);
    n
}

async fn ws_next(ws: &mut Ws) -> Value {
    loop {
        let message = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("a WebSocket reply in time")
            .expect("the connection open")
            .expect("a message");
        match message {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Closes `ws`, checking that nothing more than owed came first.
async fn ws_quiet(ws: &mut Ws) {
    ws.send(Message::Close(None)).await.unwrap();
    loop {
        let next = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("the close answered in time");
        match next {
            None | Some(Ok(Message::Close(_))) => break,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Err(_)) => break,
            Some(Ok(m)) => panic!("a message no request asked for: {m:?}"),
        }
    }
}

async fn read_stream_reply(conn: &mut BufReader<TcpStream>, kind: Kind) -> Value {
    let mut line = String::new();
    if kind == Kind::Lsp {
        let mut len = None;
        loop {
            line.clear();
            let n = conn.read_line(&mut line).await.unwrap();
            assert!(n > 0, "the connection closed before a reply");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                len = Some(v.trim().parse::<usize>().unwrap());
            }
        }
        let mut body = vec![0; len.expect("a Content-Length")];
        conn.read_exact(&mut body).await.unwrap();
        return serde_json::from_slice(&body).unwrap();
    }
    let n = conn.read_line(&mut line).await.unwrap();
    assert!(n > 0, "the connection closed before a reply");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Ends the connection, checking that no reply nobody asked for arrives.
async fn stream_quiet(conn: &mut BufReader<TcpStream>, kind: Kind) {
    conn.get_mut().shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, conn.read_to_end(&mut rest))
        .await
        .expect("the server closes after our end")
        .unwrap();
    assert!(
        rest.is_empty(),
        "{kind:?}: extra bytes {}",
        String::from_utf8_lossy(&rest)
    );
}

// ------------------------------------------------------------- the soak

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Sockets this process holds open.
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| {
        dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with("socket:"))
            .count()
    })
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool, detail: impl Fn() -> String) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: {}", detail());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One phase: hostile clients and the good one, until all are done.
async fn phase(addr: SocketAddr, kind: Kind, seed: u64) -> u64 {
    let until = Instant::now() + PHASE;
    let hostile: Vec<_> = (0..HOSTILE as u64)
        .map(|i| tokio::spawn(hostile_loop(addr, kind, seed * 1000 + i, until)))
        .collect();
    let good = tokio::spawn(good_loop(addr, kind, seed, until));
    let calls = tokio::time::timeout(PATIENCE * 2, good)
        .await
        .expect("the good client done in time")
        .unwrap();
    for h in hostile {
        tokio::time::timeout(PATIENCE, h)
            .await
            .expect("hostile clients done in time")
            .unwrap();
    }
    assert!(calls > 0);
    calls
}

async fn soak(kind: Kind, own_http1: bool, seed: u64) {
    let sockets_before = sockets();
    let tasks = tokio::runtime::Handle::current().metrics();
    let server = start(kind, own_http1).await;
    // MCP's endpoint counts no connections: its sockets past the
    // listener's are its connections.
    let open = || {
        server.metrics.as_ref().map_or_else(
            || sockets().saturating_sub(sockets_before + 1),
            |m| m.connections_open(),
        )
    };
    let detail = || {
        server.metrics.as_ref().map_or_else(
            || format!("{} sockets, {sockets_before} before", sockets()),
            |m| m.render(),
        )
    };
    let rss0 = rss_kib();
    let calls = phase(server.addr, kind, seed).await;
    wait_for("connections closed after phase 1", || open() == 0, detail).await;
    let rss1 = rss_kib();
    phase(server.addr, kind, seed + 1).await;
    wait_for("connections closed after phase 2", || open() == 0, detail).await;
    let rss2 = rss_kib();
    eprintln!(
        "{kind:?}: {calls} calls; RSS {rss0} {rss1} {rss2} KiB; {}",
        detail()
            .lines()
            .filter(|l| l.contains("limit") || l.contains("total "))
            .collect::<Vec<_>>()
            .join("; ")
    );
    // The listener's socket stays until the shutdown.
    wait_for(
        "sockets closed",
        || sockets() <= sockets_before + 1,
        || format!("{} sockets, {sockets_before} before", sockets()),
    )
    .await;

    // Phase 3: shut down under fire, hostile clients holding connections.
    let until = Instant::now() + PHASE * 2;
    let hostile: Vec<_> = (0..HOSTILE as u64)
        .map(|i| tokio::spawn(hostile_loop(server.addr, kind, seed * 7000 + i, until)))
        .collect();
    tokio::time::sleep(PHASE).await;
    server.shutdown.trigger();
    // The grace and plenty of room for a busy host (the hostile clients
    // would hold it about as long as the grace anyway).
    tokio::time::timeout(GRACE + PATIENCE, server.task)
        .await
        .expect("the server stops under fire")
        .unwrap();
    wait_for(
        "connections closed after the shutdown",
        || open() == 0,
        detail,
    )
    .await;
    for h in hostile {
        tokio::time::timeout(PATIENCE, h)
            .await
            .expect("hostile clients done in time")
            .unwrap();
    }
    wait_for(
        "tasks ended",
        || tasks.num_alive_tasks() == 0,
        || format!("{} tasks alive", tasks.num_alive_tasks()),
    )
    .await;
    wait_for(
        "listener closed",
        || sockets() <= sockets_before,
        || format!("{} sockets, {sockets_before} before", sockets()),
    )
    .await;
    // Memory: phase 2 did what phase 1 did; it may not keep much more.
    let grown1 = rss1.saturating_sub(rss0);
    let grown2 = rss2.saturating_sub(rss1);
    assert!(
        grown2 <= 2 * grown1 + 20 * 1024,
        "RSS grew {grown1} KiB in phase 1 and {grown2} KiB in phase 2"
    );
}

#[test]
fn chaos_http_own_h1() {
    run(soak(Kind::Http, true, 11));
}

#[test]
fn chaos_http_hyper() {
    run(soak(Kind::Http, false, 12));
}

#[test]
fn chaos_ws() {
    run(soak(Kind::Ws, false, 21));
}

#[test]
fn chaos_combined() {
    run(soak(Kind::Combined, true, 31));
}

#[test]
fn chaos_tcp_lines() {
    run(soak(Kind::Lines, false, 41));
}

#[test]
fn chaos_tcp_lsp() {
    run(soak(Kind::Lsp, false, 42));
}

#[test]
fn chaos_tcp_concatenated() {
    run(soak(Kind::Concat, false, 43));
}

#[test]
fn chaos_mcp_http() {
    run(soak(Kind::Mcp, false, 51));
}
