//! Measuring contestants interleaved round by round, for a shared, noisy
//! machine: in each round every contestant runs its whole pass over the
//! corpus (the order rotating from round to round), so a neighbour's burst
//! lands on all of them alike, and rpcwire's lead is taken per round
//! against the fastest peer *of that round*.
#![allow(dead_code)]

use std::time::Instant;

/// One contestant: a name, and one pass over the corpus (which checks
/// every result itself).
pub struct Contestant<'a> {
    pub name: &'static str,
    pub pass: Box<dyn FnMut() + 'a>,
}

impl<'a> Contestant<'a> {
    pub fn new(name: &'static str, pass: impl FnMut() + 'a) -> Self {
        Contestant {
            name,
            pass: Box::new(pass),
        }
    }
}

/// How many rounds, and passes per contestant per round: `ROUNDS` (default
/// 21) and `PASSES` (default 3) from the environment. `PROFILE=<name>`
/// runs that contestant alone for as many passes, and prints nothing.
pub fn settings() -> (usize, usize) {
    (env_or("ROUNDS", 21), env_or("PASSES", 3))
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `contestants` (rpcwire first) over the rounds and prints each one's
/// median time per message, rpcwire's lead over each peer (that peer's time
/// divided by rpcwire's in the same round), and over the fastest peer of
/// each round; min / median / max over the rounds.
pub fn compare(name: &str, messages: usize, bytes: usize, contestants: &mut [Contestant<'_>]) {
    let (rounds, passes) = settings();
    // `PROFILE=<contestant>`: only that contestant's passes, for a profiler.
    if let Ok(only) = std::env::var("PROFILE") {
        for c in contestants.iter_mut().filter(|c| c.name == only) {
            for _ in 0..rounds * passes {
                (c.pass)();
            }
        }
        return;
    }
    // Warm-up: one pass each.
    for c in contestants.iter_mut() {
        (c.pass)();
    }
    let n = contestants.len();
    let mut times = vec![Vec::with_capacity(rounds); n];
    // Per peer (index 0: the fastest peer of each round), per round.
    let mut leads = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        let mut this = vec![0.0; n];
        for k in 0..n {
            let i = (k + round) % n;
            let start = Instant::now();
            for _ in 0..passes {
                (contestants[i].pass)();
            }
            this[i] = start.elapsed().as_secs_f64() / (passes * messages) as f64 * 1e9;
        }
        let fastest_peer = this[1..].iter().copied().fold(f64::INFINITY, f64::min);
        leads[0].push(fastest_peer / this[0]);
        for i in 1..n {
            leads[i].push(this[i] / this[0]);
        }
        for (i, t) in this.into_iter().enumerate() {
            times[i].push(t);
        }
    }
    println!(
        "\n{name}: {messages} messages, {} bytes each on average",
        bytes / messages
    );
    for (i, (c, t)) in contestants.iter().zip(&mut times).enumerate() {
        let lead = if i == 0 {
            "rpcwire's lead, min / median / max:".to_string()
        } else {
            spread(&mut leads[i])
        };
        println!("  {:<28} {:>10.1} ns/message  {lead}", c.name, median(t));
    }
    println!(
        "  {:<28} {:>10} {:>11}  {}",
        "fastest peer of each round",
        "",
        "",
        spread(&mut leads[0])
    );
}

fn spread(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "{:.2}x / {:.2}x / {:.2}x",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1]
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
