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
    let visit = |e: rpcwire::request::Entry| {
        let r = e.request().expect("valid traffic");
        r.method().len()
            + r.id().map_or(0, |i| i.as_bytes().len())
            + r.params()
                .map_or(0, |p| p.iter().map(|v| v.as_bytes().len()).sum())
    };
    match rpcwire::parse(input, arena).expect("valid traffic") {
        rpcwire::message::Message::Single(e) => visit(e),
        rpcwire::message::Message::Batch(b) => b.map(visit).sum(),
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

/// The methods of the Ethereum corpus, each answering a number.
fn eth_dispatcher() -> rpcwire::Dispatcher<u64> {
    let mut b = rpcwire::Dispatcher::builder(0x1b4u64);
    for (name, _) in corpus::ETH_MIX {
        b = b.method(*name, |call: rpcwire::Call<'_, u64>| {
            // Read what a handler reads: the first positional param, if any.
            let first = call.param(0).map_or(0, |v| v.as_bytes().len());
            call.reply.u64(*call.state + first as u64)
        });
    }
    b.build().unwrap()
}

fn eth_traffic() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    (
        corpus::eth_stream(21, 10_000),
        corpus::eth_batches(22, 100, 100),
    )
}

#[test]
fn dispatching_real_traffic_allocates_nothing_after_warm_up() {
    let d = eth_dispatcher();
    let (singles, batches) = eth_traffic();
    let mut conn = rpcwire::Connection::new();
    let mut out = Vec::new();
    // Warm-up: the arena and the output buffer grow to their working size,
    // that of the largest reply (batches come from every client, and
    // web3.js's UUID ids make the longest replies).
    for msg in singles.iter().take(10).chain(&batches) {
        out.clear();
        assert!(d.handle(msg, &mut conn, &mut out));
    }
    let (allocations, replied) = allocations_during(|| {
        let mut replied = 0usize;
        for msg in singles.iter().chain(&batches) {
            out.clear();
            d.handle(msg, &mut conn, &mut out);
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
    assert!(last[0]["result"].is_u64(), "{}", last[0]);
}

/// A struct read from positional params whose `#[serde(default)]` field
/// is left out: the `null` padded in for it is refused and the default
/// taken without allocating (serde_json's refusal allocated its message,
/// twice a call).
#[test]
fn a_default_taken_for_a_positional_param_left_out_allocates_nothing() {
    #[derive(serde::Deserialize)]
    struct Page {
        from: u64,
        #[serde(default)]
        count: u64,
    }
    let d = rpcwire::Dispatcher::builder(())
        .method("page", |c: rpcwire::Call<'_, ()>| {
            let p: Page = c.decode()?;
            c.reply.u64(p.from + p.count)
        })
        .build()
        .unwrap();
    let msg = br#"{"jsonrpc":"2.0","id":1,"method":"page","params":[5]}"#;
    let mut conn = rpcwire::Connection::new();
    let mut out = Vec::new();
    d.handle(msg, &mut conn, &mut out);
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":5}"#);
    let (allocations, ()) = allocations_during(|| {
        for _ in 0..100 {
            out.clear();
            d.handle(msg, &mut conn, &mut out);
        }
    });
    assert_eq!(out, br#"{"jsonrpc":"2.0","id":1,"result":5}"#);
    assert_eq!(allocations, 0);
}

/// Polls a future once: dispatch that needs no awaiting completes at once.
#[cfg(feature = "async")]
fn poll_once<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("sync handlers need no awaiting"),
    }
}

#[cfg(feature = "async")]
#[test]
fn async_dispatch_of_sync_handlers_allocates_nothing() {
    let d = eth_dispatcher();
    let (singles, batches) = eth_traffic();
    let count = batches.len();
    let inputs: Vec<bytes::Bytes> = singles
        .into_iter()
        .chain(batches)
        .map(bytes::Bytes::from)
        .collect();
    let mut conn = rpcwire::Connection::new();
    let mut out = Vec::new();
    // Warm-up, as above: every batch (the longest replies).
    for msg in inputs
        .iter()
        .take(10)
        .chain(inputs.iter().rev().take(count))
    {
        out.clear();
        assert!(poll_once(d.handle_async(msg, &mut conn, &mut out)));
    }
    let (allocations, replied) = allocations_during(|| {
        let mut replied = 0usize;
        for msg in &inputs {
            out.clear();
            poll_once(d.handle_async(msg, &mut conn, &mut out));
            replied += out.len();
        }
        replied
    });
    assert!(replied > 800_000, "replies were written ({replied} bytes)");
    assert_eq!(
        allocations,
        0,
        "async dispatch of {} messages",
        inputs.len()
    );
}

#[cfg(feature = "async")]
#[test]
fn an_async_handler_costs_one_allocation_its_future() {
    use rpcwire::dispatch::AsyncCall;
    let d = rpcwire::Dispatcher::builder(7u64)
        .async_method("eth_chainId", |call: AsyncCall<u64>| async move {
            // Reads its params and state, answers at once.
            let n = call.params.as_ref().map_or(0, |p| p.as_bytes().len()) as u64;
            Ok::<_, rpcwire::RpcError>(*call.state + n)
        })
        .build()
        .unwrap();
    // Inputs as a transport holds them: slices of a shared read buffer
    // (clones and slices of it allocate nothing).
    let mut buffer = bytes::BytesMut::new();
    for i in 0..1000 {
        buffer.extend_from_slice(
            format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_chainId","params":[{i}]}}"#)
                .as_bytes(),
        );
    }
    let mut inputs = Vec::new();
    for i in 0..1000 {
        let len =
            format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_chainId","params":[{i}]}}"#).len();
        inputs.push(buffer.split_to(len).freeze());
    }
    let run = |msg: &bytes::Bytes, conn: &mut rpcwire::Connection, out: &mut Vec<u8>| {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut f = std::pin::pin!(d.handle_async(msg, conn, out));
        while f.as_mut().poll(&mut cx).is_pending() {}
    };
    // A connection that keeps nothing between messages too: it kept no
    // reply list either once they counted against `max_retained`, and
    // each message allocated one (found by a review).
    for conn in [
        rpcwire::Connection::new(),
        rpcwire::Connection::new().max_retained(0),
    ] {
        let mut conn = conn;
        let mut out = Vec::new();
        for msg in inputs.iter().take(10) {
            out.clear();
            run(msg, &mut conn, &mut out);
        }
        let (allocations, ()) = allocations_during(|| {
            for msg in &inputs[10..] {
                out.clear();
                run(msg, &mut conn, &mut out);
            }
        });
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()["result"],
            7 + 5
        );
        assert!(
            allocations <= 990,
            "{allocations} allocations for 990 async calls: at most one each"
        );
        assert!(allocations >= 990, "each future is boxed ({allocations})");
    }
}

/// Two-way traffic: this side's requests and notifications written with the
/// `peer` writers under ids from a `PendingTable`, and the other side's
/// messages (its responses to them, alone and in batches mixed with its own
/// requests) classified in one pass and matched back: nothing allocates
/// once the buffers, the arena and the table have their working size.
#[test]
fn two_way_traffic_allocates_nothing_after_warm_up() {
    use rpcwire::message::{Incoming, Message};
    const ROUNDS: u64 = 2_000;
    let parser = rpcwire::Parser::new();
    let mut arena = bumpalo::Bump::new();
    let mut table: rpcwire::peer::PendingTable<u64> = rpcwire::peer::PendingTable::new();
    let mut out = Vec::with_capacity(64 * 1024);
    // What the other side answers, prepared before counting: for round `n`
    // (ids 2n+1 and 2n+2), a single response, then a batch holding the
    // other response, an error and a request of its own.
    let inbound: Vec<(Vec<u8>, Vec<u8>)> = (0..ROUNDS + 10)
        .map(|n| {
            let (a, b) = (2 * n + 1, 2 * n + 2);
            (
                format!(r#"{{"jsonrpc":"2.0","id":{a},"result":{{"gasUsed":"0x5208","logs":[]}}}}"#).into_bytes(),
                format!(r#"[{{"jsonrpc":"2.0","id":{b},"error":{{"code":-32000,"message":"nonce too low"}}}},{{"jsonrpc":"2.0","id":"srv-{n}","method":"eth_subscription","params":{{"subscription":"0x1","result":{n}}}}}]"#).into_bytes(),
            )
        })
        .collect();
    let mut round = |n: usize, out: &mut Vec<u8>, arena: &mut bumpalo::Bump| -> (usize, usize) {
        out.clear();
        let a = table.insert(n as u64, None);
        let b = table.insert(n as u64, None);
        rpcwire::peer::write_request(out, a, "eth_call", Some(&(("0xabc", "0x1234"), "latest")))
            .unwrap();
        rpcwire::peer::write_request(out, b, "eth_getBalance", Some(&("0xabc", "latest"))).unwrap();
        rpcwire::peer::write_notification_raw(out, "eth_subscribe", Some(br#"["newHeads"]"#));
        rpcwire::peer::write_notification(out, "notifications/progress", Some(&[n, 100])).unwrap();
        let (mut matched, mut requests) = (0, 0);
        for msg in [&inbound[n].0, &inbound[n].1] {
            arena.reset();
            let mut see = |item: Incoming<'_>| match item {
                Incoming::Response(r) => {
                    assert_eq!(table.take(r.id()), Some(n as u64));
                    matched += 1;
                }
                Incoming::Request(_) => requests += 1,
                _ => panic!("valid traffic"),
            };
            match parser.parse_incoming(msg, arena).unwrap() {
                Message::Single(item) => see(item),
                Message::Batch(items) => items.for_each(&mut see),
            }
        }
        (matched, requests)
    };
    for n in 0..10 {
        round(n, &mut out, &mut arena);
    }
    let (allocations, (matched, requests)) = allocations_during(|| {
        let (mut matched, mut requests) = (0, 0);
        for n in 10..(ROUNDS as usize + 10) {
            let (m, r) = round(n, &mut out, &mut arena);
            matched += m;
            requests += r;
        }
        (matched, requests)
    });
    assert_eq!((matched, requests), (2 * ROUNDS as usize, ROUNDS as usize));
    assert!(table.is_empty(), "every request was answered");
    assert_eq!(allocations, 0, "{ROUNDS} rounds of two-way traffic");
    // The last round's outbound messages are valid JSON-RPC.
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(
        text.contains(r#""method":"eth_call","params":[["0xabc","0x1234"],"latest"]"#),
        "{text}"
    );
}

/// The pending table under a steady trickle of requests with deadlines,
/// one of them pending all along (a slow call on top of the deadline
/// heap): nothing allocates once warm. Its shrinking after bursts once cut
/// the heap below what it grows to between compactions: two allocations
/// every 65 requests.
#[test]
fn the_pending_table_s_trickle_with_deadlines_allocates_nothing() {
    use std::time::{Duration, Instant};
    let now = Instant::now();
    let mut table: rpcwire::peer::PendingTable<u64> = rpcwire::peer::PendingTable::new();
    let slow = table.insert(0, Some(now + Duration::from_secs(1)));
    let trickle = |rounds: u64, table: &mut rpcwire::peer::PendingTable<u64>| {
        for n in 0..rounds {
            // Answered out of order, a few at a time.
            let ids: [u64; 4] = std::array::from_fn(|k| {
                table.insert(n, Some(now + Duration::from_secs(60 + (n + k as u64) % 7)))
            });
            for id in ids.into_iter().rev() {
                assert_eq!(table.cancel(id), Some(n));
            }
        }
    };
    trickle(1_000, &mut table);
    let (allocations, ()) = allocations_during(|| trickle(10_000, &mut table));
    assert_eq!(allocations, 0);
    assert_eq!(table.len(), 1);
    assert_eq!(table.cancel(slow), Some(0));
}

/// The pending table under a count of requests in flight that moves (a
/// random walk between 20 and 60, answered out of order) over one request
/// pending all along: nothing allocates once warm. The heap's floor was
/// tied to how many waited when it shrank, so it grew and shrank as the
/// count moved (about 370 reallocations in 200,000 operations).
#[test]
fn the_pending_table_under_a_moving_load_allocates_nothing() {
    use std::time::{Duration, Instant};
    let now = Instant::now();
    let mut table: rpcwire::peer::PendingTable<u64> = rpcwire::peer::PendingTable::new();
    let slow = table.insert(0, Some(now + Duration::from_secs(1)));
    let mut in_flight = std::collections::VecDeque::with_capacity(128);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut walk = |steps: usize, table: &mut rpcwire::peer::PendingTable<u64>| {
        for n in 0..steps {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let grow = match in_flight.len() {
                0..20 => true,
                60.. => false,
                _ => seed & 1 == 0,
            };
            if grow {
                let at = now + Duration::from_secs(60 + seed % 11);
                in_flight.push_back(table.insert(n as u64, Some(at)));
            } else {
                // Out of order: from the front or the back.
                let id = if seed & 2 == 0 {
                    in_flight.pop_front()
                } else {
                    in_flight.pop_back()
                };
                assert!(table.cancel(id.unwrap()).is_some());
            }
        }
    };
    walk(200_000, &mut table);
    let (allocations, ()) = allocations_during(|| walk(200_000, &mut table));
    assert_eq!(allocations, 0);
    assert_eq!(table.cancel(slow), Some(0));
}
