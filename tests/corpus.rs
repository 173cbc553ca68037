//! The benchmark corpora are what DESIGN.md's "Benchmark corpora" asks for:
//! large, distinct, valid, every client style present, the public method
//! mix. `cargo test --test corpus -- --nocapture` prints their statistics.

#[path = "../benches/support/corpus.rs"]
mod corpus;

use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::{HashMap, HashSet};

/// Every request of a corpus, parsed by serde_json (which must accept it).
fn requests(corpus: &[Vec<u8>]) -> Vec<Value> {
    corpus
        .iter()
        .flat_map(
            |m| match serde_json::from_slice::<Value>(m).expect("valid JSON") {
                Value::Array(entries) => entries,
                single => vec![single],
            },
        )
        .collect()
}

/// The client a message's bytes look like it came from.
fn style_of(msg: &[u8]) -> &'static str {
    let s = std::str::from_utf8(msg).unwrap();
    if s.starts_with("{\"jsonrpc\": ") || s.starts_with("[{\"jsonrpc\": ") {
        "web3.py"
    } else if s.contains("\"jsonrpc\":\"2.0\"}") {
        "ethers"
    } else if s.contains("\"id\":\"") {
        "web3.js"
    } else {
        let v: Value = serde_json::from_slice(msg).unwrap();
        let first = match &v {
            Value::Array(a) => a[0].clone(),
            _ => v,
        };
        if first["id"].as_u64().is_some_and(|id| id > 1 << 53) {
            "indexer"
        } else {
            "viem"
        }
    }
}

fn share(counts: &HashMap<String, usize>, key: &str, total: usize) -> f64 {
    *counts.get(key).unwrap_or(&0) as f64 / total as f64
}

fn describe(name: &str, corpus: &[Vec<u8>]) {
    let sizes: Vec<usize> = corpus.iter().map(Vec::len).collect();
    println!(
        "{name}: {} messages, {} bytes, {}..{} bytes each (mean {})",
        corpus.len(),
        corpus::bytes(corpus),
        sizes.iter().min().unwrap(),
        sizes.iter().max().unwrap(),
        corpus::bytes(corpus) / corpus.len()
    );
}

fn method_counts(reqs: &[Value]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in reqs {
        *counts
            .entry(r["method"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn ethereum_singles_stream() {
    let stream = corpus::eth_stream(1, 20_000);
    describe("eth_stream", &stream);
    let distinct: HashSet<&Vec<u8>> = stream.iter().collect();
    assert_eq!(distinct.len(), 20_000, "every message distinct");

    let reqs = requests(&stream);
    let counts = method_counts(&reqs);
    let mut by_count: Vec<_> = counts.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1));
    println!("  methods: {by_count:?}");
    assert!((0.40..=0.50).contains(&share(&counts, "eth_call", reqs.len())));
    assert!((0.10..=0.15).contains(&share(&counts, "eth_getTransactionReceipt", reqs.len())));
    let top10: usize = by_count.iter().take(10).map(|(_, c)| **c).sum();
    assert!(top10 as f64 / reqs.len() as f64 >= 0.9);
    for (m, _) in corpus::ETH_MIX {
        assert!(counts.contains_key(*m), "{m} occurs");
    }

    let mut styles: HashMap<String, usize> = HashMap::new();
    for m in &stream {
        *styles.entry(style_of(m).to_string()).or_insert(0) += 1;
    }
    println!("  clients: {styles:?}");
    for s in ["viem", "ethers", "web3.py", "web3.js", "indexer"] {
        assert!(share(&styles, s, stream.len()) >= 0.1, "{s}");
    }
    // The shapes of each client.
    let text: Vec<&str> = stream
        .iter()
        .map(|m| std::str::from_utf8(m).unwrap())
        .collect();
    assert!(
        text.iter().any(|m| m.starts_with("{\"id\":")),
        "ethers id first"
    );
    assert!(
        text.iter().any(|m| m.contains("\"params\":[]")),
        "ethers []"
    );
    assert!(
        text.iter()
            .any(|m| m.starts_with("{\"jsonrpc\":\"2.0\",\"id\":0,")),
        "viem ids from 0"
    );
    assert!(
        reqs.iter()
            .any(|r| r.get("params").is_none() && r["method"] == "eth_blockNumber"),
        "viem omits params"
    );

    // Sizes: 50 B to about 1 KB; eth_blockNumber small, raw transactions
    // 0.3-1 KB.
    for (m, r) in stream.iter().zip(&reqs) {
        assert!((45..=1300).contains(&m.len()), "{}", m.len());
        match r["method"].as_str().unwrap() {
            // Up to 100 bytes with a UUID id.
            "eth_blockNumber" => assert!(m.len() <= 100, "{}", m.len()),
            "eth_sendRawTransaction" => assert!((300..=1100).contains(&m.len()), "{}", m.len()),
            _ => {}
        }
    }
}

#[test]
fn ethereum_batches() {
    let b100 = corpus::eth_batches(2, 100, 200);
    let b1000 = corpus::eth_batches(3, 1000, 20);
    describe("eth_batches(100)", &b100);
    describe("eth_batches(1000)", &b1000);
    for (batches, size) in [(&b100, 100), (&b1000, 1000)] {
        let reqs = requests(batches);
        assert_eq!(reqs.len(), batches.len() * size);
        let raw: Vec<&str> = batches
            .iter()
            .flat_map(|b| serde_json::from_slice::<Vec<&RawValue>>(b).unwrap())
            .map(RawValue::get)
            .collect();
        let distinct: HashSet<&str> = raw.iter().copied().collect();
        assert_eq!(distinct.len(), reqs.len(), "every request distinct");
        assert!(reqs.len() >= 20_000);
        let styles: HashSet<&str> = batches.iter().map(|b| style_of(b)).collect();
        assert_eq!(styles.len(), 5, "{styles:?}");
        let counts = method_counts(&reqs);
        assert!((0.35..=0.50).contains(&share(&counts, "eth_call", reqs.len())));
    }
}

#[test]
fn mcp_stream() {
    let stream = corpus::mcp_stream(4, 20_000);
    describe("mcp_stream", &stream);
    let distinct: HashSet<&Vec<u8>> = stream.iter().collect();
    assert_eq!(distinct.len(), 20_000);
    // Only notifications (no id) repeat, as every session's
    // `notifications/initialized` does.
    assert!(stream.len() - distinct.len() < 200);
    let reqs = requests(&stream);
    let counts = method_counts(&reqs);
    println!("  methods: {counts:?}");
    assert!(share(&counts, "tools/call", reqs.len()) >= 0.85);
    for m in [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "server/discover",
        "ping",
    ] {
        assert!(counts.contains_key(m), "{m}");
    }
    let tools: HashSet<&str> = reqs
        .iter()
        .filter_map(|r| r["params"]["name"].as_str())
        .collect();
    assert!(tools.len() >= 12, "{tools:?}");
    assert!(reqs.iter().any(|r| r["id"].is_string()));
    assert!(reqs.iter().any(|r| r["id"].is_u64()));
    assert!(
        reqs.iter()
            .all(|r| r.get("id").is_none_or(|id| !id.is_null())),
        "ids are never null"
    );
    assert!(stream.iter().any(|m| !m.is_ascii()), "raw non-ASCII text");
    assert!(
        stream.iter().any(|m| m.windows(2).any(|w| w == b"\\u")),
        "\\u escapes"
    );
    assert!(
        stream.iter().all(|m| !m.contains(&b'\n')),
        "one message per line"
    );
}

#[test]
fn blob_transactions() {
    let txs = corpus::eth_big_raw_txs(5, 128 * 1024, 32);
    describe("eth_big_raw_txs", &txs);
    let distinct: HashSet<&Vec<u8>> = txs.iter().collect();
    assert_eq!(distinct.len(), 32);
    for (m, r) in txs.iter().zip(requests(&txs)) {
        assert!(
            (128 * 1024 - 8..=128 * 1024).contains(&m.len()),
            "{}",
            m.len()
        );
        assert_eq!(r["method"], "eth_sendRawTransaction");
    }
}

#[test]
fn ethereum_responses() {
    let n = 4000;
    let corpus = corpus::eth_responses(3, n);
    describe("eth_responses", &corpus);
    let distinct: HashSet<&Vec<u8>> = corpus.iter().collect();
    assert_eq!(distinct.len(), n);
    let (mut id_first, mut errors, mut reverts, mut objects) = (0, 0, 0, 0);
    for m in &corpus {
        let v: Value = serde_json::from_slice(m).expect("valid JSON");
        assert_eq!(v["jsonrpc"], "2.0");
        assert!(v.get("id").is_some());
        assert!(v.get("result").is_some() != v.get("error").is_some());
        // rpcwire reads every one as a valid response.
        let arena = bumpalo::Bump::new();
        assert!(rpcwire::parse_response(m, &arena).is_ok());
        id_first += m.starts_with(br#"{"jsonrpc":"2.0","id":"#) as usize;
        if let Some(e) = v.get("error") {
            errors += 1;
            reverts += (e["code"] == 3 && e["data"].is_string()) as usize;
        }
        objects += v["result"].is_object() as usize;
    }
    let share = |k: usize| k as f64 / n as f64;
    // geth's member order and jsonrpsee's, mixed.
    assert!((0.5..0.7).contains(&share(id_first)), "{id_first}");
    assert!((0.02..0.1).contains(&share(errors)), "{errors}");
    assert!(reverts > 0);
    // Receipts, blocks and transactions.
    assert!((0.1..0.4).contains(&share(objects)), "{objects}");
}

#[test]
fn corpora_are_deterministic() {
    assert_eq!(corpus::eth_stream(9, 500), corpus::eth_stream(9, 500));
    assert_eq!(corpus::mcp_stream(9, 500), corpus::mcp_stream(9, 500));
    assert_ne!(corpus::eth_stream(9, 500), corpus::eth_stream(10, 500));
}
