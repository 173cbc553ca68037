//! Checks of behaviour the README states that no other test pins down,
//! each test quoting the README's words it checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rpcwire::{Call, Connection, Dispatcher, Parser, RpcError};
use serde_json::{Value, json};

/// A dispatcher with `echo` (returns its params) and `count` (counts its
/// runs), under `parser` and a reply limit.
fn node(parser: Parser, max_response: usize) -> (Dispatcher<Arc<AtomicUsize>>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let d = Dispatcher::builder(runs.clone())
        .parser(parser)
        .max_response_len(max_response)
        .method("echo", |call: Call<'_, Arc<AtomicUsize>>| {
            call.state.fetch_add(1, Ordering::SeqCst);
            let v: Value = call.decode()?;
            Ok::<_, RpcError>(v)
        })
        .method("count", |call: Call<'_, Arc<AtomicUsize>>| {
            call.state.fetch_add(1, Ordering::SeqCst);
            Ok::<_, RpcError>(1)
        })
        .build()
        .unwrap();
    (d, runs)
}

fn default_node() -> (Dispatcher<Arc<AtomicUsize>>, Arc<AtomicUsize>) {
    node(Parser::new(), rpcwire::dispatch::DEFAULT_MAX_RESPONSE_LEN)
}

/// The reply to `input`, raw.
fn raw(d: &Dispatcher<Arc<AtomicUsize>>, input: &[u8]) -> Vec<u8> {
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(input, &mut conn, &mut out);
    out
}

/// The reply to `input`, as JSON.
fn reply(d: &Dispatcher<Arc<AtomicUsize>>, input: &str) -> Value {
    let out = raw(d, input.as_bytes());
    serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {:?} for {input}", String::from_utf8_lossy(&out)))
}

fn code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error code in {v}"))
}

// README, the table: "not one valid JSON value (anywhere) | one -32700,
// `id: null`, `data` says what and where" (the close over concatenated JSON:
// `tests/transports/stream_edges.rs`,
// `a_message_that_is_not_json_ends_a_concatenated_stream`).
#[test]
fn invalid_json_anywhere_is_one_parse_error_with_where() {
    let (d, runs) = default_node();
    for input in [
        r#"{"jsonrpc":"2.0","id":1,"method":"count""#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"count"},{"jsonrpc":"2.0","id":2,"method":"count",}]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"count"} x"#,
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"count\",\"params\":[\"\u{1}\"]}]",
    ] {
        let v = reply(&d, input);
        assert!(v.is_object(), "one reply, not a batch: {v} for {input}");
        assert_eq!(code(&v), -32700, "{input}");
        assert_eq!(v["id"], Value::Null);
        assert!(
            !v["error"]["data"].is_null(),
            "data says what and where: {v}"
        );
        assert!(
            v["error"]["data"]
                .to_string()
                .chars()
                .any(|c| c.is_ascii_digit()),
            "a position: {v}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing runs");
}

// "nesting deeper than the limit | -32700, `data.limit`"; "a depth limit:
// 128 levels, the message itself counted (so a request's params may be 127
// levels deep, the message's object the first of 128; ...)": the params
// array at level 2, 126 levels inside it.
#[test]
fn depth_limit_counts_the_message_and_names_the_limit() {
    let (d, _) = default_node();
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let ok = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"count","params":{}}}"#,
        nest(127)
    );
    assert_eq!(reply(&d, &ok)["result"], 1, "128 levels in all");
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"count","params":{}}}"#,
        nest(128)
    );
    let v = reply(&d, &deep);
    assert_eq!(code(&v), -32700);
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["data"]["limit"], 128);
    assert_eq!(Parser::DEFAULT_MAX_DEPTH, 128);
    // Params 127 levels deep (126 inside the outer array) decode with
    // serde_json's `Value`.
    let (d, _) = default_node();
    let echo = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}}"#,
        nest(127)
    );
    let out = raw(&d, echo.as_bytes());
    assert!(
        out.starts_with(br#"{"jsonrpc":"2.0","id":1,"result":[[["#),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

// "valid JSON but neither object nor array; `[]` | one -32600, `id: null`".
#[test]
fn scalars_and_the_empty_batch_are_one_invalid_request() {
    let (d, _) = default_node();
    for input in ["1", "\"x\"", "null", "true", "[]", " [ ] "] {
        let v = reply(&d, input);
        assert!(v.is_object(), "{input}: {v}");
        assert_eq!(code(&v), -32600, "{input}");
        assert_eq!(v["id"], Value::Null);
    }
}

// "invalid batch entry | -32600 in its place, id echoed when readable".
#[test]
fn an_invalid_batch_entry_is_answered_in_its_place() {
    let (d, runs) = default_node();
    let v = reply(
        &d,
        r#"[{"jsonrpc":"2.0","id":1,"method":"count"},1,{"jsonrpc":"2.0","id":"b","method":7},{"jsonrpc":"2.0","id":3,"method":"count"}]"#,
    );
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(a[0]["result"], 1);
    assert_eq!((code(&a[1]), &a[1]["id"]), (-32600, &Value::Null));
    assert_eq!((code(&a[2]), &a[2]["id"]), (-32600, &json!("b")));
    assert_eq!((&a[3]["id"], &a[3]["result"]), (&json!(3), &json!(1)));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// "`jsonrpc` not exactly `"2.0"`; `method` missing or not a string;
// `params` a number, string or boolean (`null` is taken as no params) |
// -32600, id echoed".
#[test]
fn bad_envelope_members_echo_the_id() {
    let (d, runs) = default_node();
    for input in [
        r#"{"jsonrpc":"2.00","id":7,"method":"count"}"#,
        r#"{"jsonrpc":2.0,"id":7,"method":"count"}"#,
        r#"{"id":7,"method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":7}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":null}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":["count"]}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"count","params":1}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"count","params":"x"}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"count","params":true}"#,
    ] {
        let v = reply(&d, input);
        assert_eq!(v["error"]["code"], -32600, "{input}: {v}");
        assert_eq!(v["id"], 7, "{input}: {v}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let v = reply(
        &d,
        r#"{"jsonrpc":"2.0","id":7,"method":"count","params":null}"#,
    );
    assert_eq!((&v["id"], &v["result"]), (&json!(7), &json!(1)));
}

// "`id` an object, array or boolean, or longer than the id limit; a
// repeated envelope member; an undecodable member name | -32600,
// `id: null`"; "id length (default 1 KiB)".
#[test]
fn unreadable_ids_and_envelopes_answer_with_a_null_id() {
    let (d, runs) = default_node();
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"count"}}"#,
        "a".repeat(1024)
    );
    let fits = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"count"}}"#,
        "a".repeat(1022)
    );
    for input in [
        r#"{"jsonrpc":"2.0","id":{},"method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":[1],"method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"count","method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"count","params":[],"params":[]}"#,
        r#"{"jsonrpc":"2.0","id":1,"\u006dethod":"count","method":"count"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"count","\ud800":1}"#,
        &long,
    ] {
        let v = reply(&d, input);
        assert_eq!(code(&v), -32600, "{input}: {v}");
        assert_eq!(v["id"], Value::Null, "{input}: {v}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // "Each breach is a clear error with the limit in `data`".
    assert_eq!(reply(&d, &long)["error"]["data"]["limit"], 1024);
    // 1024 bytes of id (the quotes counted) fit.
    assert_eq!(Parser::DEFAULT_MAX_ID_LEN, 1024);
    assert_eq!(reply(&d, &fits)["result"], 1);
}

// "`id: null` | a request (not a notification), answered with `id: null`;
// with `Parser::allow_null_ids(false)` (the MCP layer's setting: MCP
// forbids null ids) -32600, `id: null`, not run".
#[test]
fn null_ids_are_requests_unless_the_parser_refuses_them() {
    let input = r#"{"jsonrpc":"2.0","id":null,"method":"count"}"#;
    let (d, runs) = default_node();
    let v = reply(&d, input);
    assert_eq!((&v["id"], &v["result"]), (&Value::Null, &json!(1)), "{v}");
    let (strict, strict_runs) = node(
        Parser::new().allow_null_ids(false),
        rpcwire::dispatch::DEFAULT_MAX_RESPONSE_LEN,
    );
    let v = reply(&strict, input);
    assert_eq!((code(&v), &v["id"]), (-32600, &Value::Null), "{v}");
    assert_eq!(strict_runs.load(Ordering::SeqCst), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// "member names with escapes (`"\u006dethod"`) | compared after
// unescaping"; "method names written with `\u` escapes decoded".
#[test]
fn escaped_member_names_are_compared_unescaped() {
    let (d, _) = default_node();
    let v = reply(
        &d,
        r#"{"\u006asonrpc":"2.0","\u0069d":5,"\u006dethod":"c\u006funt","p\u0061rams":[]}"#,
    );
    assert_eq!((&v["id"], &v["result"]), (&json!(5), &json!(1)));
}

// "unknown method, any `rpc.` method | -32601, `data.method`".
#[test]
fn unknown_and_reserved_methods_name_the_method() {
    let (d, runs) = default_node();
    for m in ["nope", "rpc.discover", "rpc.count", "Count"] {
        let v = reply(&d, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#));
        assert_eq!(code(&v), -32601, "{m}");
        assert_eq!(v["error"]["data"]["method"], m);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// "notification | never answered; a batch of only notifications produces
// no bytes" (an unknown method's notification included).
#[test]
fn notifications_are_never_answered() {
    let (d, runs) = default_node();
    assert!(raw(&d, br#"{"jsonrpc":"2.0","method":"count"}"#).is_empty());
    assert!(raw(&d, br#"{"jsonrpc":"2.0","method":"nope"}"#).is_empty());
    assert!(
        raw(
            &d,
            br#"[{"jsonrpc":"2.0","method":"count"},{"jsonrpc":"2.0","method":"nope"}]"#
        )
        .is_empty()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// "batch longer than the limit | one -32600, `data.limit` and the offset of
// the first entry beyond it; nothing runs"; "batch length (default 1000)".
#[test]
fn a_batch_past_the_limit_is_one_error_and_nothing_runs() {
    let (d, runs) = default_node();
    let entry = r#"{"jsonrpc":"2.0","id":1,"method":"count"}"#;
    let batch = |n: usize| format!("[{}]", vec![entry; n].join(","));
    assert_eq!(reply(&d, &batch(1000)).as_array().unwrap().len(), 1000);
    runs.store(0, Ordering::SeqCst);
    let v = reply(&d, &batch(1001));
    assert!(v.is_object(), "one error");
    assert_eq!(code(&v), -32600);
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["data"]["limit"], 1000);
    let offset = 1 + 1000 * (entry.len() + 1);
    assert_eq!(
        v["error"]["data"]["offset"], offset,
        "where entry 1001 starts: {v}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// "message size (default 5 MiB) ... Each breach is a clear error with the
// limit in `data`".
#[test]
fn a_message_past_the_size_limit_names_the_limit() {
    let (d, runs) = node(Parser::new().max_message_len(64), 1 << 20);
    let v = reply(
        &d,
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":["{}"]}}"#,
            "x".repeat(64)
        ),
    );
    assert_eq!(v["error"]["data"]["limit"], 64, "{v}");
    // `Parser::max_message_len`: "rejected before any byte is read, with
    // -32600", as a problem of the whole message (`id: null`).
    assert_eq!((code(&v), &v["id"]), (-32600, &Value::Null));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(Parser::DEFAULT_MAX_MESSAGE_LEN, 5 * 1024 * 1024);
}

// "reply larger than the limit | a server error ("Response too large",
// -32000 by default ...) with `data.limit`; in a batch, for the entry that
// crosses it and all after it (not run) ...; a message whose error replies
// alone would pass the limit gets one such error, `id: null`";
// "the response size (default 25 MB)".
#[test]
fn replies_past_the_limit() {
    assert_eq!(rpcwire::dispatch::DEFAULT_MAX_RESPONSE_LEN, 25_000_000);
    let (d, runs) = node(Parser::new(), 600);
    let v = reply(
        &d,
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":["{}"]}}"#,
            "x".repeat(700)
        ),
    );
    assert_eq!(code(&v), -32000);
    assert_eq!(v["error"]["message"], "Response too large");
    assert_eq!(v["error"]["data"]["limit"], 600);
    assert_eq!(v["id"], 1);

    runs.store(0, Ordering::SeqCst);
    let v = reply(
        &d,
        r#"[{"jsonrpc":"2.0","id":1,"method":"echo","params":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]},
            {"jsonrpc":"2.0","id":2,"method":"echo","params":["bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"]},
            {"jsonrpc":"2.0","id":3,"method":"count"}]"#,
    );
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 3);
    assert!(a[0].get("result").is_some(), "{v}");
    assert_eq!((code(&a[1]), &a[1]["id"]), (-32000, &json!(2)));
    assert_eq!(
        (code(&a[2]), &a[2]["id"]),
        (-32000, &json!(3)),
        "all after it: {v}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the entry after it does not run"
    );

    runs.store(0, Ordering::SeqCst);
    let batch = format!(
        "[{}]",
        vec![r#"{"jsonrpc":"2.0","id":1,"method":"count"}"#; 20].join(",")
    );
    let v = reply(&d, &batch);
    assert!(v.is_object(), "one error: {v}");
    assert_eq!((code(&v), &v["id"]), (-32000, &Value::Null));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // A single request too (its error reply alone, with its 100-byte id,
    // past the smallest limit, 128 bytes).
    let (d, runs) = node(Parser::new(), 128);
    let v = reply(
        &d,
        &format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"count"}}"#,
            "i".repeat(98)
        ),
    );
    assert_eq!((code(&v), &v["id"]), (-32000, &Value::Null), "{v}");
    assert_eq!(v["error"]["data"]["limit"], 128);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// "a response (`result` or `error`, no `method`), alone or in a batch |
// matched to a pending outbound request, never answered".
#[test]
fn responses_are_never_answered() {
    let (d, runs) = default_node();
    assert!(raw(&d, br#"{"jsonrpc":"2.0","id":1,"result":1}"#).is_empty());
    assert!(
        raw(
            &d,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#
        )
        .is_empty()
    );
    let v = reply(
        &d,
        r#"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"method":"count"}]"#,
    );
    assert_eq!(v, json!([{"jsonrpc":"2.0","id":2,"result":1}]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// "ids kept as their exact bytes (`1e3`, `-0`, `18446744073709551616` and
// `"\u0041"` come back as sent)".
#[test]
fn ids_come_back_as_sent() {
    let (d, _) = default_node();
    for id in ["1e3", "-0", "18446744073709551616", r#""\u0041""#] {
        let out = raw(
            &d,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"count"}}"#).as_bytes(),
        );
        assert_eq!(
            out,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#).as_bytes()
        );
    }
}

// "Duplicate names and `rpc.` names are refused when it is built
// (`rpc.discover` can be registered with the explicit
// `DispatcherBuilder::rpc_discover`)".
#[test]
fn the_router_refuses_duplicates_and_rpc_names() {
    let ok = |_: Call<'_, ()>| Ok::<_, RpcError>(1);
    assert!(
        Dispatcher::builder(())
            .method("a", ok)
            .method("a", ok)
            .build()
            .is_err()
    );
    assert!(
        Dispatcher::builder(())
            .method("rpc.discover", ok)
            .build()
            .is_err()
    );
    // `DispatcherBuilder::build`: "Fails on a duplicate method name, an
    // empty one, or one starting with `rpc.`".
    for name in ["", "rpc.x"] {
        assert!(
            Dispatcher::builder(()).method(name, ok).build().is_err(),
            "{name:?}"
        );
    }
    let d = Dispatcher::builder(()).rpc_discover(ok).build().unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(
        br#"{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}"#,
        &mut conn,
        &mut out,
    );
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":1}"#);
}

// "A panic becomes -32603 for that request only, the panic's message sent
// to the client in `data.panic`".
#[test]
fn a_panic_is_an_internal_error_for_that_request_only() {
    let d = Dispatcher::builder(())
        .quiet_panics(true)
        .method("boom", |_: Call<'_, ()>| -> Result<u8, RpcError> {
            panic!("kaboom")
        })
        .method("ok", |_: Call<'_, ()>| Ok::<_, RpcError>(1))
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(
        br#"[{"jsonrpc":"2.0","id":1,"method":"boom"},{"jsonrpc":"2.0","id":2,"method":"ok"}]"#,
        &mut conn,
        &mut out,
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v[0]["error"]["code"], -32603);
    assert_eq!(v[0]["error"]["data"]["panic"], "kaboom");
    assert_eq!(v[1]["result"], 1);
    // "(`panic_messages(false)` keeps it out)".
    let d = Dispatcher::builder(())
        .quiet_panics(true)
        .panic_messages(false)
        .method("boom", |_: Call<'_, ()>| -> Result<u8, RpcError> {
            panic!("kaboom")
        })
        .build()
        .unwrap();
    out.clear();
    d.handle(
        br#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#,
        &mut conn,
        &mut out,
    );
    assert_eq!(
        out,
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error"}}"#
    );
}

// "`?` works on `io::Error`, `serde_json::Error`, `ParseIntError` and more,
// each with a documented code" (io: -32603; serde_json and parse errors:
// -32602, the client's input).
#[test]
fn question_mark_on_std_errors_gives_their_codes() {
    let d = Dispatcher::builder(())
        .method("io", |_: Call<'_, ()>| -> Result<u8, RpcError> {
            Err(std::io::Error::other("disk"))?
        })
        .method("int", |call: Call<'_, ()>| -> Result<u8, RpcError> {
            let (s,): (&str,) = call.decode()?;
            Ok(s.parse::<u8>()?)
        })
        .method("json", |_: Call<'_, ()>| -> Result<u8, RpcError> {
            Ok(serde_json::from_str::<u8>("x")?)
        })
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    for (input, want) in [
        (&br#"{"jsonrpc":"2.0","id":1,"method":"io"}"#[..], -32603),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"int","params":["300"]}"#,
            -32602,
        ),
        (br#"{"jsonrpc":"2.0","id":1,"method":"json"}"#, -32602),
    ] {
        out.clear();
        d.handle(input, &mut conn, &mut out);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(code(&v), want, "{v}");
    }
}

// "`call.decode::<T>()` borrows strings from the message, escaped ones
// decoded into the arena, so `#[serde(borrow)] name: &'a str` works for
// `"Ad\u00e8le"` too; its errors give the byte offset in the message".
#[test]
fn decode_borrows_escaped_strings_and_reports_offsets() {
    #[derive(serde::Deserialize)]
    struct Who<'a> {
        #[serde(borrow)]
        name: &'a str,
    }
    let d = Dispatcher::builder(())
        .method("hi", |call: Call<'_, ()>| {
            let w: Who<'_> = call.decode()?;
            call.reply.str(w.name)
        })
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(
        br#"{"jsonrpc":"2.0","id":1,"method":"hi","params":{"name":"Ad\u00e8le"}}"#,
        &mut conn,
        &mut out,
    );
    assert_eq!(
        out,
        r#"{"jsonrpc":"2.0","id":1,"result":"Adèle"}"#.as_bytes()
    );
    out.clear();
    let input = br#"{"jsonrpc":"2.0","id":1,"method":"hi","params":{"name":7}}"#;
    d.handle(input, &mut conn, &mut out);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(code(&v), -32602);
    let at = input.windows(1).position(|w| w == b"7").unwrap();
    let text = v["error"]["data"].to_string();
    assert!(
        [at, at + 1].iter().any(|o| text.contains(&o.to_string())),
        "the offset of the bad value ({at}) in {text}"
    );
}

// "`serde_json::Value` accepts 127 levels in all".
#[test]
fn serde_json_value_takes_127_levels() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(serde_json::from_str::<Value>(&nest(127)).is_ok());
    assert!(serde_json::from_str::<Value>(&nest(128)).is_err());
}

// "batch length (default 1000, for responses too)".
#[test]
fn the_batch_limit_holds_for_responses_too() {
    let arena = rpcwire::bumpalo::Bump::new();
    let entry = r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#;
    let batch = |n: usize| format!("[{}]", vec![entry; n].join(","));
    let ok = batch(1000);
    assert!(rpcwire::parse_response(ok.as_bytes(), &arena).is_ok());
    let over = batch(1001);
    let e = rpcwire::parse_response(over.as_bytes(), &arena).expect_err("refused");
    assert_eq!(e.limit(), Some(1000));
}

/// The gateway's command line, compiled from the example.
#[allow(dead_code)]
#[path = "../examples/gateway/config.rs"]
mod gateway_config;

// "`--help` every option", and the defaults the README gives: chain id
// 31337 (`--chain-id`), `--ws-ping MS, default 20 s`, `--upstream-connections`
// (default 128), one worker per core (`--threads N`), `admin_*`,
// `personal_*` and `debug_*` denied, the body, batch and reply limits the
// library's, 127.0.0.1:8545.
#[test]
fn the_gateway_options_the_readme_names_exist_with_its_defaults() {
    use gateway_config::{Config, USAGE};
    let readme = include_str!("../README.md");
    let section =
        &readme[readme.find("## The gateway").unwrap()..readme.find("**Load test**").unwrap()];
    let mut named = 0;
    for (i, _) in section.match_indices("`--") {
        let option: String = section[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        named += 1;
        let listed = USAGE.lines().any(|l| {
            l.starts_with("  -")
                && l.split_whitespace()
                    .take(2)
                    .any(|w| w.trim_end_matches(',') == option)
        });
        assert!(listed, "{option} is not in --help");
        if option != "--help" {
            // Known to the parser (an unknown one is refused).
            let err = Config::from_args([option.clone()].into_iter()).unwrap_err();
            assert!(err.contains("needs a value"), "{option}: {err}");
        }
    }
    assert!(
        named >= 10,
        "the README names the gateway's options: {named}"
    );
    assert!(Config::from_args(["--help".to_string()].into_iter()).unwrap_err() == USAGE);

    let c = Config::default();
    assert_eq!(c.listen, "127.0.0.1:8545".parse().unwrap());
    assert_eq!(c.chain_id, 31337);
    assert_eq!(c.ws_ping, Some(std::time::Duration::from_secs(20)));
    assert_eq!(c.upstream_connections, 128);
    assert_eq!(
        c.threads,
        std::thread::available_parallelism().unwrap().get()
    );
    assert_eq!(c.deny, ["admin_", "personal_", "debug_"]);
    assert_eq!(c.max_body, Parser::DEFAULT_MAX_MESSAGE_LEN);
    assert_eq!(c.max_batch, Parser::DEFAULT_MAX_BATCH_LEN);
    assert_eq!(c.max_response, rpcwire::dispatch::DEFAULT_MAX_RESPONSE_LEN);
    assert!(!c.hyper_client, "the gateway's own client by default");
    // "`http://` or `ws://`, no TLS".
    assert!(Config::from_args(["--upstream".into(), "https://x:1".into()].into_iter()).is_err());
    let c = Config::from_args(
        [
            "--upstream".into(),
            "ws://x:1".into(),
            "--allow".into(),
            "debug_".into(),
        ]
        .into_iter(),
    )
    .unwrap();
    assert_eq!(c.deny, ["admin_", "personal_"], "--allow lifts one");
    // A value that is no rule lifted nothing, silently (found by a review):
    // refused now.
    for lifts_nothing in ["debug", "debug_traceTransaction", "eth_"] {
        let refused = Config::from_args(["--allow".into(), lifts_nothing.into()].into_iter());
        assert!(
            refused
                .unwrap_err()
                .starts_with(&format!("--allow {lifts_nothing}: no deny rule is")),
            "{lifts_nothing}"
        );
    }
}

// `McpServerBuilder::call_timeout`: "A call past it is answered with
// -32001" (the MCP SDKs' RequestTimeout). It was answered with the
// dispatcher's default timeout code, -32000.
#[tokio::test(start_paused = true)]
async fn an_mcp_tool_call_past_its_deadline_is_answered_with_32001() {
    use rpcwire::mcp::{McpServer, Tool, ToolOutput};
    let s = McpServer::builder("t", "1")
        .call_timeout(Some(std::time::Duration::from_millis(50)))
        .tool(Tool::new("hang", json!({"type": "object"}), |_, _| async {
            std::future::pending::<()>().await;
            Ok(ToolOutput::text("never"))
        }))
        .build()
        .unwrap();
    let mut conn = s.connection("memory");
    let mut out = Vec::new();
    let msg = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"hang","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    assert!(
        s.handle(
            &bytes::Bytes::from_static(msg.as_bytes()),
            &mut conn,
            &mut out
        )
        .await
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["id"], 9);
    assert_eq!(v["error"]["code"], -32001, "{v}");
    assert_eq!(v["error"]["message"], "Request timed out");
}

// `rpcwire::mcp`: "One connection may serve both: a stdio client that
// probes `server/discover` and then falls back to `initialize` is served in
// the revision it settles on."
#[tokio::test]
async fn an_mcp_client_may_probe_discover_then_initialize() {
    use rpcwire::mcp::{McpServer, Tool, ToolOutput};
    let s = McpServer::builder("t", "1")
        .tool(Tool::new("hi", json!({"type": "object"}), |_, _| async {
            Ok(ToolOutput::text("hello"))
        }))
        .build()
        .unwrap();
    let mut conn = s.connection("memory");
    let mut send = async |msg: &str| {
        let mut out = Vec::new();
        let answered = s
            .handle(
                &bytes::Bytes::copy_from_slice(msg.as_bytes()),
                &mut conn,
                &mut out,
            )
            .await;
        if answered {
            serde_json::from_slice::<Value>(&out).unwrap()
        } else {
            Value::Null
        }
    };
    let r = send(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let r = send(r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
    assert_eq!(
        send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await,
        Value::Null
    );
    let r = send(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hi","arguments":{}}}"#,
    )
    .await;
    assert_eq!(r["result"]["content"][0]["text"], "hello", "{r}");
    assert!(
        r["result"].get("resultType").is_none(),
        "served in 2025-06-18: {r}"
    );
}

/// An example's binary: target/<profile>/deps/readme_claims-<hash> ->
/// target/<profile>/examples/<name> (built by `cargo test`, or
/// `cargo build --all-features --examples`).
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`): the
/// status line and the body.
async fn http1(addr: &str, head: &str, body: &str) -> (String, String) {
    http1_naming(addr, addr, head, body).await
}

/// [`http1`] with `host` in the `Host` header.
async fn http1_naming(addr: &str, host: &str, head: &str, body: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{head}\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

// "`examples/http_server.rs` serves `/metrics` next to it", and the
// example's own doc: `cargo run --features http --example http_server
// [127.0.0.1:8545]`, the curl commands, "Ctrl-C shuts it down gracefully".
#[cfg(unix)]
#[tokio::test]
async fn the_http_server_example_answers_serves_metrics_and_stops_on_ctrl_c() {
    http_server_example_stops_on("-INT").await;
}

// And on SIGTERM, what `docker stop`, systemd and Kubernetes send (it was
// killed at once, its calls cut).
#[cfg(unix)]
#[tokio::test]
async fn the_http_server_example_stops_gracefully_on_sigterm() {
    http_server_example_stops_on("-TERM").await;
}

/// An argument that is not Unicode is refused with a message, not a
/// panic (`std::env::args` panics on one; found by a review of the
/// examples).
#[cfg(unix)]
#[test]
fn the_http_examples_refuse_arguments_that_are_not_unicode() {
    use std::os::unix::ffi::OsStrExt;
    let arg = std::ffi::OsStr::from_bytes(b"127.0.0.1:\xff");
    for (name, status) in [("http_server", 1), ("mcp_server", 2)] {
        let bin = example(name);
        let out = std::process::Command::new(&bin)
            .arg(arg)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
}

/// Generous: only for not hanging forever, never a measurement.
#[cfg(unix)]
const EXAMPLE_HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// An example's stderr, line by line.
#[cfg(unix)]
type ExampleLog = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>;

/// The example `name` started with `args`, and the first line it wrote to
/// stderr (where it listens).
#[cfg(unix)]
async fn start_example(name: &str, args: &[&str]) -> (tokio::process::Child, ExampleLog, String) {
    use tokio::io::AsyncBufReadExt;
    let bin = example(name);
    assert!(
        bin.exists(),
        "{} is built by `cargo test --all-features` (or `cargo build --all-features --example {name}`)",
        bin.display()
    );
    let mut child = tokio::process::Command::new(&bin)
        .args(args)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(EXAMPLE_HANG, stderr.next_line())
        .await
        .expect("hang")
        .unwrap()
        .unwrap();
    (child, stderr, line)
}

/// Sends `signal` (`-TERM`, `-INT`) to `child`, checks that it exits with
/// status 0, and returns the rest of what it wrote to stderr.
#[cfg(unix)]
async fn stop_example(
    mut child: tokio::process::Child,
    mut stderr: ExampleLog,
    signal: &str,
) -> Vec<String> {
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(EXAMPLE_HANG, child.wait())
        .await
        .expect("hang: the signal did not stop it")
        .unwrap();
    assert!(status.success(), "{signal}: {status}");
    let mut rest = Vec::new();
    while let Ok(Some(l)) = stderr.next_line().await {
        rest.push(l);
    }
    rest
}

#[cfg(unix)]
async fn http_server_example_stops_on(signal: &str) {
    let (child, stderr, line) = start_example("http_server", &["127.0.0.1:0"]).await;
    let addr = line
        .strip_prefix("JSON-RPC on http://")
        .and_then(|r| r.split_once('/'))
        .map(|(a, _)| a.to_string())
        .unwrap_or_else(|| panic!("where it listens: {line}"));

    let (status, body) = http1(
        &addr,
        "POST / HTTP/1.1\r\nContent-Type: application/json",
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
    )
    .await;
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, r#"{"jsonrpc":"2.0","id":1,"result":"0x1b4"}"#);
    let (status, _) = http1(
        &addr,
        "PUT / HTTP/1.1\r\nContent-Type: application/json",
        "{}",
    )
    .await;
    assert!(status.contains(" 405 "), "{status}");
    // A page of another site whose name was made to resolve here (DNS
    // rebinding) names that site: refused (the example served it; found by
    // a review of the examples). `localhost` and addresses are served.
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}"#;
    let post = "POST / HTTP/1.1\r\nContent-Type: application/json";
    let (status, _) = http1_naming(&addr, "evil.example", post, call).await;
    assert!(status.contains(" 403 "), "{status}");
    let (status, _) = http1_naming(&addr, "evil.example", "GET /metrics HTTP/1.1", "").await;
    assert!(status.contains(" 403 "), "/metrics: {status}");
    let port = addr.rsplit_once(':').unwrap().1;
    let (status, _) = http1_naming(&addr, &format!("localhost:{port}"), post, call).await;
    assert!(status.contains(" 200 "), "{status}");
    let (status, metrics) = http1(&addr, "GET /metrics HTTP/1.1", "").await;
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        metrics.contains("rpcwire_calls_total{method=\"eth_blockNumber\"} 2"),
        "{metrics}"
    );

    // A graceful stop, status 0.
    let rest = stop_example(child, stderr, signal).await;
    assert!(rest.iter().any(|l| l == "shutting down"), "{rest:?}");
}

// The MCP example over Streamable HTTP (`--http`) stops gracefully on
// SIGTERM or Ctrl-C (it ran on a future that never ended, so it was
// killed at once, its calls and event streams cut), a call in flight
// answered first. Found by a review of the examples.
#[cfg(unix)]
#[tokio::test]
async fn the_mcp_example_over_http_stops_gracefully_on_sigterm() {
    let (child, stderr, line) = start_example("mcp_server", &["--http", "127.0.0.1:0"]).await;
    let addr = line
        .strip_prefix("mcp_server: Streamable HTTP on http://")
        .and_then(|r| r.strip_suffix("/mcp"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("where it listens: {line}"));
    let (status, body) = http1(
        &addr,
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert!(body.contains("rpcwire-mcp-example"), "{body}");
    // A call in flight when the signal comes is answered before the exit:
    // its first progress event says it runs, then the signal.
    let mut call = mcp_wait_call(addr).await;
    let rest = stop_example(child, stderr, "-TERM").await;
    assert!(rest.iter().any(|l| l == "mcp_server: stopped"), "{rest:?}");
    assert!(
        !rest.iter().any(|l| l == "mcp_server: wait cancelled"),
        "{rest:?}"
    );
    let mut tail = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut call.0, &mut tail)
        .await
        .unwrap();
    call.1.push_str(&tail);
    assert!(call.1.contains("waited 1500 ms"), "{}", call.1);
}

/// Opens a session on the MCP example at `addr` and starts a 1.5 s `wait`
/// call with a progress token: returns its connection, once what it read
/// (kept beside it) holds the call's first progress event.
#[cfg(unix)]
async fn mcp_wait_call(addr: String) -> (tokio::net::TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let post = |session: &str, body: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
             {session}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let exchange = async |request: String| {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        s
    };
    let mut s = exchange(post(
        "",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    ))
    .await;
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    let session = got
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l[15..].trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id: {got}"));
    let session = format!("Mcp-Session-Id: {session}\r\n");
    let mut s = exchange(post(
        &session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ))
    .await;
    s.read_to_string(&mut String::new()).await.unwrap();
    let mut s = exchange(post(
        &session,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"ms":1500},"_meta":{"progressToken":"p"}}}"#,
    ))
    .await;
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&read).contains("notifications/progress") {
        let n = tokio::time::timeout(EXAMPLE_HANG, s.read(&mut buf))
            .await
            .expect("hang: no progress")
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&buf[..n]);
    }
    (s, String::from_utf8(read).unwrap())
}

// "the response size ... bounds memory as well as bytes sent: ...
// notifications write into nothing": a notification's large result counts
// against nothing, and the requests beside it are answered.
#[test]
fn a_notifications_result_takes_no_room_in_the_reply() {
    let (d, runs) = node(Parser::new(), 600);
    let big = "n".repeat(5000);
    let v = reply(
        &d,
        &format!(
            r#"[{{"jsonrpc":"2.0","method":"echo","params":["{big}"]}},{{"jsonrpc":"2.0","id":1,"method":"count"}},{{"jsonrpc":"2.0","method":"echo","params":["{big}"]}}]"#
        ),
    );
    assert_eq!(v, json!([{"jsonrpc": "2.0", "id": 1, "result": 1}]));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "the notifications ran");
    let out = raw(
        &d,
        format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{big}"]}}"#).as_bytes(),
    );
    assert!(out.is_empty());
}

/// The reason `check` refuses the JSON value `json` with, or `None` when it
/// accepts it.
fn eth_reason(
    json: &str,
    check: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str>,
) -> Option<&'static str> {
    let arena = rpcwire::bumpalo::Bump::new();
    let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":[{json}]}}"#);
    let m = rpcwire::parse(msg.as_bytes(), &arena).unwrap();
    let value = m
        .into_single()
        .unwrap()
        .request()
        .unwrap()
        .params()
        .unwrap()
        .nth(0)
        .unwrap();
    check(value)
}

// The `rpcwire::eth` module docs' table ("QUANTITY | `0x0`, `0x1b4`,
// `0xDEAD` | `0x` (empty), `0x01` (leading zeros), `1b4` (missing prefix),
// `0xg` (invalid digit), 17 digits into `u64` / 65 into `U256` (more than
// N bits), `27` (not a string)", DATA and block ids), which the README's
// "the spec's rules enforced, -32602 naming the parameter" points at.
#[test]
fn the_eth_decoders_accept_and_refuse_what_the_table_says() {
    use rpcwire::eth::EthValue;
    let u64_: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str> =
        |v| v.quantity_u64().err().map(|e| e.reason());
    let u256: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str> =
        |v| v.quantity_u256().err().map(|e| e.reason());
    for ok in [r#""0x0""#, r#""0x1b4""#, r#""0xDEAD""#] {
        assert_eq!(eth_reason(ok, u64_), None, "{ok}");
    }
    for (bad, reason) in [
        (r#""0x""#, "empty"),
        (r#""0x01""#, "leading zeros"),
        (r#""1b4""#, "missing 0x prefix"),
        (r#""0xg""#, "invalid hex digit"),
        ("27", "not a string"),
    ] {
        let got = eth_reason(bad, u64_).unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(got.contains(reason), "{bad}: {got}");
    }
    assert_eq!(
        eth_reason(&format!(r#""0x{}""#, "f".repeat(16)), u64_),
        None
    );
    assert_eq!(
        eth_reason(&format!(r#""0x1{}""#, "0".repeat(16)), u64_),
        Some("more than 64 bits")
    );
    assert_eq!(
        eth_reason(&format!(r#""0x{}""#, "f".repeat(64)), u256),
        None
    );
    assert_eq!(
        eth_reason(&format!(r#""0x1{}""#, "0".repeat(64)), u256),
        Some("more than 256 bits")
    );

    let data: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str> =
        |v| v.data().err().map(|e| e.reason());
    let address: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str> =
        |v| v.address().err().map(|e| e.reason());
    assert_eq!(eth_reason(r#""0x""#, data), None);
    assert_eq!(eth_reason(r#""0x00ff""#, data), None);
    assert_eq!(
        eth_reason(r#""0xabc""#, data),
        Some("odd number of hex digits")
    );
    assert_eq!(
        eth_reason(&format!(r#""0x{}""#, "ab".repeat(19)), address),
        Some("wrong length")
    );
    assert_eq!(
        eth_reason(&format!(r#""0x{}""#, "ab".repeat(20)), address),
        None
    );

    let block: fn(rpcwire::json::RawJson<'_>) -> Option<&'static str> =
        |v| v.block_id().err().map(|e| e.reason());
    let hash = format!(r#""0x{}""#, "11".repeat(32));
    for ok in [
        r#""latest""#.to_string(),
        r#""earliest""#.into(),
        r#""pending""#.into(),
        r#""safe""#.into(),
        r#""finalized""#.into(),
        r#""0x10""#.into(),
        hash.clone(),
        format!(r#"{{"blockHash":{hash},"requireCanonical":true}}"#),
        r#"{"blockNumber":"0x10"}"#.into(),
    ] {
        assert_eq!(eth_reason(&ok, block), None, "{ok}");
    }
    for bad in [
        r#""Latest""#.to_string(),
        format!(r#"{{"blockHash":{hash},"blockNumber":"0x10"}}"#),
    ] {
        assert!(eth_reason(&bad, block).is_some(), "{bad} accepted");
    }
}

// `rpcwire::mcp::http`'s table: "`POST` whose `Accept` does not take both
// `application/json` and `text/event-stream` (`*/*`, `application/*`,
// `text/*` count) | 406"; "a body over `HttpConfig::max_body` | 413"; other
// paths are 404 (`HttpConfig::path`).
#[tokio::test]
async fn the_mcp_http_endpoint_takes_accept_wildcards_and_refuses_big_bodies() {
    use rpcwire::mcp::McpServer;
    use rpcwire::mcp::http::{Endpoint, HttpConfig};
    let server = McpServer::builder("t", "1").build().unwrap();
    let config = HttpConfig {
        max_body: 200,
        ..HttpConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(rpcwire::mcp::http::serve(
        Endpoint::new(server, config),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let post = |path: &str, accept: &str| {
        format!("POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nAccept: {accept}")
    };
    for accept in [
        "*/*",
        "application/*, text/*",
        "application/json, text/*",
        "*/*;q=0.8",
    ] {
        let (status, body) = http1(&addr, &post("/mcp", accept), ping).await;
        assert!(status.contains(" 200 "), "{accept}: {status} {body}");
        // (The body may come chunked: look for the reply in it.)
        assert!(body.contains(r#""id":1,"result":{}"#), "{accept}: {body}");
    }
    for accept in ["application/*", "text/*", "application/json"] {
        let (status, _) = http1(&addr, &post("/mcp", accept), ping).await;
        assert!(status.contains(" 406 "), "{accept}: {status}");
    }
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(200)
    );
    let (status, _) = http1(&addr, &post("/mcp", "*/*"), &big).await;
    assert!(status.contains(" 413 "), "{status}");
    let (status, _) = http1(&addr, &post("/other", "*/*"), ping).await;
    assert!(status.contains(" 404 "), "{status}");
    stop.send(()).unwrap();
    served.await.unwrap().unwrap();
}

// "An `Observer` sees every call (method, id, error code, time)", with
// `CallRecord`'s documented fields: `method` `None` for an invalid entry
// or an unreadable message, `id` `None` for a notification, `code` `None`
// for a result and for notifications, `known` false for unknown names.
#[test]
fn the_observer_sees_every_call() {
    use rpcwire::dispatch::{CallRecord, Observer};
    use std::sync::Mutex;
    type Seen = (Option<String>, Option<String>, Option<i32>, bool);
    #[derive(Default)]
    struct Log(Mutex<Vec<Seen>>);
    impl Observer for Log {
        fn on_call(&self, c: &CallRecord<'_>) {
            let id =
                c.id.map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned());
            self.0
                .lock()
                .unwrap()
                .push((c.method.map(str::to_owned), id, c.code, c.known));
        }
    }
    let log = Arc::new(Log::default());
    let d = Dispatcher::builder(())
        .observer(log.clone())
        .method("ok", |_: Call<'_, ()>| Ok::<_, RpcError>(1))
        .method("bad", |_: Call<'_, ()>| {
            Err::<u8, _>(RpcError::new(-32010, "no"))
        })
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(b"{nope", &mut conn, &mut out);
    d.handle(
        br#"[{"jsonrpc":"2.0","id":1,"method":"ok"},{"jsonrpc":"2.0","id":2,"method":"bad"},{"jsonrpc":"2.0","id":3,"method":"nope"},{"jsonrpc":"2.0","method":"ok"},{"jsonrpc":"1.0","id":4,"method":"ok"}]"#,
        &mut conn,
        &mut out,
    );
    let seen = log.0.lock().unwrap().clone();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        seen,
        vec![
            (None, None, Some(-32700), false),
            (s("ok"), s("1"), None, true),
            (s("bad"), s("2"), Some(-32010), true),
            (s("nope"), s("3"), Some(-32601), false),
            (s("ok"), None, None, true),
            (None, s("4"), Some(-32600), false),
        ]
    );
}

// `Tool::output_schema`: "A result whose structured content breaks it is
// answered with -32603 ..., and a result without structured content (other
// than an error) likewise"; a tool error stays a result with `isError`.
#[tokio::test]
async fn an_output_schema_needs_structured_content_except_for_errors() {
    use rpcwire::mcp::{McpServer, Tool, ToolError, ToolOutput};
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let s = McpServer::builder("t", "1")
        .tool(
            Tool::new("text-only", json!({"type": "object"}), |_, _| async {
                Ok(ToolOutput::text("no structure"))
            })
            .output_schema(schema.clone()),
        )
        .tool(
            Tool::new("fine", json!({"type": "object"}), |_, _| async {
                Ok(ToolOutput::structured(json!({"n": 1})))
            })
            .output_schema(schema.clone()),
        )
        .tool(
            Tool::new("fails", json!({"type": "object"}), |_, _| async {
                Err(ToolError::new("broken"))
            })
            .output_schema(schema),
        )
        .build()
        .unwrap();
    let mut conn = s.connection("memory");
    let mut call = async |tool: &str| {
        let msg = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let mut out = Vec::new();
        s.handle(&bytes::Bytes::from(msg.into_bytes()), &mut conn, &mut out)
            .await;
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let r = call("text-only").await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let r = call("fine").await;
    assert_eq!(r["result"]["structuredContent"], json!({"n": 1}), "{r}");
    let r = call("fails").await;
    assert_eq!(r["result"]["isError"], true, "{r}");
}
