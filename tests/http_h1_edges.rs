//! rpcwire's own HTTP/1.1 loop (`src/server/h1.rs`) against hyper's path
//! (`Server::own_http1(false)`) on the edges a security review looked at:
//! request framing (`Content-Length`, `Transfer-Encoding`), `Connection`
//! tokens, the head and body limits, what handlers see of the headers, and
//! hand-overs to hyper in the middle of a pipeline; request-smuggling and
//! framing vectors; and conversations generated from a small grammar
//! (seeded), sent in random pieces. Raw bytes over loopback; every
//! difference found is a test here.

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "support/http_replies.rs"]
#[allow(dead_code)]
mod http_replies;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_replies::{request, responses_of, summary};

use http::HeaderMap;
use rpcwire::dispatch::{AsyncCall, DispatcherBuilder};
use rpcwire::server::cors::Cors;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Metrics, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Shared by every test; taken exclusively by those that read the live
/// heap (the allocator counts every thread's).
static HEAP: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Far above anything these tests wait for; only a hang reaches it.
const HANG: Duration = Duration::from_secs(60);

const BLOCK_NUMBER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
const JSON: &str = "content-type: application/json\r\n";
const CLOSE: &str = "content-type: application/json\r\nconnection: close\r\n";

fn dispatcher(metrics: Arc<Metrics>, max_response_len: usize) -> Dispatcher<()> {
    methods(metrics, max_response_len).build().unwrap()
}

/// The test methods: `eth_blockNumber`, `headers` (the values of the
/// header named), `big` (a string of the length asked).
fn methods(metrics: Arc<Metrics>, max_response_len: usize) -> DispatcherBuilder<()> {
    Dispatcher::builder(())
        .method("eth_blockNumber", |call: Call<'_, ()>| {
            call.reply.str("0x1b4")
        })
        .method("headers", |call: Call<'_, ()>| {
            let (name,): (String,) = call.decode()?;
            let headers = call.ctx.extension::<HeaderMap>();
            let values: Vec<String> = headers.map_or_else(Vec::new, |h| {
                let values = h.get_all(name.as_str()).iter();
                values
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .collect()
            });
            Ok::<_, RpcError>(values)
        })
        .method("big", |call: Call<'_, ()>| {
            let (n,): (usize,) = call.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .max_response_len(max_response_len)
        .observer(metrics)
}

struct TestServer {
    addr: SocketAddr,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    async fn start(
        limits: Limits,
        max_response_len: usize,
        configure: impl FnOnce(Server) -> Server,
    ) -> TestServer {
        let service = |limits: &Limits, metrics: Arc<Metrics>| {
            let d = dispatcher(metrics.clone(), max_response_len);
            HttpService::new(d, limits, Some(metrics))
        };
        TestServer::serving(limits, service, configure).await
    }

    /// As `start`, serving the service `make` builds for the limits and
    /// the server's metrics.
    async fn serving<K: 'static>(
        limits: Limits,
        make: impl FnOnce(&Limits, Arc<Metrics>) -> HttpService<(), K>,
        configure: impl FnOnce(Server) -> Server,
    ) -> TestServer {
        let metrics = Arc::new(Metrics::default());
        let service = make(&limits, metrics.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let server = configure(Server::new(limits).metrics(metrics.clone()));
        let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
        TestServer {
            addr,
            shutdown,
            metrics,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(HANG, self.task)
            .await
            .expect("the server stops")
            .unwrap();
        assert_eq!(self.metrics.connections_open(), 0);
    }
}

/// rpcwire's own loop and hyper only, alike but for that.
struct Pair {
    own: TestServer,
    hyper: TestServer,
}

impl Pair {
    async fn start(limits: Limits, configure: impl Fn(Server) -> Server) -> Pair {
        Pair::with_response_limit(limits, 25_000_000, configure).await
    }

    async fn with_response_limit(
        limits: Limits,
        max_response_len: usize,
        configure: impl Fn(Server) -> Server,
    ) -> Pair {
        Pair {
            own: TestServer::start(limits.clone(), max_response_len, &configure).await,
            hyper: TestServer::start(limits, max_response_len, |s| configure(s).own_http1(false))
                .await,
        }
    }

    /// Sends each conversation whole to both (half-closing after it when
    /// asked); returns how each answered where they differ.
    async fn diffs(&self, half_close: bool, conversations: &[(String, Vec<u8>)]) -> Vec<String> {
        let mut diffs = Vec::new();
        for (what, conversation) in conversations {
            let mut answers = Vec::new();
            for server in [&self.hyper, &self.own] {
                let (raw, closed) = converse(
                    server.addr,
                    conversation,
                    half_close,
                    Duration::from_secs(5),
                )
                .await;
                answers.push((responses_of(&raw), closed));
            }
            let [theirs, ours] = &answers[..] else {
                unreachable!()
            };
            if ours != theirs {
                diffs.push(format!(
                    "{what}:\n  own:   {}\n  hyper: {}",
                    summary(&ours.0, ours.1),
                    summary(&theirs.0, theirs.1)
                ));
            }
        }
        diffs
    }

    async fn stop(self) {
        self.own.stop().await;
        self.hyper.stop().await;
    }
}

/// Asserts that both servers answer each conversation alike.
async fn assert_alike(pair: Pair, half_close: bool, conversations: &[(String, Vec<u8>)]) {
    let diffs = pair.diffs(half_close, conversations).await;
    pair.stop().await;
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Writes `conversation` on a fresh connection (then half-closes when
/// asked) and reads until the server closes or `wait` passes; returns what
/// was read and whether the server closed.
async fn converse(
    addr: SocketAddr,
    conversation: &[u8],
    half_close: bool,
    wait: Duration,
) -> (Vec<u8>, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.split();
    let mut response = Vec::new();
    let reading = async {
        let mut buf = vec![0u8; 65536];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => response.extend_from_slice(&buf[..n]),
            }
        }
    };
    let writing = async {
        let _ = write.write_all(conversation).await;
        if half_close {
            let _ = write.shutdown().await;
        }
    };
    let closed = tokio::time::timeout(wait, async { tokio::join!(reading, writing).0 })
        .await
        .unwrap_or(false);
    (response, closed)
}

fn small_limits() -> Limits {
    Limits {
        max_message_len: 1024,
        ..Limits::default()
    }
}

/// A dispatcher without a response size limit (`max_response_len(usize::MAX)`):
/// the loop's reply buffer starts with room for the response head, and the
/// reply's limit (its start plus its allowance) once overflowed: a panic
/// in debug builds (the connection dropped without a reply), every reply
/// refused as too large in release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_response_limit_answers_as_hyper_does() {
    let _shared = HEAP.read().await;
    let big = r#"{"jsonrpc":"2.0","id":2,"method":"big","params":[3000]}"#;
    let batch = format!("[{BLOCK_NUMBER},{big}]");
    let conversation = [
        request(JSON, BLOCK_NUMBER),
        request(JSON, big),
        request(CLOSE, &batch),
    ]
    .concat();
    for limit in [usize::MAX, usize::MAX - 100] {
        let pair = Pair::with_response_limit(Limits::default(), limit, |s| s).await;
        let (raw, _) = converse(pair.own.addr, conversation.as_bytes(), false, HANG).await;
        let statuses: Vec<String> = responses_of(&raw).into_iter().map(|r| r.0).collect();
        assert_eq!(statuses, ["200 OK"; 3], "limit {limit}");
        let what = format!("limit {limit}");
        assert_alike(pair, false, &[(what, conversation.clone().into_bytes())]).await;
    }
}

/// A head past `max_header_bytes` pipelined behind a large body: the loop's
/// buffer, grown for the body, takes the whole head in one read, and the
/// loop checked the head limit only on a head not yet complete, so it
/// answered heads of any size there (hyper: 431).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_past_the_limit_behind_a_large_body_gets_431() {
    let _shared = HEAP.read().await;
    let limits = Limits {
        max_message_len: 4 << 20,
        ..Limits::default()
    };
    let pair = Pair::start(limits, |s| s.max_header_bytes(16 * 1024)).await;
    // About 2 MB.
    let large = format!("[{}]", vec![BLOCK_NUMBER; 40_000].join(","));
    let mut conversations = Vec::new();
    for pad in [100_000usize, 300_000] {
        let head = format!("{CLOSE}x-pad: {}\r\n", "p".repeat(pad));
        let conversation = [request(JSON, &large), request(&head, BLOCK_NUMBER)].concat();
        let (raw, _) = converse(pair.own.addr, conversation.as_bytes(), false, HANG).await;
        let statuses: Vec<String> = responses_of(&raw).into_iter().map(|r| r.0).collect();
        assert_eq!(
            statuses,
            ["200 OK", "431 Request Header Fields Too Large"],
            "a head of {pad} bytes"
        );
        conversations.push((format!("a head of {pad} bytes"), conversation.into_bytes()));
    }
    assert_alike(pair, false, &conversations).await;
}

/// The headers a handler sees with two equal `Content-Length` headers:
/// hyper keeps the first only; the loop's map once had both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_one_content_length_of_two_equal_ones() {
    let _shared = HEAP.read().await;
    let body = r#"{"jsonrpc":"2.0","id":5,"method":"headers","params":["content-length"]}"#;
    let n = body.len();
    let mut conversations = Vec::new();
    for lengths in [
        format!("content-length: {n}\r\ncontent-length: {n}\r\n"),
        format!("Content-Length: {n}\r\nx-a: b\r\nCONTENT-LENGTH: {n}\r\ncontent-length: {n}\r\n"),
    ] {
        let conversation = format!("POST / HTTP/1.1\r\nhost: x\r\n{CLOSE}{lengths}\r\n{body}");
        conversations.push((lengths.clone(), conversation.into_bytes()));
    }
    let pair = Pair::start(small_limits(), |s| s).await;
    let (raw, _) = converse(pair.own.addr, &conversations[0].1, false, HANG).await;
    let responses = responses_of(&raw);
    assert_eq!(
        responses[0].2,
        format!(r#"{{"jsonrpc":"2.0","id":5,"result":["{n}"]}}"#)
    );
    assert_alike(pair, false, &conversations).await;
}

/// A `Connection` value with bytes past ASCII: hyper reads no token in it
/// (it is not a `str`) and keeps the connection; the loop read `close` in
/// `close, \xe9` and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_values_past_ascii_close_nothing() {
    let _shared = HEAP.read().await;
    let mut conversations = Vec::new();
    // The last: where the loop hands over (an `upgrade` token).
    for value in [
        &b"close, \xe9"[..],
        b"\xe9, close",
        b"keep-alive, close\x80",
        b"upgrade, \xe9",
    ] {
        let mut conversation =
            format!("POST / HTTP/1.1\r\nhost: x\r\n{JSON}connection: ").into_bytes();
        conversation.extend_from_slice(value);
        let rest = format!(
            "\r\ncontent-length: {}\r\n\r\n{BLOCK_NUMBER}{}",
            BLOCK_NUMBER.len(),
            request(CLOSE, BLOCK_NUMBER)
        );
        conversation.extend_from_slice(rest.as_bytes());
        let what = format!("connection: {}", String::from_utf8_lossy(value));
        conversations.push((what, conversation));
    }
    assert_alike(
        Pair::start(small_limits(), |s| s).await,
        false,
        &conversations,
    )
    .await;
}

/// Connections left open after one large request each: the loop kept the
/// read buffer it grew for the body (up to `max_message_len`, 5 MiB by
/// default) for as long as the connection lived; hyper's path keeps its
/// usual buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_s_buffer_is_not_kept_by_its_connection() {
    let _heap = HEAP.write().await;
    let limits = Limits {
        max_message_len: 4 << 20,
        ..Limits::default()
    };
    let pad = "p".repeat(1 << 20);
    let large =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":["{pad}"]}}"#);
    let two = [request(JSON, &large), request(JSON, BLOCK_NUMBER)].concat();
    // The large request, then a small one: its reply comes once the server
    // is done with the large one (both answer 0x1b4).
    let [own, hyper] = kept_on_both_paths(limits, &two, 2).await;
    eprintln!("{CONNECTIONS} connections after a 1 MiB body: own +{own} bytes, hyper +{hyper}");
    assert!(
        own < CONNECTIONS * (256 << 10),
        "{CONNECTIONS} connections kept {own} bytes (hyper's path: {hyper})"
    );
}

const CONNECTIONS: usize = 20;

/// Heap bytes `CONNECTIONS` connections keep once each sent `two` (a
/// pipeline ending in `eth_blockNumber`) and read its answers (until
/// `results` replies of `0x1b4` came), on the own loop and on hyper's path.
async fn kept_on_both_paths(limits: Limits, two: &str, results: usize) -> [usize; 2] {
    let reply = br#""result":"0x1b4"}"#;
    let mut grew = [0; 2];
    for (path, own) in [true, false].into_iter().enumerate() {
        let server = TestServer::start(limits.clone(), 25_000_000, |s| s.own_http1(own)).await;
        let base = counting_alloc::live();
        let mut streams = Vec::new();
        for _ in 0..CONNECTIONS {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            stream.write_all(two.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; 65536];
            let mut got = Vec::new();
            while got.windows(reply.len()).filter(|w| w == reply).count() < results {
                let n = tokio::time::timeout(HANG, stream.read(&mut buf))
                    .await
                    .unwrap()
                    .unwrap();
                assert!(n > 0, "closed");
                got.extend_from_slice(&buf[..n]);
            }
            streams.push(stream);
        }
        grew[path] = counting_alloc::live().saturating_sub(base);
        drop(streams);
        server.stop().await;
    }
    grew
}

/// Connections left open after one large reply each (a small request
/// asking for 400 kB): the loop kept reply buffers up to 1 MiB for the
/// next reply, so a client could make each of its connections hold that much
/// for as long as it kept them open; hyper's path keeps no reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_reply_s_buffer_is_not_kept_by_its_connection() {
    let _heap = HEAP.write().await;
    let asks = r#"{"jsonrpc":"2.0","id":2,"method":"big","params":[400000]}"#;
    let two = [request(JSON, asks), request(JSON, BLOCK_NUMBER)].concat();
    let [own, hyper] = kept_on_both_paths(Limits::default(), &two, 1).await;
    eprintln!("{CONNECTIONS} connections after a 400 kB reply: own +{own} bytes, hyper +{hyper}");
    assert!(
        own < CONNECTIONS * (256 << 10),
        "{CONNECTIONS} connections kept {own} bytes (hyper's path: {hyper})"
    );
}

/// Pipelines that hand over to hyper midway (a chunked body, another
/// method, `Transfer-Encoding` with `Content-Length`, another content type,
/// HTTP/1.0, 40 headers, an absolute-form target, `OPTIONS *`, stray
/// bytes), written in pieces of random sizes (seeded) with pauses
/// between some: the bytes the loop read before a hand-over reach hyper
/// once and in order, whatever the cut; answers as hyper's, sent whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_overs_midway_through_pipelines_cut_anywhere() {
    let _shared = HEAP.read().await;
    let n = BLOCK_NUMBER.len();
    let chunked = format!(
        "POST / HTTP/1.1\r\nhost: x\r\n{JSON}transfer-encoding: chunked\r\n\r\n{n:x}\r\n{BLOCK_NUMBER}\r\n0\r\n\r\n"
    );
    let note = r#"{"jsonrpc":"2.0","method":"eth_blockNumber"}"#;
    let many: String = (0..40).map(|i| format!("x-h{i}: v\r\n")).collect();
    let call = || request(JSON, BLOCK_NUMBER);
    let last = || request(CLOSE, BLOCK_NUMBER);
    let te_and_cl = format!(
        "POST / HTTP/1.1\r\nhost: x\r\n{JSON}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n{n:x}\r\n{BLOCK_NUMBER}\r\n0\r\n\r\n"
    );
    let http10 = format!(
        "POST / HTTP/1.0\r\n{JSON}connection: keep-alive\r\ncontent-length: {n}\r\n\r\n{BLOCK_NUMBER}"
    );
    let absolute = format!(
        "POST http://x/ HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{BLOCK_NUMBER}"
    );
    let get = "GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_owned();
    let options = "OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n".to_owned();
    let conversations: Vec<String> = [
        vec![call(), request(JSON, note), chunked, call(), get, last()],
        vec![call(), te_and_cl, last()],
        vec![
            call(),
            request("content-type: text/plain\r\n", BLOCK_NUMBER),
            call(),
            http10,
            last(),
        ],
        vec![
            call(),
            request(&format!("{JSON}{many}"), BLOCK_NUMBER),
            request(JSON, ""),
            last(),
        ],
        vec![call(), absolute, last()],
        vec![call(), "\r\n".into(), call(), options, last()],
        vec![call(), "\x01garbage\r\n\r\n".into()],
    ]
    .into_iter()
    .map(|pipeline| pipeline.concat())
    .collect();
    let pair = Pair::start(small_limits(), |s| s).await;
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut rnd = move |m: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % m as u64) as usize
    };
    let mut bad = Vec::new();
    for (i, c) in conversations.iter().enumerate() {
        let (raw, closed) =
            converse(pair.hyper.addr, c.as_bytes(), false, Duration::from_secs(5)).await;
        let theirs = summary(&responses_of(&raw), closed);
        for round in 0..12 {
            let mut stream = TcpStream::connect(pair.own.addr).await.unwrap();
            let (mut rd, mut wr) = stream.split();
            let bytes = c.as_bytes();
            let mut cuts = Vec::new();
            let writing = async {
                let mut at = 0;
                while at < bytes.len() {
                    let k = (1 + rnd(60)).min(bytes.len() - at);
                    cuts.push(k);
                    if wr.write_all(&bytes[at..at + k]).await.is_err() {
                        break;
                    }
                    at += k;
                    if rnd(3) == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            };
            let mut raw = Vec::new();
            let reading = async {
                let mut buf = vec![0u8; 65536];
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => return true,
                        Ok(k) => raw.extend_from_slice(&buf[..k]),
                    }
                }
            };
            let closed = tokio::time::timeout(Duration::from_secs(5), async {
                tokio::join!(reading, writing).0
            })
            .await
            .unwrap_or(false);
            let ours = summary(&responses_of(&raw), closed);
            if ours != theirs {
                bad.push(format!(
                    "conv {i} round {round} cuts {cuts:?}:\n  own:   {ours}\n  hyper: {theirs}"
                ));
            }
        }
    }
    pair.stop().await;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Reads until what was read ends with `end`; fails if the server closes
/// first (`when` says when, in the failure).
async fn read_until(stream: &mut TcpStream, end: &[u8], when: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(HANG, stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed {when}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Sends `bytes` on `stream` one at a time, `pause` apart, until the
/// server closes the connection or answers; returns how many were sent.
async fn trickle(stream: &mut TcpStream, bytes: &[u8], pause: Duration) -> usize {
    let mut sent = 0;
    for b in bytes {
        if stream.write_all(&[*b]).await.is_err() {
            return sent;
        }
        sent += 1;
        let mut probe = [0u8; 64];
        if let Ok(r) = tokio::time::timeout(pause, stream.read(&mut probe)).await {
            match r {
                Ok(0) | Err(_) => return sent,
                Ok(_) => {
                    assert_eq!(sent, bytes.len(), "answered before the head was whole");
                    return sent;
                }
            }
        }
    }
    sent
}

/// A first request with the method `PRI` (an HTTP/1.1 request, answered
/// 405): the connection's task took its first three bytes for HTTP/2's
/// preface and stopped timing later heads, so a client could then trickle
/// a head forever (slowloris) under the idle timer only, which its bytes
/// keep resetting. Both paths: the own loop hands such a connection over
/// at its first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pri_method_is_not_http2_for_the_header_timer() {
    let _shared = HEAP.read().await;
    let head = format!(
        "POST / HTTP/1.1\r\nhost: x\r\n{JSON}x-pad: {}\r\n",
        "p".repeat(40)
    );
    let mut results = Vec::new();
    for own in [true, false] {
        let server = TestServer::start(small_limits(), 25_000_000, |s| {
            s.header_read_timeout(Duration::from_millis(300))
                .own_http1(own)
        })
        .await;
        for first in [
            "PRI / HTTP/1.1\r\nhost: x\r\n\r\n",
            "PUT / HTTP/1.1\r\nhost: x\r\n\r\n",
        ] {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            stream.write_all(first.as_bytes()).await.unwrap();
            let got = read_until(&mut stream, b"use POST\"}}}", &format!("after {first:?}")).await;
            assert!(got.starts_with(b"HTTP/1.1 405"));
            // 100 ms apart, the head (never finished) would take 9 s: the
            // header timer (300 ms) ends it long before.
            let sent = trickle(&mut stream, head.as_bytes(), Duration::from_millis(100)).await;
            results.push((own, first.split(' ').next().unwrap(), sent < head.len()));
        }
        server.stop().await;
    }
    assert!(
        results.iter().all(|r| r.2),
        "(own loop, first method, dropped before the head was whole): {results:?}"
    );
}

/// An empty line after a request (a client ending its body with a CRLF of
/// its own) begins no head: RFC 9112 2.2 has a server ignore it. It armed
/// the header timer, so the kept-alive connection was dropped at the
/// header timeout as a slowloris (found by a review). Both paths: the
/// next request, sent later than that, is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_line_between_requests_arms_no_header_timer() {
    let _shared = HEAP.read().await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    for own in [true, false] {
        let server = TestServer::start(small_limits(), 25_000_000, |s| {
            s.header_read_timeout(Duration::from_millis(300))
                .own_http1(own)
        })
        .await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        for round in 0..2 {
            stream.write_all(request.as_bytes()).await.unwrap();
            let got = read_until(
                &mut stream,
                b"}",
                &format!("own loop {own}: in round {round}"),
            )
            .await;
            assert!(
                got.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&got)
            );
            stream.write_all(b"\r\n").await.unwrap();
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        server.stop().await;
    }
}

/// After a call, bytes that start like HTTP/2's preface but are not it
/// (`PRI * HTTP/2.1`, `PRI * HTTP/2.0` with another tail): hyper's HTTP/1
/// connection answers 400 (it closes without a word only on the whole
/// preface); the loop closed without a word on any `PRI * HTTP/2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn almost_an_h2_preface_after_a_call_gets_400() {
    let _shared = HEAP.read().await;
    let call = request(JSON, BLOCK_NUMBER);
    let mut conversations = Vec::new();
    for tail in [
        "PRI * HTTP/2.1\r\n\r\nSM\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nXY\r\n\r\n",
        "PRI * HTTP/2\r\n\r\n",
        // The preface itself, and with a frame after it: closed, no answer.
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    ] {
        let what = format!("a call, then {tail:?}");
        conversations.push((what, format!("{call}{tail}").into_bytes()));
    }
    assert_alike(
        Pair::start(small_limits(), |s| s).await,
        false,
        &conversations,
    )
    .await;
}

/// The call pipelined behind each smuggling vector: whether and how it is
/// answered shows how the server framed the vector (and whether it kept
/// the connection).
const NEXT: &str = r#"{"jsonrpc":"2.0","id":"next","method":"eth_blockNumber"}"#;

/// A `POST /` with `fields` (whole lines, `Content-Length` included as
/// the vector has it) and `body`, nothing added but `host`.
fn raw_post(fields: &str, body: &str) -> String {
    format!("POST / HTTP/1.1\r\nhost: x\r\n{fields}\r\n{body}")
}

/// Request-smuggling and framing vectors, each followed by a pipelined
/// call (`connection: close`).
fn smuggling_vectors() -> Vec<(String, Vec<u8>)> {
    let b = BLOCK_NUMBER;
    let n = b.len();
    let next = request(CLOSE, NEXT);
    let chunked_body = format!("{n:x}\r\n{b}\r\n0\r\n\r\n");
    let mut v: Vec<(String, String)> = vec![
        (
            "content-length twice, different".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ncontent-length: {}\r\n", n + 1),
                b,
            ),
        ),
        (
            "content-length twice, same".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ncontent-length: {n}\r\n"),
                b,
            ),
        ),
        (
            "content-length: n, n".into(),
            raw_post(&format!("{JSON}content-length: {n}, {n}\r\n"), b),
        ),
        (
            "content-length: n, n+1".into(),
            raw_post(&format!("{JSON}content-length: {n}, {}\r\n", n + 1), b),
        ),
        (
            "content-length: +n".into(),
            raw_post(&format!("{JSON}content-length: +{n}\r\n"), b),
        ),
        (
            "content-length: -n".into(),
            raw_post(&format!("{JSON}content-length: -{n}\r\n"), b),
        ),
        (
            "content-length: ' n ' (spaces, tab)".into(),
            raw_post(&format!("{JSON}content-length:  \t{n} \t\r\n"), b),
        ),
        (
            "content-length: 0n".into(),
            raw_post(&format!("{JSON}content-length: 0{n}\r\n"), b),
        ),
        (
            "content-length: n with 25 leading zeros".into(),
            raw_post(
                &format!("{JSON}content-length: {}{n}\r\n", "0".repeat(25)),
                b,
            ),
        ),
        (
            "content-length: nx".into(),
            raw_post(&format!("{JSON}content-length: {n}x\r\n"), b),
        ),
        (
            "content-length: n.0".into(),
            raw_post(&format!("{JSON}content-length: {n}.0\r\n"), b),
        ),
        (
            "content-length: 0xNN".into(),
            raw_post(&format!("{JSON}content-length: 0x{n:x}\r\n"), b),
        ),
        (
            "content-length: (empty)".into(),
            raw_post(&format!("{JSON}content-length: \r\n"), b),
        ),
        (
            "content-length: u64::MAX + 1".into(),
            raw_post(
                &format!("{JSON}content-length: 18446744073709551616\r\n"),
                b,
            ),
        ),
        (
            "content-length: u64::MAX".into(),
            raw_post(
                &format!("{JSON}content-length: 18446744073709551615\r\n"),
                b,
            ),
        ),
        (
            "content-length then transfer-encoding: chunked".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ntransfer-encoding: chunked\r\n"),
                &chunked_body,
            ),
        ),
        (
            "transfer-encoding: chunked then content-length".into(),
            raw_post(
                &format!("{JSON}transfer-encoding: chunked\r\ncontent-length: {n}\r\n"),
                &chunked_body,
            ),
        ),
        (
            "transfer-encoding: chunked then content-length: 3".into(),
            raw_post(
                &format!("{JSON}transfer-encoding: chunked\r\ncontent-length: 3\r\n"),
                &chunked_body,
            ),
        ),
        (
            "transfer-encoding: chunked, identity".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ntransfer-encoding: chunked, identity\r\n"),
                &chunked_body,
            ),
        ),
        (
            "transfer-encoding: identity (and content-length)".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ntransfer-encoding: identity\r\n"),
                b,
            ),
        ),
        (
            "transfer-encoding: xchunked (and content-length)".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\ntransfer-encoding: xchunked\r\n"),
                b,
            ),
        ),
        (
            "transfer-encoding: chunked, on HTTP/1.0".into(),
            format!(
                "POST / HTTP/1.0\r\n{JSON}connection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n{chunked_body}"
            ),
        ),
        (
            "content-length and transfer-encoding: chunked, on HTTP/1.0".into(),
            format!(
                "POST / HTTP/1.0\r\n{JSON}connection: keep-alive\r\ncontent-length: {n}\r\ntransfer-encoding: chunked\r\n\r\n{chunked_body}"
            ),
        ),
        (
            "obs-fold (space) in an unrelated header".into(),
            raw_post(&format!("{JSON}x-a: b\r\n c\r\ncontent-length: {n}\r\n"), b),
        ),
        (
            "obs-fold (tab) continuing content-length".into(),
            raw_post(
                &format!("{JSON}content-length: {}\r\n\t{}\r\n", n / 10, n % 10),
                b,
            ),
        ),
        (
            "bare LF line endings".into(),
            format!(
                "POST / HTTP/1.1\nhost: x\ncontent-type: application/json\ncontent-length: {n}\n\n{b}"
            ),
        ),
        (
            "bare LF on one header line".into(),
            format!(
                "POST / HTTP/1.1\r\nhost: x\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
        ),
        (
            "bare CR on one header line".into(),
            format!(
                "POST / HTTP/1.1\r\nhost: x\rcontent-type: application/json\r\ncontent-length: {n}\r\n\r\n{b}"
            ),
        ),
        (
            "bare CR ending the head".into(),
            format!(
                "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r{b}"
            ),
        ),
        (
            "space before a header's colon".into(),
            raw_post(&format!("{JSON}content-length : {n}\r\n"), b),
        ),
        (
            "space before an unrelated header's colon".into(),
            raw_post(&format!("{JSON}x-a : b\r\ncontent-length: {n}\r\n"), b),
        ),
        (
            "NUL in a value".into(),
            raw_post(&format!("{JSON}x-a: b\0c\r\ncontent-length: {n}\r\n"), b),
        ),
        (
            "DEL in a value".into(),
            raw_post(&format!("{JSON}x-a: b\x7fc\r\ncontent-length: {n}\r\n"), b),
        ),
        (
            "expect: 100-continue, empty body".into(),
            raw_post(
                &format!("{JSON}expect: 100-continue\r\ncontent-length: 0\r\n"),
                "",
            ),
        ),
        (
            "expect: something else".into(),
            raw_post(
                &format!("{JSON}expect: 200-ok\r\ncontent-length: {n}\r\n"),
                b,
            ),
        ),
        (
            "target with a bad percent escape".into(),
            format!("POST /%zz HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "target with a fragment".into(),
            format!("POST /a#b HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "target with a byte past ASCII".into(),
            format!("POST /\u{e9} HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "header name with an underscore (content_length)".into(),
            raw_post(&format!("{JSON}content_length: {n}\r\n"), b),
        ),
        (
            "body longer than content-length, a request in its tail".into(),
            raw_post(
                &format!("{JSON}content-length: {n}\r\n"),
                &format!("{b}{}", request(JSON, NEXT)),
            ),
        ),
        (
            "body shorter than content-length".into(),
            raw_post(&format!("{JSON}content-length: {}\r\n", n + 20), b),
        ),
        (
            "absolute-form target".into(),
            format!("POST http://x/ HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "absolute-form target, another host".into(),
            format!(
                "POST http://y:81/rpc HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"
            ),
        ),
        (
            "version in lower case".into(),
            format!("POST / http/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "two spaces after the method".into(),
            format!("POST  / HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "two spaces before the version".into(),
            format!("POST /  HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "tab between method and target".into(),
            format!("POST\t/ HTTP/1.1\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "HTTP/1.2".into(),
            format!("POST / HTTP/1.2\r\nhost: x\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "empty lines before the request line".into(),
            format!("\r\n\r\n{}", request(JSON, b)),
        ),
        ("connection: close".into(), request(CLOSE, b)),
        (
            "connection: close, then connection: keep-alive".into(),
            raw_post(
                &format!("{CLOSE}connection: keep-alive\r\ncontent-length: {n}\r\n"),
                b,
            ),
        ),
        (
            "connection: keep-alive, then connection: close".into(),
            raw_post(
                &format!(
                    "{JSON}connection: keep-alive\r\nconnection: close\r\ncontent-length: {n}\r\n"
                ),
                b,
            ),
        ),
        (
            "connection: CLOSE".into(),
            raw_post(
                &format!("{JSON}connection:  CLOSE \r\ncontent-length: {n}\r\n"),
                b,
            ),
        ),
        (
            "host missing".into(),
            format!("POST / HTTP/1.1\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "host twice, different".into(),
            format!(
                "POST / HTTP/1.1\r\nhost: x\r\nhost: y\r\n{JSON}content-length: {n}\r\n\r\n{b}"
            ),
        ),
        (
            "host empty".into(),
            format!("POST / HTTP/1.1\r\nhost:\r\n{JSON}content-length: {n}\r\n\r\n{b}"),
        ),
        (
            "content-type twice, json first".into(),
            raw_post(
                &format!("{JSON}content-type: text/plain\r\ncontent-length: {n}\r\n"),
                b,
            ),
        ),
        (
            "content-type twice, json second".into(),
            raw_post(
                &format!("content-type: text/plain\r\n{JSON}content-length: {n}\r\n"),
                b,
            ),
        ),
    ];
    let mut vectors: Vec<(String, Vec<u8>)> = v
        .drain(..)
        .map(|(what, c)| (what, format!("{c}{next}").into_bytes()))
        .collect();
    vectors.push((
        "content-type: application/json, then a byte past ASCII".into(),
        {
            let mut c = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json".to_vec();
            c.push(0xff);
            c.extend_from_slice(format!("\r\ncontent-length: {n}\r\n\r\n{b}{next}").as_bytes());
            c
        },
    ));
    vectors
}

/// Each smuggling vector, first on its connection or behind a call, sent
/// whole (and once with a half-close after it), answered alike by the own loop and hyper's path: status, headers,
/// body, what the pipelined call behind it gets, whether the connection
/// closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_vectors_are_answered_as_hyper_does() {
    let _shared = HEAP.read().await;
    let pair = Pair::start(small_limits(), |s| s).await;
    let mut vectors = smuggling_vectors();
    // Each again behind a call the own loop answers: a later head, read
    // where the first one's body ended.
    let first = request(JSON, BLOCK_NUMBER).into_bytes();
    for i in 0..vectors.len() {
        let (what, conversation) = &vectors[i];
        let behind = [&first[..], conversation].concat();
        vectors.push((format!("a call, then {what}"), behind));
    }
    let mut diffs = pair.diffs(false, &vectors).await;
    diffs.extend(pair.diffs(true, &vectors).await);
    pair.stop().await;
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// `Expect: 100-continue` with the body sent along with the head: hyper
/// answers `100 Continue` all the same, the own loop (which has the body)
/// does not, as RFC 9110 (10.1.1) lets a server that already received the
/// content do; the final answers, and what the pipelined call gets, are
/// alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_with_its_body_sent_is_answered_alike_but_for_the_100() {
    let _shared = HEAP.read().await;
    let pair = Pair::start(small_limits(), |s| s).await;
    let n = BLOCK_NUMBER.len();
    let conversation = format!(
        "{}{}",
        raw_post(
            &format!("{JSON}expect: 100-continue\r\ncontent-length: {n}\r\n"),
            BLOCK_NUMBER
        ),
        request(CLOSE, NEXT)
    );
    let mut answers = Vec::new();
    for server in [&pair.own, &pair.hyper] {
        let (raw, closed) = converse(server.addr, conversation.as_bytes(), false, HANG).await;
        answers.push((responses_of(&raw), closed));
    }
    pair.stop().await;
    let statuses = |answer: &(Vec<http_replies::RawResponse>, bool)| -> Vec<String> {
        answer.0.iter().map(|r| r.0.clone()).collect()
    };
    assert_eq!(statuses(&answers[0]), ["200 OK", "200 OK"]);
    assert_eq!(statuses(&answers[1]), ["100 Continue", "200 OK", "200 OK"]);
    answers[1].0.remove(0);
    assert_eq!(answers[0], answers[1]);
}

/// `Expect: 100-continue` (in any case, with whitespace) and the body sent
/// only once `100 Continue` came: both paths send it, then answer alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_before_the_body_is_answered_alike() {
    let _shared = HEAP.read().await;
    let pair = Pair::start(small_limits(), |s| s).await;
    let n = BLOCK_NUMBER.len();
    let mut diffs = Vec::new();
    for expect in ["100-continue", "100-Continue", " 100-CONTINUE \t"] {
        let head = format!(
            "POST / HTTP/1.1\r\nhost: x\r\n{JSON}expect:{expect}\r\ncontent-length: {n}\r\n\r\n"
        );
        let rest = format!("{BLOCK_NUMBER}{}", request(CLOSE, NEXT));
        let mut answers = Vec::new();
        for server in [&pair.own, &pair.hyper] {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            stream.write_all(head.as_bytes()).await.unwrap();
            let mut raw = Vec::new();
            let mut buf = vec![0u8; 65536];
            while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
                let k = tokio::time::timeout(HANG, stream.read(&mut buf))
                    .await
                    .expect("an answer to the head")
                    .unwrap();
                assert!(k > 0, "closed after {head:?}");
                raw.extend_from_slice(&buf[..k]);
            }
            stream.write_all(rest.as_bytes()).await.unwrap();
            tokio::time::timeout(HANG, stream.read_to_end(&mut raw))
                .await
                .expect("the server closes")
                .unwrap();
            answers.push(responses_of(&raw));
        }
        let statuses: Vec<&str> = answers[0].iter().map(|r| r.0.as_str()).collect();
        assert_eq!(statuses, ["100 Continue", "200 OK", "200 OK"], "{expect:?}");
        if answers[0] != answers[1] {
            diffs.push(format!(
                "{expect:?}:\n  own:   {}\n  hyper: {}",
                summary(&answers[0], true),
                summary(&answers[1], true)
            ));
        }
    }
    pair.stop().await;
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// A seeded xorshift generator: the generated conversations are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, m: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % m as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The call that ends every generated conversation (`connection: close`):
/// whether it is answered shows whether the connection was still in step.
const LAST: &str = r#"{"jsonrpc":"2.0","id":"last","method":"eth_blockNumber"}"#;

/// A request from a small grammar: mostly a plain JSON-RPC `POST`, with
/// another method, target or version now and then, a random subset of
/// headers in random order (names in odd casing, values with odd
/// whitespace), `Content-Length` right, wrong, doubled or absent, a
/// chunked body sometimes, `Origin` sometimes, and a body that is a call
/// (answered at once, or a few milliseconds later), a notification, a
/// batch, a large reply's call, a call asking what the handler sees of a
/// header, one about the body limit, invalid JSON, or nothing.
fn generated_request(rng: &mut Rng, id: usize) -> Vec<u8> {
    let method = if rng.chance(90) {
        "POST"
    } else {
        *rng.pick(&["GET", "PUT", "post"])
    };
    let target = if rng.chance(80) {
        "/"
    } else {
        *rng.pick(&["/rpc?x=1", "/a%20b", "*", "http://x/", "//x", "/{x}"])
    };
    let version = if rng.chance(92) {
        "HTTP/1.1"
    } else {
        "HTTP/1.0"
    };
    let body = match rng.below(11) {
        0..=2 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_blockNumber"}}"#),
        3 => r#"{"jsonrpc":"2.0","method":"eth_blockNumber"}"#.to_owned(),
        4 => format!(
            r#"[{{"jsonrpc":"2.0","id":{id},"method":"eth_blockNumber"}},{{"jsonrpc":"2.0","method":"x"}}]"#
        ),
        5 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"big","params":[300]}}"#),
        6 => r#"{"jsonrpc":"2.0","id":"#.to_owned(),
        9 => {
            let ms = rng.below(4);
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"later","params":[{ms}]}}"#)
        }
        // What the handler sees of a header.
        8 => {
            let name = *rng.pick(&[
                "content-length",
                "content-type",
                "connection",
                "accept-encoding",
                "host",
                "expect",
                "origin",
                "x-pad",
            ]);
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"headers","params":["{name}"]}}"#)
        }
        7 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"x","params":["{}"]}}"#,
            "p".repeat(955 + rng.below(40))
        ),
        _ => String::new(),
    };
    let chunked = rng.chance(6);
    let name = |rng: &mut Rng, lower: &str| -> String {
        match rng.below(4) {
            0 => lower.to_ascii_uppercase(),
            1 => lower
                .split('-')
                .map(|w| {
                    let mut w = w.to_owned();
                    w[..1].make_ascii_uppercase();
                    w
                })
                .collect::<Vec<_>>()
                .join("-"),
            _ => lower.to_owned(),
        }
    };
    let field = |rng: &mut Rng, lower: &str, value: &str| -> String {
        let name = name(rng, lower);
        let sep = *rng.pick(&[": ", ": ", ":", ":  \t"]);
        let trail = *rng.pick(&["", "", "", " ", "\t "]);
        format!("{name}{sep}{value}{trail}\r\n")
    };
    let mut fields = Vec::new();
    if rng.chance(90) {
        fields.push(field(rng, "host", "x"));
    }
    if rng.chance(93) {
        let value = *rng.pick(&[
            "application/json",
            "application/json",
            "application/json",
            "application/json",
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/json-rpc",
            "application/jsonrequest",
            "application/json;",
            "text/plain",
            "application/jsonx",
        ]);
        fields.push(field(rng, "content-type", value));
    }
    let n = body.len();
    if !chunked || rng.chance(20) {
        match rng.below(16) {
            0 => {
                let wrong = n + 1 + rng.below(3);
                fields.push(field(rng, "content-length", &wrong.to_string()));
            }
            1 => {
                let wrong = n.saturating_sub(1 + rng.below(3));
                fields.push(field(rng, "content-length", &wrong.to_string()));
            }
            2 => {
                let other = if rng.chance(50) { n } else { n + 1 };
                fields.push(field(rng, "content-length", &n.to_string()));
                fields.push(field(rng, "content-length", &other.to_string()));
            }
            3 if !chunked => {}
            _ => fields.push(field(rng, "content-length", &n.to_string())),
        }
    }
    if chunked {
        let value = *rng.pick(&["chunked", "chunked", "Chunked", "identity, chunked"]);
        fields.push(field(rng, "transfer-encoding", value));
    }
    while rng.chance(20) {
        let value = *rng.pick(&["close", "keep-alive", "Keep-Alive, Close", "te", "upgrade"]);
        // An HTTP/1.0 request always ends its connection: see `differ`.
        if version == "HTTP/1.0" && value == "keep-alive" {
            continue;
        }
        fields.push(field(rng, "connection", value));
    }
    for _ in 0..rng.below(3) {
        let value = *rng.pick(&[
            "gzip",
            "identity",
            "gzip;q=0",
            "*",
            "br, gzip;q=0.5",
            "GZIP",
        ]);
        fields.push(field(rng, "accept-encoding", value));
    }
    if rng.chance(5) {
        fields.push(field(rng, "expect", "100-continue"));
    }
    if rng.chance(10) {
        let value = *rng.pick(&["https://a.example", "https://b.example", "null"]);
        fields.push(field(rng, "origin", value));
    }
    if rng.chance(10) {
        let pad = "p".repeat(rng.below(200));
        fields.push(field(rng, "x-pad", &pad));
    }
    for i in (1..fields.len()).rev() {
        fields.swap(i, rng.below(i + 1));
    }
    let mut out = format!("{method} {target} {version}\r\n{}\r\n", fields.concat());
    if chunked {
        let cut = rng.below(n + 1);
        for part in [&body[..cut], &body[cut..]] {
            if !part.is_empty() {
                out.push_str(&format!("{:x}\r\n{part}\r\n", part.len()));
            }
        }
        out.push_str("0\r\n\r\n");
    } else {
        out.push_str(&body);
    }
    out.into_bytes()
}

/// One answer as the differential test compares them: status, headers but
/// `date`, body (as JSON when it is JSON).
fn compared(raw: &[u8]) -> Vec<String> {
    responses_of(raw)
        .into_iter()
        // Interim answers (`100 Continue`) depend on when the body or the
        // half-close arrives, not on the request.
        .filter(|(status, _, _)| !status.starts_with('1'))
        .map(|(status, headers, body)| {
            let body = match serde_json::from_str::<serde_json::Value>(&body) {
                Ok(json) => json.to_string(),
                Err(_) => format!("{body:?}"),
            };
            format!("[{status} | {} | {body}]", normalized(&headers))
        })
        .collect()
}

/// Headers (sorted by name) as one field per name, the values of repeated
/// ones joined with commas (RFC 9110, 5.3), `vary`'s tokens sorted (a
/// set): the own loop writes `vary: origin, accept-encoding` where
/// hyper's path writes `vary: accept-encoding` and `vary: origin`, which
/// say the same.
fn normalized(headers: &[(String, String)]) -> String {
    let mut fields: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in headers {
        let values = value.split(',').map(|v| v.trim().to_owned());
        match fields.last_mut() {
            Some((last, all)) if last == name => all.extend(values),
            _ => fields.push((name.clone(), values.collect())),
        }
    }
    let fields: Vec<String> = fields
        .into_iter()
        .map(|(name, mut values)| {
            if name == "vary" {
                values.sort();
            }
            format!("{name}: {}", values.join(", "))
        })
        .collect();
    fields.join("; ")
}

/// Writes `conversation` in pieces ending at `cuts`, half-closes when
/// asked, and reads until the server closes (hang guard: `HANG`).
async fn converse_in_pieces(
    addr: SocketAddr,
    conversation: &[u8],
    cuts: &[usize],
    half_close: bool,
) -> (Vec<String>, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.split();
    let mut raw = Vec::new();
    let reading = async {
        let mut buf = vec![0u8; 65536];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
    };
    let writing = async {
        let mut at = 0;
        for &cut in cuts.iter().chain([&conversation.len()]) {
            if write.write_all(&conversation[at..cut]).await.is_err() {
                return;
            }
            at = cut;
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        if half_close {
            let _ = write.shutdown().await;
        }
    };
    let closed = tokio::time::timeout(HANG, async { tokio::join!(reading, writing).0 })
        .await
        .unwrap_or(false);
    (compared(&raw), closed)
}

/// Generated conversations (seeded: the same every run) of 1 to 4
/// pipelined requests from [`generated_request`] and a last call, each
/// written in pieces cut at random positions (the same cuts to both) and
/// half-closed (but those with an HTTP/1.0 request), to the own loop and
/// to hyper's path, with answers compressed above 64 bytes for clients
/// that accept gzip, without and with a CORS policy: the answers (status,
/// headers, body; interim ones left out) and whether the connection
/// closed must be alike. The first difference fails, with its
/// conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_conversations_are_answered_as_hyper_does() {
    let _shared = HEAP.read().await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for cors in [false, true] {
        let service = |limits: &Limits, metrics: Arc<Metrics>| {
            // `later`: answered after a pause of the milliseconds asked,
            // so that bytes (and the half-close) arrive while a request
            // is answered.
            let d = methods(metrics.clone(), 25_000_000)
                .async_method("later", |call: AsyncCall<()>| async move {
                    let (ms,): (u64,) = call.decode()?;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, RpcError>(ms)
                })
                .build()
                .unwrap();
            let s = HttpService::new(d, limits, Some(metrics)).gzip(64);
            if cors {
                s.cors(Cors::origins(["https://a.example"]).unwrap())
            } else {
                s
            }
        };
        let own = TestServer::serving(small_limits(), service, |s| s).await;
        let hyper = TestServer::serving(small_limits(), service, |s| s.own_http1(false)).await;
        let failure = differ(&own, &hyper, &mut rng, 250).await;
        own.stop().await;
        hyper.stop().await;
        if let Some(failure) = failure {
            panic!("with CORS {cors}: {failure}");
        }
    }
}

/// Sends `rounds` generated conversations to both servers; returns the
/// first that they answer differently.
async fn differ(
    own: &TestServer,
    hyper: &TestServer,
    rng: &mut Rng,
    rounds: usize,
) -> Option<String> {
    for round in 0..rounds {
        let mut conversation = Vec::new();
        for id in 0..1 + rng.below(4) {
            conversation.extend(generated_request(rng, id));
        }
        // An end of stream read while an HTTP/1.0 request is answered is
        // taken for the client's close (no `100` can tell a half-close
        // from it): whether the answer comes depends on when the end of
        // stream arrives, on either path. Such a conversation is not
        // half-closed: the server closes after that request.
        let half_close = !conversation
            .windows(b" HTTP/1.0\r\n".len())
            .any(|w| w == b" HTTP/1.0\r\n");
        conversation.extend(request(CLOSE, LAST).into_bytes());
        let mut cuts: Vec<usize> = (0..rng.below(6))
            .map(|_| rng.below(conversation.len()))
            .collect();
        cuts.sort_unstable();
        let ours = converse_in_pieces(own.addr, &conversation, &cuts, half_close).await;
        let theirs = converse_in_pieces(hyper.addr, &conversation, &cuts, half_close).await;
        if ours != theirs {
            return Some(format!(
                "round {round}, cut at {cuts:?}:\n{:?}\n  own:   {:?}\n  hyper: {:?}",
                String::from_utf8_lossy(&conversation),
                ours,
                theirs
            ));
        }
    }
    None
}

/// A graceful shutdown that begins while the first request's head comes
/// in lets it finish and answers it (`connection: close`), on both paths.
/// When the own loop found the head was hyper's (a GET, a content type not
/// JSON, a chunked body) and handed it over after the shutdown began,
/// hyper was told to shut down before it had read the request, which
/// closed the connection with no answer. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_handed_to_hyper_during_a_shutdown_is_answered() {
    let _shared = HEAP.read().await;
    let n = BLOCK_NUMBER.len();
    let requests = [
        "GET / HTTP/1.1\r\nhost: x\r\nx-pad: ppppppppppppppppppppppppppppppp\r\n\r\n".to_owned(),
        request("content-type: text/plain\r\n", BLOCK_NUMBER),
        format!(
            "POST / HTTP/1.1\r\nhost: x\r\n{JSON}transfer-encoding: chunked\r\n\r\n{n:x}\r\n{BLOCK_NUMBER}\r\n0\r\n\r\n"
        ),
    ];
    for first in &requests {
        let mut seen = Vec::new();
        for own in [true, false] {
            let server = TestServer::start(small_limits(), 25_000_000, |s| s.own_http1(own)).await;
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            let (a, b) = first.as_bytes().split_at(30);
            stream.write_all(a).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            server.shutdown.trigger();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = stream.write_all(b).await;
            let mut raw = Vec::new();
            let _ = tokio::time::timeout(HANG, stream.read_to_end(&mut raw)).await;
            seen.push(summary(&responses_of(&raw), true));
            server.stop().await;
        }
        assert!(!seen[1].is_empty(), "{first:?}: hyper answers");
        assert_eq!(
            seen[0], seen[1],
            "{first:?}:\nown:   {}\nhyper: {}",
            seen[0], seen[1]
        );
    }
}

/// A client that never reads its reply: after one idle period nothing more
/// is started, after another the connection is dropped, on both paths
/// (`Server::serve`'s "dropped if it still cannot finish ... after another
/// such period"). The own loop dropped it after one. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_nobody_reads_is_dropped_after_two_idle_periods() {
    let _shared = HEAP.read().await;
    let idle = Duration::from_millis(1000);
    let limits = Limits {
        idle_timeout: idle,
        ..Limits::default()
    };
    let asks = r#"{"jsonrpc":"2.0","id":2,"method":"big","params":[20000000]}"#;
    let mut open_at = Vec::new();
    for own in [true, false] {
        let server = TestServer::start(limits.clone(), 25_000_000, |s| s.own_http1(own)).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(request(JSON, asks).as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(idle * 17 / 10).await;
        let open_then = server.metrics.connections_open();
        // Dropped two or three idle periods after the writes last moved
        // (20 MB written in a debug build move them late): waited for,
        // rather than looked at after a fixed 3.7 periods.
        let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
        while server.metrics.connections_open() > 0 && tokio::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        open_at.push((own, open_then, server.metrics.connections_open()));
        drop(stream);
        server.stop().await;
    }
    assert_eq!(
        open_at,
        [(true, 1, 0), (false, 1, 0)],
        "(own loop, connections open 1.7 idle periods after a reply nobody reads, and later)"
    );
}

/// The dispatcher's `max_in_flight` is one connection's, over HTTP/2
/// too: 32 streams of one connection, a call each, run at most the cap
/// at once, the others waiting for a slot (each stream had a cap of its
/// own: all 32 ran under a cap of 2; found by a review). A stream reset
/// while it waits or runs gives its slots back (the last requests are
/// served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_streams_share_their_connection_s_call_cap() {
    let _shared = HEAP.read().await;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const CAP: usize = 2;
    const STREAMS: usize = 32;
    #[derive(Default)]
    struct Running {
        now: AtomicUsize,
        peak: AtomicUsize,
    }
    let running = Arc::new(Running::default());
    let d = Dispatcher::builder(running.clone())
        .max_in_flight(CAP)
        .async_method("hold", |c: AsyncCall<Arc<Running>>| async move {
            // Counted down when the call ends or is dropped (its stream
            // reset).
            struct Ends(Arc<Running>);
            impl Drop for Ends {
                fn drop(&mut self) {
                    self.0.now.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let n = c.state.now.fetch_add(1, Ordering::SeqCst) + 1;
            c.state.peak.fetch_max(n, Ordering::SeqCst);
            let _ends = Ends(Arc::clone(&c.state));
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, RpcError>(())
        })
        .build()
        .unwrap();
    let limits = Limits {
        max_in_flight: STREAMS,
        ..Limits::default()
    };
    let service = HttpService::new(d, &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Server::new(limits).serve(listener, service, shutdown.clone()));
    let sender = http_replies::h2_client(addr).await;
    let call = |i: usize| {
        let mut sender = sender.clone();
        async move {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"hold"}}"#);
            let req = http::Request::post(format!("http://{addr}/"))
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap();
            sender.ready().await.unwrap();
            sender.send_request(req).await.unwrap().status()
        }
    };
    // Streams given up on while they wait or run: reset by the client.
    let abandoned: Vec<_> = (0..8).map(|i| tokio::spawn(call(100 + i))).collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    for a in abandoned {
        a.abort();
    }
    let calls: Vec<_> = (0..STREAMS).map(|i| tokio::spawn(call(i))).collect();
    for c in calls {
        assert_eq!(tokio::time::timeout(HANG, c).await.unwrap().unwrap(), 200);
    }
    shutdown.trigger();
    task.await.unwrap();
    let peak = running.peak.load(Ordering::SeqCst);
    assert!(
        peak <= CAP,
        "{peak} calls of one HTTP/2 connection ran at once under a cap of {CAP}"
    );
}

/// A reply before a close reaches the client whole when the client sent
/// more behind the request the server closes on (a request pipelined
/// behind a `connection: close` one, the CRLF some clients send after a
/// body): the socket was dropped with those bytes unread, and the kernel's
/// reset discarded the reply's tail (200,036 bytes cut at 127,869, with
/// `ECONNRESET`), on both paths. The close now lingers (RFC 9112 §9.6).
/// Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_before_a_close_is_not_cut_by_a_reset() {
    let _shared = HEAP.read().await;
    let big = r#"{"jsonrpc":"2.0","id":1,"method":"big","params":[200000]}"#;
    let whole = r#"{"jsonrpc":"2.0","id":1,"result":""}"#.len() + 200_000;
    for own in [true, false] {
        for behind in [request(JSON, &"p".repeat(200_000)), "\r\n".to_string()] {
            let server =
                TestServer::start(Limits::default(), 25_000_000, |s| s.own_http1(own)).await;
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            stream
                .write_all(request(CLOSE, big).as_bytes())
                .await
                .unwrap();
            let (mut read, mut write) = stream.split();
            let writing = async {
                // After the server has read the first request.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = write.write_all(behind.as_bytes()).await;
            };
            let reading = async {
                // The reply waits in the socket's buffers meanwhile.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut raw = Vec::new();
                let mut buf = vec![0u8; 65536];
                let end = loop {
                    match read.read(&mut buf).await {
                        Ok(0) => break Ok(()),
                        Ok(n) => raw.extend_from_slice(&buf[..n]),
                        Err(e) => break Err(e.kind()),
                    }
                };
                (raw, end)
            };
            let (_, (raw, end)) =
                tokio::time::timeout(HANG, async { tokio::join!(writing, reading) })
                    .await
                    .expect("hang");
            drop(stream);
            server.stop().await;
            let body_len = responses_of(&raw).first().map_or(0, |r| r.2.len());
            assert_eq!(
                (end, body_len),
                (Ok(()), whole),
                "own loop {own}, {} bytes behind: read {} bytes",
                behind.len(),
                raw.len()
            );
        }
    }
}

/// A client that keeps its idle kept-alive connection open, neither
/// reading nor closing (a connection pool), does not hold a graceful
/// shutdown: on both loops the connection closes through the lingering
/// close, which lets a quiet client go after 200 ms rather than the
/// linger's 2 s (measured on a paused clock by the unit test
/// `a_lingering_close_lets_a_quiet_client_go_early`). The bound here is a
/// hang guard (the idle timeout is two minutes), not a measurement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_idle_client_does_not_hold_a_shutdown_for_the_linger() {
    let _shared = HEAP.read().await;
    for own in [true, false] {
        let server = TestServer::start(Limits::default(), 25_000_000, |s| s.own_http1(own)).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"big","params":[10]}"#;
        stream
            .write_all(request(JSON, call).as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        let started = std::time::Instant::now();
        server.stop().await;
        let took = started.elapsed();
        drop(stream);
        assert!(
            took < Duration::from_secs(15),
            "own loop {own}: the shutdown took {took:?}"
        );
    }
}
