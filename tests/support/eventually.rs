// Waiting for a condition another task brings about, rather than sleeping
// a fixed time and hoping it came: polled every few milliseconds, and a
// hang guard (not a measurement) fails the test by name.

use std::time::Duration;

/// How long [`eventually`] waits before it fails: far beyond any wait
/// that passes (on a loaded CI host too), so that only a condition that
/// never comes reaches it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Waits until `done` holds; panics naming `what` after [`PATIENCE`].
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
