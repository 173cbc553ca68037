//! The driver's shutdown seen through [`Shutdown`]'s flag alone: a
//! trigger on another thread sets the flag before it wakes the watch, and
//! the driver may read the flag in between. Reproduced here by doing the
//! two halves of [`Shutdown::trigger`] apart, which only the crate can.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{Driver, Limits, Shutdown};
use crate::dispatch::AsyncCall;
use crate::frame::Lines;
use crate::{Dispatcher, RpcError};

/// A call that never ends is running; the flag is set, a message arrives
/// (the driver reads the flag, drops its watch and starts the grace), and
/// only then is the watch told. The grace still ends the run: it was
/// started without being polled, so nothing woke the driver at its end
/// (over stdio, with no idle timer, the run ended only when a call did,
/// or at their timeout, 30 s by default, or never without one; found by a
/// review).
#[tokio::test(start_paused = true)]
async fn a_shutdown_seen_by_its_flag_alone_ends_at_the_grace() {
    let dispatcher = Dispatcher::builder(())
        .async_method("hang", |_: AsyncCall<()>| async {
            std::future::pending::<Result<u64, RpcError>>().await
        })
        // No deadline of its own to wake the driver.
        .timeout(None)
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let driver = Driver::new(Lines::new())
        .idle_timeout(None)
        .limits(Limits {
            shutdown_grace: Duration::from_secs(1),
            ..Limits::default()
        })
        .shutdown(shutdown.clone());
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let run = tokio::spawn(async move {
        let (read, write) = tokio::io::split(server);
        driver.run(&dispatcher, read, write).await
    });
    client
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hang\"}\n")
        .await
        .unwrap();
    settle().await;
    // `trigger`'s first half.
    shutdown.triggered.store(true, Ordering::Release);
    client
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"hang\"}\n")
        .await
        .unwrap();
    settle().await;
    // Its second half, with no one watching any more.
    shutdown.tx.send_replace(true);
    let ended = tokio::time::timeout(Duration::from_secs(60), run).await;
    let reason = ended
        .expect("the run ends at the grace's end")
        .unwrap()
        .unwrap();
    assert_eq!(reason, super::CloseReason::Shutdown);
}

/// Lets the driver's task run until it waits.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
