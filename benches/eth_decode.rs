//! Decoding Ethereum params: rpcwire's `eth` layer (from the `Params` the
//! envelope parser left, every field decoded into its value: addresses,
//! numbers, U256, call data into the per-message arena) against serde_json
//! into alloy-rpc-types-eth structs, the way a Rust node does it:
//!
//! * `jsonrpsee`: jsonrpsee's `ParamsSequence` (`seq.next::<TransactionRequest>()`,
//!   `seq.optional_next::<BlockId>()`), the code reth's RPC macros generate;
//! * `serde_tuple`: one `serde_json::from_str` into a tuple.
//!
//! Each case runs over 20,000 distinct messages (viem, ethers v6 and web3.py
//! styles mixed, `support/eth_params.rs`), one message per iteration, and
//! checks each result against the value alloy decoded before the run.
//!
//! Three groups:
//!
//! * `eth_params`: params decoding, each message's bytes touched (untimed)
//!   just before it is decoded, as a server's handler finds them right
//!   after the envelope parser read them; timed in chunks of 8 messages.
//! * `eth_params_cold`: the same, the bytes first touched by the decoder
//!   (a cache miss per line that neither decoder can avoid, which both pay).
//! * `eth_request`: whole requests, cold: rpcwire's envelope parse and
//!   `eth` decoders against jsonrpsee's `Request` (serde_json, `&RawValue`
//!   params) and `ParamsSequence` decoding.
//!
//! The `hex` group decides between const-hex and hand-written code for the
//! short strings: QUANTITY (1-16 digits: a table per digit, as the library
//! does, against const-hex on the padded digits) and addresses (40 digits:
//! the library (const-hex after its checks) against bare const-hex and a
//! table per digit).
//!
//! `ETH_RATIOS=<passes>` prints paired ratios instead (see `paired_ratios`),
//! and `ETH_PROFILE=<method>` runs one decoder alone for a profiler (see
//! `profile_loop`); with either, `ETH_LEN=<min>..<max>` keeps the messages
//! of that many bytes (see `sized_messages`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_rpc_types_eth::{
    BlockId, BlockNumberOrTag, Filter, FilterBlockOption, TransactionRequest,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rpcwire::eth::{self, EthParams, EthValue, TopicFilter};
use rpcwire::request::Params;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/eth_params.rs"]
mod eth_params;

const N: usize = 20_000;

/// Set while every contestant's results are checked, before timing: byte
/// strings (call data, raw transactions) are then folded whole. Timed, only
/// their length and ends are, on every side alike.
static FULL: AtomicBool = AtomicBool::new(false);

/// Checks, with byte strings folded whole, that every contestant decodes
/// every message of `method` to the same values.
fn check_fully(method: &str, params: &[Params<'_>], texts: &[&str], messages: &[Vec<u8>]) {
    FULL.store(true, Ordering::Relaxed);
    let mut arena = bumpalo::Bump::new();
    for (i, p) in params.iter().enumerate() {
        arena.reset();
        let want = jsonrpsee_decode(method, texts[i]);
        assert_eq!(ours_decode(method, *p, &arena), want, "{}", texts[i]);
        assert_eq!(serde_tuple_decode(method, texts[i]), want, "{}", texts[i]);
        assert_eq!(rpcwire_request(method, &messages[i], &arena), want);
        assert_eq!(jsonrpsee_request(method, &messages[i]), want);
    }
    FULL.store(false, Ordering::Relaxed);
}

/// An order-sensitive fold of the decoded values: both sides feed the same
/// sequence, so equal sums mean equal values (up to the fold).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Sum(u64);

impl Sum {
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(7) ^ v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    #[inline(always)]
    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        match v {
            Some(v) => f(self, v),
            None => self.u64(0xdead),
        }
    }
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        if FULL.load(Ordering::Relaxed) {
            self.u64(b.len() as u64);
            self.u64(unordered(b));
            return;
        }
        self.u64(b.len() as u64);
        if let (Some(&first), Some(&last)) = (b.first(), b.last()) {
            self.u64(first as u64 | (last as u64) << 8);
        }
        if b.len() >= 8 {
            self.u64(u64::from_le_bytes(b[b.len() - 8..].try_into().unwrap()));
        }
    }
    #[inline(always)]
    fn u128(&mut self, v: u128) {
        self.u64(v as u64);
        self.u64((v >> 64) as u64);
    }
    #[inline(always)]
    fn u256(&mut self, v: &U256) {
        for l in v.as_limbs() {
            self.u64(*l);
        }
    }
}

/// A fold that does not depend on order (alloy keeps addresses and
/// topics in hash sets).
fn unordered(b: &[u8]) -> u64 {
    let mut h = 0u64;
    for c in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = h.rotate_left(13) ^ u64::from_le_bytes(w).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    h
}

fn tag_code(t: eth::BlockTag) -> u64 {
    1 << 60 | t as u64
}

fn alloy_tag(b: &BlockNumberOrTag) -> u64 {
    use eth::BlockTag as T;
    match b {
        BlockNumberOrTag::Number(n) => *n,
        BlockNumberOrTag::Latest => tag_code(T::Latest),
        BlockNumberOrTag::Pending => tag_code(T::Pending),
        BlockNumberOrTag::Safe => tag_code(T::Safe),
        BlockNumberOrTag::Finalized => tag_code(T::Finalized),
        BlockNumberOrTag::Earliest => tag_code(T::Earliest),
    }
}

fn ours_tag(b: eth::BlockNumberOrTag) -> u64 {
    match b {
        eth::BlockNumberOrTag::Number(n) => n,
        eth::BlockNumberOrTag::Tag(t) => tag_code(t),
    }
}

fn alloy_block(s: &mut Sum, b: &BlockId) {
    match b {
        BlockId::Number(n) => s.u64(alloy_tag(n)),
        BlockId::Hash(h) => {
            s.bytes(h.block_hash.as_slice());
            s.u64(h.require_canonical.map_or(2, u64::from));
        }
    }
}

fn ours_block(s: &mut Sum, b: eth::BlockId) {
    match b {
        eth::BlockId::Number(n) => s.u64(n),
        eth::BlockId::Tag(t) => s.u64(tag_code(t)),
        eth::BlockId::Hash {
            hash,
            require_canonical,
        } => {
            s.bytes(hash.as_slice());
            s.u64(require_canonical.map_or(2, u64::from));
        }
    }
}

// ---- alloy (serde_json) -------------------------------------------------

fn alloy_call(tx: &TransactionRequest, block: Option<&BlockId>) -> Sum {
    let mut s = Sum::default();
    s.opt(tx.from, |s, a| s.bytes(a.as_slice()));
    let to = match tx.to {
        Some(TxKind::Call(a)) => Some(a),
        _ => None,
    };
    s.opt(to, |s, a| s.bytes(a.as_slice()));
    s.opt(tx.gas, Sum::u64);
    s.opt(tx.gas_price, Sum::u128);
    s.opt(tx.max_fee_per_gas, Sum::u128);
    s.opt(tx.max_priority_fee_per_gas, Sum::u128);
    s.opt(tx.value, |s, v| s.u256(&v));
    s.opt(tx.nonce, Sum::u64);
    s.opt(tx.input.input(), |s, b| s.bytes(b));
    s.opt(block, alloy_block);
    s
}

fn alloy_filter(f: &Filter) -> Sum {
    let mut s = Sum::default();
    match &f.block_option {
        FilterBlockOption::Range {
            from_block,
            to_block,
        } => {
            s.opt(from_block.as_ref(), |s, b| s.u64(alloy_tag(b)));
            s.opt(to_block.as_ref(), |s, b| s.u64(alloy_tag(b)));
            s.u64(0xdead);
        }
        FilterBlockOption::AtBlockHash(h) => {
            s.u64(0xdead);
            s.u64(0xdead);
            s.bytes(h.as_slice());
        }
    }
    s.u64(
        f.address
            .iter()
            .map(|a| unordered(a.as_slice()))
            .fold(0, u64::wrapping_add),
    );
    for t in &f.topics {
        s.u64(
            t.iter()
                .map(|h| unordered(h.as_slice()))
                .fold(0, u64::wrapping_add),
        );
    }
    s
}

fn alloy_balance(a: &Address, block: Option<&BlockId>) -> Sum {
    let mut s = Sum::default();
    s.bytes(a.as_slice());
    s.opt(block, alloy_block);
    s
}

fn alloy_raw(b: &Bytes) -> Sum {
    let mut s = Sum::default();
    s.bytes(b);
    s
}

/// reth's way: jsonrpsee's `ParamsSequence`.
fn jsonrpsee_decode(method: &str, params: &str) -> Sum {
    let p = jsonrpsee::types::Params::new(Some(params));
    let mut seq = p.sequence();
    match method {
        "eth_call" => {
            let tx: TransactionRequest = seq.next().unwrap();
            let block: Option<BlockId> = seq.optional_next().unwrap();
            alloy_call(&tx, block.as_ref())
        }
        "eth_getLogs" => {
            let f: Filter = seq.next().unwrap();
            alloy_filter(&f)
        }
        "eth_getBalance" => {
            let a: Address = seq.next().unwrap();
            let block: Option<BlockId> = seq.optional_next().unwrap();
            alloy_balance(&a, block.as_ref())
        }
        "eth_sendRawTransaction" => {
            let b: Bytes = seq.next().unwrap();
            alloy_raw(&b)
        }
        _ => unreachable!(),
    }
}

/// One `serde_json::from_str` into a tuple.
fn serde_tuple_decode(method: &str, params: &str) -> Sum {
    match method {
        "eth_call" => {
            let (tx, block): (TransactionRequest, BlockId) = serde_json::from_str(params).unwrap();
            alloy_call(&tx, Some(&block))
        }
        "eth_getLogs" => {
            let (f,): (Filter,) = serde_json::from_str(params).unwrap();
            alloy_filter(&f)
        }
        "eth_getBalance" => {
            let (a, block): (Address, BlockId) = serde_json::from_str(params).unwrap();
            alloy_balance(&a, Some(&block))
        }
        "eth_sendRawTransaction" => {
            let (b,): (Bytes,) = serde_json::from_str(params).unwrap();
            alloy_raw(&b)
        }
        _ => unreachable!(),
    }
}

// ---- rpcwire --------------------------------------------------------------

fn ours_decode(method: &str, params: Params<'_>, arena: &bumpalo::Bump) -> Sum {
    let r = (|| {
        let mut p = EthParams::new(Some(params));
        let mut s = Sum::default();
        match method {
            "eth_call" => {
                let tx = p.next_call_request("transaction")?;
                s.opt(tx.from()?, |s, a| s.bytes(a.as_slice()));
                s.opt(tx.to()?, |s, a| s.bytes(a.as_slice()));
                s.opt(tx.gas()?, Sum::u64);
                s.opt(tx.gas_price()?, Sum::u128);
                s.opt(tx.max_fee_per_gas()?, Sum::u128);
                s.opt(tx.max_priority_fee_per_gas()?, Sum::u128);
                s.opt(tx.value()?, |s, v| s.u256(&v));
                s.opt(tx.nonce()?, Sum::u64);
                s.opt(tx.input_in(arena)?, |s, b| s.bytes(b));
                let block = p.next_block_id("blockNumber")?;
                s.opt(block, ours_block);
            }
            "eth_getLogs" => {
                let f = p.next_log_filter("filter")?;
                let hash = f.block_hash()?;
                if hash.is_some() {
                    s.u64(0xdead);
                    s.u64(0xdead);
                } else {
                    s.opt(f.from_block()?, |s, b| s.u64(ours_tag(b)));
                    s.opt(f.to_block()?, |s, b| s.u64(ours_tag(b)));
                }
                s.opt(hash, |s, h| s.bytes(h.as_slice()));
                let mut addresses = 0u64;
                for a in f.addresses()? {
                    addresses = addresses.wrapping_add(unordered(a?.as_slice()));
                }
                s.u64(addresses);
                let mut positions = 0;
                for t in f.topics()? {
                    positions += 1;
                    s.u64(match t? {
                        TopicFilter::Any => 0,
                        TopicFilter::One(h) => unordered(h.as_slice()),
                        TopicFilter::AnyOf(set) => {
                            let mut x = 0u64;
                            for h in set {
                                x = x.wrapping_add(unordered(h?.as_slice()));
                            }
                            x
                        }
                    });
                }
                for _ in positions..4 {
                    s.u64(0);
                }
            }
            "eth_getBalance" => {
                let a = p.next_address("address")?;
                s.bytes(a.as_slice());
                let block = p.next_block_id("blockNumber")?;
                s.opt(block, ours_block);
            }
            "eth_sendRawTransaction" => {
                let b = p.next_bytes_in("transaction", arena)?;
                s.bytes(b);
            }
            _ => unreachable!(),
        }
        p.finish()?;
        Ok::<_, eth::Invalid<'_>>(s)
    })();
    r.unwrap_or_else(|e| panic!("{e}: {:?}", e.received()))
}

/// Messages handled per timed chunk in the warm cases (two clock reads
/// per chunk).
const CHUNK: usize = 8;

/// Brings `bytes` into the cache, as the envelope parser does when it
/// reads a message just before its handler runs.
#[inline(always)]
fn touch(bytes: &[u8]) {
    let mut x = 0u8;
    for line in bytes.chunks(64) {
        x ^= line[0];
    }
    black_box(x);
}

/// Times `decode(k)` over the corpus, `CHUNK` messages per clock reading,
/// each message's bytes touched (untimed) just before its chunk.
fn warm(
    b: &mut criterion::Bencher<'_>,
    texts: &[&str],
    next: &mut usize,
    mut decode: impl FnMut(usize),
) {
    b.iter_custom(|iters| {
        let mut total = std::time::Duration::ZERO;
        let mut done = 0;
        while done < iters {
            let n = CHUNK.min((iters - done) as usize);
            let first = *next;
            for j in 0..n {
                touch(texts[(first + j) % N].as_bytes());
            }
            let start = std::time::Instant::now();
            for j in 0..n {
                decode((first + j) % N);
            }
            total += start.elapsed();
            *next = (first + n) % N;
            done += n as u64;
        }
        total
    })
}

/// A request as jsonrpsee reads it: the envelope with `&RawValue` params,
/// then the params through `ParamsSequence`.
fn jsonrpsee_request(method: &str, msg: &[u8]) -> Sum {
    let req: jsonrpsee::types::Request<'_> = serde_json::from_slice(msg).unwrap();
    assert_eq!(req.method, method);
    jsonrpsee_decode(method, req.params.as_ref().map_or("[]", |p| p.get()))
}

/// A request as rpcwire reads it: the envelope, then the params through
/// the `eth` layer.
fn rpcwire_request(method: &str, msg: &[u8], arena: &bumpalo::Bump) -> Sum {
    let entry = rpcwire::parse(msg, arena).unwrap().into_single().unwrap();
    let req = entry.request().unwrap();
    assert_eq!(req.method(), method);
    ours_decode(method, req.params().unwrap(), arena)
}

/// The params of each message, read by rpcwire's envelope parser.
fn params_of<'a>(messages: &'a [Vec<u8>], arena: &'a bumpalo::Bump) -> Vec<Params<'a>> {
    messages
        .iter()
        .map(|m| {
            let entry = rpcwire::parse(m, arena).unwrap().into_single().unwrap();
            entry.request().unwrap().params().unwrap()
        })
        .collect()
}

/// The corpus of the `k`th method, or with `ETH_LEN=<min>..<max>` (bytes
/// per message, either end optional) the first `N` messages of that size
/// from a longer run of the same generator: where a decoder's lead is
/// made or lost (small calls against large call data, say). Only for
/// `ETH_RATIOS` and `ETH_PROFILE`.
fn sized_messages(method: &str, k: usize) -> Vec<Vec<u8>> {
    let seed = 0xe7 + k as u64;
    let Ok(range) = std::env::var("ETH_LEN") else {
        return eth_params::messages(method, seed, N);
    };
    let (min, max) = range
        .split_once("..")
        .expect("ETH_LEN=<min>..<max>, either end optional");
    let bound = |s: &str, none: usize| {
        if s.is_empty() {
            none
        } else {
            s.parse().expect("a byte count")
        }
    };
    let (min, max) = (bound(min, 0), bound(max, usize::MAX));
    let picked: Vec<Vec<u8>> = eth_params::messages(method, seed, 16 * N)
        .into_iter()
        .filter(|m| (min..max).contains(&m.len()))
        .take(N)
        .collect();
    assert_eq!(
        picked.len(),
        N,
        "fewer than {N} {method} messages in {min}..{max} bytes"
    );
    picked
}

/// Paired ratios, robust to a shared machine's load: chunk by chunk (8
/// messages, each touched first as in `eth_params`), rpcwire, jsonrpsee
/// and the serde tuple decode the same messages back to back (then the
/// whole requests, envelope and params, rpcwire against jsonrpsee). A chunk in
/// which any of them was descheduled (slower than 5 times its median
/// chunk) is dropped for all three; the ratio of a pass over the corpus is
/// the ratio of the summed times. Printed: per-message times (median pass)
/// and the ratios, min / median / max over the passes. Run with
/// `ETH_RATIOS=<passes>` (the criterion groups are then skipped).
fn paired_ratios(passes: usize) {
    let only = std::env::var("ETH_METHOD").ok();
    for (k, method) in eth_params::METHODS.iter().enumerate() {
        if only.as_deref().is_some_and(|m| m != *method) {
            continue;
        }
        let messages = sized_messages(method, k);
        let parse_arena = bumpalo::Bump::new();
        let params = params_of(&messages, &parse_arena);
        let texts: Vec<&str> = params.iter().map(|p| p.as_json()).collect();
        check_fully(method, &params, &texts, &messages);
        let want: Vec<Sum> = texts.iter().map(|t| jsonrpsee_decode(method, t)).collect();
        let mut arena = bumpalo::Bump::with_capacity(64 * 1024);
        let chunk = |from: usize, f: &mut dyn FnMut(usize)| {
            for m in &messages[from..from + CHUNK] {
                touch(m);
            }
            let start = std::time::Instant::now();
            for j in from..from + CHUNK {
                f(j);
            }
            start.elapsed().as_nanos() as f64
        };
        let mut per_pass: Vec<[f64; 9]> = Vec::new();
        for _ in 0..passes {
            let mut times: Vec<[f64; 6]> = Vec::with_capacity(N / CHUNK);
            for from in (0..N - CHUNK + 1).step_by(CHUNK) {
                let ours = chunk(from, &mut |k| {
                    arena.reset();
                    assert_eq!(ours_decode(method, black_box(params[k]), &arena), want[k]);
                });
                let js = chunk(from, &mut |k| {
                    assert_eq!(jsonrpsee_decode(method, black_box(texts[k])), want[k])
                });
                let tuple = chunk(from, &mut |k| {
                    assert_eq!(serde_tuple_decode(method, black_box(texts[k])), want[k])
                });
                let ours_req = chunk(from, &mut |k| {
                    arena.reset();
                    let s = rpcwire_request(method, black_box(&messages[k]), &arena);
                    assert_eq!(s, want[k]);
                });
                let js_req = chunk(from, &mut |k| {
                    assert_eq!(jsonrpsee_request(method, black_box(&messages[k])), want[k])
                });
                // The harness alone: the clock and the result check.
                let floor = chunk(from, &mut |k| assert_eq!(black_box(want[k]), want[k]));
                times.push([ours, js, tuple, ours_req, js_req, floor]);
            }
            let median = |i: usize| {
                let mut v: Vec<f64> = times.iter().map(|t| t[i]).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let limits: Vec<f64> = (0..5).map(|i| 5.0 * median(i)).collect();
            let floor = median(5) / CHUNK as f64;
            let kept: Vec<&[f64; 6]> = times
                .iter()
                .filter(|t| (0..5).all(|i| t[i] <= limits[i]))
                .collect();
            let sum = |i: usize| kept.iter().map(|t| t[i]).sum::<f64>();
            let msgs = (kept.len() * CHUNK) as f64;
            per_pass.push([
                sum(0) / msgs,
                sum(1) / msgs,
                sum(2) / msgs,
                sum(1) / sum(0),
                sum(2) / sum(0),
                sum(3) / msgs,
                sum(4) / msgs,
                sum(4) / sum(3),
                floor,
            ]);
        }
        let stats = |i: usize| {
            let mut v: Vec<f64> = per_pass.iter().map(|r| r[i]).collect();
            v.sort_by(f64::total_cmp);
            (v[0], v[v.len() / 2], v[v.len() - 1])
        };
        let (rj, rt) = (stats(3), stats(4));
        println!(
            "{method:<24} rpcwire {:6.0} ns  jsonrpsee {:6.0} ns  serde_tuple {:6.0} ns  \
             ratio vs jsonrpsee {:.2}/{:.2}/{:.2}  vs serde_tuple {:.2}/{:.2}/{:.2}  (min/median/max, {passes} passes)",
            stats(0).1,
            stats(1).1,
            stats(2).1,
            rj.0,
            rj.1,
            rj.2,
            rt.0,
            rt.1,
            rt.2
        );
        let rr = stats(7);
        println!(
            "{:<24} whole request: rpcwire {:6.0} ns  jsonrpsee {:6.0} ns  ratio {:.2}/{:.2}/{:.2}",
            "",
            stats(5).1,
            stats(6).1,
            rr.0,
            rr.1,
            rr.2
        );
        let floor = stats(8).1;
        println!(
            "{:<24} harness alone {floor:.0} ns/message; less it: params {:.2} vs jsonrpsee, {:.2} vs serde_tuple; whole request {:.2}",
            "",
            (stats(1).1 - floor) / (stats(0).1 - floor),
            (stats(2).1 - floor) / (stats(0).1 - floor),
            (stats(6).1 - floor) / (stats(5).1 - floor),
        );
    }
}

/// One decoder alone over the corpus of `method`, for a profiler
/// (`perf record`, `valgrind --tool=callgrind`): `ETH_PROFILE=<method>`,
/// `ETH_WHO=jsonrpsee` for jsonrpsee's side (rpcwire's otherwise),
/// `ETH_REPS=<passes>` (default 200). Each chunk of 8 messages is touched
/// first, as in `eth_params`; prints the time per message.
fn profile_loop(method: &str) {
    let k = eth_params::METHODS
        .iter()
        .position(|m| *m == method)
        .expect("ETH_PROFILE=<one of the four methods>");
    let messages = sized_messages(method, k);
    let parse_arena = bumpalo::Bump::new();
    let params = params_of(&messages, &parse_arena);
    let texts: Vec<&str> = params.iter().map(|p| p.as_json()).collect();
    let jsonrpsee = std::env::var("ETH_WHO").is_ok_and(|w| w == "jsonrpsee");
    let passes: usize =
        std::env::var("ETH_REPS").map_or(200, |r| r.parse().expect("ETH_REPS=<passes>"));
    let mut arena = bumpalo::Bump::with_capacity(64 * 1024);
    let mut fold = 0u64;
    let start = std::time::Instant::now();
    for _ in 0..passes {
        for (i, p) in params.iter().enumerate() {
            if i % CHUNK == 0 {
                for m in &messages[i..(i + CHUNK).min(N)] {
                    touch(m);
                }
            }
            arena.reset();
            let s = if jsonrpsee {
                jsonrpsee_decode(method, black_box(texts[i]))
            } else {
                ours_decode(method, black_box(*p), &arena)
            };
            fold = fold.wrapping_add(s.0);
        }
    }
    let per = start.elapsed().as_nanos() as f64 / (passes * N) as f64;
    println!("{method}: {per:.1} ns/message (fold {fold:x})");
}

fn bench_methods(c: &mut Criterion) {
    if let Ok(rounds) = std::env::var("ETH_RATIOS") {
        paired_ratios(rounds.parse().expect("ETH_RATIOS=<rounds>"));
        return;
    }
    if let Ok(method) = std::env::var("ETH_PROFILE") {
        profile_loop(&method);
        return;
    }
    for (k, method) in eth_params::METHODS.iter().enumerate() {
        let messages = eth_params::messages(method, 0xe7 + k as u64, N);
        let parse_arena = bumpalo::Bump::new();
        let params = params_of(&messages, &parse_arena);
        let texts: Vec<&str> = params.iter().map(|p| p.as_json()).collect();
        check_fully(method, &params, &texts, &messages);
        let want: Vec<Sum> = texts.iter().map(|t| jsonrpsee_decode(method, t)).collect();
        let mut arena = bumpalo::Bump::with_capacity(64 * 1024);
        for (i, p) in params.iter().enumerate() {
            arena.reset();
            assert_eq!(ours_decode(method, *p, &arena), want[i], "{}", texts[i]);
            assert_eq!(serde_tuple_decode(method, texts[i]), want[i]);
            assert_eq!(rpcwire_request(method, &messages[i], &arena), want[i]);
            assert_eq!(jsonrpsee_request(method, &messages[i]), want[i]);
        }
        let param_bytes: usize = texts.iter().map(|t| t.len()).sum();
        let message_bytes: usize = messages.iter().map(Vec::len).sum();

        // Params decoding, the params' bytes in cache (as right after the
        // envelope parse).
        let mut g = c.benchmark_group("eth_params");
        g.throughput(Throughput::Bytes((param_bytes / N) as u64));
        let mut next = 0;
        g.bench_function(format!("rpcwire/{method}"), |b| {
            warm(b, &texts, &mut next, |k| {
                arena.reset();
                let s = ours_decode(method, black_box(params[k]), &arena);
                assert_eq!(s, want[k]);
            })
        });
        g.bench_function(format!("jsonrpsee/{method}"), |b| {
            warm(b, &texts, &mut next, |k| {
                assert_eq!(jsonrpsee_decode(method, black_box(texts[k])), want[k]);
            })
        });
        g.bench_function(format!("serde_tuple/{method}"), |b| {
            warm(b, &texts, &mut next, |k| {
                assert_eq!(serde_tuple_decode(method, black_box(texts[k])), want[k]);
            })
        });
        g.finish();

        // The same, the params' bytes cold (first touched by the decoder).
        let mut g = c.benchmark_group("eth_params_cold");
        g.throughput(Throughput::Bytes((param_bytes / N) as u64));
        let mut i = 0;
        g.bench_function(format!("rpcwire/{method}"), |b| {
            b.iter(|| {
                let k = i % N;
                i += 1;
                arena.reset();
                let s = ours_decode(method, black_box(params[k]), &arena);
                assert_eq!(s, want[k]);
            })
        });
        let mut i = 0;
        g.bench_function(format!("jsonrpsee/{method}"), |b| {
            b.iter(|| {
                let k = i % N;
                i += 1;
                assert_eq!(jsonrpsee_decode(method, black_box(texts[k])), want[k]);
            })
        });
        g.finish();

        // Whole requests, cold: envelope and params.
        let mut g = c.benchmark_group("eth_request");
        g.throughput(Throughput::Bytes((message_bytes / N) as u64));
        let mut i = 0;
        g.bench_function(format!("rpcwire/{method}"), |b| {
            b.iter(|| {
                let k = i % N;
                i += 1;
                arena.reset();
                let s = rpcwire_request(method, black_box(&messages[k]), &arena);
                assert_eq!(s, want[k]);
            })
        });
        let mut i = 0;
        g.bench_function(format!("jsonrpsee/{method}"), |b| {
            b.iter(|| {
                let k = i % N;
                i += 1;
                assert_eq!(jsonrpsee_request(method, black_box(&messages[k])), want[k]);
            })
        });
        g.finish();
    }
}

/// A hand-written table decoder, the alternative to const-hex.
static TABLE: [u8; 256] = {
    let mut t = [0x80u8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

fn table_address(raw: &[u8]) -> Option<[u8; 20]> {
    let s = raw.strip_prefix(b"\"0x")?.strip_suffix(b"\"")?;
    if s.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    let mut bad = 0u8;
    for (i, pair) in s.chunks_exact(2).enumerate() {
        let (hi, lo) = (TABLE[pair[0] as usize], TABLE[pair[1] as usize]);
        bad |= hi | lo;
        out[i] = hi << 4 | (lo & 15);
    }
    (bad & 0x80 == 0).then_some(out)
}

/// QUANTITY through const-hex: digits padded to an even count in a stack
/// buffer, then decoded into the low bytes of a `u64`.
fn const_hex_quantity(raw: &[u8]) -> Option<u64> {
    let d = raw.strip_prefix(b"\"0x")?.strip_suffix(b"\"")?;
    if d.is_empty() || d.len() > 16 || (d.len() > 1 && d[0] == b'0') {
        return None;
    }
    let mut buf = [b'0'; 16];
    buf[16 - d.len()..].copy_from_slice(d);
    let bytes: [u8; 8] = const_hex::decode_to_array(buf).ok()?;
    Some(u64::from_be_bytes(bytes))
}

fn bench_hex(c: &mut Criterion) {
    if std::env::var("ETH_RATIOS").is_ok() || std::env::var("ETH_PROFILE").is_ok() {
        return;
    }
    let mut g = c.benchmark_group("hex");
    let mut rng = corpus::Rng::new(11);
    let quantities: Vec<String> = (0..N)
        .map(|_| {
            let bits = 1 + rng.below(64);
            format!("\"0x{:x}\"", rng.next_u64() >> (64 - bits))
        })
        .collect();
    let addresses: Vec<String> = (0..N).map(|_| format!("\"{}\"", rng.address())).collect();
    let msg = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":[{},{}]}}"#,
        quantities.join(","),
        addresses.join(",")
    );
    let arena = bumpalo::Bump::new();
    let params = rpcwire::parse(msg.as_bytes(), &arena)
        .unwrap()
        .into_single()
        .unwrap()
        .request()
        .unwrap()
        .params()
        .unwrap();
    let values = params.positional_in(&arena);
    let (qs, addrs) = values.split_at(N);
    let want_q: Vec<u64> = qs.iter().map(|v| v.quantity_u64().unwrap()).collect();
    let want_a: Vec<B256> = addrs
        .iter()
        .map(|v| B256::left_padding_from(v.address().unwrap().as_slice()))
        .collect();
    for (v, w) in qs.iter().zip(&want_q) {
        assert_eq!(const_hex_quantity(v.as_bytes()), Some(*w));
    }
    let mut i = 0;
    g.bench_function("quantity_u64/table", |b| {
        b.iter(|| {
            let k = i % N;
            i += 1;
            assert_eq!(black_box(qs[k]).quantity_u64().unwrap(), want_q[k]);
        })
    });
    let mut i = 0;
    g.bench_function("quantity_u64/const_hex", |b| {
        b.iter(|| {
            let k = i % N;
            i += 1;
            assert_eq!(
                const_hex_quantity(black_box(qs[k]).as_bytes()),
                Some(want_q[k])
            );
        })
    });
    let mut i = 0;
    g.bench_function("address/rpcwire", |b| {
        b.iter(|| {
            let k = i % N;
            i += 1;
            let a = black_box(addrs[k]).address().unwrap();
            assert_eq!(a.as_slice(), &want_a[k][12..]);
        })
    });
    let mut i = 0;
    g.bench_function("address/const_hex", |b| {
        b.iter(|| {
            let k = i % N;
            i += 1;
            let raw = black_box(addrs[k]).as_bytes();
            let a: [u8; 20] = const_hex::decode_to_array(&raw[1..raw.len() - 1]).unwrap();
            assert_eq!(&a[..], &want_a[k][12..]);
        })
    });
    let mut i = 0;
    g.bench_function("address/table", |b| {
        b.iter(|| {
            let k = i % N;
            i += 1;
            let a = table_address(black_box(addrs[k]).as_bytes()).unwrap();
            assert_eq!(&a[..], &want_a[k][12..]);
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_methods, bench_hex
}
criterion_main!(benches);
