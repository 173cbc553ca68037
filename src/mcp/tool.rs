//! Tools: their definition ([`Tool`]), what they return ([`ToolOutput`],
//! [`Content`]) and what they see while they run ([`ToolContext`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Context;
use crate::dispatch::Cancellation;
use crate::peer::{OwnedResponse, PeerError};

use super::session::SessionState;

/// The future a tool returns, boxed.
pub(crate) type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;
/// A tool's handler, erased.
pub(crate) type ToolFn = dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync;

/// A tool: its definition as `tools/list` shows it (name, title,
/// description, input and output JSON Schemas, annotations) and the async
/// function that runs it.
///
/// The handler receives the `arguments` object, already checked against
/// `inputSchema` (a call that breaks the schema never reaches it), and a
/// [`ToolContext`] for progress, logging and cancellation.
///
/// ```
/// use rpcwire::mcp::{Tool, ToolContext, ToolOutput};
/// use serde_json::json;
///
/// let echo = Tool::new(
///     "echo",
///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     |args, _cx: ToolContext| async move { Ok(ToolOutput::text(args["text"].as_str().unwrap_or(""))) },
/// )
/// .title("Echo")
/// .description("Answers with its argument");
/// assert_eq!(echo.name(), "echo");
/// ```
#[derive(Clone)]
pub struct Tool {
    pub(crate) def: ToolDef,
    pub(crate) handler: Arc<ToolFn>,
}

/// What `tools/list` shows of a tool.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolDef {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) annotations: Option<ToolAnnotations>,
}

impl Tool {
    /// A tool named `name` whose `arguments` must match `input_schema` (a
    /// JSON Schema object with `"type": "object"`, as MCP requires, else
    /// the server is not built; 2020-12 unless it names another dialect in
    /// `$schema`; its `pattern`s without lookarounds or backreferences, so
    /// that checking a client's arguments takes time linear in them), run
    /// by `handler`.
    pub fn new<F, Fut>(name: impl Into<String>, input_schema: Value, handler: F) -> Tool
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Tool {
            def: ToolDef {
                name: name.into(),
                title: None,
                description: None,
                input_schema,
                output_schema: None,
                annotations: None,
            },
            handler: Arc::new(move |args, cx| Box::pin(handler(args, cx))),
        }
    }

    /// A human-readable name for display.
    pub fn title(mut self, title: impl Into<String>) -> Tool {
        self.def.title = Some(title.into());
        self
    }

    /// What the tool does, for the model.
    pub fn description(mut self, description: impl Into<String>) -> Tool {
        self.def.description = Some(description.into());
        self
    }

    /// The JSON Schema of the tool's `structuredContent` (with
    /// `"type": "object"`, as MCP requires). A result whose
    /// structured content breaks it is answered with -32603 (the tool, not
    /// the client, is at fault), and a result without structured content
    /// (other than an error) likewise.
    pub fn output_schema(mut self, schema: Value) -> Tool {
        self.def.output_schema = Some(schema);
        self
    }

    /// Hints about the tool's behaviour.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Tool {
        self.def.annotations = Some(annotations);
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("def", &self.def).finish()
    }
}

/// Hints about a tool's behaviour (all optional; clients must not trust
/// them from untrusted servers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// One block of a tool's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Base64 data.
        data: String,
        /// Its MIME type (`image/png`, …).
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// Base64 data.
        data: String,
        /// Its MIME type (`audio/wav`, …).
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its MIME type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A resource embedded in the result.
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Content {
        Content::Text { text: text.into() }
    }

    /// An image block (`data` already base64).
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Content {
        Content::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An audio block (`data` already base64).
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Content {
        Content::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// A resource link.
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Content {
        Content::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            description: None,
            mime_type: None,
        }
    }

    /// An embedded text resource.
    pub fn embedded_text(
        uri: impl Into<String>,
        mime_type: Option<String>,
        text: impl Into<String>,
    ) -> Content {
        Content::Resource {
            resource: EmbeddedResource {
                uri: uri.into(),
                mime_type,
                body: ResourceBody::Text { text: text.into() },
            },
        }
    }

    /// An embedded binary resource (`blob` already base64).
    pub fn embedded_blob(
        uri: impl Into<String>,
        mime_type: Option<String>,
        blob: impl Into<String>,
    ) -> Content {
        Content::Resource {
            resource: EmbeddedResource {
                uri: uri.into(),
                mime_type,
                body: ResourceBody::Blob { blob: blob.into() },
            },
        }
    }
}

/// An embedded resource: its URI, MIME type and contents, text or a base64
/// blob (exactly one: the protocol's `TextResourceContents` or
/// `BlobResourceContents`).
///
/// ```
/// use rpcwire::mcp::{Content, EmbeddedResource, ResourceBody};
///
/// let logo = Content::Resource {
///     resource: EmbeddedResource {
///         uri: "file:///logo.png".into(),
///         mime_type: Some("image/png".into()),
///         body: ResourceBody::Blob { blob: "iVBORw0KGgo=".into() },
///     },
/// };
/// assert_eq!(logo, Content::embedded_blob("file:///logo.png", Some("image/png".into()), "iVBORw0KGgo="));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EmbeddedResource {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its contents.
    #[serde(flatten)]
    pub body: ResourceBody,
}

/// The contents of an [`EmbeddedResource`]: written as its `text` or its
/// `blob` member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ResourceBody {
    /// Text contents.
    Text {
        /// The text.
        text: String,
    },
    /// Binary contents.
    Blob {
        /// The bytes, base64-encoded.
        blob: String,
    },
}

/// What a tool returns: content blocks, optional structured content, and
/// whether the tool itself failed (`isError`, which the model sees; a
/// protocol error is a JSON-RPC error instead).
///
/// Structured content is also written as a text block (its JSON) when the
/// tool gives no content of its own, for clients older than structured
/// content.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    pub(crate) content: Vec<Content>,
    pub(crate) structured: Option<Value>,
    pub(crate) is_error: bool,
    /// 2026-07-28: the client's input is needed first (no result yet).
    pub(crate) input_required: Option<InputRequired>,
}

/// What an [`input_required`](ToolOutput::input_required) output asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct InputRequired {
    pub(crate) requests: serde_json::Map<String, Value>,
    pub(crate) state: Option<String>,
}

/// A request for the client embedded in a 2026-07-28 `input_required`
/// result (multi-round-trip requests, SEP-2322): the client fulfils it
/// (asks its model, the user, its roots) and calls the tool again with the
/// answer ([`ToolContext::input_response`]).
#[derive(Clone, Debug, PartialEq)]
pub struct InputRequest {
    method: &'static str,
    params: Option<Value>,
}

impl InputRequest {
    /// `sampling/createMessage` with these params (`messages`,
    /// `maxTokens`, ...): the client's model answers.
    pub fn sampling(params: Value) -> InputRequest {
        InputRequest {
            method: "sampling/createMessage",
            params: Some(params),
        }
    }

    /// `elicitation/create` with these params (`message`,
    /// `requestedSchema`, ...): the user answers.
    pub fn elicitation(params: Value) -> InputRequest {
        InputRequest {
            method: "elicitation/create",
            params: Some(params),
        }
    }

    /// `roots/list`: the client's roots.
    pub fn roots() -> InputRequest {
        InputRequest {
            method: "roots/list",
            params: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut request = serde_json::Map::new();
        request.insert("method".into(), Value::from(self.method));
        if let Some(params) = &self.params {
            request.insert("params".into(), params.clone());
        }
        Value::Object(request)
    }
}

/// The client capability a request from server to client needs that
/// `client` (its declared capabilities) lacks, as a dotted path, or `None`
/// when it may be sent. From 2025-11-25 on a capability's members narrow
/// it: `elicitation: {}` is form mode only (URL mode needs
/// `elicitation.url`; a client listing its modes needs `elicitation.form`
/// for a form), and sampling with `tools` or `toolChoice` needs
/// `sampling.tools` (the spec's MUST NOTs for servers; clients of earlier
/// revisions declare neither, and have neither feature).
pub(crate) fn undeclared_capability(
    method: &str,
    params: Option<&Value>,
    client: Option<&Value>,
) -> Option<&'static str> {
    let declared = |path: &[&str]| {
        client
            .and_then(|c| path.iter().try_fold(c, |v, member| v.get(*member)))
            .is_some_and(Value::is_object)
    };
    let param = |name: &str| params.and_then(|p| p.get(name));
    match method {
        "sampling/createMessage" => {
            if !declared(&["sampling"]) {
                Some("sampling")
            } else if (param("tools").is_some() || param("toolChoice").is_some())
                && !declared(&["sampling", "tools"])
            {
                Some("sampling.tools")
            } else {
                None
            }
        }
        "elicitation/create" => {
            if !declared(&["elicitation"]) {
                return Some("elicitation");
            }
            if param("mode").and_then(Value::as_str) == Some("url") {
                return (!declared(&["elicitation", "url"])).then_some("elicitation.url");
            }
            let lists_modes = client
                .and_then(|c| c.get("elicitation"))
                .is_some_and(|e| e.get("form").is_some() || e.get("url").is_some());
            (lists_modes && !declared(&["elicitation", "form"])).then_some("elicitation.form")
        }
        "roots/list" => (!declared(&["roots"])).then_some("roots"),
        _ => None,
    }
}

impl ToolOutput {
    /// A result of one text block.
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Content::text(text)],
            ..Default::default()
        }
    }

    /// A result of structured content (checked against the tool's output
    /// schema, and mirrored as a text block). It must be a JSON object, as
    /// MCP's `structuredContent` is: anything else is answered with -32603.
    pub fn structured(value: Value) -> ToolOutput {
        ToolOutput {
            structured: Some(value),
            ..Default::default()
        }
    }

    /// A failure of the tool (`isError: true`) with a message for the
    /// model.
    pub fn error(message: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Content::text(message)],
            is_error: true,
            ..Default::default()
        }
    }

    /// 2026-07-28 (multi-round-trip requests, SEP-2322): no result yet,
    /// the client's input is needed first. The client fulfils `requests`
    /// (keyed as the tool likes) and calls the tool again with the same
    /// arguments, the answers ([`ToolContext::input_response`]) and `state`
    /// passed back unchanged ([`ToolContext::request_state`]). That
    /// revision has no requests from server to client
    /// ([`ToolContext::ask_client`] is refused in it); in the `initialize`
    /// lifecycle a tool asks with `ask_client` instead, and an
    /// `input_required` output there is answered with -32603.
    ///
    /// ```
    /// use rpcwire::mcp::{InputRequest, Tool, ToolContext, ToolOutput, MODERN_VERSION};
    /// use serde_json::{Value, json};
    ///
    /// let tool = Tool::new("ask-model", json!({"type": "object"}), |_, cx: ToolContext| async move {
    ///     if let Some(answer) = cx.input_response("answer") {
    ///         return Ok(ToolOutput::text(answer["content"]["text"].as_str().unwrap_or_default()));
    ///     }
    ///     let ask = json!({
    ///         "messages": [{"role": "user", "content": {"type": "text", "text": "A name?"}}],
    ///         "maxTokens": 50
    ///     });
    ///     Ok(ToolOutput::input_required([("answer", InputRequest::sampling(ask))], None))
    /// });
    /// ```
    pub fn input_required<K: Into<String>>(
        requests: impl IntoIterator<Item = (K, InputRequest)>,
        state: Option<String>,
    ) -> ToolOutput {
        ToolOutput {
            input_required: Some(InputRequired {
                requests: requests
                    .into_iter()
                    .map(|(k, r)| (k.into(), r.to_json()))
                    .collect(),
                state,
            }),
            ..Default::default()
        }
    }

    /// Whether this output asks for the client's input first
    /// ([`input_required`](ToolOutput::input_required)).
    pub fn is_input_required(&self) -> bool {
        self.input_required.is_some()
    }

    /// Adds a content block.
    pub fn with(mut self, block: Content) -> ToolOutput {
        self.content.push(block);
        self
    }

    /// The content blocks.
    pub fn content(&self) -> &[Content] {
        &self.content
    }

    /// The structured content.
    pub fn structured_content(&self) -> Option<&Value> {
        self.structured.as_ref()
    }

    /// Whether this reports a failure of the tool.
    pub fn is_error(&self) -> bool {
        self.is_error
    }
}

/// A failure of a tool, reported to the model as a result with `isError:
/// true` and the message as text. Any `std::error::Error` converts, so `?`
/// works in tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError(String);

impl ToolError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(e: E) -> ToolError {
        ToolError(e.to_string())
    }
}

/// A log severity (RFC 5424's, as MCP uses them), least severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Debugging detail.
    Debug,
    /// Information.
    Info,
    /// Normal but significant.
    Notice,
    /// A warning.
    Warning,
    /// An error.
    Error,
    /// A critical condition.
    Critical,
    /// Action must be taken at once.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The level's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named `name`, if it is one.
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// Which log messages a call may send.
#[derive(Clone)]
pub(crate) enum LogFilter {
    /// 2026-07-28: the level the request's `_meta` named; none without it.
    Request(Option<LogLevel>),
    /// The initialize lifecycle: the session's level (`logging/setLevel`),
    /// read when a message is sent.
    Session(Arc<SessionState>),
}

/// What a running tool sees: progress reporting (when the client asked for
/// it), log messages (filtered by the level the client chose), the
/// protocol revision of the call, and its cancellation.
#[derive(Clone)]
pub struct ToolContext {
    pub(crate) inner: Arc<CallScope>,
}

pub(crate) struct CallScope {
    pub(crate) ctx: Context,
    pub(crate) progress_token: Option<Box<RawValue>>,
    pub(crate) last_progress: Mutex<Option<f64>>,
    pub(crate) log: LogFilter,
    pub(crate) cancel: Option<Cancellation>,
    pub(crate) version: &'static str,
    /// What the client declared: in `initialize`, or in the request's
    /// `_meta` (2026-07-28).
    pub(crate) client_capabilities: Option<Arc<Value>>,
    /// 2026-07-28: the answers to the input requests of an earlier round,
    /// and its state.
    pub(crate) input_responses: Option<serde_json::Map<String, Value>>,
    pub(crate) request_state: Option<String>,
    /// The call is over (answered, cancelled or dropped): no progress is
    /// sent after ("progress notifications MUST stop after completion"),
    /// though a clone of its context may outlive it.
    pub(crate) done: std::sync::atomic::AtomicBool,
}

/// Marks its call over when dropped: when the tool's future ends or is
/// dropped, before its result is written.
pub(crate) struct CallOver(pub(crate) Arc<CallScope>);

impl Drop for CallOver {
    fn drop(&mut self) {
        self.0
            .done
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl ToolContext {
    /// Whether the client asked for progress (sent a `progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.inner.progress_token.is_some()
    }

    /// Sends `notifications/progress` for this call, if the client asked for
    /// progress. `progress` must increase from one notification to the
    /// next (the protocol requires it): a value that does not is not sent,
    /// and nor is any once the call is over (a clone of the context kept by
    /// a task of the tool's). Returns whether the notification was queued.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) -> bool {
        let Some(token) = &self.inner.progress_token else {
            return false;
        };
        if !progress.is_finite() || self.inner.done.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        // A total that is not a number is left out (serde_json would write
        // `null`, which clients' schemas refuse).
        let total = total.filter(|t| t.is_finite());
        {
            let mut last = self
                .inner
                .last_progress
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|l| progress <= l) {
                return false;
            }
            *last = Some(progress);
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Progress<'a> {
            progress_token: &'a RawValue,
            progress: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            total: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        self.inner.ctx.notify(
            "notifications/progress",
            &Progress {
                progress_token: token,
                progress,
                total,
                message,
            },
        )
    }

    /// The least severe level the client wants to see, `None` if it wants
    /// no log messages from this call.
    pub fn log_level(&self) -> Option<LogLevel> {
        match &self.inner.log {
            LogFilter::Request(level) => *level,
            LogFilter::Session(session) => Some(session.log_level()),
        }
    }

    /// Sends `notifications/message` at `level` if the client's level lets
    /// it through. Returns whether it was queued.
    ///
    /// Under 2026-07-28 the level is the request's own
    /// (`_meta["io.modelcontextprotocol/logLevel"]`) and its messages belong
    /// to the request: none is sent once the call is over (a clone of the
    /// context kept by a task of the tool's). Under the initialize
    /// lifecycle the level is the session's (`logging/setLevel`) and a
    /// message is the session's: such a clone may still log.
    pub fn log<D: Serialize + ?Sized>(
        &self,
        level: LogLevel,
        logger: Option<&str>,
        data: &D,
    ) -> bool {
        if self.log_level().is_none_or(|min| level < min) {
            return false;
        }
        if matches!(self.inner.log, LogFilter::Request(_))
            && self.inner.done.load(std::sync::atomic::Ordering::Acquire)
        {
            return false;
        }
        #[derive(Serialize)]
        struct Message<'a, D: ?Sized> {
            level: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            logger: Option<&'a str>,
            data: &'a D,
        }
        self.inner.ctx.notify(
            "notifications/message",
            &Message {
                level: level.as_str(),
                logger,
                data,
            },
        )
    }

    /// Whether the client cancelled the call (the call's future is dropped
    /// then anyway; this is for work the tool handed elsewhere).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    /// Completes when the client cancels the call.
    pub async fn cancelled(&self) {
        match &self.inner.cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// The protocol revision of this call (`"2026-07-28"`, or the revision
    /// the session negotiated).
    pub fn protocol_version(&self) -> &'static str {
        self.inner.version
    }

    /// The connection's context (transport, session id, extensions).
    pub fn connection(&self) -> &Context {
        &self.inner.ctx
    }

    /// 2026-07-28: the client's answer to the input request `key` of an
    /// earlier [`input_required`](ToolOutput::input_required) output of
    /// this call (the result object: sampling's `content` and `model`,
    /// elicitation's `action` and `content`, `roots`).
    pub fn input_response(&self, key: &str) -> Option<&Value> {
        self.inner.input_responses.as_ref()?.get(key)
    }

    /// 2026-07-28: the state an earlier
    /// [`input_required`](ToolOutput::input_required) output of this call
    /// gave, passed back by the client unchanged (the client can change
    /// it: treat it as untrusted input).
    pub fn request_state(&self) -> Option<&str> {
        self.inner.request_state.as_deref()
    }

    /// The capabilities the client declared (`initialize`'s
    /// `capabilities`, or 2026-07-28's
    /// `_meta["io.modelcontextprotocol/clientCapabilities"]`), if any.
    pub fn client_capabilities(&self) -> Option<&Value> {
        self.inner.client_capabilities.as_deref()
    }

    /// Sends the client a request while the call runs (sampling
    /// `sampling/createMessage`, elicitation `elicitation/create`,
    /// `roots/list`, `ping`) and waits for its response, at most `timeout`.
    ///
    /// Refused without sending anything when the protocol forbids it: in
    /// the 2026-07-28 revision (which has no requests from server to
    /// client: a tool answers [`ToolOutput::input_required`] there), when
    /// the client did not declare the capability the method needs
    /// (`sampling`, `elicitation`, `roots`) or the part of it its params
    /// need (`sampling.tools` for `tools` or `toolChoice`,
    /// `elicitation.url` for URL mode), or once the call is over
    /// ([`AskError::CallOver`]). Over Streamable
    /// HTTP the request goes on the call's own event stream and the
    /// client's answer comes back in a POST of the session; a session that
    /// ends fails the wait at once ([`PeerError::Closed`]).
    ///
    /// When the server stops waiting without an answer (the timeout
    /// passed, the client cancelled the tool call, the call hit the
    /// server's `call_timeout`, the session or connection ended, or the
    /// tool dropped this future), the client is sent
    /// `notifications/cancelled` with the request's `requestId` and a
    /// `reason`, so that it stops working on it (sampling its model,
    /// asking its user). It goes where the request went: the line stream
    /// over stdio; over Streamable HTTP, the tool call's own event stream,
    /// just before that stream's reply (or, for a cancelled call, before
    /// the stream ends without one). A client that already closed that
    /// stream is not told. An answer that comes after this is ignored
    /// (over HTTP it is still accepted with 202).
    ///
    /// ```no_run
    /// use rpcwire::mcp::{Tool, ToolContext, ToolError, ToolOutput};
    /// use serde_json::{Value, json};
    /// use std::time::Duration;
    ///
    /// let tool = Tool::new("ask-model", json!({"type": "object"}), |_, cx: ToolContext| async move {
    ///     let params = json!({
    ///         "messages": [{"role": "user", "content": {"type": "text", "text": "A name?"}}],
    ///         "maxTokens": 50
    ///     });
    ///     let answer = cx.ask_client("sampling/createMessage", &params, Duration::from_secs(60)).await?;
    ///     let result: Value = answer.decode().map_err(|e| ToolError::new(e.to_string()))?;
    ///     Ok(ToolOutput::text(result["content"]["text"].as_str().unwrap_or_default()))
    /// });
    /// ```
    #[allow(clippy::manual_async_fn)]
    pub fn ask_client<'s, P: Serialize + ?Sized + Sync>(
        &'s self,
        method: &'s str,
        params: &'s P,
        timeout: std::time::Duration,
    ) -> impl Future<Output = Result<OwnedResponse, AskError>> + Send + 's {
        async move {
            if self.inner.version == super::MODERN_VERSION {
                return Err(AskError::NotInThisRevision);
            }
            if self.inner.done.load(std::sync::atomic::Ordering::Acquire) || self.is_cancelled() {
                return Err(AskError::CallOver);
            }
            // Only these two look into their params (a copy, on a path
            // that waits for a person or a model anyway).
            let params_seen = match method {
                "sampling/createMessage" | "elicitation/create" => {
                    serde_json::to_value(params).ok()
                }
                _ => None,
            };
            if let Some(capability) =
                undeclared_capability(method, params_seen.as_ref(), self.client_capabilities())
            {
                return Err(AskError::NotDeclared(capability));
            }
            let peer = self.inner.ctx.peer().ok_or(AskError::NoWayBack)?;
            // Abandoned without an answer, however the wait ends, the
            // request is announced to the client with
            // `notifications/cancelled` by the peer itself (the MCP
            // dispatcher taught it MCP's cancellation).
            peer.request(method, Some(params), timeout)
                .await
                .map_err(AskError::Peer)
        }
    }
}

/// Why [`ToolContext::ask_client`] got no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskError {
    /// The call's revision (2026-07-28) has no requests from server to
    /// client; nothing was sent ([`ToolOutput::input_required`] is that
    /// revision's way).
    NotInThisRevision,
    /// The client did not declare the capability the method needs
    /// (`sampling`, `elicitation`, `roots`), or the part of it the params
    /// need (`sampling.tools`, `elicitation.url`, `elicitation.form`);
    /// nothing was sent.
    NotDeclared(&'static str),
    /// The call is over (answered, or cancelled): a request for it would
    /// reach the client unrelated to anything it waits for (a clone of the
    /// context kept by a task of the tool's); nothing was sent.
    CallOver,
    /// The transport has no way back to the client.
    NoWayBack,
    /// Sent, and no response came (timeout, cancellation, the connection
    /// or session closed), or it could not be sent.
    Peer(PeerError),
}

impl fmt::Display for AskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskError::NotInThisRevision => {
                f.write_str("the 2026-07-28 revision has no requests to the client")
            }
            AskError::NotDeclared(c) => write!(f, "the client did not declare the {c} capability"),
            AskError::NoWayBack => f.write_str("this transport cannot reach the client"),
            AskError::CallOver => f.write_str("the tool call is over"),
            AskError::Peer(e) => write!(f, "the client did not answer: {e}"),
        }
    }
}

impl std::error::Error for AskError {}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("version", &self.inner.version)
            .field("wants_progress", &self.wants_progress())
            .field("log_level", &self.log_level())
            .finish()
    }
}
