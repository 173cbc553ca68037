//! The method-name sets of the router comparisons, shared by `router.rs`
//! (criterion) and `interleaved.rs`: a table of 44 Ethereum and MCP names
//! looked up in the mixed Ethereum stream's order, near misses of them, and
//! a table of 2,000 names of the shapes real namespaces use.
#![allow(dead_code)]

use std::collections::HashMap;

use super::corpus;

/// Forty-four names a node or MCP server registers, most frequent first.
pub const METHODS: &[&str] = &[
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
pub fn corpus_methods() -> Vec<String> {
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
pub fn near_misses(names: &[&str], rng: &mut corpus::Rng, n: usize) -> Vec<String> {
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
pub fn many_names() -> Vec<String> {
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
pub struct Copies {
    buf: String,
    spans: Vec<(usize, usize)>,
}

impl Copies {
    pub fn of(names: &[String]) -> Copies {
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

    pub fn sequence(&self) -> Vec<&str> {
        self.spans.iter().map(|&(a, b)| &self.buf[a..b]).collect()
    }
}

/// The four lookup cases: (label, table, looked-up names).
pub fn cases() -> Vec<(&'static str, Vec<String>, Vec<String>)> {
    let small: Vec<String> = METHODS.iter().map(|m| m.to_string()).collect();
    let small_refs: Vec<&str> = METHODS.to_vec();
    let many = many_names();
    let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut rng = corpus::Rng::new(77);
    let hits = corpus_methods();
    let misses = near_misses(&small_refs, &mut rng, 2_000);
    let many_hits: Vec<String> = (0..20_000)
        .map(|_| rng.one_of(&many_refs).to_string())
        .collect();
    let distinct_misses = near_misses(&many_refs, &mut rng, 2_000);
    let many_misses: Vec<String> = (0..20_000)
        .map(|_| distinct_misses[rng.below(distinct_misses.len() as u64) as usize].clone())
        .collect();
    vec![
        ("hits", small.clone(), hits),
        ("misses", small, misses),
        ("2000_hits", many.clone(), many_hits),
        ("2000_misses", many, many_misses),
    ]
}
