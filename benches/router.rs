//! Method lookup: rpcwire's perfect-hash `Router` against `FxHashMap<&str, _>`
//! and std's `HashMap`, on the common Ethereum and MCP method names, hits and
//! misses, in the same run.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashMap;
use std::hint::black_box;

/// About forty names a node or MCP server registers, most frequent first.
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

/// Lookups in the order of the traffic mix (eth_call dominant).
fn traffic() -> Vec<&'static str> {
    let weights = [45, 12, 8, 8, 6, 5, 4, 3, 3, 2, 2, 2];
    let mut out = Vec::new();
    for (name, w) in METHODS.iter().zip(weights) {
        out.extend(std::iter::repeat_n(*name, w));
    }
    out.extend(METHODS.iter().copied());
    // Interleave so the branch predictor cannot learn a run.
    let mut shuffled = Vec::with_capacity(out.len());
    let step = 37;
    for i in 0..out.len() {
        shuffled.push(out[(i * step) % out.len()]);
    }
    shuffled
}

fn misses() -> Vec<String> {
    let mut out: Vec<String> = METHODS.iter().map(|m| format!("{m}x")).collect();
    out.extend(METHODS.iter().map(|m| m.replace('_', "-")));
    out.extend(
        [
            "eth_call2",
            "eth_getbalance",
            "admin_peers",
            "x",
            "eth_sendTransaction",
        ]
        .map(String::from),
    );
    out
}

fn bench_router(c: &mut Criterion) {
    let router =
        rpcwire::router::Router::new(METHODS.iter().enumerate().map(|(i, m)| (*m, i))).unwrap();
    let fx: rustc_hash::FxHashMap<&str, usize> =
        METHODS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let std_map: HashMap<&str, usize> = METHODS.iter().enumerate().map(|(i, m)| (*m, i)).collect();

    let hits = traffic();
    let misses = misses();
    let miss_refs: Vec<&str> = misses.iter().map(String::as_str).collect();
    for (label, names) in [("hits", &hits), ("misses", &miss_refs)] {
        let mut g = c.benchmark_group(format!("router/{label}"));
        g.throughput(Throughput::Elements(names.len() as u64));
        let expect: usize = names
            .iter()
            .map(|n| fx.get(n).copied().unwrap_or(1000))
            .sum();
        g.bench_function("rpcwire", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| router.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
                sum
            })
        });
        g.bench_function("fxhashmap", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| fx.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
                sum
            })
        });
        g.bench_function("std_hashmap", |b| {
            b.iter(|| {
                let sum: usize = names
                    .iter()
                    .map(|n| std_map.get(black_box(n)).copied().unwrap_or(1000))
                    .sum();
                assert_eq!(sum, expect);
                sum
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_router);
criterion_main!(benches);
