//! The gateway's own errors: each says what failed and where, in `data`.
//!
//! | failure | code | message |
//! | --- | --- | --- |
//! | the upstream did not answer in time (the dispatcher's per-request timeout; `data.timeout_ms`) | -32002 (geth's) | `Request timed out` |
//! | no connection, a connection reset, an HTTP error status | -32603 | `upstream unavailable` |
//! | a reply that is not a JSON-RPC response, or carries another id | -32603 | `upstream reply malformed` |
//! | a method the policy denies | -32601 | `method not allowed` |
//! | a subscription's notification larger than `--max-response` (its final error notification; `data.limit`) | -32003 (geth's) | `Response too large` |
//!
//! `data` names the upstream by `host:port` only (a URL path may hold an
//! API key) and gives the reason.

use std::time::Duration;

use rpcwire::RpcError;
use rpcwire::codes::{INTERNAL_ERROR, METHOD_NOT_FOUND};
use rpcwire::eth::codes::{REQUEST_TIMEOUT, RESPONSE_TOO_LARGE};
use serde::Serialize;

#[derive(Serialize)]
struct Data<'a> {
    upstream: &'a str,
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
}

/// -32002: the WebSocket upstream took longer than the timeout (HTTP
/// calls are bounded by the dispatcher's own per-request timeout).
pub fn upstream_timeout(upstream: &str, timeout: Duration) -> RpcError {
    RpcError::new(REQUEST_TIMEOUT, "Request timed out").with_data(&Data {
        upstream,
        reason: "the upstream did not answer in time",
        timeout_ms: Some(timeout.as_millis() as u64),
    })
}

/// -32603: the exchange with the upstream failed.
pub fn upstream_failed(upstream: &str, reason: &str) -> RpcError {
    RpcError::new(INTERNAL_ERROR, "upstream unavailable").with_data(&Data {
        upstream,
        reason,
        timeout_ms: None,
    })
}

/// The message of [`malformed`]'s error.
pub const MALFORMED: &str = "upstream reply malformed";

/// -32603: the upstream's reply could not be used.
pub fn malformed(upstream: &str, reason: &str) -> RpcError {
    RpcError::new(INTERNAL_ERROR, MALFORMED).with_data(&Data {
        upstream,
        reason,
        timeout_ms: None,
    })
}

/// -32603: nothing to forward to (no upstream of the kind needed).
pub fn no_upstream() -> RpcError {
    RpcError::new(INTERNAL_ERROR, "upstream unavailable")
        .with_data(&serde_json::json!({"reason": "no upstream configured for this call"}))
}

/// -32003 (geth's code for a reply past the limit), `data.limit`: a
/// subscription's notification was larger than `--max-response` (the
/// final error notification of that subscription).
pub fn notification_too_large(upstream: &str, limit: usize) -> RpcError {
    RpcError::new(RESPONSE_TOO_LARGE, "Response too large").with_data(&serde_json::json!({
        "upstream": upstream,
        "limit": limit,
        "reason": "a notification of this subscription was larger than the limit; the subscription has ended",
    }))
}

/// The error an upstream ended a subscription with (`params.error` of its
/// last notification), passed on as it came (`code`, `message`, `data`)
/// when it is a JSON-RPC error object; else -32603 naming the upstream.
pub fn subscription_ended_upstream(upstream: &str, error: &[u8]) -> RpcError {
    #[derive(serde::Deserialize)]
    struct Upstream<'a> {
        code: i32,
        message: String,
        #[serde(borrow, default)]
        data: Option<&'a serde_json::value::RawValue>,
    }
    match serde_json::from_slice::<Upstream<'_>>(error) {
        Ok(e) => {
            let error = RpcError::new(e.code, e.message);
            match e.data {
                Some(data) => error.with_raw_data(data.get()),
                None => error,
            }
        }
        Err(_) => RpcError::new(INTERNAL_ERROR, "Internal error").with_data(&serde_json::json!({
            "upstream": upstream,
            "reason": "the upstream ended the subscription with an error that is not a JSON-RPC error object",
        })),
    }
}

/// -32601: a subscription method other than `eth_subscribe` /
/// `eth_unsubscribe`. Forwarded over the shared upstream WebSocket, its
/// subscription would belong to the gateway's connection: its
/// notifications would reach nobody, and nothing would ever end it.
pub fn unrelayed_subscription(method: &str) -> RpcError {
    RpcError::new(METHOD_NOT_FOUND, "method not supported").with_data(&serde_json::json!({
        "method": method,
        "reason": "this gateway relays subscriptions of eth_subscribe only",
    }))
}

/// -32601: the policy denies `method`, by `rule`.
pub fn denied(method: &str, rule: &str) -> RpcError {
    RpcError::new(METHOD_NOT_FOUND, "method not allowed").with_data(&serde_json::json!({
        "method": method,
        "rule": format!("deny {rule}*"),
        "reason": "this gateway does not serve the namespace; start it with --allow to lift the rule",
    }))
}
