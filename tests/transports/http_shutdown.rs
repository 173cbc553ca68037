//! Graceful shutdown of the HTTP server, both HTTP/1.1 paths (rpcwire's
//! own loop and hyper's): a shutdown seen however the client's bytes were
//! cut into reads, requests pipelined behind it not started, and async
//! notifications left running dropped at the end of the grace. Findings of
//! a review; each test failed before its fix.

use std::net::SocketAddr;
use std::time::Duration;

use crate::http_replies::{request, responses_of, summary};
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Call, Dispatcher, RpcError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const JSON: &str = "content-type: application/json\r\n";
const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
const STOP: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stop"}"#;

/// `ping`; `stop` triggers the server's shutdown (sync handler); `big`.
async fn start(own: bool) -> (SocketAddr, Shutdown, tokio::task::JoinHandle<()>) {
    let shutdown = Shutdown::new();
    let d = Dispatcher::builder(shutdown.clone())
        .method("ping", |call: Call<'_, Shutdown>| call.reply.str("pong"))
        .method("stop", |call: Call<'_, Shutdown>| {
            call.state.trigger();
            call.reply.str("stopping")
        })
        .method("big", |call: Call<'_, Shutdown>| {
            let (n,): (usize,) = call.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .build()
        .unwrap();
    let limits = Limits::default();
    let service = HttpService::new(d, &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(limits).own_http1(own);
    let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
    (addr, shutdown, task)
}

async fn read_all(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut raw = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = vec![0u8; 65536];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .unwrap_or(false);
    (raw, closed)
}

/// A handler that shuts the server down, requests pipelined behind it:
/// nothing after it is started, and its reply says `connection: close`
/// (as the stream and WebSocket drivers now do), whether the pipeline came
/// in one read or in several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_pipelined_behind_a_shutdown_is_answered() {
    let _serial = SERIAL.lock().await;
    let pipeline = [
        request(JSON, STOP),
        request(JSON, PING),
        request(JSON, PING),
    ]
    .concat();
    let mut seen = Vec::new();
    for own in [true, false] {
        for whole in [true, false] {
            let (addr, _shutdown, task) = start(own).await;
            let mut stream = TcpStream::connect(addr).await.unwrap();
            if whole {
                stream.write_all(pipeline.as_bytes()).await.unwrap();
            } else {
                let stop = request(JSON, STOP);
                stream.write_all(stop.as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = stream.write_all(&pipeline.as_bytes()[stop.len()..]).await;
            }
            let (raw, closed) = read_all(&mut stream).await;
            seen.push(format!(
                "own={own} whole={whole}: {}",
                summary(&responses_of(&raw), closed)
            ));
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .unwrap()
                .unwrap();
        }
    }
    let text = seen.join("\n");
    for line in &seen {
        let answers = line.matches("[200 OK").count();
        assert_eq!(answers, 1, "only `stop` is answered\n{text}");
        assert!(
            line.contains("connection: close"),
            "its reply says close\n{text}"
        );
    }
}

/// The shutdown comes while a reply waits for the client to read it, a
/// request pipelined behind: the reply finishes and the connection
/// closes, the next request not started, on both paths (rpcwire's own
/// loop started it, as the shutdown came after the reply's head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_a_reply_is_written_starts_nothing_after_it() {
    let _serial = SERIAL.lock().await;
    let big = r#"{"jsonrpc":"2.0","id":1,"method":"big","params":[8000000]}"#;
    let pipeline = [request(JSON, big), request(JSON, PING)].concat();
    let mut seen = Vec::new();
    for own in [true, false] {
        let (addr, shutdown, task) = start(own).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(pipeline.as_bytes()).await.unwrap();
        // The reply's head arrives (its writing began: the shutdown comes
        // after it, however slow the host), then the reply fills the
        // socket's buffers while the client does not read.
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 1024];
        while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
                .await
                .expect("the reply's head")
                .unwrap();
            assert!(n > 0, "closed before the reply's head");
            raw.extend_from_slice(&buf[..n]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.trigger();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (rest, closed) = read_all(&mut stream).await;
        raw.extend_from_slice(&rest);
        let responses = responses_of(&raw);
        let statuses: Vec<String> = responses
            .iter()
            .map(|(s, h, _)| format!("{s} {:?}", h.iter().find(|(n, _)| n == "connection")))
            .collect();
        seen.push(format!("own={own}: {statuses:?} closed={closed}"));
        assert!(
            statuses.len() == 1 && statuses[0].starts_with("200") && closed,
            "only the reply being written, then the close: {seen:?}"
        );
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        seen[0].split_once(": ").unwrap().1,
        seen[1].split_once(": ").unwrap().1,
        "\n{}",
        seen.join("\n")
    );
}

/// An async notification answered `204` runs on a task of its own: the
/// server's graceful shutdown waits for it and drops it at the grace's
/// end, so that `serve` returns with no handler running (it neither
/// waited nor dropped it, and the handler ran on after `serve`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_left_running_does_not_outlive_the_shutdown_grace() {
    use rpcwire::dispatch::AsyncCall;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _serial = SERIAL.lock().await;
    #[derive(Default)]
    struct St {
        running: AtomicUsize,
    }
    struct Running(Arc<St>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.running.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let d = Dispatcher::builder(St::default())
        .async_method("linger", |call: AsyncCall<St>| async move {
            call.state.running.fetch_add(1, Ordering::SeqCst);
            let _running = Running(Arc::clone(&call.state));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, RpcError>(true)
        })
        .timeout(None)
        .build()
        .unwrap();
    let state = Arc::clone(d.state());
    for own in [true, false] {
        let limits = Limits {
            shutdown_grace: Duration::from_millis(200),
            ..Limits::default()
        };
        let service = HttpService::new(d.clone(), &limits, None);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let task = tokio::spawn(Server::new(limits).own_http1(own).serve(
            listener,
            service,
            shutdown.clone(),
        ));
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"linger"}"#;
        let close = "content-type: application/json\r\nconnection: close\r\n";
        stream
            .write_all(request(close, note).as_bytes())
            .await
            .unwrap();
        let (raw, _) = read_all(&mut stream).await;
        assert!(
            raw.starts_with(b"HTTP/1.1 204"),
            "{}",
            String::from_utf8_lossy(&raw)
        );
        // Started on a task of its own, maybe just after the reply.
        for _ in 0..500 {
            if state.running.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(state.running.load(Ordering::SeqCst), 1, "own={own}");
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .unwrap()
            .unwrap();
        // At once: dropped before `serve` returned.
        assert_eq!(
            state.running.load(Ordering::SeqCst),
            0,
            "own={own}: the notification still runs after serve returned"
        );
    }
}
