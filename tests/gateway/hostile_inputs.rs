//! The gateway's HTTP forwarding path under hostile inputs: client ids of
//! every JSON shape, odd batches, and fake HTTP upstreams that misbehave
//! per entry of a split batch (wrong framing, wrong ids, error statuses,
//! late or cut replies), with the pooled connection checked after each.
//! Everything on 127.0.0.1, every server started and stopped by its test.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::eventually::eventually;
use crate::http_request::{post_close as post, read_request};

/// The upstream timeout is 1.5 s (its connect half of it): every ordinary
/// call, dozens at once in a batch on a busy 2-core host, must finish
/// within it, and the scripted hangs ([`HANG_MS`]) and late answers
/// outlast it by seconds.
fn proxy_config(upstream: SocketAddr, hyper_client: bool) -> config::Config {
    config::Config {
        upstreams: vec![format!("http://{upstream}")],
        timeout: Duration::from_millis(1500),
        hyper_client,
        ..Default::default()
    }
}

/// How long a scripted upstream hangs: two seconds past the timeout.
const HANG_MS: u64 = 3500;

async fn call(addr: SocketAddr, body: &str) -> Value {
    let (status, body) = post(addr, body).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Calls the scripted upstream's `"ok"` mode with `id` (raw JSON) and
/// asserts it was answered with its own echo: the gateway goes on after
/// whatever `context` did.
async fn assert_ok_call(addr: SocketAddr, id: &str, context: &str) {
    let r = call(
        addr,
        &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_call","params":["ok"]}}"#),
    )
    .await;
    assert_eq!(r["result"]["ok"], json!(["ok"]), "{context}: {r}");
    assert_eq!(r["id"].to_string(), id, "{context}: {r}");
}

/// One step of a scripted upstream's answer.
enum Step {
    Write(Vec<u8>),
    Sleep(u64),
    /// Close the connection (what follows is not run).
    Close,
    /// Reset the connection (RST).
    Rst,
}

/// What a scripted upstream does with request `n` (0-based over all its
/// connections), given the request body; the connection stays open after
/// the steps unless one closes it.
type Script = Arc<dyn Fn(usize, &Value) -> Vec<Step> + Send + Sync>;

/// The requests a scripted upstream received: on which connection, and
/// the body read and as sent.
type Log = Arc<Mutex<Vec<(usize, Value, Vec<u8>)>>>;

/// A raw HTTP/1.1 upstream run by `script`.
async fn scripted(script: Script) -> (SocketAddr, Log) {
    scripted_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), script)
}

/// [`scripted`] on `listener`.
fn scripted_on(listener: TcpListener, script: Script) -> (SocketAddr, Log) {
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        for conn in 0.. {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let (seen, script) = (Arc::clone(&seen), Arc::clone(&script));
            tokio::spawn(async move {
                'requests: loop {
                    let Some(body) = read_request(&mut s).await else {
                        return;
                    };
                    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                        return;
                    };
                    let n = {
                        let mut l = seen.lock().unwrap();
                        l.push((conn, v.clone(), body.clone()));
                        l.len() - 1
                    };
                    for step in script(n, &v) {
                        match step {
                            Step::Write(b) => {
                                if s.write_all(&b).await.is_err() {
                                    return;
                                }
                            }
                            Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                            Step::Close => break 'requests,
                            Step::Rst => {
                                let _ = s.set_zero_linger();
                                break 'requests;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, log)
}

/// `HTTP/1.1 <status>` with a content-length body.
fn http(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Where the `content-length` value starts in a reply made by [`http`].
fn length_at(reply: &[u8]) -> usize {
    const NAME: &[u8] = b"content-length: ";
    reply.windows(NAME.len()).position(|w| w == NAME).unwrap() + NAME.len()
}

/// A JSON-RPC result for request `v`.
fn result_for(v: &Value, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, v["id"])
}

/// Answers every call with `"ok"` and its params.
fn echo() -> Script {
    Arc::new(|_, v| {
        let p = v
            .get("params")
            .map_or("null".to_string(), |p| p.to_string());
        vec![Step::Write(http(
            "200 OK",
            &result_for(v, &format!(r#"{{"ok":{p}}}"#)),
        ))]
    })
}

/// Client ids of every JSON shape come back byte for byte, alone and in a
/// batch (duplicates included); the upstream sees only ids of its own,
/// never two alike.
#[tokio::test]
async fn client_ids_of_every_shape_come_back_byte_for_byte() {
    let (up, log) = scripted(echo()).await;
    let gw = start(proxy_config(up, false)).await;
    let long_number = "7".repeat(400);
    let at_limit_string = format!("\"{}\"", "s".repeat(1022));
    let at_limit_number = format!("-{}", "9".repeat(1023));
    let ids: Vec<&str> = vec![
        "1.0",
        "-0",
        "0",
        "1e2",
        "1E+2",
        "-1.5e-7",
        "12345678901234567890",
        &long_number,
        "-42",
        r#""\u00e8""#,
        r#""\"""#,
        r#""\\/\n\t""#,
        r#""""#,
        r#""è€😀""#,
        r#""\ud83d\ude00""#,
        "null",
        &at_limit_string,
        &at_limit_number,
    ];
    for id in &ids {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_call","params":[]}}"#);
        let (status, text) = post(gw.addr, &body).await;
        assert_eq!(status, 200, "{id}: {text}");
        assert!(
            text.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#)),
            "{id}: {text}"
        );
    }
    // All of them in one batch, twice each (duplicate ids in one batch).
    let entries: Vec<String> = ids
        .iter()
        .chain(&ids)
        .enumerate()
        .map(|(i, id)| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_call","params":[{i}]}}"#)
        })
        .collect();
    let (status, text) = post(gw.addr, &format!("[{}]", entries.join(","))).await;
    assert_eq!(status, 200, "{text}");
    // (serde_json reads no 400-digit number: the reply is checked as text.)
    assert_eq!(
        text.matches(r#"{"jsonrpc":"2.0","id":"#).count(),
        ids.len() * 2,
        "{text}"
    );
    let mut at = 0;
    for (i, id) in ids.iter().chain(&ids).enumerate() {
        let expect = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"ok":[{i}]}}}}"#);
        let found = text[at..]
            .find(&expect)
            .unwrap_or_else(|| panic!("{i} {id}: {text}"));
        at += found + expect.len();
    }
    // One byte past the id limit: the dispatcher's -32600, never forwarded.
    let sent = log.lock().unwrap().len();
    let past = format!("\"{}\"", "s".repeat(1023));
    let r = call(
        gw.addr,
        &format!(r#"{{"jsonrpc":"2.0","id":{past},"method":"eth_call"}}"#),
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(log.lock().unwrap().len(), sent);
    // The upstream saw plain ids of the gateway's, each once.
    let log = log.lock().unwrap();
    let seen: HashSet<u64> = log
        .iter()
        .map(|(_, v, _)| v["id"].as_u64().unwrap())
        .collect();
    assert_eq!(seen.len(), log.len());
}

/// Odd batches: empty, nested, all notifications, notifications mixed in,
/// every entry denied or answered locally, past the length limit.
#[tokio::test]
async fn odd_batches() {
    let (up, log) = scripted(echo()).await;
    let mut config = proxy_config(up, false);
    config.max_batch = 4;
    let gw = start(config).await;
    // `[]`: one -32600, not an array.
    let r = call(gw.addr, "[]").await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(r["id"], Value::Null);
    // A nested batch is a batch of one invalid entry.
    let r = call(
        gw.addr,
        r#"[[{"jsonrpc":"2.0","id":1,"method":"eth_call"}]]"#,
    )
    .await;
    assert_eq!(r.as_array().map(Vec::len), Some(1), "{r}");
    assert_eq!(r[0]["error"]["code"], -32600, "{r}");
    assert_eq!(log.lock().unwrap().len(), 0);
    // Notifications only: 204, no body (they are still forwarded).
    let (status, text) = post(
        gw.addr,
        r#"[{"jsonrpc":"2.0","method":"eth_call","params":["n1"]},{"jsonrpc":"2.0","method":"eth_call","params":["n2"]}]"#,
    )
    .await;
    assert_eq!((status, text.as_str()), (204, ""));
    let (status, text) = post(
        gw.addr,
        r#"{"jsonrpc":"2.0","method":"eth_call","params":["n3"]}"#,
    )
    .await;
    assert_eq!((status, text.as_str()), (204, ""));
    // A denied notification gets no reply either.
    let (status, text) = post(gw.addr, r#"{"jsonrpc":"2.0","method":"admin_peers"}"#).await;
    assert_eq!((status, text.as_str()), (204, ""));
    // Notifications and an invalid entry mixed with calls: replies for the
    // calls and the invalid entry only, in request order.
    let r = call(
        gw.addr,
        r#"[{"jsonrpc":"2.0","method":"eth_call","params":["n4"]},{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["a"]},7,{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["b"]}]"#,
    )
    .await;
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(r[0]["result"]["ok"], json!(["a"]));
    assert_eq!(r[1]["error"]["code"], -32600);
    assert_eq!(r[2]["result"]["ok"], json!(["b"]));
    // The four notifications were forwarded (their replies dropped), as
    // were the two calls; the denied notification was not.
    let forwarded = || -> Vec<String> {
        let mut params: Vec<String> = log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v, _)| v["params"][0].as_str().unwrap_or("?").to_owned())
            .collect();
        params.sort();
        params
    };
    eventually("the notifications forwarded", || forwarded().len() >= 6).await;
    assert_eq!(forwarded(), ["a", "b", "n1", "n2", "n3", "n4"]);
    // Every entry denied or reserved: answered here, nothing forwarded.
    let sent = log.lock().unwrap().len();
    let r = call(
        gw.addr,
        r#"[{"jsonrpc":"2.0","id":1,"method":"admin_peers"},{"jsonrpc":"2.0","id":2,"method":"debug_x"},{"jsonrpc":"2.0","id":3,"method":"rpc.x"}]"#,
    )
    .await;
    let codes: Vec<_> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"]["code"].clone())
        .collect();
    assert_eq!(codes, [-32601, -32601, -32601], "{r:?}");
    // Past the batch limit: one -32600, nothing forwarded.
    let five = [r#"{"jsonrpc":"2.0","id":1,"method":"eth_call"}"#; 5].join(",");
    let r = call(gw.addr, &format!("[{five}]")).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // A call after them is the next the upstream sees: nothing of theirs
    // went before it.
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":9,"method":"eth_call","params":["after"]}"#,
    )
    .await;
    assert_eq!(r["result"]["ok"], json!(["after"]), "{r}");
    let log = log.lock().unwrap();
    assert_eq!(log.len(), sent + 1);
    assert_eq!(log[sent].1["params"][0], "after");
}

/// How the misbehaving upstream answers a call whose `params[0]` is the
/// mode; `"ok"` answers `{"ok": params}`.
fn misbehave() -> Script {
    Arc::new(|_, v| {
        let id = v["id"].as_u64().unwrap();
        let mode = v["params"][0].as_str().unwrap_or("ok").to_string();
        let ok = result_for(v, &format!(r#"{{"ok":{}}}"#, v["params"]));
        let w = |b: Vec<u8>| vec![Step::Write(b)];
        let chunked = |body: &str, size: usize, after: &str| {
            format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{size:x}\r\n{body}{after}0\r\n\r\n"
            )
            .into_bytes()
        };
        match mode.as_str() {
            "ok" => w(http("200 OK", &ok)),
            "array" => w(http("200 OK", &format!("[{ok}]"))),
            "both" => w(http(
                "200 OK",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":1,"error":{{"code":1,"message":"x"}}}}"#
                ),
            )),
            "v1" => w(http(
                "200 OK",
                &format!(r#"{{"jsonrpc":"1.0","id":{id},"result":1}}"#),
            )),
            "foreign" => w(http(
                "200 OK",
                &format!(r#"{{"jsonrpc":"2.0","id":{},"result":1}}"#, id + 1_000_000),
            )),
            "string-id" => w(http(
                "200 OK",
                &format!(r#"{{"jsonrpc":"2.0","id":"{id}","result":1}}"#),
            )),
            "huge" => w(http(
                "200 OK",
                &result_for(v, &format!("\"{}\"", "x".repeat(40_000))),
            )),
            "500-rpc" => w(http(
                "500 Internal Server Error",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32000,"message":"boom","data":[1]}}}}"#
                ),
            )),
            "500-text" => w(http("500 Internal Server Error", "oops")),
            "503-empty" => w(http("503 Service Unavailable", "")),
            "429-null-id" => w(http(
                "429 Too Many Requests",
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"rate limited"}}"#,
            )),
            "200-null-id" => w(http(
                "200 OK",
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}}"#,
            )),
            "200-null-id-result" => w(http(
                "200 OK",
                r#"{"jsonrpc":"2.0","id":null,"result":"0x1"}"#,
            )),
            "429-json" => w(http("429 Too Many Requests", r#"{"message":"slow down"}"#)),
            "502-array" => w(http("502 Bad Gateway", "[]")),
            "500-foreign" => w(http(
                "500 Internal Server Error",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":1,"message":"x"}}}}"#,
                    id + 1
                ),
            )),
            "cl-short" => {
                let mut b = http("200 OK", &ok);
                let at = length_at(&b);
                let digits = ok.len().to_string();
                let shorter = format!("{:0width$}", ok.len() - 3, width = digits.len());
                b.splice(at..at + digits.len(), shorter.bytes());
                w(b)
            }
            "cl-long-close" => {
                let mut b = http("200 OK", &ok);
                let at = length_at(&b);
                let digits = ok.len().to_string();
                b.splice(at..at + digits.len(), (ok.len() + 10).to_string().bytes());
                vec![Step::Write(b), Step::Close]
            }
            "cl-long-hang" => {
                let mut b = http("200 OK", &ok);
                let at = length_at(&b);
                let digits = ok.len().to_string();
                b.splice(at..at + digits.len(), (ok.len() + 10).to_string().bytes());
                vec![Step::Write(b), Step::Sleep(HANG_MS)]
            }
            "chunk-short" => vec![
                Step::Write(chunked(&ok, ok.len() - 2, "\r\n")),
                Step::Sleep(HANG_MS),
            ],
            "chunk-long" => vec![
                Step::Write(chunked(&ok, ok.len() + 5, "\r\n")),
                Step::Sleep(HANG_MS),
            ],
            "chunk-no-crlf" => w(chunked(&ok, ok.len(), "XX")),
            // Both framings, in either order: chunked rules (RFC 9112
            // 6.3), whatever the length says.
            "te-then-cl" | "cl-then-te" => {
                let mut b = chunked(&ok, ok.len(), "\r\n");
                let at = if mode == "te-then-cl" {
                    b.windows(4).position(|w| w == b"\r\n\r\n").unwrap()
                } else {
                    b.windows(2).position(|w| w == b"\r\n").unwrap()
                };
                b.splice(at..at, b"\r\ncontent-length: 7".iter().copied());
                w(b)
            }
            // Trailers after the last chunk.
            "chunk-trailer" => {
                let mut b = chunked(&ok, ok.len(), "\r\n");
                b.truncate(b.len() - 2);
                b.extend_from_slice(b"x-trailer: 1\r\n\r\n");
                w(b)
            }
            "interim-100" => {
                let mut b = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
                b.extend_from_slice(&http("200 OK", &ok));
                w(b)
            }
            "no-length-close" => vec![
                Step::Write(format!("HTTP/1.1 200 OK\r\n\r\n{ok}").into_bytes()),
                Step::Close,
            ],
            "204-keep" => w(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
            "304-keep" => w(b"HTTP/1.1 304 Not Modified\r\netag: x\r\n\r\n".to_vec()),
            "exotic" => w(http(
                "200 OK",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"a" : 1.0e+2, "b":"\u00e8\"", "c":[ -0 ]}} }}"#
                ),
            )),
            "exotic-error" => w(http(
                "200 OK",
                &format!(
                    r#"{{"jsonrpc":"2.0","error" : {{ "code" : -32000 , "message":"\u00e8", "data":[1.0] }},"id":{id}}}"#
                ),
            )),
            // Answered, then the connection reset (RST) a little later, as
            // a node restarting or a balancer dropping idle connections.
            "ok-then-rst" => vec![Step::Write(http("200 OK", &ok)), Step::Sleep(20), Step::Rst],
            "ok-then-close" => vec![
                Step::Write(http("200 OK", &ok)),
                Step::Sleep(20),
                Step::Close,
            ],
            "slow" => vec![
                Step::Sleep(v["params"][1].as_u64().unwrap_or(0)),
                Step::Write(http("200 OK", &ok)),
            ],
            // `close` in a token list; the upstream, draining, drops any
            // further request on the connection, then closes it.
            "close-in-list" => {
                let mut b = http("200 OK", &ok);
                b.splice(17..17, b"connection: keep-alive, Close\r\n".iter().copied());
                vec![Step::Write(b), Step::Sleep(600), Step::Close]
            }
            "no-reason" => w(
                format!("HTTP/1.1 200\r\ncontent-length: {}\r\n\r\n{ok}", ok.len()).into_bytes(),
            ),
            "bare-lf" => {
                w(format!("HTTP/1.1 200 OK\ncontent-length: {}\n\n{ok}", ok.len()).into_bytes())
            }
            "cl-twice" => w(format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {0}\r\ncontent-length: {0}\r\n\r\n{ok}",
                ok.len()
            )
            .into_bytes()),
            "cl-conflict" => w(format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-length: 3\r\n\r\n{ok}",
                ok.len()
            )
            .into_bytes()),
            // Lengths that are not digits only: a sign, a no-break space
            // (U+00A0) after the digits.
            "cl-plus" | "cl-nbsp" => {
                let mut b = http("200 OK", &ok);
                let at = length_at(&b);
                let (at, odd) = if mode == "cl-plus" {
                    (at, &b"+"[..])
                } else {
                    (at + ok.len().to_string().len(), "\u{a0}".as_bytes())
                };
                b.splice(at..at, odd.iter().copied());
                w(b)
            }
            "close-mid" => {
                let b = http("200 OK", &ok);
                vec![Step::Write(b[..b.len() - 5].to_vec()), Step::Close]
            }
            "late" => vec![
                Step::Sleep(HANG_MS - 1000),
                Step::Write(http("200 OK", &ok)),
            ],
            // A chunk-size line that never ends: 20 KB of extension, no
            // CR, then nothing.
            "chunk-line-endless" => vec![
                Step::Write(
                    format!(
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;{}",
                        "a".repeat(20_000)
                    )
                    .into_bytes(),
                ),
                Step::Sleep(HANG_MS),
            ],
            // A transfer coding besides (or instead of) chunked.
            "te-gzip-chunked" | "te-gzip" => {
                let coding = if mode == "te-gzip" {
                    "gzip"
                } else {
                    "gzip, chunked"
                };
                let b = chunked(&ok, ok.len(), "\r\n");
                let b = String::from_utf8(b).unwrap().replace("chunked", coding);
                vec![Step::Write(b.into_bytes()), Step::Sleep(HANG_MS)]
            }
            // Interim replies without end before the final one.
            "interim-flood" => {
                let mut b = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(1000);
                b.extend_from_slice(&http("200 OK", &ok));
                w(b)
            }
            // A length the upstream never sends (a terabyte), then nothing.
            "cl-huge-hang" => vec![
                Step::Write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000000\r\n\r\n{".to_vec()),
                Step::Sleep(HANG_MS),
            ],
            "head-only-close" => vec![
                Step::Write(b"HTTP/1.1 200 OK\r\ncontent-type: app".to_vec()),
                Step::Close,
            ],
            _ => w(http("200 OK", &ok)),
        }
    })
}

/// The modes that break the exchange's framing (the connection must not
/// be used again).
const BROKEN: &[&str] = &[
    "cl-short",
    "cl-conflict",
    "cl-plus",
    "cl-nbsp",
    "cl-long-close",
    "cl-long-hang",
    "chunk-short",
    "chunk-long",
    "chunk-no-crlf",
    "close-mid",
    "late",
    "head-only-close",
    "chunk-line-endless",
    "te-gzip-chunked",
    "te-gzip",
    "interim-flood",
    "cl-huge-hang",
];

/// Each entry of a split batch meets its own misbehaviour: each gets a
/// clear error of its own, the well-answered ones their answers, and the
/// pool goes on with no stale bytes served to a later call.
#[tokio::test]
async fn upstream_misbehaviour_fails_only_its_own_entry() {
    let mut wrong = Vec::new();
    for hyper_client in [false, true] {
        wrong.extend(misbehaviour(hyper_client).await);
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The entries not answered as they should be.
async fn misbehaviour(hyper_client: bool) -> Vec<String> {
    let (up, log) = scripted(misbehave()).await;
    let mut config = proxy_config(up, hyper_client);
    // Room for the whole batch's reply, not for a 40 KB result.
    config.max_response = 32 * 1024;
    let gw = start(config).await;
    // (mode, the error code expected, a piece of the error's text)
    let cases: &[(&str, i64, &str)] = &[
        ("ok", 0, ""),
        ("array", -32603, "a batch in reply"),
        ("both", -32603, "not a JSON-RPC response"),
        ("v1", -32603, "not a JSON-RPC response"),
        ("foreign", -32603, "answered id"),
        ("string-id", -32603, "answered id"),
        ("500-rpc", -32000, "boom"),
        ("500-text", -32603, "HTTP status 500"),
        ("503-empty", -32603, "HTTP status 503"),
        ("429-null-id", -32005, "rate limited"),
        ("200-null-id", -32600, "invalid request"),
        ("200-null-id-result", -32603, "answered id null"),
        ("429-json", -32603, "HTTP status 429"),
        ("cl-short", -32603, "not a JSON-RPC response"),
        ("chunk-no-crlf", -32603, "chunk|connection lost"),
        ("chunk-trailer", 0, ""),
        ("te-then-cl", 0, ""),
        ("interim-100", 0, ""),
        ("no-reason", 0, ""),
        ("bare-lf", 0, ""),
        ("cl-twice", 0, ""),
        ("cl-conflict", -32603, ""),
        ("cl-plus", -32603, ""),
        ("cl-nbsp", -32603, ""),
        ("no-length-close", 0, ""),
        ("204-keep", -32603, ""),
        ("cl-then-te", 0, ""),
        ("cl-long-close", -32603, "closed|connection lost"),
        ("cl-long-hang", -32002, ""),
        ("chunk-short", -32603, ""),
        ("chunk-long", -32002, ""),
        ("close-mid", -32603, "closed|connection lost"),
        ("late", -32002, ""),
        ("head-only-close", -32603, "closed"),
    ];
    let mut entries = Vec::new();
    for (i, (mode, _, _)) in cases.iter().enumerate() {
        entries.push(format!(
            r#"{{"jsonrpc":"2.0","id":"c{i}","method":"eth_call","params":["{mode}",{i}]}}"#
        ));
        entries.push(format!(
            r#"{{"jsonrpc":"2.0","id":"k{i}","method":"eth_call","params":["ok",{i}]}}"#
        ));
    }
    let (status, text) = post(gw.addr, &format!("[{}]", entries.join(","))).await;
    assert_eq!(status, 200, "{text}");
    let r: Value = serde_json::from_str(&text).unwrap();
    let r = r.as_array().unwrap_or_else(|| panic!("{text}"));
    assert_eq!(r.len(), entries.len(), "{text}");
    let mut wrong = Vec::new();
    for (i, (mode, code, piece)) in cases.iter().enumerate() {
        let (c, k) = (&r[2 * i], &r[2 * i + 1]);
        assert_eq!(c["id"], format!("c{i}"), "{text}");
        assert_eq!(k["id"], format!("k{i}"), "{text}");
        // The well-answered neighbour is unaffected.
        assert_eq!(k["result"]["ok"], json!(["ok", i]), "{mode}: {k}");
        let good = if *code == 0 {
            c["result"]["ok"] == json!([mode, i])
        } else {
            let text = c["error"].to_string();
            c["error"]["code"] == *code && piece.split('|').any(|p| text.contains(p))
        };
        if !good {
            wrong.push(format!("hyper {hyper_client}: {mode}: {c}"));
        }
    }
    // A result past --max-response (alone: in a batch, the entries decided
    // after it would get -32003 too, as the dispatcher documents).
    let r = call(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":"h","method":"eth_call","params":["huge"]}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32003, "hyper {hyper_client}: {r}");
    // The pool goes on: each later call gets its own answer, and none is
    // sent on a connection whose exchange broke.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for n in 0..(2 * cases.len()) {
        let r = call(
            gw.addr,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["ok","after{n}"]}}"#
            ),
        )
        .await;
        assert_eq!(
            r["result"]["ok"],
            json!(["ok", format!("after{n}")]),
            "hyper {hyper_client}: {r}"
        );
    }
    let log = log.lock().unwrap();
    for (at, (conn, v, _)) in log.iter().enumerate() {
        if let Some((_, before, _)) = log[..at].iter().rev().find(|(c, _, _)| c == conn) {
            let mode = before["params"][0].as_str().unwrap();
            assert!(
                !BROKEN.contains(&mode),
                "hyper {hyper_client}: {v} was sent on a connection after a broken {mode} exchange"
            );
        }
    }
    wrong
}

/// An upstream's error with `id: null` (the spec's answer when a server
/// cannot read the request's id, and what rate limiters send with 429)
/// answers the one call of its exchange: it passes through unchanged (it
/// was "upstream reply malformed: answered id null", the upstream's error
/// lost). A result with `id: null` is still refused.
#[tokio::test]
async fn an_error_with_id_null_passes_through() {
    for hyper_client in [false, true] {
        let (up, _) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        for (mode, error) in [
            ("429-null-id", r#"{"code":-32005,"message":"rate limited"}"#),
            (
                "200-null-id",
                r#"{"code":-32600,"message":"invalid request"}"#,
            ),
        ] {
            let (status, text) = post(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":7,"method":"eth_call","params":["{mode}"]}}"#),
            )
            .await;
            assert_eq!(status, 200);
            assert_eq!(
                text,
                format!(r#"{{"jsonrpc":"2.0","id":7,"error":{error}}}"#),
                "hyper {hyper_client}"
            );
        }
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":7,"method":"eth_call","params":["200-null-id-result"]}"#,
        )
        .await;
        assert_eq!(r["error"]["message"], "upstream reply malformed", "{r}");
    }
}

/// A failed HTTP status whose JSON body is no JSON-RPC response to the
/// call is "upstream unavailable" naming the status (it was "upstream
/// reply malformed: missing member 'jsonrpc'", the 429 lost); one that is
/// the call's error object still passes through.
#[tokio::test]
async fn a_failed_status_with_a_json_body_names_the_status() {
    for hyper_client in [false, true] {
        let (up, _) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        for (mode, status, reason) in [
            ("429-json", "429", "missing member"),
            ("502-array", "502", "not a JSON-RPC response"),
            ("500-foreign", "500", "answered id"),
        ] {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":7,"method":"eth_call","params":["{mode}"]}}"#),
            )
            .await;
            assert_eq!(r["error"]["code"], -32603, "hyper {hyper_client}: {r}");
            assert_eq!(r["error"]["message"], "upstream unavailable", "{r}");
            let text = r["error"]["data"]["reason"].as_str().unwrap();
            assert!(
                text.starts_with(&format!("HTTP status {status}")) && text.contains(reason),
                "hyper {hyper_client}: {r}"
            );
        }
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":7,"method":"eth_call","params":["500-rpc"]}"#,
        )
        .await;
        assert_eq!(r["error"]["message"], "boom", "{r}");
    }
}

/// A chunk whose data is not followed by CRLF (its size is wrong, or the
/// stream is not chunked as it says) is a bad reply, not read on as if
/// the two bytes were CRLF (the gateway's client skipped them unread and
/// took the reply).
#[tokio::test]
async fn a_chunk_not_ended_by_crlf_is_refused() {
    for hyper_client in [false, true] {
        let (up, log) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":7,"method":"eth_call","params":["chunk-no-crlf"]}"#,
        )
        .await;
        assert_eq!(r["error"]["code"], -32603, "hyper {hyper_client}: {r}");
        assert!(r["error"]["data"]["reason"].is_string(), "{r}");
        // The next call goes on a new connection and gets its own answer.
        assert_ok_call(gw.addr, "8", &format!("hyper {hyper_client}")).await;
        let log = log.lock().unwrap();
        assert_ne!(
            log[0].0, log[1].0,
            "hyper {hyper_client}: the connection was reused"
        );
    }
}

/// A reply with both `Transfer-Encoding: chunked` and `Content-Length` is
/// read as chunked (RFC 9112 6.3), whichever comes first (the gateway's
/// client took the later header, so a length after the encoding cut the
/// chunked stream at that length: "upstream reply malformed").
#[tokio::test]
async fn transfer_encoding_overrides_content_length() {
    for hyper_client in [false, true] {
        let (up, _) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        for (n, mode) in ["te-then-cl", "cl-then-te", "ok"].into_iter().enumerate() {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["{mode}"]}}"#),
            )
            .await;
            assert_eq!(
                r["result"]["ok"],
                json!([mode]),
                "hyper {hyper_client}: {r}"
            );
        }
    }
}

/// Params go upstream byte for byte (spaces, escapes, number forms), a
/// method name with escapes goes as the same string, and the upstream's
/// result and error object come back byte for byte.
#[tokio::test]
async fn bytes_pass_through_unchanged() {
    for hyper_client in [false, true] {
        let (up, log) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        let params = r#"["exotic" , 1.0, -0, 1E+2, "\u00e8\"è", {"k" : [ ]}]"#;
        let (_, text) = post(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":{params}}}"#),
        )
        .await;
        assert_eq!(
            text,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a" : 1.0e+2, "b":"\u00e8\"", "c":[ -0 ]}}"#
        );
        let (_, text) = post(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":2,"method":"my_\u006dethod\"è","params":["exotic-error"]}"#,
        )
        .await;
        assert_eq!(
            text,
            r#"{"jsonrpc":"2.0","id":2,"error":{ "code" : -32000 , "message":"\u00e8", "data":[1.0] }}"#
        );
        let log = log.lock().unwrap();
        let sent = String::from_utf8(log[0].2.clone()).unwrap();
        assert!(
            sent.ends_with(&format!(r#","params":{params}}}"#)),
            "{sent}"
        );
        assert_eq!(log[1].1["method"], "my_method\"è");
    }
}

/// The reply to `v` (request `n` of a [`sized_script`] upstream): its
/// status and body, whose length is `params[0]`, padded with a letter of
/// its own; `params[1]` is the shape: a result, or an error object with a
/// 200 or a 500.
fn sized_reply(n: usize, v: &Value) -> (&'static str, String) {
    let len = v["params"][0].as_u64().unwrap() as usize;
    let shape = v["params"][1].as_str().unwrap();
    let id = &v["id"];
    let frame = |pad: &str| match shape {
        "result" => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"{pad}"}}"#),
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32000,"message":"m","data":"{pad}"}}}}"#
        ),
    };
    let letter = (b'a' + (n % 26) as u8) as char;
    let body = frame(&letter.to_string().repeat(len - frame("").len()));
    let status = if shape == "error-500" {
        "500 Internal Server Error"
    } else {
        "200 OK"
    };
    (status, body)
}

/// Answers every call with its [`sized_reply`].
fn sized_script() -> Script {
    Arc::new(|n, v| {
        let (status, body) = sized_reply(n, v);
        vec![Step::Write(http(status, &body))]
    })
}

/// Replies either side of the size the gateway's client reads in place
/// (16 KiB of body; larger ones are split off its buffer), results and
/// error objects, with a 2xx and a failed status, come back byte for byte
/// one after another on one pooled connection; and each request, built in
/// that connection's buffer, goes out whole and alone, a short one after a
/// long one included (no bytes left from the request or reply before),
/// and a request too large for the buffer to be kept with the idle
/// connection.
#[tokio::test]
async fn replies_around_the_in_place_size_and_requests_in_a_reused_buffer() {
    const SMALL: usize = 16 * 1024;
    for hyper_client in [false, true] {
        let (up, log) = scripted(sized_script()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        let mut n = 0;
        for (len, request_pad) in [
            (200, 3000),
            (SMALL, 0),
            (SMALL + 1, 5000),
            (40_000, 10),
            (300, 0),
            (SMALL - 1, 2000),
            // A request past what a pooled connection's buffer keeps.
            (300, 100_000),
            (250, 1),
        ] {
            for shape in ["result", "error", "error-500"] {
                let params = format!(r#"[{len},"{shape}","{}"]"#, "p".repeat(request_pad));
                let (status, text) = post(
                    gw.addr,
                    &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"sized","params":{params}}}"#),
                )
                .await;
                assert_eq!(status, 200, "{text}");
                let (v, raw) = {
                    let log = log.lock().unwrap();
                    (log[n].1.clone(), log[n].2.clone())
                };
                let sent = format!(
                    r#"{{"jsonrpc":"2.0","id":{},"method":"sized","params":{params}}}"#,
                    v["id"]
                );
                assert!(
                    raw == sent.as_bytes(),
                    "hyper {hyper_client}, call {n}: sent {:?}",
                    String::from_utf8_lossy(&raw[..raw.len().min(120)])
                );
                // The upstream's result or error object, byte for byte,
                // under the client's id.
                let (_, body) = sized_reply(n, &v);
                let member = if shape == "result" { "result" } else { "error" };
                let (_, inner) = body.split_once(&format!(r#""{member}":"#)).unwrap();
                let expected = format!(r#"{{"jsonrpc":"2.0","id":{n},"{member}":{inner}"#);
                assert!(
                    text == expected,
                    "hyper {hyper_client}, {len} bytes, {shape}: got {} bytes: {}",
                    text.len(),
                    &text[..text.len().min(120)]
                );
                n += 1;
            }
        }
        if !hyper_client {
            let log = log.lock().unwrap();
            assert!(
                log.iter().all(|(conn, _, _)| *conn == log[0].0),
                "the pooled connection was not reused throughout"
            );
        }
    }
}

/// A 204 or 304 reply has no body (RFC 9112 6.3): the call gets a clear
/// error at once, and the connection, whose reply ended with its head,
/// goes on (the gateway's client read on until the connection closed, so
/// that the call waited out the timeout: -32002 and the upstream rested).
#[tokio::test]
async fn a_reply_without_a_body_by_its_status_is_not_waited_on() {
    for hyper_client in [false, true] {
        let (up, _) = scripted(misbehave()).await;
        let mut config = proxy_config(up, hyper_client);
        config.timeout = Duration::from_secs(5);
        let gw = start(config).await;
        for (n, mode) in ["204-keep", "304-keep"].into_iter().enumerate() {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["{mode}"]}}"#),
            )
            .await;
            assert_eq!(r["error"]["code"], -32603, "hyper {hyper_client}: {r}");
        }
        assert_ok_call(gw.addr, "9", &format!("hyper {hyper_client}")).await;
    }
}

/// A pooled connection the upstream closed or reset while it sat idle is
/// not used: the next call gets its own answer, for both clients.
#[tokio::test]
async fn an_idle_connection_closed_or_reset_upstream_is_not_used() {
    for hyper_client in [false, true] {
        for mode in ["ok-then-rst", "ok-then-close"] {
            let (up, log) = scripted(misbehave()).await;
            let gw = start(proxy_config(up, hyper_client)).await;
            for n in 0..4 {
                let r = call(
                    gw.addr,
                    &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["{mode}",{n}]}}"#),
                )
                .await;
                assert_eq!(
                    r["result"]["ok"],
                    json!([mode, n]),
                    "hyper {hyper_client}: {r}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(log.lock().unwrap().len(), 4);
        }
    }
}

/// Many clients at once, each a batch of calls that finish out of order
/// next to calls whose exchange breaks: each gets its own answers in its
/// order, the upstream never sees one id twice, and no call goes on a
/// connection whose exchange broke.
#[tokio::test]
async fn many_clients_at_once_with_breaking_neighbours() {
    for hyper_client in [false, true] {
        let (up, log) = scripted(misbehave()).await;
        let gw = start(proxy_config(up, hyper_client)).await;
        let mut tasks = Vec::new();
        // 32 clients, 96 calls at once: each a connection of its own
        // upstream, within the fake's accept queue (128) while this one
        // thread is busy (past it, connects wait out a SYN retry).
        for client in 0..32u64 {
            let addr = gw.addr;
            tasks.push(tokio::spawn(async move {
                let broken = ["cl-short", "close-mid", "chunk-no-crlf", "late"][client as usize % 4];
                let body = format!(
                    r#"[{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["slow",{},{client}]}},
                        {{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["{broken}",{client}]}},
                        {{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["slow",0,{client}]}}]"#,
                    (client * 7) % 50
                );
                let r = call(addr, &body).await;
                assert_eq!(r[0]["result"]["ok"], json!(["slow", (client * 7) % 50, client]), "{r}");
                assert!(r[1]["error"]["code"].is_i64(), "{broken}: {r}");
                assert_eq!(r[2]["result"]["ok"], json!(["slow", 0, client]), "{r}");
                // Then a call alone on the pool that is left.
                let r = call(
                    addr,
                    &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["ok",{client}]}}"#),
                )
                .await;
                assert_eq!(r["result"]["ok"], json!(["ok", client]), "{r}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let log = log.lock().unwrap();
        let ids: HashSet<u64> = log
            .iter()
            .map(|(_, v, _)| v["id"].as_u64().unwrap())
            .collect();
        assert_eq!(
            ids.len(),
            log.len(),
            "hyper {hyper_client}: an id went upstream twice"
        );
        for (at, (conn, v, _)) in log.iter().enumerate() {
            if let Some((_, before, _)) = log[..at].iter().rev().find(|(c, _, _)| c == conn) {
                let mode = before["params"][0].as_str().unwrap();
                assert!(
                    !BROKEN.contains(&mode),
                    "hyper {hyper_client}: {v} was sent on a connection after a broken {mode} exchange"
                );
            }
        }
    }
}

/// Requests pipelined on one client connection are answered in their
/// order, the first waiting on a slow upstream call.
#[tokio::test]
async fn pipelined_client_requests_are_answered_in_order() {
    let (up, _) = scripted(misbehave()).await;
    let gw = start(proxy_config(up, false)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let mut all = String::new();
    for (n, delay) in [(0, 200), (1, 0), (2, 50)] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["slow",{delay}]}}"#
        );
        all.push_str(&format!(
            "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if n == 2 { "connection: close\r\n" } else { "" }
        ));
    }
    stream.write_all(all.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let at: Vec<usize> = (0..3)
        .map(|n| {
            text.find(&format!(r#""id":{n},"result""#))
                .unwrap_or_else(|| panic!("{text}"))
        })
        .collect();
    assert!(at[0] < at[1] && at[1] < at[2], "{text}");
}

/// `Connection: keep-alive, close` (a token list, RFC 9110 7.6.1) closes
/// the connection as `Connection: close` does: the next call goes on a
/// new one (the gateway's client compared the whole value with "close",
/// pooled the connection, and sent the next call on it to an upstream
/// that had said it was done: that call failed).
#[tokio::test]
async fn connection_close_in_a_token_list_is_honoured() {
    for hyper_client in [false, true] {
        let (up, log) = scripted(misbehave()).await;
        let mut config = proxy_config(up, hyper_client);
        config.timeout = Duration::from_secs(3);
        let gw = start(config).await;
        for n in 0..2 {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["close-in-list",{n}]}}"#),
            )
            .await;
            assert_eq!(
                r["result"]["ok"],
                json!(["close-in-list", n]),
                "hyper {hyper_client}: {r}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = log.lock().unwrap();
        assert_ne!(log[0].0, log[1].0, "hyper {hyper_client}");
    }
}

/// A denied method spelled with escapes is denied as well (the name is
/// matched decoded).
#[tokio::test]
async fn a_denied_method_spelled_with_escapes_is_denied() {
    let (up, log) = scripted(misbehave()).await;
    let gw = start(proxy_config(up, false)).await;
    for method in [
        r#"\u0061dmin_peers"#,
        r#"admin\u005fpeers"#,
        r#"debug_\u0074raceCall"#,
        r#"personal_x\u00e8"#,
    ] {
        let r = call(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#),
        )
        .await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
    }
    assert!(log.lock().unwrap().is_empty());
}

/// `--max-response` and `--max-body` as large as they go (no limit, in
/// effect) serve calls (the reply limit plus the envelope's room once
/// overflowed: a panic at start in a debug build, every reply past 1023
/// bytes refused as too large in a release build).
#[tokio::test]
async fn the_largest_limits_mean_no_limit() {
    for hyper_client in [false, true] {
        let (up, _) = scripted(misbehave()).await;
        let mut args = vec![
            "--upstream".to_string(),
            format!("http://{up}"),
            "--max-response".into(),
            u64::MAX.to_string(),
            "--max-body".into(),
            u64::MAX.to_string(),
            "--timeout".into(),
            "400".into(),
        ];
        if hyper_client {
            args.extend(["--client".into(), "hyper".into()]);
        }
        let config = config::Config::from_args(args.into_iter()).unwrap();
        let gw = start(config).await;
        let long = "z".repeat(4000);
        let r = call(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["ok","{long}"]}}"#),
        )
        .await;
        assert_eq!(
            r["result"]["ok"],
            json!(["ok", long]),
            "hyper {hyper_client}: {r}"
        );
        // A reply head claiming a terabyte (within "no limit"), then
        // nothing: the call times out, and the gateway goes on (its own
        // client once reserved the whole length before any byte came, and
        // the failed allocation aborted the process).
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":2,"method":"eth_call","params":["cl-huge-hang"]}"#,
        )
        .await;
        assert_eq!(r["error"]["code"], -32002, "hyper {hyper_client}: {r}");
        assert_ok_call(gw.addr, "3", &format!("hyper {hyper_client}")).await;
    }
}

/// Replies the gateway's own client cannot read are refused as soon as
/// that is known, not waited on until the call's timeout (1.5 s here):
/// a chunk-size line that never ends (it was buffered without bound), a
/// transfer coding other than chunked (`gzip, chunked` was read to the
/// close; hyper's client reads the chunks and hands the coded body on),
/// interim replies without end. Each connection is dropped, and the pool
/// goes on.
#[tokio::test]
async fn unreadable_framing_is_refused_at_once() {
    let (up, log) = scripted(misbehave()).await;
    let gw = start(proxy_config(up, false)).await;
    for (n, (mode, piece)) in [
        ("chunk-line-endless", "chunk-size line longer than 4096"),
        ("te-gzip-chunked", "Transfer-Encoding other than chunked"),
        ("te-gzip", "Transfer-Encoding other than chunked"),
        ("interim-flood", "more than 32 interim"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = call(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_call","params":["{mode}"]}}"#),
        )
        .await;
        assert_eq!(r["error"]["code"], -32603, "{mode}: {r}");
        assert!(r["error"].to_string().contains(piece), "{mode}: {r}");
        assert_ok_call(gw.addr, &format!(r#""k{n}""#), &format!("after {mode}")).await;
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 8);
    for pair in log.chunks(2) {
        let (bad, next) = (&pair[0], &pair[1]);
        assert_ne!(bad.0, next.0, "reused after {}", bad.1);
    }
}

/// An IPv6 literal upstream without a port (`http://[::1]/`) is port 80,
/// as `http://host/` is (the gateway's client took the colons inside the
/// brackets for a port: "connection failed: invalid port value", without
/// trying to connect). Nothing is expected to listen on [::1]:80 here:
/// the call fails either way; what matters is why.
#[tokio::test]
async fn an_ipv6_upstream_without_a_port_is_port_80() {
    for hyper_client in [false, true] {
        let mut config = proxy_config("127.0.0.1:1".parse().unwrap(), hyper_client);
        config.upstreams = vec!["http://[::1]/".into()];
        let gw = start(config).await;
        let r = call(
            gw.addr,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["ok"]}"#,
        )
        .await;
        let reason = r["error"]["data"]["reason"].to_string();
        assert!(!reason.contains("invalid"), "hyper {hyper_client}: {r}");
        // With a port, served (where this host has IPv6 loopback).
        let Ok(listener) = TcpListener::bind("[::1]:0").await else {
            continue;
        };
        let (up, _) = scripted_on(listener, misbehave());
        let gw = start(proxy_config(up, hyper_client)).await;
        assert_ok_call(gw.addr, "1", &format!("hyper {hyper_client}")).await;
    }
}

/// `eth_chainId` and `net_version` are answered locally only without
/// params (or with an empty array): `[[]]` or `[ [ ] ]` are params, the
/// upstream's to judge (they were taken for "no params", being made of
/// brackets and spaces only).
#[tokio::test]
async fn cached_methods_forward_calls_with_params() {
    let (up, log) = scripted(misbehave()).await;
    let gw = start(proxy_config(up, false)).await;
    for method in ["eth_chainId", "net_version"] {
        for params in ["", r#","params":[]"#, r#","params":[ ]"#] {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#),
            )
            .await;
            assert!(
                r["result"]["ok"].is_null() || r["result"]["ok"] == json!([]),
                "{r}"
            );
        }
        let before = log.lock().unwrap().len();
        for params in ["[[]]", "[ [ ] ]", "[[[]]]"] {
            let r = call(
                gw.addr,
                &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#),
            )
            .await;
            let sent: Value = serde_json::from_str(params).unwrap();
            assert_eq!(r["result"]["ok"], sent, "{method} {params}: {r}");
        }
        assert_eq!(log.lock().unwrap().len(), before + 3);
    }
}

/// A client batch is split into one call per entry, each an HTTP exchange
/// on a connection of its own: a batch of 1000 opened 1000 connections to
/// the upstream at once. `--upstream-connections` caps the exchanges in
/// flight per upstream; the rest wait their turn and every entry is
/// answered.
#[tokio::test]
async fn exchanges_in_flight_per_upstream_are_capped() {
    let script: Script = Arc::new(|_, v| {
        vec![
            Step::Sleep(20),
            Step::Write(http("200 OK", &result_for(v, "\"0x1\""))),
        ]
    });
    for hyper_client in [false, true] {
        let (upstream, log) = scripted(Arc::clone(&script)).await;
        let gw = start(config::Config {
            upstream_connections: 4,
            timeout: Duration::from_secs(30),
            ..proxy_config(upstream, hyper_client)
        })
        .await;
        let batch: Vec<String> = (0..40)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_blockNumber"}}"#))
            .collect();
        let replies = call(gw.addr, &format!("[{}]", batch.join(","))).await;
        let replies = replies.as_array().unwrap();
        assert_eq!(replies.len(), 40);
        for (i, r) in replies.iter().enumerate() {
            assert_eq!(r["id"], i, "{r}");
            assert_eq!(r["result"], "0x1", "{r}");
        }
        let connections: std::collections::BTreeSet<usize> =
            log.lock().unwrap().iter().map(|(c, _, _)| *c).collect();
        assert!(
            connections.len() <= 4,
            "hyper {hyper_client}: {} upstream connections",
            connections.len()
        );
    }
}

/// Without `--cors` no page may open a WebSocket (browsers do not
/// preflight upgrades, and the HTTP side refuses their preflights): every
/// page's upgrade was taken, so any page the user visited could call the
/// gateway over `ws://127.0.0.1:8545` (found by a review). Programs, which
/// send no `Origin`, are served.
#[tokio::test]
async fn without_cors_no_page_opens_a_websocket() {
    let gw = start(config::Config::from_args(std::iter::empty()).unwrap()).await;
    for origin in [
        Some("http://localhost:5173"),
        Some("https://evil.example"),
        None,
    ] {
        let mut raw = String::from(
            "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        );
        if let Some(origin) = origin {
            raw.push_str(&format!("origin: {origin}\r\n"));
        }
        raw.push_str("\r\n");
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head))
            .await
            .expect("answered")
            .unwrap();
        let want: &[u8] = if origin.is_some() {
            b"HTTP/1.1 403"
        } else {
            b"HTTP/1.1 101"
        };
        assert_eq!(&head[..], want, "{origin:?}");
    }
}

/// `--cors`: a dapp's page of a listed origin may call the gateway from a
/// browser (preflight answered, `Access-Control-Allow-Origin` on the
/// answer, its WebSocket upgrade accepted); other pages get 403; clients
/// without `Origin` are served as ever; an option that names no origin is
/// refused at start.
#[tokio::test]
async fn browsers_are_served_as_cors_says() {
    const APP: &str = "http://localhost:5173";
    let args = ["--cors", APP, "--cors", "https://app.example.org"];
    let config = config::Config::from_args(args.iter().map(|s| s.to_string())).unwrap();
    let gw = start(config).await;
    let exchange = |raw: String| async move {
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        // One response: its head, then the body its `content-length` says.
        let mut got = Vec::new();
        let whole = |got: &[u8]| {
            let text = String::from_utf8_lossy(got).to_ascii_lowercase();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                return false;
            };
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse().unwrap());
            body.len() >= length
        };
        let mut buf = [0u8; 4096];
        while !whole(&got) {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
                .await
                .expect("answered")
                .unwrap();
            assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap().to_ascii_lowercase()
    };
    let preflight = format!(
        "OPTIONS / HTTP/1.1\r\nhost: localhost\r\norigin: {APP}\r\naccess-control-request-method: POST\r\n\
         access-control-request-headers: content-type\r\nconnection: close\r\n\r\n"
    );
    let text = exchange(preflight.clone()).await;
    assert!(text.starts_with("http/1.1 204"), "{text}");
    assert!(
        text.contains(&format!("access-control-allow-origin: {APP}\r\n")),
        "{text}"
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let post_from = |origin: &str| {
        format!(
            "POST / HTTP/1.1\r\nhost: localhost\r\norigin: {origin}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let text = exchange(post_from(APP)).await;
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(
        text.contains(&format!("access-control-allow-origin: {APP}\r\n")),
        "{text}"
    );
    assert!(text.ends_with(r#""result":"0x7a69"}"#), "{text}");
    // Another page's preflight is refused; its call (an extension's)
    // answered without the header.
    let text = exchange(preflight.replace(APP, "https://evil.example")).await;
    assert!(text.starts_with("http/1.1 403"), "{text}");
    assert!(text.contains("origin not allowed"), "{text}");
    let text = exchange(post_from("https://evil.example")).await;
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(!text.contains("access-control-allow-origin"), "{text}");
    let upgrade = |origin: &str| {
        format!(
            "GET / HTTP/1.1\r\nhost: localhost\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             origin: {origin}\r\n\r\n"
        )
    };
    let mut ws = TcpStream::connect(gw.addr).await.unwrap();
    ws.write_all(upgrade(APP).as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), ws.read_exact(&mut head))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
    let text = exchange(upgrade("https://evil.example")).await;
    assert!(text.starts_with("http/1.1 403"), "{text}");
    // No `Origin`: as without the option.
    let (status, body) = post(
        gw.addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let refused =
        config::Config::from_args(["--cors", "app.example.org"].iter().map(|s| s.to_string()));
    assert!(refused.unwrap_err().contains("--cors: not a web origin"));
}

/// Flags whose values could only fail later are refused at once: an
/// `--upstream-ws` that is not `ws://` (every subscription then failed at
/// run time), and limits of 0 (every request, batch or reply refused).
/// Found by a review.
#[test]
fn flags_that_could_only_fail_later_are_refused() {
    let parse = |args: &[&str]| config::Config::from_args(args.iter().map(|s| s.to_string()));
    let e = parse(&["--upstream-ws", "http://127.0.0.1:8546"]).unwrap_err();
    assert!(
        e.contains("--upstream-ws http://127.0.0.1:8546: a ws:// URL"),
        "{e}"
    );
    for flag in ["--max-body", "--max-batch", "--max-response"] {
        let e = parse(&[flag, "0"]).unwrap_err();
        assert!(e.starts_with(&format!("{flag}: at least 1")), "{e}");
        assert!(parse(&[flag, "1"]).is_ok(), "{flag}");
    }
    assert!(parse(&["--upstream-ws", "ws://127.0.0.1:8546"]).is_ok());
}

/// A refused upstream URL is named in the start-up error by its scheme and
/// `host:port` alone: a provider's path or query holds the API key
/// (`/v3/<key>`), user info a password, and the error goes to the
/// operator's logs (it quoted the URL whole; found by a review).
#[test]
fn start_up_errors_name_upstreams_without_their_secrets() {
    let parse = |args: &[&str]| config::Config::from_args(args.iter().map(|s| s.to_string()));
    for (args, shown) in [
        (
            &["--upstream", "https://mainnet.example/v3/SECRETKEY"][..],
            "https://mainnet.example…",
        ),
        (
            &["--upstream-ws", "wss://node.example:8546?key=SECRETKEY"],
            "wss://node.example:8546…",
        ),
        (
            &["--archive", "https://archive.example/SECRETKEY"],
            "https://archive.example…",
        ),
        (
            &["--upstream", "http://user:SECRETKEY@node.example:8545"],
            "http://node.example:8545…",
        ),
        (
            &["--upstream", "http://node.example:99999/SECRETKEY"],
            "http://node.example:99999…",
        ),
    ] {
        let e = parse(args).unwrap_err();
        assert!(!e.contains("SECRETKEY"), "{e}");
        assert!(e.contains(shown), "{shown}: {e}");
    }
    // Nothing to hide: the URL as given.
    let e = parse(&["--upstream", "https://node.example:8545"]).unwrap_err();
    assert!(e.contains("https://node.example:8545:"), "{e}");
}

/// `--gzip BYTES`: a long answer (a batch of balances) comes compressed to
/// a client that accepts gzip and as it is to one that does not; a short
/// one is never compressed.
#[tokio::test]
async fn long_answers_are_gzipped_for_clients_that_accept_it() {
    use std::io::Read as _;
    let args = ["--gzip", "512", "--max-batch", "2000"];
    let config = config::Config::from_args(args.iter().map(|s| s.to_string())).unwrap();
    let gw = start(config).await;
    let batch: Vec<Value> = (0..50)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance",
                   "params": [format!("0x{:040x}", i + 1), "latest"]})
        })
        .collect();
    let batch = serde_json::to_string(&batch).unwrap();
    let short = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    // Head (lowercased, `date` left out) and body bytes of one answer.
    let exchange = |body: String, accept: &'static str| async move {
        let raw = format!(
            "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n{accept}\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let got = send_until_closed(gw.addr, &raw).await;
        let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(got[..split].to_vec())
            .unwrap()
            .to_ascii_lowercase();
        (head, got[split + 4..].to_vec())
    };
    let (head, body) = exchange(batch.clone(), "accept-encoding: gzip, deflate\r\n").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut text)
        .expect("a gzip body");
    assert!(body.len() < text.len(), "{} -> {}", text.len(), body.len());
    let answers: Vec<Value> = serde_json::from_slice(&text).unwrap();
    assert_eq!(answers.len(), 50);
    assert!(
        answers.iter().all(|a| a["result"].is_string()),
        "{answers:?}"
    );
    let (head, body) = exchange(batch, "").await;
    assert!(!head.contains("content-encoding"), "{head}");
    let plain: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(plain, answers);
    let (head, body) = exchange(short.to_string(), "accept-encoding: gzip\r\n").await;
    assert!(!head.contains("content-encoding"), "{head}");
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["id"], 1);

    // An answer of more than 64 KiB, which is compressed on tokio's
    // blocking pool rather than on the gateway's runtime thread: the same
    // head, and it decodes to exactly the plain answer.
    let large: Vec<Value> = (0..2000)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance",
                   "params": [format!("0x{:040x}", i + 1), "latest"]})
        })
        .collect();
    let large = serde_json::to_string(&large).unwrap();
    let (head, body) = exchange(large.clone(), "accept-encoding: gzip\r\n").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut text)
        .expect("a gzip body");
    assert!(text.len() > 64 * 1024, "{} bytes", text.len());
    let (plain_head, plain) = exchange(large, "").await;
    assert!(!plain_head.contains("content-encoding"), "{plain_head}");
    assert!(
        text == plain,
        "the decoded answer differs from the plain one"
    );
    let answers: Vec<Value> = serde_json::from_slice(&text).unwrap();
    assert_eq!(answers.len(), 2000);
    assert!(
        answers.iter().all(|a| a["result"].is_string()),
        "{:?}",
        answers.iter().find(|a| !a["result"].is_string())
    );
}

/// `--vhosts`: by default the port answers to `localhost` and the
/// loopback addresses only (a rebound page's `Host: attacker.example` gets
/// 403, its WebSocket upgrade too); `--vhosts '*'` answers to any; a list
/// naming a port is refused at start.
#[tokio::test]
async fn hosts_are_served_as_vhosts_says() {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let ask = |addr: SocketAddr, raw: String| async move {
        let got = send_until_closed(addr, &raw).await;
        String::from_utf8(got).unwrap().to_ascii_lowercase()
    };
    let post = |host: &str| {
        format!(
            "POST / HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let upgrade = |host: &str| {
        format!(
            "GET / HTTP/1.1\r\nhost: {host}\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
    };
    let args = |a: &[&str]| config::Config::from_args(a.iter().map(|s| s.to_string()));
    let gw = start(args(&[]).unwrap()).await;
    let local = format!("localhost:{}", gw.addr.port());
    let text = ask(gw.addr, post("attacker.example")).await;
    assert!(text.starts_with("http/1.1 403"), "{text}");
    assert!(text.contains("host not allowed"), "{text}");
    let text = ask(gw.addr, upgrade("attacker.example")).await;
    assert!(text.starts_with("http/1.1 403"), "{text}");
    for host in [local.as_str(), "127.0.0.1", "[::1]:8545", "192.0.2.7"] {
        let text = ask(gw.addr, post(host)).await;
        assert!(text.starts_with("http/1.1 200"), "{host}: {text}");
        assert!(text.ends_with(r#""result":"0x7a69"}"#), "{text}");
    }
    let any = start(args(&["--vhosts", "*"]).unwrap()).await;
    for host in ["attacker.example", local.as_str()] {
        let text = ask(any.addr, post(host)).await;
        assert!(text.starts_with("http/1.1 200"), "{host}: {text}");
    }
    let listed = start(args(&["--vhosts", "node.example.org,localhost"]).unwrap()).await;
    let text = ask(listed.addr, post("NODE.example.org:443")).await;
    assert!(text.starts_with("http/1.1 200"), "{text}");
    let text = ask(listed.addr, post("other.example.org")).await;
    assert!(text.starts_with("http/1.1 403"), "{text}");
    let text = ask(listed.addr, post("127.0.0.1")).await;
    assert!(text.starts_with("http/1.1 200"), "{text}");
    let refused = args(&["--vhosts", "localhost:8545"]);
    assert!(refused.unwrap_err().contains("--vhosts: not a host name"));
    assert!(config::USAGE.contains("--vhosts LIST"));
}

/// Writes `raw` on a new connection to `addr` and reads until the server
/// closes it (a hang guard of ten seconds, never a measurement).
async fn send_until_closed(addr: SocketAddr, raw: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got))
        .await
        .expect("answered")
        .unwrap();
    got
}

// The client's reply heads: the plain reader against httparse.

/// Reply heads as nodes and the proxies in front of them write them:
/// anvil and reth (hyper), geth (net/http), nginx with a chunked body,
/// a load balancer's 503 that closes, a 204.
const REPLY_HEADS: [&str; 6] = [
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nvary: origin, access-control-request-method, access-control-request-headers\r\naccess-control-allow-origin: *\r\ncontent-length: 39\r\ndate: Wed, 02 Dec 2026 17:13:03 GMT\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nVary: Origin\r\nDate: Wed, 02 Dec 2026 17:13:03 GMT\r\nContent-Length: 39\r\n\r\n",
    "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\nDate: Wed, 02 Dec 2026 17:13:03 GMT\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
    "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 19\r\nconnection: close\r\ncontent-type: text/plain\r\n\r\n",
    "HTTP/1.1 204 No Content\r\nDate: Wed, 02 Dec 2026 17:13:03 GMT\r\n\r\n",
    "HTTP/1.1 200 OK\r\ncontent-length: 39\r\nContent-Length: 39\r\nconnection: keep-alive, Close\r\n\r\n",
];

fn head_outcome(head: Result<Option<h1::Head>, h1::Exchange>) -> String {
    match head {
        Ok(Some(h)) => format!("{} {} {:?} {}", h.status, h.len, h.framing, h.close),
        Ok(None) => "partial".into(),
        Err(h1::Exchange::Failed(e)) => format!("{e:?}"),
        Err(h1::Exchange::Stale) => "stale".into(),
    }
}

/// A reply head's status, length and fields.
type HeadReading = Option<(u16, usize, Vec<(Vec<u8>, Vec<u8>)>)>;

/// httparse's reading of a complete `HTTP/1.1` head.
fn httparse_head_reading(buf: &[u8]) -> HeadReading {
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; h1::MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let Ok(httparse::Status::Complete(len)) = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut response, buf, &mut headers)
    else {
        return None;
    };
    let fields = response.headers.iter();
    let fields = fields.map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec()));
    let code = response.code.filter(|_| response.version == Some(1))?;
    Some((code, len, fields.collect()))
}

/// Whatever the plain reader takes, httparse reads alike, and the two
/// paths decide alike on everything.
fn check_head(buf: &[u8]) -> bool {
    let mut fields = Vec::new();
    let plain = h1::read_plain_head(buf, |n, v| fields.push((n.to_vec(), v.to_vec())));
    let text = String::from_utf8_lossy(buf);
    if let Some((status, len)) = plain {
        assert_eq!(
            Some((status, len, fields)),
            httparse_head_reading(buf),
            "{text:?}"
        );
    }
    assert_eq!(
        head_outcome(h1::parse_head(buf)),
        head_outcome(h1::parse_head_httparse(buf)),
        "{text:?}"
    );
    plain.is_some()
}

#[test]
fn reply_heads_are_read_as_httparse_reads_them() {
    let mut taken = 0;
    for head in REPLY_HEADS {
        let head = head.as_bytes();
        assert!(check_head(head));
        let mut with_body = head.to_vec();
        with_body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0x0\"}");
        assert!(check_head(&with_body));
        for at in 0..head.len() {
            for b in 0..=255u8 {
                let mut replaced = head.to_vec();
                replaced[at] = b;
                taken += usize::from(check_head(&replaced));
                let mut inserted = head.to_vec();
                inserted.insert(at, b);
                taken += usize::from(check_head(&inserted));
            }
            let mut removed = head.to_vec();
            removed.remove(at);
            check_head(&removed);
            assert!(!check_head(&head[..at]), "{at}");
        }
    }
    assert!(taken > 50_000, "{taken}");
}

#[test]
fn reply_heads_of_other_shapes_are_left_to_httparse() {
    for other in [
        "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n",
        "HTTP/1.1 200\r\ncontent-length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\ncontent-length: 2\n\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 2 \r\n\r\n",
        "HTTP/1.1 200 OK\r\nx-empty:\r\ncontent-length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nx-a: a\r\n b\r\ncontent-length: 2\r\n\r\n",
        "HTTP/1.1 200 Gr\u{fc}\u{df}e\r\ncontent-length: 2\r\n\r\n",
        "HTTP/1.1 2000 OK\r\ncontent-length: 2\r\n\r\n",
    ] {
        assert_eq!(
            h1::read_plain_head(other.as_bytes(), |_, _| {}),
            None,
            "{other:?}"
        );
        check_head(other.as_bytes());
    }
    let mut many = String::from("HTTP/1.1 200 OK\r\n");
    for i in 0..h1::MAX_HEADERS {
        many += &format!("x-{i}: {i}\r\n");
    }
    assert!(check_head(format!("{many}\r\n").as_bytes()));
    assert_eq!(
        h1::read_plain_head(format!("{many}x-last: 1\r\n\r\n").as_bytes(), |_, _| {}),
        None
    );
    for len in 1..40 {
        let head = format!(
            "HTTP/1.1 200 {}\r\nx-long: {}\r\n\r\n",
            "r".repeat(len),
            "v".repeat(len)
        );
        assert!(check_head(head.as_bytes()), "{len}");
    }
}

/// Subscription methods other than `eth_subscribe` / `eth_unsubscribe`
/// (the catalogue's `debug_subscribe` once `--allow debug_` lifts its
/// deny, any unknown `*_subscribe`) were forwarded: over a WebSocket
/// upstream their subscriptions belonged to the gateway's connection, so
/// their notifications reached nobody and nothing ever ended them. They
/// are refused with -32601, and the upstream hears nothing of them.
#[tokio::test]
async fn subscription_methods_the_gateway_cannot_relay_are_refused() {
    let (up, log) = scripted(misbehave()).await;
    let mut config = proxy_config(up, false);
    config.deny.clear();
    let gw = start(config).await;
    for method in [
        "debug_subscribe",
        "debug_unsubscribe",
        "parity_subscribe",
        "shh_unsubscribe",
    ] {
        let r = call(
            gw.addr,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":["newHeads"]}}"#),
        )
        .await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
        assert_eq!(r["error"]["data"]["method"], method, "{r}");
        assert!(r["error"]["data"]["reason"].is_string(), "{r}");
    }
    assert!(log.lock().unwrap().is_empty());
    // Other methods still go to the upstream.
    assert_ok_call(gw.addr, "2", "after the refusals").await;
}

/// An upstream that answers before it has read the whole request and
/// resets the connection (geth's 413 on the Content-Length, then Go's
/// reset): its answer reaches the client through both HTTP clients, and
/// the request is not sent again. The gateway's own client took the
/// failed write for a closed connection: "the connection closed before
/// any reply", the request written a second time on a reused connection
/// (found by a review).
#[tokio::test]
async fn an_answer_before_the_request_is_read_reaches_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                *counted.lock().unwrap() += 1;
                let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request too large"}}"#;
                let reply = format!(
                    "HTTP/1.1 413 Request Entity Too Large\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
                // Closed with most of the body unread: a reset.
            });
        }
    });
    for hyper_client in [true, false] {
        *heads.lock().unwrap() = 0;
        let mut config = proxy_config(up, hyper_client);
        config.timeout = Duration::from_secs(5);
        let gw = start(config).await;
        // Larger than the loopback socket's buffers: the write fails.
        let big = "ab".repeat(2_400_000);
        let r = call(
            gw.addr,
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x{big}"]}}"#
            ),
        )
        .await;
        assert_eq!(
            r["error"]["message"], "request too large",
            "hyper {hyper_client}: {r}"
        );
        assert_eq!(*heads.lock().unwrap(), 1, "hyper {hyper_client}: sent once");
    }
}
