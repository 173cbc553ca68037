//! Async handlers: the same dispatch path as sync ones. Batch entries run
//! concurrently under the cap (work before the first `.await` included),
//! finished calls free their slot at once, replies come in request order,
//! params are handed over without copying, panics and timeouts stay with
//! their entry, cancellation by id, pipelined messages on one connection.
#![cfg(feature = "async")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::{Call, Connection, Dispatcher, RpcError};
use serde_json::{Value, json};

#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
    /// Calls whose handler was called (before any await).
    created: AtomicUsize,
    /// Short sleeps finished.
    short_done: AtomicUsize,
    /// `short_done` when the long sleep finished.
    short_done_when_long_finished: AtomicUsize,
    /// Where the last call's params pointed, to check they were not copied.
    params_at: AtomicUsize,
}

fn dispatcher(cap: usize) -> Dispatcher<Gauge, WithAsync> {
    Dispatcher::builder(Gauge::default())
        .max_in_flight(cap)
        .async_method("sleep", |call: AsyncCall<Gauge>| {
            // Work before the first await: counted against the cap too.
            let now = call.state.now.fetch_add(1, Ordering::SeqCst) + 1;
            call.state.peak.fetch_max(now, Ordering::SeqCst);
            call.state.created.fetch_add(1, Ordering::SeqCst);
            async move {
                let (ms,): (u64,) = call.decode()?;
                if let Some(p) = &call.params {
                    call.state
                        .params_at
                        .store(p.as_bytes().as_ptr() as usize, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
                call.state.now.fetch_sub(1, Ordering::SeqCst);
                if ms >= 500 {
                    let done = call.state.short_done.load(Ordering::SeqCst);
                    call.state
                        .short_done_when_long_finished
                        .store(done, Ordering::SeqCst);
                } else {
                    call.state.short_done.fetch_add(1, Ordering::SeqCst);
                }
                Ok::<_, RpcError>(ms)
            }
        })
        .async_method("boom", |_call: AsyncCall<Gauge>| async move {
            tokio::task::yield_now().await;
            if true {
                panic!("upstream vanished");
            }
            Ok::<u64, RpcError>(0)
        })
        .async_method("fail", |_call: AsyncCall<Gauge>| async move {
            Err::<(), _>(
                RpcError::new(-32000, "header not found").with_data(&json!({"block": "0xffff"})),
            )
        })
        .async_method("echo_method", |call: AsyncCall<Gauge>| async move {
            Ok::<_, RpcError>(call.method().to_string())
        })
        .async_method("forever", |_call: AsyncCall<Gauge>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .async_method("huge", |_call: AsyncCall<Gauge>| async move {
            Ok::<_, RpcError>("x".repeat(2 << 20))
        })
        .async_method("greet", |call: AsyncCall<Gauge>| async move {
            #[derive(serde::Deserialize)]
            struct Args<'a> {
                #[serde(borrow)]
                name: &'a str,
            }
            // Borrowed decoding inside an async handler: an arena the
            // future owns, strings with escapes lent from it.
            let arena = bumpalo::Bump::new();
            let args: Args<'_> = call.decode_in(&arena)?;
            Ok::<_, RpcError>(format!("hello, {}", args.name))
        })
        .method("sync_add", |call: Call<'_, Gauge>| {
            let (a, b): (u64, u64) = call.decode()?;
            call.reply.u64(a + b)
        })
        .max_response_len(1 << 20)
        .build()
        .unwrap()
}

async fn run(d: &Dispatcher<Gauge, WithAsync>, input: &'static str) -> Option<Value> {
    let mut out = Vec::new();
    let mut conn = Connection::new();
    let wrote = d
        .handle_async(&Bytes::from_static(input.as_bytes()), &mut conn, &mut out)
        .await;
    assert_eq!(wrote, !out.is_empty());
    (!out.is_empty()).then(|| serde_json::from_slice(&out).unwrap())
}

#[tokio::test(start_paused = true)]
async fn batch_entries_run_concurrently_under_the_cap_and_reply_in_order() {
    let d = dispatcher(3);
    // Later entries finish first; the reply keeps request order.
    let input = r#"[{"jsonrpc":"2.0","id":1,"method":"sleep","params":[120]},
                    {"jsonrpc":"2.0","id":2,"method":"sleep","params":[90]},
                    {"jsonrpc":"2.0","id":3,"method":"sync_add","params":[1,2]},
                    {"jsonrpc":"2.0","id":4,"method":"sleep","params":[60]},
                    {"jsonrpc":"2.0","id":5,"method":"sleep","params":[30]},
                    {"jsonrpc":"2.0","id":6,"method":"sleep","params":[10]},
                    {"jsonrpc":"2.0","method":"sleep","params":[5]},
                    {"jsonrpc":"2.0","id":7,"method":"sleep","params":[1]}]"#;
    let r = run(&d, input).await.unwrap();
    let ids: Vec<i64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(r[0]["result"], 120);
    assert_eq!(r[2]["result"], 3);
    let peak = d.state().peak.load(Ordering::SeqCst);
    assert!(peak > 1, "entries overlapped (peak {peak})");
    // The handler closure itself (before its first await) ran under the cap.
    assert!(peak <= 3, "never more than the cap in flight (peak {peak})");
    assert_eq!(d.state().created.load(Ordering::SeqCst), 7);
}

#[tokio::test(start_paused = true)]
async fn a_slow_entry_holds_one_slot_not_the_batch() {
    // Cap 4: entry 0 sleeps 500 ms, 99 entries 10 ms each. Finished calls
    // free their slot at once, so the 99 short ones all finish (through the
    // three other slots) before the long one does.
    let d = dispatcher(4);
    let mut input = String::from(r#"[{"jsonrpc":"2.0","id":0,"method":"sleep","params":[500]}"#);
    for i in 1..100 {
        input.push_str(&format!(
            r#",{{"jsonrpc":"2.0","id":{i},"method":"sleep","params":[10]}}"#
        ));
    }
    input.push(']');
    let mut out = Vec::new();
    d.handle_async(&Bytes::from(input), &mut Connection::new(), &mut out)
        .await;
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(r.as_array().unwrap().len(), 100);
    assert_eq!(
        d.state()
            .short_done_when_long_finished
            .load(Ordering::SeqCst),
        99
    );
    assert!(d.state().peak.load(Ordering::SeqCst) <= 4);
}

#[tokio::test]
async fn params_are_slices_of_the_input_not_copies() {
    let d = dispatcher(4);
    let input: &'static str = r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":[1]}"#;
    run(&d, input).await.unwrap();
    let at = d.state().params_at.load(Ordering::Relaxed);
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    assert!(range.contains(&at), "params point into the message");
}

/// `panic_messages(false)`: a panicking handler's -32603 carries no
/// message, whether it panics while making its future, while it is
/// polled, or in a sync handler run by the async path.
#[tokio::test]
async fn panic_messages_can_be_kept_from_clients() {
    let d = Dispatcher::builder(())
        .panic_messages(false)
        .quiet_panics(true)
        .async_method(
            "before",
            |_: AsyncCall<()>| -> std::future::Ready<Result<u8, RpcError>> { panic!("secret 1") },
        )
        .async_method("during", |_: AsyncCall<()>| async move {
            if true {
                panic!("secret 2");
            }
            Ok::<u8, RpcError>(1)
        })
        .method("sync", |_: Call<'_, ()>| -> Result<u8, RpcError> {
            panic!("secret 3")
        })
        .build()
        .unwrap();
    let input = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"before"},{"jsonrpc":"2.0","id":2,"method":"during"},{"jsonrpc":"2.0","id":3,"method":"sync"}]"#,
    );
    let mut out = Vec::new();
    d.handle_async(&input, &mut Connection::new(), &mut out)
        .await;
    let bare = json!({"code": -32603, "message": "Internal error"});
    let r: Value = serde_json::from_slice(&out).unwrap();
    for entry in r.as_array().unwrap() {
        assert_eq!(entry["error"], bare, "{r}");
    }
    assert!(!String::from_utf8_lossy(&out).contains("secret"));
}

#[tokio::test]
async fn panics_and_errors_stay_with_their_entry() {
    let d = dispatcher(4);
    let r = run(
        &d,
        r#"[{"jsonrpc":"2.0","id":"a","method":"boom"},{"jsonrpc":"2.0","id":"b","method":"fail"},
            {"jsonrpc":"2.0","id":"c","method":"e\u0063ho_method"},{"jsonrpc":"2.0","id":"d","method":"missing"},
            {"jsonrpc":"2.0","id":"e","method":"sleep","params":["x"]}]"#,
    )
    .await
    .unwrap();
    assert_eq!(
        r[0]["error"],
        json!({"code": -32603, "message": "Internal error", "data": {"panic": "upstream vanished"}})
    );
    assert_eq!(
        r[1]["error"],
        json!({"code": -32000, "message": "header not found", "data": {"block": "0xffff"}})
    );
    assert_eq!(r[2]["result"], "echo_method");
    assert_eq!(r[3]["error"]["code"], -32601);
    assert_eq!(r[4]["error"]["code"], -32602);
    // Whole-message errors and all-notification batches, as in sync dispatch.
    assert_eq!(run(&d, "[]").await.unwrap()["error"]["code"], -32600);
    assert_eq!(run(&d, "{").await.unwrap()["error"]["code"], -32700);
    assert_eq!(
        run(&d, r#"[{"jsonrpc":"2.0","method":"sleep","params":[1]}]"#).await,
        None
    );
}

/// Entries whose id cannot be read (not an object, an id of the wrong
/// type, a response-like object) next to async calls: each gets -32600 with
/// `id: null` in its place. (Their `null` id is not part of the input; the
/// engine once computed its place in the input from it, and panicked.)
#[tokio::test]
async fn invalid_entries_without_ids_beside_async_calls() {
    let d = dispatcher(4);
    for invalid in [
        "1",
        r#"{"jsonrpc":"2.0","id":{},"method":"sleep"}"#,
        r#"{"jsonrpc":"2.0","id":2}"#,
        r#"{"jsonrpc":"1.0","id":3,"method":"sleep"}"#,
    ] {
        let input = format!(
            r#"[{{"jsonrpc":"2.0","id":1,"method":"sleep","params":[1]}},{invalid},{{"jsonrpc":"2.0","id":9,"method":"sleep","params":[2]}}]"#
        );
        let mut out = Vec::new();
        let mut conn = Connection::new();
        d.handle_async(&Bytes::from(input), &mut conn, &mut out)
            .await;
        let text = String::from_utf8_lossy(&out);
        let r: Value =
            serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{invalid}: {e}: {text}"));
        assert_eq!(
            r[0],
            json!({"jsonrpc": "2.0", "id": 1, "result": 1}),
            "{invalid}"
        );
        assert_eq!(r[1]["error"]["code"], -32600, "{invalid}");
        assert_eq!(r[2]["result"], 2, "{invalid}");
        assert_eq!(r.as_array().unwrap().len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_finishes_times_out_alone() {
    let d = Dispatcher::builder(Gauge::default())
        .timeout(Some(Duration::from_secs(30)))
        .async_method("forever", |_c: AsyncCall<Gauge>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .method("ok", |c: Call<'_, Gauge>| c.reply.bool(true))
        .build()
        .unwrap();
    let mut out = Vec::new();
    let mut conn = Connection::new();
    // A never-finishing entry and a never-finishing notification: the batch
    // is answered at the deadline; the notification holds nothing back.
    let input = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"forever"},{"jsonrpc":"2.0","method":"forever"},{"jsonrpc":"2.0","id":2,"method":"ok"}]"#,
    );
    let started = tokio::time::Instant::now();
    d.handle_async(&input, &mut conn, &mut out).await;
    let waited = started.elapsed();
    assert!(
        (Duration::from_secs(30)..Duration::from_secs(31)).contains(&waited),
        "{waited:?}"
    );
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        r,
        json!([
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "Request timed out", "data": {"timeout_ms": 30000}}},
            {"jsonrpc": "2.0", "id": 2, "result": true}
        ])
    );
    // A single request times out the same way, with its id.
    out.clear();
    let single = Bytes::from_static(br#"{"jsonrpc":"2.0","id":"z","method":"forever"}"#);
    d.handle_async(&single, &mut conn, &mut out).await;
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (r["id"].as_str(), r["error"]["code"].as_i64()),
        (Some("z"), Some(-32000))
    );
}

#[tokio::test]
async fn an_oversized_async_reply_keeps_its_id() {
    let d = dispatcher(4);
    let r = run(&d, r#"{"jsonrpc":"2.0","id":"big-one","method":"huge"}"#)
        .await
        .unwrap();
    assert_eq!(r["id"], "big-one");
    assert_eq!(r["error"]["code"], -32000);
    assert_eq!(r["error"]["data"]["limit"], 1 << 20);
}

#[tokio::test]
async fn borrowed_decoding_inside_async_handlers() {
    let d = dispatcher(4);
    let r = run(
        &d,
        r#"{"jsonrpc":"2.0","id":1,"method":"greet","params":{"name":"Ad\u00e8le"}}"#,
    )
    .await
    .unwrap();
    assert_eq!(r["result"], "hello, Adèle");
}

/// Decoding errors in async handlers point into the message, as
/// `Call::decode`'s do: `AsyncCall::decode` and `AsyncCall::decode_in`
/// give the `data` (reason and offset) a sync handler decoding the same
/// types gives, in a batch too, and the same error for absent params.
#[tokio::test]
async fn async_params_errors_point_into_the_message() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Args<'a> {
        #[serde(borrow)]
        name: &'a str,
    }
    let sync = Dispatcher::builder(())
        .method("sleep", |c: Call<'_, ()>| {
            let (ms,): (u64,) = c.decode()?;
            Ok::<_, RpcError>(ms)
        })
        .method("greet", |c: Call<'_, ()>| {
            let args: Args<'_> = c.decode()?;
            Ok::<_, RpcError>(args.name.to_owned())
        })
        .build()
        .unwrap();
    // The last entry has no params: `AsyncCall::decode_in` reads them as
    // `Call::decode` does (a handler once had to make up an error of its
    // own for them).
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"sleep","params":["x"]},
        {"jsonrpc":"2.0","id":2,"method":"greet","params":{"name":7}},
        {"jsonrpc":"2.0","id":3,"method":"greet"}]"#;
    let mut out = Vec::new();
    sync.handle(batch.as_bytes(), &mut Connection::new(), &mut out);
    let expected: Value = serde_json::from_slice(&out).unwrap();
    let r = run(&dispatcher(4), batch).await.unwrap();
    for (reply, expected) in r
        .as_array()
        .unwrap()
        .iter()
        .zip(expected.as_array().unwrap())
    {
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert_eq!(reply["error"]["data"], expected["error"]["data"]);
        if reply["id"] == 3 {
            continue;
        }
        let at = reply["error"]["data"]["offset"]
            .as_u64()
            .expect("an offset") as usize;
        assert!(at > batch.find("params").unwrap(), "{reply}");
    }
}

#[tokio::test]
async fn handle_async_is_send_and_runs_on_spawned_tasks() {
    let d = dispatcher(2);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let d = d.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                let msg =
                    format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"sync_add","params":[{i},1]}}"#);
                d.handle_async(&Bytes::from(msg), &mut Connection::new(), &mut out)
                    .await;
                serde_json::from_slice::<Value>(&out).unwrap()["result"]
                    .as_u64()
                    .unwrap()
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), i as u64 + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn pipelined_messages_are_answered_as_they_complete() {
    let d = dispatcher(8);
    let mut conn = Connection::new();
    let mut out = Vec::new();
    for (id, ms) in [(1, 50), (2, 10), (3, 30)] {
        let msg = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"sleep","params":[{ms}]}}"#);
        conn.start(&d, &Bytes::from(msg), &mut out);
    }
    // A synchronous one is answered at once, while the others run.
    conn.start(
        &d,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","id":4,"method":"sync_add","params":[2,2]}"#),
        &mut out,
    );
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":4,"result":4}"#);
    out.clear();
    let mut order = Vec::new();
    while conn.messages_in_flight() > 0 {
        let before = out.len();
        std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
        // Each reply is complete JSON on its own.
        let reply: Value = serde_json::from_slice(&out[before..]).unwrap();
        order.push(reply["id"].as_i64().unwrap());
    }
    assert_eq!(order, [2, 3, 1]);
}

#[tokio::test(start_paused = true)]
async fn cancelling_by_id() {
    let d = dispatcher(8);
    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(
        &d,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","id":"slow","method":"forever"}"#),
        &mut out,
    );
    conn.start(
        &d,
        &Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"method":"forever"},{"jsonrpc":"2.0","id":2,"method":"sync_add","params":[1,1]}]"#,
        ),
        &mut out,
    );
    assert_eq!(conn.in_flight(), 2);
    // A single request cancelled: no reply at all.
    assert!(conn.cancel(br#""slow""#));
    assert!(!conn.cancel(br#""slow""#), "cancelled once");
    assert!(!conn.cancel(b"99"), "unknown ids are ignored");
    // A batch entry cancelled: it must be answered, with -32800.
    assert!(conn.cancel(b"1"));
    std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
    assert_eq!(conn.messages_in_flight(), 0);
    assert_eq!(conn.in_flight(), 0);
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        r,
        json!([
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}},
            {"jsonrpc": "2.0", "id": 2, "result": 2}
        ])
    );
}

/// `Connection::cancel` wakes the task waiting in `poll_replies`: what the
/// cancel finished (here a batch's reply, complete once its cancelled
/// entry has its -32800) is written at the next poll. Nothing woke it:
/// a task polled only when woken wrote the reply at the cancelled call's
/// deadline, or never without one (found by a review).
#[test]
fn a_cancel_wakes_the_task_waiting_for_replies() {
    let d = Dispatcher::builder(())
        .timeout(None)
        .async_method("forever", |_call: AsyncCall<()>| {
            std::future::pending::<Result<u64, RpcError>>()
        })
        .method("one", |c: rpcwire::Call<'_, ()>| c.reply.u64(1))
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(
        &d,
        &Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"method":"forever"},{"jsonrpc":"2.0","id":2,"method":"one"}]"#,
        ),
        &mut out,
    );
    let wakes = Arc::new(Wakes::default());
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    let before = wakes.count();
    assert!(conn.cancel(b"1"));
    assert!(wakes.count() > before, "the waiting task was not woken");
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_ready());
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(r[0]["error"]["code"], -32800, "{r}");
    assert_eq!(r[1]["result"], 1, "{r}");
}

#[tokio::test]
async fn cancellation_reaches_work_the_handler_spawned() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let tx = std::sync::Mutex::new(Some(tx));
    let d = Dispatcher::builder(())
        .async_method("spawns", move |call: AsyncCall<()>| {
            let cancel = call.cancellation().clone();
            let tx = tx.lock().unwrap().take();
            tokio::spawn(async move {
                cancel.cancelled().await;
                if let Some(tx) = tx {
                    let _ = tx.send(());
                }
            });
            std::future::pending::<Result<(), RpcError>>()
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(
        &d,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","id":5,"method":"spawns"}"#),
        &mut out,
    );
    // Let the call start (it is polled, and spawns its worker).
    let _ = futures_poll_once(&mut conn, &d, &mut out).await;
    assert!(conn.cancel(b"5"));
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("the spawned work saw the cancellation")
        .unwrap();
}

async fn futures_poll_once(
    conn: &mut Connection,
    d: &Dispatcher<(), WithAsync>,
    out: &mut Vec<u8>,
) -> std::task::Poll<usize> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(conn.poll_replies(d, cx, out))).await
}

#[tokio::test]
async fn sync_dispatchers_run_through_handle_async_too() {
    let d = Dispatcher::builder(())
        .method("id", |c: Call<'_, ()>| {
            let id = c.id().unwrap();
            c.reply.raw(id.as_bytes())
        })
        .build()
        .unwrap();
    let mut out = Vec::new();
    let msg = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":7,"method":"id"},{"jsonrpc":"2.0","id":"x","method":"id"}]"#,
    );
    d.handle_async(&msg, &mut Connection::new(), &mut out).await;
    assert_eq!(
        out,
        br#"[{"jsonrpc":"2.0","id":7,"result":7},{"jsonrpc":"2.0","id":"x","result":"x"}]"#
    );
    // And the sync entry point gives the same bytes.
    let mut sync_out = Vec::new();
    d.handle(&msg, &mut Connection::new(), &mut sync_out);
    assert_eq!(out, sync_out);
}

/// A reply buffer that records where each reply ends, as a WebSocket
/// transport does to send each as a frame of its own.
#[derive(Default)]
struct Framed {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl rpcwire::dispatch::ReplyBuf for Framed {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes)
    }
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(len)
    }
    fn end_reply(&mut self) {
        self.ends.push(self.buf.len());
    }
}

impl Framed {
    /// The replies, each parsed on its own.
    fn replies(&self) -> Vec<Value> {
        let mut start = 0;
        let mut replies = Vec::new();
        for &end in &self.ends {
            replies.push(serde_json::from_slice(&self.buf[start..end]).unwrap());
            start = end;
        }
        assert_eq!(start, self.buf.len(), "bytes after the last reply end");
        replies
    }
}

#[tokio::test]
async fn pipelined_replies_are_each_marked_where_they_end() {
    let d = Dispatcher::builder(Gauge::default())
        .async_method("sleep", |call: AsyncCall<Gauge>| async move {
            let (ms,): (u64,) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(ms)
        })
        .method("now", |c: Call<'_, Gauge>| c.reply.u64(0))
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Framed::default();
    let messages: [&[u8]; 6] = [
        br#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":[30]}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"now"}"#,
        br#"[{"jsonrpc":"2.0","id":3,"method":"sleep","params":[1]},{"jsonrpc":"2.0","id":4,"method":"now"}]"#,
        br#"{"jsonrpc":"2.0","id":5,"method":"sleep","params":[1]}"#,
        br#"{"jsonrpc":"2.0","method":"sleep","params":[1]}"#,
        b"{not json",
    ];
    for m in messages {
        conn.start(&d, &Bytes::from_static(m), &mut out);
    }
    // Answered at once: the sync call and the parse error.
    assert_eq!(out.ends.len(), 2);
    while conn.messages_in_flight() > 0 {
        std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
    }
    let replies = out.replies();
    assert_eq!(replies.len(), 5, "{replies:?}");
    assert_eq!(replies[0]["id"], 2);
    assert_eq!(replies[1]["error"]["code"], -32700);
    // The sleepers of 1 ms before the one of 30 ms, the batch whole.
    assert_eq!(replies[4]["id"], 1);
    let batch = replies.iter().find(|r| r.is_array()).unwrap();
    assert_eq!(batch[0]["id"], 3);
    assert_eq!(batch[1]["id"], 4);
}

/// A reply buffer that records where each reply ends, as a stream
/// transport's does to frame replies one by one.
#[derive(Default)]
struct Marked {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl rpcwire::dispatch::ReplyBuf for Marked {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes)
    }
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(len)
    }
    fn as_vec_mut(&mut self) -> Option<&mut Vec<u8>> {
        Some(&mut self.buf)
    }
    fn end_reply(&mut self) {
        self.ends.push(self.buf.len());
    }
}

impl Marked {
    /// Each reply, parsed on its own; the marks must cover the buffer.
    fn replies(&mut self) -> Vec<Value> {
        let mut from = 0;
        let mut replies = Vec::new();
        for &end in &self.ends {
            replies.push(serde_json::from_slice(&self.buf[from..end]).unwrap());
            from = end;
        }
        assert_eq!(from, self.buf.len(), "every byte belongs to a marked reply");
        self.buf.clear();
        self.ends.clear();
        replies
    }
}

#[tokio::test(start_paused = true)]
async fn every_pipelined_reply_is_marked_where_it_ends() {
    let d = Dispatcher::builder(Gauge::default())
        .timeout(Some(Duration::from_millis(100)))
        .async_method("sleep", |call: AsyncCall<Gauge>| async move {
            let (ms,): (u64,) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(ms)
        })
        .async_method("forever", |_call: AsyncCall<Gauge>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .method("sync_add", |call: Call<'_, Gauge>| {
            let (a, b): (u64, u64) = call.decode()?;
            call.reply.u64(a + b)
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Marked::default();
    let start = |conn: &mut Connection, out: &mut Marked, msg: &'static str| {
        conn.start(&d, &Bytes::from_static(msg.as_bytes()), out)
    };
    // Answered at once: a parse error, a synchronous call, a synchronous
    // batch; nothing for a notification.
    start(&mut conn, &mut out, "{");
    start(
        &mut conn,
        &mut out,
        r#"{"jsonrpc":"2.0","id":1,"method":"sync_add","params":[1,2]}"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"[{"jsonrpc":"2.0","id":2,"method":"sync_add","params":[1,1]}]"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"{"jsonrpc":"2.0","method":"sync_add","params":[1,1]}"#,
    );
    let r = out.replies();
    assert_eq!(r.len(), 3);
    assert_eq!(r[1]["result"], 3);
    assert_eq!(r[2][0]["result"], 2);
    // Replies that complete later: single calls, a batch, a timeout.
    start(
        &mut conn,
        &mut out,
        r#"{"jsonrpc":"2.0","id":3,"method":"sleep","params":[10]}"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"{"jsonrpc":"2.0","id":4,"method":"sleep","params":[10]}"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"[{"jsonrpc":"2.0","id":5,"method":"sleep","params":[10]},{"jsonrpc":"2.0","id":6,"method":"sync_add","params":[0,0]}]"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"{"jsonrpc":"2.0","id":7,"method":"forever"}"#,
    );
    start(
        &mut conn,
        &mut out,
        r#"[{"jsonrpc":"2.0","id":8,"method":"forever"}]"#,
    );
    assert!(out.buf.is_empty());
    let mut replies = Vec::new();
    while conn.messages_in_flight() > 0 {
        let n = std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
        assert_eq!(out.ends.len(), n, "one mark per reply counted");
        replies.extend(out.replies());
    }
    assert_eq!(replies.len(), 5);
    // A batch completed by a cancellation is flushed, and marked, by the
    // next message's start, together with that message's own reply.
    start(
        &mut conn,
        &mut out,
        r#"[{"jsonrpc":"2.0","id":9,"method":"forever"}]"#,
    );
    assert!(conn.cancel(b"9"));
    start(
        &mut conn,
        &mut out,
        r#"[{"jsonrpc":"2.0","id":10,"method":"forever"},{"jsonrpc":"2.0","id":11,"method":"sync_add","params":[0,0]}]"#,
    );
    let r = out.replies();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0][0]["error"]["code"], -32800);
}

/// The timeout counts from a call's arrival: one that waited for a slot
/// past its deadline is answered as timed out without being run (it used
/// to start then, with a fresh deadline, for a client that had given up).
#[tokio::test(start_paused = true)]
async fn a_call_that_waits_past_its_deadline_is_not_run() {
    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    let d = Dispatcher::builder(())
        .max_in_flight(1)
        .timeout(Some(Duration::from_millis(100)))
        .async_method("forever", move |_call: AsyncCall<()>| {
            s.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<u64, RpcError>>()
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(
        &d,
        &Bytes::from_static(
            br#"[{"jsonrpc":"2.0","id":1,"method":"forever"},{"jsonrpc":"2.0","id":2,"method":"forever"}]"#,
        ),
        &mut out,
    );
    while conn.messages_in_flight() > 0 {
        std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
    }
    let replies: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(replies.as_array().unwrap().len(), 2, "{replies}");
    for (i, reply) in replies.as_array().unwrap().iter().enumerate() {
        assert_eq!(reply["id"], i + 1, "{replies}");
        assert_eq!(reply["error"]["message"], "Request timed out", "{replies}");
        assert_eq!(
            reply["error"]["data"],
            json!({"timeout_ms": 100}),
            "{replies}"
        );
    }
    assert_eq!(started.load(Ordering::SeqCst), 1, "the second call ran");
}

/// A cancel notification (`cancel_notification`, LSP's `$/cancelRequest`)
/// cancels the call of its connection with that id, running or still
/// waiting for a slot: its cancellation fires, the waiting one never runs,
/// and each single request is answered with -32800 at once (with
/// `CancelledReply::Nothing`, not at all, as MCP wants). Unknown ids are
/// ignored. The observer records each cancelled call with -32800 (they
/// were once recorded nowhere).
#[tokio::test(start_paused = true)]
async fn a_cancel_notification_cancels_running_and_waiting_calls() {
    use rpcwire::dispatch::{CallRecord, CancelledReply, Observer};
    #[derive(Default)]
    struct Records(std::sync::Mutex<Vec<(String, Option<i32>)>>);
    impl Observer for Records {
        fn on_call(&self, call: &CallRecord<'_>) {
            let method = call.method.unwrap_or("").to_string();
            self.0.lock().unwrap().push((method, call.code));
        }
    }
    for reply in [CancelledReply::Error, CancelledReply::Nothing] {
        let records = Arc::new(Records::default());
        let started = Arc::new(AtomicUsize::new(0));
        let fired = Arc::new(AtomicUsize::new(0));
        let (s, f) = (Arc::clone(&started), Arc::clone(&fired));
        let d = Dispatcher::builder(())
            .max_in_flight(1)
            .async_method("slow", move |call: AsyncCall<()>| {
                s.fetch_add(1, Ordering::SeqCst);
                let (cancel, f) = (call.cancellation().clone(), Arc::clone(&f));
                tokio::spawn(async move {
                    cancel.cancelled().await;
                    f.fetch_add(1, Ordering::SeqCst);
                });
                std::future::pending::<Result<u64, RpcError>>()
            })
            .cancel_notification("$/cancelRequest", "id", reply)
            .observer(records.clone())
            .build()
            .unwrap();
        let mut conn = Connection::new();
        let mut out = Vec::new();
        for id in ["7", "\"w\""] {
            let msg = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"slow"}}"#);
            conn.start(&d, &Bytes::from(msg), &mut out);
        }
        assert_eq!(conn.in_flight(), 2, "one running, one waiting");
        for id in ["99", "7", "\"w\""] {
            let cancel =
                format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#);
            conn.start(&d, &Bytes::from(cancel), &mut out);
        }
        std::future::poll_fn(|cx| {
            let _ = conn.poll_replies(&d, cx, &mut out);
            std::task::Poll::Ready(())
        })
        .await;
        tokio::task::yield_now().await;
        assert_eq!(conn.in_flight(), 0);
        assert_eq!(conn.messages_in_flight(), 0);
        assert_eq!(started.load(Ordering::SeqCst), 1, "the waiting call ran");
        assert_eq!(
            fired.load(Ordering::SeqCst),
            1,
            "the running call's cancellation"
        );
        let text = String::from_utf8(out).unwrap();
        match reply {
            CancelledReply::Error => assert_eq!(
                text,
                concat!(
                    r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#,
                    r#"{"jsonrpc":"2.0","id":"w","error":{"code":-32800,"message":"Request cancelled"}}"#
                )
            ),
            CancelledReply::Nothing => assert_eq!(text, ""),
        }
        let cancelled: Vec<_> = records
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m == "slow")
            .cloned()
            .collect();
        assert_eq!(
            cancelled,
            [
                ("slow".to_string(), Some(-32800)),
                ("slow".to_string(), Some(-32800))
            ],
            "{reply:?}"
        );
    }
}

/// `handle_async` dropped before its reply was complete (a timeout around
/// it) left the message and its calls in the connection: the next
/// `handle_async` on it waited for them too and wrote the old batch's reply
/// after its own, two JSON texts in one reply. Now the calls waiting for
/// the dropped reply go with it (a running one, a queued one); a
/// notification keeps running.
#[tokio::test(start_paused = true)]
async fn a_dropped_handle_async_leaves_nothing_for_the_next_message() {
    let d = dispatcher(2);
    let mut conn = Connection::new();
    let mut out = Vec::new();
    // Under a cap of 2: the notification and id 1 run, id 2 runs once id 1
    // is done, id 3 waits.
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","method":"sleep","params":[500]},{"jsonrpc":"2.0","id":1,"method":"sleep","params":[10]},{"jsonrpc":"2.0","id":2,"method":"sleep","params":[1000]},{"jsonrpc":"2.0","id":3,"method":"forever"}]"#,
    );
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        d.handle_async(&batch, &mut conn, &mut out),
    )
    .await;
    assert!(gave_up.is_err());
    assert!(out.is_empty(), "no part of the batch's reply was written");
    assert_eq!(conn.messages_in_flight(), 0, "the abandoned batch is gone");
    assert_eq!(conn.in_flight(), 1, "only the notification still runs");
    let single = Bytes::from_static(br#"{"jsonrpc":"2.0","id":9,"method":"sleep","params":[1]}"#);
    assert!(d.handle_async(&single, &mut conn, &mut out).await);
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":9,"result":1}"#
    );
    // The notification finishes when the connection is driven on.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let input =
        Bytes::from_static(br#"{"jsonrpc":"2.0","id":10,"method":"sync_add","params":[1,2]}"#);
    out.clear();
    d.handle_async(&input, &mut conn, &mut out).await;
    std::future::poll_fn(|cx| {
        let _ = conn.poll_replies(&d, cx, &mut out);
        std::task::Poll::Ready(())
    })
    .await;
    assert_eq!(conn.in_flight(), 0);
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":10,"result":3}"#
    );
}

/// A timeout longer than the clock can count (`Duration::MAX`, a way of
/// writing "no timeout") made every async call panic with an overflow
/// adding it to the arrival time, taking the caller's task down. It is no
/// deadline now, for calls that run at once and for calls that queue.
#[tokio::test]
async fn a_timeout_too_long_for_the_clock_is_no_deadline() {
    let d = Dispatcher::builder(())
        .max_in_flight(1)
        .timeout(Some(Duration::MAX))
        .async_method("one", |_: AsyncCall<()>| async {
            tokio::task::yield_now().await;
            Ok::<_, RpcError>(1)
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"one"},{"jsonrpc":"2.0","id":2,"method":"one"}]"#,
    );
    assert!(d.handle_async(&batch, &mut conn, &mut out).await);
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap(),
        json!([{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"result":1}])
    );
}

/// A handler sees its deadline, counted from the request's arrival: a call
/// that waited 3 s for the one slot has 7 s of its 10 s left when it
/// starts; without a timeout there is none. (A proxy gives the next hop
/// what is left, and tells a drop at the deadline from its client
/// leaving.)
#[tokio::test(start_paused = true)]
async fn a_handler_sees_its_deadline_counted_from_arrival() {
    let left_ms = |call: &AsyncCall<()>| {
        call.deadline().map_or(-1, |d| {
            d.saturating_duration_since(tokio::time::Instant::now().into_std())
                .as_millis() as i64
        })
    };
    let d = Dispatcher::builder(())
        .max_in_flight(1)
        .timeout(Some(Duration::from_secs(10)))
        .async_method("left", move |call: AsyncCall<()>| async move {
            let left = left_ms(&call);
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<_, RpcError>(left)
        })
        .build()
        .unwrap();
    let mut out = Vec::new();
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"left"},{"jsonrpc":"2.0","id":2,"method":"left"}]"#,
    );
    d.handle_async(&batch, &mut Connection::new(), &mut out)
        .await;
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap(),
        json!([{"jsonrpc":"2.0","id":1,"result":10_000},{"jsonrpc":"2.0","id":2,"result":7_000}])
    );
    let none = Dispatcher::builder(())
        .timeout(None)
        .async_method("left", move |call: AsyncCall<()>| async move {
            Ok::<_, RpcError>(left_ms(&call))
        })
        .build()
        .unwrap();
    out.clear();
    let single = Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"method":"left"}"#);
    none.handle_async(&single, &mut Connection::new(), &mut out)
        .await;
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":3,"result":-1}"#);
}

/// Calls that waited for a slot past their deadline are answered together,
/// as soon as the deadline passes: each used to be given a slot first, with
/// a future that only returned the timeout error, so that a poll cleared at
/// most `max_in_flight` of them and a backlog of n took n / max_in_flight
/// wake-ups of the connection's task. Here 2 slots and 40 queued calls
/// (requests, notifications, batch entries): one poll answers them all, in
/// queue order, batch entries in their place beside an entry answered at
/// once, and the observer records each timeout once.
#[tokio::test(start_paused = true)]
async fn a_backlog_of_expired_calls_is_answered_in_one_poll() {
    use rpcwire::dispatch::{CallRecord, Observer};
    type Record = (String, Option<String>, Option<i32>);
    #[derive(Default)]
    struct Records(std::sync::Mutex<Vec<Record>>);
    impl Observer for Records {
        fn on_call(&self, call: &CallRecord<'_>) {
            let method = call.method.unwrap_or("").to_string();
            let id = call.id.map(|id| id.to_string());
            self.0.lock().unwrap().push((method, id, call.code));
        }
    }
    let records = Arc::new(Records::default());
    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    let d = Dispatcher::builder(())
        .max_in_flight(2)
        .timeout(Some(Duration::from_millis(100)))
        .async_method("forever", move |_call: AsyncCall<()>| {
            s.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<u64, RpcError>>()
        })
        .method("add", |call: Call<'_, ()>| {
            let (a, b): (u64, u64) = call.decode()?;
            call.reply.u64(a + b)
        })
        .observer(records.clone())
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Framed::default();
    // Id 1 and the notification take both slots; ids 2 and 4 wait; id 3
    // is answered at once, its reply staged until its turn.
    let mut messages = vec![
        r#"[{"jsonrpc":"2.0","id":1,"method":"forever"},{"jsonrpc":"2.0","method":"forever"},{"jsonrpc":"2.0","id":2,"method":"forever"},{"jsonrpc":"2.0","id":3,"method":"add","params":[1,2]},{"jsonrpc":"2.0","id":4,"method":"forever"}]"#.to_string(),
    ];
    for id in 100..120 {
        messages.push(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"forever"}}"#
        ));
    }
    for _ in 0..10 {
        messages.push(r#"{"jsonrpc":"2.0","method":"forever"}"#.to_string());
    }
    let entries: Vec<String> = (201..209)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"forever"}}"#))
        .collect();
    messages.push(format!(
        r#"[{{"jsonrpc":"2.0","id":200,"method":"add","params":[2,2]}},{}]"#,
        entries.join(",")
    ));
    for m in messages {
        conn.start(&d, &Bytes::from(m), &mut out);
    }
    assert_eq!(conn.in_flight(), 2 + 40, "two running, forty waiting");
    // The running calls start; nothing is answered yet.
    let first =
        std::future::poll_fn(|cx| std::task::Poll::Ready(conn.poll_replies(&d, cx, &mut out)))
            .await;
    assert!(first.is_pending());
    assert!(out.ends.is_empty());

    // Every deadline passes (the engine's timer fires on the way).
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut polls = 0;
    while conn.in_flight() > 0 || conn.messages_in_flight() > 0 {
        assert!(polls < 1000, "the expired calls are never all answered");
        let _ =
            std::future::poll_fn(|cx| std::task::Poll::Ready(conn.poll_replies(&d, cx, &mut out)))
                .await;
        polls += 1;
        tokio::task::yield_now().await;
    }
    assert_eq!(
        polls, 1,
        "polls to answer 40 expired calls under a cap of 2"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "a call ran after its deadline"
    );

    let timed_out = |id: u64| json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "Request timed out", "data": {"timeout_ms": 100}}});
    let replies = out.replies();
    let singles: Vec<&Value> = replies.iter().filter(|r| r.is_object()).collect();
    assert_eq!(
        singles,
        (100..120)
            .map(timed_out)
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    let batches: Vec<&Value> = replies.iter().filter(|r| r.is_array()).collect();
    assert_eq!(batches.len(), 2, "{replies:?}");
    assert_eq!(
        *batches[0],
        json!([timed_out(1), timed_out(2), {"jsonrpc": "2.0", "id": 3, "result": 3}, timed_out(4)])
    );
    let mut second = vec![json!({"jsonrpc": "2.0", "id": 200, "result": 4})];
    second.extend((201..209).map(timed_out));
    assert_eq!(*batches[1], Value::Array(second));

    // Each call recorded once: every timeout with -32000, notifications
    // included; the two sums with their result.
    let records = records.0.lock().unwrap();
    let mut ids: Vec<u64> = records
        .iter()
        .filter(|(m, _, code)| m == "forever" && *code == Some(-32000))
        .filter_map(|(_, id, _)| id.as_deref().map(|id| id.parse().unwrap()))
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<u64> = [1, 2, 4]
        .into_iter()
        .chain(100..120)
        .chain(201..209)
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let notifications = records
        .iter()
        .filter(|(m, id, code)| m == "forever" && id.is_none() && *code == Some(-32000))
        .count();
    assert_eq!(notifications, 11);
    assert_eq!(records.len(), ids.len() + notifications + 2, "{records:?}");
}

/// Counts the wake-ups of the task that polls a connection by hand.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Wakes {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Polls `conn` once, as a task whose waker is `waker`.
fn poll_as(
    conn: &mut Connection,
    d: &Dispatcher<(), WithAsync>,
    waker: &std::task::Waker,
    out: &mut Framed,
) -> std::task::Poll<usize> {
    conn.poll_replies(d, &mut std::task::Context::from_waker(waker), out)
}

/// A queued call's deadline had no timer: the engine's timer was set from
/// the running calls' deadlines only, so a queued call whose deadline came
/// before all of theirs was answered only when the task was polled for
/// something else (here 80 ms late, at the running call's own deadline).
/// It happened when a later call ran while an earlier one waited: a call
/// arriving just after a cancellation freed a slot took it ahead of the
/// queue. Now the timer covers the front of the queue too: the task is
/// woken at the queued call's deadline, and that poll answers it. (Since
/// calls start in arrival order, call 2 takes the freed slot here and
/// call 3 waits; call 2's timeout must still come at its deadline.)
#[tokio::test(start_paused = true)]
async fn a_queued_call_is_answered_at_its_deadline() {
    use rpcwire::dispatch::CancelledReply;
    let d = Dispatcher::builder(())
        .max_in_flight(1)
        .timeout(Some(Duration::from_millis(100)))
        .async_method("forever", |_call: AsyncCall<()>| {
            std::future::pending::<Result<u64, RpcError>>()
        })
        .cancel_notification("$/cancelRequest", "id", CancelledReply::Error)
        .build()
        .unwrap();
    let wakes = Arc::new(Wakes::default());
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let mut conn = Connection::new();
    let mut out = Framed::default();
    let call = |id: u64| {
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"forever"}}"#
        ))
    };
    let ms = |n| tokio::time::sleep(Duration::from_millis(n));

    // 0 ms: call 1 runs (its deadline at 100 ms).
    conn.start(&d, &call(1), &mut out);
    assert!(poll_as(&mut conn, &d, &waker, &mut out).is_pending());
    // 10 ms: call 2 waits for the slot (its deadline at 110 ms).
    ms(10).await;
    conn.start(&d, &call(2), &mut out);
    assert!(poll_as(&mut conn, &d, &waker, &mut out).is_pending());
    // 90 ms: call 1 is cancelled; call 3 arrives (its deadline at 190 ms).
    ms(80).await;
    conn.start(
        &d,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#),
        &mut out,
    );
    conn.start(&d, &call(3), &mut out);
    let _ = poll_as(&mut conn, &d, &waker, &mut out);
    // 105 ms: the timer set for call 1's deadline has fired; nothing was
    // due.
    ms(15).await;
    let _ = poll_as(&mut conn, &d, &waker, &mut out);
    assert_eq!(out.replies().len(), 1, "call 1's cancellation only");
    // 111 ms: past call 2's deadline, before call 3's.
    let before = wakes.count();
    ms(6).await;
    assert!(
        wakes.count() > before,
        "nothing woke the task at call 2's deadline"
    );
    assert_eq!(
        poll_as(&mut conn, &d, &waker, &mut out),
        std::task::Poll::Ready(1)
    );
    let replies = out.replies();
    assert_eq!(
        replies,
        [
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}}),
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "Request timed out", "data": {"timeout_ms": 100}}}),
        ]
    );
    assert_eq!(conn.in_flight(), 1, "call 3");
}

/// Calls start in arrival order. A slot freed outside a poll (a running
/// call cancelled by a cancel notification, or by `Connection::cancel`)
/// went to the next call to *arrive*, since `launch` only checked the cap:
/// call 3 ran while call 2, queued before it, went on waiting. Nothing
/// woke the task either, so the queued call waited for whatever polled
/// next. Now an arriving call queues behind those already waiting, the
/// freed slot wakes the task, and its next poll starts the queue's front.
#[tokio::test(start_paused = true)]
async fn queued_calls_start_before_later_arrivals() {
    use rpcwire::dispatch::CancelledReply;
    for by_notification in [true, false] {
        let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let l = Arc::clone(&log);
        let d = Dispatcher::builder(())
            .max_in_flight(1)
            .async_method("logged", move |call: AsyncCall<()>| {
                let id = String::from_utf8(call.id().unwrap_or(b"-").to_vec()).unwrap();
                l.lock().unwrap().push(id);
                std::future::pending::<Result<u64, RpcError>>()
            })
            .cancel_notification("$/cancelRequest", "id", CancelledReply::Nothing)
            .build()
            .unwrap();
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(Arc::clone(&wakes));
        let mut conn = Connection::new();
        let mut out = Framed::default();
        let call = |id: u64| {
            Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"logged"}}"#
            ))
        };
        let started = || log.lock().unwrap().join(",");

        conn.start(&d, &call(1), &mut out);
        conn.start(&d, &call(2), &mut out);
        assert!(poll_as(&mut conn, &d, &waker, &mut out).is_pending());
        assert_eq!(started(), "1", "call 2 waits for the slot");

        let before = wakes.count();
        if by_notification {
            conn.start(
                &d,
                &Bytes::from_static(
                    br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
                ),
                &mut out,
            );
        } else {
            assert!(conn.cancel(b"1"));
        }
        assert!(
            wakes.count() > before,
            "a slot freed for a queued call, and no wake-up (by notification: {by_notification})"
        );
        conn.start(&d, &call(3), &mut out);
        let _ = poll_as(&mut conn, &d, &waker, &mut out);
        assert_eq!(
            started(),
            "1,2",
            "call 3 overtook call 2 (by notification: {by_notification})"
        );
        assert_eq!(conn.in_flight(), 2, "call 2 runs, call 3 waits");

        assert!(conn.cancel(b"2"));
        let _ = poll_as(&mut conn, &d, &waker, &mut out);
        assert_eq!(started(), "1,2,3");
        assert!(out.ends.is_empty(), "cancelled calls are not answered");
    }
}

/// A call answered while it waited for a slot (timed out, or cancelled)
/// was reported to the observer with `elapsed` measured from its answer,
/// about zero however long it had waited, which made latency histograms
/// show the slowest calls as the fastest. Now it counts from the call's
/// arrival: at least the timeout for one that timed out, at least the
/// wait for one cancelled. (A real clock, and only lower bounds, which
/// hold however slow the machine.)
#[tokio::test]
async fn calls_answered_while_queued_report_their_wait() {
    use rpcwire::dispatch::{CallRecord, Observer};
    #[derive(Default)]
    struct Records(std::sync::Mutex<Vec<(String, Option<i32>, Duration)>>);
    impl Observer for Records {
        fn on_call(&self, call: &CallRecord<'_>) {
            let id = call.id.map(|id| id.to_string()).unwrap_or_default();
            self.0.lock().unwrap().push((id, call.code, call.elapsed));
        }
    }
    let waker = std::task::Waker::noop();
    for timeout in [Some(Duration::from_millis(50)), None] {
        let records = Arc::new(Records::default());
        let d = Dispatcher::builder(())
            .max_in_flight(1)
            .timeout(timeout)
            .async_method("forever", |_call: AsyncCall<()>| {
                std::future::pending::<Result<u64, RpcError>>()
            })
            .observer(records.clone())
            .build()
            .unwrap();
        let mut conn = Connection::new();
        let mut out = Framed::default();
        for id in 1..=2 {
            let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"forever"}}"#);
            conn.start(&d, &Bytes::from(call), &mut out);
        }
        assert!(poll_as(&mut conn, &d, waker, &mut out).is_pending());
        // Blocking: no poll comes before both deadlines have passed, so
        // call 2 is answered from the queue.
        std::thread::sleep(Duration::from_millis(60));
        if timeout.is_none() {
            assert!(conn.cancel(b"2"));
        }
        let _ = poll_as(&mut conn, &d, waker, &mut out);
        let records = records.0.lock().unwrap();
        let call2 = records
            .iter()
            .find(|(id, _, _)| id == "2")
            .unwrap_or_else(|| panic!("call 2 not recorded: {records:?}"));
        let code = if timeout.is_some() { -32000 } else { -32800 };
        assert_eq!(call2.1, Some(code), "{records:?}");
        assert!(
            call2.2 >= Duration::from_millis(50),
            "call 2 waited at least 50 ms and was recorded with {:?} ({code})",
            call2.2
        );
    }
}

/// An async entry of a batch whose future is ready when first polled (a
/// cache hit) is polled in its turn, as the batch starts: the whole reply
/// is written by `Connection::start`, with no poll, and near the response
/// limit the entries after it get the room a sync run would give them
/// (they saw the room held for its reply, the size of its too-large
/// error, and were refused where `handle` answered them: found by the
/// `dispatch` fuzz target, whose corpus replays it).
#[tokio::test]
async fn ready_async_entries_are_answered_in_their_turn() {
    fn build<K>(
        b: rpcwire::dispatch::DispatcherBuilder<(), K>,
    ) -> rpcwire::dispatch::DispatcherBuilder<(), K> {
        b.method("pad", |c: Call<'_, ()>| {
            let (n,): (usize,) = c.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .max_response_len(400)
    }
    let sync = build(Dispatcher::builder(()))
        .method("hit", |c: Call<'_, ()>| c.reply.str("cached"))
        .build()
        .unwrap();
    let twin = build(Dispatcher::builder(()))
        .async_method("hit", |_c: AsyncCall<()>| async {
            Ok::<_, RpcError>("cached")
        })
        .build()
        .unwrap();
    // `hit`'s reply (42 bytes) is much shorter than its too-large error
    // (96): the last `pad` (137 bytes) fits only if `hit` was answered
    // first (167 bytes left then, 113 while room is held for `hit`).
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"pad","params":[150]},{"jsonrpc":"2.0","id":2,"method":"hit"},{"jsonrpc":"2.0","id":3,"method":"pad","params":[100]}]"#,
    );
    let mut expected = Vec::new();
    sync.handle(&batch, &mut Connection::new(), &mut expected);
    let v: Value = serde_json::from_slice(&expected).unwrap();
    assert_eq!(v[1]["result"], "cached", "{v}");
    assert_eq!(v[2]["result"], "x".repeat(100), "{v}");
    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(&twin, &batch, &mut out);
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&expected)
    );
    let mut again = Vec::new();
    twin.handle_async(&batch, &mut Connection::new(), &mut again)
        .await;
    assert_eq!(again, expected);
}

/// `d`'s whole reply to `batch` through `handle_async`, as JSON (a hang
/// guard of ten seconds, never a measurement).
async fn answer_guarded<K: 'static>(d: &Dispatcher<(), K>, batch: &Bytes) -> Value {
    let mut out = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        d.handle_async(batch, &mut Connection::new(), &mut out),
    )
    .await
    .expect("hang guard");
    serde_json::from_slice(&out).unwrap()
}

/// A batch entry that was already running when another entry's reply was
/// refused as too large still gets its own reply when it fits the room
/// held for it: its call ran (a transaction sent, say), and a too-large
/// error in place of its result would hide what it did. Only entries not
/// started yet are refused once the batch is past the limit, as in
/// `handle`, where entries run in order.
#[tokio::test]
async fn a_running_entry_keeps_its_reply_when_another_is_refused() {
    let d = Dispatcher::builder(())
        .async_method("send", |_c: AsyncCall<()>| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, RpcError>("0xabc")
        })
        .async_method("big", |_c: AsyncCall<()>| async {
            Ok::<_, RpcError>("x".repeat(10_000))
        })
        .max_response_len(1000)
        .build()
        .unwrap();
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"send"},{"jsonrpc":"2.0","id":2,"method":"big"}]"#,
    );
    let v = answer_guarded(&d, &batch).await;
    assert_eq!(v[0]["result"], "0xabc", "{v}");
    assert_eq!(v[1]["error"]["code"], -32000, "{v}");
}

/// A transport task's waker: each wake is a permit for whoever waits.
struct TaskWake(tokio::sync::Notify);

impl std::task::Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.0.notify_one();
    }
}

/// A transport that calls `poll_replies` only when its task is woken
/// (`Connection::start`'s contract: replies not written at once come out
/// of `poll_replies`, whose waker is called when a call makes progress or
/// a deadline passes) still gets a batch's timeout error when its async
/// entries hang: the deadline must wake the task although the entries
/// were first polled inside `start`, with no poll of the engine after.
#[tokio::test]
async fn a_hanging_batch_times_out_for_a_transport_polling_when_woken() {
    let d = Dispatcher::builder(())
        .async_method("hang", |_c: AsyncCall<()>| async {
            std::future::pending::<Result<(), RpcError>>().await
        })
        .timeout(Some(Duration::from_millis(50)))
        .build()
        .unwrap();
    let wake = Arc::new(TaskWake(tokio::sync::Notify::new()));
    let waker = std::task::Waker::from(Arc::clone(&wake));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut conn = Connection::new();
    let mut out = Vec::new();
    // The transport's task has polled once already (nothing in flight).
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"hang"},{"jsonrpc":"2.0","id":2,"method":"hang"}]"#,
    );
    conn.start(&d, &batch, &mut out);
    assert!(out.is_empty());
    tokio::time::timeout(Duration::from_secs(10), async {
        while conn.messages_in_flight() > 0 {
            wake.0.notified().await;
            let _ = conn.poll_replies(&d, &mut cx, &mut out);
        }
    })
    .await
    .expect("the deadline never woke the transport's task");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v[0]["error"]["message"], "Request timed out", "{v}");
    assert_eq!(v[1]["error"]["message"], "Request timed out", "{v}");
}

/// A batch entry whose call was running when another entry was refused as
/// too large, and that then times out or is cancelled, is answered with
/// what happened to it (the timeout error, -32800), as a running entry
/// that finishes keeps its reply: not with the too-large error kept for
/// entries never started, which would tell its client the call was not
/// run because of the batch's size.
#[tokio::test]
async fn a_running_entry_timed_out_or_cancelled_after_a_refusal_says_so() {
    let d = Dispatcher::builder(())
        .async_method("hang", |_c: AsyncCall<()>| async {
            std::future::pending::<Result<(), RpcError>>().await
        })
        .async_method("big", |_c: AsyncCall<()>| async {
            Ok::<_, RpcError>("x".repeat(10_000))
        })
        .timeout(Some(Duration::from_millis(50)))
        .max_response_len(1000)
        .build()
        .unwrap();
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","id":1,"method":"hang"},{"jsonrpc":"2.0","id":2,"method":"big"}]"#,
    );
    let v = answer_guarded(&d, &batch).await;
    assert_eq!(v[0]["error"]["message"], "Request timed out", "{v}");
    assert_eq!(v[1]["error"]["code"], -32000, "{v}");
    assert_ne!(v[1]["error"]["message"], "Request timed out", "{v}");

    let mut conn = Connection::new();
    let mut out = Vec::new();
    conn.start(&d, &batch, &mut out);
    assert!(out.is_empty());
    assert!(conn.cancel(b"1"));
    std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v[0]["error"]["code"], -32800, "{v}");
    assert_eq!(v[1]["error"]["code"], -32000, "{v}");
}

/// A batch's async entries start in their turn, notifications as requests
/// do: each handler's future is first polled as its entry is read, so what
/// the handlers do before their first `.await` (send a request of their
/// own on the peer, say, taking the next outbound id) happens in the
/// batch's order.
#[tokio::test]
async fn async_notifications_of_a_batch_start_in_their_turn_as_requests_do() {
    type Log = std::sync::Mutex<Vec<String>>;
    let d = Dispatcher::builder(Log::default())
        .async_method("step", |call: AsyncCall<Log>| async move {
            let (tag,): (String,) = call.decode()?;
            call.state.lock().unwrap().push(tag);
            tokio::task::yield_now().await;
            Ok::<_, RpcError>(())
        })
        .build()
        .unwrap();
    let batch = Bytes::from_static(
        br#"[{"jsonrpc":"2.0","method":"step","params":["a"]},{"jsonrpc":"2.0","id":1,"method":"step","params":["b"]},{"jsonrpc":"2.0","method":"step","params":["c"]},{"jsonrpc":"2.0","id":2,"method":"step","params":["d"]}]"#,
    );
    let mut out = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        d.handle_async(&batch, &mut Connection::new(), &mut out),
    )
    .await
    .expect("hang guard");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        json!([{"jsonrpc":"2.0","id":1,"result":null},{"jsonrpc":"2.0","id":2,"result":null}])
    );
    assert_eq!(*d.state().lock().unwrap(), ["a", "b", "c", "d"]);
}

/// A call past its deadline whose expiry was not yet handled (the timer
/// fired, nobody polled) when another call started: the timer was moved
/// to the new call's later deadline, so the first was answered a whole
/// timeout late, with the second. It is answered at the next poll.
#[tokio::test]
async fn a_call_started_after_a_deadline_passed_does_not_delay_its_expiry() {
    use std::future::poll_fn;
    use std::task::Poll;
    let d = Dispatcher::builder(())
        .async_method("slow", |_c: AsyncCall<()>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    // Call 1, then (its deadline past, unhandled) call 2, each polled once
    // at once: the second poll must find call 1 over.
    for id in [1, 2] {
        let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"slow"}}"#);
        conn.start(&d, &Bytes::from(call), &mut out);
        poll_fn(|cx| {
            let _ = conn.poll_replies(&d, cx, &mut out);
            Poll::Ready(())
        })
        .await;
        if id == 1 {
            assert!(out.is_empty());
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    }
    let text = String::from_utf8(out).unwrap();
    let first = text.lines().next().unwrap_or_default();
    let first: Value = serde_json::from_str(first).unwrap_or(Value::Null);
    assert_eq!(first["id"], 1, "{text:?}");
    assert_eq!(first["error"]["message"], "Request timed out", "{text:?}");
    assert!(!text.contains(r#""id":2"#), "{text:?}");
}

/// An async call is polled once as it is started, as a batch entry is:
/// what its handler does up to its first `.await` comes before the
/// handlers of the messages started after it (a notification's too), and
/// a call ready at once is answered by `start`, as a sync one is, its
/// reply marked once. Single calls were first polled by the next
/// `poll_replies`, after every message of the read had started: an LSP
/// request pipelined ahead of `shutdown` saw the server shut down. Found
/// by a review.
#[tokio::test]
async fn an_async_call_runs_up_to_its_first_await_as_it_is_started() {
    type Log = std::sync::Mutex<Vec<&'static str>>;
    let d = Dispatcher::builder(Log::default())
        .async_method("first", |call: AsyncCall<Log>| async move {
            call.state.lock().unwrap().push("first");
            tokio::task::yield_now().await;
            Ok::<_, RpcError>(1)
        })
        .async_method("ready", |call: AsyncCall<Log>| async move {
            call.state.lock().unwrap().push("ready");
            Ok::<_, RpcError>(2)
        })
        .method("second", |c: Call<'_, Log>| {
            c.state.lock().unwrap().push("second");
            c.reply.u64(3)
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Marked::default();
    let messages: [&[u8]; 4] = [
        br#"{"jsonrpc":"2.0","id":1,"method":"first"}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"ready"}"#,
        br#"{"jsonrpc":"2.0","method":"first"}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"second"}"#,
    ];
    for m in messages {
        conn.start(&d, &Bytes::from_static(m), &mut out);
    }
    assert_eq!(
        *d.state().lock().unwrap(),
        ["first", "ready", "first", "second"]
    );
    let at_once = out.replies();
    assert_eq!(
        at_once,
        [
            json!({"jsonrpc":"2.0","id":2,"result":2}),
            json!({"jsonrpc":"2.0","id":3,"result":3})
        ]
    );
    while conn.messages_in_flight() > 0 {
        std::future::poll_fn(|cx| conn.poll_replies(&d, cx, &mut out)).await;
    }
    assert_eq!(out.replies(), [json!({"jsonrpc":"2.0","id":1,"result":1})]);
}

/// A call that waited for a slot is polled as the poll that gives it one
/// starts it: its handler's code up to the first `.await` comes before
/// the handlers of messages started after that poll. It was left to the
/// next poll, and a batch entry and a sync request read meanwhile ran
/// first. Found by a review.
#[tokio::test]
async fn a_call_started_from_the_queue_runs_before_later_arrivals() {
    type Log = std::sync::Mutex<Vec<&'static str>>;
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = Arc::clone(&gate);
    let d = Dispatcher::builder(Log::default())
        .max_in_flight(2)
        .async_method("gate", move |_call: AsyncCall<Log>| {
            let opened = Arc::clone(&opened);
            async move {
                opened.notified().await;
                Ok::<_, RpcError>(0)
            }
        })
        .async_method("logged", |call: AsyncCall<Log>| async move {
            let id = match call.id() {
                Some(b"3") => "3",
                _ => "4",
            };
            call.state.lock().unwrap().push(id);
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(0)
        })
        .method("sync_logged", |call: Call<'_, Log>| {
            call.state.lock().unwrap().push("5");
            call.reply.u64(5)
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for m in [
        r#"{"jsonrpc":"2.0","id":1,"method":"gate"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"gate"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"logged"}"#,
    ] {
        conn.start(&d, &Bytes::from_static(m.as_bytes()), &mut out);
    }
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    assert!(d.state().lock().unwrap().is_empty(), "3 waits for a slot");
    gate.notify_waiters();
    assert_eq!(
        conn.poll_replies(&d, &mut cx, &mut out),
        std::task::Poll::Ready(2)
    );
    for m in [
        r#"[{"jsonrpc":"2.0","id":4,"method":"logged"}]"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"sync_logged"}"#,
    ] {
        conn.start(&d, &Bytes::from_static(m.as_bytes()), &mut out);
    }
    assert_eq!(*d.state().lock().unwrap(), ["3", "4", "5"]);
}

/// Async notifications through `handle_async` alone, batch after batch,
/// past the cap: they run, and those waiting for a slot start before the
/// next message does, so the queue holds one message's worth at most.
/// Only messages waiting for replies drove the connection: notifications
/// past the cap were never started, and the queue (each entry holding its
/// message's bytes) grew with every batch. Found by a review.
#[tokio::test(start_paused = true)]
async fn handle_async_runs_async_notifications_and_bounds_their_queue() {
    let done = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&done);
    let d = Dispatcher::builder(())
        .max_in_flight(4)
        .async_method("note", move |_call: AsyncCall<()>| {
            let done = Arc::clone(&counted);
            async move {
                tokio::task::yield_now().await;
                done.fetch_add(1, Ordering::SeqCst);
                Ok::<_, RpcError>(())
            }
        })
        .method("ping", |call: Call<'_, ()>| call.reply.str("pong"))
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let note = r#"{"jsonrpc":"2.0","method":"note"}"#;
    let batch = Bytes::from(format!("[{}]", vec![note; 100].join(",")));
    let ping = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    for round in 1..=50 {
        let mut out = Vec::new();
        assert!(!d.handle_async(&batch, &mut conn, &mut out).await);
        // This batch's, and at most the cap of the last one's running.
        assert!(
            conn.in_flight() <= 104,
            "round {round}: {}",
            conn.in_flight()
        );
        let mut out = Vec::new();
        assert!(d.handle_async(&ping, &mut conn, &mut out).await);
        assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#);
        assert!(conn.in_flight() <= 4, "round {round}: {}", conn.in_flight());
    }
    assert!(done.load(Ordering::SeqCst) >= 5000 - 4);
}

/// A handler's future whose drop panics (one owning a tokio runtime does,
/// in an async context), ended before it finished, past its deadline or
/// cancelled: the panic stays with the call, as its polls' do, and its
/// entry is answered. The future was dropped outside the engine's guard,
/// and the panic took down the task driving the connection. Found by a
/// review.
#[tokio::test(start_paused = true)]
async fn a_handler_future_that_panics_as_it_is_dropped_takes_nothing_down() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("dropped in an async context");
        }
    }
    let d = Dispatcher::builder(())
        .timeout(Some(Duration::from_millis(100)))
        .quiet_panics(true)
        .async_method("held", |_call: AsyncCall<()>| async move {
            let _owned = PanicsOnDrop;
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(0)
        })
        .cancel_notification(
            "$/cancelRequest",
            "id",
            rpcwire::dispatch::CancelledReply::Error,
        )
        .build()
        .unwrap();
    let driving = tokio::spawn(async move {
        let mut conn = Connection::new();
        let mut timed_out = Vec::new();
        let input = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"held"}"#);
        d.handle_async(&input, &mut conn, &mut timed_out).await;
        let mut cancelled = Vec::new();
        conn.start(
            &d,
            &Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"held"}"#),
            &mut cancelled,
        );
        let cancel = br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#;
        conn.start(&d, &Bytes::from_static(cancel), &mut cancelled);
        (timed_out, cancelled)
    });
    let (timed_out, cancelled) = driving.await.expect("the driving task lives");
    let timed_out: Value = serde_json::from_slice(&timed_out).unwrap();
    assert_eq!(timed_out["id"], 1);
    assert_eq!(
        timed_out["error"]["message"], "Request timed out",
        "{timed_out}"
    );
    let cancelled: Value = serde_json::from_slice(&cancelled).unwrap();
    assert_eq!(cancelled["id"], 2);
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");
}

/// A call woken several times between two polls of the engine is polled
/// once, as an executor coalesces wakes: each wake was listed, and the
/// call polled once per wake (a `join_all` of n pending children, woken by
/// k of them, polled its children about k * n times). Found by a review.
#[tokio::test]
async fn a_call_woken_many_times_between_polls_is_polled_once() {
    use std::sync::Mutex;
    type Senders = Mutex<Vec<tokio::sync::oneshot::Sender<()>>>;
    let polls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&polls);
    let d = Dispatcher::builder(Senders::default())
        .async_method("fan_out", move |call: AsyncCall<Senders>| {
            let mut children = Vec::new();
            for _ in 0..8 {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                call.state.lock().unwrap().push(tx);
                children.push(rx);
            }
            let all = futures_util::future::join_all(children);
            let polls = Arc::clone(&counted);
            let mut all = Box::pin(all);
            std::future::poll_fn(move |cx| {
                polls.fetch_add(1, Ordering::SeqCst);
                all.as_mut().poll(cx).map(|_| Ok::<_, RpcError>(0))
            })
        })
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    conn.start(
        &d,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"fan_out"}"#),
        &mut out,
    );
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    let before = polls.load(Ordering::SeqCst);
    // Four children answer before the engine's next poll: four wakes.
    let mut senders = std::mem::take(&mut *d.state().lock().unwrap());
    for tx in senders.drain(..4) {
        tx.send(()).unwrap();
    }
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    assert_eq!(
        polls.load(Ordering::SeqCst) - before,
        1,
        "polled once per wake"
    );
    for tx in senders {
        tx.send(()).unwrap();
    }
    assert_eq!(
        conn.poll_replies(&d, &mut cx, &mut out),
        std::task::Poll::Ready(1)
    );
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":0}"#);
}

/// A transport polling only when woken: call 1 ends before its deadline,
/// and the timer set for that deadline fires later with no call running.
/// Call 2, started after that, is still answered at its own deadline: the
/// spent timer kept call 1's deadline, so call 2's launch left it alone
/// and nothing woke the task again (found by a review).
#[tokio::test]
async fn a_timer_left_from_an_ended_call_still_wakes_for_the_next_call() {
    let d = Dispatcher::builder(())
        .async_method("quick", |_c: AsyncCall<()>| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, RpcError>(1)
        })
        .async_method("hang", |_c: AsyncCall<()>| async {
            std::future::pending::<Result<(), RpcError>>().await
        })
        .timeout(Some(Duration::from_millis(50)))
        .build()
        .unwrap();
    let wake = Arc::new(TaskWake(tokio::sync::Notify::new()));
    let waker = std::task::Waker::from(Arc::clone(&wake));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut conn = Connection::new();
    let mut out = Vec::new();
    assert!(conn.poll_replies(&d, &mut cx, &mut out).is_pending());
    let quick = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"quick"}"#);
    conn.start(&d, &quick, &mut out);
    while conn.messages_in_flight() > 0 {
        wake.0.notified().await;
        let _ = conn.poll_replies(&d, &mut cx, &mut out);
    }
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":1}"#);
    out.clear();
    // Past call 1's deadline: its timer fires with nothing running, and
    // the transport polls for that wake.
    tokio::time::sleep(Duration::from_millis(120)).await;
    tokio::time::timeout(Duration::from_secs(5), wake.0.notified())
        .await
        .expect("the timer woke the task");
    let _ = conn.poll_replies(&d, &mut cx, &mut out);
    let hang = Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"hang"}"#);
    conn.start(&d, &hang, &mut out);
    assert!(out.is_empty());
    tokio::time::timeout(Duration::from_secs(5), async {
        while conn.messages_in_flight() > 0 {
            wake.0.notified().await;
            let _ = conn.poll_replies(&d, &mut cx, &mut out);
        }
    })
    .await
    .expect("call 2's deadline never woke the transport's task");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["id"], 2, "{v}");
    assert_eq!(v["error"]["message"], "Request timed out", "{v}");
}

/// A call queued past the cap by one dispatcher and started when a slot
/// frees by another that has no handler of its name (a connection driven
/// by two) is answered -32603; it was left undecided, so its message
/// never ended and every later `handle_async` on the connection waited
/// for good. Found by a read-only review from a custom transport's side.
#[tokio::test]
async fn a_call_started_by_another_dispatcher_is_answered_not_lost() {
    let first = Dispatcher::builder(())
        .max_in_flight(1)
        .async_method("work", |_: AsyncCall<()>| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, RpcError>("done")
        })
        .build()
        .unwrap();
    let second = Dispatcher::builder(())
        .method("other", |c: Call<'_, ()>| c.reply.str("x"))
        .build()
        .unwrap();
    let mut conn = Connection::new();
    let mut out = Vec::new();
    for id in [1, 2] {
        let msg = Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"work"}}"#));
        conn.start(&first, &msg, &mut out);
    }
    assert!(out.is_empty());
    let drained = async {
        while conn.messages_in_flight() > 0 {
            std::future::poll_fn(|cx| conn.poll_until_drained(&second, cx, &mut out)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), drained)
        .await
        .expect("the queued call's message ends");
    let text = String::from_utf8(out).unwrap();
    // The replies back to back, as a stream transport frames none.
    let replies: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // The other dispatcher's cap (256) let the queued call start at once,
    // before the first finished.
    assert_eq!(replies.len(), 2, "{text}");
    let of = |id: u64| replies.iter().find(|r| r["id"] == id).expect("a reply");
    assert_eq!(of(1), &json!({"jsonrpc": "2.0", "id": 1, "result": "done"}));
    assert_eq!(of(2)["error"]["code"], -32603, "{text}");
}
