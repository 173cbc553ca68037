//! The whole round trip (parse, route, run the handler, write the reply) on
//! the Ethereum corpora of `support/corpus.rs` (the mixed single-request
//! stream, batches of 100 and of 1000), against serde_json + `FxHashMap` and
//! jsonrpsee's `RpcModule` (`support/round_trip.rs` says how each is driven).
//!
//! Every handler does the same work: answer a hex quantity computed from the
//! state and the length of the raw params. The replies of all three are
//! checked to be the same JSON before measuring. Each iteration handles the
//! next message of the corpus (round robin) and checks the length of its
//! reply. Groups named `hot/...` replay a small corpus, for comparison only.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/round_trip.rs"]
mod round_trip;

use round_trip::{jsonrpsee_module, rpcwire_dispatcher, serde_fx};

/// Runs `f` on message `i`, `i + 1`, ... of `msgs` (wrapping), one per
/// iteration, checking the length of each reply against `expect`.
fn round_robin<'a>(
    msgs: &'a [Vec<u8>],
    expect: &'a [usize],
    mut f: impl FnMut(&[u8], &mut Vec<u8>) + 'a,
) -> impl FnMut() + 'a {
    let mut i = 0;
    let mut out = Vec::with_capacity(1 << 20);
    move || {
        out.clear();
        f(black_box(&msgs[i]), &mut out);
        assert_eq!(out.len(), expect[i], "message {i}");
        i += 1;
        if i == msgs.len() {
            i = 0;
        }
    }
}

fn bench_round_trip(c: &mut Criterion) {
    let singles = corpus::eth_stream(31, 20_000);
    let b100 = corpus::eth_batches(37, 100, 200);
    let b1000 = corpus::eth_batches(41, 1000, 20);
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("hot/eth_singles", corpus::hot(&singles, 256)),
        ("hot/eth_batch_100", corpus::hot(&b100, 3)),
        ("hot/eth_batch_1000", corpus::hot(&b1000, 1)),
        ("eth_singles", singles),
        ("eth_batch_100", b100),
        ("eth_batch_1000", b1000),
    ];

    let d = rpcwire_dispatcher();
    let fx = serde_fx::methods();
    let module = jsonrpsee_module::module();

    for (name, msgs) in &cases {
        // Every implementation must produce the same replies, as JSON; each
        // one's reply lengths are checked while measuring.
        let mut arena = rpcwire::Connection::new();
        let (mut ours, mut theirs, mut rpsee) = (Vec::new(), Vec::new(), Vec::new());
        for m in msgs {
            let mut a = Vec::new();
            d.handle(m, &mut arena, &mut a);
            let mut b = Vec::new();
            serde_fx::handle(m, &fx, &mut b);
            let mut c = Vec::new();
            jsonrpsee_module::handle(&module, m, &mut c);
            let a_json: serde_json::Value = serde_json::from_slice(&a).unwrap();
            assert_eq!(
                a_json,
                serde_json::from_slice::<serde_json::Value>(&b).unwrap()
            );
            assert_eq!(
                a_json,
                serde_json::from_slice::<serde_json::Value>(&c).unwrap()
            );
            ours.push(a.len());
            theirs.push(b.len());
            rpsee.push(c.len());
        }

        let mut g = c.benchmark_group(format!("round_trip/{name}"));
        g.throughput(Throughput::Bytes((corpus::bytes(msgs) / msgs.len()) as u64));
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(2));
        g.sample_size(if name.contains("batch") { 30 } else { 50 });
        g.bench_function("rpcwire", |b| {
            b.iter(round_robin(msgs, &ours, |m, out| {
                d.handle(m, &mut arena, out);
            }))
        });
        g.bench_function("serde_json_fxhashmap", |b| {
            b.iter(round_robin(msgs, &theirs, |m, out| {
                serde_fx::handle(m, &fx, out)
            }))
        });
        g.bench_function("jsonrpsee_rpc_service", |b| {
            b.iter(round_robin(msgs, &rpsee, |m, out| {
                jsonrpsee_module::handle(&module, m, out)
            }))
        });
        g.finish();
    }
}

criterion_group!(benches, bench_round_trip);
criterion_main!(benches);
