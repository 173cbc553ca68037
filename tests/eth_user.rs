//! A small Ethereum node server built only from the public API, as a new
//! user would write it: HTTP and WebSocket on one port
//! (`server::combined`), the `eth` decoders for params and `EthReply` for
//! results, `eth_subscribe("newHeads")` fed by a timer. Driven over
//! 127.0.0.1 by hyper's HTTP client and tokio-tungstenite.
#![cfg(all(feature = "eth", feature = "http", feature = "ws"))]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioExecutor;
use rpcwire::eth::{BlockId, BlockTag, EthParams, EthReply, U256};
use rpcwire::server::http::HttpService;
use rpcwire::server::subscriptions::Subscriptions;
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Shutdown, combined};
use rpcwire::{Call, Dispatcher, RpcError};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// Only a hang guard, never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

type State = ();

fn node() -> Dispatcher<State> {
    Dispatcher::builder(())
        .method("eth_chainId", |call: Call<'_, State>| {
            EthParams::new(call.params).finish()?;
            call.reply.quantity(1)
        })
        .method("eth_blockNumber", |call: Call<'_, State>| {
            EthParams::new(call.params).finish()?;
            call.reply.quantity(0x1b4)
        })
        .method("eth_getBalance", |call: Call<'_, State>| {
            let mut p = EthParams::new(call.params);
            let address = p.next_address("address")?;
            let block = p
                .next_block_id("blockNumber")?
                .unwrap_or(BlockId::Tag(BlockTag::Latest));
            p.finish()?;
            let wei = match block {
                BlockId::Tag(BlockTag::Latest) => U256::from(address[19]),
                _ => U256::MAX,
            };
            call.reply.quantity_u256(wei)
        })
        .method("eth_call", |call: Call<'_, State>| {
            let mut p = EthParams::new(call.params);
            let tx = p.next_call_request("transaction")?;
            let block = p.next_block_id("block")?;
            p.finish()?;
            let echo = json!({
                "from": tx.from()?.map(|a| a.to_string()),
                "to": tx.to()?.map(|a| a.to_string()),
                "gas": tx.gas()?,
                "value": tx.value()?.map(|v| format!("{v:#x}")),
                "input": tx.input()?.map(|h| format!("{}", rpcwire::eth::Bytes::from(h.to_vec()))),
                "block": block.map(|b| format!("{b:?}")),
            });
            Ok::<_, RpcError>(echo)
        })
        .method("eth_getLogs", |call: Call<'_, State>| {
            let mut p = EthParams::new(call.params);
            let filter = p.next_log_filter("filter")?;
            p.finish()?;
            filter.from_block()?;
            filter.to_block()?;
            filter.block_hash()?;
            for a in filter.addresses()? {
                a?;
            }
            for t in filter.topics()? {
                t?;
            }
            call.reply.raw(b"[]")
        })
        .method("eth_sendRawTransaction", |call: Call<'_, State>| {
            let mut p = EthParams::new(call.params);
            let tx = p.next_bytes_in("transaction", call.arena)?;
            p.finish()?;
            let mut hash = [0u8; 32];
            hash[..tx.len().min(32)].copy_from_slice(&tx[..tx.len().min(32)]);
            call.reply.hash(&hash.into())
        })
        .method("eth_subscribe", |call: Call<'_, State>| {
            let mut p = EthParams::new(call.params);
            // Text, escapes decoded: `"new\u0048eads"` is `"newHeads"`.
            let kind = p.required("subscriptionType")?.str_in(call.arena)?;
            p.finish()?;
            if kind != "newHeads" {
                return Err(RpcError::invalid_params("unsupported subscription"));
            }
            let (id, sink) = Subscriptions::of(call.ctx)?.subscribe()?;
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(Duration::from_millis(20));
                for number in 1u64.. {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        _ = sink.closed() => break,
                    }
                    if sink
                        .send(&json!({ "number": format!("{number:#x}") }))
                        .is_err()
                    {
                        break;
                    }
                }
            });
            Ok(id)
        })
        .method("eth_unsubscribe", |call: Call<'_, State>| {
            let (id,): (&str,) = call.decode()?;
            Ok::<_, RpcError>(Subscriptions::of(call.ctx)?.unsubscribe(id))
        })
        .build()
        .unwrap()
}

struct Node {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start() -> Node {
        let d = node();
        let (limits, shutdown) = (Limits::default(), Shutdown::new());
        let http = HttpService::new(d.clone(), &limits, None);
        let ws = WsServer::new(d)
            .limits(limits.clone())
            .shutdown(shutdown.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = shutdown.clone();
        let task = tokio::spawn(combined::serve(listener, http, ws, limits, None, s));
        Node {
            addr,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the server stopped")
            .unwrap();
    }

    async fn post(&self, body: &str) -> Value {
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http::<Full<Bytes>>();
        let req = http::Request::post(format!("http://{}/", self.addr))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = tokio::time::timeout(PATIENCE, client.request(req))
            .await
            .unwrap()
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&body));
        })
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(addr: SocketAddr) -> Ws {
    tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap()
        .0
}

async fn ws_next(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("a message in time")
            .expect("open")
            .unwrap();
        if let Message::Text(t) = m {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// The reply to `request` (notifications before it skipped).
async fn ws_call(ws: &mut Ws, request: &str) -> Value {
    ws.send(Message::text(request.to_owned())).await.unwrap();
    loop {
        let v = ws_next(ws).await;
        if v.get("id").is_some() {
            return v;
        }
    }
}

fn req(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

const A: &str = "0x00000000000000000000000000000000000000ff";
const H: &str = "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b";

/// The node answers over HTTP and, on the same port, over WebSocket with
/// `newHeads` notifications until it is unsubscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_port_serves_http_and_websocket_subscriptions() {
    let node = Node::start().await;
    let result = |v: Value| v["result"].clone();
    assert_eq!(result(node.post(&req("eth_chainId", "[]")).await), "0x1");
    assert_eq!(
        result(node.post(&req("eth_blockNumber", "null")).await),
        "0x1b4"
    );
    let balance = |block: &str| req("eth_getBalance", &format!(r#"["{A}",{block}]"#));
    assert_eq!(result(node.post(&balance(r#""latest""#)).await), "0xff");
    assert_eq!(
        result(
            node.post(&balance(&format!(
                r#"{{"blockHash":"{H}","requireCanonical":true}}"#
            )))
            .await
        ),
        format!("0x{}", "f".repeat(64))
    );
    assert_eq!(
        result(
            node.post(&req(
                "eth_call",
                &format!(r#"[{{"to":"{A}","gas":"0x5208","input":"0x70a08231"}},"0x10"]"#)
            ))
            .await
        ),
        json!({"from": null, "to": A, "gas": 21000,
               "value": null, "input": "0x70a08231", "block": "Number(16)"})
    );
    assert_eq!(
        result(
            node.post(&req(
                "eth_getLogs",
                r#"[{"fromBlock":"0x1","toBlock":"latest","topics":[null]}]"#
            ))
            .await
        ),
        json!([])
    );
    assert_eq!(
        result(
            node.post(&req("eth_sendRawTransaction", r#"["0x02f8"]"#))
                .await
        ),
        format!("0x02f8{}", "0".repeat(60))
    );
    // Plain HTTP cannot push: geth's -32601.
    let e = node.post(&req("eth_subscribe", r#"["newHeads"]"#)).await;
    assert_eq!(e["error"]["code"], -32601, "{e}");

    let mut ws = ws_connect(node.addr).await;
    // The kind written with an escape, as `json.dumps` may: the same text.
    let sub = ws_call(&mut ws, &req("eth_subscribe", r#"["new\u0048eads"]"#)).await;
    let id = sub["result"].as_str().expect("an id").to_owned();
    let mut last = 0;
    for _ in 0..2 {
        let n = ws_next(&mut ws).await;
        assert_eq!(n["method"], "eth_subscription", "{n}");
        assert_eq!(n["params"]["subscription"], id.as_str());
        let number = n["params"]["result"]["number"].as_str().unwrap();
        let number = u64::from_str_radix(&number[2..], 16).unwrap();
        assert!(number > last);
        last = number;
    }
    let unsubscribe = req("eth_unsubscribe", &format!(r#"["{id}"]"#));
    assert_eq!(ws_call(&mut ws, &unsubscribe).await["result"], true);
    // An id that is not open is `false`, not an error (as
    // `Subscriptions::unsubscribe` documents; geth answers -32000
    // "subscription not found" instead).
    assert_eq!(ws_call(&mut ws, &unsubscribe).await["result"], false);
    assert_eq!(
        ws_call(&mut ws, &req("eth_unsubscribe", r#"["0x1"]"#)).await["result"],
        false
    );
    // Nothing for the closed subscription after its unsubscribe reply.
    let reply = ws_call(&mut ws, &req("eth_blockNumber", "[]")).await;
    assert_eq!(reply["result"], "0x1b4", "{reply}");
    drop(ws);
    node.stop().await;
}

/// `data` of the -32602 a bad param gets.
async fn refusal(node: &Node, method: &str, params: &str) -> Value {
    let r = node.post(&req(method, params)).await;
    assert_eq!(r["error"]["code"], -32602, "{method} {params}: {r}");
    assert_eq!(r["error"]["message"], "Invalid params");
    r["error"]["data"].clone()
}

/// Each bad param is -32602 with `data` naming the parameter (and the
/// member of an object param), the reason and what was received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_params_name_what_to_fix() {
    let node = Node::start().await;
    let z64 = "0".repeat(64);
    let cases: Vec<(&str, String, Value)> = vec![
        (
            "eth_getBalance",
            format!(r#"["{A}","0x"]"#),
            json!({"param":"blockNumber","position":1,"reason":"empty quantity (zero is 0x0)","received":"0x"}),
        ),
        (
            "eth_getBalance",
            format!(r#"["{A}","0x01"]"#),
            json!({"param":"blockNumber","position":1,"reason":"leading zeros","received":"0x01"}),
        ),
        (
            "eth_getBalance",
            format!(r#"["{A}",{{"blockHash":"{H}","requireCanonical":"yes"}}]"#),
            json!({"param":"blockNumber","position":1,"field":"requireCanonical","reason":"not a boolean","received":"yes"}),
        ),
        (
            "eth_getBalance",
            r#"["0xabc"]"#.to_owned(),
            json!({"param":"address","position":0,"reason":"odd number of hex digits","received":"0xabc"}),
        ),
        (
            "eth_getBalance",
            "[]".to_owned(),
            json!({"param":"address","position":0,"reason":"missing value"}),
        ),
        (
            "eth_getBalance",
            format!(r#"["{A}","latest",5]"#),
            json!({"position":2,"reason":"too many params","received":5}),
        ),
        (
            "eth_getBalance",
            format!(r#"["{A}",12]"#),
            json!({"param":"blockNumber","position":1,"reason":"not a block tag, number, hash or EIP-1898 object","received":12}),
        ),
        (
            "eth_call",
            format!(r#"[{{"to":"{A}","value":"0x1{z64}"}}]"#),
            json!({"param":"transaction","position":0,"field":"value","reason":"more than 256 bits",
                "received":format!("0x1{}…", &z64[..61]),"receivedLength":69}),
        ),
        (
            "eth_getLogs",
            r#"[{"fromBlock":"0x01"}]"#.to_owned(),
            json!({"param":"filter","position":0,"field":"fromBlock","reason":"leading zeros","received":"0x01"}),
        ),
        (
            "eth_sendRawTransaction",
            r#"["0x02f"]"#.to_owned(),
            json!({"param":"transaction","position":0,"reason":"odd number of hex digits","received":"0x02f"}),
        ),
        (
            "eth_subscribe",
            "[7]".to_owned(),
            json!({"param":"subscriptionType","position":0,"reason":"not a string","received":7}),
        ),
        (
            "eth_subscribe",
            r#"["\ud800"]"#.to_owned(),
            json!({"param":"subscriptionType","position":0,"reason":"invalid escape","received":"\\ud800"}),
        ),
        (
            "eth_sendRawTransaction",
            "[2]".to_owned(),
            json!({"param":"transaction","position":0,"reason":"not a string","received":2}),
        ),
        // A number past f64's range is shown as a string of its text: as
        // it stood, serde_json refused the whole reply ("number out of
        // range"), a batch's too.
        (
            "eth_getBalance",
            format!(r#"["{A}",1e400]"#),
            json!({"param":"blockNumber","position":1,"reason":"not a block tag, number, hash or EIP-1898 object","received":"1e400"}),
        ),
        (
            "eth_call",
            format!(r#"[{{"to":"{A}","gas":[-2E308,1]}}]"#),
            json!({"param":"transaction","position":0,"field":"gas","reason":"not a string","received":"[-2E308,1]"}),
        ),
    ];
    for (method, params, want) in cases {
        assert_eq!(
            refusal(&node, method, &params).await,
            want,
            "{method} {params}"
        );
    }
    node.stop().await;
}

/// The writers give canonical QUANTITY text at the edges: `0x0`, no
/// leading zeros, all 64 digits of `U256::MAX`.
#[test]
fn writers_are_canonical_at_the_edges() {
    use rpcwire::eth::write;
    let q = |v: u128| {
        let mut out = Vec::new();
        write::quantity(&mut out, v);
        String::from_utf8(out).unwrap()
    };
    let q256 = |v: U256| {
        let mut out = Vec::new();
        write::quantity_u256(&mut out, &v);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(q(0), r#""0x0""#);
    assert_eq!(q(1 << 64), format!(r#""0x1{}""#, "0".repeat(16)));
    assert_eq!(q(u128::MAX), format!(r#""0x{}""#, "f".repeat(32)));
    assert_eq!(q256(U256::ZERO), r#""0x0""#);
    assert_eq!(
        q256(U256::from(1u8) << 128),
        format!(r#""0x1{}""#, "0".repeat(32))
    );
    assert_eq!(q256(U256::MAX), format!(r#""0x{}""#, "f".repeat(64)));
    let mut out = Vec::new();
    write::data(&mut out, &[]);
    assert_eq!(out, br#""0x""#);
    // Each reads back through alloy's own parser.
    for v in [U256::ZERO, U256::from(0x1b4u64), U256::MAX] {
        let text = q256(v);
        assert_eq!(serde_json::from_str::<U256>(&text).unwrap(), v);
    }
}

/// A misspelt member of an EIP-1898 block object is named in `received`;
/// the error showed the member's value (the hash), which says nothing of
/// what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_block_object_member_is_named() {
    let node = Node::start().await;
    let data = refusal(
        &node,
        "eth_getBalance",
        &format!(r#"["{A}",{{"blockHsh":"{H}"}}]"#),
    )
    .await;
    assert_eq!(
        data,
        json!({"param":"blockNumber","position":1,"reason":"unknown member","received":"blockHsh"})
    );
    // The same through the general decoder (a block id that is not the
    // next parameter read in one pass).
    let arena = rpcwire::bumpalo::Bump::new();
    let msg = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":[{{"requireCanonical":false,"block\u0048ash":"{H}","nope":1}}]}}"#
    );
    let p = rpcwire::parse(msg.as_bytes(), &arena)
        .unwrap()
        .into_single()
        .unwrap()
        .request()
        .unwrap()
        .params()
        .unwrap();
    use rpcwire::eth::EthValue;
    let e = p.nth(0).unwrap().block_id().unwrap_err();
    assert_eq!(e.reason(), "unknown member");
    assert_eq!(e.received().unwrap().as_json(), r#""nope""#);
    node.stop().await;
}

/// `input` and `data` both set and different: the error names the member
/// it shows (`data`); it named only the parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differing_input_and_data_name_the_member() {
    let node = Node::start().await;
    let data = refusal(
        &node,
        "eth_call",
        &format!(r#"[{{"to":"{A}","input":"0xab","data":"0xcd"}}]"#),
    )
    .await;
    assert_eq!(
        data,
        json!({"param":"transaction","position":0,"field":"data",
               "reason":"data and input both set and different","received":"0xcd"})
    );
    node.stop().await;
}

/// Extra params to a handler that decodes a tuple (`eth_unsubscribe` as
/// the subscriptions docs write it) say so; the reason was serde_json's
/// "trailing characters", which names nothing a client sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_params_to_a_decoded_tuple_say_too_many() {
    let node = Node::start().await;
    let data = refusal(&node, "eth_unsubscribe", r#"["0x1",2,3]"#).await;
    assert_eq!(
        data["reason"], "too many params: 3 given, at most 1 expected",
        "{data}"
    );
    // A missing one still reads as before.
    let data = refusal(&node, "eth_unsubscribe", "[]").await;
    assert_eq!(
        data["reason"], "invalid length 0, expected a tuple of size 1",
        "{data}"
    );
    node.stop().await;
}

/// A decoded block id serializes back to its wire form, which decodes to
/// the same id: a gateway that forwards or echoes one keeps what the
/// client asked for (EIP-1898's `requireCanonical` included). Before, a
/// `BlockId` had no written form at all.
#[test]
fn block_ids_write_back_their_wire_form() {
    use rpcwire::eth::EthValue;
    let hash = format!("0x{}", "ab".repeat(32));
    let cases = [
        (
            r#""latest""#.to_string(),
            r#""latest""#.to_string(),
            "latest",
        ),
        (r#""0x1b4""#.into(), r#""0x1b4""#.into(), "0x1b4"),
        (
            r#"{"blockNumber":"0x10"}"#.into(),
            r#""0x10""#.into(),
            "0x10",
        ),
        (
            format!(r#""{hash}""#),
            format!(r#""{hash}""#),
            hash.as_str(),
        ),
        (
            format!(r#"{{"blockHash":"{hash}"}}"#),
            format!(r#""{hash}""#),
            hash.as_str(),
        ),
        (
            format!(r#"{{"requireCanonical":false,"blockHash":"{hash}"}}"#),
            format!(r#"{{"blockHash":"{hash}","requireCanonical":false}}"#),
            hash.as_str(),
        ),
    ];
    let decode = |wire: &str| {
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":[{wire}]}}"#);
        let arena = rpcwire::bumpalo::Bump::new();
        let parsed = rpcwire::parse(msg.as_bytes(), &arena).unwrap();
        let request = parsed.into_single().unwrap().request().unwrap();
        request
            .params()
            .unwrap()
            .nth(0)
            .unwrap()
            .block_id()
            .unwrap()
    };
    for (wire, canonical, shown) in &cases {
        let id = decode(wire);
        let written = serde_json::to_string(&id).unwrap();
        assert_eq!(&written, canonical, "{wire}");
        assert_eq!(decode(&written), id, "{wire}");
        assert_eq!(id.to_string(), *shown, "{wire}");
    }
    // Numbers and tags alone write the same way.
    let n = rpcwire::eth::BlockNumberOrTag::Number(0);
    assert_eq!(serde_json::to_string(&n).unwrap(), r#""0x0""#);
    let t = rpcwire::eth::BlockNumberOrTag::Tag(BlockTag::Finalized);
    assert_eq!(serde_json::to_string(&t).unwrap(), r#""finalized""#);
}
