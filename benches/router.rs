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
#[path = "support/router_sets.rs"]
mod router_sets;

use router_sets::Copies;

fn bench_router(c: &mut Criterion) {
    for (label, table, names) in router_sets::cases() {
        let table: Vec<&str> = table.iter().map(String::as_str).collect();
        let router =
            rpcwire::router::Router::new(table.iter().enumerate().map(|(i, m)| (*m, i))).unwrap();
        let fx: rustc_hash::FxHashMap<&str, usize> =
            table.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let std_map: HashMap<&str, usize> =
            table.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let copies = Copies::of(&names);
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
