//! Async handlers: batch entries run concurrently up to the cap, replies in
//! request order, params handed over without copying, panics contained.
#![cfg(feature = "async")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rpcwire::{AsyncCall, Call, Dispatcher, RawJson, RpcError};
use serde_json::{Value, json};

#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
    /// Where the last call's params pointed, to check they were not copied.
    params_at: AtomicUsize,
}

fn dispatcher(cap: usize) -> Dispatcher<Gauge> {
    Dispatcher::<Gauge>::builder()
        .max_in_flight(cap)
        .async_method("sleep", |call: AsyncCall<Gauge>| async move {
            let (ms,): (u64,) = call.decode()?;
            if let Some(p) = &call.params {
                call.state
                    .params_at
                    .store(p.bytes().as_ptr() as usize, Ordering::Relaxed);
            }
            let now = call.state.now.fetch_add(1, Ordering::SeqCst) + 1;
            call.state.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            call.state.now.fetch_sub(1, Ordering::SeqCst);
            RawJson::serialize(&ms)
        })
        .async_method("boom", |_call: AsyncCall<Gauge>| async move {
            tokio::task::yield_now().await;
            if true {
                panic!("upstream vanished");
            }
            RawJson::serialize(&0)
        })
        .async_method("fail", |_call: AsyncCall<Gauge>| async move {
            Err(RpcError::new(-32000, "header not found").with_data(&json!({"block": "0xffff"})))
        })
        .async_method("echo_method", |call: AsyncCall<Gauge>| async move {
            RawJson::serialize(call.method())
        })
        .method("sync_add", |call: Call<'_, Gauge>| {
            let (a, b): (u64, u64) = call.decode()?;
            Ok(call.reply.u64(a + b))
        })
        .build()
        .unwrap()
}

async fn run(d: &Dispatcher<Gauge>, state: &Arc<Gauge>, input: &'static str) -> Option<Value> {
    let mut out = Vec::new();
    let wrote = d
        .handle_async(Bytes::from_static(input.as_bytes()), state, &mut out)
        .await;
    assert_eq!(wrote, !out.is_empty());
    (!out.is_empty()).then(|| serde_json::from_slice(&out).unwrap())
}

#[tokio::test]
async fn batch_entries_run_concurrently_under_the_cap_and_reply_in_order() {
    let d = dispatcher(3);
    let state = Arc::new(Gauge::default());
    // Later entries finish first; the reply keeps request order.
    let input = r#"[{"jsonrpc":"2.0","id":1,"method":"sleep","params":[120]},
                    {"jsonrpc":"2.0","id":2,"method":"sleep","params":[90]},
                    {"jsonrpc":"2.0","id":3,"method":"sync_add","params":[1,2]},
                    {"jsonrpc":"2.0","id":4,"method":"sleep","params":[60]},
                    {"jsonrpc":"2.0","id":5,"method":"sleep","params":[30]},
                    {"jsonrpc":"2.0","id":6,"method":"sleep","params":[10]},
                    {"jsonrpc":"2.0","method":"sleep","params":[5]},
                    {"jsonrpc":"2.0","id":7,"method":"sleep","params":[1]}]"#;
    let r = run(&d, &state, input).await.unwrap();
    let ids: Vec<i64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(r[0]["result"], 120);
    assert_eq!(r[2]["result"], 3);
    let peak = state.peak.load(Ordering::SeqCst);
    assert!(peak > 1, "entries overlapped (peak {peak})");
    assert!(peak <= 3, "never more than the cap in flight (peak {peak})");
}

#[tokio::test]
async fn params_are_slices_of_the_input_not_copies() {
    let d = dispatcher(4);
    let state = Arc::new(Gauge::default());
    let input: &'static str = r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":[1]}"#;
    run(&d, &state, input).await.unwrap();
    let at = state.params_at.load(Ordering::Relaxed);
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    assert!(range.contains(&at), "params point into the message");
}

#[tokio::test]
async fn panics_and_errors_stay_with_their_entry() {
    let d = dispatcher(4);
    let state = Arc::new(Gauge::default());
    let r = run(
        &d,
        &state,
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
    assert_eq!(
        run(&d, &state, "[]").await.unwrap()["error"]["code"],
        -32600
    );
    assert_eq!(run(&d, &state, "{").await.unwrap()["error"]["code"], -32700);
    assert_eq!(
        run(
            &d,
            &state,
            r#"[{"jsonrpc":"2.0","method":"sleep","params":[1]}]"#
        )
        .await,
        None
    );
}

#[tokio::test]
async fn handle_async_is_send_and_runs_on_spawned_tasks() {
    let d = Arc::new(dispatcher(2));
    let state = Arc::new(Gauge::default());
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (d, state) = (Arc::clone(&d), Arc::clone(&state));
            tokio::spawn(async move {
                let mut out = Vec::new();
                let msg =
                    format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"sync_add","params":[{i},1]}}"#);
                d.handle_async(Bytes::from(msg), &state, &mut out).await;
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
