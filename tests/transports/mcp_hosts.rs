//! The `Host` allowlist of MCP's Streamable HTTP endpoint
//! (`HttpConfig::allowed_hosts`), the defence against DNS rebinding that
//! rpcwire's JSON-RPC HTTP and WebSocket servers have: a server started
//! with `mcp::http::serve` on loopback, requests written by hand over TCP
//! (a client library would name the host it connected to).

use rpcwire::mcp::http::{Endpoint, HttpConfig};
use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
use rpcwire::server::hosts::AllowedHosts;
use serde_json::{Value, json};

use crate::http_request;

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn server() -> McpServer {
    McpServer::builder("hosts", "1.0.0")
        .tool(Tool::new(
            "echo",
            json!({"type": "object"}),
            |args: Value, _cx: ToolContext| async move { Ok(ToolOutput::text(args.to_string())) },
        ))
        .build()
        .unwrap()
}

/// A served endpoint; kept so that its sessions can be counted. Stops
/// serving when dropped.
struct Served {
    addr: std::net::SocketAddr,
    endpoint: Endpoint,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve(allowed_hosts: Option<AllowedHosts>) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = HttpConfig {
        allowed_hosts,
        ..HttpConfig::default()
    };
    let endpoint = Endpoint::new(server(), config);
    let (stop, stopped) = tokio::sync::oneshot::channel();
    tokio::spawn(rpcwire::mcp::http::serve(
        endpoint.clone(),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    Served {
        addr,
        endpoint,
        _stop: stop,
    }
}

/// An answer read off the socket: its status, its head (lower case), and
/// its JSON body (the text between the body's outer braces: it may come
/// chunked), if it has one.
struct Answer {
    status: u16,
    head: String,
    json: Option<Value>,
    raw: String,
}

/// Sends `head` (its request line and headers, each line ending in CRLF;
/// `connection: close` is added) with `body`, and reads the answer to the
/// end of the connection.
async fn raw(addr: std::net::SocketAddr, head: &str, body: &str) -> Answer {
    let request = format!(
        "{head}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, raw) = http_request::exchange(addr, &request).await;
    let end = raw.find("\r\n\r\n").expect("a whole head");
    let (head, body) = (raw[..end].to_ascii_lowercase(), &raw[end + 4..]);
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => {
            Some(serde_json::from_str(&body[a..=b]).unwrap_or_else(|e| panic!("{e}: {raw}")))
        }
        _ => None,
    };
    Answer {
        status,
        head,
        json,
        raw,
    }
}

/// A `POST /mcp` of `body` naming `host` (no `Host` line when empty),
/// with the headers every MCP client sends.
async fn post(addr: std::net::SocketAddr, host: &str, extra: &str, body: &str) -> Answer {
    let host = if host.is_empty() {
        String::new()
    } else {
        format!("host: {host}\r\n")
    };
    let head = format!(
        "POST /mcp HTTP/1.1\r\n{host}accept: application/json, text/event-stream\r\n\
         content-type: application/json\r\n{extra}"
    );
    raw(addr, &head, body).await
}

/// The refusal rpcwire's JSON-RPC HTTP server gives a host it does not
/// list: `403`, a -32600 body without id naming the host, no session, and
/// the connection closed.
fn assert_refused(a: &Answer, host: &str) {
    assert_eq!(a.status, 403, "{}", a.raw);
    let v = a
        .json
        .as_ref()
        .unwrap_or_else(|| panic!("no body: {}", a.raw));
    assert_eq!(v["jsonrpc"], "2.0", "{}", a.raw);
    assert_eq!(v["id"], Value::Null, "{}", a.raw);
    assert_eq!(v["error"]["code"], -32600, "{}", a.raw);
    assert_eq!(
        v["error"]["data"]["reason"], "host not allowed",
        "{}",
        a.raw
    );
    assert_eq!(v["error"]["data"]["host"], host, "{}", a.raw);
    assert!(
        a.head.contains("content-type: application/json"),
        "{}",
        a.raw
    );
    assert!(a.head.contains("connection: close"), "{}", a.raw);
    assert!(!a.head.contains("mcp-session-id"), "{}", a.raw);
}

/// A successful `initialize`: `200`, its result, a new session.
fn assert_initialized(a: &Answer) -> String {
    assert_eq!(a.status, 200, "{}", a.raw);
    let v = a
        .json
        .as_ref()
        .unwrap_or_else(|| panic!("no body: {}", a.raw));
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25", "{}", a.raw);
    let sid = a
        .head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("no session: {}", a.raw));
    sid.to_owned()
}

/// With an allowlist, an `initialize` naming the attacker's host (a
/// rebound page's) is refused as rpcwire's HTTP server refuses it, before
/// anything is run: no session exists after it. Naming the host in an
/// absolute-form target counts as naming it in `Host` (the target's
/// authority is the request's host, as `AllowedHosts` reads it), and a
/// request of a session (here `DELETE` of a real one) is refused the same:
/// the session lives on. Before the check, each of these was served (the
/// `initialize` got `200` and a session).
#[tokio::test]
async fn http_a_host_not_listed_is_refused_and_opens_no_session() {
    let s = serve(Some(AllowedHosts::list(["localhost"]).unwrap())).await;
    let port = s.addr.port();
    let attacker = format!("attacker.example:{port}");
    for host in ["attacker.example", attacker.as_str()] {
        let a = post(s.addr, host, "", INIT).await;
        assert_refused(&a, host);
        assert_eq!(s.endpoint.sessions(), 0, "{}", a.raw);
    }
    // A listed name in `Host`, the attacker's in the target.
    let head = format!(
        "POST http://attacker.example:{port}/mcp HTTP/1.1\r\nhost: localhost:{port}\r\n\
         accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
    );
    assert_refused(&raw(s.addr, &head, INIT).await, &attacker);
    assert_eq!(s.endpoint.sessions(), 0);

    // A session opened by a listed host cannot be used or ended through
    // the attacker's name.
    let local = format!("localhost:{port}");
    let sid = assert_initialized(&post(s.addr, &local, "", INIT).await);
    assert_eq!(s.endpoint.sessions(), 1);
    let session = format!("mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n");
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_refused(
        &post(s.addr, "attacker.example", &session, call).await,
        "attacker.example",
    );
    let delete = format!("DELETE /mcp HTTP/1.1\r\nhost: attacker.example\r\n{session}");
    assert_refused(&raw(s.addr, &delete, "").await, "attacker.example");
    let get = format!(
        "GET /mcp HTTP/1.1\r\nhost: attacker.example\r\naccept: text/event-stream\r\n{session}"
    );
    assert_refused(&raw(s.addr, &get, "").await, "attacker.example");
    assert_eq!(s.endpoint.sessions(), 1);
    let listed = post(s.addr, &local, &session, call).await;
    assert_eq!(listed.status, 200, "{}", listed.raw);
    assert_eq!(
        listed.json.as_ref().unwrap()["result"]["tools"][0]["name"],
        "echo",
        "{}",
        listed.raw
    );
}

/// With an allowlist, the names it lists (any port, any case) and IP
/// addresses (a rebound page names no address) are served as without it.
#[tokio::test]
async fn http_listed_hosts_and_addresses_are_served() {
    let s = serve(Some(AllowedHosts::list(["localhost"]).unwrap())).await;
    let port = s.addr.port();
    let hosts = [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "LOCALHOST".to_owned(),
        format!("[::1]:{port}"),
    ];
    for (i, host) in hosts.iter().enumerate() {
        assert_initialized(&post(s.addr, host, "", INIT).await);
        assert_eq!(s.endpoint.sessions(), i + 1);
    }
}

/// Without an allowlist (the default) the host is not looked at: the
/// attacker's name is served, as before.
#[tokio::test]
async fn http_without_an_allowlist_any_host_is_served() {
    assert!(HttpConfig::default().allowed_hosts.is_none());
    let s = serve(None).await;
    assert_initialized(&post(s.addr, "attacker.example", "", INIT).await);
    assert_eq!(s.endpoint.sessions(), 1);
    // `AllowedHosts::any()` is the same as none.
    let s = serve(Some(AllowedHosts::any())).await;
    assert_initialized(&post(s.addr, "attacker.example", "", INIT).await);
    assert_eq!(s.endpoint.sessions(), 1);
}

/// An HTTP/1.1 request without one `Host` is still `serve`'s `400` (RFC
/// 9112 §3.2) with an allowlist, not a `403`: rpcwire's HTTP servers answer
/// it so too. HTTP/1.0 needs no `Host`: served, as no browser sends one.
#[tokio::test]
async fn http_without_one_host_an_http11_request_is_still_a_bad_request() {
    let s = serve(Some(AllowedHosts::list(["localhost"]).unwrap())).await;
    let no_host = "an HTTP/1.1 request needs exactly one Host header, with a valid host";
    let a = post(s.addr, "", "", INIT).await;
    assert_eq!(a.status, 400, "{}", a.raw);
    assert_eq!(a.json.as_ref().unwrap()["error"]["code"], -32600);
    assert_eq!(a.json.as_ref().unwrap()["error"]["data"]["reason"], no_host);
    let a = post(s.addr, "localhost", "host: attacker.example\r\n", INIT).await;
    assert_eq!(a.status, 400, "{}", a.raw);
    assert_eq!(a.json.as_ref().unwrap()["error"]["data"]["reason"], no_host);
    assert_eq!(s.endpoint.sessions(), 0);
    let head = "POST /mcp HTTP/1.0\r\naccept: application/json, text/event-stream\r\n\
                content-type: application/json\r\n";
    assert_initialized(&raw(s.addr, head, INIT).await);
}
