//! LSP-style two-way traffic with hand-written `Content-Length` frames,
//! against `examples/lsp_server.rs`: initialize, document sync, a
//! `workspace/configuration` request from the server answered by this
//! client (the answer changes the server's result), `window/logMessage`
//! notifications, `$/cancelRequest` answered with -32800, `shutdown` and
//! `exit`; and a `workspace/configuration` this client holds unanswered,
//! which the server gives up on and cancels with `$/cancelRequest` (its
//! timeout passed, and it counts with its defaults; or this client
//! cancelled the call waiting for it; or its input ended).
//!
//! The same flow runs twice:
//!
//! * in-process: the example's service (this file includes the example's
//!   source) behind the stream [`Driver`] over an in-memory pipe, always;
//! * over a child process's stdin/stdout: the example's binary, which Cargo
//!   builds for `cargo test` (examples are built with the tests, though
//!   Cargo gives tests no path to them: it is found beside the test's own
//!   executable). When it is missing or older than one of its sources
//!   (`cargo test --test transports` builds no examples), those tests fail and
//!   say how to build it, rather than check nothing or an old build;
//!   `tests/interop/lsp/run.sh` drives the binary with vscode-jsonrpc too.
//!
//! Deadlines only detect hangs; nothing measures time.

#[allow(dead_code)]
#[path = "../../examples/lsp_server.rs"]
mod lsp_server;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use rpcwire::Context;
use rpcwire::frame::Lsp;
use rpcwire::server::Shutdown;
use rpcwire::server::stream::{CloseReason, Driver};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::example_binary::example_binary;

/// Longer than any step can take: reaching it means a hang.
const HANG: Duration = Duration::from_secs(60);

const URI: &str = "file:///tmp/rpcwire-lsp-test/notes.txt";
const TEXT: &str = "The quick brown fox jumps over a lazy dog; it was an old tale, 2 times told.";

/// The example's word count: runs of letters and digits of at least `min`
/// characters.
fn words(text: &str, min: usize) -> usize {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && w.chars().count() >= min)
        .count()
}

/// A language client that writes and reads LSP frames by hand.
struct Client<R, W> {
    reader: BufReader<R>,
    writer: W,
    /// What it answers to `workspace/configuration` for the `example`
    /// section; `"hold"`: it does not answer (a slow client).
    config: Value,
    /// The ids of the `workspace/configuration` requests it held.
    held: Vec<Value>,
    /// The ids the server's `$/cancelRequest` notifications named, in order.
    server_cancels: Vec<Value>,
    /// The params of every `workspace/configuration` request it answered.
    config_requests: Vec<Value>,
    /// The ids the server sent its requests with.
    server_ids: Vec<Value>,
    /// The messages of `window/logMessage` notifications, in order.
    logs: Vec<String>,
    /// Responses read while waiting for another one, by id.
    responses: HashMap<String, Value>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Client<R, W> {
    fn new(reader: R, writer: W) -> Self {
        Client {
            reader: BufReader::new(reader),
            writer,
            config: json!({"minWordLength": 1}),
            config_requests: Vec::new(),
            held: Vec::new(),
            server_cancels: Vec::new(),
            server_ids: Vec::new(),
            logs: Vec::new(),
            responses: HashMap::new(),
        }
    }

    async fn send(&mut self, message: &Value) {
        let body = serde_json::to_vec(message).unwrap();
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend_from_slice(&body);
        self.writer.write_all(&frame).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    /// Sends `messages` in one write, as a pipe often delivers them.
    async fn send_together(&mut self, messages: &[Value]) {
        let mut frames = Vec::new();
        for message in messages {
            let body = serde_json::to_vec(message).unwrap();
            frames.extend(format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes());
            frames.extend(body);
        }
        self.writer.write_all(&frames).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    async fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// The next frame's message; `None` at the end of the output. Checks the
    /// framing and that it is one JSON-RPC object (LSP has no batches).
    async fn read(&mut self) -> Option<Value> {
        let mut length = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.unwrap() == 0 {
                assert_eq!(length, None, "the output ended inside a header");
                return None;
            }
            let line = line
                .strip_suffix("\r\n")
                .unwrap_or_else(|| panic!("a header line without CRLF: {line:?}"));
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(": ").expect("a `Name: value` header");
            assert!(name.eq_ignore_ascii_case("content-length"), "{line}");
            length = Some(value.parse::<usize>().unwrap());
        }
        let mut body = vec![0; length.expect("a Content-Length header")];
        self.reader.read_exact(&mut body).await.unwrap();
        let message: Value = serde_json::from_slice(&body).unwrap();
        assert!(message.is_object(), "one object per frame: {message}");
        assert_eq!(message["jsonrpc"], "2.0");
        Some(message)
    }

    /// Reads one message and handles it: a response is kept, a log
    /// notification noted, a `workspace/configuration` request answered
    /// (or held), a `$/cancelRequest` from the server noted.
    async fn step(&mut self) {
        let message = self.read().await.expect("the server stopped talking");
        match (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            (None, Some(id)) => {
                self.responses.insert(id.to_string(), message);
            }
            (Some("window/logMessage"), None) => {
                assert_eq!(message["params"]["type"], 3, "{message}");
                let text = message["params"]["message"].as_str().unwrap().to_owned();
                self.logs.push(text);
            }
            (Some("$/cancelRequest"), None) => {
                // LSP's cancellation is exactly `{"id": …}`.
                let params = message["params"].as_object().expect("params");
                assert_eq!(params.len(), 1, "{message}");
                self.server_cancels.push(params["id"].clone());
            }
            (Some("workspace/configuration"), Some(id)) => {
                let id = id.clone();
                self.server_ids.push(id.clone());
                let params = message["params"].clone();
                self.config_requests.push(params.clone());
                if self.config == "hold" {
                    self.held.push(id);
                    return;
                }
                let answer = if self.config == "error" {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": "no configuration today"}})
                } else {
                    let sections: Vec<Value> = params["items"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|item| {
                            if item["section"] == "example" {
                                self.config.clone()
                            } else {
                                Value::Null
                            }
                        })
                        .collect();
                    json!({"jsonrpc": "2.0", "id": id, "result": sections})
                };
                self.send(&answer).await;
            }
            _ => panic!("unexpected message from the server: {message}"),
        }
    }

    /// Reads (and handles) messages until the response to `id` comes.
    async fn response(&mut self, id: Value) -> Value {
        let key = id.to_string();
        loop {
            if let Some(r) = self.responses.remove(&key) {
                return r;
            }
            self.step().await;
        }
    }

    /// Sends a request and returns its response.
    async fn call(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.request(id.clone(), method, params).await;
        self.response(id).await
    }

    /// Closes the server's input; what is left of its output.
    fn into_reader(self) -> BufReader<R> {
        self.reader
    }

    /// Reads (and handles) messages until a log message `text` arrived.
    async fn logged(&mut self, text: &str) {
        while !self.logs.iter().any(|l| l == text) {
            self.step().await;
        }
    }
}

/// `initialize`'s params of a client that answers
/// `workspace/configuration` (the server asks only such a client).
fn configurable() -> Value {
    json!({"capabilities": {"workspace": {"configuration": true}}})
}

/// A client that did not say it answers `workspace/configuration` is not
/// asked (it answered -32601, and the count failed with -32603); it gets
/// its count with the defaults, and why. Documents sent before
/// `initialize` are dropped, and a `didChange` of a document not open
/// opens none (each was kept until a `didClose` that never came). Found by
/// a review of the examples.
#[tokio::test]
async fn in_process_a_client_without_configuration_is_not_asked() {
    in_process_conversation(async |c| {
        let open = |text: &str| {
            json!({"textDocument": {"uri": URI, "languageId": "plaintext", "version": 1, "text": text}})
        };
        c.notify("textDocument/didOpen", open("too early")).await;
        let init = c.call(json!(1), "initialize", json!({"capabilities": {}})).await;
        assert!(init.get("result").is_some(), "{init}");
        let closed = c
            .call(json!(2), "example/wordCount", json!({"uri": URI}))
            .await;
        assert_eq!(code(&closed), -32602, "dropped before initialize: {closed}");
        c.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": "not open"}]}),
        )
        .await;
        let still = c
            .call(json!(3), "example/wordCount", json!({"uri": URI}))
            .await;
        assert_eq!(code(&still), -32602, "a change opens nothing: {still}");
        c.notify("textDocument/didOpen", open(TEXT)).await;
        c.config = json!({"minWordLength": 4});
        let count = c
            .call(json!(4), "example/wordCount", json!({"uri": URI}))
            .await;
        assert_eq!(count["result"]["words"], words(TEXT, 1), "{count}");
        assert!(
            count["result"]["configurationFallback"]
                .as_str()
                .is_some_and(|w| w.contains("does not answer workspace/configuration")),
            "{count}"
        );
        assert!(c.config_requests.is_empty() && c.server_ids.is_empty(), "the client was asked");
        c.call(json!(5), "shutdown", Value::Null).await;
        c.notify("exit", Value::Null).await;
    })
    .await;
}

/// The error code of a response (panics on a result).
fn code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error response: {response}"))
}

/// The whole flow up to `exit`; the caller then checks how the server ended.
async fn session<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(c: &mut Client<R, W>) {
    let early = c
        .call(json!(1), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(code(&early), -32002, "before initialize: {early}");
    let early_shutdown = c.call(json!("s"), "shutdown", Value::Null).await;
    assert_eq!(
        code(&early_shutdown),
        -32002,
        "before initialize: {early_shutdown}"
    );

    let init = c
        .call(
            json!(2),
            "initialize",
            json!({"processId": null, "rootUri": null, "capabilities": {"workspace": {"configuration": true}}}),
        )
        .await;
    assert_eq!(
        init["result"]["capabilities"]["textDocumentSync"], 1,
        "{init}"
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "rpcwire-lsp-example");

    c.notify("initialized", json!({})).await;
    c.logged("initialized").await;
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "plaintext", "version": 1, "text": TEXT}}),
    )
    .await;
    c.logged(&format!("opened {URI} ({} bytes)", TEXT.len()))
        .await;

    // The server asks this client for its configuration, and uses it.
    let all = c
        .call(json!(3), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(
        c.config_requests,
        [json!({"items": [{"section": "example"}]})]
    );
    assert_eq!(
        all["result"],
        json!({"uri": URI, "words": words(TEXT, 1), "minWordLength": 1})
    );
    c.config = json!({"minWordLength": 4});
    let long = c
        .call(json!(4), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(
        long["result"],
        json!({"uri": URI, "words": words(TEXT, 4), "minWordLength": 4})
    );
    assert!(words(TEXT, 4) < words(TEXT, 1));
    assert_eq!(c.config_requests.len(), 2);
    c.logged(&format!(
        "{URI}: {} words of 4 or more characters",
        words(TEXT, 4)
    ))
    .await;

    // An error answer from this client reaches the server's handler.
    c.config = json!("error");
    let refused = c
        .call(json!(5), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(code(&refused), -32603, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "workspace/configuration failed: no configuration today (-32001)"
    );
    c.config = json!({"minWordLength": 4});

    let changed = "Completely different words here now";
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": changed}]}),
    )
    .await;
    let after = c
        .call(json!(6), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(after["result"]["words"], words(changed, 4), "{after}");

    let unknown = c
        .call(
            json!(7),
            "textDocument/hover",
            json!({"textDocument": {"uri": URI}}),
        )
        .await;
    assert_eq!(code(&unknown), -32601, "{unknown}");

    // $/cancelRequest: a slow call, cancelled while it runs, is answered
    // with -32800; another call is answered meanwhile.
    c.request(json!(8), "example/slow", json!({"ms": 600_000}))
        .await;
    c.logged("example/slow: waiting 600000 ms").await;
    let meanwhile = c
        .call(json!(9), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(meanwhile["result"]["words"], words(changed, 4));
    assert!(
        !c.responses.contains_key("8"),
        "the slow call is still running"
    );
    c.notify("$/cancelRequest", json!({"id": 8})).await;
    let cancelled = c.response(json!(8)).await;
    assert_eq!(code(&cancelled), -32800, "{cancelled}");

    // A string id, cancelled right behind its request (before the call
    // could start waiting).
    c.request(json!("slow-2"), "example/slow", json!({"ms": 600_000}))
        .await;
    c.notify("$/cancelRequest", json!({"id": "slow-2"})).await;
    let cancelled = c.response(json!("slow-2")).await;
    assert_eq!(code(&cancelled), -32800, "{cancelled}");
    // Cancelling what already finished is ignored.
    c.notify("$/cancelRequest", json!({"id": 8})).await;

    let quick = c.call(json!(10), "example/slow", json!({"ms": 1})).await;
    assert_eq!(quick["result"], json!({"waited": 1}), "{quick}");

    // The server's own requests had ids of their own, none reused.
    let ids: std::collections::HashSet<String> =
        c.server_ids.iter().map(Value::to_string).collect();
    assert_eq!(ids.len(), c.config_requests.len());
    // Requests 3, 4, 5, 6 and 9 asked.
    assert_eq!(c.config_requests.len(), 5);

    let down = c.call(json!(11), "shutdown", Value::Null).await;
    assert_eq!(down["result"], Value::Null, "{down}");
    assert!(down.get("error").is_none());
    let late = c
        .call(json!(12), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(code(&late), -32600, "after shutdown: {late}");
    for (id, method) in [(13, "shutdown"), (14, "initialize")] {
        let again = c.call(json!(id), method, json!({})).await;
        assert_eq!(code(&again), -32600, "{method} after shutdown: {again}");
    }
    c.notify("exit", Value::Null).await;
}

/// A `workspace/configuration` request the server gives up on is
/// cancelled with `$/cancelRequest` for its id, whether the server's own
/// timeout passed (its call then answers with the default settings, and
/// says so) or the client cancelled the call that was waiting for it (the
/// call then gets -32800). Ends with `exit` after `shutdown`.
async fn abandoned_configuration<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    c: &mut Client<R, W>,
) {
    let init = c.call(json!(1), "initialize", configurable()).await;
    assert!(init.get("result").is_some(), "{init}");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "plaintext", "version": 1, "text": TEXT}}),
    )
    .await;
    c.config = json!("hold");

    // The server waits 100 ms for the configuration, then counts with its
    // defaults; the client holding the request is told to stop, before
    // the call's answer (the peer announces before its waiter hears).
    let fallback = c
        .call(
            json!(2),
            "example/wordCount",
            json!({"uri": URI, "configurationTimeoutMs": 100}),
        )
        .await;
    assert_eq!(c.held.len(), 1);
    assert_eq!(c.server_cancels, c.held, "{fallback}");
    assert_eq!(
        fallback["result"],
        json!({
            "uri": URI,
            "words": words(TEXT, 1),
            "minWordLength": 1,
            "configurationFallback": "the client did not answer workspace/configuration within 100 ms: default settings used",
        }),
        "{fallback}"
    );
    // The client answers the cancelled request as LSP asks (-32800); the
    // server has forgotten it and carries on.
    let late = c.held[0].clone();
    c.send(
        &json!({"jsonrpc": "2.0", "id": late, "error": {"code": -32800, "message": "cancelled"}}),
    )
    .await;

    // The client cancels its own call while the server waits (for long)
    // for its configuration: the call gets -32800, and the server cancels
    // the request it no longer needs.
    c.request(
        json!(3),
        "example/wordCount",
        json!({"uri": URI, "configurationTimeoutMs": 600_000}),
    )
    .await;
    while c.held.len() < 2 {
        c.step().await;
    }
    c.notify("$/cancelRequest", json!({"id": 3})).await;
    let cancelled = c.response(json!(3)).await;
    assert_eq!(code(&cancelled), -32800, "{cancelled}");
    while c.server_cancels.len() < 2 {
        c.step().await;
    }
    assert_eq!(c.server_cancels, c.held);
    assert_ne!(c.held[0], c.held[1]);

    // A wait the server will not make, or one that is no number of ms.
    let never = c
        .call(
            json!(6),
            "example/wordCount",
            json!({"uri": URI, "configurationTimeoutMs": 0}),
        )
        .await;
    assert_eq!(code(&never), -32602, "{never}");
    assert_eq!(
        never["error"]["data"],
        json!({"configurationTimeoutMs": 0, "min": 1, "max": 600_000})
    );
    let soon = c
        .call(
            json!(7),
            "example/wordCount",
            json!({"uri": URI, "configurationTimeoutMs": "soon"}),
        )
        .await;
    assert_eq!(code(&soon), -32602, "{soon}");
    assert_eq!(c.held.len(), 2, "neither asked the client");

    // Answered again, the configuration is used again.
    c.config = json!({"minWordLength": 4});
    let long = c
        .call(json!(4), "example/wordCount", json!({"uri": URI}))
        .await;
    assert_eq!(
        long["result"],
        json!({"uri": URI, "words": words(TEXT, 4), "minWordLength": 4})
    );
    assert_eq!(c.server_cancels.len(), 2, "nothing else was cancelled");
    let down = c.call(json!(5), "shutdown", Value::Null).await;
    assert_eq!(down["result"], Value::Null, "{down}");
    c.notify("exit", Value::Null).await;
}

/// Runs the example's service in-process over `pipe` halves.
async fn in_process<R, W>(
    reader: R,
    writer: W,
) -> (
    std::sync::Arc<lsp_server::Server>,
    std::io::Result<CloseReason>,
)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stop = Shutdown::new();
    let (server, dispatcher) = lsp_server::language_server(stop.clone());
    let reason = Driver::new(Lsp::new())
        .limits(lsp_server::stdio_limits())
        .idle_timeout(None)
        .context(Context::builder().transport("stdio"))
        .shutdown(stop)
        .run(&dispatcher, reader, writer)
        .await;
    (server, reason)
}

/// The example served in this process (`in_process`), until it stops.
type Serving = tokio::task::JoinHandle<(
    std::sync::Arc<lsp_server::Server>,
    std::io::Result<CloseReason>,
)>;

/// A client on an in-memory pipe.
type PipeClient = Client<
    tokio::io::ReadHalf<tokio::io::DuplexStream>,
    tokio::io::WriteHalf<tokio::io::DuplexStream>,
>;

/// The example served in this process on an in-memory pipe, and a client.
fn served_in_process() -> (Serving, PipeClient) {
    let (client, served) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(served);
    let server = tokio::spawn(async move { in_process(server_read, server_write).await });
    let (client_read, client_write) = tokio::io::split(client);
    (server, Client::new(client_read, client_write))
}

/// Waits for the server to stop (at most [`HANG`]); checks it stopped as
/// told to, and returns its exit status.
async fn stopped(server: Serving) -> i32 {
    let (state, reason) = tokio::time::timeout(HANG, server)
        .await
        .expect("hang")
        .unwrap();
    assert_eq!(reason.unwrap(), CloseReason::Shutdown);
    state.exit_status()
}

/// Serves the example in this process over an in-memory pipe, has
/// `conversation` talk to it (bounded by [`HANG`]), and checks the server
/// then stopped as after `shutdown` and `exit`, everything it wrote read.
async fn in_process_conversation(conversation: impl AsyncFnOnce(&mut PipeClient)) {
    let (server, mut c) = served_in_process();
    tokio::time::timeout(HANG, conversation(&mut c))
        .await
        .expect("hang");
    assert_eq!(stopped(server).await, 0);
    // Everything written was read: the output ends after the last frame.
    assert_eq!(c.read().await, None);
}

#[tokio::test]
async fn in_process_session() {
    in_process_conversation(async |c| session(c).await).await;
}

#[tokio::test]
async fn in_process_exit_without_shutdown_is_status_1() {
    let (server, mut c) = served_in_process();
    c.notify("exit", Value::Null).await;
    assert_eq!(stopped(server).await, 1);
}

/// A request sent before `shutdown`, in the same write, is served: LSP
/// refuses only the requests that come after it. The async handler's
/// check ran at its first poll, after the sync `shutdown` handler of the
/// message behind it, and it was refused (-32600, "the server is shutting
/// down"). Found by a review.
#[tokio::test]
async fn in_process_a_request_pipelined_ahead_of_shutdown_is_served() {
    in_process_conversation(async |c| {
        c.call(json!(1), "initialize", configurable()).await;
        c.send_together(&[
            json!({"jsonrpc": "2.0", "id": 2, "method": "example/slow", "params": {"ms": 1}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}),
        ])
        .await;
        let slow = c.response(json!(2)).await;
        assert_eq!(slow["result"], json!({"waited": 1}), "{slow}");
        let shutdown = c.response(json!(3)).await;
        assert_eq!(shutdown["result"], Value::Null, "{shutdown}");
        c.notify("exit", Value::Null).await;
    })
    .await;
}

/// `exit` with a call still running ends the server at once: the call is
/// dropped, not waited for. It waited for the whole shutdown grace (10 s,
/// a call with a peer may still ask its client something), where an
/// editor gives its server a moment before it kills it. Found by a
/// review. On tokio's paused clock: the grace shows as time that passed.
#[tokio::test(start_paused = true)]
async fn in_process_exit_with_a_call_running_ends_at_once() {
    let (server, mut c) = served_in_process();
    c.call(json!(1), "initialize", configurable()).await;
    c.request(json!(2), "example/slow", json!({"ms": 600_000}))
        .await;
    c.logged("example/slow: waiting 600000 ms").await;
    let answer = c.call(json!(3), "shutdown", Value::Null).await;
    assert_eq!(answer["result"], Value::Null, "{answer}");
    let exit = tokio::time::Instant::now();
    c.notify("exit", Value::Null).await;
    assert_eq!(stopped(server).await, 0);
    let waited = exit.elapsed();
    assert!(waited < Duration::from_secs(1), "exit waited {waited:?}");
}

#[tokio::test]
async fn in_process_abandoned_configuration_is_cancelled() {
    in_process_conversation(async |c| abandoned_configuration(c).await).await;
}

/// Starts the example's binary with piped stdio.
fn spawn_example(binary: &PathBuf) -> tokio::process::Child {
    tokio::process::Command::new(binary)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts")
}

/// The example started as a child process, and a client on its stdio.
fn child_client() -> (
    tokio::process::Child,
    Client<tokio::process::ChildStdout, tokio::process::ChildStdin>,
) {
    let binary = example_binary("lsp_server", "server");
    let mut child = spawn_example(&binary);
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    (child, Client::new(stdout, stdin))
}

/// The example's exit status, once it exits by itself.
async fn exit_status(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    tokio::time::timeout(HANG, child.wait())
        .await
        .expect("hang: the example did not exit")
        .unwrap()
}

/// Runs the example as a child process, has `conversation` talk to it
/// (bounded by [`HANG`]), and checks it then exits with status 0 and
/// nothing more on its output.
async fn child_conversation(
    conversation: impl AsyncFnOnce(&mut Client<tokio::process::ChildStdout, tokio::process::ChildStdin>),
) {
    let (mut child, mut c) = child_client();
    tokio::time::timeout(HANG, conversation(&mut c))
        .await
        .expect("hang");
    let status = exit_status(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(c.read().await, None);
}

#[tokio::test]
async fn child_process_session() {
    child_conversation(async |c| session(c).await).await;
}

#[tokio::test]
async fn child_process_exit_without_shutdown_is_status_1() {
    let (mut child, mut c) = child_client();
    c.notify("exit", Value::Null).await;
    let status = exit_status(&mut child).await;
    assert_eq!(status.code(), Some(1), "{status}");
}

#[tokio::test]
async fn child_process_end_of_input_after_shutdown_is_status_0() {
    let (mut child, mut c) = child_client();
    let init = c.call(json!(1), "initialize", configurable()).await;
    assert!(init.get("result").is_some(), "{init}");
    let down = c.call(json!(2), "shutdown", Value::Null).await;
    assert_eq!(down["result"], Value::Null);
    // Closing stdin instead of `exit`; the output ends too.
    let mut rest = Vec::new();
    let mut reader = c.into_reader();
    tokio::time::timeout(HANG, reader.read_to_end(&mut rest))
        .await
        .expect("hang")
        .unwrap();
    let status = exit_status(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
async fn child_process_abandoned_configuration_is_cancelled() {
    child_conversation(async |c| abandoned_configuration(c).await).await;
}

/// The end of the server's input ends the process as `exit` does, once
/// calls still running have had `END_OF_INPUT_GRACE` to answer: it waited
/// for every call, so a long `example/slow` (or one of `u64::MAX` ms) kept
/// an editor's orphaned server alive. Found by a review.
#[tokio::test]
async fn child_process_end_of_input_does_not_wait_for_long_calls() {
    let (mut child, mut c) = child_client();
    let init = c.call(json!(1), "initialize", configurable()).await;
    assert!(init.get("result").is_some(), "{init}");
    c.request(json!(2), "example/slow", json!({"ms": u64::MAX}))
        .await;
    c.logged(&format!("example/slow: waiting {} ms", u64::MAX))
        .await;
    let mut reader = c.into_reader();
    // `into_reader` dropped the client's writer: the server's input ends.
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, reader.read_to_end(&mut rest))
        .await
        .expect("hang: the output did not end")
        .unwrap();
    // The call is dropped, as at `exit` (it logs that it was); no answer.
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || rest.ends_with(r#"{"message":"example/slow: cancelled","type":3}}"#),
        "{rest}"
    );
    assert!(!rest.contains(r#""id":2"#), "{rest}");
    let status = exit_status(&mut child).await;
    // No `shutdown` came: LSP's status 1.
    assert_eq!(status.code(), Some(1), "{status}");
}

/// Methods the example does not have follow LSP's lifecycle as its own
/// do: -32002 before `initialize`, -32601 between, -32600 after
/// `shutdown` (they were -32601 throughout). Found by a review.
#[tokio::test]
async fn unknown_methods_follow_the_lifecycle() {
    in_process_conversation(async |c| {
        let early = c.call(json!(1), "textDocument/hover", json!({})).await;
        assert_eq!(code(&early), -32002, "{early}");
        c.call(json!(2), "initialize", configurable()).await;
        let unknown = c.call(json!(3), "textDocument/hover", json!({})).await;
        assert_eq!(code(&unknown), -32601, "{unknown}");
        assert_eq!(unknown["error"]["data"]["method"], "textDocument/hover");
        // An unknown notification gets no answer: the next answer is 4's.
        c.notify("textDocument/didSave", json!({})).await;
        let down = c.call(json!(4), "shutdown", Value::Null).await;
        assert_eq!(down["result"], Value::Null, "{down}");
        let late = c.call(json!(5), "textDocument/hover", json!({})).await;
        assert_eq!(code(&late), -32600, "{late}");
        c.notify("exit", Value::Null).await;
    })
    .await;
}

/// The protocol's notifications sent with an id (no requests of the
/// protocol) follow the lifecycle as unknown methods do, and change
/// nothing: before `initialize` `didClose` got `null`, after `shutdown`
/// `didOpen` got `null` and kept the document; `initialized` before
/// `initialize` logged to the client, and a second `initialize` reset the
/// first (found by a review of the examples).
#[tokio::test]
async fn notifications_sent_as_requests_and_a_second_initialize_are_refused() {
    in_process_conversation(async |c| {
        // Dropped before `initialize`: the first message the client gets
        // is the answer to 1, not a log.
        c.notify("initialized", json!({})).await;
        let doc = json!({"textDocument": {"uri": "file:///a", "languageId": "text", "version": 1, "text": "a b c"}});
        let early = c.call(json!(1), "textDocument/didClose", json!({"textDocument": {"uri": "file:///a"}})).await;
        assert_eq!(code(&early), -32002, "{early}");
        assert!(!c.logs.iter().any(|l| l == "initialized"), "{:?}", c.logs);
        c.call(json!(2), "initialize", configurable()).await;
        // Without the configuration capability: had it replaced the
        // first, the count below would not ask the client.
        let again = c
            .call(json!(3), "initialize", json!({"capabilities": {}}))
            .await;
        assert_eq!(code(&again), -32600, "{again}");
        let between = c.call(json!(4), "textDocument/didOpen", doc.clone()).await;
        assert_eq!(code(&between), -32601, "{between}");
        assert_eq!(between["error"]["data"]["method"], "textDocument/didOpen");
        c.notify("textDocument/didOpen", doc.clone()).await;
        let count = c
            .call(json!(7), "example/wordCount", json!({"uri": "file:///a"}))
            .await;
        assert_eq!(count["result"]["words"], 3, "{count}");
        assert_eq!(c.config_requests.len(), 1, "the client was not asked");
        let down = c.call(json!(5), "shutdown", Value::Null).await;
        assert_eq!(down["result"], Value::Null, "{down}");
        let late = c.call(json!(6), "textDocument/didOpen", doc).await;
        assert_eq!(code(&late), -32600, "{late}");
        c.notify("exit", Value::Null).await;
    })
    .await;
}

/// The end of the server's input is the third way it gives up on its
/// `workspace/configuration`.
#[tokio::test]
async fn child_process_end_of_input_cancels_the_held_configuration() {
    let binary = example_binary("lsp_server", "server");
    let mut child = spawn_example(&binary);
    let stdin: Box<dyn AsyncWrite + Unpin + Send> = Box::new(child.stdin.take().unwrap());
    let stdout = child.stdout.take().unwrap();
    let mut c = Client::new(stdout, stdin);
    let init = c.call(json!(1), "initialize", configurable()).await;
    assert!(init.get("result").is_some(), "{init}");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "plaintext", "version": 1, "text": TEXT}}),
    )
    .await;
    c.config = json!("hold");
    c.request(
        json!(2),
        "example/wordCount",
        json!({"uri": URI, "configurationTimeoutMs": 600_000}),
    )
    .await;
    tokio::time::timeout(HANG, async {
        while c.held.is_empty() {
            c.step().await;
        }
    })
    .await
    .expect("hang");
    // Closes the server's input while it waits.
    c.writer = Box::new(tokio::io::sink());
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, async {
        while let Some(m) = c.read().await {
            rest.push(m);
        }
    })
    .await
    .expect("hang");
    // The client can still read: it is told the question is moot, then
    // the call that asked it fails, naming why.
    assert_eq!(
        rest,
        [
            json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": c.held[0]}}),
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "workspace/configuration: the connection closed"}}),
        ]
    );
    let status = exit_status(&mut child).await;
    // No `shutdown` came: LSP's status 1.
    assert_eq!(status.code(), Some(1), "{status}");
}

/// The example stops once the process that started it is gone, even while
/// its input stays open and unread (an editor that crashed while the
/// driver had paused reading, its calls at the cap): the end of input was
/// its only way out. Found by the review of this session's diff.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn child_process_stops_when_its_parent_is_gone() {
    use tokio::io::AsyncBufReadExt;
    let binary = example_binary("lsp_server", "server");
    // A shell starts the example in the background (its stdin the pipe
    // this test keeps open), says its pid, waits until the example is
    // ready (it has noted its parent then: a fixed 0.2 s was not always
    // enough on a busy host), and exits.
    let log = std::env::temp_dir().join(format!("rpcwire-lsp-orphan-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut shell = tokio::process::Command::new("sh")
        .arg("-c")
        // The pipe through fd 3: a background job's stdin is /dev/null
        // before any redirection of its own.
        .arg(
            r#"exec 3<&0; "$0" <&3 3<&- > /dev/null 2> "$1" & echo $!
            until grep -q ready "$1" 2> /dev/null; do sleep 0.05; done"#,
        )
        .arg(&binary)
        .arg(&log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let keep_open = shell.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(shell.stdout.take().unwrap()).lines();
    let pid: u32 = lines
        .next_line()
        .await
        .unwrap()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::timeout(HANG, shell.wait())
        .await
        .expect("hang: the example never said it was ready")
        .unwrap();
    // Gone, or a zombie its new parent has not reaped yet.
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    let stopped = tokio::time::timeout(HANG, async {
        while running() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    if stopped.is_err() {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    drop(keep_open);
    let _ = std::fs::remove_file(&log);
    assert!(
        stopped.is_ok(),
        "the example outlived the process that started it"
    );
}
