//! What a tool may ask of its client, and when (`ToolContext::ask_client`,
//! progress), and the example server's tools on inputs the SDK clients
//! send: each test failed before its fix (found by a review).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::mcp::Pipe;

/// A tool that asks the client `method` with `params` via `ask_client`.
fn asking(name: &'static str, method: &'static str, params: Value) -> Tool {
    Tool::new(
        name,
        json!({"type": "object"}),
        move |_, cx: ToolContext| {
            let params = params.clone();
            async move {
                let asked = cx
                    .ask_client(method, &params, Duration::from_millis(300))
                    .await;
                Ok(ToolOutput::text(match asked {
                    Ok(_) => "answered".to_string(),
                    Err(e) => format!("refused: {e:?}"),
                }))
            }
        },
    )
}

/// The server's answer to a call of `tool` from a client that declared
/// `caps`: `Some(reply text)` when nothing was sent to the client first,
/// `None` when the client was asked (and answered with an error).
async fn ask_as(s: &McpServer, caps: &str, tool: &str, method: &str) -> Option<String> {
    let mut p = Pipe::new(s);
    p.init_with("2025-11-25", caps).await;
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    ))
    .await;
    let first = p.recv().await;
    if first.get("method").is_none() {
        assert_eq!(first["id"], 1, "{first}");
        return Some(
            first["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(first["method"], method, "{first}");
    p.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-1,"message":"declined"}}}}"#,
        first["id"]
    ))
    .await;
    let reply = p.recv().await;
    assert_eq!(reply["id"], 1, "{reply}");
    assert_eq!(reply["result"]["content"][0]["text"], "answered", "{reply}");
    None
}

/// From 2025-11-25 on a capability's members narrow it, and the server
/// MUST NOT go past them: `{"elicitation":{}}` is form mode only (URL mode
/// needs `elicitation.url`; a client listing its modes needs
/// `elicitation.form` for a form), and sampling with `tools` or
/// `toolChoice` needs `sampling.tools`. Refused, nothing is sent; what the
/// client declared is asked. (URL-mode elicitation and tool-enabled
/// sampling were sent to clients that had not declared them.)
#[tokio::test]
async fn requests_to_the_client_need_the_part_of_a_capability_they_use() {
    let s = McpServer::builder("t", "1")
        .tool(asking(
            "ask-url",
            "elicitation/create",
            json!({"mode": "url", "message": "Sign in", "url": "https://example.com/login", "elicitationId": "e1"}),
        ))
        .tool(asking(
            "ask-form",
            "elicitation/create",
            json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}),
        ))
        .tool(asking(
            "ask-tools",
            "sampling/createMessage",
            json!({"messages": [], "maxTokens": 10,
                   "tools": [{"name": "w", "inputSchema": {"type": "object"}}]}),
        ))
        .tool(asking(
            "ask-choice",
            "sampling/createMessage",
            json!({"messages": [], "maxTokens": 10, "toolChoice": {"mode": "auto"}}),
        ))
        .tool(asking(
            "ask-plain",
            "sampling/createMessage",
            json!({"messages": [], "maxTokens": 10}),
        ))
        .build()
        .unwrap();
    let refused = |c: &str| Some(format!("refused: NotDeclared({c:?})"));
    let cases = [
        (
            r#"{"elicitation":{}}"#,
            "ask-url",
            refused("elicitation.url"),
        ),
        (
            r#"{"elicitation":{"form":{}}}"#,
            "ask-url",
            refused("elicitation.url"),
        ),
        (r#"{"elicitation":{"url":{}}}"#, "ask-url", None),
        (r#"{"elicitation":{}}"#, "ask-form", None),
        (r#"{"elicitation":{"form":{}}}"#, "ask-form", None),
        (
            r#"{"elicitation":{"url":{}}}"#,
            "ask-form",
            refused("elicitation.form"),
        ),
        (r#"{"elicitation":{"form":{},"url":{}}}"#, "ask-form", None),
        (r#"{}"#, "ask-form", refused("elicitation")),
        (r#"{"sampling":{}}"#, "ask-tools", refused("sampling.tools")),
        (
            r#"{"sampling":{}}"#,
            "ask-choice",
            refused("sampling.tools"),
        ),
        (r#"{"sampling":{"tools":{}}}"#, "ask-tools", None),
        (r#"{"sampling":{"tools":{}}}"#, "ask-choice", None),
        (r#"{"sampling":{}}"#, "ask-plain", None),
        (r#"{"elicitation":{}}"#, "ask-plain", refused("sampling")),
    ];
    for (caps, tool, expected) in cases {
        let method = if tool.starts_with("ask-url") || tool.starts_with("ask-form") {
            "elicitation/create"
        } else {
            "sampling/createMessage"
        };
        let got = ask_as(&s, caps, tool, method).await;
        assert_eq!(got, expected, "{tool} to a client declaring {caps}");
    }
}

/// A clone of the tool's context kept past the call: like progress,
/// `ask_client` sends nothing once the call is over (`AskError::CallOver`;
/// it sent the client a sampling request tied to no running request).
#[tokio::test]
async fn ask_client_after_the_call_is_over_sends_nothing() {
    let kept: Arc<Mutex<Option<ToolContext>>> = Default::default();
    let keeping = Arc::clone(&kept);
    let s = McpServer::builder("t", "1")
        .tool(Tool::new(
            "keeps",
            json!({"type": "object"}),
            move |_, cx: ToolContext| {
                *keeping.lock().unwrap() = Some(cx.clone());
                async move { Ok(ToolOutput::text("done")) }
            },
        ))
        .build()
        .unwrap();
    let mut p = Pipe::new(&s);
    p.init_with("2025-11-25", r#"{"sampling":{}}"#).await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"keeps","arguments":{},"_meta":{"progressToken":"t"}}}"#).await;
    assert_eq!(p.recv().await["id"], 1);
    let cx = kept.lock().unwrap().take().expect("the tool ran");
    assert!(cx.wants_progress());
    assert!(
        !cx.progress(1.0, None, None),
        "progress queued after the call was over"
    );
    let asked = tokio::spawn(async move {
        cx.ask_client(
            "sampling/createMessage",
            &json!({"messages": [], "maxTokens": 10}),
            Duration::from_millis(200),
        )
        .await
        .map(|_| ())
    });
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    let next = p.recv().await;
    assert_eq!(
        next["id"], 2,
        "the client was sent a request for a call that is over: {next}"
    );
    assert_eq!(asked.await.unwrap(), Err(rpcwire::mcp::AskError::CallOver));
}

/// Progress with a total that is not a number goes out without it (it went
/// out as `"total":null`: serde_json writes NaN so, and the SDK clients'
/// schemas refuse it).
#[tokio::test]
async fn progress_with_a_non_finite_total_sends_no_null() {
    let s = McpServer::builder("t", "1")
        .tool(Tool::new(
            "p",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                cx.progress(1.0, Some(f64::NAN), None);
                Ok(ToolOutput::text("done"))
            },
        ))
        .build()
        .unwrap();
    let mut p = Pipe::new(&s);
    p.init_with("2025-11-25", "{}").await;
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"p","arguments":{},"_meta":{"progressToken":"t"}}}"#).await;
    let m = p.recv().await;
    assert_eq!(m["method"], "notifications/progress", "{m}");
    assert_eq!(m["params"]["progress"], 1.0, "{m}");
    assert!(
        m["params"].get("total").is_none(),
        "a total that is not a number went out: {m}"
    );
    assert_eq!(p.recv().await["id"], 1);
}

// ------------------------------------------------------ examples/mcp_server

struct Child {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Child {
    async fn start() -> Child {
        Child::start_in(&std::env::current_dir().unwrap()).await
    }

    /// The example, run in `dir` (where `lint-check` scans).
    async fn start_in(dir: &std::path::Path) -> Child {
        let bin = crate::example_binary::example_binary("mcp_server", "mcp");
        let mut child = tokio::process::Command::new(bin)
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut c = Child {
            child,
            stdin,
            lines,
        };
        c.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}"#).await;
        assert_eq!(c.recv().await["id"], 0);
        c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        c
    }

    async fn send(&mut self, msg: &str) {
        self.stdin.write_all(msg.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }
}

/// The example's `wait` and `ask-model` take a whole number written as a
/// float (`300.0`), which their schemas' `"type":"integer"` accepts (JSON
/// Schema; Python clients send floats): `wait` waited 0 ms for it.
#[tokio::test]
async fn example_wait_honours_an_integer_written_as_a_float() {
    let mut c = Child::start().await;
    c.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait","arguments":{"ms":300.0},"_meta":{"progressToken":7}}}"#).await;
    let mut totals = Vec::new();
    let reply = loop {
        let m = c.recv().await;
        if m["method"] == "notifications/progress" {
            totals.push(m["params"]["total"].clone());
            continue;
        }
        break m;
    };
    assert_eq!(reply["id"], 1, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "waited 300 ms (0 other waits running)",
        "{reply}"
    );
    assert!(
        !totals.is_empty() && totals.iter().all(|t| t == 300.0),
        "{totals:?}"
    );
    let _ = c.child.kill().await;
}

/// The example's `lint-check` bounds its work by every entry it looks at
/// and every byte it reads: it capped only the text files it counted, so a
/// folder of binaries was read whole, however large.
#[tokio::test]
async fn example_lint_check_is_bounded_by_what_it_reads() {
    let dir = std::env::temp_dir().join(format!("rpcwire-lint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("z")).unwrap();
    // Two text files, and a folder of 20,001 binaries read after them.
    std::fs::write(dir.join("one.txt"), "trailing \nclean\n").unwrap();
    std::fs::write(dir.join("two.txt"), "x\n").unwrap();
    for i in 0..20_001 {
        std::fs::write(dir.join(format!("z/{i:05}.bin")), b"\0bin").unwrap();
    }
    let mut c = Child::start_in(&dir).await;
    c.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lint-check","arguments":{}}}"#).await;
    let reply = c.recv().await;
    let found = &reply["result"]["structuredContent"];
    assert_eq!(found["files"], 2, "{reply}");
    assert_eq!(found["lines"], 3, "{reply}");
    assert_eq!(found["trailing_whitespace"], 1, "{reply}");
    assert_eq!(found["truncated"], true, "{reply}");
    let _ = c.child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example's `ask-model` reads the text of a sampling result (`content`
/// a text block, or a list of blocks holding one); anything else is the
/// tool's error (it came back as a success `{"answer":null,"model":null}`).
#[tokio::test]
async fn example_ask_model_refuses_an_unreadable_answer() {
    let mut c = Child::start().await;
    let answers = [
        ("42", None),
        (
            r#"{"role":"assistant","content":{"type":"image","data":"AA==","mimeType":"image/png"},"model":"m"}"#,
            None,
        ),
        (
            r#"{"role":"assistant","content":{"type":"text","text":"hi"}}"#,
            None,
        ),
        (
            r#"{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}"#,
            Some("hi"),
        ),
        (
            r#"{"role":"assistant","content":[{"type":"image","data":"AA==","mimeType":"image/png"},{"type":"text","text":"two"}],"model":"m"}"#,
            Some("two"),
        ),
    ];
    for (id, (answer, text)) in (1..).zip(answers) {
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask-model","arguments":{{"question":"hi","timeoutMs":5000.0}}}}}}"#
        ))
        .await;
        let asked = c.recv().await;
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{answer}}}"#,
            asked["id"]
        ))
        .await;
        let reply = c.recv().await;
        assert_eq!(reply["id"], id, "{reply}");
        match text {
            Some(text) => {
                assert_ne!(reply["result"]["isError"], true, "{answer}: {reply}");
                assert_eq!(
                    reply["result"]["structuredContent"]["answer"], text,
                    "{reply}"
                );
                assert_eq!(
                    reply["result"]["structuredContent"]["model"], "m",
                    "{reply}"
                );
            }
            None => assert_eq!(
                reply["result"]["isError"], true,
                "an unreadable sampling answer was a success: {answer}: {reply}"
            ),
        }
    }
    let _ = c.child.kill().await;
}

/// 2026-07-28's `input_required` requests follow the same rules: a URL
/// elicitation to a client that declared form mode only is the tool's
/// error (nothing asked); declared, it is asked.
#[tokio::test]
async fn input_required_requests_need_the_part_of_a_capability_they_use() {
    use rpcwire::mcp::InputRequest;
    let s = McpServer::builder("t", "1")
        .tool(Tool::new(
            "sign-in",
            json!({"type": "object"}),
            |_, _cx: ToolContext| async move {
                Ok(ToolOutput::input_required(
                    [(
                        "login",
                        InputRequest::elicitation(json!({
                            "mode": "url", "message": "Sign in",
                            "url": "https://example.com/login", "elicitationId": "e1"
                        })),
                    )],
                    None,
                ))
            },
        ))
        .build()
        .unwrap();
    let mut p = Pipe::new(&s);
    let call = |id: u32, caps: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sign-in","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{caps}}}}}}}"#
        )
    };
    p.send(&call(1, r#"{"elicitation":{}}"#)).await;
    let refused = p.recv().await;
    assert_eq!(refused["id"], 1, "{refused}");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("elicitation.url"), "{text}");
    p.send(&call(2, r#"{"elicitation":{"url":{}}}"#)).await;
    let asked = p.recv().await;
    assert_eq!(asked["id"], 2, "{asked}");
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(
        asked["result"]["inputRequests"]["login"]["params"]["mode"], "url",
        "{asked}"
    );
}
