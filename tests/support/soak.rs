//! The soak the leak tests share (tests/leaks.rs, tests/gateway_leaks.rs):
//! cycles of connections that end abruptly, then the heap (through the
//! test's counting allocator), tokio's alive tasks and the server's own
//! tables checked against their baseline after a warm-up.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use crate::counting_alloc::live;

/// Only for not hanging forever, never a measurement.
pub const HANG: Duration = Duration::from_secs(60);
/// How far above the warm-up's heap a round may end: independent of the
/// number of rounds, so that anything kept per connection shows.
pub const SLACK: usize = 64 << 10;
/// Cycles before the baseline is taken (pools and tables of the runtime
/// and the server reach their working size).
pub const WARM_UP: usize = 60;
/// Cycles per measured round (two rounds).
pub const ROUND: usize = 200;

/// Tasks alive on the current runtime.
pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits until `done` (at most [`HANG`]); returns whether it came.
pub async fn wait_until(done: impl Fn() -> bool) -> bool {
    let give_up = tokio::time::Instant::now() + HANG;
    while !done() {
        if tokio::time::Instant::now() >= give_up {
            return false;
        }
        // A short poll: the soaks wait here once or twice a cycle, for
        // hundreds of cycles (at 10 ms, most of their time).
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// [`soak_with`] for a server whose tasks all end with its connections
/// and whose `quiet` needs no explaining.
pub async fn soak<F, Fut>(name: &str, cycle: F, quiet: impl Fn() -> bool, after: impl Fn())
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    soak_with(name, cycle, quiet, String::new, || 0, |_| after()).await;
}

/// Runs [`WARM_UP`] cycles, takes the baseline, then two rounds of
/// [`ROUND`]. After each, waits for `quiet` and for the tasks alive before
/// the first cycle (and `allowed` more), then checks with `after`, and
/// reads the heap.
pub async fn soak_with<F, Fut>(
    name: &str,
    mut cycle: F,
    quiet: impl Fn() -> bool,
    describe: impl Fn() -> String,
    allowed: impl Fn() -> usize,
    after: impl Fn(&str),
) where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let tasks = alive_tasks();
    let mut k = 0;
    let settle = async |phase: &str| {
        assert!(
            wait_until(&quiet).await,
            "{name}: not quiet after {phase}: {}",
            describe()
        );
        assert!(
            wait_until(|| alive_tasks() <= tasks + allowed()).await,
            "{name}: {} tasks alive after {phase}, {tasks} (and {} allowed) before the first connection",
            alive_tasks(),
            allowed()
        );
        after(phase);
    };
    for _ in 0..WARM_UP {
        cycle(k).await;
        k += 1;
    }
    settle("the warm-up").await;
    let base = live();
    let mut ends = Vec::new();
    for round in 1..=2 {
        for _ in 0..ROUND {
            cycle(k).await;
            k += 1;
        }
        settle(&format!("round {round}")).await;
        // The heap may shrink a moment after the counters.
        wait_until(|| live() <= base + SLACK).await;
        ends.push(live());
    }
    eprintln!(
        "{name}: heap after the warm-up {base}, after {ROUND} more cycles {}, after {} more {}",
        ends[0],
        2 * ROUND,
        ends[1]
    );
    for (round, end) in ends.iter().enumerate() {
        assert!(
            *end <= base + SLACK,
            "{name}: {} bytes more live after {} cycles than after the warm-up",
            end - base,
            (round + 1) * ROUND
        );
    }
}
