//! Runs one input through a dispatcher with a few real handlers and checks
//! the reply: nothing, or one well-formed JSON-RPC 2.0 reply (an object, or a
//! non-empty array of them). Used by the `dispatch` fuzz target and the
//! corpus replay.
#![allow(dead_code)]

use serde_json::Value;

pub fn dispatcher() -> rpcwire::Dispatcher<()> {
    use rpcwire::Call;
    methods(rpcwire::Dispatcher::builder(()))
        .method("later", |c: Call<'_, ()>| c.reply.str("later"))
        .build()
        .unwrap()
}

/// [`dispatcher`] with `later` async (its future is ready when first
/// polled): the engine's paths for batches with async entries, which must
/// give the same bytes.
#[cfg(feature = "async")]
pub fn async_twin() -> rpcwire::Dispatcher<(), rpcwire::dispatch::WithAsync> {
    use rpcwire::RpcError;
    use rpcwire::dispatch::AsyncCall;
    methods(rpcwire::Dispatcher::builder(()))
        .async_method("later", |_c: AsyncCall<()>| async {
            Ok::<_, RpcError>("later")
        })
        .build()
        .unwrap()
}

/// The handlers both dispatchers share.
fn methods<K>(
    builder: rpcwire::dispatch::DispatcherBuilder<(), K>,
) -> rpcwire::dispatch::DispatcherBuilder<(), K> {
    use rpcwire::{Call, RpcError};
    builder
        .method("echo", |c: Call<'_, ()>| match c.param(0) {
            Some(v) => c.reply.raw_json(v),
            None => c.reply.null(),
        })
        .method("sum", |c: Call<'_, ()>| {
            let xs: Vec<f64> = c.decode()?;
            c.reply.json(&xs.iter().sum::<f64>())
        })
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.str("0x1b4"))
        .method("name", |c: Call<'_, ()>| {
            let (s,): (&str,) = c.decode()?;
            c.reply.str(s)
        })
        .method("get", |c: Call<'_, ()>| {
            let v = c
                .params
                .and_then(|p| p.get("key"))
                .ok_or_else(|| RpcError::invalid_params("need key"))?;
            c.reply.raw_json(v)
        })
        .method("fail", |_c: Call<'_, ()>| {
            Err::<(), _>(RpcError::new(-32000, "no").with_data(&[1, 2]))
        })
        .method("big", |c: Call<'_, ()>| {
            let (n,): (usize,) = c.decode()?;
            Ok::<_, RpcError>("x".repeat(n.min(1 << 20)))
        })
        .max_response_len(4096)
}

fn check_one(v: &Value) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("reply entry is not an object: {v}"));
    assert_eq!(o.get("jsonrpc"), Some(&Value::from("2.0")), "{v}");
    assert!(o.contains_key("id"), "{v}");
    assert!(
        matches!(o["id"], Value::Null | Value::Number(_) | Value::String(_)),
        "{v}"
    );
    assert_eq!(
        o.contains_key("result") as u8 + o.contains_key("error") as u8,
        1,
        "{v}"
    );
    if let Some(e) = o.get("error") {
        assert!(e["code"].is_i64(), "{v}");
        assert!(e["message"].is_string(), "{v}");
    }
}

/// The reply through the async path of `d`, which must be the same bytes:
/// every handler is ready when first polled, so one poll answers.
#[cfg(feature = "async")]
fn through_async<K: 'static>(d: &rpcwire::Dispatcher<(), K>, input: &[u8]) -> Vec<u8> {
    let input = bytes::Bytes::copy_from_slice(input);
    let mut out = b"prefix".to_vec();
    let mut conn = rpcwire::Connection::new();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    {
        let mut f = std::pin::pin!(d.handle_async(&input, &mut conn, &mut out));
        assert!(
            f.as_mut().poll(&mut cx).is_ready(),
            "handlers that are ready at once need no awaiting"
        );
    }
    out
}

pub fn check(d: &rpcwire::Dispatcher<()>, input: &[u8]) {
    let mut conn = rpcwire::Connection::new();
    let mut out = b"prefix".to_vec();
    let wrote = d.handle(input, &mut conn, &mut out);
    #[cfg(feature = "async")]
    {
        assert_eq!(
            through_async(d, input),
            out,
            "sync and async dispatch differ on {:?}",
            String::from_utf8_lossy(input)
        );
        thread_local! {
            static TWIN: rpcwire::Dispatcher<(), rpcwire::dispatch::WithAsync> = async_twin();
        }
        let twin = TWIN.with(|twin| through_async(twin, input));
        assert_eq!(
            twin,
            out,
            "an async handler and a sync one differ on {:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert!(out.len() <= 6 + 4096, "the reply is within the size limit");
    assert_eq!(&out[..6], b"prefix", "what was in the buffer is kept");
    let reply = &out[6..];
    assert_eq!(wrote, !reply.is_empty());
    if reply.is_empty() {
        return;
    }
    // Ids are echoed byte for byte, so a reply can carry what `Value` cannot
    // hold (an unpaired surrogate escape in a string id): read it raw first.
    serde_json::from_slice::<&serde_json::value::RawValue>(reply).unwrap_or_else(|e| {
        panic!(
            "reply is not JSON ({e}): {}",
            String::from_utf8_lossy(reply)
        )
    });
    let Ok(v) = serde_json::from_slice::<Value>(reply) else {
        return;
    };
    match &v {
        Value::Array(items) => {
            assert!(!items.is_empty(), "an empty batch reply");
            items.iter().for_each(check_one);
        }
        other => check_one(other),
    }
}
