//! A tiny language-server-shaped service on stdin/stdout with the Language
//! Server Protocol's framing (`Content-Length` headers,
//! [`rpcwire::frame::Lsp`]), two-way: the client's requests and
//! notifications come in, and the server sends its own requests and
//! notifications out on the same pipes.
//!
//! * `initialize` answers the server's capabilities (once: a second gets
//!   -32600); `initialized` after it is acknowledged with a
//!   `window/logMessage` (before it, dropped as every notification).
//! * `textDocument/didOpen`, `didChange` (full text) and `didClose` keep
//!   the documents' text in memory (before `initialize` they are dropped,
//!   as LSP says, and a `didChange` of a document not open is ignored).
//! * `example/wordCount` (`{"uri": …, "configurationTimeoutMs": …}`) first
//!   asks the client `workspace/configuration` for the section `example`
//!   (only a client that said in `initialize` it answers it:
//!   `capabilities.workspace.configuration`; others get their count with
//!   the default settings, and `configurationFallback` says why) (a
//!   server-to-client request, through [`rpcwire::peer::Peer`]), waiting at most
//!   `configurationTimeoutMs` (default 10 s, at most 10 min), then counts
//!   the document's words of at least `minWordLength` characters (from that
//!   answer, 1 when the client has none) and logs the count with
//!   `window/logMessage`. A client that does not answer in time gets its
//!   count with the default settings, and the result says so in
//!   `configurationFallback`, as a server should not fail a request because
//!   its client is slow to say how it is configured.
//! * `example/slow` (`{"ms": …}`, default 60 s) waits, and stops when the
//!   client sends `$/cancelRequest` for it: it is then answered with LSP's
//!   `RequestCancelled` (-32800), as LSP requires every request to be
//!   answered.
//! * `shutdown` answers `null`; `exit` ends the process at once (calls
//!   still running are dropped), with status 0 after `shutdown`, 1 without
//!   (as LSP says). The end of stdin ends it the same way, once calls
//!   still running have had a second to answer ([`END_OF_INPUT_GRACE`]:
//!   one waiting on the client fails at once and its answer goes out, a
//!   long `example/slow` is dropped), so that the server does not outlive
//!   an editor that crashed; on Unix it also stops when the process that
//!   started it is gone (LSP's rule), which it checks every second.
//!
//! Requests other than `initialize` before `initialize` get -32002
//! (`ServerNotInitialized`); requests after `shutdown` (`initialize` and
//! `shutdown` again among them) get -32600; methods the server does not
//! have, the same, and -32601 in between, as the protocol's notifications
//! (`initialized`, `didOpen`, …) sent with an id.
//!
//! Logs go to stderr: stdout carries only LSP frames.
//!
//! ```text
//! cargo run --features server --example lsp_server
//! Content-Length: 58\r\n\r\n{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}
//! ```
//!
//! # Cancellation
//!
//! The dispatcher is told that `$/cancelRequest` cancels calls
//! ([`cancel_notification`](rpcwire::dispatch::DispatcherBuilder::cancel_notification)
//! with [`CancelledReply::Error`]): the call of that id, running or still
//! waiting for a slot, is dropped, its [`Cancellation`](rpcwire::dispatch::Cancellation)
//! fires, and the client gets -32800 at once, as LSP requires every
//! request to be answered. `example/slow` logs when that happens.
//!
//! The same notification goes the other way: a `workspace/configuration`
//! request that `example/wordCount` gives up on (no answer within its
//! timeout, after which the call goes on with the defaults; or the call
//! itself cancelled while it waits) is announced to the client with
//! `$/cancelRequest` for its id, so that the client stops working on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, CancelledReply, WithAsync};
use rpcwire::frame::Lsp;
use rpcwire::peer::{DecodeError, PeerError};
use rpcwire::server::stream::Driver;
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Context, Dispatcher, RpcError};
use serde::Deserialize;
use serde_json::{Value, json};

/// LSP's `ServerNotInitialized`.
const SERVER_NOT_INITIALIZED: i32 = -32002;
/// JSON-RPC's invalid request, for requests after `shutdown`.
const INVALID_REQUEST: i32 = -32600;
/// How long the server waits for the client's `workspace/configuration`
/// answer unless the call says otherwise.
const CONFIGURATION_TIMEOUT_MS: u64 = 10_000;
/// The longest wait a call may ask for: the table of pending requests is
/// not a place to park them for ever.
const MAX_CONFIGURATION_TIMEOUT_MS: u64 = 600_000;

/// The server's state, shared by every handler.
pub struct Server {
    /// Open documents: URI to text.
    documents: Mutex<HashMap<String, String>>,
    initialized: AtomicBool,
    /// The client said it answers `workspace/configuration`.
    client_configuration: AtomicBool,
    shutdown_requested: AtomicBool,
    /// Triggered by `exit`: the stdio driver stops.
    stop: Shutdown,
    /// The process's exit status, set by `exit` (-1 until then).
    exit_code: AtomicI32,
}

impl Server {
    /// -32002 before `initialize`, -32600 after `shutdown`.
    fn check_ready(&self) -> Result<(), RpcError> {
        if !self.initialized.load(Ordering::Acquire) {
            return Err(RpcError::new(
                SERVER_NOT_INITIALIZED,
                "the server is not initialized",
            ));
        }
        if self.shutdown_requested.load(Ordering::Acquire) {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "the server is shutting down",
            ));
        }
        Ok(())
    }

    /// The process's exit status: the one `exit` chose, or, when the input
    /// ended without `exit`, the one it would have.
    pub fn exit_status(&self) -> i32 {
        match self.exit_code.load(Ordering::Acquire) {
            -1 => self.lsp_exit_code(),
            code => code,
        }
    }

    /// The status LSP asks for: 0 after `shutdown`, 1 otherwise.
    fn lsp_exit_code(&self) -> i32 {
        if self.shutdown_requested.load(Ordering::Acquire) {
            0
        } else {
            1
        }
    }
}

/// Sends `window/logMessage` (type 3: info) to the client.
fn log(ctx: &Context, message: impl Into<String>) {
    let message = message.into();
    eprintln!("lsp_server: {message}");
    ctx.notify("window/logMessage", &json!({"type": 3, "message": message}));
}

#[derive(Deserialize)]
struct TextDocumentItem {
    uri: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidOpen {
    text_document: TextDocumentItem,
}

#[derive(Deserialize)]
struct DocumentId {
    uri: String,
}

#[derive(Deserialize)]
struct ContentChange {
    text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidChange {
    text_document: DocumentId,
    content_changes: Vec<ContentChange>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidClose {
    text_document: DocumentId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WordCountParams {
    uri: String,
    configuration_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
struct SlowParams {
    ms: Option<u64>,
}

/// The `example` configuration section, as the client answers it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ExampleConfig {
    min_word_length: Option<usize>,
}

fn initialize(call: Call<'_, Arc<Server>>) -> Result<Value, RpcError> {
    if call.state.shutdown_requested.load(Ordering::Acquire) {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "the server is shutting down",
        ));
    }
    // Sent once (LSP): a second would reset what the first agreed.
    if call.state.initialized.load(Ordering::Acquire) {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "the server is already initialized",
        ));
    }
    // Only what is read of the params: the rest of a client's capabilities
    // (and their shapes) is no reason to refuse it.
    let params: Value = call.decode().unwrap_or(Value::Null);
    let configuration =
        params.pointer("/capabilities/workspace/configuration") == Some(&json!(true));
    call.state
        .client_configuration
        .store(configuration, Ordering::Release);
    call.state.initialized.store(true, Ordering::Release);
    Ok(json!({
        "capabilities": {
            // Full document sync: didChange carries the whole text.
            "textDocumentSync": 1,
            "experimental": {"wordCount": true, "slow": true},
        },
        "serverInfo": {"name": "rpcwire-lsp-example", "version": env!("CARGO_PKG_VERSION")},
    }))
}

/// A notification of the protocol sent with an id: no request the server
/// has, answered as an unknown method is (the lifecycle's errors first).
/// Its handler ran as if it were the notification, before `initialize`
/// and after `shutdown` too.
fn sent_as_request(call: &Call<'_, Arc<Server>>) -> Option<Result<(), RpcError>> {
    call.id().is_some().then(|| unknown_method(call))
}

fn initialized(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    if let Some(answer) = sent_as_request(&call) {
        return answer;
    }
    // Before `initialize` it is dropped, as every notification then: the
    // log message would reach the client before the InitializeResult,
    // which LSP forbids.
    if call.state.initialized.load(Ordering::Acquire) {
        log(call.ctx, "initialized");
    }
    Ok(())
}

fn did_open(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    if let Some(answer) = sent_as_request(&call) {
        return answer;
    }
    if !call.state.initialized.load(Ordering::Acquire) {
        return Ok(()); // LSP: notifications before `initialize` are dropped
    }
    let p: DidOpen = call.decode()?;
    let doc = p.text_document;
    log(
        call.ctx,
        format!("opened {} ({} bytes)", doc.uri, doc.text.len()),
    );
    lock(&call.state.documents).insert(doc.uri, doc.text);
    Ok(())
}

fn did_change(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    if let Some(answer) = sent_as_request(&call) {
        return answer;
    }
    if !call.state.initialized.load(Ordering::Acquire) {
        return Ok(());
    }
    let p: DidChange = call.decode()?;
    if let Some(last) = p.content_changes.into_iter().last() {
        // A document not open is not made one: it would be kept until a
        // `didClose` that never comes.
        if let Some(text) = lock(&call.state.documents).get_mut(&p.text_document.uri) {
            *text = last.text;
        }
    }
    Ok(())
}

fn did_close(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    if let Some(answer) = sent_as_request(&call) {
        return answer;
    }
    let p: DidClose = call.decode()?;
    lock(&call.state.documents).remove(&p.text_document.uri);
    Ok(())
}

fn shutdown(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    call.state.check_ready()?;
    call.state.shutdown_requested.store(true, Ordering::Release);
    log(call.ctx, "shutdown requested");
    Ok(())
}

/// A method this server does not have: the lifecycle's errors as for any
/// request, else -32601 naming it (notifications get no answer either way).
fn unknown_method(call: &Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    call.state.check_ready()?;
    #[derive(serde::Serialize)]
    struct Data<'a> {
        method: &'a str,
    }
    Err(
        RpcError::new(rpcwire::codes::METHOD_NOT_FOUND, "Method not found").with_data(&Data {
            method: call.method(),
        }),
    )
}

fn exit(call: Call<'_, Arc<Server>>) -> Result<(), RpcError> {
    let code = call.state.lsp_exit_code();
    call.state.exit_code.store(code, Ordering::Release);
    eprintln!("lsp_server: exit (status {code})");
    call.state.stop.trigger();
    Ok(())
}

/// Asks the client for the `example` section (the defaults when it does
/// not answer in time), then counts words.
async fn word_count(call: AsyncCall<Arc<Server>>) -> Result<Value, RpcError> {
    call.state.check_ready()?;
    let WordCountParams {
        uri,
        configuration_timeout_ms,
    } = call.decode()?;
    let timeout_ms = configuration_timeout_ms.unwrap_or(CONFIGURATION_TIMEOUT_MS);
    if !(1..=MAX_CONFIGURATION_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(
            RpcError::invalid_params("configurationTimeoutMs out of range").with_data(
                &json!({"configurationTimeoutMs": timeout_ms, "min": 1, "max": MAX_CONFIGURATION_TIMEOUT_MS}),
            ),
        );
    }
    // An unknown document is refused before the client is asked anything.
    if !lock(&call.state.documents).contains_key(&uri) {
        return Err(unknown_document(&uri));
    }
    if !call.state.client_configuration.load(Ordering::Acquire) {
        let why = "the client does not answer workspace/configuration (its initialize did not say capabilities.workspace.configuration): default settings used".to_string();
        return count_words(
            &call.ctx,
            &call.state,
            uri,
            ExampleConfig::default(),
            Some(why),
        );
    }
    let peer = call
        .ctx
        .peer()
        .ok_or_else(|| RpcError::internal("no way to ask the client"))?;
    // When the call is cancelled meanwhile, this future is dropped and the
    // peer tells the client with `$/cancelRequest` that the question is
    // moot.
    let asked = peer
        .request(
            "workspace/configuration",
            Some(&json!({"items": [{"section": "example"}]})),
            Duration::from_millis(timeout_ms),
        )
        .await;
    let (config, fallback) = match asked {
        Ok(answer) => {
            // One answer per item; `null` when the client has no such
            // section.
            let sections: Vec<Option<ExampleConfig>> = answer.decode().map_err(|e| match e {
                DecodeError::Rpc(e) => RpcError::internal(format!(
                    "workspace/configuration failed: {} ({})",
                    e.message, e.code
                )),
                DecodeError::Json(e) => RpcError::internal(format!(
                    "workspace/configuration answered something else: {e}"
                )),
            })?;
            (
                sections.into_iter().next().flatten().unwrap_or_default(),
                None,
            )
        }
        // The peer has already cancelled the request with the client.
        Err(PeerError::Timeout) => {
            let why = format!(
                "the client did not answer workspace/configuration within {timeout_ms} ms: default settings used"
            );
            log(&call.ctx, format!("{uri}: {why}"));
            (ExampleConfig::default(), Some(why))
        }
        Err(e) => {
            return Err(RpcError::internal(format!("workspace/configuration: {e}")));
        }
    };
    count_words(&call.ctx, &call.state, uri, config, fallback)
}

fn unknown_document(uri: &str) -> RpcError {
    RpcError::invalid_params("unknown document").with_data(&json!({"uri": uri}))
}

/// Counts the words of document `uri` under `config`, logs the count, and
/// answers it (with `fallback`, why the defaults were used, if they were).
fn count_words(
    ctx: &Context,
    state: &Server,
    uri: String,
    config: ExampleConfig,
    fallback: Option<String>,
) -> Result<Value, RpcError> {
    let min = config.min_word_length.unwrap_or(1).max(1);
    let words = {
        let docs = lock(&state.documents);
        // Closed while the client was asked.
        let text = docs.get(&uri).ok_or_else(|| unknown_document(&uri))?;
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= min)
            .count()
    };
    log(
        ctx,
        format!("{uri}: {words} words of {min} or more characters"),
    );
    let mut result = json!({"uri": uri, "words": words, "minWordLength": min});
    if let Some(why) = fallback {
        result["configurationFallback"] = Value::String(why);
    }
    Ok(result)
}

/// Logs, when the call is dropped, whether it was cancelled (its future
/// is dropped then, so this is where it can tell).
struct LogIfCancelled {
    ctx: Context,
    cancellation: rpcwire::dispatch::Cancellation,
}

impl Drop for LogIfCancelled {
    fn drop(&mut self) {
        if self.cancellation.is_cancelled() {
            log(&self.ctx, "example/slow: cancelled");
        }
    }
}

/// Waits `ms`; `$/cancelRequest` ends it early (the dispatcher answers
/// -32800 and drops this future).
async fn slow(call: AsyncCall<Arc<Server>>) -> Result<Value, RpcError> {
    let _log = LogIfCancelled {
        ctx: call.ctx.clone(),
        cancellation: call.cancellation().clone(),
    };
    call.state.check_ready()?;
    let SlowParams { ms } = call.decode()?;
    let ms = ms.unwrap_or(60_000);
    log(&call.ctx, format!("example/slow: waiting {ms} ms"));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(json!({"waited": ms}))
}

/// Locks a mutex, whose data stays consistent even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The service: its state (`stop` is triggered by `exit`) and its
/// dispatcher, for any stream driver with [`Lsp`] framing (the process's
/// stdio in `main`; an in-memory pipe in `tests/transports/lsp.rs`, which includes
/// this file).
pub fn language_server(stop: Shutdown) -> (Arc<Server>, Dispatcher<Arc<Server>, WithAsync>) {
    let server = Arc::new(Server {
        documents: Mutex::default(),
        initialized: AtomicBool::new(false),
        client_configuration: AtomicBool::new(false),
        shutdown_requested: AtomicBool::new(false),
        stop,
        exit_code: AtomicI32::new(-1),
    });
    let dispatcher = Dispatcher::builder(Arc::clone(&server))
        .method("initialize", initialize)
        .method("initialized", initialized)
        .method("textDocument/didOpen", did_open)
        .method("textDocument/didChange", did_change)
        .method("textDocument/didClose", did_close)
        .method("shutdown", shutdown)
        .method("exit", exit)
        .async_method("example/wordCount", word_count)
        .async_method("example/slow", slow)
        // Names of no method here: LSP's lifecycle first (-32002 before
        // `initialize`, -32600 after `shutdown`), then -32601.
        .fallback(|call: Call<'_, Arc<Server>>| unknown_method(&call))
        .cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
        // The client decides how long a call may take (it cancels).
        .timeout(None)
        .build()
        .expect("method names are unique");
    (server, dispatcher)
}

/// The limits the process serves with: the defaults, without a shutdown
/// grace. `exit` ends the process at once, as LSP means it to (a client
/// waits a moment for its server to exit, then kills it): calls still
/// running are dropped, not waited for.
pub fn stdio_limits() -> Limits {
    Limits {
        shutdown_grace: Duration::ZERO,
        ..Limits::default()
    }
}

/// How long calls still running may answer once the input has ended (the
/// client went away, or closed its side without `exit`): a call that waits
/// on the client fails at once, and its answer goes out; one that could
/// run for minutes (`example/slow`) is dropped, and the process exits,
/// rather than outlive an editor that crashed.
pub const END_OF_INPUT_GRACE: Duration = Duration::from_secs(1);

/// `input`, triggering `stop` [`END_OF_INPUT_GRACE`] after it ends.
pub struct EndOfInputStops<R> {
    input: R,
    stop: Shutdown,
    ended: bool,
}

impl<R> EndOfInputStops<R> {
    pub fn new(input: R, stop: Shutdown) -> Self {
        EndOfInputStops {
            input,
            stop,
            ended: false,
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EndOfInputStops<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.input).poll_read(cx, buf);
        let at_end = matches!(polled, std::task::Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0;
        if at_end && !self.ended {
            self.ended = true;
            let stop = self.stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(END_OF_INPUT_GRACE).await;
                stop.trigger();
            });
        }
        polled
    }
}

/// Stops the server once the process that started it is gone (LSP: "if
/// the parent process is not alive then the server should exit"), looked
/// at every second: an editor that crashed while the driver had paused
/// reading (its calls at the cap, 64 KiB of messages held) left the end of
/// its input unread, and the server alive for ever.
#[cfg(unix)]
fn stop_when_orphaned(stop: Shutdown) {
    let parent = std::os::unix::process::parent_id();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if std::os::unix::process::parent_id() != parent {
                eprintln!("lsp_server: the process that started it is gone; stopping");
                stop.trigger();
                return;
            }
        }
    });
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let stop = Shutdown::new();
    #[cfg(unix)]
    stop_when_orphaned(stop.clone());
    // After the parent is known: a parent gone before is not seen to go.
    eprintln!("lsp_server: ready, LSP frames on stdin");
    let (server, dispatcher) = language_server(stop.clone());
    let limits = stdio_limits();
    let framer = Lsp::new().max_frame(limits.max_message_len);
    // `serve_stdio`'s driver, with an input that ends calls still running
    // shortly after it ends.
    let mut out = rpcwire::server::stream::stdout();
    let reason = Driver::new(framer)
        .limits(limits)
        .idle_timeout(None)
        .context(rpcwire::Context::builder().transport("stdio"))
        .shutdown(stop.clone())
        .run(
            &dispatcher,
            EndOfInputStops::new(tokio::io::stdin(), stop),
            &mut out,
        )
        .await;
    let reason = match reason {
        Ok(reason) => reason,
        // Its output closed (the client stopped reading), say: status 1,
        // at once (tokio's stdin reader, below).
        Err(e) => {
            eprintln!("lsp_server: {e}");
            std::process::exit(1)
        }
    };
    // Without a shutdown grace the driver does not wait for its last
    // write (a message a dropped call sent): it may still be under way on
    // its blocking thread, which `exit` would cut short.
    // (`serve_stdio` does the same.)
    let _ = tokio::time::timeout(
        rpcwire::server::stream::FINAL_WRITE,
        tokio::io::AsyncWriteExt::flush(&mut out),
    )
    .await;
    let code = server.exit_status();
    eprintln!("lsp_server: stopped ({reason:?}), status {code}");
    // At once: tokio's stdin reader is a blocking thread the runtime would
    // wait for at its shutdown.
    std::process::exit(code)
}
