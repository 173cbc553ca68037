//! Defects found by an adversarial review of the core (envelope, params,
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
    for (method, jsonrpc) in [("e", "2.0"), ("big", "2.0"), ("big", "1.0"), ("nope", "2.0")] {
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
