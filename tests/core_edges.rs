//! Edges of the core found by an adversarial review (envelope, params,
//! dispatch), each with the input that showed it and the behaviour the
//! design notes, the README or the doc comments promise.
//!
//! Heap memory is measured process-wide by a counting allocator, so the
//! tests take a lock and run one at a time.

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use std::sync::Mutex;

use counting_alloc::CountingAlloc;
use rpcwire::{Call, Connection, Dispatcher, Parser, RpcError};
use serde_json::Value;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

static SERIAL: Mutex<()> = Mutex::new(());

#[cfg(feature = "async")]
const MIB: usize = 1 << 20;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `Connection::max_retained` promises that one large message cannot pin
/// memory for the life of the connection. An async batch whose replies
/// finish out of order (8 MiB of reply) left its two assembly buffers
/// (16 MiB) in the connection's engine, for good.
#[cfg(feature = "async")]
#[test]
fn an_async_batch_does_not_pin_its_reply_buffers() {
    use rpcwire::dispatch::AsyncCall;
    use std::time::Duration;
    let _serial = serial();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(async {
            let d = Dispatcher::builder(())
                .async_method("big", |c: AsyncCall<()>| async move {
                    let (ms,): (u64,) = c.decode()?;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, RpcError>("z".repeat(4 * MIB))
                })
                .build()
                .unwrap();
            let mut conn = Connection::new();
            // The second entry finishes first: its reply waits its turn.
            let input = bytes::Bytes::from_static(
                br#"[{"jsonrpc":"2.0","id":1,"method":"big","params":[20]},{"jsonrpc":"2.0","id":2,"method":"big","params":[1]}]"#,
            );
            let before = counting_alloc::live();
            {
                // A transport's buffer with a frame header already in it.
                let mut out = b"HEADER".to_vec();
                d.handle_async(&input, &mut conn, &mut out).await;
                let r: Value = serde_json::from_slice(&out[6..]).unwrap();
                assert_eq!(r.as_array().unwrap().len(), 2);
            }
            let kept = counting_alloc::live().saturating_sub(before);
            assert!(
                kept <= 2 * Connection::DEFAULT_MAX_RETAINED,
                "the connection keeps {} KiB after the batch",
                kept / 1024
            );
        });
}

/// `max_response_len` is "the largest reply written". A single request
/// whose id is within the id limit but whose too-large reply alone is past
/// the response limit was answered past the limit (its own error with
/// `data`, or the too-large error echoing the long id); a batch in the
/// same position is answered with one too-large error, `id: null`, and
/// fits.
#[test]
fn a_single_reply_never_passes_the_response_limit() {
    let _serial = serial();
    let limit = 200;
    let d = Dispatcher::builder(())
        .max_response_len(limit)
        .method("e", |_c: Call<'_, ()>| {
            Err::<(), _>(RpcError::new(-32001, "e").with_data(&"d".repeat(16)))
        })
        .method("big", |_c: Call<'_, ()>| Ok::<_, RpcError>("y".repeat(500)))
        .build()
        .unwrap();
    let id = format!("\"{}\"", "k".repeat(180));
    for (method, jsonrpc) in [
        ("e", "2.0"),
        ("big", "2.0"),
        ("big", "1.0"),
        ("nope", "2.0"),
    ] {
        let single = format!(r#"{{"jsonrpc":"{jsonrpc}","id":{id},"method":"{method}"}}"#);
        for msg in [single.clone(), format!("[{single}]")] {
            let mut out = Vec::new();
            d.handle(msg.as_bytes(), &mut Connection::new(), &mut out);
            assert!(
                out.len() <= limit,
                "{} bytes for {msg}: {}",
                out.len(),
                String::from_utf8_lossy(&out)
            );
            let r: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(r["error"]["code"], -32000, "{msg}");
            assert_eq!(r["id"], Value::Null, "{msg}");
        }
    }
    // Through the async path too.
    #[cfg(feature = "async")]
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let msg = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"e"}}"#);
            let mut out = Vec::new();
            d.handle_async(&bytes::Bytes::from(msg), &mut Connection::new(), &mut out)
                .await;
            assert!(out.len() <= limit, "{} bytes", out.len());
        });
}

/// A problem with `result` does not make a request invalid (the envelope's
/// own rule, `Side`), and members a request does not have are ignored
/// (DESIGN.md: "unknown members: ignored"), as `parse` ignores them. On the
/// dispatcher's two-way reading, a request with `result` (or `error`)
/// written twice was answered -32600 with `id: null` while `parse` read the
/// same bytes as a valid request; a response with `params` written twice
/// was invalid (so never matched to its pending request) while
/// `parse_response` read it as a valid response.
#[test]
fn a_member_of_the_other_side_written_twice_is_ignored() {
    use rpcwire::message::{Incoming, Message};
    use rpcwire::response::ResponseMessage;
    let _serial = serial();
    let parser = Parser::new();
    for request in [
        &br#"{"jsonrpc":"2.0","id":1,"method":"m","result":1,"result":2}"#[..],
        br#"{"jsonrpc":"2.0","id":1,"method":"m","error":1,"error":2}"#,
        br#"{"x":0,"jsonrpc":"2.0","id":1,"method":"m","result":1,"result":2}"#,
    ] {
        let arena = bumpalo::Bump::new();
        let parsed = parser.parse(request, &arena).unwrap();
        assert!(parsed.into_single().unwrap().request().is_some());
        let Message::Single(Incoming::Request(r)) = parser.parse_incoming(request, &arena).unwrap()
        else {
            panic!(
                "{}: not read as a request",
                String::from_utf8_lossy(request)
            );
        };
        assert_eq!((r.method(), r.id().unwrap().as_bytes()), ("m", &b"1"[..]));
        let d = Dispatcher::builder(())
            .method("m", |c: Call<'_, ()>| c.reply.u64(7))
            .build()
            .unwrap();
        let mut out = Vec::new();
        d.handle(request, &mut Connection::new(), &mut out);
        assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":7}"#);
    }
    let response = br#"{"jsonrpc":"2.0","id":1,"result":"0x1","params":[],"params":[]}"#;
    let arena = bumpalo::Bump::new();
    assert!(matches!(
        parser.parse_response(response, &arena),
        Ok(ResponseMessage::Single(_))
    ));
    assert!(matches!(
        parser.parse_incoming(response, &arena),
        Ok(Message::Single(Incoming::Response(r))) if r.id().as_bytes() == b"1"
    ));
    // Repeated members of the object's own side stay invalid: a request's
    // with id null, a response's with its id (the request it answers ends,
    // rather than waiting for an answer that will not come).
    for (input, request) in [
        (
            &br#"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#[..],
            true,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[],"params":[1]}"#,
            true,
        ),
        (br#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#, false),
        (
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"},"error":{"code":2,"message":"y"}}"#,
            false,
        ),
    ] {
        match parser.parse_incoming(input, &arena).unwrap() {
            Message::Single(Incoming::Invalid(i)) if request => assert!(i.id().is_null()),
            Message::Single(Incoming::InvalidResponse(r)) if !request => {
                assert_eq!(r.id().map(|id| id.as_bytes()), Some(&b"1"[..]))
            }
            other => panic!("{}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
    // A repeated id still voids it: which request it answers is unknown.
    match parser
        .parse_incoming(br#"{"jsonrpc":"2.0","id":1,"id":2,"result":1}"#, &arena)
        .unwrap()
    {
        Message::Single(Incoming::InvalidResponse(r)) => assert!(r.id().is_none()),
        other => panic!("{other:?}"),
    }
}

/// `quiet_panics(true)` promises the panic hook is skipped "for panics
/// inside this dispatcher's handlers". An async handler that panics before
/// returning its future (work before the first `.await`, e.g. a failed
/// `unwrap` on the state) still reached the hook, printing a backtrace per
/// entry under `RUST_BACKTRACE=1` (the 1000-entry batch cost of issue 7).
/// (The only test here that sets a hook or builds a quiet dispatcher.)
#[cfg(feature = "async")]
#[test]
fn quiet_panics_cover_the_synchronous_part_of_async_handlers() {
    use rpcwire::dispatch::AsyncCall;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);
    let _serial = serial();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    let d = Dispatcher::builder(())
        .quiet_panics(true)
        .async_method(
            "boom",
            |_c: AsyncCall<()>| -> std::future::Ready<Result<(), RpcError>> {
                panic!("before the future")
            },
        )
        .build()
        .unwrap();
    let entry = r#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#;
    let batch = format!("[{}]", [entry; 10].join(","));
    let mut out = Vec::new();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(d.handle_async(&bytes::Bytes::from(batch), &mut Connection::new(), &mut out));
    let calls = HOOK_CALLS.load(Ordering::SeqCst);
    // A quiet dispatcher's handler that runs another quiet dispatcher and
    // then panics: the inner run cleared the thread's flag on its way
    // out, so the outer handler's panic reached the hook (the flag is now
    // restored, not cleared). Found by a review.
    let inner = Dispatcher::builder(())
        .quiet_panics(true)
        .method("ok", |c: Call<'_, ()>| c.reply.u64(1))
        .build()
        .unwrap();
    let outer = Dispatcher::builder(())
        .quiet_panics(true)
        .method(
            "nested",
            move |_c: Call<'_, ()>| -> Result<rpcwire::dispatch::Done, RpcError> {
                let mut out = Vec::new();
                let ok = br#"{"jsonrpc":"2.0","id":1,"method":"ok"}"#;
                inner.handle(ok, &mut Connection::new(), &mut out);
                assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":1}"#);
                panic!("after the inner dispatcher")
            },
        )
        .build()
        .unwrap();
    let mut nested = Vec::new();
    outer.handle(
        br#"{"jsonrpc":"2.0","id":2,"method":"nested"}"#,
        &mut Connection::new(),
        &mut nested,
    );
    let nested_calls = HOOK_CALLS.load(Ordering::SeqCst) - calls;
    // The hook installed by the quiet dispatcher wraps ours: put the
    // previous one back, so that a failure below is reported.
    std::panic::set_hook(previous);
    let v: Value = serde_json::from_slice(&nested).unwrap();
    assert_eq!(
        v["error"]["data"]["panic"], "after the inner dispatcher",
        "{v}"
    );
    assert_eq!(
        nested_calls, 0,
        "a nested quiet dispatcher unquieted its caller"
    );
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert!(
        r.as_array()
            .unwrap()
            .iter()
            .all(|e| e["error"]["code"] == -32603
                && e["error"]["data"]["panic"] == "before the future"),
        "{r}"
    );
    assert_eq!(calls, 0, "the panic hook ran for caught handler panics");
}

/// `DispatcherBuilder::timeout`: "Deadlines need a tokio runtime with its
/// time driver; outside one they are not enforced." Inside a runtime built
/// without `enable_time` (`Builder::new_current_thread().build()`), the
/// first async call with the default 30 s timeout panicked in the engine
/// ("timers are disabled"), killing the caller's task instead of running
/// the call without a deadline.
#[cfg(feature = "async")]
#[test]
fn async_calls_run_in_a_runtime_without_timers() {
    use rpcwire::dispatch::AsyncCall;
    let _serial = serial();
    let d = Dispatcher::builder(())
        .async_method("m", |_c: AsyncCall<()>| async {
            tokio::task::yield_now().await;
            Ok::<_, RpcError>(1)
        })
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut conn = Connection::new();
    for input in [
        &br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#[..],
        br#"[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"}]"#,
    ] {
        let mut out = Vec::new();
        let input = bytes::Bytes::copy_from_slice(input);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(d.handle_async(&input, &mut conn, &mut out))
        }));
        assert!(run.is_ok(), "handle_async panicked");
        let r: Value = serde_json::from_slice(&out).unwrap();
        let results: Vec<&Value> = match &r {
            Value::Array(a) => a.iter().map(|e| &e["result"]).collect(),
            single => vec![&single["result"]],
        };
        assert!(results.iter().all(|v| **v == 1), "{r}");
    }
}

/// A handler that writes through `call.reply`, drops the `Done` and then
/// returns a value used to put two results into one reply (invalid JSON
/// for every reply after it in a batch): the returned value is the answer.
#[test]
fn a_value_returned_after_a_dropped_reply_is_the_only_result() {
    let _serial = serial();
    let d = Dispatcher::builder(())
        .method("both", |call: Call<'_, ()>| {
            let _ = call.reply.str("written first");
            Ok::<_, RpcError>("returned")
        })
        .method("written", |call: Call<'_, ()>| call.reply.str("kept"))
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(
        br#"[{"jsonrpc":"2.0","id":1,"method":"both"},{"jsonrpc":"2.0","id":2,"method":"written"},{"jsonrpc":"2.0","id":3,"method":"both"}]"#,
        &mut conn,
        &mut out,
    );
    let replies: Value = serde_json::from_slice(&out).expect("the batch reply is JSON");
    assert_eq!(
        replies,
        serde_json::json!([
            {"jsonrpc": "2.0", "id": 1, "result": "returned"},
            {"jsonrpc": "2.0", "id": 2, "result": "kept"},
            {"jsonrpc": "2.0", "id": 3, "result": "returned"},
        ])
    );
    // A write through a `BytesMut` (the transports' buffer) is taken back
    // the same way.
    let mut framed = rpcwire::bytes::BytesMut::new();
    d.handle(
        br#"{"jsonrpc":"2.0","id":4,"method":"both"}"#,
        &mut conn,
        &mut framed,
    );
    assert_eq!(
        &framed[..],
        br#"{"jsonrpc":"2.0","id":4,"result":"returned"}"#
    );
}

/// `Call::decode` promises "Absent params decode as `[]`, so `()`,
/// `Vec<_>` and all-optional tuples accept a call without params". Only
/// `Vec<_>` did: `()` refused `[]` ("invalid type: sequence, expected
/// unit", also for ethers' `"params":[]`) and `(Option<T>,)` refused it
/// ("invalid length 0"). A tuple's missing trailing values now read as
/// `null` (geth's optional arguments), in every decode of params.
#[test]
fn absent_params_decode_into_unit_and_optional_tuples() {
    let _serial = serial();
    let d = Dispatcher::builder(())
        .method("unit", |c: Call<'_, ()>| {
            let () = c.decode()?;
            Ok::<_, RpcError>("none")
        })
        .method("opt", |c: Call<'_, ()>| {
            let (a,): (Option<u64>,) = c.decode()?;
            Ok::<_, RpcError>(a)
        })
        .method("trailing", |c: Call<'_, ()>| {
            let (a, b): (&str, Option<&str>) = c.decode()?;
            Ok::<_, RpcError>(format!("{a}/{}", b.unwrap_or("latest")))
        })
        .method("two", |c: Call<'_, ()>| {
            let (a, b): (u64, u64) = c.decode()?;
            Ok::<_, RpcError>(a + b)
        })
        .method("view", |c: Call<'_, ()>| {
            let (a,): (Option<u64>,) = c.params.unwrap().decode()?;
            Ok::<_, RpcError>(a)
        })
        .build()
        .unwrap();
    let reply = |method: &str, params: &str| -> Value {
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"{params}}}"#);
        let mut out = Vec::new();
        d.handle(msg.as_bytes(), &mut Connection::new(), &mut out);
        serde_json::from_slice(&out).unwrap()
    };
    for params in [
        "",
        r#","params":[]"#,
        r#","params":null"#,
        r#","params":[ ]"#,
    ] {
        assert_eq!(reply("unit", params)["result"], "none", "{params}");
        assert_eq!(reply("opt", params)["result"], Value::Null, "{params}");
    }
    // `{}` is "no params" too (clients that send params by name send it;
    // it was "invalid type: map, expected no params"); a non-empty object
    // is not.
    for params in [r#","params":{}"#, r#","params":{ }"#] {
        assert_eq!(reply("unit", params)["result"], "none", "{params}");
    }
    let r = reply("unit", r#","params":{"a":1}"#);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(
        r["error"]["data"]["reason"],
        "invalid length 1, expected no params"
    );
    assert_eq!(reply("opt", r#","params":[7]"#)["result"], 7);
    assert_eq!(reply("view", r#","params":[]"#)["result"], Value::Null);
    assert_eq!(
        reply("trailing", r#","params":["0xab"]"#)["result"],
        "0xab/latest"
    );
    assert_eq!(
        reply("trailing", r#","params":["0xab","safe"]"#)["result"],
        "0xab/safe"
    );
    // What is refused stays refused, with serde's words and the offset.
    let r = reply("unit", r#","params":[1,2]"#);
    assert_eq!(r["error"]["code"], -32602);
    let r = reply("two", r#","params":[1]"#);
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["data"]["reason"],
        "invalid length 1, expected a tuple of size 2"
    );
    assert_eq!(r["error"]["data"]["offset"], 50);
    let r = reply("trailing", "");
    assert_eq!(
        r["error"]["data"]["reason"],
        "invalid length 0, expected a tuple of size 2"
    );
    // Async handlers decode the same way.
    #[cfg(feature = "async")]
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            use rpcwire::dispatch::AsyncCall;
            let d = Dispatcher::builder(())
                .async_method("opt", |c: AsyncCall<()>| async move {
                    let (a, b): (u64, Option<u64>) = c.decode()?;
                    Ok::<_, RpcError>(a + b.unwrap_or(0))
                })
                .async_method("unit", |c: AsyncCall<()>| async move {
                    let () = c.decode()?;
                    Ok::<_, RpcError>(0)
                })
                .build()
                .unwrap();
            for (msg, want) in [
                (r#"{"jsonrpc":"2.0","id":1,"method":"opt","params":[5]}"#, 5),
                (
                    r#"{"jsonrpc":"2.0","id":1,"method":"opt","params":[5,1]}"#,
                    6,
                ),
                (r#"{"jsonrpc":"2.0","id":1,"method":"unit"}"#, 0),
                (r#"{"jsonrpc":"2.0","id":1,"method":"unit","params":[]}"#, 0),
            ] {
                let mut out = Vec::new();
                d.handle_async(&bytes::Bytes::from(msg), &mut Connection::new(), &mut out)
                    .await;
                let r: Value = serde_json::from_slice(&out).unwrap();
                assert_eq!(r["result"], want, "{msg}");
            }
        });
}

/// A `Done` is `'static`: one kept from another call (here a
/// notification's) and returned by a handler that wrote nothing made the
/// reply `"result":}`, no JSON. Such a handler is answered -32603 now.
/// Found by a review.
#[test]
fn a_done_returned_without_writing_is_an_internal_error() {
    use rpcwire::dispatch::Done;
    static KEPT: Mutex<Option<Done>> = Mutex::new(None);
    let _serial = serial();
    let d = Dispatcher::builder(())
        .method("keep", |c: Call<'_, ()>| {
            *KEPT.lock().unwrap() = Some(c.reply.null()?);
            Ok::<_, RpcError>(0)
        })
        .method("reuse", |_c: Call<'_, ()>| {
            KEPT.lock()
                .unwrap()
                .take()
                .ok_or_else(|| RpcError::internal("none kept"))
        })
        .build()
        .unwrap();
    let (mut conn, mut out) = (Connection::new(), Vec::new());
    d.handle(br#"{"jsonrpc":"2.0","method":"keep"}"#, &mut conn, &mut out);
    assert!(out.is_empty());
    d.handle(
        br#"{"jsonrpc":"2.0","id":1,"method":"reuse"}"#,
        &mut conn,
        &mut out,
    );
    let reply: Value = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    assert_eq!(
        (&reply["id"], &reply["error"]["code"]),
        (&serde_json::json!(1), &serde_json::json!(-32603)),
        "{reply}"
    );
}
