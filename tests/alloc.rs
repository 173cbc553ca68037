//! Zero allocation, measured: parsing real traffic with a reused arena
//! allocates nothing.

#[path = "../benches/support/corpus.rs"]
mod corpus;
#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{CountingAlloc, allocations_during};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Reads everything a dispatcher would: method, id, each positional param.
fn touch(input: &[u8], arena: &bumpalo::Bump) -> usize {
    let visit = |e: rpcwire::Entry| {
        let r = e.request().expect("valid traffic");
        r.method().len()
            + r.id().map_or(0, |i| i.as_bytes().len())
            + r.params()
                .map_or(0, |p| p.iter().map(|v| v.as_bytes().len()).sum())
    };
    match rpcwire::parse(input, arena).expect("valid traffic") {
        rpcwire::Message::Single(e) => visit(e),
        rpcwire::Message::Batch(b) => b.map(visit).sum(),
    }
}

#[test]
fn parsing_real_traffic_allocates_nothing() {
    let mut singles = corpus::eth_stream(5, 10_000);
    // A method name written with escapes is decoded into the arena.
    singles.push(br#"{"jsonrpc":"2.0","id":1,"method":"eth_\u0063all","params":[]}"#.to_vec());
    let batches = corpus::eth_batches(6, 100, 100);
    let mcp = corpus::mcp_stream(9, 1000);

    // The per-message arena is sized once, up front, and reset between
    // messages: resetting keeps its memory.
    let mut arena = bumpalo::Bump::with_capacity(64 * 1024);
    let (allocations, total) = allocations_during(|| {
        let mut total = 0;
        for msg in singles.iter().chain(&batches).chain(&mcp) {
            arena.reset();
            total += touch(msg, &arena);
        }
        total
    });
    assert!(
        total > 1_000_000,
        "the messages were really read ({total} bytes)"
    );
    assert_eq!(
        allocations,
        0,
        "parsing {} singles and {} batches of 100",
        singles.len(),
        batches.len()
    );

    // The counter does count: the same work with a fresh arena per message
    // allocates.
    let (fresh, _) = allocations_during(|| {
        batches
            .iter()
            .map(|b| touch(b, &bumpalo::Bump::new()))
            .sum::<usize>()
    });
    assert!(
        fresh >= batches.len(),
        "a fresh arena per batch allocates ({fresh})"
    );
}

/// The methods of the Ethereum corpus, each answering a hex quantity.
fn eth_dispatcher() -> rpcwire::Dispatcher<u64> {
    let mut b = rpcwire::Dispatcher::<u64>::builder();
    for (name, _) in corpus::ETH_MIX {
        b = b.method(*name, |call: rpcwire::Call<'_, u64>| {
            // Read what a handler reads: the first positional param, if any.
            let first = call
                .params
                .and_then(|p| p.nth(0))
                .map_or(0, |v| v.as_bytes().len());
            Ok(call.reply.quantity((*call.state + first as u64) as u128))
        });
    }
    b.build().unwrap()
}

#[test]
fn dispatching_real_traffic_allocates_nothing_after_warm_up() {
    let d = eth_dispatcher();
    let singles = corpus::eth_stream(21, 10_000);
    let batches = corpus::eth_batches(22, 100, 100);

    let mut arena = bumpalo::Bump::new();
    let mut out = Vec::new();
    let state = 0x1b4u64;
    // Warm-up: the arena and the output buffer grow to their working size,
    // that of the largest reply (batches come from every client, and
    // web3.js's UUID ids make the longest replies).
    for msg in singles.iter().take(10).chain(&batches) {
        out.clear();
        assert!(d.handle(msg, &state, &mut arena, &mut out));
    }
    let (allocations, replied) = allocations_during(|| {
        let mut replied = 0usize;
        for msg in singles.iter().chain(&batches) {
            out.clear();
            d.handle(msg, &state, &mut arena, &mut out);
            replied += out.len();
        }
        replied
    });
    assert!(replied > 800_000, "replies were written ({replied} bytes)");
    assert_eq!(
        allocations,
        0,
        "dispatching {} singles and {} batches of 100",
        singles.len(),
        batches.len()
    );

    // The last reply is a well-formed batch reply.
    let last: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(last.as_array().unwrap().len(), 100);
    assert!(last[0]["result"].as_str().unwrap().starts_with("0x"));
}
