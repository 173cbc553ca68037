//! The MCP layer without SDK clients: every method, lifecycle order and
//! error, in memory, over the stdio loop (a duplex pipe), and over
//! Streamable HTTP on loopback with hyper's client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rpcwire::mcp::http::HttpConfig;
use rpcwire::mcp::{Content, LogLevel, McpServer, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::eventually::eventually;
use crate::mcp_http;
use crate::mcp_http::{
    CT, JSON_SSE, asking_server, http_server, http_server_with, http_session, in_memory as send,
    post, request,
};

const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn build_app() -> Tool {
    Tool::new(
        "build-app",
        json!({
            "type": "object",
            "properties": {
                "project_dir": {"type": "string"},
                "configuration": {"type": "string", "enum": ["Debug", "Release"]},
                "arch": {"type": "string", "enum": ["arm64", "x86_64"]}
            },
            "required": ["project_dir", "arch"]
        }),
        |args: Value, cx: ToolContext| async move {
            for p in [1.0, 1.0, 2.0, 0.5, 3.0] {
                cx.progress(p, Some(3.0), None);
            }
            for level in LogLevel::ALL {
                cx.log(level, Some("test"), level.as_str());
            }
            Ok(ToolOutput::structured(json!({
                "status": "ok",
                "artifact": format!("{}/app", args["project_dir"].as_str().unwrap()),
                "configuration": args["configuration"].as_str().unwrap_or("Debug"),
                "arch": args["arch"],
            })))
        },
    )
    .title("Build")
    .description("builds")
    .output_schema(json!({
        "type": "object",
        "properties": {"status": {"const": "ok"}},
        "required": ["status", "artifact"]
    }))
}

fn server() -> McpServer {
    McpServer::builder("test-server", "9.9.9")
        .instructions("be nice")
        .tool(build_app())
        .tool(Tool::new("lint-check", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("clean"))
        }))
        .tool(Tool::new(
            "wait",
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            |args: Value, _cx| async move {
                tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap())).await;
                Ok(ToolOutput::text("waited"))
            },
        ))
        .tool(Tool::new("fails", json!({"type": "object"}), |_, _| async {
            Err(ToolError::new("the disk is on fire"))
        }))
        .tool(
            Tool::new("bad-output", json!({"type": "object"}), |_, _| async {
                Ok(ToolOutput::structured(json!({"status": "nope"})))
            })
            .output_schema(json!({"type": "object", "properties": {"status": {"const": "ok"}}})),
        )
        .tool(Tool::new("echo", json!({"type": "object"}), |args: Value, _| async move {
            // Structured content given back as it came, with a text block of
            // its own when asked (then nothing is mirrored).
            let out = ToolOutput::structured(args.clone());
            Ok(match args["note"].as_str() {
                Some(note) => out.with(Content::text(note)),
                None => out,
            })
        }))
        .tool(Tool::new("blocks", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("t")
                .with(Content::image("aGk=", "image/png"))
                .with(Content::audio("aGk=", "audio/wav"))
                .with(Content::resource_link("file:///a.txt", "a.txt"))
                .with(Content::embedded_text("file:///b.txt", Some("text/plain".into()), "bee"))
                .with(Content::embedded_blob("file:///c.bin", None, "AAE=")))
        }))
        .build()
        .unwrap()
}

async fn initialized(server: &McpServer, version: &str) -> rpcwire::Connection {
    let mut conn = server.connection("memory");
    let r = send(
        server,
        &mut conn,
        &format!(r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#),
    )
    .await;
    assert_eq!(r["result"]["protocolVersion"], version, "{r}");
    assert_eq!(
        send(
            server,
            &mut conn,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        )
        .await,
        Value::Null
    );
    conn
}

fn call_msg(id: u64, tool: &str, args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
    )
}

// ------------------------------------------------------------ lifecycle

#[tokio::test]
async fn initialize_negotiates_a_version() {
    let s = server();
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2030-01-01", "2025-11-25"),
    ] {
        let mut conn = s.connection("memory");
        let r = send(&s, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{asked}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#)).await;
        assert_eq!(r["result"]["protocolVersion"], answered);
        assert_eq!(
            r["result"]["serverInfo"],
            json!({"name": "test-server", "version": "9.9.9"})
        );
        assert_eq!(r["result"]["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(r["result"]["instructions"], "be nice");
        assert!(r["result"].get("resultType").is_none());
    }
    let mut conn = s.connection("memory");
    // An earlier revision gets ours (the spec's MUST); a version that is
    // not a revision is refused, with what is supported.
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{}}}"#).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    let mut conn = s.connection("memory");
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1.0.0","capabilities":{}}}"#).await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["data"],
        json!({"supported": ["2025-11-25", "2025-06-18"], "requested": "1.0.0"})
    );
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["field"], "protocolVersion");
}

#[tokio::test]
async fn requests_before_initialize() {
    let s = server();
    let mut conn = s.connection("memory");
    // What clients really send early is answered.
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    assert_eq!(r["result"], json!({}));
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"error"}}"#,
    )
    .await;
    assert_eq!(r["result"], json!({}));
    // The rest needs the handshake (or 2026-07-28 _meta).
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = send(&s, &mut conn, &call_msg(4, "lint-check", "{}")).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // After initialize (before notifications/initialized) it is served.
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 7);
    // Re-initialize: a new revision for the connection.
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    let r = send(&s, &mut conn, &call_msg(8, "lint-check", "{}")).await;
    assert_eq!(r["result"]["content"][0]["text"], "clean");
}

#[tokio::test]
async fn discover_then_call_2026() {
    let s = server();
    let mut conn = s.connection("memory");
    let r = send(
        &s,
        &mut conn,
        &format!(
            r#"{{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{{{MODERN_META}}}}}"#
        ),
    )
    .await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete");
    assert_eq!(
        res["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"])
    );
    assert_eq!(res["ttlMs"], 0);
    assert_eq!(res["cacheScope"], "public");
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
    assert!(res["capabilities"]["tools"].is_object());
    let r = send(
        &s,
        &mut conn,
        &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{MODERN_META}}}}}"#),
    )
    .await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["cacheScope"], "public");
    assert!(r["result"]["ttlMs"].is_u64());
    let r = send(&s, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"build-app","arguments":{{"project_dir":"/p","arch":"arm64"}},{MODERN_META}}}}}"#)).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["structuredContent"]["artifact"], "/p/app");
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["version"],
        "9.9.9"
    );
    // ping and logging/setLevel are gone in 2026-07-28.
    for m in ["ping", "logging/setLevel"] {
        let r = send(&s, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":3,"method":"{m}","params":{{"level":"info",{MODERN_META}}}}}"#)).await;
        assert_eq!(r["error"]["code"], -32601, "{m}: {r}");
    }
}

#[tokio::test]
async fn modern_errors() {
    let s = server();
    let mut conn = s.connection("memory");
    for method in ["server/discover", "tools/list", "tools/call"] {
        let r = send(&s, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"lint-check","_meta":{{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#)).await;
        assert_eq!(r["error"]["code"], -32022, "{method}: {r}");
        assert_eq!(
            r["error"]["data"],
            json!({"supported": ["2026-07-28", "2025-11-25", "2025-06-18"], "requested": "1900-01-01"})
        );
    }
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["data"]["field"],
        "_meta.io.modelcontextprotocol/clientCapabilities"
    );
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}}}"#).await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["received"], "loud");
}

#[tokio::test]
async fn unknown_methods_and_batches() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32601);
    let r = send(
        &s,
        &mut conn,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32600);
    assert_eq!(r["id"], Value::Null);
    let r = send(&s, &mut conn, " \n[]").await;
    assert_eq!(r["error"]["code"], -32600);
    // Still serving.
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    assert_eq!(r["result"], json!({}));
    let r = send(&s, &mut conn, "{not json").await;
    assert_eq!(r["error"]["code"], -32700);
}

// ---------------------------------------------------------------- tools

#[tokio::test]
async fn tools_list_pages() {
    let mut b = McpServer::builder("p", "1").page_size(4);
    for i in 0..10 {
        b = b.tool(Tool::new(
            format!("t{i:02}"),
            json!({"type": "object"}),
            |_, _| async { Ok(ToolOutput::text("x")) },
        ));
    }
    let s = b.build().unwrap();
    let mut conn = initialized(&s, "2025-11-25").await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let params = match &cursor {
            Some(c) => format!(r#","params":{{"cursor":"{c}"}}"#),
            None => String::new(),
        };
        let r = send(
            &s,
            &mut conn,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list"{params}}}"#),
        )
        .await;
        for t in r["result"]["tools"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_owned());
        }
        cursor = r["result"]["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(
        names,
        (0..10).map(|i| format!("t{i:02}")).collect::<Vec<_>>()
    );
    for bad in ["nope", "p99", "p-1", "", "s99", "s-1", "s"] {
        let r = send(
            &s,
            &mut conn,
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"cursor":"{bad}"}}}}"#
            ),
        )
        .await;
        assert_eq!(r["error"]["code"], -32602, "{bad}");
        assert_eq!(r["error"]["message"], "Invalid cursor");
    }
}

#[tokio::test]
async fn tools_list_shows_the_definitions() {
    let s = server();
    let mut conn = initialized(&s, "2025-06-18").await;
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    let build = &r["result"]["tools"][0];
    assert_eq!(build["name"], "build-app");
    assert_eq!(build["title"], "Build");
    assert_eq!(build["description"], "builds");
    assert_eq!(
        build["inputSchema"]["required"],
        json!(["project_dir", "arch"])
    );
    assert_eq!(
        build["outputSchema"]["required"],
        json!(["status", "artifact"])
    );
    assert!(r["result"].get("nextCursor").is_none());
}

/// `McpServer::handle`, the entry point of a transport of one's own,
/// behaves as the dispatcher's `handle_async`: a future dropped before its
/// reply (a timeout around it) leaves nothing for the next message, and
/// `tools/call`s sent as notifications past `max_in_flight` start as
/// slots free. It was a copy of an older loop: the dropped call's reply
/// came out with the next message's (or the next waited for it), and the
/// notifications past the cap were never started (found by a review).
#[tokio::test(start_paused = true)]
async fn handle_drops_what_a_dropped_future_left_and_starts_queued_notifications() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let s = McpServer::builder("t", "1")
        .max_in_flight(1)
        .call_timeout(None)
        .tool(Tool::new(
            "never",
            json!({"type": "object"}),
            |_, _| async {
                std::future::pending::<()>().await;
                Ok(ToolOutput::text(""))
            },
        ))
        .tool(Tool::new(
            "count",
            json!({"type": "object"}),
            move |_, _| {
                let counted = Arc::clone(&counted);
                async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(""))
                }
            },
        ))
        .build()
        .unwrap();
    let mut conn = initialized(&s, "2025-11-25").await;
    let mut out = Vec::new();
    let never = Bytes::from(call_msg(1, "never", "{}").into_bytes());
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        s.handle(&never, &mut conn, &mut out),
    )
    .await;
    assert!(gave_up.is_err(), "the call never ends");
    assert_eq!(conn.messages_in_flight(), 0, "left behind");
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(r["id"], 2, "{r}");
    let note =
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"count","arguments":{}}}"#;
    for _ in 0..10 {
        let mut out = Vec::new();
        let wrote = tokio::time::timeout(
            Duration::from_secs(10),
            s.handle(&Bytes::from(note), &mut conn, &mut out),
        )
        .await
        .expect("handled");
        assert!(!wrote, "{}", String::from_utf8_lossy(&out));
    }
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    assert_eq!(r["id"], 3, "{r}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = send(&s, &mut conn, r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#).await;
    assert_eq!(r["id"], 4, "{r}");
    assert_eq!(ran.load(Ordering::SeqCst), 10, "every queued call ran");
}

/// A client's string echoed in an error (an unknown tool's name, a
/// cursor, a log level, a protocol version) is cut at 256 bytes with `…`,
/// as refused arguments are: a 100 KiB tool name made a reply twice that
/// (in the message and in `data.received`); found by a review.
#[tokio::test]
async fn errors_echo_at_most_256_bytes_of_a_client_s_string() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    let long = "n".repeat(100 * 1024);
    let r = send(&s, &mut conn, &call_msg(1, &long, "{}")).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Unknown tool: nnn") && message.ends_with('…'),
        "{message}"
    );
    assert!(message.len() < 300, "{}", message.len());
    let received = r["error"]["data"]["received"].as_str().unwrap();
    assert_eq!(received.len(), 256 + '…'.len_utf8());
    // A cursor and a log level, each as long.
    for (id, method, member) in [
        (2, "tools/list", "cursor"),
        (3, "logging/setLevel", "level"),
    ] {
        let msg = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"{member}":"{long}"}}}}"#
        );
        let r = send(&s, &mut conn, &msg).await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let received = r["error"]["data"]["received"].as_str().unwrap();
        assert_eq!(received.len(), 256 + '…'.len_utf8(), "{method}");
    }
    // A short one is whole.
    let r = send(&s, &mut conn, &call_msg(4, "nope", "{}")).await;
    assert_eq!(r["error"]["data"]["received"], "nope");
}

#[tokio::test]
async fn tools_call_checks_arguments_first() {
    let s = server();
    // 2025-06-18 lists bad arguments among the protocol errors.
    let mut conn = initialized(&s, "2025-06-18").await;
    let mut out = Vec::new();
    let msg = call_msg(1, "build-app", r#"{"project_dir":"/p","arch":"ARM"}"#);
    s.handle(&Bytes::from(msg.into_bytes()), &mut conn, &mut out)
        .await;
    let raw = String::from_utf8(out).unwrap();
    assert!(raw.contains(r#""code":-32602"#), "{raw}");
    // Exactly this data, members in this order.
    assert!(
        raw.contains(r#""data":{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}"#),
        "{raw}"
    );
    let r = send(
        &s,
        &mut conn,
        &call_msg(2, "build-app", r#"{"arch":"arm64"}"#),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["data"],
        json!({"field": "project_dir", "reason": "required property is missing"})
    );
    let r = send(
        &s,
        &mut conn,
        &call_msg(3, "build-app", r#"{"project_dir":7,"arch":"arm64"}"#),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["field"], "project_dir");
    assert_eq!(r["error"]["data"]["received"], 7);
    let r = send(&s, &mut conn, &call_msg(4, "build-app", "[1]")).await;
    assert_eq!(r["error"]["data"]["field"], "arguments");
    let r = send(&s, &mut conn, &call_msg(5, "nope", "{}")).await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["message"], "Unknown tool: nope");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"arguments":{}}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["field"], "name");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
}

#[tokio::test]
async fn structured_content_is_mirrored_as_exact_text_and_only_without_other_blocks() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    // Quotes, backslashes, control characters, non-ASCII, nesting, numbers.
    let args = r#"{"q":"say \"hi\" \\ back","c":"\u0001\n\t","u":"Adèle 東 😀","n":[1,-2.5,1e300,null,true],"o":{"k":{}}}"#;
    let r = send(&s, &mut conn, &call_msg(1, "echo", args)).await;
    let res = &r["result"];
    let sent: Value = serde_json::from_str(args).unwrap();
    assert_eq!(res["structuredContent"], sent);
    assert_eq!(res["content"].as_array().unwrap().len(), 1);
    assert_eq!(res["content"][0]["type"], "text");
    let text = res["content"][0]["text"].as_str().unwrap();
    assert_eq!(text, serde_json::to_string(&sent).unwrap());
    // A tool that gives content of its own is not mirrored.
    let r = send(&s, &mut conn, &call_msg(2, "echo", r#"{"note":"mine"}"#)).await;
    assert_eq!(
        r["result"]["content"],
        json!([{"type": "text", "text": "mine"}])
    );
    assert_eq!(r["result"]["structuredContent"], json!({"note": "mine"}));
    // 2026-07-28: resultType first, _meta last, in the same object.
    let msg = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"a":"\""}},{MODERN_META}}}}}"#
    );
    let r = send(&s, &mut rpcwire::Connection::new(), &msg).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], r#"{"a":"\""}"#);
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
}

#[tokio::test]
async fn tools_call_results() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    let r = send(
        &s,
        &mut conn,
        &call_msg(
            1,
            "build-app",
            r#"{"project_dir":"/p","arch":"x86_64","configuration":"Release"}"#,
        ),
    )
    .await;
    let res = &r["result"];
    let structured =
        json!({"status":"ok","artifact":"/p/app","configuration":"Release","arch":"x86_64"});
    assert_eq!(res["structuredContent"], structured);
    // Mirrored as text for older clients.
    assert_eq!(res["content"][0]["type"], "text");
    let text: Value = serde_json::from_str(res["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, structured);
    assert!(res.get("isError").is_none());
    assert!(res.get("resultType").is_none());
    // A failing tool: isError, not a JSON-RPC error.
    let r = send(&s, &mut conn, &call_msg(2, "fails", "{}")).await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["text"], "the disk is on fire");
    // Output that breaks the outputSchema is the server's fault.
    let r = send(&s, &mut conn, &call_msg(3, "bad-output", "{}")).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    // Every block type.
    let r = send(&s, &mut conn, &call_msg(4, "blocks", "{}")).await;
    assert_eq!(
        r["result"]["content"],
        json!([
            {"type": "text", "text": "t"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"},
            {"type": "resource", "resource": {"uri": "file:///b.txt", "mimeType": "text/plain", "text": "bee"}},
            {"type": "resource", "resource": {"uri": "file:///c.bin", "blob": "AAE="}}
        ])
    );
}

/// From 2025-11-25 (SEP-1303) arguments that break the input schema are a
/// tool result with `isError`, its text naming what to correct; the tool
/// does not run, and an unknown tool stays a protocol error.
#[tokio::test]
async fn bad_arguments_are_a_tool_error_from_2025_11_25() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let s = McpServer::builder("test-server", "9.9.9")
        .tool(
            Tool::new(
                "build-app",
                json!({
                    "type": "object",
                    "properties": {"arch": {"type": "string", "enum": ["arm64", "x86_64"]}},
                    "required": ["project_dir", "arch"]
                }),
                move |_args: Value, _cx: ToolContext| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(ToolOutput::structured(json!({"status": "ok"}))) }
                },
            )
            .output_schema(json!({"type": "object", "required": ["status"]})),
        )
        .build()
        .unwrap();
    let mut legacy = initialized(&s, "2025-11-25").await;
    let mut modern = s.connection("memory");
    for (id, args, says) in [
        (
            1,
            r#"{"project_dir":"/p","arch":"ARM"}"#,
            r#"Invalid arguments for tool build-app: arch must be one of ["arm64","x86_64"]
{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}"#,
        ),
        (
            2,
            r#"{"arch":"arm64"}"#,
            r#"Invalid arguments for tool build-app: missing required property 'project_dir'
{"field":"project_dir","reason":"required property is missing"}"#,
        ),
    ] {
        let r = send(&s, &mut legacy, &call_msg(id, "build-app", args)).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(
            r["result"]["content"],
            json!([{"type": "text", "text": says}]),
            "{r}"
        );
        assert!(r["result"].get("structuredContent").is_none(), "{r}");
        let msg = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"build-app","arguments":{args},{MODERN_META}}}}}"#
        );
        let r = send(&s, &mut modern, &msg).await;
        assert_eq!(r["result"]["resultType"], "complete", "{r}");
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(r["result"]["content"][0]["text"], says, "{r}");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the tool never ran");
    let r = send(&s, &mut legacy, &call_msg(3, "nope", "{}")).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // `arguments` that are no object break the request's own schema: a
    // protocol error still (they were a tool error; found by a review).
    for args in ["[1]", "\"x\"", "5"] {
        let r = send(&s, &mut legacy, &call_msg(5, "build-app", args)).await;
        assert_eq!(r["error"]["code"], -32602, "{args}: {r}");
        assert_eq!(r["error"]["data"]["field"], "arguments", "{args}: {r}");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the tool never ran");
    let r = send(
        &s,
        &mut legacy,
        &call_msg(4, "build-app", r#"{"project_dir":"/p","arch":"arm64"}"#),
    )
    .await;
    assert_eq!(r["result"]["structuredContent"]["status"], "ok", "{r}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn set_level_validates() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"loud"}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["expected"][0], "debug");
    let r = send(
        &s,
        &mut conn,
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
}

/// "Progress tokens MUST be a string or integer value": another type is
/// -32602 naming the field (it was echoed in every progress notification,
/// where the client's schema refuses it); a string or an integer is echoed
/// as sent.
#[tokio::test]
async fn progress_tokens_are_strings_or_integers() {
    let s = server();
    let mut conn = initialized(&s, "2025-11-25").await;
    let call = |token: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"build-app","arguments":{{"project_dir":"/p","arch":"arm64"}},"_meta":{{"progressToken":{token}}}}}}}"#
        )
    };
    for bad in [r#"{"a":1}"#, "[1]", "true", "1.5"] {
        let r = send(&s, &mut conn, &call(bad)).await;
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
        assert_eq!(r["error"]["data"]["field"], "_meta.progressToken", "{r}");
        assert_eq!(
            r["error"]["data"]["received"],
            serde_json::from_str::<Value>(bad).unwrap(),
            "{r}"
        );
    }
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    for (token, echoed) in [("7", json!(7)), (r#""t-1""#, json!("t-1"))] {
        p.send(&call(token)).await;
        let first = p.recv().await;
        assert_eq!(
            first["method"], "notifications/progress",
            "{token}: {first}"
        );
        assert_eq!(first["params"]["progressToken"], echoed, "{first}");
        while p.recv().await.get("id").is_none() {}
    }
}

/// A server with one tool `t` of input schema `schema`.
fn server_with_schema(schema: Value) -> McpServer {
    McpServer::builder("x", "1")
        .tool(Tool::new("t", schema, |_, _| async {
            Ok(ToolOutput::text("ran"))
        }))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_refused_argument_is_shown_once_and_bounded() {
    let s = server_with_schema(json!({"type":"object","properties":{"n":{"type":"integer"}}}));
    // A 2 MB string of escaped quotes: echoed whole three times, each
    // escaped again (and once more in the 2025-11-25 text block), the
    // reply was 5 to 8 times the request.
    let huge = format!(r#"{{"n":"{}"}}"#, "\\\"".repeat(1_000_000));
    for version in ["2025-06-18", "2025-11-25"] {
        let mut conn = initialized(&s, version).await;
        let msg = call_msg(1, "t", &huge);
        let mut out = Vec::new();
        s.handle(&Bytes::from(msg.clone().into_bytes()), &mut conn, &mut out)
            .await;
        assert!(out.len() < 2048, "{version}: {} byte reply", out.len());
        let r: Value = serde_json::from_slice(&out).unwrap();
        let data = if version == "2025-06-18" {
            assert_eq!(r["error"]["code"], -32602, "{r}");
            r["error"]["data"].clone()
        } else {
            assert_eq!(r["result"]["isError"], true, "{r}");
            let text = r["result"]["content"][0]["text"].as_str().unwrap();
            serde_json::from_str(text.lines().last().unwrap()).unwrap()
        };
        assert_eq!(data["field"], "n", "{data}");
        // The JSON text of the value: its quotes and an escaped quote for
        // each of its 1,000,000 characters.
        assert_eq!(data["receivedLength"], 2 + 2 * 1_000_000, "{data}");
        let shown = data["received"].as_str().unwrap();
        assert!(
            shown.starts_with(r#""\"\""#) && shown.ends_with('…'),
            "{shown}"
        );
        assert!(shown.len() < 300, "{shown}");
        assert!(data["reason"].as_str().unwrap().len() < 300, "{data}");
    }
    // A member name the client chose is bounded as the value is.
    let s = server_with_schema(json!({"type":"object","properties":{
        "m":{"type":"object","additionalProperties":{"type":"integer"}}}}));
    let mut conn = initialized(&s, "2025-06-18").await;
    let long = "k".repeat(1_000_000);
    let msg = call_msg(3, "t", &format!(r#"{{"m":{{"{long}":"s"}}}}"#));
    let mut out = Vec::new();
    s.handle(&Bytes::from(msg.into_bytes()), &mut conn, &mut out)
        .await;
    assert!(out.len() < 2048, "{} byte reply", out.len());
    let r: Value = serde_json::from_slice(&out).unwrap();
    let field = r["error"]["data"]["field"].as_str().unwrap();
    assert!(
        field.starts_with("m.kkk") && field.ends_with('…'),
        "{field}"
    );
    let s = server_with_schema(json!({"type":"object","properties":{"n":{"type":"integer"}}}));
    // A short value is still shown whole, without a length.
    let mut conn = initialized(&s, "2025-06-18").await;
    let r = send(&s, &mut conn, &call_msg(2, "t", r#"{"n":[1,2]}"#)).await;
    assert_eq!(r["error"]["data"]["received"], json!([1, 2]), "{r}");
    assert!(r["error"]["data"].get("receivedLength").is_none(), "{r}");
}

#[tokio::test]
async fn a_field_is_named_as_sent_not_as_a_json_pointer() {
    let s = server_with_schema(json!({"type":"object","properties":{
        "a/b":{"type":"integer"},
        "x~y":{"enum":[1]},
        "o":{"type":"object","properties":{"p/q":{"type":"string"}}}}}));
    let mut conn = initialized(&s, "2025-06-18").await;
    let r = send(&s, &mut conn, &call_msg(1, "t", r#"{"a/b":"s"}"#)).await;
    assert_eq!(r["error"]["data"]["field"], "a/b", "{r}");
    let r = send(&s, &mut conn, &call_msg(2, "t", r#"{"x~y":2}"#)).await;
    assert_eq!(r["error"]["data"]["field"], "x~y", "{r}");
    let r = send(&s, &mut conn, &call_msg(3, "t", r#"{"o":{"p/q":1}}"#)).await;
    assert_eq!(r["error"]["data"]["field"], "o.p/q", "{r}");
}

#[tokio::test]
async fn patterns_match_in_linear_time() {
    // On the backtracking engine this pattern took up to a million steps
    // for each string (seconds for this call): it is refused instead.
    let e = McpServer::builder("x", "1")
        .tool(Tool::new(
            "t",
            json!({"type":"object","properties":{"s":{"type":"string","pattern":"^(x+x+)+\\1y$"}}}),
            |_, _| async { Ok(ToolOutput::text("")) },
        ))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("inputSchema"), "{e}");
    // Ordinary patterns work, and a long hostile string is refused at once.
    let s = server_with_schema(json!({"type":"object","properties":{
        "xs":{"type":"array","items":{"type":"string","pattern":"^(x+x+)+y$"}}}}));
    let mut conn = initialized(&s, "2025-06-18").await;
    let items: Vec<String> = (0..200)
        .map(|i| format!("\"{}{}\"", "x".repeat(40 + i), "z"))
        .collect();
    let r = send(
        &s,
        &mut conn,
        &call_msg(1, "t", &format!(r#"{{"xs":[{}]}}"#, items.join(","))),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["field"], "xs.0", "{r}");
    let r = send(&s, &mut conn, &call_msg(2, "t", r#"{"xs":["xxxy"]}"#)).await;
    assert_eq!(r["result"]["content"][0]["text"], "ran", "{r}");
}

#[test]
fn bad_schemas_are_refused() {
    let e = McpServer::builder("x", "1")
        .tool(Tool::new("t", json!({"type": 12}), |_, _| async {
            Ok(ToolOutput::text(""))
        }))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("inputSchema"), "{e}");
    let e = McpServer::builder("x", "1")
        .tool(Tool::new("t", json!(true), |_, _| async {
            Ok(ToolOutput::text(""))
        }))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("object"), "{e}");
}

// ---------------------------------------------------------------- stdio

/// A stdio client of `server` over in-memory pipes (also used by
/// `mcp_asking.rs`).
pub(super) struct Pipe {
    pub(super) tx: tokio::io::DuplexStream,
    rx: tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
    pub(super) task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Pipe {
    pub(super) fn new(server: &McpServer) -> Pipe {
        let (client_w, server_r) = tokio::io::duplex(1 << 16);
        let (server_w, client_r) = tokio::io::duplex(1 << 16);
        let s = server.clone();
        let task = tokio::spawn(async move { s.serve_stream(server_r, server_w).await });
        Pipe {
            tx: client_w,
            rx: BufReader::new(client_r).lines(),
            task,
        }
    }

    pub(super) async fn send(&mut self, msg: &str) {
        self.tx.write_all(msg.as_bytes()).await.unwrap();
        self.tx.write_all(b"\n").await.unwrap();
    }

    pub(super) async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), self.rx.next_line())
            .await
            .expect("a message within 5 s")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }

    pub(super) async fn init(&mut self, version: &str) {
        self.init_with(version, "{}").await;
    }

    /// Initializes in `version`, the client declaring `capabilities`.
    pub(super) async fn init_with(&mut self, version: &str, capabilities: &str) {
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{capabilities}}}}}"#)).await;
        assert_eq!(self.recv().await["result"]["protocolVersion"], version);
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }
}

/// A server whose tool `keeps` keeps a clone of its context (as a task of
/// the tool's would), does `during` with it while the call runs, and
/// answers "done"; the kept context.
fn keeping_server(
    during: fn(&ToolContext),
) -> (McpServer, Arc<std::sync::Mutex<Option<ToolContext>>>) {
    let kept: Arc<std::sync::Mutex<Option<ToolContext>>> = Default::default();
    let keeping = Arc::clone(&kept);
    let s = McpServer::builder("test-server", "9.9.9")
        .tool(Tool::new(
            "keeps",
            json!({"type": "object"}),
            move |_, cx: ToolContext| {
                *keeping.lock().unwrap() = Some(cx.clone());
                async move {
                    during(&cx);
                    Ok(ToolOutput::text("done"))
                }
            },
        ))
        .build()
        .unwrap();
    (s, kept)
}

/// "Progress notifications MUST stop after completion": a clone of a
/// tool's context that outlives its call (a task of the tool's) sends no
/// progress once the call is answered. It did, after the result.
#[tokio::test]
async fn stdio_no_progress_after_the_call_is_over() {
    let (s, kept) = keeping_server(|cx| {
        assert!(cx.progress(1.0, None, None), "sent while the call runs");
    });
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"keeps","arguments":{},"_meta":{"progressToken":"t"}}}"#).await;
    assert_eq!(p.recv().await["params"]["progress"], 1.0);
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "done");
    let cx = kept.lock().unwrap().take().expect("the tool ran");
    assert!(cx.wants_progress());
    assert!(
        !cx.progress(2.0, None, None),
        "sent after the call was answered"
    );
    // Nothing follows the result but the answer to the next request.
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 2);
}

/// Under 2026-07-28 a request opts in to log messages for itself
/// (`_meta` logLevel): a clone of its tool's context kept past the call
/// logs nothing then (it did, after the result). Under the initialize
/// lifecycle the level is the session's, and such a clone still logs.
#[tokio::test]
async fn stdio_request_scoped_logs_stop_when_the_call_is_over() {
    let (s, kept) = keeping_server(|cx| {
        assert!(
            cx.log(LogLevel::Info, None, "running"),
            "sent while the call runs"
        );
    });
    let mut p = Pipe::new(&s);
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"keeps","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}}}"#).await;
    assert_eq!(p.recv().await["params"]["data"], "running");
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "done");
    let cx = kept.lock().unwrap().take().expect("the tool ran");
    assert_eq!(cx.log_level(), Some(LogLevel::Debug));
    assert!(
        !cx.log(LogLevel::Error, None, "late"),
        "sent after the call was answered"
    );
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(
        p.recv().await["id"],
        2,
        "nothing between the result and the next answer"
    );

    // The session's level: the kept clone's message is the session's.
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"info"}}"#)
        .await;
    assert_eq!(p.recv().await["id"], 3);
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"keeps","arguments":{}}}"#)
        .await;
    assert_eq!(p.recv().await["params"]["data"], "running");
    assert_eq!(p.recv().await["id"], 4);
    let cx = kept.lock().unwrap().take().expect("the tool ran");
    assert!(cx.log(LogLevel::Error, None, "late"));
    let late = p.recv().await;
    assert_eq!(late["method"], "notifications/message", "{late}");
    assert_eq!(late["params"]["data"], "late", "{late}");
}

#[tokio::test]
async fn stdio_progress_and_logs_come_before_the_reply() {
    let s = server();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"warning"}}"#)
        .await;
    assert_eq!(p.recv().await["result"], json!({}));
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"build-app","arguments":{"project_dir":"/p","arch":"arm64"},"_meta":{"progressToken":"tok"}}}"#).await;
    let mut progress = Vec::new();
    let mut levels = Vec::new();
    loop {
        let m = p.recv().await;
        match m["method"].as_str() {
            Some("notifications/progress") => {
                assert_eq!(m["params"]["progressToken"], "tok");
                progress.push(m["params"]["progress"].as_f64().unwrap());
            }
            Some("notifications/message") => {
                levels.push(m["params"]["level"].as_str().unwrap().to_owned())
            }
            _ => {
                assert_eq!(m["id"], 2);
                break;
            }
        }
    }
    // Strictly increasing: 1, 2, 3 of 1, 1, 2, 0.5, 3.
    assert_eq!(progress, vec![1.0, 2.0, 3.0]);
    assert_eq!(
        levels,
        ["warning", "error", "critical", "alert", "emergency"]
    );
    drop(p.tx);
    p.task.await.unwrap().unwrap();
}

/// A client's answer too large to read (a sampling result past the line
/// limit) ends the request it answers at once, and is not answered: the
/// tool hears it and its reply follows. It got a -32600 with `id: null`
/// (an answer answered) and the tool waited for its deadline (an hour).
#[tokio::test]
async fn stdio_an_answer_too_large_to_read_ends_its_request() {
    let s = asking_server();
    let mut p = Pipe::new(&s);
    p.init_with("2025-11-25", r#"{"sampling":{}}"#).await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask-client","arguments":{}}}"#)
        .await;
    let asked = loop {
        let m = p.recv().await;
        if m["method"] == "sampling/createMessage" {
            break m;
        }
    };
    let huge = "x".repeat(rpcwire::frame::DEFAULT_MAX_FRAME);
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"role":"assistant","content":{{"type":"text","text":"{huge}"}}}}}}"#,
        asked["id"]
    );
    p.send(&answer).await;
    let reply = loop {
        let m = p.recv().await;
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(reply["id"], 2, "the first answer is the call's: {reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("no answer: InvalidResponse"), "{reply}");
}

#[tokio::test]
async fn stdio_requests_to_the_client_fail_when_its_input_ends() {
    let s = asking_server();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask-client","arguments":{}}}"#)
        .await;
    let asked = p.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    // The client leaves without answering: the tool hears at once that no
    // answer can come, and its reply still goes out before the loop ends,
    // after `notifications/cancelled` for the request (the client may
    // still be working on it: only its input is closed).
    p.tx.shutdown().await.unwrap();
    let note = p.recv().await;
    assert_eq!(note["method"], "notifications/cancelled", "{note}");
    assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
    assert!(note["params"]["reason"].is_string(), "{note}");
    let reply = p.recv().await;
    assert_eq!(reply["id"], 2, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "no answer: Closed",
        "{reply}"
    );
    p.task.await.unwrap().unwrap();
}

/// A tool asks the client through `ToolContext::ask_client` only what the
/// protocol allows: not a client that did not declare sampling, not in the
/// 2026-07-28 revision (nothing is sent; the next line is the reply), and
/// a client that declared it is asked and answers.
#[tokio::test]
async fn stdio_ask_client_keeps_the_capability_and_revision_rules() {
    let s = asking_server();
    let call = |id: u32, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask-politely","arguments":{{}}{meta}}}}}"#
        )
    };
    let text = |reply: &Value| {
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(&call(2, "")).await;
    let reply = p.recv().await;
    assert_eq!(reply["id"], 2, "{reply}");
    assert_eq!(text(&reply), r#"refused: NotDeclared("sampling")"#);
    p.send(&call(3, &format!(",{MODERN_META}"))).await;
    let reply = p.recv().await;
    assert_eq!(reply["id"], 3, "{reply}");
    assert_eq!(text(&reply), "refused: NotInThisRevision");
    // Initialized again, now declaring sampling: the client is asked.
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}}}}"#).await;
    assert_eq!(p.recv().await["id"], 4);
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    p.send(&call(5, "")).await;
    let asked = p.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"role":"assistant","content":{{"type":"text","text":"hi"}},"model":"m"}}}}"#,
        asked["id"]
    ))
    .await;
    let reply = p.recv().await;
    assert_eq!(reply["id"], 5, "{reply}");
    assert!(text(&reply).starts_with("answered {"), "{reply}");
    p.tx.shutdown().await.unwrap();
    p.task.await.unwrap().unwrap();
}

/// A tool waiting in `ask_client` when its call is cancelled, or when the
/// wait times out: the request to the client was forgotten silently, and
/// the client went on with it. The client is now sent
/// `notifications/cancelled` naming the request; its late answer is
/// ignored (no reply: the next line is the ping's).
#[tokio::test]
async fn stdio_an_abandoned_ask_tells_the_client_to_drop_it() {
    let s = asking_server();
    let mut p = Pipe::new(&s);
    p.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}}}}"#).await;
    assert_eq!(p.recv().await["id"], 0);
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let told_to_stop = |note: &Value, asked: &Value| {
        assert_eq!(note["method"], "notifications/cancelled", "{note}");
        assert_eq!(note["params"]["requestId"], *asked, "{note}");
        assert!(note["params"]["reason"].is_string(), "{note}");
    };
    let late = |asked: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{asked},"result":{{"role":"assistant","content":{{"type":"text","text":"late"}},"model":"m"}}}}"#
        )
    };
    // Cancelled by the client.
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask-within","arguments":{"ms":3600000}}}"#).await;
    let asked = p.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user stopped"}}"#).await;
    told_to_stop(&p.recv().await, &asked["id"]);
    p.send(&late(&asked["id"])).await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{}}));
    // Timed out.
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask-within","arguments":{"ms":1}}}"#).await;
    let asked = p.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    told_to_stop(&p.recv().await, &asked["id"]);
    let reply = p.recv().await;
    assert_eq!(reply["id"], 3, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "no answer: Peer(Timeout)",
        "{reply}"
    );
    p.send(&late(&asked["id"])).await;
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#).await;
    assert_eq!(p.recv().await, json!({"jsonrpc":"2.0","id":4,"result":{}}));
    p.tx.shutdown().await.unwrap();
    p.task.await.unwrap().unwrap();
}

/// A tool asking the client through the connection's raw peer
/// (`ctx.peer().request`, not `ask_client`) whose call the client cancels
/// while it waits: the request was forgotten silently and the client went
/// on with it. The client is now sent `notifications/cancelled` naming it
/// (with a reason), as `ask_client`'s requests are; the late answer is
/// ignored.
#[tokio::test]
async fn stdio_a_raw_peer_request_the_tool_abandons_is_cancelled() {
    let s = asking_server();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask-client","arguments":{}}}"#)
        .await;
    let asked = p.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user stopped"}}"#).await;
    let note = p.recv().await;
    assert_eq!(note["method"], "notifications/cancelled", "{note}");
    assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
    assert!(
        note["params"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{note}"
    );
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"role":"assistant","content":{{"type":"text","text":"late"}},"model":"m"}}}}"#,
        asked["id"]
    ))
    .await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{}}));
    p.tx.shutdown().await.unwrap();
    p.task.await.unwrap().unwrap();
}

/// 2026-07-28's multi-round-trip requests: a tool that needs the client's
/// input answers `input_required` (with its requests and state), and is
/// called again with the answers; refused (a tool error) when the client
/// did not declare the capability, and -32603 in the initialize lifecycle.
#[tokio::test]
async fn stdio_input_required_rounds() {
    let s = asking_server();
    let mut p = Pipe::new(&s);
    let meta = |caps: &str, more: &str| {
        format!(
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{caps}}}{more}"#
        )
    };
    let call = |id: u32, meta: String| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask-in-rounds","arguments":{{}},{meta}}}}}"#
        )
    };
    p.send(&call(1, meta(r#"{"sampling":{}}"#, ""))).await;
    let first = p.recv().await;
    assert_eq!(first["id"], 1, "{first}");
    let r = &first["result"];
    assert_eq!(r["resultType"], "input_required", "{first}");
    assert_eq!(r["inputRequests"]["a"]["method"], "sampling/createMessage");
    assert_eq!(r["inputRequests"]["a"]["params"], json!({"messages": []}));
    assert_eq!(r["requestState"], "s1");
    assert!(r.get("content").is_none(), "{first}");
    // The client answers and calls again with the state.
    let again = meta(
        r#"{"sampling":{}}"#,
        r#","inputResponses":{"a":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}},"requestState":"s1""#,
    );
    p.send(&call(2, again)).await;
    let second = p.recv().await;
    assert_eq!(second["id"], 2, "{second}");
    assert_eq!(second["result"]["resultType"], "complete", "{second}");
    let text = second["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("got {") && text.ends_with(r#"with state Some("s1")"#),
        "{text}"
    );
    // A client without the sampling capability is not asked.
    p.send(&call(3, meta("{}", ""))).await;
    let refused = p.recv().await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        refused["result"].get("inputRequests").is_none(),
        "{refused}"
    );
    // The initialize lifecycle has no such rounds.
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask-in-rounds","arguments":{}}}"#).await;
    let legacy = p.recv().await;
    assert_eq!(legacy["error"]["code"], -32603, "{legacy}");
    p.tx.shutdown().await.unwrap();
    p.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn stdio_modern_logs_only_on_request() {
    let s = server();
    let mut p = Pipe::new(&s);
    p.send(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"build-app","arguments":{{"project_dir":"/p","arch":"arm64"}},{MODERN_META}}}}}"#)).await;
    let m = p.recv().await;
    assert_eq!(m["id"], 1, "no log messages without logLevel: {m}");
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"build-app","arguments":{"project_dir":"/p","arch":"arm64"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"alert"}}}"#).await;
    let mut levels = Vec::new();
    loop {
        let m = p.recv().await;
        if m["id"] == 2 {
            assert_eq!(m["result"]["resultType"], "complete");
            break;
        }
        levels.push(m["params"]["level"].as_str().unwrap().to_owned());
    }
    assert_eq!(levels, ["alert", "emergency"]);
}

#[tokio::test]
async fn stdio_cancellation() {
    let s = server();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(&call_msg(7, "wait", r#"{"ms":30000}"#)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Unknown ids (and initialize's) are ignored.
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nope"}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}"#)
        .await;
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}"#).await;
    p.send(&call_msg(8, "wait", r#"{"ms":1}"#)).await;
    // No reply for 7: the next message is 8's.
    let m = p.recv().await;
    assert_eq!(m["id"], 8, "{m}");
    p.send(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 9);
    // stdin closes: the loop ends (nothing is left running).
    drop(p.tx);
    tokio::time::timeout(Duration::from_secs(3), p.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn stdio_list_changed() {
    let s = server();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 1);
    s.add_tool(Tool::new(
        "new-tool",
        json!({"type": "object"}),
        |_, _| async { Ok(ToolOutput::text("new")) },
    ))
    .unwrap();
    let m = p.recv().await;
    assert_eq!(m["method"], "notifications/tools/list_changed");
    p.send(&call_msg(2, "new-tool", "{}")).await;
    assert_eq!(p.recv().await["result"]["content"][0]["text"], "new");
    assert!(s.remove_tool("new-tool"));
    assert!(!s.remove_tool("new-tool"));
    assert_eq!(p.recv().await["method"], "notifications/tools/list_changed");
    p.send(&call_msg(3, "new-tool", "{}")).await;
    assert_eq!(p.recv().await["error"]["code"], -32602);
}

#[tokio::test]
async fn stdio_batches_and_garbage_keep_the_loop_alive() {
    let s = server();
    let mut p = Pipe::new(&s);
    p.send(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
        .await;
    assert_eq!(p.recv().await["error"]["code"], -32600);
    p.send("{oops").await;
    assert_eq!(p.recv().await["error"]["code"], -32700);
    p.send("\r").await;
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(p.recv().await["id"], 2);
}

#[tokio::test]
async fn stdio_answers_a_last_line_without_its_newline_then_exits() {
    let s = server();
    for (last, check) in [
        (r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, 7),
        (r#"{"jsonrpc":"2.0","id":8,"method":"pi"#, -32700),
    ] {
        let mut p = Pipe::new(&s);
        p.tx.write_all(last.as_bytes()).await.unwrap();
        p.tx.shutdown().await.unwrap();
        let reply = p.recv().await;
        if check > 0 {
            assert_eq!(reply["id"], check, "{reply}");
            assert!(reply["result"].is_object(), "{reply}");
        } else {
            assert_eq!(reply["error"]["code"], check, "{reply}");
        }
        tokio::time::timeout(Duration::from_secs(5), p.task)
            .await
            .expect("the loop ends at the end of input")
            .unwrap()
            .unwrap();
    }
}

/// The input ends with calls running and requests waiting behind the cap:
/// what finishes within the 2 s grace is answered as usual, and every
/// request still unanswered then, running or never started, gets -32800
/// saying why instead of nothing.
#[tokio::test(start_paused = true)]
async fn stdio_answers_every_request_at_the_end_of_input() {
    let started = Arc::new(AtomicUsize::new(0));
    let counted = started.clone();
    let s = McpServer::builder("t", "1")
        .max_in_flight(1)
        .tool(Tool::new(
            "wait",
            json!({"type": "object"}),
            move |args: Value, _cx| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap())).await;
                    Ok(ToolOutput::text("waited"))
                }
            },
        ))
        .build()
        .unwrap();
    let mut p = Pipe::new(&s);
    p.init("2025-11-25").await;
    let call = |id: &str, ms: u64| {
        format!(
            r#"{{"jsonrpc":"2.0",{id}"method":"tools/call","params":{{"name":"wait","arguments":{{"ms":{ms}}}}}}}"#
        )
    };
    for (id, ms) in [(1, 1500), (2, 1500), (3, 10)] {
        p.send(&call(&format!(r#""id":{id},"#), ms)).await;
    }
    // Held behind them too: a call sent as a notification (owed nothing,
    // never started) and an invalid request (answered at once).
    p.send(&call("", 10)).await;
    p.send(r#"{"jsonrpc":"2.0","id":4,"method":5}"#).await;
    p.tx.shutdown().await.unwrap();
    let first = p.recv().await;
    assert_eq!(
        (
            first["id"].clone(),
            first["result"]["content"][0]["text"].clone()
        ),
        (json!(1), json!("waited")),
        "{first}"
    );
    let mut rest = [p.recv().await, p.recv().await, p.recv().await];
    rest.sort_by_key(|r| r["id"].as_u64());
    for (reply, id) in rest.iter().zip([2, 3]) {
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["error"]["code"], -32800, "{reply}");
        assert_eq!(
            reply["error"]["data"]["reason"],
            "the input ended and the request was not answered within 2 s"
        );
    }
    assert_eq!(
        (rest[2]["id"].clone(), rest[2]["error"]["code"].clone()),
        (json!(4), json!(-32600))
    );
    tokio::time::timeout(Duration::from_secs(5), p.task)
        .await
        .expect("the loop ends after its grace")
        .unwrap()
        .unwrap();
    // Calls 1 and 2 ran; 3 and the notification never started.
    assert_eq!(started.load(Ordering::SeqCst), 2);
}

// ----------------------------------------------------------------- HTTP

#[tokio::test]
async fn http_endpoint_rules() {
    let h = http_server(server()).await;
    let a = h.addr;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    // Origin.
    let r = post(a, &[("origin", "http://evil.example")], ping).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], -32600);
    assert!(r.json().get("id").is_none_or(Value::is_null));
    for origin in [
        "http://localhost:6274",
        "http://127.0.0.1",
        "http://[::1]:3000",
    ] {
        let r = post(a, &[("origin", origin)], ping).await;
        assert_eq!(r.status, 200, "{origin}");
    }
    // Accept.
    let r = request(a, "POST", &[("accept", "application/json"), CT], ping).await;
    assert_eq!(r.status, 406);
    let r = request(a, "POST", &[("accept", "text/event-stream"), CT], ping).await;
    assert_eq!(r.status, 406);
    let r = request(a, "POST", &[CT], ping).await;
    assert_eq!(r.status, 406);
    // Content-Type.
    let r = request(a, "POST", &[JSON_SSE, ("content-type", "text/plain")], ping).await;
    assert_eq!(r.status, 415);
    // Bodies.
    let r = post(a, &[], "[]").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32600);
    let r = post(a, &[], "{nope").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    // GET / DELETE without a session; other methods.
    assert_eq!(
        request(a, "GET", &[("accept", "text/event-stream")], "")
            .await
            .status,
        405
    );
    assert_eq!(request(a, "DELETE", &[], "").await.status, 405);
    assert_eq!(request(a, "PUT", &[], "").await.status, 405);
}

/// A client running in a page of a listed origin (the MCP Inspector's
/// direct mode at `localhost:6274`, a web app) needs CORS: its preflight
/// answered and the answers, with the session id, readable. The endpoint
/// answered `OPTIONS` 405 and sent no CORS header, so no browser client
/// could use it (found by a review). Origins refused stay 403; other
/// localhost pages get no CORS.
#[tokio::test]
async fn http_pages_of_listed_origins_get_cors() {
    let config = HttpConfig {
        allowed_origins: vec!["https://app.example".into(), "http://localhost:6274".into()],
        ..HttpConfig::default()
    };
    let h = http_server_with(server(), config).await;
    let a = h.addr;
    for origin in ["http://localhost:6274", "https://app.example"] {
        let asked = "content-type, mcp-session-id, mcp-protocol-version";
        let r = request(
            a,
            "OPTIONS",
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
                ("access-control-request-headers", asked),
            ],
            "",
        )
        .await;
        assert_eq!(r.status, 204, "{origin}: {}", r.body);
        let header = |name: &str| r.headers.get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            header("access-control-allow-origin").as_deref(),
            Some(origin)
        );
        assert_eq!(
            header("access-control-allow-headers").as_deref(),
            Some(asked)
        );
        let methods = header("access-control-allow-methods").unwrap();
        for method in ["GET", "POST", "DELETE"] {
            assert!(methods.contains(method), "{methods}");
        }
        assert!(header("access-control-max-age").is_some());
        // The initialize itself: readable, its session id exposed.
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        let r = post(a, &[("origin", origin)], init).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.headers.contains_key("mcp-session-id"));
        assert_eq!(r.headers["access-control-allow-origin"], origin);
        let exposed = r.headers["access-control-expose-headers"].to_str().unwrap();
        assert!(exposed.contains("mcp-session-id"), "{exposed}");
        assert!(
            r.headers
                .get_all("vary")
                .iter()
                .any(|v| v.to_str().unwrap().eq_ignore_ascii_case("origin"))
        );
        // Errors too: a page's client reads why.
        let r = post(a, &[("origin", origin)], "{nope").await;
        assert_eq!(r.status, 400);
        assert_eq!(r.headers["access-control-allow-origin"], origin);
    }
    // Another localhost page: served (past the rebinding check), without
    // CORS, so a browser sends it no JSON POST.
    let local = [
        ("origin", "http://localhost:3000"),
        ("access-control-request-method", "POST"),
    ];
    let r = request(a, "OPTIONS", &local, "").await;
    assert_eq!(r.status, 405);
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let r = post(a, &[("origin", "http://localhost:3000")], ping).await;
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    // Another origin: refused, preflight and request alike.
    let evil = [
        ("origin", "https://evil.example"),
        ("access-control-request-method", "POST"),
    ];
    let r = request(a, "OPTIONS", &evil, "").await;
    assert_eq!(r.status, 403);
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    // Without `Origin` (programs, not pages): no CORS headers; `OPTIONS`
    // is no method the endpoint serves.
    let r = post(a, &[], ping).await;
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    assert_eq!(request(a, "OPTIONS", &[], "").await.status, 405);
}

#[tokio::test]
async fn http_sessions() {
    let h = http_server(server()).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    // No session: 400; unknown: 404.
    assert_eq!(post(a, &[], list).await.status, 400);
    assert_eq!(
        post(a, &[("mcp-session-id", "deadbeef")], list)
            .await
            .status,
        404
    );
    // Unsupported MCP-Protocol-Version: 400.
    let r = post(
        a,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "1999-01-01"),
        ],
        list,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["data"]["requested"], "1999-01-01");
    // Good.
    let r = post(
        a,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        list,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["tools"].as_array().unwrap().len(), 7);
    // A tool call without notifications: JSON.
    let r = post(
        a,
        &[("mcp-session-id", &sid)],
        &call_msg(3, "lint-check", "{}"),
    )
    .await;
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(r.json()["result"]["content"][0]["text"], "clean");
    // With progress: SSE, notifications then the response, then the end.
    let r = post(a, &[("mcp-session-id", &sid)], r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"build-app","arguments":{"project_dir":"/p","arch":"arm64"},"_meta":{"progressToken":4}}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/event-stream");
    assert_eq!(r.headers["x-accel-buffering"], "no");
    let events = r.events();
    let last = events.last().unwrap();
    assert_eq!(last["id"], 4);
    assert_eq!(last["result"]["structuredContent"]["status"], "ok");
    let progress: Vec<f64> = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .map(|e| e["params"]["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    // Schema errors over HTTP (2025-11-25) are tool errors with status 200.
    let r = post(
        a,
        &[("mcp-session-id", &sid)],
        &call_msg(5, "build-app", r#"{"project_dir":"/p","arch":"ARM"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    let answer = r.json();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.ends_with(r#"{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}"#),
        "{text}"
    );
    // A response from the client: 202.
    assert_eq!(
        post(
            a,
            &[("mcp-session-id", &sid)],
            r#"{"jsonrpc":"2.0","id":99,"result":{}}"#
        )
        .await
        .status,
        202
    );
    // DELETE ends the session.
    assert_eq!(
        request(a, "DELETE", &[("mcp-session-id", &sid)], "")
            .await
            .status,
        200
    );
    assert_eq!(post(a, &[("mcp-session-id", &sid)], list).await.status, 404);
    assert_eq!(
        request(a, "DELETE", &[("mcp-session-id", &sid)], "")
            .await
            .status,
        404
    );
}

/// Ending a session (`DELETE`) cancels the calls still running on it: their
/// handlers' futures are dropped, and their POSTs' streams end without a
/// reply. They ran on, unanswerable, for as long as their handlers liked.
#[tokio::test]
async fn http_session_end_cancels_its_running_calls() {
    let started = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    struct CountsDrop(Arc<AtomicUsize>);
    impl Drop for CountsDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (on_start, on_drop) = (Arc::clone(&started), Arc::clone(&dropped));
    let s = McpServer::builder("t", "1")
        .tool(Tool::new(
            "held",
            json!({"type": "object"}),
            move |_: Value, _| {
                let on_start = Arc::clone(&on_start);
                let guard = CountsDrop(Arc::clone(&on_drop));
                async move {
                    let _guard = guard;
                    on_start.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    Ok(ToolOutput::text("never"))
                }
            },
        ))
        .build()
        .unwrap();
    let h = http_server(s).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let other = http_session(a).await;
    let held = |sid: &str, id: u64| {
        let sid = sid.to_owned();
        tokio::spawn(async move {
            post(a, &[("mcp-session-id", &sid)], &call_msg(id, "held", "{}")).await
        })
    };
    let calls = [held(&sid, 7), held(&sid, 8)];
    let elsewhere = held(&other, 7);
    eventually("the three calls to start", || {
        started.load(Ordering::SeqCst) >= 3
    })
    .await;
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    assert_eq!(
        request(a, "DELETE", &[("mcp-session-id", &sid)], "")
            .await
            .status,
        200
    );
    for call in calls {
        let r = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the ended session's call stopped")
            .unwrap();
        assert_eq!(r.status, 200);
        assert!(r.events().is_empty(), "{}", r.body);
    }
    eventually("the ended session's handlers dropped", || {
        dropped.load(Ordering::SeqCst) >= 2
    })
    .await;
    // The other session's call runs on.
    assert!(!elsewhere.is_finished());
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
    drop(h);
}

#[tokio::test]
async fn http_cancellation_in_a_session() {
    let h = http_server(server()).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let sid2 = sid.clone();
    let slow = tokio::spawn(async move {
        post(
            a,
            &[("mcp-session-id", &sid2)],
            &call_msg(7, "wait", r#"{"ms":30000}"#),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = post(
        a,
        &[("mcp-session-id", &sid)],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    let r = tokio::time::timeout(Duration::from_secs(20), slow)
        .await
        .unwrap()
        .unwrap();
    // No reply for a cancelled request: an empty event stream.
    assert_eq!(r.status, 200);
    assert!(r.events().is_empty(), "{}", r.body);
}

/// A tool that keeps a clone of its context (for a task of its own, say):
/// the POST of its call still ends when the call does, not when the clone
/// goes. A cancelled request's stream ends without a reply, and a
/// `tools/call` sent as a notification gets its 202. Both waited for the
/// clone (held a sender of the call's events; found by a review).
#[tokio::test]
async fn http_a_kept_context_does_not_hold_its_call_post() {
    let kept: Arc<std::sync::Mutex<Vec<ToolContext>>> = Default::default();
    let keeping = Arc::clone(&kept);
    let s = McpServer::builder("t", "1")
        .tool(Tool::new(
            "keeps",
            json!({"type": "object"}),
            move |args: Value, cx: ToolContext| {
                keeping.lock().unwrap().push(cx.clone());
                let wait = args["wait"].as_bool().unwrap_or(false);
                async move {
                    if wait {
                        std::future::pending::<()>().await;
                    }
                    Ok(ToolOutput::text("done"))
                }
            },
        ))
        .build()
        .unwrap();
    let h = http_server(s).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let session = sid.clone();
    let waiting = tokio::spawn(async move {
        post(
            a,
            &[("mcp-session-id", &session)],
            &call_msg(7, "keeps", r#"{"wait":true}"#),
        )
        .await
    });
    eventually("the call to start", || kept.lock().unwrap().len() == 1).await;
    let r = post(
        a,
        &[("mcp-session-id", &sid)],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    let r = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the cancelled call's POST ended")
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.events().is_empty(), "{}", r.body);
    // As a notification: answered once the call is done.
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        post(
            a,
            &[("mcp-session-id", &sid)],
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"keeps","arguments":{}}}"#,
        ),
    )
    .await
    .expect("the notification's 202");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(kept.lock().unwrap().len(), 2, "both calls ran");
    drop(h);
}

#[tokio::test]
async fn http_list_changed_on_the_get_stream() {
    use http_body_util::BodyExt;
    let s = server();
    let h = http_server(s.clone()).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let stream = tokio::net::TcpStream::connect(a).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{a}/mcp"))
        .header("host", a.to_string())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b":"));
    s.add_tool(Tool::new(
        "later",
        json!({"type": "object"}),
        |_, _| async { Ok(ToolOutput::text("")) },
    ))
    .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(3), body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(String::from_utf8_lossy(&next).contains("notifications/tools/list_changed"));
    // DELETE closes it.
    assert_eq!(
        request(a, "DELETE", &[("mcp-session-id", &sid)], "")
            .await
            .status,
        200
    );
    let end = tokio::time::timeout(Duration::from_secs(3), body.frame())
        .await
        .unwrap();
    assert!(end.is_none());
}

#[tokio::test]
async fn http_2026_rules() {
    let h = http_server(server()).await;
    let a = h.addr;
    let v = ("mcp-protocol-version", "2026-07-28");
    let discover = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{MODERN_META}}}}}"#
    );
    let r = post(a, &[v, ("mcp-method", "server/discover")], &discover).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["resultType"], "complete");
    assert!(r.headers.get("mcp-session-id").is_none());
    // Header mismatches: 400 with -32020.
    for hs in [
        vec![("mcp-method", "server/discover")],
        vec![
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "server/discover"),
        ],
        vec![v],
        vec![v, ("mcp-method", "tools/list")],
    ] {
        let r = post(a, &hs, &discover).await;
        assert_eq!(r.status, 400, "{hs:?}");
        assert_eq!(r.json()["error"]["code"], -32020, "{hs:?}");
        assert_eq!(r.json()["id"], 1);
    }
    // Unsupported version: 400 with -32022.
    let old = discover.replace("2026-07-28", "1900-01-01");
    let r = post(
        a,
        &[
            ("mcp-protocol-version", "1900-01-01"),
            ("mcp-method", "server/discover"),
        ],
        &old,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32022);
    assert_eq!(r.json()["error"]["data"]["supported"][0], "2026-07-28");
    // Unknown method: 404 with -32601.
    let r = post(
        a,
        &[v, ("mcp-method", "resources/list")],
        &format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{{{MODERN_META}}}}}"#
        ),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], -32601);
    // tools/call: Mcp-Name must match, plain or base64.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"lint-check","arguments":{{}},{MODERN_META}}}}}"#
    );
    let m = ("mcp-method", "tools/call");
    assert_eq!(
        post(a, &[v, m], &call).await.json()["error"]["code"],
        -32020
    );
    assert_eq!(
        post(a, &[v, m, ("mcp-name", "build-app")], &call)
            .await
            .json()["error"]["code"],
        -32020
    );
    let r = post(
        a,
        &[
            v,
            m,
            ("mcp-name", "lint-check"),
            ("mcp-session-id", "ignored"),
        ],
        &call,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["resultType"], "complete");
    let r = post(
        a,
        &[v, m, ("mcp-name", "=?base64?bGludC1jaGVjaw==?=")],
        &call,
    )
    .await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "clean");
    // Log messages need logLevel; with it the answer is SSE.
    let build = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"build-app","arguments":{"project_dir":"/p","arch":"arm64"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"error"}}}"#;
    let r = post(a, &[v, m, ("mcp-name", "build-app")], build).await;
    assert_eq!(r.content_type(), "text/event-stream");
    let events = r.events();
    let levels: Vec<&str> = events
        .iter()
        .filter_map(|e| e["params"]["level"].as_str())
        .collect();
    assert_eq!(levels, ["error", "critical", "alert", "emergency"]);
    assert_eq!(events.last().unwrap()["result"]["resultType"], "complete");
}

#[tokio::test]
async fn http_2026_disconnect_cancels() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d2 = drops.clone();
    let starts = Arc::new(AtomicUsize::new(0));
    let s2 = starts.clone();
    let s = McpServer::builder("c", "1")
        .tool(Tool::new("hang", json!({"type": "object"}), move |_, _| {
            s2.fetch_add(1, Ordering::SeqCst);
            struct OnDrop(Arc<AtomicUsize>);
            impl Drop for OnDrop {
                fn drop(&mut self) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
            let guard = OnDrop(d2.clone());
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(ToolOutput::text(""))
            }
        }))
        .build()
        .unwrap();
    let h = http_server(s).await;
    let a = h.addr;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"hang","arguments":{{}},{MODERN_META}}}}}"#
    );
    let req = tokio::spawn(async move {
        post(
            a,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "hang"),
            ],
            &call,
        )
        .await
    });
    // Running (a fixed 200 ms could pass before a busy host started it).
    eventually("the call runs", || starts.load(Ordering::SeqCst) == 1).await;
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    req.abort(); // the client goes away
    eventually("the call dropped after the client disconnected", || {
        drops.load(Ordering::SeqCst) == 1
    })
    .await;
}

/// `initialize` negotiates in its body: a client offering a later revision,
/// its `MCP-Protocol-Version` header saying the same, gets the server's
/// counter-offer (it got a 400 for the header); the requests after it are
/// held to the header.
#[tokio::test]
async fn http_initialize_negotiates_whatever_its_version_header_says() {
    let h = http_server(server()).await;
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let r = post(h.addr, &[("mcp-protocol-version", "2099-01-01")], init).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let offered = r.json()["result"]["protocolVersion"].clone();
    assert!(
        offered == "2025-11-25" || offered == "2025-06-18",
        "{}",
        r.body
    );
}

/// Every request of a session is held to a supported MCP-Protocol-Version
/// ("MUST respond with 400 Bad Request"): GET and DELETE too (they once
/// ignored it, and DELETE ended the session).
#[tokio::test]
async fn http_version_header_is_checked_on_get_and_delete() {
    let h = http_server(server()).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let bad = ("mcp-protocol-version", "1999-01-01");
    let get = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", &sid),
        bad,
    ];
    let r = request(a, "GET", &get, "").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["requested"], "1999-01-01");
    let r = request(a, "DELETE", &[("mcp-session-id", &sid), bad], "").await;
    assert_eq!(r.status, 400, "{}", r.body);
    // The session lives on.
    let good = ("mcp-protocol-version", "2025-11-25");
    let r = request(a, "DELETE", &[("mcp-session-id", &sid), good], "").await;
    assert_eq!(r.status, 200);
}

/// A handshake revision named in a request's `_meta` is served as the
/// session is, as over stdio (it was once refused as unsupported, the
/// error listing that very revision); JSON that is not a request is
/// -32600 with its id, not a parse error.
#[tokio::test]
async fn http_meta_revisions_and_invalid_requests() {
    let h = http_server(server()).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let in_session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let list = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#;
    let r = post(a, &in_session, list).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["result"]["tools"].is_array(), "{}", r.body);
    let r = post(a, &in_session, r#"{"jsonrpc":"2.0","id":1,"method":5}"#).await;
    assert_eq!(r.json()["error"]["code"], -32600, "{}", r.body);
    assert_eq!(r.json()["id"], 1, "{}", r.body);
    let r = post(a, &in_session, r#"{"jsonrpc":"2.0","id":1,"method":"#).await;
    assert_eq!(r.json()["error"]["code"], -32700, "{}", r.body);
    // A null id makes a request, not a notification: answered (it was
    // once taken for a notification, 202 and no answer), and refused, as
    // over stdio: MCP says "the ID MUST NOT be `null`" (it was served).
    let r = post(
        a,
        &in_session,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["id"], Value::Null, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32600, "{}", r.body);
    let reason = r.json()["error"]["data"]["reason"].clone();
    assert!(reason.as_str().unwrap().contains("null"), "{}", r.body);
}

/// Past `max_sessions`, a new session ends the one unused for longest
/// (its client gets 404): sessions nobody ended cannot lock new clients
/// out (an `initialize` past the limit was once 503 until a restart).
/// A session with nothing running for `session_idle_timeout` ends: its
/// client gets 404 (and starts anew, as with the official Python SDK's
/// server, whose default of 30 minutes this is). One with a GET stream
/// open or a call running is not idle, and one used again restarts its
/// clock. Sessions their clients forgot were kept until `max_sessions`
/// pushed them out.
#[tokio::test]
async fn http_idle_sessions_expire() {
    let timeout = Duration::from_millis(400);
    let config = HttpConfig {
        session_idle_timeout: Some(timeout),
        ..HttpConfig::default()
    };
    let h = http_server_with(server(), config).await;
    let a = h.addr;
    let [idle, streaming, calling, used] = [
        http_session(a).await,
        http_session(a).await,
        http_session(a).await,
        http_session(a).await,
    ];
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (_get_connection, get) = mcp_http::send(
        a,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &streaming),
        ],
        "",
    )
    .await;
    assert_eq!(get.status(), 200);
    let call = {
        let sid = calling.clone();
        tokio::spawn(async move {
            post(
                a,
                &[("mcp-session-id", &sid)],
                &call_msg(7, "wait", r#"{"ms":1500}"#),
            )
            .await
        })
    };
    // `used` is used every 100 ms; the others not at all, for three times
    // the timeout.
    let started = tokio::time::Instant::now();
    while started.elapsed() < timeout * 3 {
        assert_eq!(
            post(a, &[("mcp-session-id", &used)], list).await.status,
            200
        );
        tokio::time::sleep(timeout / 4).await;
    }
    assert!(!call.is_finished(), "the held call ended early");
    assert_eq!(
        post(a, &[("mcp-session-id", &idle)], list).await.status,
        404
    );
    for sid in [&streaming, &calling, &used] {
        assert_eq!(post(a, &[("mcp-session-id", sid)], list).await.status, 200);
    }
    let r = call.await.unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.contains("waited"), "{}", r.body);
    drop(get);
}

/// A call whose reply has not come within `stream_keepalive` is answered
/// as an event stream (its headers sent then), which gets an SSE comment
/// whenever it has sent nothing for that long, as the GET stream does: a
/// proxy (nginx: 60 s) or the SDK clients (300 s) ended a long tool call
/// without progress, its result lost (found by a review).
#[tokio::test]
async fn http_quiet_streams_get_keepalive_comments() {
    use http_body_util::BodyExt;
    let config = HttpConfig {
        stream_keepalive: Duration::from_millis(150),
        ..HttpConfig::default()
    };
    let h = http_server_with(server(), config).await;
    let a = h.addr;
    let sid = http_session(a).await;
    let started = tokio::time::Instant::now();
    let (_connection, resp) = mcp_http::send(
        a,
        "POST",
        &[mcp_http::JSON_SSE, mcp_http::CT, ("mcp-session-id", &sid)],
        &call_msg(7, "wait", r#"{"ms":3000}"#),
    )
    .await;
    // Headers at the first keepalive (150 ms), or with the reply (3 s)
    // when broken: the bound sits halfway, with room for a busy host.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the headers came with the reply, after {:?}",
        started.elapsed()
    );
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.matches(": keepalive\n\n").count() >= 2, "{body}");
    let last = body.rsplit("data: ").next().unwrap();
    let reply: Value = serde_json::from_str(last.trim()).unwrap();
    assert_eq!(reply["id"], 7, "{body}");
    assert!(reply["result"].to_string().contains("waited"), "{body}");
    // A quick call is still plain JSON.
    let r = post(
        a,
        &[("mcp-session-id", &sid)],
        &call_msg(8, "lint-check", "{}"),
    )
    .await;
    assert_eq!(r.content_type(), "application/json");
    // The GET stream: its opening comment, then keepalives.
    let (_get_connection, get) = mcp_http::send(
        a,
        "GET",
        &[("accept", "text/event-stream"), ("mcp-session-id", &sid)],
        "",
    )
    .await;
    let mut body = get.into_body();
    let mut seen = String::new();
    while !seen.contains(": keepalive") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a keepalive within 5 s")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&frame.into_data().unwrap()).unwrap());
    }
    assert!(seen.starts_with(": open\n\n"), "{seen}");
}

#[tokio::test]
async fn http_sessions_past_the_limit_evict_the_one_unused_longest() {
    let config = HttpConfig {
        max_sessions: 2,
        ..HttpConfig::default()
    };
    let h = http_server_with(server(), config).await;
    let a = h.addr;
    let first = http_session(a).await;
    let second = http_session(a).await;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let headers = |sid: &str| {
        [
            ("mcp-session-id", sid.to_owned()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ]
    };
    let used = |sid: &str| {
        let h = headers(sid);
        async move {
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(a, &h, list).await.status
        }
    };
    // The first is used after the second was made: the second is the one
    // unused for longest.
    assert_eq!(used(&first).await, 200);
    let third = http_session(a).await;
    assert_eq!(used(&second).await, 404);
    assert_eq!(used(&first).await, 200);
    assert_eq!(used(&third).await, 200);
}

/// A client sending its request head a byte at a time (slowloris) is
/// disconnected at `header_timeout`, and one connection past
/// `max_connections` is closed at once while the others are served (before,
/// `serve` had no limit on either: hyper's header timer needs a timer it
/// was not given).
#[tokio::test]
async fn http_slow_heads_and_connections_past_the_limit_are_closed() {
    use tokio::io::AsyncReadExt;
    let config = HttpConfig {
        header_timeout: Duration::from_millis(300),
        max_connections: 2,
        ..HttpConfig::default()
    };
    let http = http_server_with(server(), config).await;
    // Slowloris: a byte every 100 ms, never a whole head.
    let mut slow = tokio::net::TcpStream::connect(http.addr).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        for b in b"POST /mcp HTTP/1.1\r\nhost: x\r\nx-slow: ".iter().cycle() {
            if slow.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "the slow head is cut off");
    // The limit on a server whose heads may take their time, so that the
    // two connections hold their places however slowly this machine runs
    // (with the 300 ms header timeout above, a place could come back
    // before the third connection was accepted).
    let config = HttpConfig {
        max_connections: 2,
        ..HttpConfig::default()
    };
    let http = http_server_with(server(), config).await;
    // Accepted in the order they connect: both places taken before the
    // third is looked at.
    let a = tokio::net::TcpStream::connect(http.addr).await.unwrap();
    let b = tokio::net::TcpStream::connect(http.addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(http.addr).await.unwrap();
    let mut buf = [0u8; 16];
    // Closed: its end of stream (or a reset) well before the 30 s header
    // timeout, which a connection that was served would wait for.
    let read = tokio::time::timeout(Duration::from_secs(10), third.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection past the limit is closed at once: {read:?}"
    );
    drop((a, b));
    // Places come back once the server has seen the two close: a request
    // is served again (a connection closed before that is tried again).
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let served = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let mut c = tokio::net::TcpStream::connect(http.addr).await.unwrap();
            let _ = c.write_all(request.as_bytes()).await;
            let mut status = [0u8; 12];
            if c.read_exact(&mut status).await.is_ok() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a place comes back");
    assert_eq!(
        &served,
        b"HTTP/1.1 200",
        "{}",
        String::from_utf8_lossy(&served)
    );
}

/// A client that stops reading a large reply while keeping its connection
/// open does not hold the connection (and its place among
/// `max_connections`) for good: past `write_timeout` of writes that go
/// nowhere it is dropped, and the next client is served. The place was
/// held until the client left (found by a review).
#[tokio::test]
async fn http_a_client_that_stops_reading_is_dropped_after_the_write_timeout() {
    let big = McpServer::builder("big", "1")
        .tool(Tool::new("big", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("x".repeat(16 << 20)))
        }))
        .build()
        .unwrap();
    let config = HttpConfig {
        write_timeout: Duration::from_millis(500),
        max_connections: 1,
        ..HttpConfig::default()
    };
    let http = http_server_with(big, config).await;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"big","arguments":{{}},{MODERN_META}}}}}"#
    );
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: big\r\ncontent-length: {}\r\n\r\n{call}",
        call.len()
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut unread = socket.connect(http.addr).await.unwrap();
    unread.write_all(head.as_bytes()).await.unwrap();
    // The only place is taken until the server lets the reader go: a
    // request on another connection is refused until then.
    let addr = http.addr;
    let served =
        async {
            loop {
                let next = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::spawn(async move {
                    let ping = format!(
                        r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{{MODERN_META}}}}}"#
                    );
                    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "ping")];
                    post(addr, &headers, &ping).await
                }),
            )
            .await;
                if let Ok(Ok(answer)) = next {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
    let answer = tokio::time::timeout(Duration::from_secs(20), served)
        .await
        .expect("another client served once the reader was dropped");
    assert_eq!(answer.status, 200, "{}", answer.body);
    drop(unread);
}

/// `Duration::MAX`, the usual way to say "never", is taken as no limit
/// for every wait of `HttpConfig`: as a header timeout it overflowed
/// hyper's clock on every connection's first request, and as a write
/// timeout the deadline's clock once a client read slowly (the
/// connection's task panicked and the client was cut off).
#[tokio::test]
async fn http_waits_of_duration_max_mean_no_limit() {
    use tokio::io::AsyncReadExt;
    const TEXT: usize = 1 << 20;
    let big = McpServer::builder("big", "1")
        .tool(Tool::new("big", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("y".repeat(TEXT)))
        }))
        .build()
        .unwrap();
    let config = HttpConfig {
        session_idle_timeout: Some(Duration::MAX),
        header_timeout: Duration::MAX,
        body_timeout: Duration::MAX,
        write_timeout: Duration::MAX,
        tcp_keepalive: Some(Duration::MAX),
        shutdown_grace: Duration::MAX,
        ..HttpConfig::default()
    };
    let http = http_server_with(big, config).await;
    let ping = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{{MODERN_META}}}}}"#);
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "ping"),
    ];
    let answer = post(http.addr, &headers, &ping).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // A reader slow enough that the server's writes wait.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"big","arguments":{{}},{MODERN_META}}}}}"#
    );
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: big\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{call}",
        call.len()
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(http.addr).await.unwrap();
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut got))
        .await
        .expect("the reply in time")
        .unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "{}",
        &got[..got.len().min(200)]
    );
    assert!(
        got.contains(&"y".repeat(TEXT)),
        "the whole result arrived ({} bytes)",
        got.len()
    );
}

/// A client that sends a request's head and part of its body, then nothing
/// more, does not hold its connection (and its place among
/// `max_connections`) forever: it gets a 408 once `body_timeout` has passed
/// and is disconnected, and well-behaved clients are served again (before,
/// only the head had a clock: two such clients locked every later client
/// out of a server with `max_connections: 2`).
#[tokio::test]
async fn http_stalled_bodies_are_cut_off() {
    use tokio::io::AsyncReadExt;
    let config = HttpConfig {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 2,
        ..HttpConfig::default()
    };
    let http = http_server_with(server(), config).await;
    let head = "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\":";
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(http.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        stalled.push(s);
    }
    for mut s in stalled {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "a stalled body is cut off");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    let answer = post(
        http.addr,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}
