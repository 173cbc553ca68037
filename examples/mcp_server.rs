//! An MCP server with two tools, `build-app` (arguments checked against
//! its schema, progress, logs) and `lint-check`, plus `wait` (a slow call
//! to cancel) and `ask-model` (a request to the client while the call runs:
//! `sampling/createMessage`, answered by the client's model, or given up on
//! after `timeoutMs`, which the client hears as `notifications/cancelled`).
//!
//! ```text
//! cargo run --release --features mcp --example mcp_server                          # stdio
//! cargo run --release --features mcp --example mcp_server -- --http 127.0.0.1:8808 # Streamable HTTP at /mcp
//! ```
//!
//! Only MCP messages go to stdout; this program's own messages go to
//! stderr.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rpcwire::mcp::{
    AskError, Content, InputRequest, LogLevel, MODERN_VERSION, McpServer, Tool, ToolAnnotations,
    ToolContext, ToolError, ToolOutput,
};
use rpcwire::peer::PeerError;
use serde_json::{Value, json};

#[path = "support/stop_signal.rs"]
mod stop_signal;
use stop_signal::stop_signal;

fn build_app() -> Tool {
    Tool::new(
        "build-app",
        json!({
            "type": "object",
            "properties": {
                "project_dir": {"type": "string", "description": "The project's directory"},
                "configuration": {"type": "string", "enum": ["Debug", "Release"], "description": "Build configuration (default Debug)"},
                "arch": {"type": "string", "enum": ["arm64", "x86_64"], "description": "Target architecture"}
            },
            "required": ["project_dir", "arch"]
        }),
        |args: Value, cx: ToolContext| async move {
            let project = args["project_dir"].as_str().unwrap_or_default().to_owned();
            let configuration = args["configuration"].as_str().unwrap_or("Debug").to_owned();
            let arch = args["arch"].as_str().unwrap_or_default().to_owned();
            let steps = ["resolve", "compile", "link", "sign", "package"];
            cx.log(LogLevel::Info, Some("build-app"), &format!("building {project} ({configuration}, {arch})"));
            for (i, step) in steps.iter().enumerate() {
                // The "build": a short pause per step.
                tokio::time::sleep(Duration::from_millis(30)).await;
                cx.progress((i + 1) as f64, Some(steps.len() as f64), Some(step));
                cx.log(LogLevel::Debug, Some("build-app"), &format!("step {step} done"));
            }
            let artifact = format!(
                "{}/build/{configuration}/{arch}/app",
                project.trim_end_matches('/')
            );
            Ok(ToolOutput::structured(json!({
                "status": "ok",
                "artifact": artifact,
                "configuration": configuration,
                "arch": arch,
            })))
        },
    )
    .title("Build the app")
    .description("Builds the app in project_dir for one configuration and architecture; reports progress when asked.")
    .output_schema(json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ok"]},
            "artifact": {"type": "string"},
            "configuration": {"type": "string", "enum": ["Debug", "Release"]},
            "arch": {"type": "string", "enum": ["arm64", "x86_64"]}
        },
        "required": ["status", "artifact", "configuration", "arch"]
    }))
    .annotations(ToolAnnotations {
        destructive_hint: Some(false),
        idempotent_hint: Some(true),
        ..Default::default()
    })
}

/// What `lint-check` found.
#[derive(Default)]
struct Lint {
    files: u64,
    lines: u64,
    trailing: u64,
    findings: Vec<String>,
    /// Directory entries looked at, text or not.
    visited: u64,
    /// Bytes read, text or not.
    read: u64,
    /// The scan stopped at one of the caps below.
    truncated: bool,
}

/// Caps on one call's work, whatever the directory holds: entries looked
/// at (binary files, folders and unreadable ones too) and bytes read.
const MAX_ENTRIES: u64 = 20_000;
const MAX_BYTES_READ: u64 = 64 << 20;
const MAX_FILE_LEN: u64 = 1 << 20;

/// Counts lines and lines with trailing whitespace in the text files under
/// `dir` (hidden folders, `target` and `node_modules` skipped; a folder or
/// file that cannot be read is skipped too).
fn lint(dir: &Path, root: &Path, acc: &mut Lint) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries
        .filter_map(Result::ok)
        .take((MAX_ENTRIES - acc.visited) as usize + 1)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if acc.visited >= MAX_ENTRIES || acc.read >= MAX_BYTES_READ {
            acc.truncated = true;
            return;
        }
        acc.visited += 1;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            lint(&path, root, acc);
        } else if kind.is_file() && entry.metadata().is_ok_and(|m| m.len() <= MAX_FILE_LEN) {
            // Read through `take`: a length of 0 in its metadata (files
            // of /proc, such as /proc/self/pagemap's hundreds of GiB) or
            // a file growing since is no bound.
            let mut bytes = Vec::new();
            let read = std::fs::File::open(&path).and_then(|f| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(f, MAX_FILE_LEN + 1),
                    &mut bytes,
                )
            });
            if read.is_err() {
                continue;
            }
            acc.read += bytes.len() as u64;
            if bytes.len() as u64 > MAX_FILE_LEN {
                continue;
            }
            if bytes.contains(&0) {
                continue; // binary
            }
            let Ok(text) = std::str::from_utf8(&bytes) else {
                continue;
            };
            acc.files += 1;
            for (n, line) in text.lines().enumerate() {
                acc.lines += 1;
                if line.ends_with([' ', '\t']) {
                    acc.trailing += 1;
                    if acc.findings.len() < 20 {
                        let rel = path.strip_prefix(root).unwrap_or(&path);
                        acc.findings.push(format!("{}:{}", rel.display(), n + 1));
                    }
                }
            }
        }
    }
}

fn lint_check() -> Tool {
    Tool::new(
        "lint-check",
        json!({"type": "object", "properties": {}}),
        |_args: Value, _cx: ToolContext| async move {
            let root = std::env::current_dir()?;
            let scan_root = root.clone();
            let found = tokio::task::spawn_blocking(move || {
                let mut acc = Lint::default();
                lint(&scan_root, &scan_root, &mut acc);
                acc
            })
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
            let summary = format!(
                "{} files, {} lines, {} with trailing whitespace{}",
                found.files,
                found.lines,
                found.trailing,
                if found.truncated {
                    " (stopped early: too many entries or bytes)"
                } else {
                    ""
                }
            );
            Ok(ToolOutput::structured(json!({
                "root": root.display().to_string(),
                "files": found.files,
                "lines": found.lines,
                "trailing_whitespace": found.trailing,
                "findings": found.findings,
                "truncated": found.truncated,
            }))
            .with(Content::text(summary)))
        },
    )
    .title("Lint check")
    .description(
        "Counts lines and trailing whitespace in the text files under the current directory.",
    )
    .annotations(ToolAnnotations {
        read_only_hint: Some(true),
        ..Default::default()
    })
}

/// The `wait` calls running now, in every session.
static WAITS_RUNNING: AtomicUsize = AtomicUsize::new(0);

fn wait() -> Tool {
    Tool::new(
        "wait",
        json!({
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 60000}},
            "required": ["ms"]
        }),
        |args: Value, cx: ToolContext| async move {
            let ms = whole_number(&args["ms"]).unwrap_or(0);
            // Counted while it runs; says on stderr when the call is
            // dropped before it finished.
            struct Guard(bool);
            impl Drop for Guard {
                fn drop(&mut self) {
                    WAITS_RUNNING.fetch_sub(1, Ordering::SeqCst);
                    if !self.0 {
                        eprintln!("mcp_server: wait cancelled");
                    }
                }
            }
            WAITS_RUNNING.fetch_add(1, Ordering::SeqCst);
            let mut guard = Guard(false);
            let mut waited = 0;
            while waited < ms {
                let step = (ms - waited).min(100);
                tokio::time::sleep(Duration::from_millis(step)).await;
                waited += step;
                cx.progress(waited as f64, Some(ms as f64), None);
            }
            guard.0 = true;
            // The others still running: a client that cancelled one sees
            // whether the server stopped it.
            let others = WAITS_RUNNING.load(Ordering::SeqCst) - 1;
            Ok(ToolOutput::text(format!(
                "waited {ms} ms ({others} other waits running)"
            )))
        },
    )
    .title("Wait")
    .description("Waits ms milliseconds (a slow call to cancel).")
    .annotations(ToolAnnotations {
        read_only_hint: Some(true),
        ..Default::default()
    })
}

/// How long `ask-model` waits for the client's model unless told
/// otherwise.
const ASK_TIMEOUT_MS: u64 = 60_000;

/// Asks the client's model (MCP sampling) and returns what it said: in the
/// `initialize` lifecycle with a request to the client while the call
/// runs; in 2026-07-28, which has no such requests, with an
/// `input_required` answer the client fulfils before calling again.
///
/// In the `initialize` lifecycle the tool waits at most `timeoutMs`; then
/// it gives up, the client is sent `notifications/cancelled` for the
/// request (so it stops sampling for nobody), and the result is an error
/// the model can read ("did not answer in time"). In 2026-07-28 the
/// server does not wait, so `timeoutMs` does not apply.
fn ask_model() -> Tool {
    Tool::new(
        "ask-model",
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1},
                "timeoutMs": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 600000,
                    "description": "How long to wait for the model (default 60000)"
                }
            },
            "required": ["question"]
        }),
        |args: Value, cx: ToolContext| async move {
            // The answer to an earlier round (2026-07-28).
            if let Some(result) = cx.input_response("answer") {
                return answered(result);
            }
            let params = json!({
                "messages": [{
                    "role": "user",
                    "content": {"type": "text", "text": args["question"]}
                }],
                "maxTokens": 200
            });
            if cx.protocol_version() == MODERN_VERSION {
                return Ok(ToolOutput::input_required(
                    [("answer", InputRequest::sampling(params))],
                    None,
                ));
            }
            // Refused, with nothing sent, when the client did not declare
            // sampling.
            let timeout_ms = whole_number(&args["timeoutMs"]).unwrap_or(ASK_TIMEOUT_MS);
            let asked = cx
                .ask_client(
                    "sampling/createMessage",
                    &params,
                    Duration::from_millis(timeout_ms),
                )
                .await;
            let answer = match asked {
                Ok(answer) => answer,
                // A failure of the tool, not of the protocol: the model
                // that called it reads why and may ask again.
                Err(AskError::Peer(PeerError::Timeout)) => {
                    return Err(ToolError::new(format!(
                        "the model did not answer in time (gave up after {timeout_ms} ms)"
                    )));
                }
                Err(e) => return Err(e.into()),
            };
            match answer.result() {
                Ok(result) => answered(&serde_json::from_slice(result)?),
                Err(e) => Err(ToolError::new(format!(
                    "the client declined ({}): {}",
                    e.code, e.message
                ))),
            }
        },
    )
    .title("Ask the model")
    .description("Asks the client's model a question (sampling) and returns its answer.")
}

/// The tool's result from sampling's result: its text (`content` a text
/// block, or from 2025-11-25 on a list of blocks holding one) and the
/// model. Anything else is the tool's error, not an empty answer.
fn answered(result: &Value) -> Result<ToolOutput, ToolError> {
    let is_text = |block: &&Value| block["type"] == "text" && block["text"].is_string();
    let text = match &result["content"] {
        Value::Array(blocks) => blocks.iter().find(is_text),
        block => Some(block).filter(is_text),
    };
    match (text, result["model"].as_str()) {
        (Some(text), Some(model)) => Ok(ToolOutput::structured(json!({
            "answer": text["text"],
            "model": model,
        }))),
        _ => Err(ToolError::new(format!(
            "the client's answer is not a sampling result with text: {result}"
        ))),
    }
}

/// A whole number the schema let through: JSON Schema's `integer` takes
/// `1500.0` too (Python clients send floats).
fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = McpServer::builder("rpcwire-mcp-example", env!("CARGO_PKG_VERSION"))
        .instructions("Build the app with build-app, check the sources with lint-check.")
        .tool(build_app())
        .tool(lint_check())
        .tool(wait())
        .tool(ask_model())
        .build()?;
    // `args_os`: `args` panics on an argument that is not Unicode.
    let Ok(args) = std::env::args_os()
        .skip(1)
        .map(std::ffi::OsString::into_string)
        .collect::<Result<Vec<String>, _>>()
    else {
        eprintln!("usage: mcp_server [--http HOST:PORT]");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match args.as_slice() {
            [flag, addr] if flag == "--http" => {
                let addr: std::net::SocketAddr = addr.parse()?;
                // Served until Ctrl-C or SIGTERM, then drained: calls in
                // flight have `shutdown_grace` (10 s) to answer.
                let listener = tokio::net::TcpListener::bind(addr).await?;
                let addr = listener.local_addr()?;
                // Before it says where it listens: a stop signal from
                // then on is caught.
                let stopped = stop_signal();
                eprintln!("mcp_server: Streamable HTTP on http://{addr}/mcp");
                let endpoint = rpcwire::mcp::http::Endpoint::new(
                    server,
                    rpcwire::mcp::http::HttpConfig::default(),
                );
                rpcwire::mcp::http::serve(endpoint, listener, stopped).await?;
                eprintln!("mcp_server: stopped");
            }
            [] => {
                eprintln!("mcp_server: stdio");
                if let Err(e) = server.serve_stdio().await {
                    // Its output closed (the client stopped reading), say:
                    // at once, since tokio's stdin reader is a blocking
                    // thread the runtime would wait for while stdin stays
                    // open.
                    eprintln!("mcp_server: {e}");
                    std::process::exit(1);
                }
                eprintln!("mcp_server: stdin closed, exiting");
            }
            _ => {
                eprintln!("usage: mcp_server [--http HOST:PORT]");
                std::process::exit(2);
            }
        }
        Ok(())
    })
}
