//! The parse and round-trip comparisons of `parse.rs` and `dispatch.rs`,
//! measured the way a shared, noisy machine needs: contestants interleaved
//! round by round in one process (`support/interleave.rs`), so that a
//! neighbour's burst lands on all of them alike.
//!
//! `cargo bench --features peers,eth --bench interleaved [filter]` runs, for
//! each large mixed corpus (the same corpora, digests and checks as
//! `parse.rs` and `dispatch.rs`), `ROUNDS` rounds (default 21); in each
//! round every contestant (rpcwire, then the peers, in an order that
//! rotates from round to round) passes over the whole corpus `PASSES` times
//! (default 3), every result checked. Reported per corpus: each
//! contestant's median time per message, rpcwire's lead over each peer, and
//! over the fastest peer *of each round* (the stricter reading: a peer's
//! lucky round counts against rpcwire), min / median / max over the rounds.
//!
//! Each single-message corpus is measured in two memory layouts:
//!
//! * scattered (`eth_singles`, `mcp`): each message in its own heap
//!   allocation, as the corpus was generated, first touched by the parser.
//!   The allocations are not in address order, so the hardware prefetcher
//!   cannot run ahead and every message's first line is an L2 miss that
//!   every contestant pays (with rpcwire's ~100 ns per message, that miss
//!   is close to half of its time);
//! * stream (`eth_singles_stream`, `mcp_stream`): the same messages back to
//!   back, newline-separated, in one buffer, as a stdio, TCP or IPC
//!   connection's read buffer (or a pipelined HTTP connection's) holds them.
//!   The buffer (megabytes) is beyond L2 too, but it is read in address
//!   order, as a server reads what it has just received.
//!
//! Responses (`response/eth_responses`, both layouts) are measured too:
//! what a gateway reads back from its upstreams for the singles' traffic.
//!
//! The MCP corpus is also measured in two parts, `mcp_text` (messages with
//! free text: escapes or non-ASCII characters in their strings) and
//! `mcp_plain` (the rest).
//!
//! criterion's groups (`--bench parse`, `--bench dispatch`) measure each
//! contestant for two seconds in turn; there a drift of the machine between
//! two windows moves the ratio, here it moves all contestants of a round
//! together.

use std::hint::black_box;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/interleave.rs"]
mod interleave;
#[path = "support/peers.rs"]
mod peers;
#[path = "support/round_trip.rs"]
mod round_trip;
#[path = "support/router_sets.rs"]
mod router_sets;

use interleave::{Contestant, compare};

/// One pass of `parse` over `msgs`, each digest checked against `expect`.
fn digest_pass<'a>(
    msgs: &'a [&'a [u8]],
    expect: &'a [usize],
    mut parse: impl FnMut(&[u8]) -> usize + 'a,
) -> impl FnMut() + 'a {
    move || {
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(parse(black_box(m)), expect[i], "message {i}");
        }
    }
}

/// One pass of `handle` over `msgs`, each reply's length checked against
/// `expect`.
fn reply_pass<'a>(
    msgs: &'a [&'a [u8]],
    expect: Vec<usize>,
    mut handle: impl FnMut(&[u8], &mut Vec<u8>) + 'a,
) -> impl FnMut() + 'a {
    let mut out = Vec::with_capacity(1 << 20);
    move || {
        for (i, m) in msgs.iter().enumerate() {
            out.clear();
            handle(black_box(m), &mut out);
            assert_eq!(out.len(), expect[i], "message {i}");
        }
    }
}

/// Parsing with full validation: rpcwire and the peers of `parse.rs`, each
/// message's digest checked.
fn parse(name: &str, msgs: &[&[u8]], batches: bool) {
    let raw: Vec<usize> = msgs.iter().map(|m| peers::raw_digest(m)).collect();
    let dom: Vec<usize> = msgs
        .iter()
        .map(|m| peers::dom_digest(&serde_json::from_slice(m).unwrap()))
        .collect();
    let mut arena = bumpalo::Bump::new();
    let mut all = vec![Contestant::new(
        "rpcwire",
        digest_pass(msgs, &raw, move |m| {
            arena.reset();
            peers::rpcwire_digest(m, &arena)
        }),
    )];
    // The serde_json and sonic-rs shapes; the one-pass forms only for
    // batches (on a single request they are the same work). Each passed as
    // its own function item, called statically as rpcwire is (through a
    // function pointer each call was indirect).
    all.push(Contestant::new(
        "serde_json_raw",
        digest_pass(msgs, &raw, peers::serde_json_raw),
    ));
    if batches {
        all.push(Contestant::new(
            "serde_json_one_pass",
            digest_pass(msgs, &raw, peers::serde_json_one_pass),
        ));
    }
    all.push(Contestant::new(
        "sonic_rs_lazy",
        digest_pass(msgs, &raw, peers::sonic_rs_lazy),
    ));
    if batches {
        all.push(Contestant::new(
            "sonic_rs_one_pass",
            digest_pass(msgs, &raw, peers::sonic_rs_one_pass),
        ));
    }
    let mut simd = peers::SimdJsonTape::default();
    all.push(Contestant::new(
        "simd_json_tape",
        digest_pass(msgs, &dom, move |m| simd.parse(m)),
    ));
    compare(&format!("parse/{name}"), msgs.len(), total(msgs), &mut all);
}

/// Responses, as a gateway reads its upstreams' replies: rpcwire's
/// `parse_response` against serde_json into the jsonrpsee-types / alloy
/// shape (raw id and result, the error object's members), sonic-rs into
/// the same shape with `LazyValue`s, and simd-json's tape.
fn responses(name: &str, msgs: &[&[u8]]) {
    let raw: Vec<usize> = msgs.iter().map(|m| peers::serde_json_response(m)).collect();
    let dom: Vec<usize> = msgs
        .iter()
        .map(|m| peers::response_dom_digest(&serde_json::from_slice(m).unwrap()))
        .collect();
    let mut arena = bumpalo::Bump::new();
    let mut simd = peers::SimdJsonTape::default();
    let mut all = vec![
        Contestant::new(
            "rpcwire",
            digest_pass(msgs, &raw, move |m| {
                arena.reset();
                peers::rpcwire_response_digest(m, &arena)
            }),
        ),
        Contestant::new(
            "serde_json_raw",
            digest_pass(msgs, &raw, peers::serde_json_response),
        ),
        Contestant::new(
            "sonic_rs_lazy",
            digest_pass(msgs, &raw, peers::sonic_rs_response),
        ),
        Contestant::new(
            "simd_json_tape",
            digest_pass(msgs, &dom, move |m| simd.parse_response(m)),
        ),
    ];
    compare(
        &format!("response/{name}"),
        msgs.len(),
        total(msgs),
        &mut all,
    );
}

/// The round trip (parse, route, handler, reply) of `dispatch.rs`: rpcwire,
/// serde_json + FxHashMap, jsonrpsee; each reply's length checked.
fn round_trip(name: &str, msgs: &[&[u8]]) {
    let d = round_trip::rpcwire_dispatcher();
    let fx = round_trip::serde_fx::methods();
    let module = round_trip::jsonrpsee_module::module();
    let mut conn = rpcwire::Connection::new();
    // The replies, from each contestant itself: the same JSON from all
    // three (checked here, before timing), and each reply's length checked
    // while timing.
    let replies = |f: &mut dyn FnMut(&[u8], &mut Vec<u8>)| -> Vec<Vec<u8>> {
        msgs.iter()
            .map(|m| {
                let mut out = Vec::new();
                f(m, &mut out);
                out
            })
            .collect()
    };
    let ours = replies(&mut |m, out| {
        d.handle(m, &mut conn, out);
    });
    let theirs = replies(&mut |m, out| round_trip::serde_fx::handle(m, &fx, out));
    let rpsee = replies(&mut |m, out| round_trip::jsonrpsee_module::handle(&module, m, out));
    for (i, ours) in ours.iter().enumerate() {
        let value = |r: &[u8]| serde_json::from_slice::<serde_json::Value>(r).unwrap();
        let ours = value(ours);
        assert_eq!(ours, value(&theirs[i]), "message {i}");
        assert_eq!(ours, value(&rpsee[i]), "message {i}");
    }
    let lengths = |replies: Vec<Vec<u8>>| -> Vec<usize> { replies.iter().map(Vec::len).collect() };
    let (ours, theirs, rpsee) = (lengths(ours), lengths(theirs), lengths(rpsee));
    let mut all = vec![
        Contestant::new(
            "rpcwire",
            reply_pass(msgs, ours, |m, out| {
                d.handle(m, &mut conn, out);
            }),
        ),
        Contestant::new(
            "serde_json_fxhashmap",
            reply_pass(msgs, theirs, |m, out| {
                round_trip::serde_fx::handle(m, &fx, out)
            }),
        ),
        Contestant::new(
            "jsonrpsee_rpc_service",
            reply_pass(msgs, rpsee, |m, out| {
                round_trip::jsonrpsee_module::handle(&module, m, out)
            }),
        ),
    ];
    compare(
        &format!("round_trip/{name}"),
        msgs.len(),
        total(msgs),
        &mut all,
    );
}

/// Method lookup (`router.rs`'s cases): rpcwire's `Router` against
/// `FxHashMap<&str, _>` and std's `HashMap`, each pass summing the values
/// found (1000 for a miss) and checking the sum.
fn router(label: &str, table: &[String], names: &[String]) {
    let router =
        rpcwire::router::Router::new(table.iter().enumerate().map(|(i, m)| (m.as_str(), i)))
            .unwrap();
    let fx: rustc_hash::FxHashMap<&str, usize> = table
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let std_map: std::collections::HashMap<&str, usize> = table
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let copies = router_sets::Copies::of(names);
    let names = copies.sequence();
    let expect: usize = names
        .iter()
        .map(|n| fx.get(n).copied().unwrap_or(1000))
        .sum();
    // Generic, not `dyn`: each contestant's lookup inlined in its loop.
    fn pass<'a>(
        names: &'a [&'a str],
        expect: usize,
        get: impl Fn(&str) -> Option<usize> + 'a,
    ) -> impl FnMut() + 'a {
        move || {
            let sum: usize = names
                .iter()
                .map(|n| get(black_box(n)).unwrap_or(1000))
                .sum();
            assert_eq!(sum, expect);
        }
    }
    let bytes = names.iter().map(|n| n.len()).sum();
    let mut all = vec![
        Contestant::new("rpcwire", pass(&names, expect, |n| router.get(n).copied())),
        Contestant::new("fxhashmap", pass(&names, expect, |n| fx.get(n).copied())),
        Contestant::new(
            "std_hashmap",
            pass(&names, expect, |n| std_map.get(n).copied()),
        ),
    ];
    compare(&format!("router/{label}"), names.len(), bytes, &mut all);
}

fn total(msgs: &[&[u8]]) -> usize {
    msgs.iter().map(|m| m.len()).sum()
}

/// Builds a corpus (when its comparison is wanted).
type MakeCorpus = fn() -> Vec<Vec<u8>>;

/// The messages of an MCP stream that hold free text (a byte >= 0x80 or
/// a backslash), or those that do not: 20,000 of them, as every corpus
/// (the stream is made long enough; the `mcp` corpus is its start).
fn mcp_part(text: bool) -> Vec<Vec<u8>> {
    let is_text = |m: &Vec<u8>| m.iter().any(|&b| b >= 0x80 || b == b'\\');
    let mut all = corpus::mcp_stream(17, 50_000);
    all.retain(|m| is_text(m) == text);
    assert!(all.len() >= 20_000, "{} messages", all.len());
    all.truncate(20_000);
    all
}

/// The two layouts of a corpus (see the module's docs): each message where
/// it was allocated, and the same messages back to back in `stream`.
fn layouts<'a>(corpus: &'a [Vec<u8>], stream: &'a mut Vec<u8>) -> [Vec<&'a [u8]>; 2] {
    stream.clear();
    let mut ends = Vec::with_capacity(corpus.len());
    for m in corpus {
        stream.extend_from_slice(m);
        ends.push(stream.len());
        stream.push(b'\n');
    }
    let stream: &'a [u8] = stream;
    let mut start = 0;
    let contiguous = ends
        .into_iter()
        .map(|end| {
            let m = &stream[start..end];
            start = end + 1;
            m
        })
        .collect();
    [corpus.iter().map(Vec::as_slice).collect(), contiguous]
}

/// Runs `run` on the layouts of `corpus` whose names (`name`, and
/// `name_stream` if `stream`) are wanted.
fn each_layout(
    name: &str,
    make: MakeCorpus,
    stream: bool,
    wanted: &dyn Fn(&str) -> bool,
    run: &mut dyn FnMut(&str, &[&[u8]]),
) {
    let stream_name = format!("{name}_stream");
    let names = [name, stream_name.as_str()];
    let picked: Vec<bool> = (0..2)
        .map(|i| (i == 0 || stream) && wanted(names[i]))
        .collect();
    if !picked.contains(&true) {
        return;
    }
    let corpus = make();
    let mut buffer = Vec::new();
    for (i, msgs) in layouts(&corpus, &mut buffer).iter().enumerate() {
        if picked[i] {
            run(names[i], msgs);
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks comparisons.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let (rounds, passes) = interleave::settings();
    println!("{rounds} rounds, {passes} passes per contestant per round");
    // (name, corpus, whether it holds batches, whether it is also measured
    // in the stream layout: single messages of a few hundred bytes)
    let parse_cases: [(&str, MakeCorpus, bool, bool); 7] = [
        ("eth_singles", || corpus::eth_stream(7, 20_000), false, true),
        (
            "eth_batch_100",
            || corpus::eth_batches(11, 100, 200),
            true,
            false,
        ),
        (
            "eth_batch_1000",
            || corpus::eth_batches(13, 1000, 20),
            true,
            false,
        ),
        ("mcp", || corpus::mcp_stream(17, 20_000), false, true),
        // The MCP corpus in two parts: messages with free text (non-ASCII
        // characters or escapes in their strings), and the rest.
        ("mcp_text", || mcp_part(true), false, true),
        ("mcp_plain", || mcp_part(false), false, true),
        (
            "eth_raw_tx_128k",
            || corpus::eth_big_raw_txs(19, 128 * 1024, 32),
            false,
            false,
        ),
    ];
    for (name, make, batches, stream) in parse_cases {
        let wanted = |n: &str| wanted(&format!("parse/{n}"));
        each_layout(name, make, stream, &wanted, &mut |n, msgs| {
            parse(n, msgs, batches)
        });
    }
    // What a gateway reads back from its upstreams.
    let wanted_response = |n: &str| wanted(&format!("response/{n}"));
    each_layout(
        "eth_responses",
        || corpus::eth_responses(43, 20_000),
        true,
        &wanted_response,
        &mut |n, msgs| responses(n, msgs),
    );
    // The corpora of dispatch.rs.
    let round_trip_cases: [(&str, MakeCorpus); 3] = [
        ("eth_singles", || corpus::eth_stream(31, 20_000)),
        ("eth_batch_100", || corpus::eth_batches(37, 100, 200)),
        ("eth_batch_1000", || corpus::eth_batches(41, 1000, 20)),
    ];
    for (name, make) in round_trip_cases {
        let stream = name == "eth_singles";
        let wanted = |n: &str| wanted(&format!("round_trip/{n}"));
        each_layout(name, make, stream, &wanted, &mut |n, msgs| {
            round_trip(n, msgs)
        });
    }
    let router_wanted = |label: &str| wanted(&format!("router/{label}"));
    if ["hits", "misses", "2000_hits", "2000_misses"]
        .iter()
        .any(|l| router_wanted(l))
    {
        for (label, table, names) in router_sets::cases() {
            if router_wanted(label) {
                router(label, &table, &names);
            }
        }
    }
}
