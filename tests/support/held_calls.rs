//! Calls that run until the test releases them or their client leaves,
//! counted: what the tests of clients that leave while calls run observe
//! (tests/transports/http_abandon.rs, ws_abandon.rs, stream_abandon.rs,
//! cap_cancel.rs).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::server::Metrics;
use rpcwire::{Call, Dispatcher, RpcError};
use tokio::sync::{Notify, Semaphore};

/// Long enough to mean "it hangs".
pub const HANG: Duration = Duration::from_secs(10);

/// The held calls: a test dispatcher's state.
pub struct State {
    /// Held calls started, and dropped before they ended.
    pub started: AtomicUsize,
    pub dropped: AtomicUsize,
    pub changed: Notify,
    /// Held calls end (with `true`) when released, one a permit.
    pub release: Semaphore,
}

impl Default for State {
    fn default() -> Self {
        State {
            started: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
            changed: Notify::new(),
            release: Semaphore::new(0),
        }
    }
}

/// Counts a held call's drop.
struct DropGuard(Arc<State>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A held call's body: counted as started, then waits for a release;
/// dropped before that (its client left, it was cancelled), counted as
/// dropped.
pub async fn hold(state: Arc<State>) -> bool {
    let guard = DropGuard(Arc::clone(&state));
    state.started.fetch_add(1, Ordering::SeqCst);
    state.changed.notify_waiters();
    state.release.acquire().await.unwrap().forget();
    // Finished, not dropped.
    std::mem::forget(guard);
    true
}

/// Waits (at most [`HANG`]) until `done` holds for the state.
pub async fn wait_until(state: &State, what: &str, done: impl Fn(&State) -> bool) {
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let changed = state.changed.notified();
        if done(state) {
            return;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if tokio::time::timeout(left.min(Duration::from_millis(50)), changed)
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {HANG:?} (started {}, dropped {})",
                state.started.load(Ordering::SeqCst),
                state.dropped.load(Ordering::SeqCst)
            );
        }
    }
}

/// After a client at its cap of `cap` held calls left with more requests
/// pipelined: its `cap` calls are dropped, and nothing past them was ever
/// started.
pub async fn dropped_at_the_cap(state: &State, cap: usize, what: &str) {
    wait_until(state, &format!("{what}: dropped"), |st| {
        st.dropped.load(Ordering::SeqCst) == cap
    })
    .await;
    assert_eq!(state.started.load(Ordering::SeqCst), cap, "{what}");
}

/// A dispatcher with `wait` (a held call) and `echo` (its params back),
/// counting calls in `metrics`.
pub fn dispatcher(state: Arc<State>, metrics: Arc<Metrics>) -> Dispatcher<Arc<State>, WithAsync> {
    Dispatcher::builder(state)
        .observer(metrics)
        .async_method("wait", |call: AsyncCall<Arc<State>>| async move {
            Ok::<_, RpcError>(hold(Arc::clone(&call.state)).await)
        })
        .method("echo", |c: Call<'_, Arc<State>>| match c.params {
            Some(p) => c.reply.raw(p.as_bytes()),
            None => c.reply.null(),
        })
        .build()
        .unwrap()
}
