//! The parse comparison of `benches/parse.rs`, measured the way a shared,
//! noisy machine needs: contestants interleaved round by round in one
//! process, so that a neighbour's burst lands on all of them alike.
//!
//! `cargo bench --features peers --bench parse_interleaved` runs, for each
//! large mixed corpus (the same corpora and digests as `parse.rs`), `ROUNDS`
//! rounds (default 21); in each round every contestant (rpcwire, then the
//! peers, in an order that rotates from round to round) parses the whole
//! corpus `PASSES` times (default 3), each message checked against its
//! expected digest. Reported per corpus: each contestant's median time per
//! message, and rpcwire's lead over the fastest peer *of each round* (the
//! peer time divided by rpcwire's, per round), min / median / max over the
//! rounds. Taking the fastest peer per round, not per corpus, is the
//! stricter reading: a peer's lucky round counts against rpcwire.
//!
//! criterion's groups (`--bench parse`) measure each contestant for two
//! seconds in turn; there a drift of the machine between two windows moves
//! the ratio, here it moves all contestants of a round together.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/peers.rs"]
mod peers;

/// A parse of one message, giving its digest.
type ParseFn = Box<dyn FnMut(&[u8]) -> usize>;

/// One contestant: a name, and its parse.
struct Contestant {
    name: &'static str,
    /// Which expected digests it is checked against: the raw-value one
    /// (method, id and params lengths) or the DOM one.
    dom: bool,
    parse: ParseFn,
}

fn contestants(batches: bool) -> Vec<Contestant> {
    let mut arena = bumpalo::Bump::new();
    let mut v = vec![Contestant {
        name: "rpcwire",
        dom: false,
        parse: Box::new(move |m| {
            arena.reset();
            peers::rpcwire_digest(m, &arena)
        }),
    }];
    v.push(Contestant {
        name: "serde_json_raw",
        dom: false,
        parse: Box::new(peers::serde_json_raw),
    });
    if batches {
        v.push(Contestant {
            name: "serde_json_one_pass",
            dom: false,
            parse: Box::new(peers::serde_json_one_pass),
        });
    }
    v.push(Contestant {
        name: "sonic_rs_lazy",
        dom: false,
        parse: Box::new(peers::sonic_rs_lazy),
    });
    if batches {
        v.push(Contestant {
            name: "sonic_rs_one_pass",
            dom: false,
            parse: Box::new(peers::sonic_rs_one_pass),
        });
    }
    let mut simd = peers::SimdJsonTape::default();
    v.push(Contestant {
        name: "simd_json_tape",
        dom: true,
        parse: Box::new(move |m| simd.parse(m)),
    });
    v
}

/// Time for `passes` passes over `msgs`, every result checked.
fn measure(c: &mut Contestant, msgs: &[Vec<u8>], expect: &[usize], passes: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..passes {
        for (i, m) in msgs.iter().enumerate() {
            let got = (c.parse)(black_box(m));
            assert_eq!(got, expect[i], "{}: message {i}", c.name);
        }
    }
    start.elapsed()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks corpora.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rounds: usize = env_or("ROUNDS", 21);
    let passes: usize = env_or("PASSES", 3);
    let cases: [(&str, Vec<Vec<u8>>, bool); 5] = [
        ("eth_singles", corpus::eth_stream(7, 20_000), false),
        ("eth_batch_100", corpus::eth_batches(11, 100, 200), true),
        ("eth_batch_1000", corpus::eth_batches(13, 1000, 20), true),
        ("mcp", corpus::mcp_stream(17, 20_000), false),
        (
            "eth_raw_tx_128k",
            corpus::eth_big_raw_txs(19, 128 * 1024, 32),
            false,
        ),
    ];
    println!("{rounds} rounds, {passes} passes per contestant per round");
    for (name, msgs, batches) in cases {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let raw: Vec<usize> = msgs.iter().map(|m| peers::raw_digest(m)).collect();
        let dom: Vec<usize> = msgs
            .iter()
            .map(|m| peers::dom_digest(&serde_json::from_slice(m).unwrap()))
            .collect();
        let mut all = contestants(batches);
        // Warm-up: one pass each.
        for c in &mut all {
            let expect = if c.dom { &dom } else { &raw };
            measure(c, &msgs, expect, 1);
        }
        let n = all.len();
        let mut times = vec![Vec::with_capacity(rounds); n];
        let mut leads = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let mut this = vec![0.0; n];
            for k in 0..n {
                let i = (k + round) % n;
                let c = &mut all[i];
                let expect = if c.dom { &dom } else { &raw };
                let t = measure(c, &msgs, expect, passes).as_secs_f64();
                this[i] = t / (passes * msgs.len()) as f64 * 1e9;
            }
            let fastest_peer = this[1..].iter().copied().fold(f64::INFINITY, f64::min);
            leads.push(fastest_peer / this[0]);
            for (i, t) in this.into_iter().enumerate() {
                times[i].push(t);
            }
        }
        let bytes = corpus::bytes(&msgs) / msgs.len();
        println!(
            "\n{name}: {} messages, {bytes} bytes each on average",
            msgs.len()
        );
        for (c, t) in all.iter().zip(&mut times) {
            println!("  {:<20} {:>10.1} ns/message (median)", c.name, median(t));
        }
        let mut sorted = leads.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "  rpcwire vs the fastest peer of each round: {:.2}x / {:.2}x / {:.2}x (min / median / max)",
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1]
        );
    }
}
