//! rpcwire's core demo (the gateway is the main one): a tiny
//! Ethereum-flavoured JSON-RPC node answering the kinds of messages real
//! clients send, with nothing else to install.
//!
//! ```text
//! cargo run --example demo
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use rpcwire::{Call, Connection, Dispatcher, RpcError};
use serde::Deserialize;

/// The node's state: a chain height that `evm_mine` advances.
struct Node {
    height: AtomicU64,
    chain_id: u64,
}

/// `eth_call`'s first param.
#[derive(Deserialize)]
struct CallObject<'a> {
    #[serde(borrow)]
    to: &'a str,
    #[serde(borrow, default)]
    data: Option<&'a str>,
}

fn dispatcher(node: Node) -> Dispatcher<Node> {
    Dispatcher::builder(node)
        .method("eth_chainId", |call: Call<'_, Node>| {
            Ok::<_, RpcError>(format!("{:#x}", call.state.chain_id))
        })
        .method("eth_blockNumber", |call: Call<'_, Node>| {
            Ok::<_, RpcError>(format!("{:#x}", call.state.height.load(Ordering::Relaxed)))
        })
        .method("evm_mine", |call: Call<'_, Node>| {
            call.state.height.fetch_add(1, Ordering::Relaxed);
            Ok::<_, RpcError>("0x0")
        })
        .method("eth_call", |call: Call<'_, Node>| {
            // Borrowed decoding: `to` and `data` point into the message (or,
            // written with escapes, into the per-message arena). The block
            // may be left out (`[{..}]`): a trailing `Option` reads as `None`.
            let (tx, _block): (CallObject, Option<&str>) = call.decode()?;
            if !tx.to.starts_with("0x") || tx.to.len() != 42 {
                return Err(RpcError::invalid_params("'to' must be a 20-byte address")
                    .with_data(&serde_json::json!({"field": "to", "received": tx.to})));
            }
            // Pretend every contract answers balanceOf with 1000.
            let selector = tx.data.unwrap_or("0x").get(..10).unwrap_or("0x");
            match selector {
                "0x70a08231" => call.reply.raw(
                    br#""0x00000000000000000000000000000000000000000000000000000000000003e8""#,
                ),
                _ => Err(RpcError::new(-32000, "execution reverted")),
            }
        })
        .build()
        .expect("method names are valid")
}

fn main() {
    let d = dispatcher(Node {
        height: AtomicU64::new(0x1b4),
        chain_id: 1,
    });
    let messages: &[(&str, &str)] = &[
        (
            "viem, no params",
            r#"{"jsonrpc":"2.0","id":0,"method":"eth_blockNumber"}"#,
        ),
        (
            "ethers v6 order",
            r#"{"method":"eth_chainId","params":[],"id":1,"jsonrpc":"2.0"}"#,
        ),
        (
            "web3.py eth_call",
            r#"{"jsonrpc": "2.0", "method": "eth_call", "params": [{"to": "0x6b175474e89094c44da98b954eedeac495271d0f", "data": "0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"}, "latest"], "id": "9f1c6a52-4d1e-4b7a-a8d5-0e5f3c2b1a90"}"#,
        ),
        (
            "viem eth_call, the block left out",
            r#"{"jsonrpc":"2.0","id":2,"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"}]}"#,
        ),
        (
            "a batch: mine (a notification), read, unknown, invalid",
            r#"[{"jsonrpc":"2.0","method":"evm_mine"},{"jsonrpc":"2.0","id":7,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":8,"method":"eth_getBalance"},{"jsonrpc":"1.0","id":9,"method":"eth_chainId"}]"#,
        ),
        (
            "bad params",
            r#"{"jsonrpc":"2.0","id":3,"method":"eth_call","params":[{"to":"0x12"},"latest"]}"#,
        ),
        (
            "an id beyond 2^64, echoed byte for byte",
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"eth_chainId"}"#,
        ),
        (
            "invalid JSON",
            r#"{"jsonrpc":"2.0","id":4,"method":"eth_chainId""#,
        ),
        (
            "only notifications: no reply at all",
            r#"[{"jsonrpc":"2.0","method":"evm_mine"}]"#,
        ),
    ];
    // One connection (its per-message arena) and one output buffer, reused:
    // steady state allocates nothing.
    let mut conn = Connection::new();
    let mut out = Vec::new();
    for (what, input) in messages {
        out.clear();
        let replied = d.handle(input.as_bytes(), &mut conn, &mut out);
        println!("# {what}\n--> {input}");
        if replied {
            println!("<-- {}\n", String::from_utf8_lossy(&out));
        } else {
            println!("<-- (nothing)\n");
        }
    }
}
