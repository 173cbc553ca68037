//! A JSON-RPC calculator on stdin/stdout, one message per line (the framing
//! MCP servers use): `add`, `sub`, `mul` and `div` on integers, answered at
//! once, and `slow_add`, an async method that takes its time (its third
//! param, in milliseconds) and tells the client it started with a `log`
//! notification. Logs go to stderr: stdout carries only JSON-RPC. It exits,
//! with status 0, when stdin closes, after answering every call.
//!
//! ```text
//! cargo run --features server --example stdio_server
//! {"jsonrpc":"2.0","id":1,"method":"add","params":[2,3]}
//! {"jsonrpc":"2.0","id":1,"result":5}
//! {"jsonrpc":"2.0","id":2,"method":"div","params":[1,0]}
//! {"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"division by zero","data":{"dividend":1}}}
//! ```

use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::server::stream::serve_stdio;
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::json;

/// An arithmetic operation on two integers; `None` when the result does not
/// fit an `i64`.
fn binary(
    op: fn(i64, i64) -> Option<i64>,
) -> impl Fn(Call<'_, ()>) -> Result<rpcwire::dispatch::Done, RpcError> {
    move |call: Call<'_, ()>| {
        let (a, b): (i64, i64) = call.decode()?;
        match op(a, b) {
            Some(v) => call.reply.i64(v),
            None => Err(RpcError::new(-32000, "overflow").with_data(&json!({"operands": [a, b]}))),
        }
    }
}

fn calculator() -> Dispatcher<(), WithAsync> {
    Dispatcher::builder(())
        .method("add", binary(i64::checked_add))
        .method("sub", binary(i64::checked_sub))
        .method("mul", binary(i64::checked_mul))
        .method("div", |call: Call<'_, ()>| {
            let (a, b): (i64, i64) = call.decode()?;
            if b == 0 {
                return Err(
                    RpcError::new(-32000, "division by zero").with_data(&json!({"dividend": a}))
                );
            }
            call.reply.i64(
                a.checked_div(b)
                    .ok_or_else(|| RpcError::new(-32000, "overflow"))?,
            )
        })
        .async_method("slow_add", |call: AsyncCall<()>| async move {
            let (a, b, ms): (i64, i64, u64) = call.decode()?;
            eprintln!("stdio_server: slow_add({a}, {b}) for {ms} ms");
            call.ctx
                .notify("log", &json!({"message": "slow_add started", "ms": ms}));
            tokio::time::sleep(Duration::from_millis(ms)).await;
            a.checked_add(b)
                .ok_or_else(|| RpcError::new(-32000, "overflow"))
        })
        .build()
        .expect("method names are unique")
}

#[tokio::main]
async fn main() {
    eprintln!("stdio_server: ready, one JSON-RPC message per line on stdin");
    let limits = Limits::default();
    let framer = Lines::new().max_frame(limits.max_message_len);
    let code = match serve_stdio(calculator(), framer, limits, None, Shutdown::new()).await {
        Ok(reason) => {
            eprintln!("stdio_server: stopped ({reason:?})");
            0
        }
        // Its output closed (the client stopped reading), say.
        Err(e) => {
            eprintln!("stdio_server: {e}");
            1
        }
    };
    // At once: tokio reads stdin on a blocking thread, which the runtime
    // would wait for at its shutdown, for good while stdin stays open (a
    // client that closed only the server's output).
    std::process::exit(code)
}
