//! Streamable HTTP from the client's side for the MCP tests
//! (tests/transports/mcp.rs, mcp_edges.rs): a server on loopback, requests
//! with hyper's client, answers with their SSE events read as EventSource
//! reads them.
#![allow(dead_code)]

use bytes::Bytes;
use rpcwire::mcp::McpServer;
use rpcwire::mcp::http::{Endpoint, HttpConfig};
use serde_json::Value;
use std::time::Duration;

pub struct Http {
    pub addr: std::net::SocketAddr,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Http {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// One message through the layer, in memory; `Value::Null` when no reply.
pub async fn in_memory(server: &McpServer, conn: &mut rpcwire::Connection, msg: &str) -> Value {
    let mut out = Vec::new();
    if !server
        .handle(&Bytes::copy_from_slice(msg.as_bytes()), conn, &mut out)
        .await
    {
        return Value::Null;
    }
    serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
}

pub async fn http_server(server: McpServer) -> Http {
    http_server_with(server, HttpConfig::default()).await
}

pub async fn http_server_with(server: McpServer, config: HttpConfig) -> Http {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel();
    let endpoint = Endpoint::new(server, config);
    tokio::spawn(rpcwire::mcp::http::serve(endpoint, listener, async {
        let _ = rx.await;
    }));
    Http {
        addr,
        stop: Some(stop),
    }
}

pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    /// The events of an SSE body, parsed as the EventSource rules say:
    /// lines end at CRLF, LF or CR; `data` fields of one event are joined
    /// with LF; a line without a colon is a field with an empty value (so
    /// it is ignored); an event ends at a blank line. Each event's data
    /// must be one JSON value.
    pub fn events(&self) -> Vec<Value> {
        let mut events = Vec::new();
        let mut data: Option<String> = None;
        let body = self.body.replace("\r\n", "\n").replace('\r', "\n");
        for line in body.split('\n') {
            if line.is_empty() {
                if let Some(mut d) = data.take() {
                    d.pop();
                    events.push(
                        serde_json::from_str(&d)
                            .unwrap_or_else(|e| panic!("event data {d:?} is not JSON: {e}")),
                    );
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            if field == "data" {
                let d = data.get_or_insert_with(String::new);
                d.push_str(value);
                d.push('\n');
            }
        }
        if let Some(mut d) = data {
            // The last event, cut short by the end of the body.
            d.pop();
            events.push(
                serde_json::from_str(&d)
                    .unwrap_or_else(|e| panic!("event data {d:?} is not JSON: {e}")),
            );
        }
        events
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .map_or("", |v| v.to_str().unwrap())
    }
}

/// Sends one request to the server's `/mcp` on a connection of its own;
/// returns the answer's head and body (the sender keeps the connection).
pub async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (
    hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
    hyper::Response<hyper::body::Incoming>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}/mcp"))
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(http_body_util::Full::new(Bytes::copy_from_slice(
            body.as_bytes(),
        )))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .expect("no answer within 10 s")
        .unwrap();
    (sender, resp)
}

pub async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    use http_body_util::BodyExt;
    let (_sender, resp) = send(addr, method, headers, body).await;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

pub const JSON_SSE: (&str, &str) = ("accept", "application/json, text/event-stream");
pub const CT: (&str, &str) = ("content-type", "application/json");

pub async fn post(addr: std::net::SocketAddr, extra: &[(&str, &str)], body: &str) -> Answer {
    let mut h = vec![JSON_SSE, CT];
    h.extend_from_slice(extra);
    request(addr, "POST", &h, body).await
}

/// The headers every request of session `sid` carries (revision
/// 2025-11-25).
pub fn session_headers(sid: &str) -> [(&'static str, &str); 2] {
    [
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ]
}

pub async fn http_session(addr: std::net::SocketAddr) -> String {
    http_session_with(addr, "{}").await
}

/// [`http_session`] for a client declaring `capabilities` (a JSON object:
/// `{"sampling":{}}` for one the server may ask).
pub async fn http_session_with(addr: std::net::SocketAddr, capabilities: &str) -> String {
    let initialize = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{capabilities},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    );
    let a = post(addr, &[], &initialize).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.content_type(), "application/json");
    assert_eq!(a.json()["result"]["protocolVersion"], "2025-11-25");
    let sid = a.headers["mcp-session-id"].to_str().unwrap().to_owned();
    assert_eq!(sid.len(), 32);
    let n = post(
        addr,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(n.status, 202);
    assert!(n.body.is_empty());
    sid
}

/// A POST whose answer is read event by event while the call runs (a
/// tool that asks the client something waits for the answer the test
/// POSTs meanwhile).
pub struct OpenPost {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
    /// Kept: the connection closes when it goes.
    _sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
}

impl OpenPost {
    pub async fn new(addr: std::net::SocketAddr, extra: &[(&str, &str)], body: &str) -> OpenPost {
        let mut headers = vec![JSON_SSE, CT];
        headers.extend_from_slice(extra);
        let (sender, resp) = send(addr, "POST", &headers, body).await;
        OpenPost {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.into_body(),
            buffer: Vec::new(),
            _sender: sender,
        }
    }

    /// The next event's data as JSON (events of this server are single
    /// `data` lines of JSON without line breaks), `None` at the end of
    /// the stream. Panics after 10 s without one.
    pub async fn next(&mut self) -> Option<Value> {
        use http_body_util::BodyExt;
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8(event).unwrap();
                let data: String = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .collect::<Vec<_>>()
                    .join("\n");
                if data.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}")));
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("no event within 10 s")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

/// A server whose tool `ask-client` asks the client (as sampling does):
/// progress 1 before it asks, 2 after the answer, and a text result that
/// tells how the asking went (`answered <result JSON>`, `answered error
/// <code>`, or `no answer: <PeerError>`). `ask-politely` and `ask-within`
/// ask through `ToolContext::ask_client` instead, the latter waiting
/// `arguments.ms` for the answer.
pub fn asking_server() -> McpServer {
    use rpcwire::mcp::{Tool, ToolContext, ToolOutput};
    McpServer::builder("test-server", "9.9.9")
        .tool(Tool::new(
            "ask-client",
            serde_json::json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let peer = cx.connection().peer().expect("a two-way transport").clone();
                cx.progress(1.0, None, Some("asking"));
                let asked = peer
                    .request(
                        "sampling/createMessage",
                        Some(&serde_json::json!({"messages": []})),
                        Duration::from_secs(3600),
                    )
                    .await;
                cx.progress(2.0, None, Some("asked"));
                Ok(ToolOutput::text(match asked {
                    Ok(r) => match r.result() {
                        Ok(json) => format!("answered {}", String::from_utf8_lossy(json)),
                        Err(e) => format!("answered error {}", e.code),
                    },
                    Err(e) => format!("no answer: {e:?}"),
                }))
            },
        ))
        .tool(Tool::new(
            "ask-politely",
            serde_json::json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                // Through the checked way: refused when the revision or the
                // client's capabilities forbid it.
                let asked = cx
                    .ask_client(
                        "sampling/createMessage",
                        &serde_json::json!({"messages": []}),
                        Duration::from_secs(3600),
                    )
                    .await;
                Ok(ToolOutput::text(match asked {
                    Ok(r) => format!("answered {}", String::from_utf8_lossy(r.result().unwrap())),
                    Err(e) => format!("refused: {e:?}"),
                }))
            },
        ))
        .tool(ask_within_tool())
        .tool(Tool::new(
            "ask-in-rounds",
            serde_json::json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                // 2026-07-28's multi-round-trip requests.
                if let Some(answer) = cx.input_response("a") {
                    return Ok(ToolOutput::text(format!(
                        "got {answer} with state {:?}",
                        cx.request_state()
                    )));
                }
                Ok(ToolOutput::input_required(
                    [(
                        "a",
                        rpcwire::mcp::InputRequest::sampling(serde_json::json!({"messages": []})),
                    )],
                    Some("s1".into()),
                ))
            },
        ))
        .build()
        .unwrap()
}

/// `ask-within`: asks the client through `ToolContext::ask_client`,
/// waiting `arguments.ms` for the answer, and tells how it went
/// (`answered <result JSON>` or `no answer: <AskError>`).
pub fn ask_within_tool() -> rpcwire::mcp::Tool {
    use rpcwire::mcp::{Tool, ToolContext, ToolOutput};
    Tool::new(
        "ask-within",
        serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}),
        |args: Value, cx: ToolContext| async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            let asked = cx
                .ask_client(
                    "sampling/createMessage",
                    &serde_json::json!({"messages": []}),
                    Duration::from_millis(ms),
                )
                .await;
            Ok(ToolOutput::text(match asked {
                Ok(r) => format!("answered {}", String::from_utf8_lossy(r.result().unwrap())),
                Err(e) => format!("no answer: {e:?}"),
            }))
        },
    )
}
