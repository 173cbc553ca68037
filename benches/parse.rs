use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/peers.rs"]
mod peers;

use corpus::Style;

/// The same digest as the peers compute: method length, id bytes, params
/// bytes, for every request in the message.
fn rpcwire_digest(input: &[u8], arena: &bumpalo::Bump) -> usize {
    let digest = |e: rpcwire::request::Entry| {
        let r = e.request().expect("corpus requests are valid");
        r.method().len()
            + r.id().map_or(0, |i| i.as_bytes().len())
            + r.params().map_or(0, |p| p.as_bytes().len())
    };
    match rpcwire::parse(input, arena).expect("corpus messages are valid") {
        rpcwire::message::Message::Single(e) => digest(e),
        rpcwire::message::Message::Batch(b) => b.map(digest).sum(),
    }
}

fn bench_parse(c: &mut Criterion) {
    let mut cases: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for (name, style) in [
        ("viem", Style::Viem),
        ("ethers", Style::Ethers),
        ("web3py", Style::Web3Py),
    ] {
        cases.push((
            format!("eth_single/{name}"),
            corpus::eth_singles(7, style, 256),
        ));
    }
    cases.push((
        "eth_batch_100".into(),
        vec![corpus::eth_batch(11, Style::Ethers, 100)],
    ));
    cases.push((
        "eth_batch_1000".into(),
        vec![corpus::eth_batch(13, Style::Viem, 1000)],
    ));
    cases.push(("mcp_tool_call".into(), corpus::mcp_tool_calls(17, 64)));
    cases.push((
        "eth_raw_tx_128k".into(),
        vec![corpus::eth_big_raw_tx(19, 128 * 1024)],
    ));

    for (name, msgs) in &cases {
        let bytes: usize = msgs.iter().map(Vec::len).sum();
        let mut g = c.benchmark_group(name.as_str());
        g.throughput(Throughput::Bytes(bytes as u64));
        let mut arena = bumpalo::Bump::new();
        g.bench_function("rpcwire", |b| {
            b.iter(|| {
                arena.reset();
                msgs.iter()
                    .map(|m| rpcwire_digest(black_box(m), &arena))
                    .sum::<usize>()
            })
        });
        g.bench_function("serde_json_raw", |b| {
            b.iter(|| {
                msgs.iter()
                    .map(|m| peers::serde_json_raw(black_box(m)))
                    .sum::<usize>()
            })
        });
        g.bench_function("serde_json_one_pass", |b| {
            b.iter(|| {
                msgs.iter()
                    .map(|m| peers::serde_json_one_pass(black_box(m)))
                    .sum::<usize>()
            })
        });
        g.bench_function("sonic_rs_lazy", |b| {
            b.iter(|| {
                msgs.iter()
                    .map(|m| peers::sonic_rs_lazy(black_box(m)))
                    .sum::<usize>()
            })
        });
        g.bench_function("sonic_rs_one_pass", |b| {
            b.iter(|| {
                msgs.iter()
                    .map(|m| peers::sonic_rs_one_pass(black_box(m)))
                    .sum::<usize>()
            })
        });
        let mut simd = peers::SimdJson::default();
        g.bench_function("simd_json_borrowed", |b| {
            b.iter(|| msgs.iter().map(|m| simd.parse(black_box(m))).sum::<usize>())
        });
        g.finish();
    }
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
