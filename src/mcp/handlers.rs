//! The MCP methods, as dispatcher handlers.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::tool::{CallScope, LogFilter, LogLevel, ToolContext, ToolOutput};
use super::{
    LEGACY_VERSIONS, MODERN_VERSION, SUPPORTED_VERSIONS, ServerInner, SessionHandle, SessionState,
    codes,
};
use crate::dispatch::{AsyncCall, Done, WithAsync};
use crate::router::BuildError;
use crate::{Call, Context, Dispatcher, RpcError};

/// The code of a tool call past its deadline: the official SDKs'
/// `RequestTimeout` (MCP's specification names none).
const REQUEST_TIMEOUT: i32 = -32001;

/// The dispatcher of an MCP server.
pub(crate) fn dispatcher(
    inner: ServerInner,
    timeout: Option<Duration>,
    max_in_flight: usize,
    (quiet_panics, panic_messages): (bool, bool),
) -> Result<Dispatcher<ServerInner, WithAsync>, BuildError> {
    Dispatcher::builder(inner)
        // MCP: "the ID MUST NOT be `null`".
        .parser(crate::Parser::new().allow_null_ids(false))
        .method("initialize", initialize)
        .method("ping", ping)
        .method("server/discover", discover)
        .method("logging/setLevel", set_level)
        .method("tools/list", list_tools)
        .method("notifications/initialized", initialized)
        .method("notifications/cancelled", cancelled)
        .async_method("tools/call", call_tool)
        .timeout(timeout)
        .timeout_code(REQUEST_TIMEOUT)
        .max_in_flight(max_in_flight)
        .quiet_panics(quiet_panics)
        .panic_messages(panic_messages)
        // `notifications/cancelled` is read by its handler (over HTTP the
        // call may run on another request); the same notification tells
        // the client of requests the server gives up on.
        .cancel_notice(crate::peer::CancelNotice::mcp())
        .build()
}

/// The part of `_meta` this layer reads.
#[derive(Deserialize, Default)]
struct Meta<'a> {
    #[serde(rename = "progressToken", borrow, default)]
    progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow, default)]
    log_level: Option<Cow<'a, str>>,
}

/// Params of a method that reads only `_meta` (and a cursor).
#[derive(Deserialize, Default)]
struct Plain<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
    #[serde(borrow, default)]
    cursor: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    level: Option<Cow<'a, str>>,
}

/// The revision a request is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28, with the level of log messages the request opted in to.
    Modern(Option<LogLevel>),
    /// The initialize lifecycle, at the revision the session negotiated.
    Legacy(&'static str),
}

impl Era {
    fn version(self) -> &'static str {
        match self {
            Era::Modern(_) => MODERN_VERSION,
            Era::Legacy(v) => v,
        }
    }

    fn is_modern(self) -> bool {
        matches!(self, Era::Modern(_))
    }

    /// Whether arguments that break a tool's input schema are answered as
    /// a tool result with `isError` (2025-11-25 on) rather than -32602
    /// (2025-06-18, whose "Error Handling" lists them as protocol errors).
    fn argument_errors_are_results(self) -> bool {
        !matches!(self, Era::Legacy("2025-06-18"))
    }
}

pub(crate) fn session_of(ctx: &Context) -> Option<&Arc<SessionState>> {
    ctx.extension::<SessionHandle>().map(|h| &h.0)
}

/// -32602 naming a field.
fn field_error(message: impl Into<Cow<'static, str>>, data: &impl Serialize) -> RpcError {
    RpcError::invalid_params(message).with_data(data)
}

#[derive(Serialize)]
struct Unsupported<'a> {
    supported: &'a [&'a str],
    requested: &'a str,
}

/// -32022: the request's protocol version is not one this server speaks.
pub(crate) fn unsupported_version(requested: &str) -> RpcError {
    RpcError::new(
        codes::UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
    )
    .with_data(&Unsupported {
        supported: SUPPORTED_VERSIONS,
        requested: &echoed(requested),
    })
}

/// Decides a request's revision: its `_meta` (2026-07-28), or the session's
/// negotiated one (which must exist unless `before_init` allows it).
fn era(meta: Option<&Meta<'_>>, ctx: &Context, before_init: bool) -> Result<Era, RpcError> {
    if let Some(token) = meta.and_then(|m| m.progress_token) {
        check_progress_token(token)?;
    }
    if let Some(meta) = meta
        && let Some(version) = meta.protocol_version.as_deref()
    {
        if version == MODERN_VERSION {
            let caps_ok = meta
                .client_capabilities
                .is_some_and(|c| c.get().trim_start().starts_with('{'));
            if !caps_ok {
                #[derive(Serialize)]
                struct Missing {
                    field: &'static str,
                    reason: &'static str,
                }
                return Err(field_error(
                    "Invalid params: _meta needs the client's capabilities",
                    &Missing {
                        field: "_meta.io.modelcontextprotocol/clientCapabilities",
                        reason: "required object is missing",
                    },
                ));
            }
            let level = match meta.log_level.as_deref() {
                None => None,
                Some(name) => Some(LogLevel::parse(name).ok_or_else(|| bad_level(name, true))?),
            };
            return Ok(Era::Modern(level));
        }
        if !LEGACY_VERSIONS.contains(&version) {
            return Err(unsupported_version(version));
        }
        // A handshake-era version in `_meta`: served as the session is.
    }
    match session_of(ctx).and_then(|s| s.version()) {
        Some(v) => Ok(Era::Legacy(v)),
        None if before_init => Ok(Era::Legacy(LEGACY_VERSIONS[0])),
        None => {
            #[derive(Serialize)]
            struct Reason {
                reason: &'static str,
            }
            Err(RpcError::new(crate::codes::INVALID_REQUEST, "Server not initialized").with_data(
                &Reason {
                    reason: "send initialize first, or the 2026-07-28 request _meta (io.modelcontextprotocol/protocolVersion)",
                },
            ))
        }
    }
}

/// "Progress tokens MUST be a string or integer value" (the spec's
/// progress utility; the TypeScript SDK refuses others as invalid params):
/// a token of another type would be echoed in every progress notification
/// and refused by the client's schema there.
fn check_progress_token(token: &RawValue) -> Result<(), RpcError> {
    let text = token.get().trim();
    let integer = || {
        serde_json::from_str::<serde_json::Number>(text)
            .is_ok_and(|n| n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0))
    };
    if text.starts_with('"') || integer() {
        return Ok(());
    }
    #[derive(Serialize)]
    struct Data<'a> {
        field: &'static str,
        expected: &'static str,
        received: &'a RawValue,
    }
    Err(field_error(
        "Invalid params: a progress token is a string or an integer",
        &Data {
            field: "_meta.progressToken",
            expected: "string or integer",
            received: token,
        },
    ))
}

fn bad_level(name: &str, in_meta: bool) -> RpcError {
    #[derive(Serialize)]
    struct Data<'a> {
        field: &'static str,
        expected: [&'static str; 8],
        received: &'a str,
    }
    field_error(
        "Invalid params: unknown log level",
        &Data {
            field: if in_meta {
                "_meta.io.modelcontextprotocol/logLevel"
            } else {
                "level"
            },
            expected: LogLevel::ALL.map(LogLevel::as_str),
            received: &echoed(name),
        },
    )
}

/// -32601 for a method this revision removed.
fn removed_in_modern(method: &str) -> RpcError {
    #[derive(Serialize)]
    struct Data<'a> {
        method: &'a str,
        reason: &'static str,
    }
    RpcError::new(crate::codes::METHOD_NOT_FOUND, "Method not found").with_data(&Data {
        method,
        reason: "removed in protocol revision 2026-07-28",
    })
}

fn decode_plain<'a, S>(call: &Call<'a, S>) -> Result<Plain<'a>, RpcError> {
    match call.params {
        None => Ok(Plain::default()),
        Some(p) => {
            object_params(&p)?;
            call.decode()
        }
    }
}

/// MCP's params are an object (`params?: { _meta?: ..., ... }` in every
/// request of its schema): an array, which the core's decoder reads into a
/// struct's fields by position, is -32602 (an array's first value was
/// read as `_meta`, and echoed back as a progress token). An empty one is
/// no params, as generic JSON-RPC clients send for a method without any.
fn object_params(params: &crate::request::Params<'_>) -> Result<(), RpcError> {
    if params.is_object() || params.is_empty() {
        return Ok(());
    }
    #[derive(Serialize)]
    struct Data {
        field: &'static str,
        expected: &'static str,
    }
    Err(field_error(
        "Invalid params: MCP params are an object",
        &Data {
            field: "params",
            expected: "object",
        },
    ))
}

/// What a 2026-07-28 result adds: `resultType` and the server's identity.
#[derive(Serialize)]
pub(crate) struct Stamp<'a> {
    #[serde(rename = "resultType")]
    result_type: &'static str,
    #[serde(rename = "_meta")]
    meta: ServerMeta<'a>,
}

#[derive(Serialize)]
struct ServerMeta<'a> {
    #[serde(rename = "io.modelcontextprotocol/serverInfo")]
    server_info: &'a super::Implementation,
}

fn stamp(era: Era, inner: &ServerInner) -> Option<Stamp<'_>> {
    era.is_modern().then_some(Stamp {
        result_type: "complete",
        meta: ServerMeta {
            server_info: &inner.info,
        },
    })
}

/// Cache hints (2026-07-28).
#[derive(Serialize)]
struct Cache {
    #[serde(rename = "ttlMs")]
    ttl_ms: u64,
    #[serde(rename = "cacheScope")]
    cache_scope: &'static str,
}

fn cache(era: Era, inner: &ServerInner) -> Option<Cache> {
    era.is_modern().then_some(Cache {
        ttl_ms: inner.ttl_ms,
        cache_scope: "public",
    })
}

/// An empty result (`{}`, or its 2026-07-28 form).
#[derive(Serialize)]
struct Empty<'a> {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stamp: Option<Stamp<'a>>,
}

// ---------------------------------------------------------------- initialize

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams<'a> {
    #[serde(borrow, default)]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    capabilities: Option<&'a RawValue>,
}

/// The most JSON text of `initialize`'s `capabilities` a session keeps
/// (clients declare a few hundred bytes; a session keeps them, as a
/// `Value` several times their size, for its whole life).
const MAX_CAPABILITIES_LEN: usize = 16 * 1024;

/// The most JSON values in them: a `Value` takes 32 bytes and more each,
/// so text of tiny values (`[0,0,...]`) would be kept at 16 times its
/// size (about 1 MiB a session for 64 KiB, across thousands of
/// sessions). With both bounds a session keeps at most about 64 KiB.
const MAX_CAPABILITY_VALUES: usize = 1024;

/// How many JSON values `v` holds, itself included (stops counting past
/// `most`).
fn values_in(v: &Value, most: usize) -> usize {
    let mut count = 1;
    let children: Box<dyn Iterator<Item = &Value>> = match v {
        Value::Array(a) => Box::new(a.iter()),
        Value::Object(o) => Box::new(o.values()),
        _ => return 1,
    };
    for child in children {
        count += values_in(child, most.saturating_sub(count));
        if count > most {
            break;
        }
    }
    count
}

/// The revision `initialize` answers for `requested`: the same one when it
/// is ours, else, for any other dated revision (earlier or later), the
/// latest of ours ("the server MUST respond with another protocol version
/// it supports", lifecycle, version negotiation); the client decides
/// whether it can speak it. A version that is not a date is refused.
pub(crate) fn negotiate(requested: &str) -> Result<&'static str, RpcError> {
    if let Some(v) = LEGACY_VERSIONS.iter().find(|v| **v == requested) {
        return Ok(v);
    }
    let is_date = requested.len() == 10
        && requested.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if is_date {
        return Ok(LEGACY_VERSIONS[0]);
    }
    Err(
        RpcError::invalid_params("Unsupported protocol version").with_data(&Unsupported {
            supported: LEGACY_VERSIONS,
            requested: &echoed(requested),
        }),
    )
}

fn initialize(call: Call<'_, ServerInner>) -> Result<Done, RpcError> {
    // A request ("the server MUST respond with its own capabilities"):
    // sent as a notification, which gets no reply, it would commit the
    // session to a revision and capabilities the client is never told.
    // It changes nothing (as `notifications/initialized` sent with an id
    // is refused); the error is only seen by observers.
    if call.id().is_none() {
        return Err(RpcError::new(
            crate::codes::INVALID_REQUEST,
            "initialize is a request: send it with an id",
        ));
    }
    let params: InitializeParams<'_> = match call.params {
        Some(p) => {
            object_params(&p)?;
            call.decode()?
        }
        None => InitializeParams {
            protocol_version: None,
            capabilities: None,
        },
    };
    let Some(requested) = params.protocol_version else {
        #[derive(Serialize)]
        struct Data {
            field: &'static str,
            reason: &'static str,
            supported: &'static [&'static str],
        }
        return Err(field_error(
            "Invalid params: protocolVersion is required",
            &Data {
                field: "protocolVersion",
                reason: "required property is missing",
                supported: LEGACY_VERSIONS,
            },
        ));
    };
    let version = negotiate(&requested)?;
    let capabilities = match params.capabilities {
        Some(raw) if raw.get().len() > MAX_CAPABILITIES_LEN => {
            #[derive(Serialize)]
            struct Data {
                field: &'static str,
                limit: usize,
                len: usize,
            }
            return Err(field_error(
                "Invalid params: capabilities too large",
                &Data {
                    field: "capabilities",
                    limit: MAX_CAPABILITIES_LEN,
                    len: raw.get().len(),
                },
            ));
        }
        Some(raw) => {
            let value = serde_json::from_str::<Value>(raw.get()).map_err(|e| {
                field_error(
                    "Invalid params: capabilities",
                    &serde_json::json!({"field": "capabilities", "reason": e.to_string()}),
                )
            })?;
            if values_in(&value, MAX_CAPABILITY_VALUES) > MAX_CAPABILITY_VALUES {
                return Err(field_error(
                    "Invalid params: capabilities too large",
                    &serde_json::json!({
                        "field": "capabilities",
                        "reason": "too many values",
                        "limit_values": MAX_CAPABILITY_VALUES,
                    }),
                ));
            }
            Some(Arc::new(value))
        }
        None => None,
    };
    if let Some(session) = session_of(call.ctx) {
        session.initialize(version, capabilities);
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct InitializeResult<'a> {
        protocol_version: &'static str,
        capabilities: Value,
        server_info: &'a super::Implementation,
        #[serde(skip_serializing_if = "Option::is_none")]
        instructions: Option<&'a str>,
    }
    let inner = call.state;
    call.reply.json(&InitializeResult {
        protocol_version: version,
        capabilities: serde_json::json!({"tools": {"listChanged": true}, "logging": {}}),
        server_info: &inner.info,
        instructions: inner.instructions.as_deref(),
    })
}

/// -32601 for a request (with an id) naming a notification method: it is
/// not that notification, and a `null` result is no MCP result.
fn notification_only(call: &Call<'_, ServerInner>) -> Result<(), RpcError> {
    if call.id().is_none() {
        return Ok(());
    }
    #[derive(Serialize)]
    struct Data<'a> {
        method: &'a str,
        reason: &'static str,
    }
    Err(
        RpcError::new(crate::codes::METHOD_NOT_FOUND, "Method not found").with_data(&Data {
            method: call.method(),
            reason: "a notification: send it without an id",
        }),
    )
}

fn initialized(call: Call<'_, ServerInner>) -> Result<(), RpcError> {
    notification_only(&call)?;
    if let Some(session) = session_of(call.ctx) {
        session.mark_initialized();
    }
    Ok(())
}

fn ping(call: Call<'_, ServerInner>) -> Result<Done, RpcError> {
    let params = decode_plain(&call)?;
    let era = era(params.meta.as_ref(), call.ctx, true)?;
    if era.is_modern() {
        return Err(removed_in_modern("ping"));
    }
    call.reply.json(&Empty { stamp: None })
}

fn set_level(call: Call<'_, ServerInner>) -> Result<Done, RpcError> {
    let params = decode_plain(&call)?;
    let era = era(params.meta.as_ref(), call.ctx, true)?;
    if era.is_modern() {
        return Err(removed_in_modern("logging/setLevel"));
    }
    let Some(name) = params.level else {
        #[derive(Serialize)]
        struct Data {
            field: &'static str,
            reason: &'static str,
        }
        return Err(field_error(
            "Invalid params: level is required",
            &Data {
                field: "level",
                reason: "required property is missing",
            },
        ));
    };
    let level = LogLevel::parse(&name).ok_or_else(|| bad_level(&name, false))?;
    if let Some(session) = session_of(call.ctx) {
        session.set_log_level(level);
    }
    call.reply.json(&Empty { stamp: None })
}

fn cancelled(call: Call<'_, ServerInner>) -> Result<(), RpcError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Params<'a> {
        #[serde(borrow)]
        request_id: Option<&'a RawValue>,
    }
    notification_only(&call)?;
    if let Some(p) = &call.params {
        object_params(p)?;
    }
    let params: Params<'_> = call.decode()?;
    if let (Some(id), Some(session)) = (params.request_id, session_of(call.ctx)) {
        session.request_cancel(id.get().as_bytes());
    }
    Ok(())
}

// ------------------------------------------------------------------ discover

fn discover(call: Call<'_, ServerInner>) -> Result<Done, RpcError> {
    let params = decode_plain(&call)?;
    if let Some(v) = params
        .meta
        .as_ref()
        .and_then(|m| m.protocol_version.as_deref())
        && !SUPPORTED_VERSIONS.contains(&v)
    {
        return Err(unsupported_version(v));
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct DiscoverResult<'a> {
        result_type: &'static str,
        supported_versions: &'static [&'static str],
        capabilities: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        instructions: Option<&'a str>,
        #[serde(rename = "_meta")]
        meta: ServerMeta<'a>,
        ttl_ms: u64,
        cache_scope: &'static str,
    }
    let inner = call.state;
    call.reply.json(&DiscoverResult {
        result_type: "complete",
        supported_versions: SUPPORTED_VERSIONS,
        // Change notifications of this revision need `subscriptions/listen`,
        // which this layer does not offer: no `listChanged` here.
        capabilities: serde_json::json!({"tools": {}, "logging": {}}),
        instructions: inner.instructions.as_deref(),
        meta: ServerMeta {
            server_info: &inner.info,
        },
        ttl_ms: inner.ttl_ms,
        cache_scope: "public",
    })
}

// --------------------------------------------------------------- tools/list

/// A `tools/list` cursor: where the next page starts, written `s<n>`,
/// `n` the number ([`Registry::seqs`](super::Registry)) of the last tool
/// listed. The page goes on with the first tool numbered after it: tools
/// keep their order and numbers, and one added later comes at the end
/// with a higher number, so whatever was added or removed between two
/// pages no tool that stayed is skipped or listed twice (an offset, or a
/// name looked up again, skipped tools when others went or one was
/// removed and added back). The numbers are the server process's: after
/// a restart (or on another instance) a cursor of tools added at run time
/// names another place or is refused (-32602), and the client lists
/// again from the start.
fn parse_cursor(cursor: &str, registry: &super::Registry) -> Option<usize> {
    let digits = cursor.strip_prefix('s')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    registry.after_seq(digits.parse().ok()?)
}

/// The cursor of the page after `registry.tools[..end]` (`end > 0`).
fn cursor_after(registry: &super::Registry, end: usize) -> String {
    let last = end.checked_sub(1).and_then(|last| registry.seqs.get(last));
    format!("s{}", last.copied().unwrap_or(0))
}

fn list_tools(call: Call<'_, ServerInner>) -> Result<Done, RpcError> {
    let params = decode_plain(&call)?;
    let era = era(params.meta.as_ref(), call.ctx, false)?;
    let inner = call.state;
    let registry = inner.registry();
    let start = match params.cursor.as_deref() {
        None => 0,
        Some(c) => parse_cursor(c, &registry).ok_or_else(|| {
            #[derive(Serialize)]
            struct Data<'a> {
                field: &'static str,
                received: &'a str,
            }
            field_error(
                "Invalid cursor",
                &Data {
                    field: "cursor",
                    received: &echoed(c),
                },
            )
        })?,
    };
    let end = start
        .saturating_add(inner.page_size)
        .min(registry.tools.len());
    let tools: Vec<&RawValue> = registry.tools[start..end]
        .iter()
        .map(|t| &*t.listing)
        .collect();
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListToolsResult<'a> {
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        stamp: Option<Stamp<'a>>,
        tools: Vec<&'a RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        cache: Option<Cache>,
    }
    let next_cursor = (end < registry.tools.len()).then(|| cursor_after(&registry, end));
    call.reply.json(&ListToolsResult {
        stamp: stamp(era, inner),
        tools,
        next_cursor,
        cache: cache(era, inner),
    })
}

// --------------------------------------------------------------- tools/call

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
    /// 2026-07-28: answers to an earlier round's input requests.
    #[serde(rename = "inputResponses", default)]
    input_responses: Option<serde_json::Map<String, Value>>,
    #[serde(rename = "requestState", borrow, default)]
    request_state: Option<Cow<'a, str>>,
}

/// The most bytes of a refused value's JSON text, and of a violation's
/// description, an error's `data` carries: a refused argument can be as
/// large as the message (megabytes), and echoing it whole, escaped again in
/// the message, the `data` and, from 2025-11-25, the result's text block,
/// made a reply several times the request.
const MAX_ECHO_LEN: usize = 256;

/// A client's string as an error echoes it (a tool's name, a cursor, a
/// version, a log level): cut as [`clipped`] cuts, so that a reply stays
/// small whatever the client sent (a 4 MiB tool name made an 8 MiB reply).
pub(super) fn echoed(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() > MAX_ECHO_LEN {
        std::borrow::Cow::Owned(clipped(
            text[..crate::write::char_floor(text, MAX_ECHO_LEN + 4)].to_owned(),
        ))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The dotted name of the field a schema error is about: the JSON Pointer
/// of its instance with each segment unescaped (`~1` is `/`, `~0` is `~`),
/// so that a property `a/b` is named as sent.
fn field_path(pointer: &str) -> String {
    let mut path = String::with_capacity(pointer.len());
    for (i, segment) in pointer.split('/').skip(1).enumerate() {
        if i > 0 {
            path.push('.');
        }
        path.push_str(&segment.replace("~1", "/").replace("~0", "~"));
    }
    path
}

/// `text` cut to at most [`MAX_ECHO_LEN`] bytes (at a character boundary),
/// with `…` when it was cut.
pub(super) fn clipped(mut text: String) -> String {
    if text.len() > MAX_ECHO_LEN {
        text.truncate(crate::write::char_floor(&text, MAX_ECHO_LEN));
        text.push('…');
    }
    text
}

/// A refused value, as an error's `data` shows it: whole when its JSON text
/// is short, else the start of that text with `…` in `received` and the
/// text's length in `receivedLength` (as the Ethereum decoders' errors).
#[derive(Serialize)]
struct Received<'a> {
    received: Shown<'a>,
    #[serde(rename = "receivedLength", skip_serializing_if = "Option::is_none")]
    received_length: Option<usize>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Shown<'a> {
    Whole(&'a Value),
    Prefix(String),
}

impl<'a> Received<'a> {
    fn of(value: &'a Value) -> Received<'a> {
        /// Counts every byte and keeps the first `MAX_ECHO_LEN + 1`: a
        /// large value is measured, not copied.
        struct Measured {
            start: Vec<u8>,
            len: usize,
        }
        impl std::io::Write for Measured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                let room = (MAX_ECHO_LEN + 1).saturating_sub(self.start.len());
                self.start
                    .extend_from_slice(&bytes[..bytes.len().min(room)]);
                self.len += bytes.len();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut text = Measured {
            start: Vec::with_capacity(MAX_ECHO_LEN + 1),
            len: 0,
        };
        // Writing a `Value` into a writer that takes everything cannot fail.
        let _ = serde_json::to_writer(&mut text, value);
        if text.len <= MAX_ECHO_LEN {
            return Received {
                received: Shown::Whole(value),
                received_length: None,
            };
        }
        // Serialized JSON is UTF-8; the cut may split a character, which
        // `clipped` steps back from (a lossy decode turns the split bytes
        // into one replacement character, cut with the rest).
        let start = String::from_utf8_lossy(&text.start).into_owned();
        Received {
            received: Shown::Prefix(clipped(start)),
            received_length: Some(text.len),
        }
    }
}

/// Turns a schema violation into -32602 whose `data` names what failed.
///
/// The value is shown once, in `data` and bounded ([`Received`]); the
/// message and `reason` describe the violation without it
/// (`jsonschema`'s masked text), so a reply's size does not follow the
/// refused value's.
fn violation(tool: &str, e: &jsonschema::ValidationError<'_>) -> RpcError {
    use jsonschema::error::ValidationErrorKind as K;
    let path = field_path(e.instance_path().as_str());
    // Bounded as the value is: the path holds member names the client
    // chose (under `additionalProperties` or `patternProperties`), a 1 MB
    // one echoed whole twice.
    let field = |name: Option<&str>| -> String {
        clipped(match (path.is_empty(), name) {
            (true, Some(n)) => n.to_owned(),
            (false, Some(n)) => format!("{path}.{n}"),
            (true, None) => "arguments".to_owned(),
            (false, None) => path.clone(),
        })
    };
    // Structs, so that the members keep this order on the wire.
    #[derive(Serialize)]
    struct Expected<'a> {
        field: String,
        expected: &'a Value,
        #[serde(flatten)]
        received: Received<'a>,
    }
    #[derive(Serialize)]
    struct Missing {
        field: String,
        reason: &'static str,
    }
    #[derive(Serialize)]
    struct Other<'a> {
        field: String,
        reason: String,
        #[serde(flatten)]
        received: Received<'a>,
    }
    let message = |summary: &str| format!("Invalid arguments for tool {tool}: {summary}");
    match e.kind() {
        K::Enum { options } => {
            let f = field(None);
            RpcError::invalid_params(message(&clipped(format!("{f} must be one of {options}"))))
                .with_data(&Expected {
                    field: f,
                    expected: options,
                    received: Received::of(e.instance()),
                })
        }
        K::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            let f = field(Some(&name));
            RpcError::invalid_params(message(&clipped(format!(
                "missing required property '{f}'"
            ))))
            .with_data(&Missing {
                field: f,
                reason: "required property is missing",
            })
        }
        _ => {
            let reason = clipped(e.masked().to_string());
            RpcError::invalid_params(message(&reason)).with_data(&Other {
                field: field(None),
                reason,
                received: Received::of(e.instance()),
            })
        }
    }
}

/// The result of `tools/call`, written out when the tool is done.
struct CallAnswer(Vec<u8>);

impl crate::dispatch::IntoResult for CallAnswer {
    fn write_result(self, reply: crate::dispatch::Reply<'_>) -> Result<Done, RpcError> {
        reply.raw(&self.0)
    }
}

impl CallAnswer {
    /// Writes the result object. The structured content is serialized once
    /// and copied twice: as JSON, and escaped as the text of a block for
    /// older clients when the tool gave no content of its own (serializing
    /// the value a second time through serde was a fifth of a call's cost).
    fn write(output: &ToolOutput, era: Era, inner: &ServerInner) -> Result<CallAnswer, RpcError> {
        let structured = match &output.structured {
            Some(v) => Some(serde_json::to_vec(v).map_err(unserializable)?),
            None => None,
        };
        // Room for the structured content twice (the escaped copy is a
        // little longer) and the fixed text; other blocks grow it as needed.
        let mut out = Vec::with_capacity(128 + structured.as_ref().map_or(0, |j| j.len() * 9 / 4));
        out.push(b'{');
        if era.is_modern() {
            out.extend_from_slice(br#""resultType":"complete","#);
        }
        out.extend_from_slice(br#""content":["#);
        for (i, block) in output.content.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, block).map_err(unserializable)?;
        }
        if let Some(json) = structured.as_deref() {
            if output.content.is_empty() {
                out.extend_from_slice(br#"{"type":"text","text":"#);
                // serde_json writes valid UTF-8.
                let text = std::str::from_utf8(json).map_err(unserializable)?;
                crate::write::string(&mut out, text);
                out.push(b'}');
            }
            out.extend_from_slice(br#"],"structuredContent":"#);
            out.extend_from_slice(json);
        } else {
            out.push(b']');
        }
        if output.is_error {
            out.extend_from_slice(br#","isError":true"#);
        }
        if era.is_modern() {
            out.extend_from_slice(br#","_meta":"#);
            serde_json::to_writer(
                &mut out,
                &ServerMeta {
                    server_info: &inner.info,
                },
            )
            .map_err(unserializable)?;
        }
        out.push(b'}');
        Ok(CallAnswer(out))
    }
}

fn unserializable(e: impl std::fmt::Display) -> RpcError {
    #[derive(Serialize)]
    struct Reason {
        reason: String,
    }
    RpcError::internal("the tool's result could not be serialized").with_data(&Reason {
        reason: e.to_string(),
    })
}

async fn call_tool(call: AsyncCall<ServerInner>) -> Result<CallAnswer, RpcError> {
    // Everything up to the tool's own future happens in a plain function:
    // the decoded params and their arena are gone before the first await,
    // so this future holds only what the result needs.
    let (entry, tool, era, client_capabilities, over) = start_tool(&call)?;
    let server = Arc::clone(&call.state);
    drop(call);
    let output = match tool.await {
        Ok(o) => o,
        Err(e) => ToolOutput::error(e.message()),
    };
    // Over: a progress sent from here on would follow the result.
    drop(over);
    let name = entry.tool.name();
    if let Some(input) = &output.input_required {
        return input_required(name, input, era, client_capabilities.as_deref(), &server);
    }
    // MCP's structuredContent is an object; the SDK clients refuse a result
    // with anything else there.
    if output.structured.as_ref().is_some_and(|v| !v.is_object()) {
        return Err(RpcError::internal(format!(
            "tool {name} returned structuredContent that is not a JSON object"
        )));
    }
    if !output.is_error
        && let Some(schema) = &entry.output
    {
        let Some(structured) = &output.structured else {
            return Err(RpcError::internal(format!(
                "tool {name} declares an outputSchema but returned no structuredContent"
            )));
        };
        if let Err(e) = schema.validate(structured) {
            let data = serde_json::json!({
                "field": clipped(field_path(e.instance_path().as_str())),
                "reason": clipped(e.masked().to_string()),
            });
            return Err(RpcError::internal(format!(
                "tool {name} returned structuredContent that breaks its outputSchema"
            ))
            .with_data(&data));
        }
    }
    CallAnswer::write(&output, era, &server)
}

/// Decodes a `tools/call`, finds the tool, checks its arguments and starts
/// it: the tool's entry, its future and the revision the call is under.
#[allow(clippy::type_complexity)]
fn start_tool(
    call: &AsyncCall<ServerInner>,
) -> Result<
    (
        Arc<super::ToolEntry>,
        super::tool::ToolFuture,
        Era,
        Option<Arc<Value>>,
        Option<super::tool::CallOver>,
    ),
    RpcError,
> {
    let arena = bumpalo::Bump::new();
    let Some(raw) = call.params.as_ref() else {
        return Err(name_missing());
    };
    object_params(&raw.view())?;
    let params: CallParams<'_> = raw.decode_in(&arena)?;
    let era = era(params.meta.as_ref(), &call.ctx, false)?;
    let Some(name) = params.name.as_deref() else {
        return Err(name_missing());
    };
    let Some(entry) = call.state.registry().get(name).cloned() else {
        #[derive(Serialize)]
        struct Data<'a> {
            field: &'static str,
            received: &'a str,
        }
        let name = echoed(name);
        return Err(field_error(
            format!("Unknown tool: {name}"),
            &Data {
                field: "name",
                received: &name,
            },
        ));
    };
    let args = params
        .arguments
        .unwrap_or_else(|| Value::Object(Default::default()));
    // The boolean check is the fast one; errors are built only on failure.
    if !entry.input.is_valid(&args)
        && let Err(e) = entry.input.validate(&args)
    {
        let refused = violation(name, &e);
        // `arguments` that are no object break the request's own schema
        // (`CallToolRequest`), a protocol error in every revision: only
        // arguments that break the tool's input schema are its error.
        if !era.argument_errors_are_results() || !args.is_object() {
            return Err(refused);
        }
        // From 2025-11-25 (SEP-1303) arguments that break the schema are
        // the tool's error, told to the model in its result, so that it
        // can correct them; the details of `data` follow the message.
        let text = match refused.data() {
            Some(data) => format!("{}\n{data}", refused.message()),
            None => refused.message().to_owned(),
        };
        let output: super::tool::ToolFuture =
            Box::pin(std::future::ready(Ok(ToolOutput::error(text))));
        return Ok((entry, output, era, None, None));
    }
    let log = match era {
        Era::Modern(level) => LogFilter::Request(level),
        Era::Legacy(_) => match session_of(&call.ctx) {
            Some(s) => LogFilter::Session(Arc::clone(s)),
            None => LogFilter::Request(None),
        },
    };
    let progress_token = params
        .meta
        .as_ref()
        .and_then(|m| m.progress_token)
        .map(|t| t.to_owned());
    let client_capabilities = match era {
        Era::Modern(_) => params
            .meta
            .as_ref()
            .and_then(|m| m.client_capabilities)
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .map(Arc::new),
        Era::Legacy(_) => session_of(&call.ctx).and_then(|s| s.client_capabilities()),
    };
    let cx = ToolContext {
        inner: Arc::new(CallScope {
            ctx: call.ctx.clone(),
            progress_token,
            last_progress: Mutex::new(None),
            log,
            cancel: Some(call.cancellation().clone()),
            version: era.version(),
            client_capabilities: client_capabilities.clone(),
            input_responses: params.input_responses,
            request_state: params.request_state.map(Cow::into_owned),
            done: Default::default(),
        }),
    };
    let over = super::tool::CallOver(Arc::clone(&cx.inner));
    let tool = (entry.tool.handler)(args, cx);
    Ok((entry, tool, era, client_capabilities, Some(over)))
}

/// The answer of a tool that needs the client's input first (2026-07-28's
/// multi-round-trip requests): `{"resultType":"input_required",
/// "inputRequests":{…},"requestState":"…"}`. A tool error when the client
/// did not declare what a request needs (nothing is asked of it); -32603
/// for a tool that asks in a revision without the flow, or asks nothing.
fn input_required(
    name: &str,
    input: &super::tool::InputRequired,
    era: Era,
    client_capabilities: Option<&Value>,
    inner: &ServerInner,
) -> Result<CallAnswer, RpcError> {
    if !era.is_modern() {
        return Err(RpcError::internal(format!(
            "tool {name} asked for input (input_required) in revision {}, which has no \
             multi-round-trip requests: ask the client with ToolContext::ask_client there",
            era.version()
        )));
    }
    if input.requests.is_empty() && input.state.is_none() {
        return Err(RpcError::internal(format!(
            "tool {name} asked for input with neither requests nor state"
        )));
    }
    for request in input.requests.values() {
        let needs = request["method"].as_str().and_then(|method| {
            super::tool::undeclared_capability(method, request.get("params"), client_capabilities)
        });
        if let Some(capability) = needs {
            let output = ToolOutput::error(format!(
                "tool {name} needs the client's {capability} capability, which it did not declare"
            ));
            return CallAnswer::write(&output, era, inner);
        }
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct InputRequiredResult<'a> {
        result_type: &'static str,
        #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
        input_requests: &'a serde_json::Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        request_state: Option<&'a str>,
        #[serde(rename = "_meta")]
        meta: ServerMeta<'a>,
    }
    let result = InputRequiredResult {
        result_type: "input_required",
        input_requests: &input.requests,
        request_state: input.state.as_deref(),
        meta: ServerMeta {
            server_info: &inner.info,
        },
    };
    serde_json::to_vec(&result)
        .map(CallAnswer)
        .map_err(unserializable)
}

fn name_missing() -> RpcError {
    field_error(
        "Invalid params: name is required",
        &serde_json::json!({"field": "name", "reason": "required property is missing"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert_eq!(negotiate("2025-06-18").unwrap(), "2025-06-18");
        assert_eq!(negotiate("2025-11-25").unwrap(), "2025-11-25");
        assert_eq!(negotiate("2026-07-28").unwrap(), "2025-11-25");
        assert_eq!(negotiate("2099-01-01").unwrap(), "2025-11-25");
        // Earlier revisions get a counter-offer too.
        assert_eq!(negotiate("2024-11-05").unwrap(), "2025-11-25");
        assert_eq!(negotiate("2025-03-26").unwrap(), "2025-11-25");
        let e = negotiate("1.0.0").unwrap_err();
        assert_eq!(e.code(), -32602);
        assert_eq!(
            e.data(),
            Some(r#"{"supported":["2025-11-25","2025-06-18"],"requested":"1.0.0"}"#)
        );
    }

    #[test]
    fn cursors() {
        let entry = |name: &str| {
            let tool = super::super::Tool::new(
                name,
                serde_json::json!({"type": "object"}),
                |_, _| async { Ok(super::super::ToolOutput::text("")) },
            );
            Arc::new(super::super::ToolEntry::new(tool).unwrap())
        };
        let registry = super::super::Registry::from_list(vec![entry("a"), entry("b"), entry("c")]);
        assert_eq!(parse_cursor("s0", &registry), Some(0));
        assert_eq!(parse_cursor("s1", &registry), Some(1));
        assert_eq!(parse_cursor("s3", &registry), Some(3));
        // Numbers never given, and other shapes: refused.
        for forged in [
            "s4",
            "s99999999999999999999",
            "s+1",
            "s-1",
            "s",
            "x",
            "p2:b",
            " s1",
        ] {
            assert_eq!(parse_cursor(forged, &registry), None, "{forged}");
        }
        assert_eq!(cursor_after(&registry, 2), "s2");
        // Pages of two while the list changes between them: no tool that
        // stayed is skipped or listed twice (the name-and-offset cursor
        // skipped c when a and b both went, and c and d when b was
        // removed and added back).
        let names = |r: &super::super::Registry, from: usize| -> Vec<String> {
            r.tools[from..]
                .iter()
                .map(|t| t.tool.name().to_owned())
                .collect()
        };
        let abcd = registry.with(
            super::super::ToolEntry::new(super::super::Tool::new(
                "d",
                serde_json::json!({"type": "object"}),
                |_, _| async { Ok(super::super::ToolOutput::text("")) },
            ))
            .unwrap(),
        );
        let cursor = cursor_after(&abcd, 2);
        let gone = abcd.without("a").without("b");
        assert_eq!(
            names(&gone, parse_cursor(&cursor, &gone).unwrap()),
            ["c", "d"]
        );
        let back = abcd.without("b").with(
            super::super::ToolEntry::new(super::super::Tool::new(
                "b",
                serde_json::json!({"type": "object"}),
                |_, _| async { Ok(super::super::ToolOutput::text("")) },
            ))
            .unwrap(),
        );
        assert_eq!(names(&back, 0), ["a", "c", "d", "b"]);
        assert_eq!(
            names(&back, parse_cursor(&cursor, &back).unwrap()),
            ["c", "d", "b"]
        );
        // A tool replaced keeps its place.
        let replaced = abcd.with(
            super::super::ToolEntry::new(super::super::Tool::new(
                "b",
                serde_json::json!({"type": "object"}),
                |_, _| async { Ok(super::super::ToolOutput::text("")) },
            ))
            .unwrap(),
        );
        assert_eq!(
            names(&replaced, parse_cursor(&cursor, &replaced).unwrap()),
            ["c", "d"]
        );
    }
}
