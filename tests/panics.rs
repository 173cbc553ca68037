//! Caught handler panics can be kept quiet without silencing the process's
//! panic hook for anything else. (Its own test binary: the hook is global.)

use std::sync::atomic::{AtomicUsize, Ordering};

use rpcwire::{Call, Connection, Dispatcher, RpcError};

static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn quiet_panics_skip_the_hook_only_inside_handlers() {
    // The application's own hook, set first: it counts what reaches it.
    std::panic::set_hook(Box::new(|_| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    let boom = |_c: Call<'_, ()>| -> Result<(), RpcError> { panic!("handler failed") };
    let quiet = Dispatcher::builder(())
        .quiet_panics(true)
        .method("boom", boom)
        .build()
        .unwrap();
    let loud = Dispatcher::builder(())
        .method("boom", boom)
        .build()
        .unwrap();

    // A 1000-entry batch against a panicking handler: every entry answered
    // with -32603, and the hook (which prints a backtrace by default) is
    // never called.
    let entry = r#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#;
    let batch = format!("[{}]", vec![entry; 1000].join(","));
    let mut out = Vec::new();
    quiet.handle(batch.as_bytes(), &mut Connection::new(), &mut out);
    let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(r.as_array().unwrap().len(), 1000);
    assert!(
        r.as_array().unwrap().iter().all(
            |e| e["error"]["code"] == -32603 && e["error"]["data"]["panic"] == "handler failed"
        )
    );
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 0);

    // A dispatcher that did not ask for quiet still reaches the hook.
    out.clear();
    loud.handle(entry.as_bytes(), &mut Connection::new(), &mut out);
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 1);

    // And so does any panic outside a handler.
    let _ = std::panic::catch_unwind(|| panic!("elsewhere"));
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 2);

    // An MCP tool's panic reaches the hook unless the server asks for
    // quiet (MCP servers were always quiet, so an operator saw nothing
    // of a panicking tool but the client's -32603).
    #[cfg(feature = "mcp")]
    {
        assert_eq!(
            mcp_tool_panic(false)["error"]["data"]["panic"],
            "tool failed"
        );
        assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 3);
        assert_eq!(
            mcp_tool_panic(true)["error"]["data"]["panic"],
            "tool failed"
        );
        assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 3);
        // And its message can be kept from the client.
        assert_eq!(
            mcp_tool_panic_with(true, false)["error"],
            serde_json::json!({"code": -32603, "message": "Internal error"})
        );
    }
}

/// The answer to a `tools/call` of a tool that panics, on an MCP server
/// built with `quiet_panics(quiet)`.
#[cfg(feature = "mcp")]
fn mcp_tool_panic(quiet: bool) -> serde_json::Value {
    mcp_tool_panic_with(quiet, true)
}

/// [`mcp_tool_panic`], the server also built with
/// `panic_messages(messages)`.
#[cfg(feature = "mcp")]
fn mcp_tool_panic_with(quiet: bool, messages: bool) -> serde_json::Value {
    use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
    let server = McpServer::builder("panics", "1.0.0")
        .quiet_panics(quiet)
        .panic_messages(messages)
        .tool(Tool::new(
            "boom",
            serde_json::json!({"type": "object"}),
            |_, _cx: ToolContext| async move {
                if true {
                    panic!("tool failed");
                }
                Ok(ToolOutput::text("never"))
            },
        ))
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut conn = server.connection("memory");
        let mut out = Vec::new();
        for message in [
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"boom","arguments":{}}}"#,
        ] {
            out.clear();
            server
                .handle(&bytes::Bytes::from(message), &mut conn, &mut out)
                .await;
        }
        serde_json::from_slice(&out).unwrap()
    })
}
