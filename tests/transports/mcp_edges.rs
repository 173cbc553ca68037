//! MCP edge cases found by probing the layer as an unusual client would:
//! what the SDK clients never send, but a hostile or sloppy one may.

use std::sync::Arc;
use std::time::Duration;

use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
use serde_json::{Value, json};

use crate::mcp_http;
use crate::mcp_http::{
    OpenPost, asking_server, http_server, http_session, http_session_with, in_memory as send, post,
    request, session_headers,
};

fn server() -> McpServer {
    McpServer::builder("edges", "1.0.0")
        .tool(Tool::new(
            "steps",
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 50}}, "required": ["n"]}),
            |args: Value, cx: ToolContext| async move {
                let n = args["n"].as_u64().unwrap_or(1);
                for i in 1..=n {
                    cx.progress(i as f64, Some(n as f64), Some("step\nwith a newline"));
                    tokio::task::yield_now().await;
                }
                Ok(ToolOutput::text(format!("{n} steps")))
            },
        ))
        .tool(Tool::new(
            "wait",
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            |args: Value, _cx: ToolContext| async move {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(ToolOutput::text(format!("waited {ms} ms")))
            },
        ))
        .build()
        .unwrap()
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

// ----------------------------------------------------------------- HTTP

/// A progress token is echoed as the client wrote it, in events whose
/// data holds line breaks only as JSON escapes (a message with `\n`).
/// Tokens that could span lines (objects and arrays, whitespace between
/// their tokens) are refused since session 49 (the spec allows strings and
/// integers); `sse_event`'s unit test checks that JSON spanning lines
/// gives each line its `data:` field.
#[tokio::test]
async fn http_sse_events_stay_whole_when_the_json_spans_lines() {
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for token in ["\"plain\"", "7", "\"two\\nlines\"", "-12"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"steps","arguments":{{"n":3}},"_meta":{{"progressToken":{token}}}}}}}"#
        );
        let a = post(h.addr, &headers, &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.content_type(), "text/event-stream");
        let events = a.events();
        assert_eq!(events.len(), 4, "{token}: {}", a.body);
        let want: Value = serde_json::from_str(token).unwrap();
        for (i, e) in events[..3].iter().enumerate() {
            assert_eq!(e["method"], "notifications/progress");
            assert_eq!(e["params"]["progressToken"], want, "{token}");
            assert_eq!(e["params"]["progress"], (i + 1) as f64);
            assert_eq!(e["params"]["message"], "step\nwith a newline");
        }
        assert_eq!(events[3]["id"], 1);
        assert_eq!(events[3]["result"]["content"][0]["text"], "3 steps");
    }
}

/// A request (with an id) naming a notification method is not that
/// notification: it gets an error, not `"result": null`, and does nothing.
#[tokio::test]
async fn requests_to_notification_methods_are_refused() {
    let server = server();
    let mut conn = server.connection("memory");
    let r = send(&server, &mut conn, INIT).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    for msg in [
        r#"{"jsonrpc":"2.0","id":1,"method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"notifications/cancelled","params":{"requestId":9}}"#,
    ] {
        let r = send(&server, &mut conn, msg).await;
        assert_eq!(r["error"]["code"], -32601, "{msg}: {r}");
        assert!(r.get("result").is_none(), "{r}");
    }
    // Over HTTP too, in a session.
    let h = http_server(server.clone()).await;
    let sid = http_session(h.addr).await;
    let a = post(
        h.addr,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        r#"{"jsonrpc":"2.0","id":"n","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["error"]["code"], -32601, "{}", a.body);
    assert_eq!(a.json()["id"], "n");
}

/// Opens a GET stream of `sid`; its body after the opening comment.
async fn get_stream(addr: std::net::SocketAddr, sid: &str) -> hyper::body::Incoming {
    use http_body_util::BodyExt;
    let headers = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let (_sender, resp) = mcp_http::send(addr, "GET", &headers, "").await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(first.starts_with(b":"), "{first:?}");
    body
}

/// The next data frame of a GET stream, `None` at its end.
async fn next_frame(body: &mut hyper::body::Incoming) -> Option<String> {
    use http_body_util::BodyExt;
    let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the GET stream neither sent nor ended")?
        .ok()?;
    Some(String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap())
}

/// "The client MAY remain connected to multiple SSE streams
/// simultaneously. The server MUST send each of its JSON-RPC messages on
/// only one of the connected streams; that is, it MUST NOT broadcast the
/// same message across multiple streams" (transports, 2025-06-18 and
/// 2025-11-25): two GET streams of one session get one
/// `notifications/tools/list_changed` between them, not one each.
#[tokio::test]
async fn http_two_get_streams_of_a_session_share_each_notification() {
    let s = server();
    let h = http_server(s.clone()).await;
    let sid = http_session(h.addr).await;
    let mut one = get_stream(h.addr, &sid).await;
    let mut two = get_stream(h.addr, &sid).await;
    s.add_tool(Tool::new(
        "later",
        json!({"type": "object"}),
        |_, _| async { Ok(ToolOutput::text("")) },
    ))
    .unwrap();
    // Wait for the notification on either stream: the newer one carries
    // it (a client opening another stream has often lost the one before).
    let (first, mut other, newer) = tokio::select! {
        f = next_frame(&mut one) => (f, two, false),
        f = next_frame(&mut two) => (f, one, true),
    };
    assert!(newer, "the older stream carried it: {first:?}");
    assert!(
        first
            .as_deref()
            .is_some_and(|f| f.contains("notifications/tools/list_changed")),
        "{first:?}"
    );
    // Ending the session ends both streams; the other one must not have
    // carried the notification too.
    let d = request(
        h.addr,
        "DELETE",
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        "",
    )
    .await;
    assert_eq!(d.status, 200);
    let mut rest = String::new();
    while let Some(f) = next_frame(&mut other).await {
        rest.push_str(&f);
    }
    assert!(
        !rest.contains("list_changed"),
        "broadcast to a second stream: {rest:?}"
    );
}

/// MCP's `Tool.inputSchema` and `Tool.outputSchema` are JSON Schemas with
/// `"type": "object"` (arguments and structured content are objects): the
/// TypeScript SDK's client checks `tools/list` against that and rejects
/// the whole list when one tool's schema lacks it, and a schema without it
/// lets `"arguments": 5` through to the tool. The builder refuses them.
#[test]
fn tool_schemas_must_be_object_schemas() {
    let tool = |schema: Value| Tool::new("t", schema, |_, _| async { Ok(ToolOutput::text("")) });
    for bad in [
        json!({}),
        json!({"type": "string"}),
        json!({"type": ["object", "null"]}),
    ] {
        let e = McpServer::builder("x", "1")
            .tool(tool(bad.clone()))
            .build()
            .expect_err(&bad.to_string());
        assert!(e.to_string().contains("inputSchema"), "{bad}: {e}");
        let e = McpServer::builder("x", "1")
            .tool(tool(json!({"type": "object"})).output_schema(bad.clone()))
            .build()
            .expect_err(&bad.to_string());
        assert!(e.to_string().contains("outputSchema"), "{bad}: {e}");
    }
    let s = McpServer::builder("x", "1")
        .tool(tool(json!({"type": "object"})).output_schema(json!({"type": "object"})))
        .build()
        .unwrap();
    assert!(
        s.add_tool(Tool::new("u", json!({}), |_, _| async {
            Ok(ToolOutput::text(""))
        }))
        .is_err()
    );
    assert_eq!(s.tool_names(), ["t"]);
}

/// `structuredContent` is an object (`{ [key: string]: unknown }`); both
/// SDK clients reject a result whose structured content is anything else.
/// A tool that returns one gets -32603 (the tool is at fault), not a result
/// the client cannot read.
#[tokio::test]
async fn structured_content_that_is_not_an_object_is_an_internal_error() {
    let s = McpServer::builder("x", "1")
        .tool(Tool::new(
            "scalar",
            json!({"type": "object"}),
            |args: Value, _| async move { Ok(ToolOutput::structured(args["v"].clone())) },
        ))
        .build()
        .unwrap();
    let mut conn = s.connection("memory");
    let r = send(&s, &mut conn, INIT).await;
    assert!(r.get("result").is_some(), "{r}");
    for (v, ok) in [
        ("5", false),
        ("[1]", false),
        ("\"s\"", false),
        ("null", false),
        ("{\"a\":1}", true),
    ] {
        let r = send(
            &s,
            &mut conn,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"scalar","arguments":{{"v":{v}}}}}}}"#),
        )
        .await;
        if ok {
            assert_eq!(r["result"]["structuredContent"], json!({"a": 1}), "{r}");
        } else {
            assert_eq!(r["error"]["code"], -32603, "{v}: {r}");
        }
    }
}

/// A POST that is no JSON-RPC request, notification or response (a
/// scalar, an object without `method`, `result` or `error`, a wrong
/// `jsonrpc`) cannot be accepted: "the server MUST return an HTTP error
/// status code (e.g., 400 Bad Request)" with, optionally, a JSON-RPC error
/// without id; it was 202 Accepted, as if it were a notification. Valid
/// notifications and responses stay 202 with no body.
#[tokio::test]
async fn http_invalid_messages_are_400_not_202() {
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for body in [
        "5",
        r#""x""#,
        "null",
        "{}",
        r#"{"foo":1}"#,
        r#"{"jsonrpc":"2.0","method":5}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
    ] {
        for hs in [&headers[..], &[]] {
            let a = post(h.addr, hs, body).await;
            assert_eq!(a.status, 400, "{body} ({} headers): {}", hs.len(), a.body);
            assert_eq!(a.json()["error"]["code"], -32600, "{body}: {}", a.body);
        }
    }
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}"#,
        r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}"#,
    ] {
        let a = post(h.addr, &headers, body).await;
        assert_eq!(a.status, 202, "{body}: {}", a.body);
        assert!(a.body.is_empty(), "{body}: {}", a.body);
    }
}

/// RFC 9112 §3.2: the endpoint's server answers an HTTP/1.1 request
/// without `Host`, or with two, `400` (as rpcwire's HTTP and WebSocket
/// servers do); HTTP/1.0 needs none. Over a raw socket: hyper's client
/// would add nothing, but every other one sends `Host`.
#[tokio::test]
async fn http_an_http11_request_without_one_host_is_a_bad_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = http_server(server()).await;
    let raw = |version: &str, hosts: &str| {
        format!(
            "POST /mcp {version}\r\n{hosts}accept: application/json, text/event-stream\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{INIT}",
            INIT.len()
        )
    };
    let host = format!("host: {}\r\n", h.addr);
    for (request, status) in [
        (raw("HTTP/1.1", ""), "400"),
        (raw("HTTP/1.1", &host.repeat(2)), "400"),
        (raw("HTTP/1.0", ""), "200"),
        (raw("HTTP/1.1", &host), "200"),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(h.addr).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
            .await
            .expect("answered and closed")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(answer.get(9..12), Some(status), "{request:?}: {answer}");
        if status == "400" {
            // (The body may come chunked: the JSON between its braces.)
            let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
            let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
            let v: Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["error"]["code"], -32600, "{answer}");
            assert_eq!(
                v["error"]["data"]["reason"],
                "an HTTP/1.1 request needs exactly one Host header, with a valid host",
                "{answer}"
            );
        }
    }
}

/// A `notifications/cancelled` can reach the server before the request it
/// names: they travel on different HTTP requests (and connections), so
/// the request's body may still be arriving, or its task not yet started,
/// when the cancellation is handled. Such a cancellation was dropped and
/// the call ran to its end; it now waits (a few per session) for its
/// request, which then ends without a reply.
#[tokio::test]
async fn http_a_cancellation_that_overtakes_its_request_still_cancels_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let body = r#"{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"wait","arguments":{"ms":600000}}}"#;
    let (head_part, tail_part) = body.split_at(20);
    let mut tcp = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{head_part}",
        h.addr,
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.flush().await.unwrap();
    // The request is under way (its head and part of its body sent); the
    // client cancels it.
    let c = post(
        h.addr,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow","reason":"changed my mind"}}"#,
    )
    .await;
    assert_eq!(c.status, 202);
    tcp.write_all(tail_part.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer))
        .await
        .expect("the cancelled call still runs: its answer did not end")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("\"result\""), "{answer}");
    // Cancellations of ids that never come, or that came and finished, do
    // not pile up or touch later calls.
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for i in 0..100 {
        let n = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":"never-{i}"}}}}"#
        );
        assert_eq!(post(h.addr, &headers, &n).await.status, 202);
    }
    let done = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":"quick","method":"tools/call","params":{"name":"wait","arguments":{"ms":0}}}"#,
    )
    .await;
    assert_eq!(done.json()["result"]["content"][0]["text"], "waited 0 ms");
    let n =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"quick"}}"#;
    assert_eq!(post(h.addr, &headers, n).await.status, 202);
    let next = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"wait","arguments":{"ms":0}}}"#,
    )
    .await;
    assert_eq!(next.json()["result"]["content"][0]["text"], "waited 0 ms");
}

// ------------------------------------------ requests to the client, HTTP

/// A call of `ask-client` with id `id`, asking for progress.
fn ask(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"ask-client","arguments":{{}},"_meta":{{"progressToken":"t"}}}}}}"#
    )
}

/// Reads a call's events up to its request to the client: progress 1, then
/// the request; returns the request's id.
async fn asked(call: &mut OpenPost) -> Value {
    assert_eq!(call.status, 200);
    let progress = call.next().await.unwrap();
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progress"], 1.0);
    let request = call.next().await.unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    request["id"].clone()
}

/// Reads the rest of a call: progress 2 (sent after the asking ended),
/// then the reply to call `id`; returns the reply's text.
async fn told(call: &mut OpenPost, id: &str) -> String {
    let progress = call.next().await.unwrap();
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progress"], 2.0);
    let reply = call.next().await.unwrap();
    assert_eq!(reply["id"], id, "{reply}");
    assert!(
        call.next().await.is_none(),
        "the stream ends after the reply"
    );
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A tool's request to the client goes out on its POST's SSE stream, and
/// the client POSTs its answer to the session: that answer was accepted
/// (202) and dropped, so the tool waited out its whole timeout (an hour
/// here). The answer now reaches the tool that asked; answers for ids no
/// tool waits for, given twice, or POSTed to another session, reach none.
/// Two calls of one session asking at once get distinct ids.
#[tokio::test]
async fn http_the_clients_answer_reaches_the_tool_that_asked() {
    let h = http_server(asking_server()).await;
    let sid = http_session(h.addr).await;
    let other = http_session(h.addr).await;
    let headers = |sid: &str| {
        [
            ("mcp-session-id", sid.to_owned()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ]
    };
    let answer = |sid: String, id: &Value, result: &str| {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},{result}}}"#);
        let addr = h.addr;
        async move {
            let hs = headers(&sid);
            let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(addr, &hs, &body).await
        }
    };
    let hs = headers(&sid);
    let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut first = OpenPost::new(h.addr, &hs, &ask("c1")).await;
    let id1 = asked(&mut first).await;
    let mut second = OpenPost::new(h.addr, &hs, &ask("c2")).await;
    let id2 = asked(&mut second).await;
    assert_ne!(id1, id2, "two requests of one session share an id");
    // Nobody waits for these.
    for (s, id) in [
        (sid.clone(), json!(999)),
        (sid.clone(), json!("x")),
        (other.clone(), id1.clone()),
    ] {
        let a = answer(s, &id, r#""result":{"from":"nobody"}"#).await;
        assert_eq!(a.status, 202, "{}", a.body);
    }
    let a = answer(
        sid.clone(),
        &id2,
        r#""error":{"code":-1,"message":"declined"}"#,
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(told(&mut second, "c2").await, "answered error -1");
    let a = answer(sid.clone(), &id1, r#""result":{"from":"client"}"#).await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(
        told(&mut first, "c1").await,
        r#"answered {"from":"client"}"#
    );
    // Twice: nobody waits any more.
    let a = answer(sid.clone(), &id1, r#""result":{"from":"again"}"#).await;
    assert_eq!(a.status, 202, "{}", a.body);
    // An answer for a session that ended is 404, as any request of it.
    let d = request(h.addr, "DELETE", &[("mcp-session-id", &other)], "").await;
    assert_eq!(d.status, 200);
    let a = answer(other.clone(), &id1, r#""result":{}"#).await;
    assert_eq!(a.status, 404, "{}", a.body);
}

/// A client's answer that is not a valid response (both `result` and
/// `error`) went to the dispatcher, which never answers a response: the
/// tool that asked waited out its whole timeout (an hour here). It now
/// ends that request at once, and the POST is 400 with a -32600 of no id
/// (the MCP transport's "cannot accept the input"). So does an answer
/// with the id and nothing else (no `result`, no `error`: it was read as
/// a request without `method`, -32600 under the id, and the tool waited
/// on); with an id nobody waits for, that is still an invalid request.
#[tokio::test]
async fn http_an_invalid_answer_ends_the_request_it_answers() {
    let h = http_server(asking_server()).await;
    let sid = http_session(h.addr).await;
    let hs = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let stray = post(h.addr, &hs, r#"{"jsonrpc":"2.0","id":"nobody-asked"}"#).await;
    assert_eq!(stray.json()["error"]["code"], -32600, "{}", stray.body);
    assert_eq!(stray.json()["id"], "nobody-asked", "{}", stray.body);
    let both = |id: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{}},"error":{{"code":-1,"message":"both"}}}}"#
        )
    };
    let bare = |id: &Value| format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#);
    for broken in [&both as &dyn Fn(&Value) -> String, &bare] {
        let mut call = OpenPost::new(h.addr, &hs, &ask("c1")).await;
        let id = asked(&mut call).await;
        let body = broken(&id);
        let a = post(h.addr, &hs, &body).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert_eq!(a.json()["error"]["code"], -32600, "{body}: {}", a.body);
        assert_eq!(a.json()["id"], Value::Null, "{body}: {}", a.body);
        let told = tokio::time::timeout(Duration::from_secs(10), told(&mut call, "c1"))
            .await
            .unwrap_or_else(|_| panic!("{body}: the tool still waits for an answer"));
        assert!(
            told.starts_with("no answer: InvalidResponse"),
            "{body}: {told}"
        );
    }
}

/// A tool `ask-until` asking its client with a deadline of 100 ms
/// (`Peer::request_with`, the callback form), answering what its callback
/// heard.
fn deadline_server() -> McpServer {
    McpServer::builder("deadlines", "1.0.0")
        .tool(Tool::new(
            "ask-until",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let peer = cx.connection().peer().expect("two-way").clone();
                let (tx, rx) = tokio::sync::oneshot::channel();
                let deadline = std::time::Instant::now() + Duration::from_millis(100);
                peer.request_with(
                    "sampling/createMessage",
                    Some(&json!({"messages": []})),
                    Some(deadline),
                    move |answer| {
                        let _ = tx.send(answer.err());
                    },
                )
                .map_err(|e| rpcwire::RpcError::internal(e.to_string()))?;
                let heard = rx.await.expect("the callback ran");
                Ok(ToolOutput::text(format!("no answer: {heard:?}")))
            },
        ))
        .build()
        .unwrap()
}

/// The same over stdio: nothing there expired the tools' requests to the
/// client either (found by a review).
#[tokio::test]
async fn stdio_a_request_with_a_deadline_expires_while_its_call_runs() {
    use tokio::io::AsyncWriteExt;
    let (mut to_server, mut lines, served) = stdio_pipes(deadline_server(), 64 * 1024);
    let call = "{\"jsonrpc\":\"2.0\",\"id\":\"d1\",\"method\":\"tools/call\",\"params\":{\"name\":\"ask-until\",\"arguments\":{}}}\n";
    to_server
        .write_all(stdio_session(r#"{"sampling":{}}"#, call).as_bytes())
        .await
        .unwrap();
    let mut next = async || -> Value {
        serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap()
    };
    assert_eq!(next().await["id"], 0, "initialize's reply");
    expect_expiry(next).await;
    served.abort();
}

/// What the client of `deadline_server`'s call `d1` reads, message by
/// message from `next`: the tool's request, its cancellation at the
/// deadline, then the call's reply, whose callback heard `Timeout`.
async fn expect_expiry(mut next: impl AsyncFnMut() -> Value) {
    let talk = async {
        let asked = next().await;
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        let note = next().await;
        assert_eq!(note["method"], "notifications/cancelled", "{note}");
        assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
        next().await
    };
    let reply = tokio::time::timeout(Duration::from_secs(10), talk)
        .await
        .expect("the request never expired: the tool still waits");
    assert_eq!(reply["id"], "d1", "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "no answer: Some(Timeout)",
        "{reply}"
    );
}

/// A tool's request to the client with a deadline of its own
/// (`Peer::request_with`, the callback form) over Streamable HTTP: nothing
/// expired it while the call ran, so a client that never answered left the
/// tool waiting for good. It now expires at its deadline: the client is
/// told (`notifications/cancelled`) and the callback hears `Timeout`.
#[tokio::test]
async fn http_a_request_with_a_deadline_expires_while_its_call_runs() {
    let h = http_server(deadline_server()).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let hs = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let body = r#"{"jsonrpc":"2.0","id":"d1","method":"tools/call","params":{"name":"ask-until","arguments":{}}}"#;
    let mut call = OpenPost::new(h.addr, &hs, body).await;
    assert_eq!(call.status, 200);
    expect_expiry(async || call.next().await.unwrap()).await;
}

/// When a session ends (`DELETE`, or evicted past `max_sessions`), no
/// answer can reach its calls any more (their client's POSTs get 404): a
/// tool waiting for one waited out its whole timeout. The call's stream,
/// still open, now carries `notifications/cancelled` for the request (sent
/// through the raw peer, as `ask_client`'s are); then a deleted session's
/// call is cancelled (no reply), and an evicted one's request fails at
/// once with `PeerError::Closed`, as does one sent after.
#[tokio::test]
async fn http_requests_to_the_client_fail_when_their_session_ends() {
    let config = rpcwire::mcp::http::HttpConfig {
        max_sessions: 2,
        ..Default::default()
    };
    let h = mcp_http::http_server_with(asking_server(), config).await;
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask("d")).await;
    let sent = asked(&mut call).await;
    let d = request(h.addr, "DELETE", &headers, "").await;
    assert_eq!(d.status, 200);
    // Ended by its client: the call is cancelled, its request to the
    // client called off, and its stream ends without a reply.
    told_to_stop(&mut call, &sent).await;
    let after = call.next().await;
    assert!(after.is_none(), "no reply after the DELETE: {after:?}");
    // Evicted: two newer sessions take the places; the call runs on and
    // its stream gets its reply.
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask("e")).await;
    let sent = asked(&mut call).await;
    http_session(h.addr).await;
    http_session(h.addr).await;
    told_to_stop(&mut call, &sent).await;
    assert_eq!(told(&mut call, "e").await, "no answer: Closed");
}

/// Revision 2026-07-28 has no sessions and no requests from the server
/// (multi round-trip requests replace them): a tool's request to the client
/// went out on the POST's stream, and no answer could ever come back (there
/// is no session to POST it to), so the tool waited out its whole timeout.
/// It now fails at once with `PeerError::Closed`, and nothing is sent;
/// progress still is.
#[tokio::test]
async fn http_stateless_calls_cannot_ask_the_client() {
    let h = http_server(asking_server()).await;
    let body = r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"ask-client","arguments":{},"_meta":{"progressToken":"t","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}}"#;
    let mut call = OpenPost::new(
        h.addr,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "ask-client"),
        ],
        body,
    )
    .await;
    assert_eq!(call.status, 200);
    let progress = call.next().await.unwrap();
    assert_eq!(progress["params"]["progress"], 1.0, "{progress}");
    assert_eq!(told(&mut call, "s").await, "no answer: Closed");
}

/// A request whose id a running request of the same session already uses
/// (which the client must not send) replaced the first one's cancellation
/// handle: the first call was cancelled, and when it ended it took the
/// second's handle with it, cancelling that one too. Both streams ended
/// without a reply. The second is now answered with -32600 (its id) and
/// the first runs on.
#[tokio::test]
async fn http_a_request_reusing_a_running_id_is_refused() {
    let h = http_server(asking_server()).await;
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut first = OpenPost::new(h.addr, &headers, &ask("same")).await;
    let id = asked(&mut first).await;
    let again = post(h.addr, &headers, &ask("same")).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["error"]["code"], -32600, "{}", again.body);
    assert_eq!(again.json()["id"], "same", "{}", again.body);
    let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"ok":true}}}}"#);
    assert_eq!(post(h.addr, &headers, &answer).await.status, 202);
    assert_eq!(told(&mut first, "same").await, r#"answered {"ok":true}"#);
    // Once it ended, the id may be used again.
    let mut later = OpenPost::new(h.addr, &headers, &ask("same")).await;
    let id = asked(&mut later).await;
    let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
    assert_eq!(post(h.addr, &headers, &answer).await.status, 202);
    assert_eq!(told(&mut later, "same").await, "answered {}");
}

/// A call `id` of `ask-within`, waiting `ms` for the client's answer.
fn ask_within(id: &str, ms: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"ask-within","arguments":{{"ms":{ms}}}}}}}"#
    )
}

/// Reads the call's next event: the server's `notifications/cancelled` for
/// its request `asked`, with a reason.
async fn told_to_stop(call: &mut OpenPost, asked: &Value) {
    let note = call
        .next()
        .await
        .expect("notifications/cancelled before the stream ends");
    assert_eq!(note["method"], "notifications/cancelled", "{note}");
    assert_eq!(note["params"]["requestId"], *asked, "{note}");
    assert!(
        note["params"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{note}"
    );
    assert!(note.get("id").is_none(), "a notification: {note}");
}

/// An answer to the server's request `asked`, given after the server gave
/// up on it: accepted and ignored (202, no body, no error), and the session
/// goes on.
async fn late_answer_is_ignored(addr: std::net::SocketAddr, sid: &str, asked: &Value) {
    let headers = [
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let late = format!(
        r#"{{"jsonrpc":"2.0","id":{asked},"result":{{"role":"assistant","content":{{"type":"text","text":"late"}},"model":"m"}}}}"#
    );
    let a = post(addr, &headers, &late).await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert!(a.body.is_empty(), "{}", a.body);
    let ping = post(
        addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#,
    )
    .await;
    assert_eq!(ping.json(), json!({"jsonrpc":"2.0","id":"p","result":{}}));
}

/// A tool waiting in `ask_client` when the client cancels its call
/// (`notifications/cancelled`): the request to the client was forgotten
/// silently, so the client went on with it (sampling its model) for a
/// result nobody waited for. The server now tells it to stop, with
/// `notifications/cancelled` naming that request, on the call's POST
/// stream (which then ends without a reply); a late answer is ignored.
#[tokio::test]
async fn http_a_cancelled_call_tells_the_client_to_drop_what_it_asked() {
    let h = http_server(asking_server()).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask_within("c", 3_600_000)).await;
    assert_eq!(call.status, 200);
    let request = call.next().await.unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let asked = request["id"].clone();
    let c = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c","reason":"user stopped"}}"#,
    )
    .await;
    assert_eq!(c.status, 202, "{}", c.body);
    told_to_stop(&mut call, &asked).await;
    assert_eq!(call.next().await, None, "no reply to a cancelled call");
    late_answer_is_ignored(h.addr, &sid, &asked).await;
}

/// `ask_client`'s own timeout: the tool got `PeerError::Timeout` and the
/// client was never told, so it kept working on the request. It is now
/// sent `notifications/cancelled` for it before the tool goes on.
#[tokio::test]
async fn http_an_ask_that_times_out_tells_the_client_to_drop_it() {
    let h = http_server(asking_server()).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask_within("t", 1)).await;
    assert_eq!(call.status, 200);
    let request = call.next().await.unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let asked = request["id"].clone();
    told_to_stop(&mut call, &asked).await;
    let reply = call.next().await.unwrap();
    assert_eq!(reply["id"], "t", "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "no answer: Peer(Timeout)",
        "{reply}"
    );
    assert_eq!(call.next().await, None);
    late_answer_is_ignored(h.addr, &sid, &asked).await;
}

/// The server's own limit on a call (`call_timeout`) ending it while its
/// tool waits in `ask_client`: the client is told to drop the request, and
/// then gets the call's timeout error.
#[tokio::test]
async fn http_a_call_that_times_out_tells_the_client_to_drop_what_it_asked() {
    let server = rpcwire::mcp::McpServer::builder("t", "1")
        .call_timeout(Some(Duration::from_millis(50)))
        .tool(mcp_http::ask_within_tool())
        .build()
        .unwrap();
    let h = http_server(server).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask_within("slow", 3_600_000)).await;
    let request = call.next().await.unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let asked = request["id"].clone();
    told_to_stop(&mut call, &asked).await;
    let reply = call.next().await.unwrap();
    assert_eq!(reply["id"], "slow", "{reply}");
    assert_eq!(reply["error"]["code"], -32001, "{reply}");
    assert_eq!(call.next().await, None);
    late_answer_is_ignored(h.addr, &sid, &asked).await;
}

/// A session that ends (`DELETE`) while a tool waits in `ask_client`: the
/// call's stream, still open, carries `notifications/cancelled` for the
/// request, and the call, cancelled with its session (as the official
/// SDKs' servers do: a `DELETE` ends the session's streams and work),
/// ends it without a reply. (Before, the tool heard `Closed` and its reply
/// went out on a session its client had ended.)
#[tokio::test]
async fn http_a_session_that_ends_tells_the_client_to_drop_what_it_asked() {
    let h = http_server(asking_server()).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let mut call = OpenPost::new(h.addr, &headers, &ask_within("d", 3_600_000)).await;
    let asking = call.next().await.unwrap();
    assert_eq!(asking["method"], "sampling/createMessage", "{asking}");
    let asked = asking["id"].clone();
    let d = request(h.addr, "DELETE", &headers, "").await;
    assert_eq!(d.status, 200);
    told_to_stop(&mut call, &asked).await;
    assert_eq!(call.next().await, None);
}

// ------------------------------------------------ what a session keeps

/// `initialize`'s `capabilities` are kept for the session's life (a tool
/// reads them through `ToolContext::client_capabilities`): a client
/// declaring megabytes of them held several times that in every session.
/// Past 16 KiB they are refused with -32602 naming the limit, and no
/// session is made; so are more than 1,024 values in less text (64 KiB
/// of `[0,0,...]` were kept as about 1 MiB a session; found by a review).
#[tokio::test]
async fn http_initialize_refuses_oversized_capabilities() {
    let h = http_server(server()).await;
    let big = format!(r#"{{"experimental":{{"x":[{}0]}}}}"#, "0,".repeat(40_000));
    let initialize = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{big},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    );
    let a = post(h.addr, &[], &initialize).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = a.json();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["field"], "capabilities", "{r}");
    assert_eq!(r["error"]["data"]["limit"], 16384, "{r}");
    assert!(a.headers.get("mcp-session-id").is_none());
    let many = format!(r#"{{"experimental":{{"x":[{}0]}}}}"#, "0,".repeat(2_000));
    let initialize = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{many},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    );
    let a = post(h.addr, &[], &initialize).await;
    let r = a.json();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["limit_values"], 1024, "{r}");
    assert!(a.headers.get("mcp-session-id").is_none());
    // Ordinary capabilities still make a session.
    http_session_with(h.addr, r#"{"sampling":{},"roots":{"listChanged":true}}"#).await;
}

/// A POST whose JSON is no request (`method` not a string) but carries an
/// id was answered 200 with the dispatcher's -32600, skipping the
/// session checks; the module's table and the spec ("MUST return an HTTP
/// error status code") say 400, as for the same message without id.
#[tokio::test]
async fn http_an_invalid_request_with_an_id_is_400() {
    let h = http_server(server()).await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
        r#"{"jsonrpc":"2.0","id":"a","method":null,"params":{}}"#,
    ] {
        let a = post(h.addr, &[], body).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert_eq!(a.json()["error"]["code"], -32600, "{body}: {}", a.body);
    }
    // Inside a session, an id of the wrong type, another version, params
    // neither array nor object: each was 200 (with `id: null` for the
    // first two, which left the client waiting). Found by a review.
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for (body, id) in [
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            json!(1),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}"#,
            json!(1),
        ),
    ] {
        let a = post(h.addr, &headers, body).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert_eq!(a.json()["error"]["code"], -32600, "{body}: {}", a.body);
        assert_eq!(a.json()["id"], id, "{body}: {}", a.body);
    }
    // A valid one is served as ever.
    let a = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
}

/// A page size meant as "no paging" (`usize::MAX`) overflowed on the
/// second page's end: a panic, caught as -32603. Past the last tool the
/// page is just the rest.
#[tokio::test]
async fn tools_list_with_an_unbounded_page_size_pages_without_overflow() {
    let server = McpServer::builder("pages", "1.0.0")
        .page_size(usize::MAX)
        .tool(Tool::new(
            "a",
            json!({"type": "object"}),
            |_: Value, _cx: ToolContext| async { Ok(ToolOutput::text("a")) },
        ))
        .tool(Tool::new(
            "b",
            json!({"type": "object"}),
            |_: Value, _cx: ToolContext| async { Ok(ToolOutput::text("b")) },
        ))
        .build()
        .unwrap();
    let mut conn = server.connection("memory");
    send(&server, &mut conn, INIT).await;
    let all = send(
        &server,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(
        all["result"]["tools"].as_array().map(Vec::len),
        Some(2),
        "{all}"
    );
    assert!(all["result"].get("nextCursor").is_none(), "{all}");
    let later = send(
        &server,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"s1"}}"#,
    )
    .await;
    assert_eq!(
        later["result"]["tools"].as_array().map(Vec::len),
        Some(1),
        "{later}"
    );
    assert_eq!(later["result"]["tools"][0]["name"], "b", "{later}");
}

/// Over stdio, a last line without its newline was answered into the
/// replies buffer at the end of input, and a call that finished just then
/// was framed with it as one line: two replies on one line, which a line
/// client cannot read (the race hit most runs). Each reply is a line now.
/// Found by a review.
#[tokio::test]
async fn stdio_replies_at_the_end_of_input_are_one_per_line() {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for round in 0..20 {
        let gate = Arc::new(tokio::sync::Notify::new());
        let g = gate.clone();
        let server = McpServer::builder("t", "1")
            .tool(Tool::new(
                "gate",
                json!({"type": "object"}),
                move |_, _cx: ToolContext| {
                    let g = g.clone();
                    async move {
                        g.notified().await;
                        Ok(ToolOutput::text("opened"))
                    }
                },
            ))
            .build()
            .unwrap();
        let (client, served) = tokio::io::duplex(1 << 16);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let (sr, sw) = tokio::io::split(served);
        let serving = tokio::spawn(async move { server.serve_stream(sr, sw).await });
        to_server
            .write_all(
                concat!(
                    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate","arguments":{}}}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        to_server.shutdown().await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            from_server.read_to_string(&mut out),
        )
        .await
        .expect("the server ends")
        .unwrap();
        serving.await.unwrap().unwrap();
        let mut ids = Vec::new();
        for line in out.lines() {
            let reply: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("round {round}: not one message a line ({e}): {line}"));
            ids.push(reply["id"].clone());
        }
        ids.sort_by_key(|id| id.as_u64());
        assert_eq!(ids, [json!(0), json!(1), json!(2)], "round {round}: {out}");
    }
}

/// A server whose sessions run at most two calls at once, with one tool,
/// `slow`, that takes `takes`: the most calls that ran at once, and how
/// many finished.
fn counting_slow_tool(
    takes: Duration,
) -> (
    McpServer,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, peak, ran) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (p, r) = (Arc::clone(&peak), Arc::clone(&ran));
    let server = McpServer::builder("t", "1")
        .max_in_flight(2)
        .tool(Tool::new(
            "slow",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                let (n, p, r) = (Arc::clone(&now), Arc::clone(&p), Arc::clone(&r));
                async move {
                    p.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(takes).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text("done"))
                }
            },
        ))
        .build()
        .unwrap();
    (server, peak, ran)
}

/// `max_in_flight` ("calls of one connection running at once; more wait")
/// held over stdio, but over HTTP each POST is a connection of its own to
/// the dispatcher: 20 calls of one session ran at once under a cap of 2.
/// A session's requests now wait for a place. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_a_session_runs_at_most_max_in_flight_calls_at_once() {
    use std::sync::atomic::Ordering;
    let (server, peak, _) = counting_slow_tool(Duration::from_millis(100));
    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let mut calls = Vec::new();
    for i in 0..12 {
        let (addr, sid) = (h.addr, sid.clone());
        calls.push(tokio::spawn(async move {
            let headers = [
                ("mcp-session-id", sid.as_str()),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"slow","arguments":{{}}}}}}"#
            );
            post(addr, &headers, &body).await
        }));
    }
    for call in calls {
        let a = call.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        assert!(a.body.contains("done"), "{}", a.body);
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "{peak} calls of one session ran at once");
    assert_eq!(peak, 2);
}

/// `tools/list` pages: a tool removed before the page a client reads next
/// made that page start one tool too far (the cursor was an offset), so
/// the client's listing silently lacked a tool. The cursor names the last
/// tool listed, and the next page goes on after it. Found by a review.
#[tokio::test]
async fn tools_list_pages_survive_a_removal_between_pages() {
    let tool = |name: &str| {
        Tool::new(
            name,
            json!({"type": "object"}),
            |_, _cx: ToolContext| async { Ok(ToolOutput::text("")) },
        )
    };
    let s = McpServer::builder("pages", "1.0.0")
        .page_size(2)
        .tool(tool("a"))
        .tool(tool("b"))
        .tool(tool("c"))
        .tool(tool("d"))
        .build()
        .unwrap();
    let mut conn = s.connection("memory");
    let (first, cursor) = list_page(&s, &mut conn, None).await;
    assert_eq!(first, ["a", "b"]);
    assert!(s.remove_tool("a"));
    let (second, next) = list_page(&s, &mut conn, cursor.clone()).await;
    assert_eq!(second, ["c", "d"], "a tool skipped");
    assert_eq!(next, None);
    // The tool the cursor names goes too: c was skipped (the page started
    // where b had stood, one too far).
    assert!(s.remove_tool("b"));
    let (second, _) = list_page(&s, &mut conn, cursor.clone()).await;
    assert_eq!(second, ["c", "d"], "a tool skipped");
    // It comes back (at the end): c and d were skipped (the page started
    // after b, now last).
    s.add_tool(tool("b")).unwrap();
    let (second, next) = list_page(&s, &mut conn, cursor).await;
    assert_eq!(second, ["c", "d"], "tools skipped");
    let (third, next) = list_page(&s, &mut conn, next).await;
    assert_eq!(third, ["b"]);
    assert_eq!(next, None);
}

/// One `tools/list` page (revision 2026-07-28, no handshake): the tools'
/// names and the next cursor (as JSON text).
async fn list_page(
    s: &McpServer,
    conn: &mut rpcwire::Connection,
    cursor: Option<String>,
) -> (Vec<String>, Option<String>) {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let cursor = cursor.map_or(String::new(), |c| format!(r#""cursor":{c},"#));
    let msg =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{cursor}{meta}}}}}"#);
    let mut out = Vec::new();
    s.handle(&bytes::Bytes::from(msg), conn, &mut out).await;
    let r: Value = serde_json::from_slice(&out).unwrap();
    let names = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    (names, r["result"].get("nextCursor").map(|c| c.to_string()))
}

/// Over HTTP, a call sent as a notification was dropped as soon as it
/// started (its connection ended with the 202), where stdio runs it to
/// its end: its 202 now comes once it is done, as the module says.
/// Found by a review.
#[tokio::test]
async fn http_a_notification_s_call_runs_to_its_end() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let server = McpServer::builder("t", "1")
        .tool(Tool::new(
            "slow",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                let d = d.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text("done"))
                }
            },
        ))
        .build()
        .unwrap();
    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let headers = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let a = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(done.load(Ordering::SeqCst), 1, "the call was dropped");
}

// ---------------------------------------------------------------------------
// Streamable HTTP's `serve` stopping.

/// A stateless (2026-07-28) `tools/call` of `tool`, as raw HTTP/1.1
/// without `connection: close` (kept alive).
fn kept_alive_call(tool: &str, id: u32) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: {tool}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// `server` served by Streamable HTTP's `serve` on a port of its own until
/// the returned sender says stop: its address, the sender, `serve`'s task.
async fn serve_until_told(
    server: McpServer,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(rpcwire::mcp::http::serve(
        rpcwire::mcp::http::Endpoint::new(server, rpcwire::mcp::http::HttpConfig::default()),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop, served)
}

/// Reads one response (head and a content-length or chunked body, read
/// until the reply's id shows) or `None` when the connection closed first.
async fn response_with_id(s: &mut tokio::net::TcpStream, id: u32) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let want = format!("\"id\":{id}");
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if text.contains(&want) {
            return Some(text);
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("hang: {text}"),
        }
    }
}

/// Once `serve`'s shutdown future completed, a kept-alive connection is
/// closed: `serve` returned with it still open, and a new `tools/call` on
/// it was started and answered after the server had stopped (found by a
/// review).
#[tokio::test]
async fn serve_stopped_starts_nothing_more_on_a_kept_alive_connection() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;
    let started = Arc::new(AtomicUsize::new(0));
    let s2 = started.clone();
    let server = McpServer::builder("t", "1")
        .tool(Tool::new(
            "count",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                let s = s2.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text("counted"))
                }
            },
        ))
        .build()
        .unwrap();
    let (addr, stop, served) = serve_until_told(server).await;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(kept_alive_call("count", 1).as_bytes())
        .await
        .unwrap();
    response_with_id(&mut conn, 1)
        .await
        .expect("answered before the stop");
    assert_eq!(started.load(Ordering::SeqCst), 1);

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
    // The server has stopped: new connections are refused...
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // ...but the kept-alive one still starts work.
    let _ = conn.write_all(kept_alive_call("count", 2).as_bytes()).await;
    let after = response_with_id(&mut conn, 2).await;
    assert_eq!(
        (after, started.load(Ordering::SeqCst)),
        (None, 1),
        "a call was started and answered after serve returned"
    );
}

/// A call running when `serve` is told to stop finishes within the grace:
/// its reply comes, saying `connection: close`, the connection closes,
/// and `serve` returns after it.
#[tokio::test]
async fn serve_stopping_lets_a_running_call_finish_and_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = Arc::new(tokio::sync::Notify::new());
    let started_in_tool = Arc::clone(&started);
    let server = McpServer::builder("t", "1")
        .tool(Tool::new(
            "slow",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                let started = Arc::clone(&started_in_tool);
                async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(ToolOutput::text("finished"))
                }
            },
        ))
        .build()
        .unwrap();
    let (addr, stop, served) = serve_until_told(server).await;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(kept_alive_call("slow", 1).as_bytes())
        .await
        .unwrap();
    // Running when told to stop (a fixed 50 ms left a busy host reading
    // the request after it).
    tokio::time::timeout(Duration::from_secs(30), started.notified())
        .await
        .expect("the call starts");
    stop.send(()).unwrap();
    let reply = response_with_id(&mut conn, 1)
        .await
        .expect("the running call's reply");
    assert!(reply.contains("finished"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );
    // Then the end of the connection.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("the connection closes")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
}

/// Over stdio, calls past `max_in_flight` wait in order and, once 64 KiB
/// of them wait, input is no longer read: the client's writes wait. A
/// `notifications/cancelled` still reaches a running call meanwhile, and
/// the slot it frees goes to the request held first. Every line was read
/// and queued however many calls were waiting (18 MB of heap for 4 MB of
/// pipelined calls, each line's start scanning the queue). Found by a
/// review. On tokio's paused clock: a write that waits is one the
/// runtime, idle, gives up on.
#[tokio::test(start_paused = true)]
async fn stdio_pipelined_calls_past_the_cap_are_held_and_then_not_read() {
    use tokio::io::AsyncWriteExt;
    let server = McpServer::builder("held", "1")
        .max_in_flight(2)
        .tool(never_tool())
        .tool(Tool::new(
            "quick",
            json!({"type": "object"}),
            |_, _| async { Ok(ToolOutput::text("quick")) },
        ))
        .build()
        .unwrap();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    let call = |id: u64, tool: &str| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{}}}}}}\n"
        )
    };
    let mut start = String::from(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
"#,
    );
    start += &call(1, "never");
    start += &call(2, "never");
    start += &call(3, "quick");
    to_server.write_all(start.as_bytes()).await.unwrap();
    let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 0, "{init}");
    // 3 waits for a slot; cancelling 1 gives it one.
    let waits = tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await;
    assert!(waits.is_err(), "answered at the cap: {waits:?}");
    to_server
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}\n")
        .await
        .unwrap();
    let quick: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(quick["id"], 3, "{quick}");
    assert_eq!(quick["result"]["content"][0]["text"], "quick", "{quick}");
    // A flood of calls past the cap: read up to the bound, then not.
    let flood: String = (100..20_000u64).map(|id| call(id, "never")).collect();
    let written = tokio::time::timeout(
        Duration::from_secs(60),
        to_server.write_all(flood.as_bytes()),
    )
    .await;
    assert!(
        written.is_err(),
        "{} bytes of calls past the cap were all read",
        flood.len()
    );
    served.abort();
}

/// A tool that runs until it is cancelled, counting itself while it runs.
fn holding_server(running: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> McpServer {
    use std::sync::atomic::Ordering;
    struct Running(std::sync::Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let running = std::sync::Arc::clone(running);
    McpServer::builder("edges", "1.0.0")
        .tool(Tool::new(
            "hold",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                running.fetch_add(1, Ordering::SeqCst);
                let guard = Running(std::sync::Arc::clone(&running));
                async move {
                    let _guard = guard;
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    Ok(ToolOutput::text("held"))
                }
            },
        ))
        .build()
        .unwrap()
}

/// A POST of `body` in session `sid` on a connection of its own, left
/// unread (the call's stream sends nothing before its reply).
async fn raw_call(addr: std::net::SocketAddr, sid: &str, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

/// Closing a call's response stream does not cancel it (Streamable HTTP:
/// "Disconnection SHOULD NOT be interpreted as the client cancelling its
/// request"): a session's call runs on until its client cancels it, or
/// until its session ends (evicted here). It was cancelled at once.
#[tokio::test]
async fn a_closed_response_stream_does_not_cancel_a_session_call() {
    use crate::eventually::eventually;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let running = std::sync::Arc::new(AtomicUsize::new(0));
    let h = mcp_http::http_server_with(
        holding_server(&running),
        rpcwire::mcp::http::HttpConfig {
            max_sessions: 2,
            ..Default::default()
        },
    )
    .await;
    let sid = http_session(h.addr).await;
    let hs = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let hold = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"hold","arguments":{{}}}}}}"#
        )
    };

    let call = raw_call(h.addr, &sid, &hold(7)).await;
    eventually("the call to start", || running.load(Ordering::SeqCst) == 1).await;
    drop(call);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(running.load(Ordering::SeqCst), 1, "the call runs on");
    let n = post(
        h.addr,
        &hs,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    )
    .await;
    assert_eq!(n.status, 202);
    eventually("the cancelled call to stop", || {
        running.load(Ordering::SeqCst) == 0
    })
    .await;

    // Its session pushed out by two newer ones (max_sessions 2): the call,
    // whose client is gone, stops.
    let call = raw_call(h.addr, &sid, &hold(8)).await;
    eventually("the call to start", || running.load(Ordering::SeqCst) == 1).await;
    drop(call);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(running.load(Ordering::SeqCst), 1, "the call runs on");
    let _newer = http_session(h.addr).await;
    let _newest = http_session(h.addr).await;
    assert_eq!(post(h.addr, &hs, &hold(9)).await.status, 404, "evicted");
    eventually("the evicted session's call to stop", || {
        running.load(Ordering::SeqCst) == 0
    })
    .await;
}

/// A `tools/call` sent as a notification is answered by a 202 that
/// carries nothing, so a request its tool sends the client could never be
/// seen: it fails at once, and the 202 goes as the tool ends. It was sent
/// into the void, and the tool and its POST waited for the ask's timeout
/// (an hour here). Found by a review.
#[tokio::test]
async fn a_notifications_call_cannot_ask_the_client() {
    let h = http_server(asking_server()).await;
    let sid = http_session_with(h.addr, r#"{"sampling":{}}"#).await;
    let session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let a = tokio::time::timeout(
        Duration::from_secs(20),
        post(
            h.addr,
            &session,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"ask-politely","arguments":{}}}"#,
        ),
    )
    .await
    .expect("the 202 once the tool ends, not after its ask's timeout");
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(a.body, "");
}

/// A `tools/call` sent as a notification is answered by a bare 202: what
/// its tool sends cannot reach the client, and the tool is told so
/// (`progress` returns false). It returned true and the notification was
/// dropped (found by a review).
#[tokio::test]
async fn a_notifications_call_is_told_its_notifications_go_nowhere() {
    use std::sync::Mutex;
    let told: Arc<Mutex<Option<bool>>> = Arc::default();
    let telling = Arc::clone(&told);
    let server = McpServer::builder("notes", "1")
        .tool(Tool::new(
            "reports",
            json!({"type": "object"}),
            move |_, cx: ToolContext| {
                *telling.lock().unwrap() = Some(cx.progress(1.0, None, None));
                async { Ok(ToolOutput::text("done")) }
            },
        ))
        .build()
        .unwrap();
    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let a = post(
        h.addr,
        &session,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"reports","arguments":{},"_meta":{"progressToken":1}}}"#,
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(
        *told.lock().unwrap(),
        Some(false),
        "progress reported as sent"
    );
    // The same call as a request: its progress goes out on its stream.
    let r = post(
        h.addr,
        &session,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"reports","arguments":{},"_meta":{"progressToken":1}}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(*told.lock().unwrap(), Some(true));
    assert_eq!(
        r.events()[0]["method"],
        "notifications/progress",
        "{}",
        r.body
    );
}

/// `DELETE` cancels the session's running calls: a call sent as a
/// notification too (its tool ran on for as long as it took, holding the
/// deleted session's memory and its POST). Found by a review.
#[tokio::test]
async fn delete_cancels_a_call_sent_as_a_notification() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Running(Arc<AtomicUsize>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let running = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&running);
    let holding = McpServer::builder("r", "1")
        .tool(Tool::new(
            "hold",
            json!({"type": "object"}),
            move |_, _cx: ToolContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                let guard = Running(Arc::clone(&counted));
                async move {
                    let _guard = guard;
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    Ok(ToolOutput::text("held"))
                }
            },
        ))
        .build()
        .unwrap();
    let h = http_server(holding).await;
    let sid = http_session(h.addr).await;
    let body = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"hold","arguments":{}}}"#;
    let (addr, kept_sid) = (h.addr, sid.clone());
    let notification = tokio::spawn(async move {
        let session = [
            ("mcp-session-id", kept_sid.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let headers = [mcp_http::JSON_SSE, mcp_http::CT, session[0], session[1]];
        mcp_http::send(addr, "POST", &headers, body)
            .await
            .1
            .status()
    });
    crate::eventually::eventually("the call to start", || running.load(Ordering::SeqCst) == 1)
        .await;
    let deleted = request(h.addr, "DELETE", &[("mcp-session-id", &sid)], "").await;
    assert_eq!(deleted.status, 200);
    let status = tokio::time::timeout(Duration::from_secs(20), notification)
        .await
        .expect("the notification's POST answered once its call stopped")
        .unwrap();
    assert_eq!(status, 202);
    assert_eq!(running.load(Ordering::SeqCst), 0, "the tool was dropped");
}

/// A stdio session's input: `initialize` (with `capabilities`) and
/// `notifications/initialized`, then `rest`.
fn stdio_session(capabilities: &str, rest: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{capabilities},\"clientInfo\":{{\"name\":\"t\",\"version\":\"1\"}}}}}}\n\
         {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n{rest}"
    )
}

/// A tool that runs until it is cancelled.
fn never_tool() -> Tool {
    Tool::new("never", json!({"type": "object"}), |_, _| async {
        std::future::pending::<()>().await;
        Ok(ToolOutput::text(""))
    })
}

/// `server` serving stdio's framing over in-memory pipes (64 KiB of room
/// for what the client writes, `output` bytes for the server's): the
/// client's write end, the server's lines, and its task.
fn stdio_pipes(
    server: McpServer,
    output: usize,
) -> (
    tokio::io::DuplexStream,
    tokio::io::Lines<tokio::io::BufReader<tokio::io::DuplexStream>>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    use tokio::io::AsyncBufReadExt;
    let (to_server, server_input) = tokio::io::duplex(64 * 1024);
    let (server_output, from_server) = tokio::io::duplex(output);
    let served =
        tokio::spawn(async move { server.serve_stream(server_input, server_output).await });
    (
        to_server,
        tokio::io::BufReader::new(from_server).lines(),
        served,
    )
}

fn stdio_call(id: u64, tool: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{}}}}}}\n"
    )
}

/// Requests that come while a reply waits for the client to take it are
/// answered once it has. (A change that read the input on during such
/// writes, to see its end, left what it read unframed until more input
/// came: the official Python SDK's stdio client hung 4 runs in 12. That
/// change was withdrawn; this test stays as the case it missed.)
#[tokio::test(start_paused = true)]
async fn stdio_lines_read_during_a_blocked_write_are_answered() {
    use tokio::io::AsyncWriteExt;
    let server = McpServer::builder("slow-reader", "1").build().unwrap();
    // Room for 64 bytes of output: initialize's reply waits for the client.
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64);
    to_server
        .write_all(stdio_session("{}", "").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    to_server
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a reply to every request")
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        ids.push(v["id"].clone());
    }
    assert_eq!(ids, [json!(0), json!(5)]);
    served.abort();
}

/// Over stdio, a request held past `max_in_flight` and then cancelled is
/// taken out unanswered, its tool never run (MCP: a cancelled request is
/// not processed further nor answered). The cancellation reached only
/// calls already started: the held request ran once a slot freed and was
/// answered.
#[tokio::test(start_paused = true)]
async fn stdio_cancelling_a_held_request_drops_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;
    let ran = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&ran);
    let server = McpServer::builder("held", "1")
        .max_in_flight(1)
        .tool(never_tool())
        .tool(Tool::new("work", json!({"type": "object"}), move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::text("worked")) }
        }))
        .build()
        .unwrap();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    let cancel = |id: u64| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{id}}}}}\n"
        )
    };
    // 1 runs and holds the only slot, 2 is held and cancelled, 1 is
    // cancelled (its slot frees), 3 runs.
    let rest = [
        stdio_call(1, "never"),
        stdio_call(2, "work"),
        cancel(2),
        cancel(1),
        stdio_call(3, "work"),
    ]
    .concat();
    to_server
        .write_all(stdio_session("{}", &rest).as_bytes())
        .await
        .unwrap();
    let mut ids = Vec::new();
    loop {
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        ids.push(v["id"].clone());
        if v["id"] == 3 {
            break;
        }
    }
    assert_eq!(ids, vec![json!(0), json!(3)], "replies");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the cancelled request's tool ran"
    );
    served.abort();
}

/// MCP's `ping`: "The receiver MUST respond promptly". Over stdio a ping
/// read while calls were at `max_in_flight` was held behind them (and
/// behind requests already held) until a call ended: a client checking
/// that the server is alive would have thought it gone. Found by a review.
#[tokio::test(start_paused = true)]
async fn stdio_ping_is_answered_while_calls_are_at_the_cap() {
    use tokio::io::AsyncWriteExt;
    let server = McpServer::builder("held", "1")
        .max_in_flight(1)
        .tool(never_tool())
        .build()
        .unwrap();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    // 1 runs and holds the only slot, 2 is held, then the ping.
    let rest = [
        stdio_call(1, "never"),
        stdio_call(2, "never"),
        "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n".to_string(),
    ]
    .concat();
    to_server
        .write_all(stdio_session("{}", &rest).as_bytes())
        .await
        .unwrap();
    let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 0, "{init}");
    // On the paused clock the runtime, idle, lets the 5 s pass at once if
    // the ping waits.
    let pong = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .expect("the ping answered while the calls run")
        .unwrap()
        .unwrap();
    let pong: Value = serde_json::from_str(&pong).unwrap();
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
    served.abort();
}

/// [`stdio_ping_is_answered_while_calls_are_at_the_cap`] over Streamable
/// HTTP: a session's ping waited for a place among its calls.
#[tokio::test]
async fn http_ping_is_answered_while_a_session_s_calls_are_at_the_cap() {
    let started = Arc::new(tokio::sync::Notify::new());
    let noted = Arc::clone(&started);
    let server = McpServer::builder("held", "1")
        .max_in_flight(1)
        .tool(Tool::new(
            "never",
            json!({"type": "object"}),
            move |_, _| {
                noted.notify_one();
                std::future::pending()
            },
        ))
        .build()
        .unwrap();
    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let headers = session_headers(&sid);
    let running = {
        let (addr, headers) = (h.addr, headers.map(|(k, v)| (k, v.to_string())));
        tokio::spawn(async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(
                addr,
                &headers,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"never","arguments":{}}}"#,
            )
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(30), started.notified())
        .await
        .expect("the call runs");
    let pong = tokio::time::timeout(
        Duration::from_secs(5),
        post(
            h.addr,
            &headers,
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        ),
    )
    .await
    .expect("the ping answered while the call runs");
    assert_eq!(pong.status, 200, "{}", pong.body);
    assert_eq!(
        pong.json(),
        json!({"jsonrpc": "2.0", "id": 2, "result": {}})
    );
    running.abort();
}

/// A stdio server whose `ask` tool asks the client for its roots (30 s
/// deadline) and says how that went, and whose `quick` tool answers at
/// once; one call at a time.
fn stdio_asking_server() -> McpServer {
    McpServer::builder("held", "1")
        .max_in_flight(1)
        .tool(Tool::new(
            "ask",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let asked = cx
                    .ask_client("roots/list", &json!({}), Duration::from_secs(30))
                    .await;
                Ok(ToolOutput::text(match asked {
                    Ok(_) => "answered".to_string(),
                    Err(e) => format!("no answer: {e:?}"),
                }))
            },
        ))
        .tool(Tool::new(
            "quick",
            json!({"type": "object"}),
            |_, _| async { Ok(ToolOutput::text("quick")) },
        ))
        .build()
        .unwrap()
}

/// Sends `ask` over stdio, then `quick` calls (`flood` bytes of them) and
/// the answer to the tool's question; returns the text of `ask`'s reply
/// and how long it took (paused time).
async fn ask_behind_held_calls(flood: usize) -> (String, Duration) {
    use tokio::io::AsyncWriteExt;
    let server = stdio_asking_server();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 1 << 20);
    let start = stdio_session(r#"{"roots":{}}"#, &stdio_call(1, "ask"));
    to_server.write_all(start.as_bytes()).await.unwrap();
    let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 0, "{init}");
    let asked: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(asked["method"], "roots/list", "{asked}");
    let mut calls = String::new();
    let mut id = 100;
    while calls.len() < flood {
        calls += &stdio_call(id, "quick");
        id += 1;
    }
    let answer = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"roots\":[]}}}}\n",
        asked["id"]
    );
    let writer = tokio::spawn(async move {
        let _ = to_server.write_all(calls.as_bytes()).await;
        let _ = to_server.write_all(answer.as_bytes()).await;
        to_server
    });
    let t0 = tokio::time::Instant::now();
    let reply = loop {
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        if v["id"] == 1 {
            break v;
        }
    };
    writer.abort();
    served.abort();
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    (text, t0.elapsed())
}

/// Over stdio, a client's answer behind more than 64 KiB of requests
/// held at the cap is read while a tool waits for it (reading stopped at
/// 64 KiB, and the tool's question failed at its 30 s deadline, the
/// session stalled meanwhile); past 5 MiB of them, the question is given
/// up on a second later.
#[tokio::test(start_paused = true)]
async fn stdio_answers_behind_held_calls_are_read() {
    let (text, _) = ask_behind_held_calls(100 * 1024).await;
    assert_eq!(text, "answered");
    let (text, took) = ask_behind_held_calls(6 << 20).await;
    assert!(text.contains("Backlog"), "{text}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// Over stdio, `tools/call` sent as a notification past the cap is held
/// as a request is (and reading stops past 64 KiB of them): it was
/// started at once and waited in the dispatcher's queue, so that 20 MiB
/// of them were all read and queued (about 60 MiB). Found by a review.
#[tokio::test(start_paused = true)]
async fn stdio_calls_sent_as_notifications_past_the_cap_are_bounded() {
    use tokio::io::AsyncWriteExt;
    let server = McpServer::builder("held", "1")
        .max_in_flight(2)
        .tool(never_tool())
        .build()
        .unwrap();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    to_server
        .write_all(stdio_session("{}", "").as_bytes())
        .await
        .unwrap();
    let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 0, "{init}");
    let one = "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"never\",\"arguments\":{}}}\n";
    let flood = one.repeat((20 << 20) / one.len());
    let written = tokio::time::timeout(
        Duration::from_secs(60),
        to_server.write_all(flood.as_bytes()),
    )
    .await;
    assert!(
        written.is_err(),
        "20 MiB of calls past the cap were all read"
    );
    served.abort();
}

/// Over stdio, at the cap, a broken answer to a tool's question (an
/// object with the id the server gave and nothing else) ends the question
/// at once, as below the cap: it was held behind the very call waiting
/// for it, until the question's 30 s deadline. Found by a review.
#[tokio::test(start_paused = true)]
async fn stdio_a_broken_answer_at_the_cap_ends_its_question_at_once() {
    use tokio::io::AsyncWriteExt;
    let server = stdio_asking_server();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    let start = stdio_session(r#"{"roots":{}}"#, &stdio_call(1, "ask"));
    to_server.write_all(start.as_bytes()).await.unwrap();
    let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 0, "{init}");
    let asked: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(asked["method"], "roots/list", "{asked}");
    let t0 = tokio::time::Instant::now();
    let broken = format!("{{\"jsonrpc\":\"2.0\",\"id\":{}}}\n", asked["id"]);
    to_server.write_all(broken.as_bytes()).await.unwrap();
    let reply = loop {
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        if v["id"] == 1 {
            break v;
        }
        assert_ne!(v["id"], asked["id"], "the answer was answered: {v}");
    };
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("InvalidResponse"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    served.abort();
}

/// Over stdio, a message a tool writes raw, pretty-printed, goes out on
/// one line (its newlines as spaces, as the stream transports write it):
/// it went out as written, cut in lines that are not messages. Found by
/// a review.
#[tokio::test]
async fn stdio_raw_messages_with_newlines_stay_one_line() {
    use tokio::io::AsyncWriteExt;
    let server = McpServer::builder("raw", "1")
        .tool(Tool::new(
            "raw",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let peer = cx.connection().peer().expect("stdio has a way back");
                peer.notify_raw(
                    "notifications/message",
                    b"{\n  \"level\": \"info\",\r\n  \"data\": \"pretty\"\n}",
                )
                .unwrap();
                Ok(ToolOutput::text("done"))
            },
        ))
        .build()
        .unwrap();
    let (mut to_server, mut lines, served) = stdio_pipes(server, 64 * 1024);
    to_server
        .write_all(stdio_session("{}", &stdio_call(1, "raw")).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("a line")
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a line that is not a message: {line:?}: {e}"));
        let done = v["id"] == 1;
        got.push(v);
        if done {
            break;
        }
    }
    assert_eq!(got[1]["params"]["data"], "pretty", "{got:?}");
    served.abort();
}

/// MCP: "Unlike base JSON-RPC, the ID MUST NOT be `null`". A request with
/// `"id": null` was served over stdio (the dispatcher reads a null id as
/// a request, as JSON-RPC allows); it is -32600 now, not run, and the
/// session goes on. Found by a review.
#[tokio::test]
async fn stdio_a_request_with_a_null_id_is_refused() {
    use tokio::io::AsyncWriteExt;
    let (mut to_server, mut lines, served) = stdio_pipes(server(), 64 * 1024);
    let rest = concat!(
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
        "\n",
    );
    to_server
        .write_all(stdio_session("{}", rest).as_bytes())
        .await
        .unwrap();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("a line")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await["id"], 0);
    let refused = next().await;
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused.get("result").is_none(), "{refused}");
    assert_eq!(next().await["id"], 7);
    served.abort();
}

/// `tools/call` sent without an id (a notification) runs as a call, so it
/// takes a place among its session's calls like a request: such calls
/// skipped the cap (12 ran at once under a cap of 2) and ran on after
/// their client had gone. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_calls_sent_as_notifications_keep_the_session_s_cap() {
    use std::sync::atomic::Ordering;
    let (server, peak, ran) = counting_slow_tool(Duration::from_millis(300));
    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let mut calls = Vec::new();
    for _ in 0..12 {
        let (addr, sid) = (h.addr, sid.clone());
        calls.push(tokio::spawn(async move {
            let headers = [
                ("mcp-session-id", sid.as_str()),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            // Abandoned after 50 ms: the client is gone.
            let _ = tokio::time::timeout(
                Duration::from_millis(50),
                post(
                    addr,
                    &headers,
                    r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
                ),
            )
            .await;
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    crate::eventually::eventually("two calls ran", || ran.load(Ordering::SeqCst) >= 2).await;
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&peak),
        "{peak} calls of one session ran at once under a cap of 2"
    );
}

/// An `MCP-Protocol-Version` header that is not visible ASCII is an
/// invalid version (400, as the spec asks), not an absent one: the request
/// was served under the session's revision. Found by a review.
#[tokio::test]
async fn http_an_undecodable_version_header_is_400() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut raw = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\naccept: application/json, text/event-stream\r\n\
         content-type: application/json\r\nmcp-session-id: {sid}\r\nconnection: close\r\n\
         content-length: {}\r\nmcp-protocol-version: 2025-11-25",
        h.addr,
        body.len()
    )
    .into_bytes();
    raw.push(0xff);
    raw.extend_from_slice(b"\r\n\r\n");
    raw.extend_from_slice(body.as_bytes());
    let mut s = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    s.write_all(&raw).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .expect("hang")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("unsupported MCP-Protocol-Version"),
        "{answer}"
    );
}

/// `initialize` is a request: sent without an id (a notification, which
/// gets no reply) it initializes no session and re-initializes none, as
/// the server could not tell the client the revision it chose
/// (lifecycle: "The client MUST initiate this phase by sending an
/// initialize request"; "the server MUST respond with its own
/// capabilities"). It initialized a fresh connection unseen, and switched
/// a 2025-06-18 session to 2025-11-25's rules. Found by a review.
#[tokio::test]
async fn initialize_sent_as_a_notification_changes_no_session() {
    let s = server();
    let mut conn = s.connection("memory");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{}}}"#,
    )
    .await;
    assert_eq!(r, Value::Null, "{r}");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(
        r["error"]["code"], -32600,
        "served without a handshake: {r}"
    );

    let mut conn = s.connection("memory");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}}}}"#,
    )
    .await;
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    let bad_call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"steps","arguments":{}}}"#;
    assert_eq!(send(&s, &mut conn, bad_call).await["error"]["code"], -32602);
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
    )
    .await;
    assert_eq!(r, Value::Null);
    let r = send(&s, &mut conn, bad_call).await;
    assert_eq!(
        r["error"]["code"], -32602,
        "the session's revision changed: {r}"
    );
}

/// MCP's `serve` takes no connection once its shutdown has completed: an
/// unbiased select took one waiting in the backlog about half the time
/// (and served it). Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_no_connection_after_its_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut answered = 0;
    for _round in 0..10 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..16 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .await
                .unwrap();
            clients.push(c);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let endpoint =
            rpcwire::mcp::http::Endpoint::new(server(), rpcwire::mcp::http::HttpConfig::default());
        // The shutdown has completed before serving starts.
        let served = rpcwire::mcp::http::serve(endpoint, listener, std::future::ready(()));
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("serve returns")
            .unwrap();
        for mut c in clients {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_millis(200), c.read(&mut buf)).await;
            if let Ok(Ok(n)) = read
                && n > 0
                && buf.starts_with(b"HTTP/1.1")
            {
                answered += 1;
            }
        }
    }
    assert_eq!(answered, 0, "connections answered after the shutdown");
}

/// MCP's params are an object. An array was read by position into the
/// params' fields: over Streamable HTTP `[[1]]` made `1` the `_meta`'s
/// protocol version, so a request of the session's revision got the
/// 2026-07-28 header checks (400, -32020); everywhere, `tools/list` read
/// `[null, "c"]` as a cursor, and an array's first value was echoed back
/// as a progress token (deeper than serde_json reads, from params within
/// the depth limit). Now -32602 naming `params`, on every transport, and
/// the HTTP layer no longer reads an array's values as members. Found by
/// a review.
#[tokio::test]
async fn params_that_are_an_array_are_refused_not_read_by_position() {
    let server = server();
    let mut conn = server.connection("memory");
    send(
        &server,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
    )
    .await;
    send(
        &server,
        &mut conn,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    for (method, params) in [
        ("tools/list", r#"[null,"c"]"#),
        ("ping", r#"[{"progressToken":[[1]]}]"#),
        ("tools/call", r#"["steps",{"n":1}]"#),
    ] {
        let r = send(
            &server,
            &mut conn,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#),
        )
        .await;
        assert_eq!(r["error"]["code"], -32602, "{method}: {r}");
        assert_eq!(r["error"]["data"]["field"], "params", "{method}: {r}");
    }
    // An empty array is no params, as generic JSON-RPC clients send.
    let r = send(
        &server,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}"#,
    )
    .await;
    assert_eq!(r["result"], json!({}), "{r}");

    let h = http_server(server).await;
    let sid = http_session(h.addr).await;
    let headers = session_headers(&sid);
    let a = post(
        h.addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":2,"method":"nope","params":[[1]]}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["error"]["code"], -32601, "{}", a.body);
}

/// JSON nested past the parser's depth in a request's params was answered
/// 200 with the dispatcher's refusal (id null): serde_json's peek at the
/// envelope skips `params` with no depth limit, so the body passed as a
/// request. Now 400, as every other body the parser refuses whole, with
/// the refusal's `data`; with or without a session.
#[tokio::test]
async fn http_requests_nested_too_deep_get_400() {
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for (headers, method) in [
        (session_headers(&sid).to_vec(), "ping"),
        (session_headers(&sid).to_vec(), "tools/call"),
        (Vec::new(), "initialize"),
    ] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{"a":{deep}}}}}"#);
        let a = post(h.addr, &headers, &body).await;
        assert_eq!(a.status, 400, "{method}: {}", a.body);
        let e = &a.json()["error"];
        assert!(e["code"].is_i64(), "{method}: {e}");
        assert!(e["data"]["reason"].is_string(), "{method}: {e}");
        assert_eq!(a.json()["id"], serde_json::Value::Null, "{}", a.body);
    }
    // Within the depth: answered.
    let shallow = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let body = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"a":{shallow}}}}}"#);
    let a = post(h.addr, &session_headers(&sid), &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
}

/// Over Streamable HTTP a body that is not JSON got -32700 without the
/// `data` (`offset`, `reason`) every other transport, MCP's stdio
/// included, gives; and a compressed body was read as JSON (-32700) where
/// rpcwire's HTTP transport answers 415 and asks for it uncompressed.
/// Found by a review.
#[tokio::test]
async fn http_bodies_that_are_not_json_or_are_compressed_are_told_why() {
    let h = http_server(server()).await;
    let sid = http_session(h.addr).await;
    let headers = session_headers(&sid);
    for body in [
        r#"{"jsonrpc":"2.0","id":1,]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#,
    ] {
        let a = post(h.addr, &headers, body).await;
        assert_eq!(a.status, 400, "{}", a.body);
        let e = &a.json()["error"];
        assert_eq!(e["code"], -32700, "{body}: {e}");
        assert!(e["data"]["offset"].is_u64(), "{body}: {e}");
        assert!(e["data"]["reason"].is_string(), "{body}: {e}");
    }
    let gzip = [headers[0], headers[1], ("content-encoding", "gzip")];
    let a = post(h.addr, &gzip, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    assert_eq!(a.status, 415, "{}", a.body);
    assert_eq!(a.headers["accept-encoding"], "identity");
    assert_eq!(a.json()["error"]["code"], -32600, "{}", a.body);
    let identity = [headers[0], headers[1], ("content-encoding", "identity")];
    let a = post(
        h.addr,
        &identity,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
}

/// Over stdio a `tools/call` sent as a notification (no id: no reply owed,
/// no message slot) runs as a call does; but the loop polled the
/// dispatcher only while a message waited for its reply or a request was
/// held, so the call's wakes reached a task that never polled it: the
/// tool stopped at its first `.await` until some request came. Found by a
/// review of the crate's waits for lost wakeups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_a_tool_called_as_a_notification_runs_on() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let done = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&done);
    let server = McpServer::builder("wake", "1")
        .tool(Tool::new(
            "slow",
            json!({"type": "object"}),
            move |_: Value, _: ToolContext| {
                let counted = Arc::clone(&counted);
                async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text("done"))
                }
            },
        ))
        .build()
        .unwrap();
    let (mut to_server, server_input) = tokio::io::duplex(64 * 1024);
    let (server_output, from_server) = tokio::io::duplex(64 * 1024);
    let served =
        tokio::spawn(async move { server.serve_stream(server_input, server_output).await });
    let mut lines = tokio::io::BufReader::new(from_server).lines();
    let session = concat!(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
        "\n",
    );
    to_server.write_all(session.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .expect("initialize answered")
        .unwrap()
        .unwrap();
    // The input stays open and nothing more comes: the tool's 100 ms
    // sleep ends on its own (a bound far above it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while done.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool called as a notification never got past its first await"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(to_server);
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the server ends with its input")
        .unwrap()
        .unwrap();
}
