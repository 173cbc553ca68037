//! The gateway's `--archive`: calls reading state at blocks older than the
//! full nodes keep (`--state-blocks`) go to the archive nodes, `earliest`
//! too; recent blocks, tags and every other method stay on the full nodes;
//! a call the full node answers with a missing-state error is retried once
//! on the archive, and no other error is; the head is asked once for a
//! burst and never without `--archive`. Fake HTTP nodes on 127.0.0.1 count
//! what reaches them; counts are the assertions. One test runs a real
//! anvil with `--prune-history` when the interop run installed it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::http_request::{json_200, post_close, read_request_buffered};

const ADDR: &str = "0x00000000000000000000000000000000000000ff";
/// The full node's head, and the blocks of state it keeps.
const HEAD: u64 = 1000;
const KEEP: u64 = 128;
/// What each fake answers a state call with: who answered.
const FULL: &str = "0xf";
const ARCHIVE: &str = "0xa";

/// A block hash: of an old block (its state gone from the full node), or
/// of a recent one.
fn old_hash() -> String {
    format!("0x{}", "0a".repeat(32))
}
fn recent_hash() -> String {
    format!("0x{}", "0b".repeat(32))
}

fn quantity(n: u64) -> String {
    format!("{n:#x}")
}

/// geth's error for state it no longer has (trie/errors.go).
fn missing_trie_node() -> Value {
    json!({
        "code": -32000,
        "message": "missing trie node 9c1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8 (path ) <nil>"
    })
}

/// An execution revert, as a node answers `eth_call` on a contract that
/// reverts: to pass through untouched.
fn reverted() -> Value {
    json!({"code": -32000, "message": "execution reverted", "data": "0x08c379a0"})
}

/// Errors of a call's execution whose words hold a missing-state phrase
/// (a contract's revert reason is its own text): `eth_call` with data
/// `0xdead<i>` gets the i-th. None says the state is gone.
fn execution_errors() -> Vec<Value> {
    vec![
        // geth's revert: code 3, its data.
        json!({"code": 3, "message": "execution reverted: missing trie node", "data": "0x08c379a0"}),
        json!({"code": -32000, "message": "execution reverted: missing trie node"}),
        // A node's own wording of a revert with a custom reason.
        json!({"code": 3, "message": "reverted: missing trie node 0xab", "data": "0x"}),
        json!({"code": -32000, "message": "VM Exception while processing transaction: revert missing trie node"}),
        // Code 3 is an execution's, whatever its message.
        json!({"code": 3, "message": "missing trie node 9c1a (path ) <nil>", "data": "0x"}),
        // The phrase, but not where the nodes put it.
        json!({"code": -32000, "message": "invalid opcode: missing trie node"}),
    ]
}

type Log = Arc<Mutex<Vec<(String, Value)>>>;

/// A fake node: answers each request with `answer(method, params)`,
/// logging it; `eth_blockNumber` waits `head_delay` first.
struct Node {
    addr: SocketAddr,
    log: Log,
}

type Answerer = Arc<dyn Fn(&str, &Value) -> Result<Value, Value> + Send + Sync>;

impl Node {
    async fn start(answer: Answerer, head_delay: Duration) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Log = Arc::default();
        let seen = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(body) = read_request_buffered(&mut s, &mut buf).await {
                        let v: Value = serde_json::from_slice(&body).unwrap();
                        let method = v["method"].as_str().unwrap().to_string();
                        let params = v.get("params").cloned().unwrap_or(Value::Null);
                        seen.lock().unwrap().push((method.clone(), params.clone()));
                        if method == "eth_blockNumber" {
                            tokio::time::sleep(head_delay).await;
                        }
                        let mut reply = json!({"jsonrpc":"2.0","id":v["id"]});
                        match answer(&method, &params) {
                            Ok(result) => reply["result"] = result,
                            Err(error) => reply["error"] = error,
                        }
                        let out = json_200(&reply.to_string());
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Node { addr, log }
    }

    /// A full node at [`HEAD`] keeping [`KEEP`] blocks of state: state
    /// calls on older blocks (or the old block's hash) get geth's
    /// missing-trie-node error.
    async fn full(head_delay: Duration) -> Node {
        Node::start(Arc::new(full_answer), head_delay).await
    }

    /// An archive node: every state call answered.
    async fn archive() -> Node {
        let answer = |method: &str, params: &Value| match method {
            "eth_blockNumber" => Ok(json!(quantity(HEAD))),
            "eth_getBlockByNumber" if params[0] == "finalized" => {
                Ok(json!({"number": quantity(HEAD - 64)}))
            }
            _ => Ok(json!(ARCHIVE)),
        };
        Node::start(Arc::new(answer), Duration::ZERO).await
    }

    fn count(&self, method: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(m, _)| m == method).count()
    }

    /// Requests other than `eth_blockNumber`.
    fn calls(&self) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(m, _)| m != "eth_blockNumber").count()
    }

    fn heads_asked(&self) -> usize {
        self.count("eth_blockNumber")
    }
}

/// The fake full node's answers.
fn full_answer(method: &str, params: &Value) -> Result<Value, Value> {
    match method {
        "eth_blockNumber" => Ok(json!(quantity(HEAD))),
        "eth_getBlockByNumber" if params[0] == "finalized" => {
            Ok(json!({"number": quantity(HEAD - 64)}))
        }
        // The old hash is block 5's (final, canonical).
        "eth_getBlockByHash" if params[0] == old_hash() => {
            Ok(json!({"number": "0x5", "hash": old_hash()}))
        }
        "eth_getBlockByNumber" if params[0] == "0x5" => {
            Ok(json!({"number": "0x5", "hash": old_hash()}))
        }
        "eth_getBlockByNumber" => Ok(json!({"number": params[0]})),
        "eth_getLogs" => Ok(json!([])),
        "eth_getBalance"
        | "eth_call"
        | "eth_getCode"
        | "eth_getTransactionCount"
        | "eth_getStorageAt"
        | "eth_getProof"
        | "eth_estimateGas" => {
            if method == "eth_call" && params[0]["data"] == "0xdead" {
                return Err(reverted());
            }
            if method == "eth_call"
                && let Some(e) = params[0]["data"]
                    .as_str()
                    .and_then(|d| d.strip_prefix("0xdead"))
                    .and_then(|i| execution_errors().get(i.parse::<usize>().ok()?).cloned())
            {
                return Err(e);
            }
            let block = params.as_array().and_then(|p| p.last()).unwrap();
            let old = match block {
                // An address last: no block, `latest`.
                Value::String(s) if s.len() == 42 => false,
                Value::String(s) if s.starts_with("0x") => {
                    u64::from_str_radix(&s[2..], 16).unwrap() < HEAD - KEEP + 1
                }
                Value::String(s) => s == "earliest",
                Value::Object(o) => match (o.get("blockHash"), o.get("blockNumber")) {
                    (Some(h), _) if h == "0xunknown" => {
                        return Err(json!({"code":-32000,"message":"header not found"}));
                    }
                    (Some(h), _) => *h == old_hash(),
                    (_, Some(Value::String(n))) => {
                        u64::from_str_radix(&n[2..], 16).unwrap() < HEAD - KEEP + 1
                    }
                    _ => false,
                },
                _ => false,
            };
            if old {
                Err(missing_trie_node())
            } else {
                Ok(json!(FULL))
            }
        }
        // reth searches the sender's nonce through the blocks' state: an
        // old nonce needs state the full node no longer keeps.
        "eth_getTransactionBySenderAndNonce" => {
            if params[1] == "0x0" {
                Err(json!({"code":-32000,"message":"state at block #17 is pruned"}))
            } else {
                Ok(json!(FULL))
            }
        }
        "debug_traceTransaction" => {
            if params[0] == old_hash() {
                // reth's words for it.
                Err(json!({"code":-32000,"message":"state at block #17 is pruned"}))
            } else {
                Ok(json!(FULL))
            }
        }
        _ => Ok(json!(FULL)),
    }
}

fn config(full: &Node, archive: Option<SocketAddr>) -> config::Config {
    config::Config {
        upstreams: vec![format!("http://{}", full.addr)],
        archives: archive.map(|a| format!("http://{a}")).into_iter().collect(),
        state_blocks: KEEP,
        cache_bytes: 0,
        timeout: Duration::from_secs(10),
        ..Default::default()
    }
}

/// POSTs `body`; the answer, a `200`, read as JSON.
async fn post(addr: SocketAddr, body: &str) -> Value {
    let (status, body) = post_close(addr, body).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn call(addr: SocketAddr, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
    post(addr, &body.to_string()).await
}

/// `eth_getBalance` at `block`: who answered (its result), or the error.
async fn balance(addr: SocketAddr, block: Value) -> Value {
    let reply = call(addr, "eth_getBalance", json!([ADDR, block])).await;
    match reply.get("result") {
        Some(r) => r.clone(),
        None => reply["error"].clone(),
    }
}

#[tokio::test]
async fn old_numbered_state_calls_go_to_the_archive_and_never_to_the_full_node() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    // Not among the N latest (873 to 1000): 872 and below.
    for n in [0, 1, 500, HEAD - KEEP - 1, HEAD - KEEP] {
        assert_eq!(balance(gw.addr, json!(quantity(n))).await, ARCHIVE, "{n}");
    }
    // An EIP-1898 object naming the number.
    let at = json!({"blockNumber": quantity(3)});
    assert_eq!(balance(gw.addr, at).await, ARCHIVE);
    // Other state readers, their block elsewhere in the params.
    let old = quantity(7);
    for (method, params) in [
        ("eth_call", json!([{"to": ADDR, "data": "0x"}, old])),
        ("eth_getCode", json!([ADDR, old])),
        ("eth_getStorageAt", json!([ADDR, "0x0", old])),
        ("eth_getTransactionCount", json!([ADDR, old])),
        ("eth_getProof", json!([ADDR, [], old])),
        ("eth_estimateGas", json!([{"to": ADDR}, old])),
    ] {
        let reply = call(gw.addr, method, params).await;
        assert_eq!(reply["result"], ARCHIVE, "{method}: {reply}");
    }
    assert_eq!(archive.calls(), 12);
    assert_eq!(full.calls(), 0, "no state call reached the full node");
    assert!(full.heads_asked() >= 1);
    assert_eq!(archive.heads_asked(), 0, "the head is the full nodes'");
}

#[tokio::test]
async fn recent_blocks_and_tags_stay_on_the_full_node() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    // The N latest (873 to 1000), and later: the full node's.
    for n in [HEAD - KEEP + 1, HEAD - 1, HEAD, HEAD + 5] {
        assert_eq!(balance(gw.addr, json!(quantity(n))).await, FULL, "{n}");
    }
    for tag in ["latest", "pending", "safe", "finalized"] {
        assert_eq!(balance(gw.addr, json!(tag)).await, FULL, "{tag}");
    }
    let reply = call(gw.addr, "eth_getBalance", json!([ADDR])).await;
    assert_eq!(reply["result"], FULL, "no block: latest");
    assert_eq!(archive.calls(), 0);
    assert_eq!(full.count("eth_getBalance"), 9);
}

#[tokio::test]
async fn earliest_goes_to_the_archive_without_asking_the_head() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    assert_eq!(balance(gw.addr, json!("earliest")).await, ARCHIVE);
    assert_eq!(archive.calls(), 1);
    assert_eq!(full.calls(), 0);
    assert_eq!(full.heads_asked(), 0);
}

/// `trace_filter` replays the blocks of its range: one starting at an old
/// block, or with no `fromBlock` (block 0 to erigon and reth), is the
/// archive's; one starting among the latest stays on the full node.
#[tokio::test]
async fn trace_filter_goes_by_the_start_of_its_range() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    for (filter, answer) in [
        (json!({"toBlock": quantity(HEAD)}), ARCHIVE),
        (
            json!({"fromBlock": quantity(3), "toBlock": quantity(4)}),
            ARCHIVE,
        ),
        (json!({"fromBlock": quantity(HEAD - 1)}), FULL),
        (json!({"fromBlock": "latest", "count": 5}), FULL),
    ] {
        let reply = call(gw.addr, "trace_filter", json!([filter])).await;
        assert_eq!(reply["result"], answer, "{filter}: {reply}");
    }
    assert_eq!(archive.count("trace_filter"), 2);
    assert_eq!(full.count("trace_filter"), 2);
}

#[tokio::test]
async fn methods_that_read_no_state_stay_on_the_full_node() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    let reply = call(gw.addr, "eth_getBlockByNumber", json!(["0x1", false])).await;
    assert_eq!(reply["result"], json!({"number": "0x1"}), "{reply}");
    let reply = call(
        gw.addr,
        "eth_getLogs",
        json!([{"fromBlock": "0x1", "toBlock": "0x2"}]),
    )
    .await;
    assert_eq!(reply["result"], json!([]), "{reply}");
    assert_eq!(archive.calls(), 0);
    assert_eq!(full.calls(), 2);
    assert_eq!(full.heads_asked(), 0, "no state call, no head asked");
}

#[tokio::test]
async fn a_call_by_hash_is_retried_on_the_archive_after_a_missing_state_error() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let mut config = config(&full, Some(archive.addr));
    config.deny.clear();
    let gw = start(config).await;
    // The old block's hash: the full node has lost its state.
    assert_eq!(
        balance(gw.addr, json!({"blockHash": old_hash()})).await,
        ARCHIVE
    );
    assert_eq!(full.count("eth_getBalance"), 1);
    assert_eq!(archive.count("eth_getBalance"), 1);
    // A recent one: the full node answers, the archive is not asked.
    assert_eq!(
        balance(gw.addr, json!({"blockHash": recent_hash()})).await,
        FULL
    );
    assert_eq!(full.count("eth_getBalance"), 2);
    assert_eq!(archive.count("eth_getBalance"), 1);
    // A transaction's trace (its block unknown), reth's words.
    let reply = call(gw.addr, "debug_traceTransaction", json!([old_hash()])).await;
    assert_eq!(reply["result"], ARCHIVE, "{reply}");
    let reply = call(gw.addr, "debug_traceTransaction", json!([recent_hash()])).await;
    assert_eq!(reply["result"], FULL, "{reply}");
    assert_eq!(full.count("debug_traceTransaction"), 2);
    assert_eq!(archive.count("debug_traceTransaction"), 1);
    assert_eq!(full.heads_asked(), 0, "no number named, no head needed");
}

/// `eth_getTransactionBySenderAndNonce` names no block, but reth finds
/// the transaction by reading the sender's nonce at older and older
/// blocks: a full node's missing-state answer sends it to the archive;
/// a recent nonce stays on the full node.
#[tokio::test]
async fn a_transaction_by_sender_and_nonce_is_retried_on_the_archive() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    let method = "eth_getTransactionBySenderAndNonce";
    let reply = call(gw.addr, method, json!([ADDR, "0x0"])).await;
    assert_eq!(reply["result"], ARCHIVE, "{reply}");
    let reply = call(gw.addr, method, json!([ADDR, "0x7"])).await;
    assert_eq!(reply["result"], FULL, "{reply}");
    assert_eq!(full.count(method), 2);
    assert_eq!(archive.count(method), 1);
    assert_eq!(full.heads_asked(), 0, "no block named, no head needed");
}

#[tokio::test]
async fn other_errors_pass_through_and_are_not_retried() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    // A revert, on a recent block and by hash: the node's error as it is.
    for block in [json!("latest"), json!({"blockHash": recent_hash()})] {
        let params = json!([{"to": ADDR, "data": "0xdead"}, block]);
        let reply = call(gw.addr, "eth_call", params).await;
        assert_eq!(reply["error"], reverted(), "{reply}");
        assert!(reply.get("result").is_none());
    }
    // Another node error, by hash.
    let e = balance(gw.addr, json!({"blockHash": "0xunknown"})).await;
    assert_eq!(e, json!({"code":-32000,"message":"header not found"}));
    assert_eq!(archive.calls(), 0);
    assert_eq!(full.calls(), 3);
}

/// An execution's error is the contract's word, whatever it says: a
/// revert (geth's code 3, or a message saying "revert") or a message
/// holding a missing-state phrase elsewhere than at its start is passed
/// through as it is and never retried on the archive; geth's real
/// missing-trie-node answer still is.
#[tokio::test]
async fn reverts_that_mention_missing_state_are_not_retried() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    for (i, e) in execution_errors().into_iter().enumerate() {
        for block in [json!("latest"), json!({"blockHash": old_hash()})] {
            let params = json!([{"to": ADDR, "data": format!("0xdead{i}")}, block]);
            let reply = call(gw.addr, "eth_call", params).await;
            assert_eq!(reply["error"], e, "{reply}");
        }
    }
    assert_eq!(archive.calls(), 0);
    assert_eq!(full.count("eth_call"), 2 * execution_errors().len());
    // geth's own words for lost state: retried.
    let params = json!([{"to": ADDR, "data": "0x"}, {"blockHash": old_hash()}]);
    let reply = call(gw.addr, "eth_call", params).await;
    assert_eq!(reply["result"], ARCHIVE, "{reply}");
    assert_eq!(archive.count("eth_call"), 1);
}

#[tokio::test]
async fn a_burst_of_old_calls_asks_the_head_once() {
    // The head's answer comes late, so that every call of the burst needs
    // it while it is asked.
    let full = Node::full(Duration::from_millis(300)).await;
    let archive = Node::archive().await;
    let gw = start(config(&full, Some(archive.addr))).await;
    let batch: Vec<Value> = (0..20)
        .map(|i| {
            json!({"jsonrpc":"2.0","id":i,"method":"eth_getBalance","params":[ADDR, quantity(i)]})
        })
        .collect();
    let replies = post(gw.addr, &Value::from(batch).to_string()).await;
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), 20);
    for r in replies {
        assert_eq!(r["result"], ARCHIVE, "{r}");
    }
    assert_eq!(full.heads_asked(), 1);
    assert_eq!(archive.calls(), 20);
    assert_eq!(full.calls(), 0);
}

/// A full node that cannot say its head is asked at most once a second,
/// as one that can: sequential calls (well within a second of each
/// other) do not each ask it again. Meanwhile the calls go to it, and the
/// missing-state retry takes the old ones to the archive.
#[tokio::test]
async fn a_head_that_cannot_be_learnt_is_not_asked_for_every_call() {
    let answer = |method: &str, params: &Value| match method {
        "eth_blockNumber" => Err(json!({"code": -32603, "message": "internal error"})),
        _ => full_answer(method, params),
    };
    let full = Node::start(Arc::new(answer), Duration::ZERO).await;
    let archive = Node::archive().await;
    let gw = start(config(&full, Some(archive.addr))).await;
    for _ in 0..10 {
        assert_eq!(balance(gw.addr, json!("0x1")).await, ARCHIVE);
    }
    assert!(full.heads_asked() >= 1);
    assert!(
        full.heads_asked() < 10,
        "asked {} times",
        full.heads_asked()
    );
    assert_eq!(archive.count("eth_getBalance"), 10);
}

/// A full node that never answers `eth_blockNumber` (its other calls
/// answered) holds an old block's call for the head ask's deadline only:
/// the call then goes by the head known (none: to the full node, whose
/// missing-state answer is retried on the archive). The ask had no
/// deadline of its own, so such calls waited out their timeout (-32002)
/// although the archive could answer. Found by a review; the test failed
/// before.
#[tokio::test]
async fn a_head_ask_never_answered_holds_calls_for_its_deadline_only() {
    let full = Node::full(Duration::from_secs(3600)).await;
    let archive = Node::archive().await;
    let gw = start(config::Config {
        // The head ask's deadline is three quarters of it.
        timeout: Duration::from_secs(4),
        ..config(&full, Some(archive.addr))
    })
    .await;
    for _ in 0..3 {
        assert_eq!(balance(gw.addr, json!("0x1")).await, ARCHIVE);
    }
    assert!(full.heads_asked() >= 1);
    assert_eq!(archive.count("eth_getBalance"), 3);
}

/// With a first full node that takes no connection, the head ask fails
/// over to the second within its deadline (longer than a connect's): it
/// once gave up as the first node's connect did, and the second was never
/// asked. Found by a review.
#[tokio::test]
async fn a_head_ask_fails_over_past_a_full_node_that_takes_no_connection() {
    let silent = crate::refusing::silent();
    let full = Node::full(Duration::ZERO).await;
    let archive = Node::archive().await;
    let gw = start(config::Config {
        upstreams: vec![
            format!("http://{}", silent.addr),
            format!("http://{}", full.addr),
        ],
        // Its defaults: connects 1 s (as the old head ask), the head ask
        // 1.5 s.
        timeout: Duration::from_secs(2),
        ..config(&full, Some(archive.addr))
    })
    .await;
    assert_eq!(balance(gw.addr, json!("0x1")).await, ARCHIVE);
    assert_eq!(full.heads_asked(), 1);
    assert_eq!(archive.count("eth_getBalance"), 1);
}

#[tokio::test]
async fn an_archive_that_is_down_fails_only_its_calls() {
    let full = Node::full(Duration::ZERO).await;
    // A port nobody listens on.
    let down = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = start(config(&full, Some(down))).await;
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":[ADDR, "0x1"]},
        {"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":[ADDR, "latest"]},
        {"jsonrpc":"2.0","id":3,"method":"eth_getBlockByNumber","params":["0x1", false]},
    ]);
    let replies = post(gw.addr, &batch.to_string()).await;
    let e = &replies[0]["error"];
    assert_eq!(e["code"], -32603, "{replies}");
    assert_eq!(e["message"], "upstream unavailable", "{replies}");
    assert_eq!(e["data"]["upstream"], down.to_string(), "{replies}");
    assert_eq!(replies[1]["result"], FULL, "{replies}");
    assert_eq!(replies[2]["result"], json!({"number": "0x1"}), "{replies}");
    // Alone too, and the next call is served.
    let e = balance(gw.addr, json!("0x2")).await;
    assert_eq!(e["data"]["upstream"], down.to_string(), "{e}");
    assert_eq!(balance(gw.addr, json!("latest")).await, FULL);
    assert_eq!(full.count("eth_getBalance"), 2);
}

/// An archive node that takes calls and never answers is rested when a
/// call times out on it, although the call spent part of its time before
/// it got there (here asking the full node for the head): its deadline
/// counts from its arrival. It was measured from when forwarding to the
/// archive began, so such a drop did not count as the archive's timeout:
/// every later call went to the hanging archive again and timed out, the
/// second archive never tried (found by a review).
#[tokio::test]
async fn an_archive_that_hangs_is_rested_though_the_call_waited_first() {
    let full = Node::full(Duration::from_secs(1)).await;
    let hanging = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging_addr = hanging.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hanging.accept().await {
            held.push(s);
        }
    });
    let archive = Node::archive().await;
    let mut config = config(&full, None);
    config.archives = vec![
        format!("http://{hanging_addr}"),
        format!("http://{}", archive.addr),
    ];
    config.timeout = Duration::from_secs(4);
    let gw = start(config).await;
    // The head is asked first (a second), then the hanging archive until
    // the deadline: it has three seconds of the call, past the quarter
    // that rests it by two.
    let e = balance(gw.addr, json!("0x1")).await;
    assert_eq!(e["code"], -32002, "{e}");
    // Rested: the next old call goes to the second archive.
    assert_eq!(balance(gw.addr, json!("0x2")).await, ARCHIVE);
    assert_eq!(archive.count("eth_getBalance"), 1);
}

/// A node answering every call as `answer` does, after `delay`.
async fn slow_node(delay: Duration, answer: Answerer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(body) = read_request_buffered(&mut s, &mut buf).await {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    tokio::time::sleep(delay).await;
                    let params = v.get("params").cloned().unwrap_or(Value::Null);
                    let mut reply = json!({"jsonrpc":"2.0","id":v["id"]});
                    match answer(v["method"].as_str().unwrap(), &params) {
                        Ok(result) => reply["result"] = result,
                        Err(error) => reply["error"] = error,
                    }
                    if s.write_all(json_200(&reply.to_string()).as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A call that spent most of its time before it got to the archive (the
/// full node took 5.1 s of its 6 s to say it lacks the state) and is
/// dropped at its deadline a moment into a healthy but not instant
/// archive's answer says nothing of that archive: it is not rested (judged
/// by the deadline alone it was: under load, healthy upstreams were rested
/// and their traffic sent to fallbacks; found by a review). One that had a
/// fair share of the time is (the test above).
#[tokio::test]
async fn a_call_dropped_a_moment_into_its_archive_call_does_not_rest_it() {
    // The archive has at most 0.9 s of the call, under the quarter (1.5 s)
    // that would rest it, and slower than that: the call is dropped in
    // its answer, and the retry has 0.9 s to begin on a busy host.
    let full = slow_node(Duration::from_millis(5100), Arc::new(full_answer)).await;
    let slow = slow_node(
        Duration::from_secs(3),
        Arc::new(|_: &str, _: &Value| Ok(json!(ARCHIVE))),
    )
    .await;
    let mut config = config::Config {
        upstreams: vec![format!("http://{full}")],
        archives: vec![format!("http://{slow}")],
        state_blocks: KEEP,
        cache_bytes: 0,
        timeout: Duration::from_secs(6),
        ..Default::default()
    };
    config.deny.clear();
    let (gw, ops) = start_with_metrics(config).await;
    let addr = gw.addr;
    let e = balance(addr, json!({"blockHash": old_hash()})).await;
    assert_eq!(e["code"], -32002, "{e}");
    let text = ops.metrics().await;
    assert!(
        text.contains("\ngateway_archive_retries_total 1\n"),
        "{text}"
    );
    let up = format!("gateway_archive_up{{upstream=\"{slow}\"}} 1");
    assert!(text.contains(&up), "{text}");
}

/// A call that spent its time waiting for a place under
/// `--upstream-connections` (the gateway's own queue) and is dropped at
/// its deadline just after it got one, or before, says nothing of the
/// upstream: a saturated but healthy upstream is not rested. Its time
/// with the upstream was counted from when forwarding began, so under
/// load the first upstream was rested and its traffic sent to the
/// fallback (found by a review).
#[tokio::test]
async fn calls_dropped_while_waiting_for_an_upstream_place_do_not_rest_it() {
    // The upstream takes 7 s of the 8 s timeout: the first call is
    // answered, the second gets the place then and is dropped at its
    // deadline a second later (under the quarter of the timeout, 2 s,
    // with the upstream), the third never gets it; a second of room each
    // way for a busy host.
    const SLOW: &str = "0x51";
    let slow = slow_node(
        Duration::from_secs(7),
        Arc::new(|_: &str, _: &Value| Ok(json!(SLOW))),
    )
    .await;
    let fallback = slow_node(
        Duration::ZERO,
        Arc::new(|_: &str, _: &Value| Ok(json!("0xfa"))),
    )
    .await;
    let config = config::Config {
        upstreams: vec![format!("http://{slow}"), format!("http://{fallback}")],
        upstream_connections: 1,
        cache_bytes: 0,
        timeout: Duration::from_secs(8),
        ..Default::default()
    };
    let (gw, ops) = start_with_metrics(config).await;
    let addr = gw.addr;
    let first = tokio::spawn(balance(addr, json!("latest")));
    // The others only once the first holds the place.
    let holding = format!("gateway_upstream_requests_in_flight{{upstream=\"{slow}\"}} 1\n");
    for tries in 0.. {
        if ops.metrics().await.contains(&holding) {
            break;
        }
        assert!(tries < 1000, "the first call never took the place");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let others = [
        tokio::spawn(balance(addr, json!("latest"))),
        tokio::spawn(balance(addr, json!("latest"))),
    ];
    assert_eq!(first.await.unwrap(), SLOW);
    for other in others {
        let e = other.await.unwrap();
        assert_eq!(e["code"], -32002, "{e}");
    }
    let text = ops.metrics().await;
    let up = format!("gateway_upstream_up{{upstream=\"{slow}\"}} 1");
    assert!(text.contains(&up), "{text}");
    let timeouts =
        format!("gateway_upstream_failures_total{{upstream=\"{slow}\",kind=\"timeout\"}} 0");
    assert!(text.contains(&timeouts), "{text}");
    // The next call still goes to it.
    assert_eq!(balance(addr, json!("latest")).await, SLOW);
}

#[tokio::test]
async fn a_batch_of_old_and_recent_calls_is_split_and_merged_in_order() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    let blocks = [
        json!("0x1"),
        json!("latest"),
        json!(quantity(HEAD - 2)),
        json!("earliest"),
        json!({"blockHash": old_hash()}),
        json!({"blockNumber": quantity(HEAD)}),
        json!(quantity(HEAD - KEEP)),
        json!(quantity(HEAD - KEEP + 1)),
    ];
    let expect = [ARCHIVE, FULL, FULL, ARCHIVE, ARCHIVE, FULL, ARCHIVE, FULL];
    let batch: Vec<Value> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"jsonrpc":"2.0","id":i,"method":"eth_getBalance","params":[ADDR, b]}))
        .collect();
    let replies = post(gw.addr, &Value::from(batch).to_string()).await;
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), expect.len());
    for (i, (r, who)) in replies.iter().zip(expect).enumerate() {
        assert_eq!(r["id"], i, "{r}");
        assert_eq!(r["result"], who, "entry {i}: {r}");
    }
    // The by-hash entry reached both; the old ones only the archive.
    assert_eq!(full.count("eth_getBalance"), 5);
    assert_eq!(archive.count("eth_getBalance"), 4);
}

#[tokio::test]
async fn without_archive_nothing_changes_and_no_head_is_asked() {
    let full = Node::full(Duration::ZERO).await;
    let gw = start(config(&full, None)).await;
    // The full node's error passes through; nothing else is tried.
    assert_eq!(balance(gw.addr, json!("0x1")).await, missing_trie_node());
    assert_eq!(
        balance(gw.addr, json!("earliest")).await,
        missing_trie_node()
    );
    assert_eq!(balance(gw.addr, json!("latest")).await, FULL);
    let batch: Vec<Value> = (0..5)
        .map(|i| {
            json!({"jsonrpc":"2.0","id":i,"method":"eth_getBalance","params":[ADDR, quantity(i)]})
        })
        .collect();
    post(gw.addr, &Value::from(batch).to_string()).await;
    assert_eq!(full.heads_asked(), 0);
    assert_eq!(full.count("eth_getBalance"), 8);
}

/// An old block's state, answered by the archive, is kept by the cache
/// once final as the first upstream's answers are.
#[tokio::test]
async fn the_archive_s_answers_on_final_blocks_are_cached() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let mut config = config(&full, Some(archive.addr));
    config.cache_bytes = 1 << 20;
    let gw = start(config).await;
    let mut by_hash = Vec::new();
    for _ in 0..4 {
        assert_eq!(balance(gw.addr, json!("0x5")).await, ARCHIVE);
        let before = archive.count("eth_getBalance");
        assert_eq!(
            balance(gw.addr, json!({"blockHash": old_hash()})).await,
            ARCHIVE
        );
        by_hash.push(archive.count("eth_getBalance") - before);
        // The hash is learnt in a task of its own meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // By number: the first call learns the finalized block (a result is
    // kept only when its block was known final before the call), the
    // second is kept. By hash: the first call starts learning the hash
    // (the first upstream's block 5), a call after that is kept.
    assert_eq!(by_hash[0], 1);
    assert_eq!(by_hash[3], 0, "kept by then: {by_hash:?}");
    let hashed: usize = by_hash.iter().sum();
    assert_eq!(archive.count("eth_getBalance"), 2 + hashed);
    assert_eq!(full.count("eth_getBalance"), hashed, "the by-hash calls");
}

/// Starts a gateway on `config` with `/metrics` on: the gateway and its
/// operations side, which reads the metrics.
async fn start_with_metrics(mut config: config::Config) -> (Gateway, Arc<ops::Ops>) {
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    let ops = Arc::clone(app.ops().unwrap());
    tokio::spawn(app.run(listener, config.limits(), shutdown.clone()));
    (Gateway { addr, shutdown }, ops)
}

/// The counters `/metrics` shows: calls sent to the archive by their
/// block, and retried there after a missing-state error.
#[tokio::test]
async fn metrics_count_routed_and_retried_calls() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let config = config(&full, Some(archive.addr));
    let (gw, ops) = start_with_metrics(config).await;
    let addr = gw.addr;
    for block in [json!("0x1"), json!("0x2"), json!("earliest")] {
        assert_eq!(balance(addr, block).await, ARCHIVE);
    }
    assert_eq!(
        balance(addr, json!({"blockHash": old_hash()})).await,
        ARCHIVE
    );
    assert_eq!(balance(addr, json!("latest")).await, FULL);
    let text = ops.metrics().await;
    assert!(
        text.contains("\ngateway_archive_routed_total 3\n"),
        "{text}"
    );
    assert!(
        text.contains("\ngateway_archive_retries_total 1\n"),
        "{text}"
    );
    let up = format!("gateway_archive_up{{upstream=\"{}\"}} 1", archive.addr);
    assert!(text.contains(&up), "{text}");
}

/// The missing-state messages of geth, reth, erigon, nethermind, besu and anvil
/// (as their sources write them), and messages that are not.
#[test]
fn the_clients_words_for_missing_state() {
    for m in [
        "missing trie node 5f3a20c3c2c0e0f9b2d1c1f0e0d0c0b0a090807060504030201000f0e0d0c0b0a (path ) state 0xabc is not available, not found",
        "historical state 3f1d0a5b8c2e7f9a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a is not available",
        "required historical state unavailable (reexec=128)",
        "state at block #17000000 is pruned",
        "old data not available due to pruning: requested block 6134861, history is available from block 25247999",
        "No state available for block 0x3f9e020290502d1d41f4b5519e7d456f0935dea980ec310935206cac8239117e (15659481)",
        "BlockOutOfRangeError: block height is 10 but requested was 1",
        "World state unavailable",
    ] {
        assert!(archive::says_missing_state(m), "{m}");
    }
    for m in [
        "execution reverted",
        "execution reverted: missing trie node",
        "reverted: missing trie node 0xab",
        "VM Exception while processing transaction: revert missing trie node",
        "invalid opcode: missing trie node",
        "state at block #17 is pruned, or reverted",
        "header not found",
        // anvil: a block not mined yet.
        "BlockOutOfRangeError: block height is 10 but requested was 256",
        "insufficient funds for gas * price + value",
        "Resource not found",
        "",
    ] {
        assert!(!archive::says_missing_state(m), "{m}");
    }
}

/// anvil, as `tests/interop/gateway/run.sh` installs it.
fn anvil() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/interop-gateway/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
    path.is_file().then_some(path)
}

/// A real full node: anvil keeping the state of its last 2 blocks
/// (`--prune-history 2`) refuses older ones with its own words, which the
/// retry rule recognizes: the calls go to the archive after it.
#[tokio::test]
async fn anvil_prune_history_errors_are_retried_on_the_archive() {
    let Some(anvil) = anvil() else {
        // CI installs anvil for the interop step, then runs this test
        // again with the variable set: there a skip is a failure.
        assert!(
            std::env::var_os("RPCWIRE_REQUIRE_ANVIL").is_none(),
            "RPCWIRE_REQUIRE_ANVIL is set and anvil is missing"
        );
        eprintln!(
            "skipped: no anvil at target/interop-gateway/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil \
             (bash tests/interop/gateway/run.sh installs it)"
        );
        return;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(anvil)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--prune-history", "2", "--silent"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _anvil = Kill(child);
    let node: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // Up within 30 s (a hang guard).
    let mut up = false;
    for _ in 0..300 {
        if TcpStream::connect(node).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "anvil did not start");
    let mined = call(node, "anvil_mine", json!(["0xa"])).await;
    assert!(mined.get("error").is_none(), "{mined}");
    // Its own answer, straight: the words the rule must know.
    let direct = balance(node, json!("0x1")).await;
    let message = direct["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{direct}"));
    assert!(archive::says_missing_state(message), "{direct}");
    let block = call(node, "eth_getBlockByNumber", json!(["0x2", false])).await;
    let hash = block["result"]["hash"].clone();

    let archive = Node::archive().await;
    let gw = start(config::Config {
        upstreams: vec![format!("http://{node}")],
        archives: vec![format!("http://{}", archive.addr)],
        // Taken for a node keeping far more: every call goes to anvil
        // first, and only its errors send them to the archive.
        state_blocks: 1_000_000,
        cache_bytes: 0,
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .await;
    assert_eq!(balance(gw.addr, json!("0x1")).await, ARCHIVE);
    assert_eq!(balance(gw.addr, json!({"blockHash": hash})).await, ARCHIVE);
    // Recent state, and a block not mined yet: anvil's answers.
    let latest = balance(node, json!("latest")).await;
    assert!(latest.is_string(), "{latest}");
    assert_eq!(balance(gw.addr, json!("latest")).await, latest);
    let future = balance(gw.addr, json!("0x100")).await;
    assert_eq!(future["code"], -32602, "{future}");
    assert_eq!(archive.count("eth_getBalance"), 2);
}

/// `eth_callMany` on an old block goes to the archive; a state context
/// Go's decoder may read as another block (`BlockNumber`, a repeated
/// `blockNumber`) stays on the full nodes, with the missing-state retry,
/// rather than being routed by its first `blockNumber` (found by a
/// review).
#[tokio::test]
async fn a_state_context_is_routed_by_its_block_only_when_unambiguous() {
    let (full, archive) = (Node::full(Duration::ZERO).await, Node::archive().await);
    let gw = start(config(&full, Some(archive.addr))).await;
    let bundle = json!([{"transactions": []}]);
    let old = call(
        gw.addr,
        "eth_callMany",
        json!([bundle, {"blockNumber": quantity(3)}]),
    )
    .await;
    assert_eq!(old["result"], ARCHIVE, "{old}");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_callMany","params":[{bundle},{{"blockNumber":"{}","BlockNumber":"latest"}}]}}"#,
        quantity(3)
    );
    let odd = post(gw.addr, &body).await;
    assert_eq!(odd["result"], FULL, "{odd}");
    assert_eq!(archive.calls(), 1);
}
