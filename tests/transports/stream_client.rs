//! The client's side of the stream transports: a `Driver` on a real TCP
//! loopback connection, its requests sent with `Driver::peer` to an
//! rpcwire `serve_tcp` server, answers matched by the driver's reading.

use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::frame::Lines;
use rpcwire::peer::{Peer, PeerError};
use rpcwire::server::stream::{CloseReason, Driver, serve_tcp};
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Generous: a guard against hangs, never what a test measures.
const HANG: Duration = Duration::from_secs(30);

fn server() -> Dispatcher<(), WithAsync> {
    Dispatcher::builder(())
        .method("double", |c: Call<'_, ()>| {
            let (n,): (u64,) = c.decode()?;
            Ok::<_, RpcError>(2 * n)
        })
        .async_method("never", |_: AsyncCall<()>| {
            std::future::pending::<Result<(), RpcError>>()
        })
        .async_method("slow", |call: AsyncCall<()>| async move {
            let (ms,): (u64,) = call.decode()?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>("done")
        })
        .build()
        .unwrap()
}

/// An rpcwire server on a loopback port, with a short shutdown grace (so
/// that a call that never ends does not keep it open long).
async fn listen() -> (std::net::SocketAddr, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let limits = Limits {
        shutdown_grace: Duration::from_millis(100),
        ..Limits::default()
    };
    tokio::spawn(serve_tcp(
        listener,
        server(),
        Lines::new,
        limits,
        None,
        shutdown.clone(),
    ));
    (addr, shutdown)
}

/// A client connected to `addr`: the driver runs, its peer sends.
async fn client(
    addr: std::net::SocketAddr,
    driver: Driver<Lines>,
) -> (Peer, JoinHandle<std::io::Result<CloseReason>>) {
    let mut driver = driver;
    let peer = driver.peer();
    let stream = TcpStream::connect(addr).await.unwrap();
    let run = tokio::spawn(async move {
        let (r, w) = stream.into_split();
        let client = Dispatcher::builder(()).build().unwrap();
        driver.run(&client, r, w).await
    });
    (peer, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_peer_pipelines_a_thousand_requests_over_tcp() {
    let (addr, _shutdown) = listen().await;
    let (peer, _run) = client(addr, Driver::new(Lines::new())).await;
    let calls: Vec<_> = (0..1000u64)
        .map(|n| {
            let peer = peer.clone();
            tokio::spawn(async move { (n, peer.request("double", Some(&[n]), HANG).await) })
        })
        .collect();
    for call in calls {
        let (n, answer) = call.await.unwrap();
        assert_eq!(answer.unwrap().decode::<u64>().unwrap(), 2 * n);
    }
    assert_eq!(peer.pending(), 0);
}

#[tokio::test]
async fn requests_made_before_run_go_out_when_it_starts() {
    let (addr, _shutdown) = listen().await;
    let mut driver = Driver::new(Lines::new());
    let peer = driver.peer();
    let early = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request("double", Some(&[21u64]), HANG).await }
    });
    tokio::task::yield_now().await;
    let (same, _run) = client(addr, driver).await;
    assert_eq!(early.await.unwrap().unwrap().decode::<u64>().unwrap(), 42);
    // Every call hands out the one peer.
    let again = same.request("double", Some(&[1u64]), HANG).await.unwrap();
    assert_eq!(again.decode::<u64>().unwrap(), 2);
    assert_eq!(peer.pending(), 0);
}

#[tokio::test]
async fn a_request_never_answered_times_out() {
    let (addr, _shutdown) = listen().await;
    let (peer, _run) = client(addr, Driver::new(Lines::new())).await;
    let late = peer
        .request_raw("never", None, Duration::from_millis(200))
        .await;
    assert_eq!(late.unwrap_err(), PeerError::Timeout);
    assert_eq!(peer.pending(), 0);
    // The connection goes on.
    let after = peer.request("double", Some(&[4u64]), HANG).await.unwrap();
    assert_eq!(after.decode::<u64>().unwrap(), 8);
}

#[tokio::test]
async fn pending_requests_fail_closed_when_the_server_closes() {
    let (addr, shutdown) = listen().await;
    let (peer, run) = client(addr, Driver::new(Lines::new())).await;
    let pending: Vec<_> = (0..3)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_raw("never", None, HANG).await })
        })
        .collect();
    // Answered: the calls in flight on the server's side have started.
    let ready = peer.request("double", Some(&[1u64]), HANG).await.unwrap();
    assert_eq!(ready.decode::<u64>().unwrap(), 2);
    assert_eq!(peer.pending(), 3);
    shutdown.trigger();
    for call in pending {
        let answer = tokio::time::timeout(HANG, call).await.unwrap().unwrap();
        assert_eq!(answer.unwrap_err(), PeerError::Closed);
    }
    let closed = tokio::time::timeout(HANG, run).await.unwrap().unwrap();
    assert_eq!(closed.unwrap(), CloseReason::Eof);
    // And later ones at once.
    let later = peer.request_raw("double", Some(b"[1]"), HANG).await;
    assert_eq!(later.unwrap_err(), PeerError::Closed);
}

#[tokio::test]
async fn a_client_waiting_for_an_answer_is_not_idle() {
    let (addr, _shutdown) = listen().await;
    // Idle after 100 ms, and the answer comes after 1 s: the pending
    // request keeps the connection.
    let driver = Driver::new(Lines::new()).idle_timeout(Some(Duration::from_millis(100)));
    let (peer, run) = client(addr, driver).await;
    let answer = peer.request("slow", Some(&[1000u64]), HANG).await;
    assert_eq!(answer.unwrap().decode::<String>().unwrap(), "done");
    assert!(!run.is_finished());
}

#[tokio::test]
async fn a_driver_dropped_without_running_closes_its_peer() {
    let mut driver = Driver::new(Lines::new());
    let peer = driver.peer();
    let pending = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("anything", None, HANG).await }
    });
    tokio::task::yield_now().await;
    drop(driver);
    let answer = tokio::time::timeout(HANG, pending).await.unwrap().unwrap();
    assert_eq!(answer.unwrap_err(), PeerError::Closed);
}

/// Two rpcwire drivers pipelining requests whose replies are large: each
/// side's output fills with what the other has not read yet. A side with
/// requests of its own waiting for answers reads on regardless (answers
/// make no output), so neither waits on the other. They once did for good:
/// at a full output the client stopped reading, the server could not write
/// its replies and stopped reading too (997 of 1000 requests timed out).
/// Found by a review. In memory (a 64 KiB pipe), where no kernel buffer
/// hides the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_drivers_pipelining_large_replies_do_not_wait_on_each_other() {
    let server = Dispatcher::builder(())
        .method("big", |c: Call<'_, ()>| {
            let (n, _pad): (usize, String) = c.decode()?;
            Ok::<_, RpcError>("y".repeat(n))
        })
        .build()
        .unwrap();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(async move {
        let (r, w) = tokio::io::split(b);
        Driver::new(Lines::new()).run(&server, r, w).await
    });
    let mut driver = Driver::new(Lines::new());
    let peer = driver.peer();
    let run = tokio::spawn(async move {
        let (r, w) = tokio::io::split(a);
        let client = Dispatcher::builder(()).build().unwrap();
        driver.run(&client, r, w).await
    });
    let pad = "x".repeat(8 * 1024);
    let calls: Vec<_> = (0..1000)
        .map(|_| {
            let (peer, pad) = (peer.clone(), pad.clone());
            tokio::spawn(async move { peer.request("big", Some(&(64 * 1024, pad)), HANG).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.unwrap().expect("answered, not timed out");
        assert_eq!(answer.decode::<String>().unwrap().len(), 64 * 1024);
    }
    assert_eq!(peer.pending(), 0);
    drop(peer);
    run.abort();
    served.abort();
}

/// A request with a deadline made from outside the driver (as a client
/// does, through `Driver::peer`) while the driver's output is full, the
/// other side reading nothing: the driver, waiting to write, still keeps
/// the new deadline. It did not look at the outbox while its output was
/// full, so nothing woke it for the request, and with no idle timeout
/// the request waited for ever (with one, up to that timeout late).
/// Found by a review.
#[tokio::test]
async fn a_deadline_set_while_the_output_is_full_still_passes() {
    // The other side never reads: a 64-byte pipe is full at once.
    let (client_io, _unread) = tokio::io::duplex(64);
    let mut driver = Driver::new(Lines::new())
        .max_pending_output(1)
        .idle_timeout(None);
    let peer = driver.peer();
    let (r, w) = tokio::io::split(client_io);
    let run = tokio::spawn(async move {
        let client = Dispatcher::builder(()).build().unwrap();
        driver.run(&client, r, w).await
    });
    let fill = format!("[\"{}\"]", "x".repeat(4096));
    peer.notify_raw("fill", fill.as_bytes()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    let (told, heard) = tokio::sync::oneshot::channel();
    let deadline = std::time::Instant::now() + Duration::from_millis(50);
    peer.request_with_raw("q", None, Some(deadline), move |answer| {
        let _ = told.send(answer.err());
    })
    .unwrap();
    let why = tokio::time::timeout(HANG, heard).await;
    assert_eq!(
        why.expect("the deadline passed unnoticed").unwrap(),
        Some(PeerError::Timeout)
    );
    assert_eq!(peer.pending(), 0);
    run.abort();
}

/// A client's subscriptions live on the server, out of its driver's
/// sight: taking the peer turns the idle timeout off unless one is set
/// (a client quiet while it waits for rare notifications was closed as
/// idle after `Limits::idle_timeout`, its subscription with it). Set after
/// `peer()`, one still applies. Found by a review.
#[tokio::test]
async fn a_client_waiting_for_notifications_is_not_closed_as_idle() {
    use rpcwire::server::subscriptions::Subscriptions;
    let server = Dispatcher::builder(())
        .method("eth_subscribe", |c: Call<'_, ()>| {
            let (id, sink) = Subscriptions::of(c.ctx)?.subscribe()?;
            // Rare events: none here.
            tokio::spawn(async move { sink.closed().await });
            Ok::<_, RpcError>(id)
        })
        .build()
        .unwrap();
    let server = std::sync::Arc::new(server);
    for explicit in [false, true] {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let d = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            let (r, w) = tokio::io::split(server_io);
            Driver::new(Lines::new()).run(&*d, r, w).await
        });
        let limits = Limits {
            idle_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let mut driver = Driver::new(Lines::new()).limits(limits);
        let peer = driver.peer();
        if explicit {
            driver = driver.idle_timeout(Some(Duration::from_millis(200)));
        }
        let run = tokio::spawn(async move {
            let (r, w) = tokio::io::split(client_io);
            let client = Dispatcher::builder(())
                .method("eth_subscription", |_: Call<'_, ()>| Ok::<_, RpcError>(()))
                .build()
                .unwrap();
            driver.run(&client, r, w).await
        });
        let id = peer
            .request("eth_subscribe", Some(&["logs"]), HANG)
            .await
            .unwrap()
            .decode::<String>()
            .unwrap();
        assert!(id.starts_with("0x"), "{id}");
        if explicit {
            let closed = tokio::time::timeout(HANG, run).await.unwrap().unwrap();
            assert_eq!(closed.unwrap(), CloseReason::Idle);
        } else {
            tokio::time::sleep(Duration::from_millis(800)).await;
            assert!(
                !run.is_finished(),
                "closed as idle: {:?}",
                run.await.unwrap()
            );
        }
    }
}
