//! The gateway's response cache: results that can never change answered
//! without reaching the upstream (final block numbers, block hashes,
//! transactions in final blocks, constants), everything else forwarded
//! every time; the byte bound; batches; the finalized block asked for at
//! most once per `--finalized-every`. A fake HTTP upstream on 127.0.0.1
//! counts what reaches it; counts are the assertions, sleeps only let a
//! refresh interval pass.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::*;
use crate::http_request::{json_200, post_close, read_request_buffered};

const ADDR: &str = "0x00000000000000000000000000000000000000ff";
/// A block hash the fake upstream knows.
fn hash(byte: u8) -> String {
    format!("0x{}", format!("{byte:02x}").repeat(32))
}

/// A fake node: answers by method and params, logs every request
/// (method, params); its finalized block can be moved (`u64::MAX`: it
/// answers `null`, as a node without finality does).
struct Node {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<(String, Value)>>>,
    finalized: Arc<AtomicU64>,
    /// Its answers for the finalized block wait until it has seen this
    /// many other requests (0: at once).
    hold: Arc<AtomicU64>,
    /// When set, the next block it answers is replaced at once (its era
    /// moves on; blocks of a later era carry `"era"`) and finalized.
    reorg_after_block: Arc<std::sync::atomic::AtomicBool>,
    /// When set, the next ask for the finalized block is never answered
    /// (its connection stays open, silent).
    stall_next_finality: Arc<std::sync::atomic::AtomicBool>,
}

impl Node {
    async fn start(finalized: u64) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let finalized = Arc::new(AtomicU64::new(finalized));
        let hold = Arc::new(AtomicU64::new(0));
        let reorg = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let era = Arc::new(AtomicU64::new(0));
        let (seen, fin, held) = (Arc::clone(&log), Arc::clone(&finalized), Arc::clone(&hold));
        let reorg_after_block = Arc::clone(&reorg);
        let stall = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stall_next_finality = Arc::clone(&stall);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (seen, fin, held) = (Arc::clone(&seen), Arc::clone(&fin), Arc::clone(&held));
                let (reorg, era) = (Arc::clone(&reorg), Arc::clone(&era));
                let stall = Arc::clone(&stall);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(body) = read_request_buffered(&mut s, &mut buf).await {
                        let v: Value = serde_json::from_slice(&body).unwrap();
                        let method = v["method"].as_str().unwrap().to_string();
                        let params = v.get("params").cloned().unwrap_or(Value::Null);
                        let finality = params == json!(["finalized", false]);
                        let mut block = None;
                        if !finality {
                            // Answered, then (with `reorg`) replaced and
                            // finalized, before it is logged: a held
                            // finality answer then says so.
                            let current = era.load(Ordering::SeqCst);
                            block = Some(answer(
                                &method,
                                &params,
                                fin.load(Ordering::SeqCst),
                                current,
                            ));
                            if method == "eth_getBlockByNumber"
                                && reorg.swap(false, Ordering::SeqCst)
                            {
                                era.fetch_add(1, Ordering::SeqCst);
                                fin.store(0x10, Ordering::SeqCst);
                            }
                        }
                        seen.lock().unwrap().push((method.clone(), params.clone()));
                        if finality && stall.swap(false, Ordering::SeqCst) {
                            std::future::pending::<()>().await;
                        }
                        if finality {
                            // Until the others came (10 s: a hang guard).
                            let others = || {
                                let log = seen.lock().unwrap();
                                log.iter()
                                    .filter(|(_, p)| p != &json!(["finalized", false]))
                                    .count()
                            };
                            for _ in 0..2000 {
                                if others() as u64 >= held.load(Ordering::SeqCst) {
                                    break;
                                }
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                        let mut reply = json!({"jsonrpc":"2.0","id":v["id"]});
                        let outcome = block.unwrap_or_else(|| {
                            answer(&method, &params, fin.load(Ordering::SeqCst), 0)
                        });
                        match outcome {
                            Ok(result) => reply["result"] = result,
                            Err(error) => reply["error"] = error,
                        }
                        let reply = reply.to_string();
                        let out = json_200(&reply);
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Node {
            addr,
            log,
            finalized,
            hold,
            reorg_after_block,
            stall_next_finality,
        }
    }

    /// Requests of `method` whose params are `params`.
    fn count(&self, method: &str, params: &Value) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(m, p)| m == method && p == params)
            .count()
    }

    /// The requests for the finalized block.
    fn finalized_asked(&self) -> usize {
        self.count("eth_getBlockByNumber", &json!(["finalized", false]))
    }

    fn total(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

/// The fake node's answers; blocks of an `era` past 0 say so.
fn answer(method: &str, params: &Value, finalized: u64, era: u64) -> Result<Value, Value> {
    let quantity = |n: u64| format!("{n:#x}");
    match method {
        "eth_getBlockByNumber" => match params[0].as_str().unwrap() {
            "finalized" if finalized == u64::MAX => Ok(Value::Null),
            "finalized" => Ok(json!({"number": quantity(finalized), "hash": hash(0xf1)})),
            "0x6" => Err(json!({"code":-32000,"message":"header not found"})),
            n => {
                // `params[2]`, when given, pads the block to that many bytes.
                let pad = params.get(2).and_then(Value::as_u64).unwrap_or(0);
                let mut block = json!({"number": n, "pad": "x".repeat(pad as usize)});
                if n == "0x3" {
                    block["hash"] = json!(hash(0xab));
                }
                if era > 0 {
                    block["era"] = json!(era);
                }
                Ok(block)
            }
        },
        // Block 3's hash is `hash(0xab)`; `hash(0xcd)` names a block 3
        // that was replaced (a side chain's); `hash(0xee)` one it does
        // not know (yet), for which calls by it are answered as geth
        // answers some of them then (`"0x"`, `[]`), not `null`.
        "eth_getBlockByHash" if params[0] == hash(0xee) => Ok(Value::Null),
        "eth_getBlockByHash" => Ok(json!({"hash": params[0], "number": "0x3"})),
        "eth_getBalance" => Ok(json!("0x1")),
        "eth_getLogs" => Ok(json!([])),
        "eth_getTransactionReceipt" => {
            let h = params[0].as_str().unwrap();
            Ok(match &h[h.len() - 2..] {
                "01" => json!({"transactionHash": h, "blockNumber": "0x5"}),
                "03" => json!({"transactionHash": h, "blockNumber": "0x20"}),
                _ => Value::Null,
            })
        }
        "web3_sha3" => Ok(json!(hash(0x5a))),
        // Block 5's second transaction timed out in its tracer (geth's
        // per-transaction deadline); other blocks are traced whole.
        "debug_traceBlockByNumber" => {
            let mut traces = vec![json!({"txHash": hash(0xa1), "result": {"gas": 21000}})];
            if params[0] == "0x5" {
                traces.push(json!({"txHash": hash(0xa2), "error": "execution timeout"}));
            }
            Ok(json!(traces))
        }
        _ => Ok(json!("0x0")),
    }
}

fn config(upstreams: &[SocketAddr]) -> config::Config {
    config::Config {
        upstreams: upstreams.iter().map(|u| format!("http://{u}")).collect(),
        timeout: Duration::from_secs(5),
        // Long: a test moves on only when it says so.
        finalized_every: Duration::from_secs(600),
        ..Default::default()
    }
}

/// A gateway in this process, and its forwarding state (the cache's
/// counts).
async fn start_app(config: config::Config) -> (Gateway, Arc<proxy::Gateway>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    let state = Arc::clone(app.gateway().expect("forwarding"));
    lock(&STATES).push((addr, Arc::clone(&state)));
    tokio::spawn(app.run(listener, config.limits(), shutdown.clone()));
    (Gateway { addr, shutdown }, state)
}

/// The gateways started, by address, for [`post`] to settle.
static STATES: Mutex<Vec<(SocketAddr, Arc<proxy::Gateway>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits for the gateway's task learning the finalized block, if one runs:
/// answers do not wait for it, and each test's next call should see what
/// it learnt (10 s: a hang guard).
async fn settle(state: &proxy::Gateway) {
    let Some(cache) = &state.cache else {
        return;
    };
    for _ in 0..2000 {
        if !cache.finality.is_learning() && cache.hashes.learning() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the finalized block was still being learnt after 10 s");
}

/// POSTs `body`; the reply's body, as sent (a `200`), once the gateway
/// learnt what the call made it ask ([`settle`]).
async fn post(addr: SocketAddr, body: &str) -> String {
    let (status, body) = post_close(addr, body).await;
    assert_eq!(status, 200, "{body}");
    let state = lock(&STATES)
        .iter()
        .rev()
        .find(|(a, _)| *a == addr)
        .map(|(_, s)| Arc::clone(s));
    if let Some(state) = state {
        settle(&state).await;
    }
    body
}

/// Calls `method` with `params` under `id`; the reply as sent.
async fn rpc(addr: SocketAddr, id: Value, method: &str, params: &Value) -> String {
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
    post(addr, &body.to_string()).await
}

/// One call at a block, so that the gateway learns the finalized block: a
/// result is kept only when its block was known final before the call.
async fn learn_finality(addr: SocketAddr) {
    let params = json!(["0x1", false]);
    rpc(addr, json!("learn"), "eth_getBlockByNumber", &params).await;
}

/// A second identical call at a final block is answered without reaching
/// the upstream, with its own id, byte for byte the reply a forward gives.
#[tokio::test]
async fn a_final_block_is_answered_from_the_cache_with_the_callers_id() {
    let node = Node::start(0x10).await;
    let (gw, state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let params = json!(["0x5", false]);
    let first = rpc(gw.addr, json!(1), "eth_getBlockByNumber", &params).await;
    assert_eq!(
        first,
        r#"{"jsonrpc":"2.0","id":1,"result":{"number":"0x5","pad":""}}"#
    );
    let second = rpc(gw.addr, json!("two"), "eth_getBlockByNumber", &params).await;
    assert_eq!(
        second,
        r#"{"jsonrpc":"2.0","id":"two","result":{"number":"0x5","pad":""}}"#
    );
    assert_eq!(node.count("eth_getBlockByNumber", &params), 1);
    assert_eq!(node.finalized_asked(), 1);
    // EIP-1898's number form is a number.
    for params in [json!([ADDR, "0x0"]), json!([ADDR, {"blockNumber": "0x7"}])] {
        for id in 0..3 {
            rpc(gw.addr, json!(id), "eth_getBalance", &params).await;
        }
        assert_eq!(node.count("eth_getBalance", &params), 1, "{params}");
    }
    // Block 0x7 and 0 are under the known finalized block: not asked again.
    assert_eq!(node.finalized_asked(), 1);
    let stats = state.cache.as_ref().unwrap().stats();
    assert_eq!((stats.entries, stats.hits), (3, 5));
}

/// Moving tags and an absent block param reach the upstream every time,
/// and cost no finalized-block request.
#[tokio::test]
async fn moving_tags_and_absent_blocks_always_reach_the_upstream() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    let calls = [
        ("eth_getBalance", json!([ADDR, "latest"])),
        ("eth_getBalance", json!([ADDR, "safe"])),
        ("eth_getBalance", json!([ADDR, "pending"])),
        ("eth_getBalance", json!([ADDR, "finalized"])),
        // With history expiry, the first block kept: it moves.
        ("eth_getBalance", json!([ADDR, "earliest"])),
        (
            "eth_getLogs",
            json!([{"fromBlock": "earliest", "toBlock": "0x2"}]),
        ),
        ("eth_getBalance", json!([ADDR])),
        ("eth_getBlockByNumber", json!(["latest", false])),
        ("eth_call", json!([{"to": ADDR}])),
        // An open range ends at `latest`.
        ("eth_getLogs", json!([{"fromBlock": "0x1"}])),
        (
            "eth_getLogs",
            json!([{"fromBlock": "latest", "toBlock": "0x2"}]),
        ),
        // Params the decoders refuse: forwarded, the upstream judges.
        ("eth_getBalance", json!([ADDR, "0x01"])),
        ("eth_getBlockByNumber", json!(["Latest", false])),
        // Not in the catalogue: never.
        ("vendor_getThing", json!(["0x1"])),
        // Never, by the catalogue.
        ("eth_blockNumber", json!([])),
    ];
    for (method, params) in &calls {
        for id in 0..2 {
            rpc(gw.addr, json!(id), method, params).await;
        }
        assert_eq!(node.count(method, params), 2, "{method} {params}");
    }
    assert_eq!(node.finalized_asked(), 0);
}

/// An answer given while its block could still be replaced is not kept,
/// although the block is final when asked a moment later: the node answers
/// block 0x5, then replaces and finalizes it before it answers the
/// finality request made alongside (which kept the replaced block's
/// answer for the process's life). The next calls get the final block's
/// answer, kept from the second call on.
#[tokio::test]
async fn an_answer_from_before_its_block_was_final_is_not_kept() {
    let node = Node::start(0x4).await;
    node.hold.store(1, Ordering::SeqCst);
    node.reorg_after_block.store(true, Ordering::SeqCst);
    let (gw, state) = start_app(config::Config {
        finalized_every: Duration::ZERO,
        ..config(&[node.addr])
    })
    .await;
    let params = json!(["0x5", false]);
    let replaced = rpc(gw.addr, json!(1), "eth_getBlockByNumber", &params).await;
    assert!(!replaced.contains("era"), "{replaced}");
    assert_eq!(state.cache.as_ref().unwrap().finality.known(), Some(0x10));
    for id in 2..5 {
        let reply = rpc(gw.addr, json!(id), "eth_getBlockByNumber", &params).await;
        assert!(reply.contains(r#""era":1"#), "{reply}");
    }
    assert_eq!(node.count("eth_getBlockByNumber", &params), 2);
}

/// A block above the finalized one reaches the upstream every time.
#[tokio::test]
async fn a_block_above_the_finalized_one_reaches_the_upstream() {
    let node = Node::start(0x10).await;
    let (gw, state) = start_app(config(&[node.addr])).await;
    for params in [json!(["0x11", false]), json!(["0x20", true])] {
        for id in 0..3 {
            rpc(gw.addr, json!(id), "eth_getBlockByNumber", &params).await;
        }
        assert_eq!(node.count("eth_getBlockByNumber", &params), 3, "{params}");
    }
    let range = json!([{"fromBlock": "0x1", "toBlock": "0x11"}]);
    for id in 0..2 {
        rpc(gw.addr, json!(id), "eth_getLogs", &range).await;
    }
    assert_eq!(node.count("eth_getLogs", &range), 2);
    // Within the interval the block is asked for once.
    assert_eq!(node.finalized_asked(), 1);
    assert_eq!(state.cache.as_ref().unwrap().stats().entries, 0);
    // A final range is kept.
    let range = json!([{"fromBlock": "0x1", "toBlock": "0x10"}]);
    for id in 0..2 {
        rpc(gw.addr, json!(id), "eth_getLogs", &range).await;
    }
    assert_eq!(node.count("eth_getLogs", &range), 1);
}

/// A result by block hash is kept once the hash is learnt to be the
/// canonical block of a final number (the call that names it first is
/// forwarded, and a task asks the node for the hash's number, then for
/// that number's hash): a hash the node does not know (yet), or one of a
/// block since replaced, is never kept; `requireCanonical: true` (a reorg
/// can make it an error) is not. Kept at once, an answer for a block the
/// node had not imported yet, or for one reorganised away, was served for
/// the process's life.
#[tokio::test]
async fn a_block_hash_is_cached_once_canonical_and_final() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let by = |h: u8| {
        [
            ("eth_getBlockByHash", json!([hash(h), false])),
            ("eth_getBalance", json!([ADDR, hash(h)])),
            ("eth_getBalance", json!([ADDR, {"blockHash": hash(h)}])),
            ("eth_getLogs", json!([{"blockHash": hash(h)}])),
        ]
    };
    // The first call by the hash is forwarded, and starts the learning
    // (which asks `eth_getBlockByHash` itself); the others find it known.
    for (k, (method, params)) in by(0xab).iter().enumerate() {
        for id in 0..3 {
            rpc(gw.addr, json!(id), method, params).await;
        }
        let forwarded = if k == 0 { 2 + 1 } else { 1 };
        assert_eq!(node.count(method, params), forwarded, "{method} {params}");
    }
    assert_eq!(
        node.count("eth_getBlockByNumber", &json!(["0x3", false])),
        1
    );
    // A replaced block and an unknown one: every call forwarded, each
    // hash's number asked once per call that finds it unknown.
    for h in [0xcd, 0xee] {
        for (method, params) in &by(h) {
            for id in 0..3 {
                rpc(gw.addr, json!(id), method, params).await;
            }
            let asked = usize::from(*method == "eth_getBlockByHash" && h == 0xcd);
            assert!(
                node.count(method, params) >= 3 + asked,
                "{method} {params}: {}",
                node.count(method, params)
            );
        }
    }
    // Block 3 was checked once for 0xcd (found replaced, not asked again).
    assert_eq!(
        node.count("eth_getBlockByNumber", &json!(["0x3", false])),
        2
    );
    let canonical = json!([ADDR, {"blockHash": hash(0xab), "requireCanonical": true}]);
    for id in 0..2 {
        rpc(gw.addr, json!(id), "eth_getBalance", &canonical).await;
    }
    assert_eq!(node.count("eth_getBalance", &canonical), 2);
    // A constant is kept at once.
    let sha = json!(["0x68656c6c6f"]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "web3_sha3", &sha).await;
    }
    assert_eq!(node.count("web3_sha3", &sha), 1);
}

/// A hash whose block is not final when it is learnt is kept once the
/// finalized block passes its number (the finalized block asked again
/// after `--finalized-every`), and not before.
#[tokio::test]
async fn a_block_hash_above_the_finalized_block_is_kept_once_final() {
    let node = Node::start(0x2).await;
    let (gw, state) = start_app(config::Config {
        finalized_every: Duration::from_millis(200),
        ..config(&[node.addr])
    })
    .await;
    learn_finality(gw.addr).await;
    let params = json!([ADDR, hash(0xab)]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_getBalance", &params).await;
    }
    assert_eq!(
        node.count("eth_getBalance", &params),
        3,
        "block 3 is not final"
    );
    assert_eq!(
        node.count("eth_getBlockByNumber", &json!(["0x3", false])),
        0
    );
    node.finalized.store(0x10, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(250)).await;
    // Learns the finalized block, then the hash's block, then keeps.
    for id in 0..4 {
        rpc(gw.addr, json!(id), "eth_getBalance", &params).await;
        settle(&state).await;
    }
    let forwarded = node.count("eth_getBalance", &params);
    assert!((4..=6).contains(&forwarded), "{forwarded}");
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_getBalance", &params).await;
    }
    assert_eq!(
        node.count("eth_getBalance", &params),
        forwarded,
        "kept by now"
    );
}

/// A receipt is cached once its block is final: not when `null`, not
/// while its block is above the finalized one; once the finalized block
/// passes it (asked again after `--finalized-every`), it is.
#[tokio::test]
async fn a_receipt_is_cached_once_its_block_is_final() {
    let node = Node::start(0x10).await;
    let (gw, state) = start_app(config::Config {
        finalized_every: Duration::from_millis(50),
        ..config(&[node.addr])
    })
    .await;
    let receipt = |n: u8| json!([format!("0x{}{n:02x}", "00".repeat(31))]);
    let method = "eth_getTransactionReceipt";
    // The first learns that block 0x5 is final; the second is kept.
    for id in 0..3 {
        rpc(gw.addr, json!(id), method, &receipt(1)).await;
    }
    assert_eq!(node.count(method, &receipt(1)), 2, "in block 0x5: final");
    for id in 0..3 {
        let reply = rpc(gw.addr, json!(id), method, &receipt(2)).await;
        assert!(reply.contains(r#""result":null"#), "{reply}");
    }
    assert_eq!(node.count(method, &receipt(2)), 3, "null: never kept");
    for id in 0..3 {
        rpc(gw.addr, json!(id), method, &receipt(3)).await;
    }
    assert_eq!(
        node.count(method, &receipt(3)),
        3,
        "in block 0x20: not final"
    );
    // The chain finalizes block 0x20; once the interval passed, the next
    // call learns it, and the one after it keeps the receipt.
    node.finalized.store(0x30, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(120)).await;
    for id in 0..3 {
        rpc(gw.addr, json!(id), method, &receipt(3)).await;
    }
    assert_eq!(node.count(method, &receipt(3)), 5);
    assert_eq!(state.cache.as_ref().unwrap().finality.known(), Some(0x30));
}

/// Errors are never kept; nor is anything while the finalized block is
/// unknown (a node answering `null` for it).
#[tokio::test]
async fn errors_and_unknown_finality_are_not_cached() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    let failing = json!(["0x6", false]);
    for id in 0..3 {
        let reply = rpc(gw.addr, json!(id), "eth_getBlockByNumber", &failing).await;
        assert!(reply.contains("header not found"), "{reply}");
    }
    assert_eq!(node.count("eth_getBlockByNumber", &failing), 3);

    let node = Node::start(u64::MAX).await;
    let (gw, state) = start_app(config(&[node.addr])).await;
    let params = json!(["0x1", false]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_getBlockByNumber", &params).await;
    }
    assert_eq!(node.count("eth_getBlockByNumber", &params), 3);
    // Asked once: a failed ask stands for the interval too.
    assert_eq!(node.finalized_asked(), 1);
    assert_eq!(state.cache.as_ref().unwrap().stats().entries, 0);
}

/// `--cache-bytes 0` caches nothing and asks for no finalized block.
#[tokio::test]
async fn cache_bytes_zero_caches_nothing() {
    let parsed = config::Config::from_args(
        ["--cache-bytes", "0", "--finalized-every", "250"]
            .map(String::from)
            .into_iter(),
    )
    .unwrap();
    assert_eq!(parsed.cache_bytes, 0);
    assert_eq!(parsed.finalized_every, Duration::from_millis(250));
    assert_eq!(config::Config::default().cache_bytes, 64 << 20);
    assert!(config::USAGE.contains("--cache-bytes"));

    let node = Node::start(0x10).await;
    let (gw, state) = start_app(config::Config {
        cache_bytes: 0,
        ..config(&[node.addr])
    })
    .await;
    assert!(state.cache.is_none());
    let params = json!(["0x5", false]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_getBlockByNumber", &params).await;
    }
    let by_hash = json!([hash(0xab), false]);
    for id in 0..2 {
        rpc(gw.addr, json!(id), "eth_getBlockByHash", &by_hash).await;
    }
    assert_eq!(node.count("eth_getBlockByNumber", &params), 3);
    assert_eq!(node.count("eth_getBlockByHash", &by_hash), 2);
    assert_eq!(node.finalized_asked(), 0);
}

/// Filled past its bound, the cache evicts the least recently used
/// entries: its byte count stays under the limit, an evicted call reaches
/// the upstream again, a recent one does not; a result past a sixteenth of
/// the bound is not kept.
#[tokio::test]
async fn the_byte_bound_holds() {
    let node = Node::start(0x1000).await;
    let limit = 32 * 1024;
    let (gw, state) = start_app(config::Config {
        cache_bytes: limit,
        ..config(&[node.addr])
    })
    .await;
    let cache = state.cache.as_ref().unwrap();
    let block = |n: u64| json!([format!("{n:#x}"), false, 500]);
    for n in 1..=200u64 {
        rpc(gw.addr, json!(n), "eth_getBlockByNumber", &block(n)).await;
        let stats = cache.stats();
        assert!(stats.bytes <= limit, "{} bytes past {limit}", stats.bytes);
    }
    let stats = cache.stats();
    assert!(
        stats.entries < 200 && stats.entries > 10,
        "{}",
        stats.entries
    );
    // The latest is kept, the first was evicted.
    rpc(gw.addr, json!(0), "eth_getBlockByNumber", &block(200)).await;
    assert_eq!(node.count("eth_getBlockByNumber", &block(200)), 1);
    rpc(gw.addr, json!(0), "eth_getBlockByNumber", &block(1)).await;
    assert_eq!(node.count("eth_getBlockByNumber", &block(1)), 2);
    // Past a sixteenth (2 KiB): forwarded every time.
    let large = json!(["0x1", false, 4096]);
    for id in 0..2 {
        rpc(gw.addr, json!(id), "eth_getBlockByNumber", &large).await;
    }
    assert_eq!(node.count("eth_getBlockByNumber", &large), 2);
}

/// Lookups refresh an entry's place: the least recently *used* goes
/// first, and the bound (keys, values, the per-entry overhead and the
/// tables that find them) holds.
#[test]
fn the_least_recently_used_entry_goes_first() {
    let limit = 16 * 1024;
    let c = cache::Cache::new(limit, Duration::ZERO);
    let value = vec![b'v'; 500];
    let key = |n: usize| format!("k{n:02}").into_bytes();
    // Filled until an insert evicts: k00, the least recently used, goes.
    let mut n = 0;
    loop {
        c.insert(key(n), &value);
        assert!(c.stats().bytes <= limit, "{}", c.stats().bytes);
        if c.stats().entries == n {
            break;
        }
        n += 1;
    }
    assert!(n > 10, "{n} entries of 600 bytes in 16 KiB");
    assert!(c.get(&key(0)).is_none(), "k00 was the least recently used");
    assert!(c.get(&key(1)).is_some());
    c.insert(key(n + 1), &value);
    let stats = c.stats();
    assert!(
        stats.entries == n && stats.bytes <= limit,
        "{}",
        stats.bytes
    );
    assert!(c.get(&key(2)).is_none(), "k02 was, once k01 was read");
    assert!(c.get(&key(1)).is_some() && c.get(&key(n + 1)).is_some());
    // The same key again changes nothing.
    c.insert(key(n + 1), &value);
    assert_eq!(c.stats().bytes, stats.bytes);
    // Past a sixteenth: not kept.
    c.insert(key(n + 2), &vec![b'v'; limit / 16]);
    assert!(c.get(&key(n + 2)).is_none());
}

/// Reading a transaction's block from its result, and the key.
#[test]
fn transaction_blocks_and_keys() {
    assert_eq!(
        cache::block_of(br#"{"blockNumber":"0x10","x":[1]}"#),
        Some(16)
    );
    assert_eq!(cache::block_of(br#"{"blockNumber":16}"#), Some(16));
    assert_eq!(cache::block_of(br#"{"blockNumber":null}"#), None);
    assert_eq!(cache::block_of(br#"{"blockNumber":"0x010"}"#), None);
    assert_eq!(cache::block_of(b"null"), None);
    assert_eq!(cache::block_of(br#""0x02f8""#), None);
    assert_ne!(
        cache::key("eth_getBalance", Some(br#"["0x1"]"#)),
        cache::key("eth_getBalance", Some(br#"[ "0x1" ]"#)),
        "no canonicalisation: the bytes as sent"
    );
    assert_ne!(
        cache::key("web3_sha3", None),
        cache::key("web3_sha3", Some(b""))
    );
}

/// A batch mixing a cached and an uncached entry: both answered, in
/// request order, with one upstream request (the uncached entry's).
#[tokio::test]
async fn a_batch_mixes_hits_and_forwards_in_order() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let cached = json!(["0x5", false]);
    rpc(gw.addr, json!(0), "eth_getBlockByNumber", &cached).await;
    let before = node.total();
    let fresh = json!([ADDR, "latest"]);
    let batch = json!([
        {"jsonrpc":"2.0","id":"a","method":"eth_getBlockByNumber","params":cached},
        {"jsonrpc":"2.0","id":"b","method":"eth_getBalance","params":fresh},
        {"jsonrpc":"2.0","id":"c","method":"eth_getBlockByNumber","params":cached},
    ]);
    let reply = post(gw.addr, &batch.to_string()).await;
    assert_eq!(
        reply,
        r#"[{"jsonrpc":"2.0","id":"a","result":{"number":"0x5","pad":""}},{"jsonrpc":"2.0","id":"b","result":"0x1"},{"jsonrpc":"2.0","id":"c","result":{"number":"0x5","pad":""}}]"#
    );
    assert_eq!(node.total() - before, 1);
    assert_eq!(node.count("eth_getBalance", &fresh), 1);
}

/// An answer in hand never waits for the finalized block's ask: a fresh
/// receipt (its block above the finalized one) and a call at a recent
/// block waited for that ask, made alongside under a lock, so a node slow
/// to answer it made answers that had arrived time out (-32002). The node
/// here holds that answer for 10 s; the gateway's timeout is 1 s. Found by
/// a review; the test failed before.
#[tokio::test]
async fn a_slow_finality_ask_delays_no_answer() {
    let node = Node::start(0x1).await;
    node.hold.store(u64::MAX, Ordering::SeqCst);
    let (gw, _state) = start_app(config::Config {
        timeout: Duration::from_secs(1),
        ..config(&[node.addr])
    })
    .await;
    let receipt = json!([format!("0x{}03", "00".repeat(31))]);
    for (method, params) in [
        ("eth_getTransactionReceipt", receipt),
        ("eth_getBlockByNumber", json!(["0x5", false])),
    ] {
        let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
        // Not `post`: that waits for what the gateway learns.
        let (status, reply) = post_close(gw.addr, &body.to_string()).await;
        assert_eq!(status, 200, "{reply}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert!(reply["result"].is_object(), "{method}: {reply}");
    }
    assert_eq!(node.finalized_asked(), 1);
}

/// An ask for the finalized block whose answer never comes ends at the
/// gateway's timeout and counts as an ask: the next, after
/// `--finalized-every`, is answered and final blocks are kept again. It
/// had no deadline: the task held the lock every later ask takes, and
/// caching of newly final blocks stopped until a restart. Found by a
/// review; the test failed before (the task still ran after 10 s).
#[tokio::test]
async fn a_finality_ask_never_answered_stops_no_caching() {
    let node = Node::start(0x10).await;
    node.stall_next_finality.store(true, Ordering::SeqCst);
    let (gw, _state) = start_app(config::Config {
        // Every forward of the test must finish within it too: room for a
        // busy host.
        timeout: Duration::from_secs(3),
        finalized_every: Duration::from_millis(100),
        ..config(&[node.addr])
    })
    .await;
    let params = json!(["0x5", false]);
    // Answered while the ask stalls; `post` waits until the task ends.
    let r = rpc(gw.addr, json!(1), "eth_getBlockByNumber", &params).await;
    assert!(r.contains(r#""number":"0x5""#), "{r}");
    assert_eq!(node.finalized_asked(), 1);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Asked again, answered: the block is known final from then on.
    rpc(gw.addr, json!(2), "eth_getBlockByNumber", &params).await;
    assert_eq!(node.finalized_asked(), 2);
    rpc(gw.addr, json!(3), "eth_getBlockByNumber", &params).await;
    assert_eq!(node.count("eth_getBlockByNumber", &params), 3);
    let r = rpc(gw.addr, json!(4), "eth_getBlockByNumber", &params).await;
    assert!(
        r.contains(r#""id":4"#) && r.contains(r#""number":"0x5""#),
        "{r}"
    );
    assert_eq!(
        node.count("eth_getBlockByNumber", &params),
        3,
        "a final block's second call after the stall is answered from the cache"
    );
}

/// A burst of cacheable calls while the finalized block is not known yet
/// asks for it once.
#[tokio::test]
async fn a_burst_asks_for_the_finalized_block_once() {
    let node = Node::start(0x100).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    let addr = gw.addr;
    blocks_at_once(addr, 10..50u64).await;
    assert_eq!(node.finalized_asked(), 1);
    // None of them was kept (asked before their blocks were known final);
    // the same calls again are, once each.
    for round in [2, 2] {
        for n in 10..50u64 {
            let params = json!([format!("{n:#x}"), false]);
            rpc(addr, json!(n), "eth_getBlockByNumber", &params).await;
            assert_eq!(node.count("eth_getBlockByNumber", &params), round);
        }
    }
    // Above it: asked no more within the interval.
    for id in 0..5 {
        rpc(
            addr,
            json!(id),
            "eth_getBlockByNumber",
            &json!(["0x200", false]),
        )
        .await;
    }
    assert_eq!(node.finalized_asked(), 1);
}

/// An answer from a fallback upstream (the first one down) is not kept:
/// nothing checks that it serves the same chain.
#[tokio::test]
async fn a_fallback_upstreams_answers_are_not_cached() {
    // An upstream that is down (refuses for as long as `down` lives).
    let down = refusing::refusing();
    let node = Node::start(0x10).await;
    let (gw, state) = start_app(config(&[down.addr, node.addr])).await;
    for params in [json!(["0x5", false]), json!([hash(0xab), false])] {
        let method = if params[0].as_str().unwrap().len() == 66 {
            "eth_getBlockByHash"
        } else {
            "eth_getBlockByNumber"
        };
        for id in 0..3 {
            let reply = rpc(gw.addr, json!(id), method, &params).await;
            assert!(reply.contains("result"), "{reply}");
        }
        // By hash, the learning of the hash asks too (only the first
        // upstream's answer is taken)
        // (once: the first upstream's failure is remembered for 2 s).
        let asked = if method == "eth_getBlockByHash" { 4 } else { 3 };
        assert_eq!(node.count(method, &params), asked, "{params}");
    }
    assert_eq!(state.cache.as_ref().unwrap().stats().entries, 0);
}

/// `eth_chainId` and `net_version` are answered locally after the first
/// upstream's answer, not a fallback's: a fallback's (the first upstream
/// down, perhaps another chain) was kept for the process's life, and
/// every wallet told that chain id. Answered by the fallback, each call
/// is forwarded again; once the first upstream answers, kept.
#[tokio::test]
async fn a_fallback_upstreams_chain_id_is_not_kept() {
    // An upstream that is down (refuses for as long as `down` lives).
    let down = refusing::refusing();
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[down.addr, node.addr])).await;
    for method in ["eth_chainId", "net_version"] {
        for id in 0..3 {
            let reply = rpc(gw.addr, json!(id), method, &json!([])).await;
            assert!(reply.contains("result"), "{reply}");
        }
        assert_eq!(node.count(method, &json!([])), 3, "{method}");
    }
    let (gw, _state) = start_app(config(&[node.addr])).await;
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_chainId", &json!([])).await;
    }
    assert_eq!(node.count("eth_chainId", &json!([])), 4);
}

/// `/metrics` shows the cache's hits, misses, entries and bytes.
#[tokio::test]
async fn metrics_show_the_cache() {
    let node = Node::start(0x10).await;
    let config = config::Config {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..config(&[node.addr])
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    let ops = Arc::clone(app.ops().unwrap());
    let state = Arc::clone(app.gateway().unwrap());
    tokio::spawn(app.run(listener, config.limits(), shutdown.clone()));
    let _gw = Gateway {
        addr,
        shutdown: shutdown.clone(),
    };
    learn_finality(addr).await;
    let params = json!(["0x5", false]);
    for id in 0..3 {
        rpc(addr, json!(id), "eth_getBlockByNumber", &params).await;
    }
    let text = ops.metrics().await;
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}: {text}"))
    };
    assert_eq!(sample("gateway_cache_hits_total"), 2.0);
    // The first call's and `learn_finality`'s.
    assert_eq!(sample("gateway_cache_misses_total"), 2.0);
    assert_eq!(sample("gateway_cache_entries"), 1.0);
    let entry = "eth_getBlockByNumber\0[\"0x5\",false]".len()
        + r#"{"number":"0x5","pad":""}"#.len()
        + cache::ENTRY_OVERHEAD;
    // The entry, and the tables that find it.
    let bytes = state.cache.as_ref().unwrap().stats().bytes;
    assert!(bytes > entry, "{bytes}");
    assert_eq!(sample("gateway_cache_bytes"), bytes as f64);
    assert!(text.contains("# TYPE gateway_cache_hits_total counter"));
    assert!(text.contains("# TYPE gateway_cache_bytes gauge"));
}

/// With `--finalized-every 0`, calls that waited while the finalized block
/// was asked for take that answer rather than each asking again in turn
/// (which queued every call behind one upstream request per call before
/// it). Twenty calls above the finalized block at once: one request for
/// it, held by the node until all twenty calls reached it.
#[tokio::test]
async fn calls_waiting_for_the_finalized_block_share_one_ask() {
    let node = Node::start(0x10).await;
    node.hold.store(20, Ordering::SeqCst);
    let (gw, _state) = start_app(config::Config {
        finalized_every: Duration::ZERO,
        ..config(&[node.addr])
    })
    .await;
    let addr = gw.addr;
    blocks_at_once(addr, 0x100..0x114u64).await;
    assert_eq!(node.finalized_asked(), 1);
    // A later call asks again (every 0 ms).
    rpc(
        addr,
        json!(0),
        "eth_getBlockByNumber",
        &json!(["0x200", false]),
    )
    .await;
    assert_eq!(node.finalized_asked(), 2);
}

/// The bound covers the heap the cache holds, not only its keys and
/// values: filled with many small entries (a balance: a key of about 70
/// bytes, a value of 5), past the bound many times over, the bytes
/// allocated and still held (entries, the slab of slots and the map,
/// both grown by doubling) stay within it.
#[test]
fn the_byte_bound_covers_the_heap_the_cache_holds() {
    let limit = 1 << 20;
    let (held, c) = counting_alloc::held_after(|| {
        let c = cache::Cache::new(limit, Duration::ZERO);
        for n in 0..60_000u32 {
            let params = format!(r#"["{ADDR}","{n:#x}"]"#);
            c.insert(
                cache::key("eth_getBalance", Some(params.as_bytes())),
                br#""0x1""#,
            );
        }
        c
    });
    let stats = c.stats();
    assert!(stats.bytes <= limit, "{} counted", stats.bytes);
    assert!(
        held as usize <= limit,
        "{held} bytes held for a bound of {limit} ({} entries, {} bytes counted)",
        stats.entries,
        stats.bytes
    );
    // Still a cache: thousands of small entries kept.
    assert!(stats.entries > 2000, "{}", stats.entries);
}

/// `eth_getBlockByNumber` for each block of `numbers` at once, each
/// answered with a result.
async fn blocks_at_once(addr: SocketAddr, numbers: std::ops::Range<u64>) {
    let mut calls = tokio::task::JoinSet::new();
    for n in numbers {
        calls.spawn(async move {
            let params = json!([format!("{n:#x}"), false]);
            rpc(addr, json!(n), "eth_getBlockByNumber", &params).await
        });
    }
    while let Some(reply) = calls.join_next().await {
        let reply = reply.unwrap();
        assert!(reply.contains("result"), "{reply}");
    }
}

/// A log filter is kept only when its members are all known, as written:
/// geth reads filters with Go's decoder, which matches member names
/// without regard to case and keeps the last of repeated ones, so
/// `{"toBlock":"0x2","ToBlock":"latest"}` ends at `latest` there (it was
/// kept as final, by `toBlock` alone). The same range without the extra
/// member is kept.
#[tokio::test]
async fn a_filter_with_a_member_the_node_may_read_otherwise_is_not_kept() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let odd = [
        json!([{"fromBlock": "0x1", "toBlock": "0x2", "ToBlock": "latest"}]),
        json!([{"fromBlock": "0x1", "toBlock": "0x2", "extra": 1}]),
    ];
    for params in &odd {
        for id in 0..3 {
            rpc(gw.addr, json!(id), "eth_getLogs", params).await;
        }
        assert_eq!(node.count("eth_getLogs", params), 3, "{params} was kept");
    }
    let plain = json!([{"fromBlock": "0x1", "toBlock": "0x2"}]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_getLogs", &plain).await;
    }
    assert_eq!(
        node.count("eth_getLogs", &plain),
        1,
        "a final range was not kept"
    );
}

/// `trace_filter`'s filter has no `blockHash` (erigon's, reth's: fromBlock,
/// toBlock, fromAddress, toAddress, after, count, mode): one given is
/// ignored by the node and the range is open to the head, so it is not
/// kept (it was kept at once, for good). Kept: a range of two numbers.
#[tokio::test]
async fn trace_filter_is_kept_by_its_range_only() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let by_hash = json!([{"blockHash": hash(0xab), "toAddress": [ADDR]}]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "trace_filter", &by_hash).await;
    }
    assert_eq!(node.count("trace_filter", &by_hash), 3, "kept by a hash");
    let by_range =
        json!([{"fromBlock": "0x1", "toBlock": "0x2", "toAddress": [ADDR], "count": 10}]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "trace_filter", &by_range).await;
    }
    assert_eq!(
        node.count("trace_filter", &by_range),
        1,
        "a final range was not kept"
    );
}

/// A first upstream that answers `eth_chainId` with `null` (a node that
/// does not know its chain id yet) is not believed for the process's life
/// (its `null` was kept and served to every client); the chain id that
/// follows is kept.
#[tokio::test]
async fn a_null_chain_id_is_not_kept() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&calls);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(body) = read_request_buffered(&mut s, &mut buf).await {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    // `null` first, then the chain id.
                    let result = match seen.fetch_add(1, Ordering::SeqCst) {
                        0 => Value::Null,
                        _ => json!("0x1"),
                    };
                    let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":result}).to_string();
                    if s.write_all(json_200(&reply).as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (gw, _state) = start_app(config(&[addr])).await;
    let first = rpc(gw.addr, json!(1), "eth_chainId", &json!([])).await;
    assert!(first.contains(r#""result":null"#), "{first}");
    for id in 2..5 {
        let next = rpc(gw.addr, json!(id), "eth_chainId", &json!([])).await;
        assert_eq!(
            next,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"0x1"}}"#)
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the chain id was not kept");
}

/// `eth_callMany`'s state context (erigon's `StateContext`, read by Go's
/// decoder: names matched without regard to case, the last of repeated
/// ones kept) is kept by its `blockNumber` only when its members are
/// exactly `blockNumber` and `transactionIndex`: with `BlockNumber` or a
/// second `blockNumber` naming `latest` it was kept as block 1's answer
/// for good. Found by a review.
#[tokio::test]
async fn a_state_context_the_node_may_read_as_latest_is_not_kept() {
    let node = Node::start(0x10).await;
    let (gw, _state) = start_app(config(&[node.addr])).await;
    learn_finality(gw.addr).await;
    let bundle = json!([{"transactions": []}]);
    for context in [
        r#"{"blockNumber":"0x1","BlockNumber":"latest"}"#,
        r#"{"blockNumber":"0x1","blockNumber":"latest"}"#,
    ] {
        let body = |id: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_callMany","params":[{bundle},{context}]}}"#
            )
        };
        let before = node.total();
        for id in 0..3 {
            post(gw.addr, &body(id)).await;
        }
        assert_eq!(node.total() - before, 3, "{context} was kept as block 1's");
    }
    let plain = json!([bundle, {"blockNumber": "0x1", "transactionIndex": 0}]);
    for id in 0..3 {
        rpc(gw.addr, json!(id), "eth_callMany", &plain).await;
    }
    assert_eq!(
        node.count("eth_callMany", &plain),
        1,
        "a final context was not kept"
    );
}

/// A block's traces with a transaction's entry in error (geth's
/// per-transaction tracer deadline, "execution timeout", in an answer that
/// succeeds) are not kept: a less busy node traces it whole. They were
/// kept for good, the block being final. Whole traces are kept. Found by a
/// review.
#[tokio::test]
async fn block_traces_with_a_transaction_in_error_are_not_kept() {
    let node = Node::start(0x10).await;
    let mut config = config(&[node.addr]);
    config.deny = Vec::new();
    let (gw, _state) = start_app(config).await;
    learn_finality(gw.addr).await;
    let tracer = json!({"tracer": "{result: function() { return 1; }, fault: function() {}}", "timeout": "100ms"});
    for (block, upstream_calls) in [("0x5", 3), ("0x4", 1)] {
        let params = json!([block, tracer]);
        for id in 0..3 {
            let reply = rpc(gw.addr, json!(id), "debug_traceBlockByNumber", &params).await;
            assert!(reply.contains("\"result\""), "{reply}");
        }
        assert_eq!(
            node.count("debug_traceBlockByNumber", &params),
            upstream_calls,
            "block {block}"
        );
    }
}
