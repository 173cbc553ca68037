//! gzip answers (`HttpService::gzip`): long answers compressed for clients
//! that accept gzip, on rpcwire's own HTTP/1.1 loop and on hyper's path
//! (HTTP/2 too), read back by raw HTTP, hyper's client and curl over
//! 127.0.0.1; deadlines only detect hangs.
#![cfg(feature = "http")]

#[path = "support/http_replies.rs"]
#[allow(dead_code)]
mod http_replies;

use std::io::Read as _;
use std::net::SocketAddr;
use std::time::Duration;

use http_replies::h2_client;
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HANG: Duration = Duration::from_secs(10);
/// Answers of at least this many bytes are compressed.
const MIN_LEN: usize = 1024;
/// A call whose answer is about 40 KiB of hex (an `eth_getLogs` page).
const LONG: &str = r#"{"jsonrpc":"2.0","id":1,"method":"logs"}"#;
const SHORT: &str = r#"{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}"#;

fn long_result() -> String {
    (0..2_000u32)
        .map(|i| format!("0x{:040x}", u128::from(i) * 0x1_0000_0001))
        .collect::<Vec<_>>()
        .join(",")
}

fn dispatcher() -> Dispatcher<()> {
    Dispatcher::builder(())
        .method("logs", |c: Call<'_, ()>| c.reply.str(&long_result()))
        .method("eth_chainId", |c: Call<'_, ()>| c.reply.str("0x1"))
        .build()
        .unwrap()
}

struct TestServer {
    addr: SocketAddr,
    _shutdown: Shutdown,
}

async fn start(gzip: Option<usize>, own_http1: bool) -> TestServer {
    let limits = Limits::default();
    let mut service = HttpService::new(dispatcher(), &limits, None);
    if let Some(min_len) = gzip {
        service = service.gzip(min_len);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).own_http1(own_http1);
    tokio::spawn(server.serve(listener, service, shutdown.clone()));
    TestServer {
        addr,
        _shutdown: shutdown,
    }
}

/// A response: status, headers (lowercased names, `date` left out), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    /// The whole response at the front of `got` (a `Content-Length`
    /// body), and the bytes it took; `None` while it is incomplete.
    fn parse(got: &[u8]) -> Option<(Answer, usize)> {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(len)) = response.parse(got) else {
            return None;
        };
        let headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                let value = String::from_utf8(h.value.to_vec()).unwrap();
                (h.name.to_ascii_lowercase(), value)
            })
            .filter(|(name, _)| name != "date")
            .collect();
        let body_len: usize = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        if got.len() < len + body_len {
            return None;
        }
        let answer = Answer {
            status: response.code.unwrap(),
            headers,
            body: got[len..len + body_len].to_vec(),
        };
        Some((answer, len + body_len))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body, decompressed if it says it is gzip.
    fn json(&self) -> serde_json::Value {
        let text = match self.header("content-encoding") {
            Some("gzip") => {
                let mut text = Vec::new();
                flate2::read::GzDecoder::new(&self.body[..])
                    .read_to_end(&mut text)
                    .expect("a whole gzip stream");
                text
            }
            None => self.body.clone(),
            Some(other) => panic!("content-encoding {other}"),
        };
        serde_json::from_slice(&text).unwrap()
    }
}

fn post(extra: &str, body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Writes `raw` and reads `n` whole responses.
async fn exchange(stream: &mut TcpStream, raw: &str, n: usize) -> Vec<Answer> {
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut answers = Vec::new();
    tokio::time::timeout(HANG, async {
        while answers.len() < n {
            if let Some((answer, used)) = Answer::parse(&got) {
                answers.push(answer);
                got.drain(..used);
                continue;
            }
            let mut buf = [0u8; 16 * 1024];
            let read = stream.read(&mut buf).await.unwrap();
            assert!(read > 0, "closed early, {} answers", answers.len());
            got.extend_from_slice(&buf[..read]);
        }
    })
    .await
    .expect("the server answers");
    answers
}

async fn one(addr: SocketAddr, raw: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    exchange(&mut stream, raw, 1).await.remove(0)
}

#[tokio::test]
async fn long_answers_are_compressed_for_clients_that_accept_gzip() {
    let want = serde_json::Value::String(long_result());
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        for accept in [
            "gzip",
            "gzip, deflate, br",
            "deflate, gzip;q=0.5",
            "GZIP",
            "x-gzip",
            "*",
            "br;q=1.0, *;q=0.1",
        ] {
            let a = one(
                server.addr,
                &post(&format!("accept-encoding: {accept}\r\n"), LONG),
            )
            .await;
            assert_eq!(a.status, 200, "own loop {own}, {accept}: {a:?}");
            assert_eq!(
                a.header("content-encoding"),
                Some("gzip"),
                "own loop {own}, {accept}"
            );
            assert_eq!(
                a.header("vary"),
                Some("accept-encoding"),
                "own loop {own}, {accept}"
            );
            assert!(
                a.body.len() * 2 < want.as_str().unwrap().len(),
                "own loop {own}: {} compressed bytes for {}",
                a.body.len(),
                want.as_str().unwrap().len()
            );
            assert_eq!(a.json()["result"], want, "own loop {own}, {accept}");
        }
    }
}

#[tokio::test]
async fn other_clients_and_short_answers_are_sent_as_they_are() {
    let want = serde_json::Value::String(long_result());
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        for accept in [
            "",
            "accept-encoding: identity\r\n",
            "accept-encoding: gzip;q=0\r\n",
            "accept-encoding: gzip;q=0.000, *\r\n",
            "accept-encoding: *;q=0\r\n",
            "accept-encoding: deflate, br\r\n",
        ] {
            let a = one(server.addr, &post(accept, LONG)).await;
            assert_eq!(a.status, 200, "own loop {own}, {accept:?}: {a:?}");
            assert_eq!(
                a.header("content-encoding"),
                None,
                "own loop {own}, {accept:?}"
            );
            // Long enough to be compressed for another client: caches
            // must know the answer depends on `Accept-Encoding`.
            assert_eq!(
                a.header("vary"),
                Some("accept-encoding"),
                "own loop {own}, {accept:?}"
            );
            assert_eq!(a.json()["result"], want, "own loop {own}, {accept:?}");
        }
        let a = one(server.addr, &post("accept-encoding: gzip\r\n", SHORT)).await;
        assert_eq!(a.header("content-encoding"), None, "own loop {own}: {a:?}");
        assert_eq!(a.header("vary"), None, "own loop {own}: {a:?}");
        assert_eq!(a.json()["result"], "0x1");
        // A notification's empty answer stays empty.
        let a = one(
            server.addr,
            &post(
                "accept-encoding: gzip\r\n",
                r#"{"jsonrpc":"2.0","method":"logs"}"#,
            ),
        )
        .await;
        assert_eq!(a.status, 204, "own loop {own}: {a:?}");
        assert_eq!(a.header("content-encoding"), None);
        assert!(a.body.is_empty());
    }
}

#[tokio::test]
async fn without_gzip_nothing_is_compressed() {
    for own in [true, false] {
        let server = start(None, own).await;
        let a = one(server.addr, &post("accept-encoding: gzip\r\n", LONG)).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-encoding"), None, "own loop {own}");
        assert_eq!(a.header("vary"), None, "own loop {own}");
        assert_eq!(
            a.json()["result"].as_str().unwrap().len(),
            long_result().len()
        );
    }
}

/// Compressed and plain answers alternate on one kept-alive connection,
/// pipelined: each framed by its own `Content-Length`.
#[tokio::test]
async fn compressed_and_plain_answers_share_a_connection() {
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let gz = post("accept-encoding: gzip\r\n", LONG);
        let plain = post("", LONG);
        let short = post("accept-encoding: gzip\r\n", SHORT);
        let raw = format!("{gz}{plain}{short}{gz}");
        let answers = exchange(&mut stream, &raw, 4).await;
        let encodings: Vec<Option<&str>> = answers
            .iter()
            .map(|a| a.header("content-encoding"))
            .collect();
        assert_eq!(
            encodings,
            [Some("gzip"), None, None, Some("gzip")],
            "own loop {own}"
        );
        let ids: Vec<serde_json::Value> = answers.iter().map(|a| a.json()["id"].clone()).collect();
        assert_eq!(ids, [1, 1, 2, 1], "own loop {own}");
    }
}

#[tokio::test]
async fn http2_answers_are_compressed_too() {
    use http_body_util::{BodyExt, Full};
    let server = start(Some(MIN_LEN), true).await;
    let mut sender = h2_client(server.addr).await;
    let request = http::Request::post("/")
        .header("content-type", "application/json")
        .header("accept-encoding", "gzip")
        .body(Full::new(bytes::Bytes::from_static(LONG.as_bytes())))
        .unwrap();
    let r = sender.send_request(request).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut text)
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["result"].as_str().unwrap(), long_result());
}

/// curl's `--compressed` (it asks for gzip and decompresses): what a shell
/// user's check of a node looks like.
#[tokio::test]
async fn curl_compressed_reads_the_answer() {
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "30", "--compressed", "-D", "-"])
            .args(["-H", "Content-Type: application/json"])
            .args(["--data-binary", LONG, &format!("http://{}/", server.addr)])
            .output()
            .await
            .expect("curl installed (.ci/run installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.to_ascii_lowercase().contains("content-encoding: gzip"),
            "own loop {own}: {head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            v["result"].as_str().unwrap(),
            long_result(),
            "own loop {own}"
        );
    }
}

/// Asks `server` for the long answer with each case's `Accept-Encoding`
/// fields and checks whether it came gzip-compressed as the case says,
/// and that it reads the same either way.
async fn expect_gzip_choices(
    server: &TestServer,
    own: bool,
    cases: impl IntoIterator<Item = (&str, bool)>,
) {
    for (fields, gzip) in cases {
        let a = one(server.addr, &post(fields, LONG)).await;
        assert_eq!(a.status, 200, "own loop {own}, {fields:?}: {a:?}");
        assert_eq!(
            a.header("content-encoding"),
            gzip.then_some("gzip"),
            "own loop {own}, {fields:?}"
        );
        assert_eq!(a.json()["result"], long_result(), "own loop {own}");
    }
}

/// Several `Accept-Encoding` fields are one list (RFC 9110, 5.3): a
/// client that refuses gzip in one and accepts anything (`*`) in another
/// refuses gzip, as if it had sent `gzip;q=0, *`; one that names gzip in
/// either accepts it.
#[tokio::test]
async fn accept_encoding_fields_are_read_as_one_list() {
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        let cases = [
            ("accept-encoding: gzip;q=0\r\naccept-encoding: *\r\n", false),
            ("accept-encoding: *\r\naccept-encoding: gzip;q=0\r\n", false),
            (
                "accept-encoding: x-gzip;q=0\r\naccept-encoding: *\r\n",
                false,
            ),
            ("accept-encoding: *;q=0\r\naccept-encoding: gzip\r\n", true),
            ("accept-encoding: br\r\naccept-encoding: gzip\r\n", true),
            ("accept-encoding: \r\naccept-encoding: gzip\r\n", true),
        ];
        expect_gzip_choices(&server, own, cases).await;
    }
}

/// The threshold is inclusive and counts the answer's bytes before
/// compression; 0 compresses every answer with a body, and an empty
/// answer (204) stays empty.
#[tokio::test]
async fn answers_at_the_threshold_are_compressed_and_zero_compresses_all() {
    for own in [true, false] {
        let plain = start(None, own).await;
        let len = one(plain.addr, &post("", SHORT)).await.body.len();
        for (min_len, gzip) in [(0, true), (len - 1, true), (len, true), (len + 1, false)] {
            let server = start(Some(min_len), own).await;
            let a = one(server.addr, &post("accept-encoding: gzip\r\n", SHORT)).await;
            assert_eq!(
                a.header("content-encoding"),
                gzip.then_some("gzip"),
                "own loop {own}, threshold {min_len} for {len} bytes"
            );
            assert_eq!(
                a.header("vary"),
                gzip.then_some("accept-encoding"),
                "own loop {own}, threshold {min_len}"
            );
            assert_eq!(a.json()["result"], "0x1");
            if min_len == 0 {
                let a = one(
                    server.addr,
                    &post(
                        "accept-encoding: gzip\r\n",
                        r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#,
                    ),
                )
                .await;
                assert_eq!(a.status, 204, "own loop {own}: {a:?}");
                assert_eq!(a.header("content-encoding"), None);
                assert!(a.body.is_empty());
            }
        }
    }
}

/// `gzip` and `x-gzip` are one coding (RFC 9110, 8.4.1.3), and one that
/// is listed with `q=0` anywhere is refused (12.5.3: "not acceptable"),
/// whatever the order and whether in one field or two: contradictory
/// listings get the answer uncompressed. `*;q=0` refuses gzip unless
/// gzip is named; `*` alone accepts it.
#[tokio::test]
async fn a_refusal_of_gzip_anywhere_in_the_list_wins_in_any_order() {
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        let cases = [
            ("accept-encoding: gzip, x-gzip;q=0\r\n", false),
            ("accept-encoding: x-gzip;q=0, gzip\r\n", false),
            ("accept-encoding: gzip;q=0, x-gzip\r\n", false),
            ("accept-encoding: x-gzip, gzip;q=0\r\n", false),
            ("accept-encoding: gzip;q=0, gzip\r\n", false),
            ("accept-encoding: gzip, GZIP;Q=0.0\r\n", false),
            (
                "accept-encoding: gzip\r\naccept-encoding: x-gzip;q=0\r\n",
                false,
            ),
            (
                "accept-encoding: x-gzip;q=0\r\naccept-encoding: gzip\r\n",
                false,
            ),
            ("accept-encoding: *;q=0\r\n", false),
            ("accept-encoding: *, *;q=0\r\n", false),
            ("accept-encoding: *;q=0, *\r\n", false),
            ("accept-encoding: *\r\n", true),
            ("accept-encoding: gzip, x-gzip\r\n", true),
            ("accept-encoding: x-gzip;q=0.5, gzip;q=1\r\n", true),
            ("accept-encoding: *;q=0, gzip\r\n", true),
        ];
        expect_gzip_choices(&server, own, cases).await;
    }
}

/// A weight outside RFC 9110's qvalue grammar (12.4.2: `0` to `0.000`
/// and `1` to `1.000`, at most three decimals) leaves its element out of
/// the list, as if it were not there: it neither accepts gzip nor refuses
/// it, so `*` beside it decides. `Q=` is `q=` (parameter names are
/// case-insensitive), and whitespace around `;` and `=` is tolerated.
#[tokio::test]
async fn an_element_with_a_malformed_weight_is_left_out() {
    for own in [true, false] {
        let server = start(Some(MIN_LEN), own).await;
        let mut cases = Vec::new();
        for bad in [
            "abc", "1.5", "0.0001", "-1", "", "2", ".5", "00", "0.5000", "1.001", "0x1",
        ] {
            cases.push((format!("accept-encoding: gzip;q={bad}\r\n"), false));
            cases.push((format!("accept-encoding: x-gzip;Q={bad}\r\n"), false));
            cases.push((format!("accept-encoding: gzip;q={bad}, *;q=1\r\n"), true));
            cases.push((format!("accept-encoding: gzip;q={bad}, *;q=0\r\n"), false));
            cases.push((format!("accept-encoding: gzip, gzip;q={bad}\r\n"), true));
            cases.push((format!("accept-encoding: *;q={bad}\r\n"), false));
            cases.push((format!("accept-encoding: *;q={bad}, gzip\r\n"), true));
        }
        for (good, gzip) in [
            ("1", true),
            ("1.", true),
            ("1.000", true),
            ("0.001", true),
            ("0.5", true),
            ("0", false),
            ("0.", false),
            ("0.000", false),
        ] {
            cases.push((format!("accept-encoding: gzip;q={good}\r\n"), gzip));
            cases.push((format!("accept-encoding: gzip;Q={good}, *\r\n"), gzip));
            cases.push((format!("accept-encoding: gzip ; q = {good} , *\r\n"), gzip));
        }
        let cases = cases.iter().map(|(f, g)| (f.as_str(), *g));
        expect_gzip_choices(&server, own, cases).await;
    }
}

/// A call whose answer is about 8 MiB of hex: long enough to be compressed
/// off the runtime thread, and to take long to compress (about a second in
/// a debug build), so that what happens meanwhile can be watched.
const HUGE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"huge"}"#;

/// 8 MiB of hex from a cheap PRNG (xorshift): compressible (hex digits)
/// but not trivially (no repeats for the compressor to find cheaply).
fn huge_result() -> &'static str {
    static HUGE_RESULT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HUGE_RESULT.get_or_init(|| {
        use std::fmt::Write as _;
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut text = String::with_capacity(8 << 20);
        while text.len() < 8 << 20 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let _ = write!(text, "{s:016x}");
        }
        text
    })
}

/// A server whose `huge` method signals `returned` as it returns its
/// answer (before the answer is compressed).
async fn start_huge(own_http1: bool, returned: std::sync::Arc<tokio::sync::Notify>) -> TestServer {
    let limits = Limits::default();
    let d = Dispatcher::builder(())
        .method("huge", move |c: Call<'_, ()>| {
            let reply = c.reply.str(huge_result());
            returned.notify_one();
            reply
        })
        .method("eth_chainId", |c: Call<'_, ()>| c.reply.str("0x1"))
        .build()
        .unwrap();
    let service = HttpService::new(d, &limits, None).gzip(MIN_LEN);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).own_http1(own_http1);
    tokio::spawn(server.serve(listener, service, shutdown.clone()));
    TestServer {
        addr,
        _shutdown: shutdown,
    }
}

/// Reads one whole response from a blocking socket, off the runtime (the
/// server runs on the test's thread).
async fn read_blocking(mut stream: std::net::TcpStream) -> Answer {
    tokio::task::spawn_blocking(move || {
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(HANG)).unwrap();
        let mut got = Vec::new();
        loop {
            if let Some((answer, _)) = Answer::parse(&got) {
                return answer;
            }
            let mut buf = [0u8; 64 * 1024];
            let read = stream
                .read(&mut buf)
                .expect("the answer within the hang guard");
            assert!(read > 0, "closed before the answer");
            got.extend_from_slice(&buf[..read]);
        }
    })
    .await
    .unwrap()
}

/// Sends `raw` on a new blocking connection to `addr`.
fn send_blocking(addr: SocketAddr, raw: &str) -> std::net::TcpStream {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    stream
}

/// A large answer is compressed off the runtime thread: on a
/// current-thread runtime (this test's), while client A's 8 MiB answer
/// is compressed, client B's short request is answered, and A's answer
/// has not begun to arrive when B's has (read without waiting: a peek on
/// a non-blocking socket). Compressed inline, A's answer was compressed
/// and on its way before B could even connect. A's answer then arrives
/// whole, with the headers an inline one has.
#[tokio::test]
async fn other_connections_are_served_while_a_large_answer_is_compressed() {
    for own in [true, false] {
        let returned = std::sync::Arc::new(tokio::sync::Notify::new());
        let server = start_huge(own, returned.clone()).await;
        let a = send_blocking(server.addr, &post("accept-encoding: gzip\r\n", HUGE));
        tokio::time::timeout(HANG, returned.notified())
            .await
            .expect("the handler runs");
        let b = one(server.addr, &post("accept-encoding: gzip\r\n", SHORT)).await;
        assert_eq!(b.json()["result"], "0x1", "own loop {own}");
        a.set_nonblocking(true).unwrap();
        let peeked = a.peek(&mut [0u8; 1]);
        assert!(
            matches!(&peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "own loop {own}: A's answer began to arrive before B's was answered: {peeked:?}"
        );
        let a = read_blocking(a).await;
        assert_eq!(a.status, 200, "own loop {own}");
        assert_eq!(a.header("content-encoding"), Some("gzip"), "own loop {own}");
        assert_eq!(a.header("vary"), Some("accept-encoding"), "own loop {own}");
        assert_eq!(a.json()["result"], huge_result(), "own loop {own}");
    }
}

/// A large answer (compressed off the runtime thread) decodes to exactly
/// the bytes sent to a client that does not accept gzip, with the same
/// headers but `Content-Encoding` and `Content-Length`.
#[tokio::test]
async fn a_large_compressed_answer_decodes_to_exactly_the_plain_one() {
    for own in [true, false] {
        let returned = std::sync::Arc::new(tokio::sync::Notify::new());
        let server = start_huge(own, returned).await;
        let plain = read_blocking(send_blocking(server.addr, &post("", HUGE))).await;
        let packed = read_blocking(send_blocking(
            server.addr,
            &post("accept-encoding: gzip\r\n", HUGE),
        ))
        .await;
        assert_eq!(plain.header("content-encoding"), None, "own loop {own}");
        assert_eq!(
            packed.header("content-encoding"),
            Some("gzip"),
            "own loop {own}"
        );
        assert!(packed.body.len() < plain.body.len(), "own loop {own}");
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&packed.body[..])
            .read_to_end(&mut text)
            .expect("a whole gzip stream");
        assert!(
            text == plain.body,
            "own loop {own}: the decoded answer differs"
        );
        let others = |a: &Answer| -> Vec<(String, String)> {
            a.headers
                .iter()
                .filter(|(n, _)| n != "content-encoding" && n != "content-length")
                .cloned()
                .collect()
        };
        assert_eq!(others(&packed), others(&plain), "own loop {own}");
    }
}

/// A client that leaves (a reset) while its answer is compressed: the
/// server serves the next requests, a large compressed one too, and
/// nothing on this test's thread or the blocking pool panics.
#[tokio::test]
async fn a_client_leaving_while_its_answer_is_compressed_harms_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let test_thread = std::thread::current().name().map(str::to_owned);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let name = std::thread::current().name().map(str::to_owned);
        if name == test_thread || name.as_deref() == Some("tokio-runtime-worker") {
            PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
    for own in [true, false] {
        let returned = std::sync::Arc::new(tokio::sync::Notify::new());
        let server = start_huge(own, returned.clone()).await;
        let a = send_blocking(server.addr, &post("accept-encoding: gzip\r\n", HUGE));
        tokio::time::timeout(HANG, returned.notified())
            .await
            .expect("the handler runs");
        socket2::SockRef::from(&a)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(a);
        let b = one(server.addr, &post("accept-encoding: gzip\r\n", SHORT)).await;
        assert_eq!(b.json()["result"], "0x1", "own loop {own}");
        let c = read_blocking(send_blocking(
            server.addr,
            &post("accept-encoding: gzip\r\n", HUGE),
        ))
        .await;
        assert_eq!(c.header("content-encoding"), Some("gzip"), "own loop {own}");
        assert_eq!(c.json()["result"], huge_result(), "own loop {own}");
        let d = one(server.addr, &post("accept-encoding: gzip\r\n", SHORT)).await;
        assert_eq!(d.json()["result"], "0x1", "own loop {own}");
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

/// A request body in a content coding is refused with 415, saying which
/// coding is taken, on both paths, and the connection serves on; one
/// marked `identity` is read. The coded bytes were parsed as JSON (a
/// -32700 naming no cause). Found by a review.
#[tokio::test]
async fn a_request_body_in_a_content_coding_is_415() {
    for own in [true, false] {
        let server = start(None, own).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let raw = post("content-encoding: gzip\r\n", SHORT)
            + &post("content-encoding: identity\r\n", SHORT);
        let answers = exchange(&mut stream, &raw, 2).await;
        assert_eq!(answers[0].status, 415, "own loop {own}: {:?}", answers[0]);
        assert_eq!(
            answers[0].header("accept-encoding"),
            Some("identity"),
            "own loop {own}"
        );
        assert_eq!(answers[0].json()["error"]["code"], -32600, "own loop {own}");
        assert_eq!(answers[1].status, 200, "own loop {own}: {:?}", answers[1]);
        assert_eq!(answers[1].json()["result"], "0x1", "own loop {own}");
    }
}
