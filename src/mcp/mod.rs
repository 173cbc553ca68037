//! An MCP server layer (feature `mcp`): the Model Context Protocol's
//! lifecycle, tools, progress, cancellation and logging on the crate's
//! dispatcher, over stdio ([`McpServer::serve_stdio`]) and Streamable HTTP
//! ([`http`]).
//!
//! # Revisions
//!
//! * `2025-06-18` and `2025-11-25`: the `initialize` /
//!   `notifications/initialized` lifecycle. `initialize` answers the
//!   client's revision when it is one of these, the newest of them when the
//!   client asks for another dated revision (earlier or later: the spec's
//!   "MUST respond with another protocol version it supports"), and -32602
//!   with `data.supported` (and `data.requested`) for a version that is not
//!   a revision. The client's `capabilities` are kept for the session
//!   (a tool reads them with [`ToolContext::client_capabilities`]): more
//!   than 16 KiB of them, or more than 1,024 JSON values, are -32602 with
//!   `data.limit` (`data.limit_values`). `ping` and
//!   `logging/setLevel` are answered
//!   at any time; other requests of this lifecycle before `initialize` get
//!   -32600.
//! * `2026-07-28`: no handshake. A request whose `_meta` carries
//!   `io.modelcontextprotocol/protocolVersion` `2026-07-28` is served on
//!   its own (a version rpcwire does not know is -32022
//!   `UnsupportedProtocolVersion` with `data.supported` and
//!   `data.requested`; an earlier revision named there is served as the
//!   session is, and before `initialize` is -32600),
//!   `io.modelcontextprotocol/clientCapabilities` must be an object (else
//!   -32602), `io.modelcontextprotocol/logLevel` opts in to log messages.
//!   Clients open with `server/discover`. Every result carries `resultType`
//!   and the server's identity in `_meta`; `server/discover` and
//!   `tools/list` carry the cache hints `ttlMs` and `cacheScope`. `ping` and
//!   `logging/setLevel`, removed by this revision, are -32601 there.
//!
//! One connection may serve both: a stdio client that probes
//! `server/discover` and then falls back to `initialize` is served in the
//! revision it settles on. Methods the server does not know are -32601, and
//! the server keeps running. JSON-RPC batches are not part of these
//! revisions: an array is answered with one -32600.
//!
//! # Tools
//!
//! [`Tool`]s have a name, a title, a description, an input JSON Schema,
//! optionally an output schema and annotations. `tools/call` checks the
//! arguments against the input schema (with the `jsonschema` crate) before
//! the tool runs. Under 2025-06-18 a violation is -32602 whose `data` names
//! what failed: `{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}`
//! for a value outside an `enum`, `{"field":"project_dir","reason":"required property is missing"}`
//! for a missing one, `{"field":…,"reason":…,"received":…}` otherwise. A
//! `received` value whose JSON text passes 256 bytes is shown as the start
//! of that text, ending in `…`, with its length in `receivedLength`, so
//! that a reply stays small whatever the client sent. `pattern`s are
//! matched by the linear-time `regex` engine: a schema with lookarounds or
//! backreferences is refused when the server is built. From
//! 2025-11-25 on (SEP-1303: the model should see what to correct) it is a
//! result with `isError: true` whose text is that message and that `data`.
//! An unknown tool, and `arguments` that are no object (they break the
//! request's own schema), are -32602 in every revision; a tool name, cursor,
//! log level or protocol version an error quotes is cut at 256 bytes too.
//! A failure of the tool itself is a result with `isError: true`. Over
//! Streamable HTTP a call answered within
//! [`stream_keepalive`](http::HttpConfig::stream_keepalive) (15 s) gets a
//! JSON response; a longer one an event stream, kept alive by comments.
//!
//! ```
//! use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
//! use serde_json::json;
//!
//! let server = McpServer::builder("demo", "1.0.0")
//!     .tool(Tool::new(
//!         "add",
//!         json!({"type": "object",
//!                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
//!                "required": ["a", "b"]}),
//!         |args, _cx: ToolContext| async move {
//!             let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
//!             Ok(ToolOutput::structured(json!({"sum": sum})))
//!         },
//!     ))
//!     .build()?;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // Any transport: here, one message in memory (2026-07-28, no handshake).
//! let mut conn = server.connection("memory");
//! let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3},
//!     "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
//! let mut out = Vec::new();
//! server.handle(&rpcwire::bytes::Bytes::from_static(request), &mut conn, &mut out).await;
//! let reply: serde_json::Value = serde_json::from_slice(&out).unwrap();
//! assert_eq!(reply["result"]["structuredContent"], json!({"sum": 5.0}));
//! assert_eq!(reply["result"]["resultType"], "complete");
//! # });
//! # Ok::<(), rpcwire::mcp::BuildError>(())
//! ```
//!
//! Tools may be added and removed while the server runs
//! ([`McpServer::add_tool`], [`McpServer::remove_tool`]): sessions of the
//! initialize lifecycle are sent `notifications/tools/list_changed` (the
//! `listChanged` capability).
//!
//! # Transports
//!
//! * stdio ([`McpServer::serve_stdio`], or [`McpServer::serve_stream`] over
//!   any byte stream): one message per line, only MCP messages on stdout,
//!   returns when stdin closes (at most 2 s later: requests still
//!   unanswered then get -32800, their calls cancelled).
//!   `notifications/cancelled` stops the call
//!   ([`Connection::cancel`](crate::Connection::cancel)), which then sends
//!   no reply; unknown ids are ignored.
//! * Streamable HTTP ([`http`]).

mod handlers;
pub mod http;
mod session;
mod stdio;
mod tool;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::dispatch::{ReplyBuf, WithAsync};
use crate::{Connection, Context, Dispatcher};

pub(crate) use session::SessionState;
pub use tool::{
    AskError, Content, EmbeddedResource, InputRequest, LogLevel, ResourceBody, Tool,
    ToolAnnotations, ToolContext, ToolError, ToolOutput,
};

/// The revision of the protocol without `initialize` (per-request `_meta`).
pub const MODERN_VERSION: &str = "2026-07-28";
/// The revisions of the `initialize` lifecycle this layer speaks, newest
/// first (what an `initialize` asking for a revision it does not speak is
/// told in its -32602's `data.supported`).
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];
/// Every revision this layer speaks, newest first (what a request whose
/// `_meta` names a revision it does not speak is told in its -32022's
/// `data.supported`; `initialize` lists [`LEGACY_VERSIONS`], the ones it
/// can agree on).
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18"];

/// Error codes MCP defines (2026-07-28).
pub mod codes {
    /// HTTP headers do not match the body, or a required one is missing.
    pub const HEADER_MISMATCH: i32 = -32020;
    /// The request needs a client capability the client did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i32 = -32021;
    /// The request's protocol version is not one the server speaks.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

/// The `_meta` key carrying a request's protocol version (2026-07-28).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key carrying a request's client capabilities (2026-07-28).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key carrying a request's log level (2026-07-28).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The result `_meta` key carrying the server's identity (2026-07-28).
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Why a server could not be built, or a tool added.
#[derive(Debug)]
pub struct BuildError(String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// A tool as the server keeps it: compiled schemas, its listing written
/// once.
pub(crate) struct ToolEntry {
    pub(crate) tool: Tool,
    pub(crate) input: jsonschema::Validator,
    pub(crate) output: Option<jsonschema::Validator>,
    /// Its `tools/list` entry, serialized.
    pub(crate) listing: Box<RawValue>,
}

impl ToolEntry {
    fn new(tool: Tool) -> Result<ToolEntry, BuildError> {
        let name = tool.name().to_owned();
        if name.is_empty() {
            return Err(BuildError("a tool needs a name".into()));
        }
        // MCP's Tool.inputSchema and Tool.outputSchema are object schemas
        // (`"type": "object"`): clients check the listing against that (the
        // TypeScript SDK refuses a `tools/list` result with one tool
        // without it), and arguments are an object.
        let object_schema = |schema: &Value, which: &str| {
            if schema.get("type").and_then(Value::as_str) == Some("object") {
                Ok(())
            } else {
                Err(BuildError(format!(
                    "tool {name}: {which} must be a JSON object with \"type\": \"object\""
                )))
            }
        };
        object_schema(&tool.def.input_schema, "inputSchema")?;
        if let Some(s) = &tool.def.output_schema {
            object_schema(s, "outputSchema")?;
        }
        // Patterns run on the linear-time `regex` engine: on the default
        // backtracking one a pattern with a backreference took up to a
        // million steps for each string a client sent (seconds for a call
        // of a few KiB, twice: `is_valid`, then `validate` to say why).
        // Lookarounds and backreferences are refused here instead.
        let compile = |schema: &Value, which: &str| {
            jsonschema::options()
                .with_pattern_options(jsonschema::PatternOptions::regex())
                .build(schema)
                .map_err(|e| BuildError(format!("tool {name}: invalid {which}: {e}")))
        };
        let input = compile(&tool.def.input_schema, "inputSchema")?;
        let output = match &tool.def.output_schema {
            Some(s) => Some(compile(s, "outputSchema")?),
            None => None,
        };
        let listing = serde_json::value::to_raw_value(&tool.def)
            .map_err(|e| BuildError(format!("tool {name}: {e}")))?;
        Ok(ToolEntry {
            tool,
            input,
            output,
            listing,
        })
    }
}

/// The tools, as one immutable snapshot (replaced whole on a change).
pub(crate) struct Registry {
    pub(crate) tools: Vec<Arc<ToolEntry>>,
    /// Each tool's number in the order tools were added, increasing along
    /// `tools` (a replaced tool keeps its place and number): a `tools/list`
    /// cursor names the last one listed, and the next page starts right
    /// after it, whatever was added or removed meanwhile.
    pub(crate) seqs: Vec<u64>,
    /// The number the next tool added gets.
    next_seq: u64,
    index: HashMap<String, usize>,
}

impl Registry {
    fn with(&self, entry: ToolEntry) -> Registry {
        let (mut tools, mut seqs, mut next_seq) =
            (self.tools.clone(), self.seqs.clone(), self.next_seq);
        let entry = Arc::new(entry);
        match self.index.get(entry.tool.name()) {
            Some(&i) => tools[i] = entry,
            None => {
                tools.push(entry);
                seqs.push(next_seq);
                next_seq += 1;
            }
        }
        Registry::indexed(tools, seqs, next_seq)
    }

    /// This registry without the tool `name`.
    fn without(&self, name: &str) -> Registry {
        let (tools, seqs) = self
            .tools
            .iter()
            .zip(&self.seqs)
            .filter(|(t, _)| t.tool.name() != name)
            .map(|(t, &s)| (Arc::clone(t), s))
            .unzip();
        Registry::indexed(tools, seqs, self.next_seq)
    }

    pub(crate) fn from_list(tools: Vec<Arc<ToolEntry>>) -> Registry {
        let n = tools.len() as u64;
        Registry::indexed(tools, (1..=n).collect(), n + 1)
    }

    fn indexed(tools: Vec<Arc<ToolEntry>>, seqs: Vec<u64>, next_seq: u64) -> Registry {
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.tool.name().to_owned(), i))
            .collect();
        Registry {
            tools,
            seqs,
            next_seq,
            index,
        }
    }

    /// Where the page after the tool numbered `seq` starts; `None` for a
    /// number never given (a forged cursor).
    pub(crate) fn after_seq(&self, seq: u64) -> Option<usize> {
        (seq < self.next_seq).then(|| self.seqs.partition_point(|&s| s <= seq))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }
}

/// The server's name and version, as `serverInfo` shows them.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Implementation {
    pub(crate) name: String,
    pub(crate) version: String,
}

/// What every connection of a server shares.
pub(crate) struct ServerInner {
    pub(crate) info: Implementation,
    pub(crate) instructions: Option<String>,
    pub(crate) registry: RwLock<Arc<Registry>>,
    pub(crate) page_size: usize,
    pub(crate) ttl_ms: u64,
    pub(crate) changes: tokio::sync::broadcast::Sender<()>,
}

impl ServerInner {
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Builds an [`McpServer`].
pub struct McpServerBuilder {
    info: Implementation,
    instructions: Option<String>,
    tools: Vec<Tool>,
    page_size: usize,
    ttl: Duration,
    timeout: Option<Duration>,
    max_in_flight: usize,
    quiet_panics: bool,
    panic_messages: bool,
}

impl McpServerBuilder {
    /// Instructions for the model on how to use the server.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Adds a tool (a tool of the same name is replaced).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
        self
    }

    /// Tools per `tools/list` page (default 100); further ones come with a
    /// `nextCursor`.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// The `ttlMs` cache hint on 2026-07-28 `server/discover` and
    /// `tools/list` results (default 0: clients re-fetch when they need the
    /// list, as tools may change).
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// A deadline for each tool call (default none: clients cancel what
    /// they stop waiting for). A call past it is answered with -32001 (the
    /// official SDKs' `RequestTimeout`), message "Request timed out",
    /// `data.timeout_ms` giving the deadline.
    pub fn call_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Calls of one connection running at once (default 64); more wait.
    /// Over Streamable HTTP, requests of one session running at once
    /// (calls without a session are not counted). `ping` never waits: it
    /// is answered at once however many calls run.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Keeps the process's panic hook quiet for tools that panic (default
    /// `false`: the hook reports them, on stderr by default, which over
    /// stdio is the log and never the protocol's stdout). Either way the
    /// call is answered -32603, with the panic's message in `data.panic`
    /// unless [`panic_messages`](Self::panic_messages) is off, and other panics reach the
    /// hook as usual ([`DispatcherBuilder::quiet_panics`](crate::dispatch::DispatcherBuilder::quiet_panics)).
    pub fn quiet_panics(mut self, quiet: bool) -> Self {
        self.quiet_panics = quiet;
        self
    }

    /// Whether a panicking tool's -32603 carries the panic's message in
    /// `data.panic` (default `true`; `false` keeps it from clients, as
    /// [`DispatcherBuilder::panic_messages`](crate::dispatch::DispatcherBuilder::panic_messages)).
    pub fn panic_messages(mut self, send: bool) -> Self {
        self.panic_messages = send;
        self
    }

    /// Builds the server; fails if a tool's schema is not a valid JSON
    /// Schema.
    pub fn build(self) -> Result<McpServer, BuildError> {
        let mut entries = Vec::with_capacity(self.tools.len());
        for tool in self.tools {
            entries.push(Arc::new(ToolEntry::new(tool)?));
        }
        let inner = ServerInner {
            info: self.info,
            instructions: self.instructions,
            registry: RwLock::new(Arc::new(Registry::from_list(entries))),
            page_size: self.page_size,
            ttl_ms: u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            changes: tokio::sync::broadcast::channel(16).0,
        };
        let dispatcher = handlers::dispatcher(
            inner,
            self.timeout,
            self.max_in_flight,
            (self.quiet_panics, self.panic_messages),
        )
        .map_err(|e| BuildError(e.to_string()))?;
        Ok(McpServer { dispatcher })
    }
}

/// An MCP server: its tools and identity, and the dispatcher that answers
/// MCP methods. Cheap to clone; every transport of one server shares its
/// tools.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) dispatcher: Dispatcher<ServerInner, WithAsync>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner().info.name)
            .field("tools", &self.tool_names())
            .finish()
    }
}

/// Carries a connection's (or HTTP session's) lifecycle state in its
/// [`Context`].
#[derive(Clone)]
pub(crate) struct SessionHandle(pub(crate) Arc<SessionState>);

impl McpServer {
    /// A builder for a server with this name and version (its
    /// `serverInfo`).
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder {
            info: Implementation {
                name: name.into(),
                version: version.into(),
            },
            instructions: None,
            tools: Vec::new(),
            page_size: 100,
            ttl: Duration::ZERO,
            timeout: None,
            max_in_flight: crate::dispatch::DEFAULT_MAX_IN_FLIGHT,
            quiet_panics: false,
            panic_messages: true,
        }
    }

    pub(crate) fn inner(&self) -> &ServerInner {
        self.dispatcher.state()
    }

    /// The dispatcher answering MCP methods, for transports of your own:
    /// drive it with connections from [`connection`](McpServer::connection)
    /// (they carry the lifecycle state), and refuse JSON arrays first
    /// ([`handle`](McpServer::handle) does both).
    pub fn dispatcher(&self) -> &Dispatcher<impl Send + Sync + 'static, WithAsync> {
        &self.dispatcher
    }

    /// A connection for a transport named `transport`, with a fresh
    /// lifecycle state (one per stdio process or HTTP session).
    pub fn connection(&self, transport: &'static str) -> Connection {
        self.dispatcher.connection(self.context(transport).build())
    }

    /// A context builder with a fresh lifecycle state, for transports that
    /// add their own parts (a peer, a session id). Make the connection with
    /// [`dispatcher`](McpServer::dispatcher)`().connection(…)`
    /// ([`Dispatcher::connection`]): its peer then sends
    /// `notifications/cancelled` for a request it gives up on even before
    /// the connection's first message.
    pub fn context(&self, transport: &'static str) -> crate::ContextBuilder {
        Self::context_with(transport, Arc::new(SessionState::default()))
    }

    pub(crate) fn context_with(
        transport: &'static str,
        session: Arc<SessionState>,
    ) -> crate::ContextBuilder {
        Context::builder()
            .transport(transport)
            .extension(SessionHandle(session))
    }

    /// Handles one message on `conn` and appends the reply, if any, to
    /// `out`: a JSON array gets one -32600 (no batches in MCP), anything
    /// else goes to the dispatcher. Returns whether a reply was written.
    /// Cancellations the message asked for are carried out on `conn`.
    ///
    /// As [`Dispatcher::handle_async`]: calls earlier messages left
    /// waiting for a slot (`tools/call`s sent as notifications past
    /// [`max_in_flight`](McpServerBuilder::max_in_flight)) start first,
    /// and `handle` waits for that, `ping` included; dropping the future
    /// before it finishes drops its call (the next message gets its own
    /// reply only). A transport whose tools ask the client something
    /// ([`ToolContext::ask_client`]), whose answer comes as a later
    /// message, drives the connection itself instead, with
    /// [`Connection::start`] and [`Connection::poll_replies`], as
    /// [`serve_stream`](McpServer::serve_stream) does.
    pub async fn handle<B: ReplyBuf>(
        &self,
        input: &Bytes,
        conn: &mut Connection,
        out: &mut B,
    ) -> bool {
        if is_batch(input) {
            write_batch_refusal(out);
            return true;
        }
        // The dispatcher's way: calls earlier messages left waiting for
        // a slot start first, and a future dropped before the reply
        // leaves nothing for the next message. (A copy of its older loop
        // had neither: async notifications past the cap queued for ever,
        // and a dropped `handle` left its reply for the next one's.)
        self.dispatcher
            .handle_async_then(input, conn, out, |conn| {
                apply_cancels(conn);
            })
            .await
    }

    /// Adds a tool, or replaces the one of the same name, and tells the
    /// sessions of the initialize lifecycle (`notifications/tools/list_changed`).
    pub fn add_tool(&self, tool: Tool) -> Result<(), BuildError> {
        let entry = ToolEntry::new(tool)?;
        {
            let mut reg = self
                .inner()
                .registry
                .write()
                .unwrap_or_else(|p| p.into_inner());
            *reg = Arc::new(reg.with(entry));
        }
        let _ = self.inner().changes.send(());
        Ok(())
    }

    /// Removes the tool named `name`; returns whether there was one (and
    /// then tells the sessions, as [`add_tool`](McpServer::add_tool)).
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = {
            let mut reg = self
                .inner()
                .registry
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if reg.get(name).is_none() {
                false
            } else {
                *reg = Arc::new(reg.without(name));
                true
            }
        };
        if removed {
            let _ = self.inner().changes.send(());
        }
        removed
    }

    /// The names of the tools, in `tools/list` order.
    pub fn tool_names(&self) -> Vec<String> {
        self.inner()
            .registry()
            .tools
            .iter()
            .map(|t| t.tool.name().to_owned())
            .collect()
    }
}

/// Whether a message is a JSON array (a batch, refused in MCP).
pub(crate) fn is_batch(input: &[u8]) -> bool {
    input
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .is_some_and(|&b| b == b'[')
}

/// The one -32600 that answers a batch.
pub(crate) fn write_batch_refusal<B: ReplyBuf + ?Sized>(out: &mut B) {
    out.extend_from_slice(
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"reason":"JSON-RPC batches are not supported by MCP since revision 2025-06-18"}}}"#,
    );
}

/// Drives `conn`'s calls: ready when replies were written, or when no call
/// is left (a cancelled call writes none).
pub(crate) fn poll_drain<B: ReplyBuf>(
    conn: &mut Connection,
    dispatcher: &Dispatcher<ServerInner, WithAsync>,
    cx: &mut std::task::Context<'_>,
    out: &mut B,
) -> std::task::Poll<usize> {
    conn.poll_until_drained(dispatcher, cx, out)
}

/// Carries out the cancellations the last message asked for; returns the
/// ids no call started has (a request held at the cap may have one).
pub(crate) fn apply_cancels(conn: &mut Connection) -> Vec<Box<[u8]>> {
    let Some(session) = conn.context().extension::<SessionHandle>().cloned() else {
        return Vec::new();
    };
    let mut ids = session.0.take_cancels();
    ids.retain(|id| !conn.cancel(id));
    ids
}
