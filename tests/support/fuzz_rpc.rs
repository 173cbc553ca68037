//! What the `stream` and `ws` fuzz checkers (`stream_check.rs`,
//! `ws_check.rs`) share: the dispatchers an input chooses from, their
//! handlers deterministic; the run's shutdown, which `stop` triggers; and
//! the check of each message a server writes.
#![allow(dead_code)]

use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::server::Shutdown;
use rpcwire::{Call, Dispatcher, Parser, RpcError};
use serde_json::value::RawValue;

/// The four dispatchers an input chooses from: sync or with async
/// methods, default or tight limits.
pub struct Dispatchers {
    pub sync: Dispatcher<()>,
    pub sync_tight: Dispatcher<()>,
    pub with_async: Dispatcher<(), WithAsync>,
    pub with_async_tight: Dispatcher<(), WithAsync>,
}

/// Builds the dispatchers once (a fuzz target keeps them per thread).
pub fn dispatchers() -> Dispatchers {
    let tight = |b: rpcwire::dispatch::DispatcherBuilder<(), _>| {
        b.parser(Parser::new().max_batch_len(2))
            .max_response_len(256)
    };
    let later = |c: Call<'_, ()>| match c.param(0) {
        Some(v) => c.reply.raw_json(v),
        None => c.reply.str("later"),
    };
    let later_async = |c: AsyncCall<()>| async move {
        let v: Option<(serde_json::Value,)> = c.decode().ok();
        Ok::<_, RpcError>(v.map_or(serde_json::Value::from("later"), |(v,)| v))
    };
    let ask = |c: AsyncCall<()>| async move {
        let peer = c.ctx.peer().ok_or_else(|| RpcError::internal("one-way"))?;
        let params = c.params.as_ref().map(|p| &p.as_bytes()[..]);
        let answer = peer
            .request_raw("client/ping", params, Duration::from_secs(1))
            .await
            .map_err(|e| RpcError::new(-32000, e.to_string()))?;
        answer
            .decode::<serde_json::Value>()
            .map_err(|e| RpcError::new(-32001, e.to_string()))
    };
    Dispatchers {
        sync: methods(Dispatcher::builder(()))
            .method("later", later)
            .build()
            .unwrap(),
        sync_tight: tight(methods(Dispatcher::builder(())))
            .method("later", later)
            .build()
            .unwrap(),
        with_async: methods(Dispatcher::builder(()))
            .async_method("later", later_async)
            .async_method("ask", ask)
            .build()
            .unwrap(),
        with_async_tight: tight(methods(Dispatcher::builder(())))
            .async_method("later", later_async)
            .async_method("ask", ask)
            .build()
            .unwrap(),
    }
}

/// The handlers every dispatcher has: echo, an error, a large result, and
/// the shutdown.
fn methods<K>(
    builder: rpcwire::dispatch::DispatcherBuilder<(), K>,
) -> rpcwire::dispatch::DispatcherBuilder<(), K> {
    builder
        .method("echo", |c: Call<'_, ()>| match c.params {
            Some(p) => c.reply.raw_json(p.as_value()),
            None => c.reply.null(),
        })
        .method("add", |c: Call<'_, ()>| {
            let (a, b): (u64, u64) = c.decode()?;
            c.reply.u64(a.wrapping_add(b))
        })
        .method("fail", |_c: Call<'_, ()>| {
            Err::<(), _>(RpcError::new(-32000, "no").with_data(&[1, 2]))
        })
        .method("big", |c: Call<'_, ()>| {
            let (n,): (usize,) = c.decode()?;
            Ok::<_, RpcError>("x".repeat(n.min(1 << 16)))
        })
        .method("stop", |_c: Call<'_, ()>| {
            STOP.with(|stop| {
                if let Some(s) = &*stop.borrow() {
                    s.trigger();
                }
            });
            Ok::<_, RpcError>(true)
        })
        .max_response_len(4096)
}

thread_local! {
    /// The shutdown signal of the run in progress, which `stop` triggers.
    static STOP: std::cell::RefCell<Option<Shutdown>> = const { std::cell::RefCell::new(None) };
}

/// Sets the shutdown signal `stop` triggers: the run's, or none between
/// runs.
pub fn set_stop(shutdown: Option<Shutdown>) {
    STOP.with(|stop| *stop.borrow_mut() = shutdown);
}

/// What the server wrote: a reply, or a message of its own to the client.
pub enum Outgoing {
    Reply,
    ToClient,
}

/// A reply, or a request or notification to the client (an object with
/// `"jsonrpc":"2.0"` and a string `method`, an integer id if any).
pub fn check_outgoing(message: &[u8]) -> Result<Outgoing, String> {
    if message.first() == Some(&b'{') {
        let members: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_slice(message).map_err(|e| format!("not a JSON object: {e}"))?;
        if let Some(method) = members.get("method") {
            if members.get("jsonrpc").map(|v| v.get()) != Some("\"2.0\"") {
                return Err("a message to the client without \"jsonrpc\":\"2.0\"".into());
            }
            if !method.get().starts_with('"') {
                return Err("a message to the client whose method is not a string".into());
            }
            if members
                .get("id")
                .is_some_and(|id| id.get().parse::<u64>().is_err())
            {
                return Err("a question to the client whose id is not a number".into());
            }
            if members
                .keys()
                .any(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "method" | "params"))
            {
                return Err("a member a request does not have".into());
            }
            return Ok(Outgoing::ToClient);
        }
    }
    check_reply(message).map(|()| Outgoing::Reply)
}

/// One reply: a JSON-RPC 2.0 response, or a non-empty array of them.
fn check_reply(reply: &[u8]) -> Result<(), String> {
    match reply.first() {
        Some(b'{') => check_response(reply),
        Some(b'[') => {
            let items: Vec<&RawValue> =
                serde_json::from_slice(reply).map_err(|e| format!("not JSON: {e}"))?;
            if items.is_empty() {
                return Err("an empty batch reply".into());
            }
            items
                .iter()
                .try_for_each(|item| check_response(item.get().as_bytes()))
        }
        _ => Err("a reply that is not an object or array".into()),
    }
}

fn check_response(reply: &[u8]) -> Result<(), String> {
    // Raw members: an id echoed byte for byte may hold what `Value` cannot
    // (an unpaired surrogate escape).
    let members: std::collections::BTreeMap<String, &RawValue> =
        serde_json::from_slice(reply).map_err(|e| format!("not a JSON object: {e}"))?;
    if members.get("jsonrpc").map(|v| v.get()) != Some("\"2.0\"") {
        return Err("no \"jsonrpc\":\"2.0\"".into());
    }
    match members.get("id").map(|v| v.get().as_bytes()[0]) {
        Some(b'n' | b'"' | b'-' | b'0'..=b'9') => {}
        _ => return Err("no id, or one not null, a number or a string".into()),
    }
    let result = members.contains_key("result");
    let error = members.get("error");
    if result == error.is_some() {
        return Err("not exactly one of result and error".into());
    }
    if members
        .keys()
        .any(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "result" | "error"))
    {
        return Err("a member a response does not have".into());
    }
    if let Some(error) = error {
        let e: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(error.get())
            .map_err(|e| format!("an error that is not an object: {e}"))?;
        let code = e.get("code").map(|c| c.get()).unwrap_or("");
        if code.parse::<i64>().is_err() {
            return Err("an error without an integer code".into());
        }
        if !e.get("message").is_some_and(|m| m.get().starts_with('"')) {
            return Err("an error without a message".into());
        }
        if e.keys()
            .any(|k| !matches!(k.as_str(), "code" | "message" | "data"))
        {
            return Err("an error member that errors do not have".into());
        }
    }
    Ok(())
}
