//! Parsing with full validation: rpcwire against its peers (see
//! `support/peers.rs`) on the corpora of `support/corpus.rs`. Each iteration
//! parses the next message of the corpus (round robin), so a large corpus is
//! never replayed from the caches, and checks the digest of what was read
//! against the one expected for that message. Groups named `hot/...` replay a
//! small corpus (the last messages of the large one) for comparison only.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/peers.rs"]
mod peers;

/// Runs `f` on message `i`, `i + 1`, ... of `msgs` (wrapping), one per
/// iteration, checking each result against `expect`.
fn round_robin<'a>(
    msgs: &'a [Vec<u8>],
    expect: &'a [usize],
    mut f: impl FnMut(&[u8]) -> usize + 'a,
) -> impl FnMut() + 'a {
    let mut i = 0;
    move || {
        let got = f(black_box(&msgs[i]));
        assert_eq!(got, expect[i], "message {i}");
        i += 1;
        if i == msgs.len() {
            i = 0;
        }
    }
}

struct Case {
    name: String,
    msgs: Vec<Vec<u8>>,
    batches: bool,
}

fn cases() -> Vec<Case> {
    let singles = corpus::eth_stream(7, 20_000);
    let b100 = corpus::eth_batches(11, 100, 200);
    let b1000 = corpus::eth_batches(13, 1000, 20);
    let mcp = corpus::mcp_stream(17, 20_000);
    let blobs = corpus::eth_big_raw_txs(19, 128 * 1024, 32);
    let hot = |name: &str, msgs: &[Vec<u8>], n: usize, batches: bool| Case {
        name: format!("hot/{name}"),
        msgs: corpus::hot(msgs, n),
        batches,
    };
    let mut cases = vec![
        hot("eth_singles", &singles, 256, false),
        hot("eth_batch_100", &b100, 3, true),
        hot("eth_batch_1000", &b1000, 1, true),
        hot("mcp", &mcp, 256, false),
        hot("eth_raw_tx_128k", &blobs, 1, false),
    ];
    cases.push(Case {
        name: "eth_singles".into(),
        msgs: singles,
        batches: false,
    });
    cases.push(Case {
        name: "eth_batch_100".into(),
        msgs: b100,
        batches: true,
    });
    cases.push(Case {
        name: "eth_batch_1000".into(),
        msgs: b1000,
        batches: true,
    });
    cases.push(Case {
        name: "mcp".into(),
        msgs: mcp,
        batches: false,
    });
    cases.push(Case {
        name: "eth_raw_tx_128k".into(),
        msgs: blobs,
        batches: false,
    });
    cases
}

fn bench_parse(c: &mut Criterion) {
    for case in cases() {
        let msgs = &case.msgs;
        let raw: Vec<usize> = msgs.iter().map(|m| peers::raw_digest(m)).collect();
        let dom: Vec<usize> = msgs
            .iter()
            .map(|m| peers::dom_digest(&serde_json::from_slice(m).unwrap()))
            .collect();
        let mut g = c.benchmark_group(format!("parse/{}", case.name));
        g.throughput(Throughput::Bytes((corpus::bytes(msgs) / msgs.len()) as u64));
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(2));
        g.sample_size(if case.batches { 30 } else { 50 });

        let mut arena = bumpalo::Bump::new();
        g.bench_function("rpcwire", |b| {
            b.iter(round_robin(msgs, &raw, |m| {
                arena.reset();
                peers::rpcwire_digest(m, &arena)
            }))
        });
        // For a single request the two serde_json shapes are the same code;
        // they differ on batches only.
        g.bench_function("serde_json_raw", |b| {
            b.iter(round_robin(msgs, &raw, peers::serde_json_raw))
        });
        if case.batches {
            g.bench_function("serde_json_one_pass", |b| {
                b.iter(round_robin(msgs, &raw, peers::serde_json_one_pass))
            });
        }
        g.bench_function("sonic_rs_lazy", |b| {
            b.iter(round_robin(msgs, &raw, peers::sonic_rs_lazy))
        });
        if case.batches {
            g.bench_function("sonic_rs_one_pass", |b| {
                b.iter(round_robin(msgs, &raw, peers::sonic_rs_one_pass))
            });
        }
        let mut simd = peers::SimdJsonTape::default();
        g.bench_function("simd_json_tape", |b| {
            b.iter(round_robin(msgs, &dom, |m| simd.parse(m)))
        });
        g.finish();
    }
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
