//! Method lookup: rpcwire's perfect-hash `Router` against `FxHashMap<&str, _>`
//! and std's `HashMap`, in the same run, on
//!
//! * `router/hits`: the method names of the large mixed Ethereum stream, in
//!   its order (what a gateway routes), against a table of 44 Ethereum and
//!   MCP names;
//! * `router/misses`: near misses of those names (one byte changed, case,
//!   suffixes, methods a public endpoint does not serve);
//! * `router/2000_hits` and `router/2000_misses`: a table of 2,000 names
//!   (a gateway fronting many namespaces), 20,000 lookups at random.
//!
//! Looked-up names are copies, never the table's own strings, each distinct
//! name once, back to back in one buffer: a dispatcher looks up a name it
//! has just parsed, which is in the L1 cache, so the benchmark does not make
//! every lookup fetch its name from farther away. Each pass sums the values
//! found and checks the sum.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

#[path = "support/corpus.rs"]
mod corpus;

/// Forty-four names a node or MCP server registers, most frequent first.
const METHODS: &[&str] = &[
    "eth_call",
    "eth_getTransactionReceipt",
    "eth_getBalance",
    "eth_blockNumber",
    "eth_getBlockByNumber",
    "eth_getTransactionCount",
    "eth_chainId",
    "eth_getTransactionByHash",
    "eth_getLogs",
    "eth_getCode",
    "eth_estimateGas",
    "eth_sendRawTransaction",
    "eth_getBlockByHash",
    "eth_gasPrice",
    "eth_maxPriorityFeePerGas",
    "eth_feeHistory",
    "eth_getStorageAt",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getBlockTransactionCountByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getUncleCountByBlockHash",
    "eth_syncing",
    "eth_subscribe",
    "eth_unsubscribe",
    "eth_getProof",
    "eth_createAccessList",
    "eth_blobBaseFee",
    "net_version",
    "net_listening",
    "net_peerCount",
    "web3_clientVersion",
    "web3_sha3",
    "debug_traceTransaction",
    "debug_traceCall",
    "trace_block",
    "initialize",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "prompts/get",
    "notifications/initialized",
    "ping",
];

/// The methods of the mixed Ethereum stream, in order.
fn corpus_methods() -> Vec<String> {
    corpus::eth_stream(7, 20_000)
        .iter()
        .map(|m| {
            let v: serde_json::Value = serde_json::from_slice(m).unwrap();
            v["method"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Names one edit away from registered ones, and methods a public endpoint
/// does not serve.
fn near_misses(names: &[&str], rng: &mut corpus::Rng, n: usize) -> Vec<String> {
    const UNSERVED: &[&str] = &[
        "eth_sendTransaction",
        "eth_accounts",
        "eth_sign",
        "eth_signTypedData_v4",
        "eth_getBlockReceipts",
        "debug_traceBlockByNumber",
        "admin_peers",
        "txpool_content",
        "eth_coinbase",
        "eth_mining",
        "personal_sign",
        "wallet_switchEthereumChain",
    ];
    (0..n)
        .map(|_| {
            let name = rng.one_of(names);
            let mut b = name.as_bytes().to_vec();
            match rng.below(6) {
                0 => return rng.one_of(UNSERVED).to_string(),
                1 => b.push(b'x'),
                2 => {
                    b.pop();
                }
                3 => {
                    // Case: `eth_getbalance`.
                    let at = b.iter().rposition(u8::is_ascii_uppercase).unwrap_or(0);
                    b[at] ^= 0x20;
                }
                _ => {
                    // One letter changed, in the middle as often as at the
                    // ends.
                    let at = rng.below(b.len() as u64) as usize;
                    b[at] = if b[at] == b'z' { b'y' } else { b'z' };
                }
            }
            String::from_utf8(b).unwrap()
        })
        .filter(|m| !names.contains(&m.as_str()))
        .collect()
}

/// 2,000 method names of the shapes real namespaces use.
fn many_names() -> Vec<String> {
    const NS: &[&str] = &[
        "eth",
        "debug",
        "trace",
        "admin",
        "txpool",
        "net",
        "web3",
        "erigon",
        "ots",
        "parity",
        "bor",
        "zks",
        "starknet",
        "arbtrace",
        "optimism",
        "linea",
        "engine",
        "flashbots",
        "mev",
        "alchemy",
    ];
    const VERB: &[&str] = &[
        "get",
        "list",
        "trace",
        "call",
        "send",
        "estimate",
        "subscribe",
        "simulate",
        "search",
        "replay",
    ];
    const NOUN: &[&str] = &[
        "Block",
        "Transaction",
        "Receipt",
        "Balance",
        "Code",
        "Storage",
        "Logs",
        "Proof",
        "Account",
        "Bundle",
        "Header",
        "Uncle",
        "Filter",
        "Tokens",
        "Nonce",
        "Gas",
        "Fee",
        "State",
        "Trace",
        "Contract",
    ];
    const SUFFIX: &[&str] = &[
        "", "ByHash", "ByNumber", "Count", "AndIndex", "V2", "s", "Range",
    ];
    let mut all = Vec::new();
    for ns in NS {
        for verb in VERB {
            for noun in NOUN {
                for suffix in SUFFIX {
                    all.push(format!("{ns}_{verb}{noun}{suffix}"));
                }
            }
        }
    }
    // 2,000 of the 32,000 combinations, at random.
    let mut rng = corpus::Rng::new(2000);
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let out: Vec<String> = all.into_iter().take(2000).collect();
    assert_eq!(out.len(), 2000);
    out
}

/// Each distinct name of a lookup sequence once, back to back, and the
/// sequence as positions in that buffer.
struct Copies {
    buf: String,
    spans: Vec<(usize, usize)>,
}

impl Copies {
    fn of(names: &[String]) -> Copies {
        let mut buf = String::new();
        let mut at = HashMap::new();
        let spans = names
            .iter()
            .map(|n| {
                *at.entry(n.as_str()).or_insert_with(|| {
                    buf.push_str(n);
                    (buf.len() - n.len(), buf.len())
                })
            })
            .collect();
        Copies { buf, spans }
    }

    fn sequence(&self) -> Vec<&str> {
        self.spans.iter().map(|&(a, b)| &self.buf[a..b]).collect()
    }
}

fn bench_router(c: &mut Criterion) {
    let small: Vec<&str> = METHODS.to_vec();
    let many = many_names();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut rng = corpus::Rng::new(77);
    // Lookup sequences: owned copies, so no lookup compares a table key with
    // itself.
    let hits = corpus_methods();
    let misses = near_misses(&small, &mut rng, 2_000);
    let many_hits: Vec<String> = (0..20_000).map(|_| rng.one_of(&many).to_string()).collect();
    let distinct_misses = near_misses(&many, &mut rng, 2_000);
    let many_misses: Vec<String> = (0..20_000)
        .map(|_| distinct_misses[rng.below(distinct_misses.len() as u64) as usize].clone())
        .collect();

    for (label, table, names) in [
        ("hits", &small, &hits),
        ("misses", &small, &misses),
        ("2000_hits", &many, &many_hits),
        ("2000_misses", &many, &many_misses),
    ] {
        let router =
            rpcwire::router::Router::new(table.iter().enumerate().map(|(i, m)| (*m, i))).unwrap();
        let fx: rustc_hash::FxHashMap<&str, usize> =
            table.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let std_map: HashMap<&str, usize> =
            table.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let copies = Copies::of(names);
        let names = copies.sequence();
        let expect: usize = names
            .iter()
            .map(|n| fx.get(n).copied().unwrap_or(1000))
            .sum();

        let mut g = c.benchmark_group(format!("router/{label}"));
        g.throughput(Throughput::Elements(names.len() as u64));
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(3));
        g.bench_function("rpcwire", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| router.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
            })
        });
        g.bench_function("fxhashmap", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| fx.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
            })
        });
        // The loop alone (read each name's length): what every lookup above
        // pays besides the lookup itself.
        let lengths: usize = names.iter().map(|n| n.len()).sum();
        g.bench_function("loop_only", |b| {
            b.iter(|| {
                let sum: usize = names.iter().map(|n| black_box(n).len()).sum();
                assert_eq!(sum, lengths);
            })
        });
        g.bench_function("std_hashmap", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| std_map.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_router);
criterion_main!(benches);
