//! Heap memory of the servers, measured with a counting allocator (in a
//! test binary of its own: the allocator counts every thread): a client
//! that sends requests as fast as it can and never reads its replies costs
//! the stream server bounded memory, and idle connections (stream and
//! HTTP/1.1 keep-alive) do not keep the buffers of their largest message.
#![cfg(feature = "server")]

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use counting_alloc::{CountingAlloc, peak_since, start_peak};
use rpcwire::frame::Lines;
use rpcwire::server::Limits;
use rpcwire::server::stream::{ConnectionStats, Driver};
use rpcwire::{Call, Dispatcher};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The allocator counts every thread: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_costs_bounded_heap() {
    let _serial = SERIAL.lock().await;
    const REPLY: usize = 16 * 1024;
    const REQUESTS: usize = 400_000;
    let d = Dispatcher::builder(())
        .method("big", |c: Call<'_, ()>| {
            let (n,): (usize,) = c.decode()?;
            c.reply.str(&"x".repeat(n))
        })
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut stream, _) = listener.accept().await.unwrap();
    let one = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"big\",\"params\":[{REPLY}]}}\n");
    let chunk = one.repeat(1000).into_bytes();

    let base = start_peak();
    let driver = Driver::new(Lines::new())
        .limits(Limits {
            max_in_flight: 32,
            max_queued: 256,
            ..Limits::default()
        })
        .max_pending_output(256 * 1024);
    let stats = driver.stats();
    let server = tokio::spawn(async move {
        let (r, w) = stream.split();
        driver.run(&d, r, w).await
    });
    let (client_r, mut client_w) = client.into_split();
    let sent = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn({
        let sent = sent.clone();
        async move {
            for _ in 0..REQUESTS / 1000 {
                if client_w.write_all(&chunk).await.is_err() {
                    break;
                }
                sent.fetch_add(1000, Ordering::Relaxed);
            }
            client_w
        }
    });
    // Until the server has stopped reading and its output stopped moving.
    let mut last = u64::MAX;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = stats.bytes_written();
        if stats.reading_paused() && now == last {
            break;
        }
        last = now;
    }
    let peak = peak_since(base);
    assert!(!writer.is_finished(), "the client is blocked");
    // The client got this many requests out (into the socket buffers): a
    // server that read them all would owe it `sent * REPLY` bytes (more
    // than a GiB here); it read a small part, and holds less than 2 MiB.
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        sent as u64 > 10 * stats.messages_read(),
        "{sent} requests sent"
    );
    assert!(
        peak < 2 << 20,
        "{peak} bytes of heap at the peak ({} requests read, {sent} sent)",
        stats.messages_read()
    );
    writer.abort();
    drop(client_r);
    let _ = tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the driver ends");
}

/// A connection that once asked for a large reply does not keep buffers
/// of its size while it idles: 20 TCP connections, each after a 400 kB
/// reply, kept 1.7 MB each (the output and the reply buffer, given back
/// only past 1 MiB): 34 MB for 20, some GB for thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_reply_s_buffers_are_not_kept_by_its_connection() {
    let _serial = SERIAL.lock().await;
    let kept = kept_by_idle_connections(|ask| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"big\",\"params\":[{ask}]}}\n{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"big\",\"params\":[1]}}\n"
        )
    })
    .await;
    assert!(
        kept < CONNECTIONS * (200 << 10),
        "{CONNECTIONS} connections kept {kept} bytes after their large replies"
    );
}

/// The same for the dispatcher's own buffers, which a connection keeps
/// between messages up to `Connection::max_retained` (1 MiB): the arena
/// after a large escaped string was decoded into it, and the async
/// engine's reply buffers after a batch with a large async reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_s_buffers_are_not_kept_by_an_idle_connection() {
    let _serial = SERIAL.lock().await;
    let kept = kept_by_idle_connections(|ask| {
        let escaped = "\\u0041".repeat(ask / 10);
        format!(
            "[{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"big_async\",\"params\":[{ask}]}},{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"len\",\"params\":[\"{escaped}\"]}}]\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\",\"params\":[1]}}\n"
        )
    })
    .await;
    // 220 kB each before they were given back; 90 kB after.
    assert!(
        kept < CONNECTIONS * (150 << 10),
        "{CONNECTIONS} connections kept {kept} bytes after their large messages"
    );
}

const CONNECTIONS: usize = 20;

/// The methods the idle-connection tests call: large replies (sync and
/// async) and a large escaped string decoded into the arena.
fn idle_dispatcher() -> Dispatcher<(), rpcwire::dispatch::WithAsync> {
    use rpcwire::dispatch::{AsyncCall, RpcError};
    Dispatcher::builder(())
        .method("big", |c: Call<'_, ()>| {
            let (n,): (usize,) = c.decode()?;
            c.reply.str(&"x".repeat(n))
        })
        .method("len", |c: Call<'_, ()>| {
            let (text,): (&str,) = c.decode()?;
            Ok::<_, RpcError>(text.len())
        })
        .async_method("big_async", |c: AsyncCall<()>| async move {
            let (n,): (usize,) = c.decode()?;
            Ok::<_, RpcError>("x".repeat(n))
        })
        .async_method("yield_async", |_: AsyncCall<()>| async move {
            tokio::task::yield_now().await;
            Ok::<_, RpcError>(0)
        })
        .build()
        .unwrap()
}

/// The async engine's queue of calls waiting for a slot: a batch of
/// 1,000 async calls (64 run at once, the rest wait) left the queue's
/// places, about 150 kB, with its connection while it idled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_async_batch_s_queue_is_not_kept_by_an_idle_connection() {
    let _serial = SERIAL.lock().await;
    let kept = kept_by_idle_connections(|ask| {
        let calls = if ask > 10 { 1000 } else { 1 };
        let batch: Vec<String> = (0..calls)
            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"yield_async\"}}"))
            .collect();
        format!(
            "[{}]\n{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"big\",\"params\":[1]}}\n",
            batch.join(",")
        )
    })
    .await;
    // 421 KiB each before the queue's places were given back, 270 KiB
    // after: what is left is the output, reply buffers, reply lists and
    // arena kept up to 64 KiB each (`KEEP_IDLE`), as after any message.
    assert!(
        kept < CONNECTIONS * (340 << 10),
        "{CONNECTIONS} connections kept {kept} bytes after their large batches"
    );
}

/// Heap bytes that `CONNECTIONS` idle clients keep, each connected by
/// `exchange(400_000)` (which asks for that much and reads the answers);
/// a first client, made by `exchange(10)`, is the baseline (what every
/// connection costs anyway).
async fn kept_while_idle<C>(exchange: impl AsyncFn(usize) -> C) -> usize {
    let mut clients = Vec::new();
    let mut base = 0;
    for i in 0..=CONNECTIONS {
        clients.push(exchange(if i == 0 { 10 } else { 400_000 }).await);
        if i == 0 {
            base = counting_alloc::live();
        }
    }
    counting_alloc::live().saturating_sub(base)
}

/// [`kept_while_idle`] over TCP connections of the stream server, each
/// sending `two(ask)` (two lines, each answered).
async fn kept_by_idle_connections(two: impl Fn(usize) -> String) -> usize {
    use rpcwire::server::Shutdown;
    use rpcwire::server::stream::serve_tcp;
    use tokio::io::{AsyncBufReadExt, BufReader};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let metrics = Arc::new(rpcwire::server::Metrics::default());
    let server = tokio::spawn(serve_tcp(
        listener,
        idle_dispatcher(),
        Lines::new,
        Limits::default(),
        Some(metrics),
        shutdown.clone(),
    ));
    let kept = kept_while_idle(async |ask| {
        let mut client = BufReader::new(TcpStream::connect(addr).await.unwrap());
        client.write_all(two(ask).as_bytes()).await.unwrap();
        for _ in 0..2 {
            let mut line = String::new();
            tokio::time::timeout(Duration::from_secs(30), client.read_line(&mut line))
                .await
                .expect("a reply")
                .unwrap();
            assert!(
                line.ends_with("}\n") || line.ends_with("]\n"),
                "{}",
                &line[..line.len().min(80)]
            );
            assert!(
                !line.contains("\"error\""),
                "{}",
                &line[..line.len().min(200)]
            );
        }
        client
    })
    .await;
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(30), server).await;
    kept
}

/// The same over HTTP/1.1 keep-alive: a connection's per-request scratch
/// (arena, async reply buffers), kept between its requests, does not keep
/// what one large request needed while the connection idles.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http_connection_keeps_no_large_buffers() {
    use rpcwire::server::Shutdown;
    use rpcwire::server::http::{HttpService, serve};
    use tokio::io::AsyncReadExt;
    let _serial = SERIAL.lock().await;
    let limits = Limits::default();
    let service = HttpService::new(idle_dispatcher(), &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = tokio::spawn(serve(listener, service, limits, None, shutdown.clone()));
    let kept = kept_while_idle(async |ask| {
        let escaped = "\\u0041".repeat(ask / 10);
        let body = format!(
            "[{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"big_async\",\"params\":[{ask}]}},{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"len\",\"params\":[\"{escaped}\"]}}]"
        );
        let mut client = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.unwrap();
        // The head, then the body to its length.
        let mut reply = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        let wanted = loop {
            let n = tokio::time::timeout(Duration::from_secs(30), client.read(&mut chunk))
                .await
                .expect("a reply")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&reply));
            reply.extend_from_slice(&chunk[..n]);
            if let Some(end) = reply.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&reply[..end]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                break end + 4 + length;
            }
        };
        while reply.len() < wanted {
            let n = client.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            reply.extend_from_slice(&chunk[..n]);
        }
        assert!(!reply.windows(7).any(|w| w == b"\"error\""));
        client
    })
    .await;
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(30), server).await;
    assert!(
        kept < CONNECTIONS * (150 << 10),
        "{CONNECTIONS} connections kept {kept} bytes after their large requests"
    );
}

/// Messages held while handlers wait for their client's answers at the
/// in-flight limit are bounded in memory, not only in their own bytes: a
/// flood of the smallest messages (`{}`, two bytes each, never an answer)
/// cost some 24 times the 64 KiB bound in the list that held them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_held_at_the_in_flight_limit_are_bounded() {
    use rpcwire::dispatch::{AsyncCall, RpcError};
    use tokio::io::{AsyncBufReadExt, BufReader};
    let _serial = SERIAL.lock().await;
    let d = Dispatcher::builder(())
        .async_method("ask", |call: AsyncCall<()>| async move {
            let peer = call.ctx.peer().expect("two-way").clone();
            let _ = peer
                .request("client/ping", Some(&[0u8; 0]), Duration::from_secs(3600))
                .await;
            Ok::<_, RpcError>(0)
        })
        .build()
        .unwrap();
    let (client, server, stats) = served_by_lines(
        d,
        Limits {
            max_in_flight: 1,
            max_message_len: 64 << 10,
            ..Limits::default()
        },
    )
    .await;
    let (client_r, mut client_w) = client.into_split();
    client_w
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ask\"}\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(client_r).lines();
    let asked = lines.next_line().await.unwrap().unwrap();
    assert!(asked.contains("client/ping"), "{asked}");
    let base = start_peak();
    let chunk = b"{}\n".repeat(10_000);
    let flood = flood(client_w, chunk, 100);
    // Until the server stops reading (the bound reached) or took it all.
    let last = until_reading_stops(&stats, Duration::from_millis(100)).await;
    let peak = peak_since(base);
    assert!(
        last < 3_000_000 + 64,
        "the server held every message ({last} bytes read)"
    );
    // 1.57 MB before the list's places were counted; 55-80 kB after.
    assert!(peak < 512 << 10, "peak heap growth {peak} bytes");
    flood.abort();
    server.abort();
}

/// A client that pipelines without end while its one call is blocked
/// (its cap, 1) is read only a little past the cap (the server reads on
/// there to see a client leave): megabytes offered, the server stops
/// taking them and its heap grows by a small bound. Once it has stopped
/// reading, a client that leaves with a reset is still found (the server
/// probes it while calls run for a client it does not read): the call is
/// dropped and the connection ends. It once ran until the call did (here:
/// never), unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_pipelining_at_its_cap_is_read_boundedly_and_seen_leaving() {
    use rpcwire::dispatch::{AsyncCall, RpcError};
    let _serial = SERIAL.lock().await;
    let dropped = Arc::new(AtomicUsize::new(0));
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let d = Dispatcher::builder(Arc::clone(&dropped))
        .async_method("block", |call: AsyncCall<Arc<AtomicUsize>>| async move {
            let _guard = Guard(Arc::clone(&call.state));
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(0)
        })
        .method("add", |c: Call<'_, Arc<AtomicUsize>>| {
            let (a, b): (u64, u64) = c.decode()?;
            c.reply.u64(a + b)
        })
        .build()
        .unwrap();
    let (client, server, stats) = served_by_lines(
        d,
        Limits {
            max_in_flight: 1,
            idle_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let base = start_peak();
    let mut chunk = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"block\"}\n".to_vec();
    for i in 1..1000 {
        chunk.extend(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"add\",\"params\":[{i},1]}}\n")
                .as_bytes(),
        );
    }
    client.set_zero_linger().unwrap();
    let (client_r, client_w) = client.into_split();
    // About 60 MiB offered.
    let flood = flood(client_w, chunk, 1000);
    let last = until_reading_stops(&stats, Duration::from_millis(200)).await;
    let peak = peak_since(base);
    eprintln!("at the cap: {last} bytes read, peak heap growth {peak} bytes");
    assert!(last < 8 << 20, "the server took {last} bytes at its cap");
    assert!(peak < 2 << 20, "peak heap growth {peak} bytes");
    assert!(!server.is_finished());
    // The client leaves: a reset (linger 0, set before it wrote).
    flood.abort();
    let _ = flood.await;
    drop(client_r);
    let ended = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the connection of a client that left is still served")
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

/// `d` served by a stream driver (newline framing) with `limits` over a
/// loopback TCP connection: the client's end, the server's task and its
/// counters.
async fn served_by_lines<S: Send + Sync + 'static>(
    d: Dispatcher<S, rpcwire::dispatch::WithAsync>,
    limits: Limits,
) -> (
    TcpStream,
    tokio::task::JoinHandle<std::io::Result<rpcwire::server::stream::CloseReason>>,
    Arc<ConnectionStats>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut stream, _) = listener.accept().await.unwrap();
    let driver = Driver::new(Lines::new()).limits(limits);
    let stats = driver.stats();
    let server = tokio::spawn(async move {
        let (r, w) = stream.split();
        driver.run(&d, r, w).await
    });
    (client, server, stats)
}

/// The bytes the server has read once it stopped reading: when two
/// readings `every` apart agree.
async fn until_reading_stops(stats: &ConnectionStats, every: Duration) -> u64 {
    let mut last = 0;
    loop {
        tokio::time::sleep(every).await;
        let read = stats.bytes_read();
        if read == last {
            return last;
        }
        last = read;
    }
}

/// Writes `chunk` `times` over on a task of its own (until a write
/// fails); the writer comes back when it ends.
fn flood<W>(mut writer: W, chunk: Vec<u8>, times: usize) -> tokio::task::JoinHandle<W>
where
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        for _ in 0..times {
            if writer.write_all(&chunk).await.is_err() {
                break;
            }
        }
        writer
    })
}

/// MCP over stdio holds requests past its cap as copies: a held line was
/// a slice of the read chunk it came in, which it kept whole (a client
/// interleaving 4 KB notifications with the calls it has held kept about
/// 90 times what the held lines count: 94 MiB for 1 MiB of them, up to
/// about 470 MiB at the 5 MiB bound while a tool waits for an answer).
/// Found by a review.
#[cfg(feature = "mcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_held_requests_keep_no_read_chunks() {
    use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, BufReader};
    let _serial = SERIAL.lock().await;
    let server = McpServer::builder("held", "1")
        .max_in_flight(1)
        .tool(Tool::new(
            "ask",
            json!({"type": "object"}),
            |_, cx: ToolContext| async move {
                let _ = cx
                    .ask_client("roots/list", &json!({}), Duration::from_secs(300))
                    .await;
                Ok(ToolOutput::text("done"))
            },
        ))
        .tool(Tool::new(
            "quick",
            json!({"type": "object"}),
            |_, _| async { Ok(ToolOutput::text("quick")) },
        ))
        .build()
        .unwrap();
    let (mut to_server, server_input) = tokio::io::duplex(64 * 1024);
    let (server_output, from_server) = tokio::io::duplex(1 << 20);
    let served =
        tokio::spawn(async move { server.serve_stream(server_input, server_output).await });
    let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(from_server).lines();
        let mut asked_tx = Some(asked_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("roots/list")
                && let Some(tx) = asked_tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    let call = |id: u64, tool: &str| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{}}}}}}\n"
        )
    };
    let start = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{{\"roots\":{{}}}},\"clientInfo\":{{\"name\":\"t\",\"version\":\"1\"}}}}}}\n\
         {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n{}",
        call(1, "ask")
    );
    to_server.write_all(start.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), asked_rx)
        .await
        .unwrap()
        .unwrap();
    let pad = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/pad\",\"params\":{{\"p\":\"{}\"}}}}\n",
        "a".repeat(4000)
    );
    let mut input = String::new();
    for i in 0..12_000u64 {
        input += &call(100 + i, "quick");
        input += &pad;
    }
    let base = start_peak();
    to_server.write_all(input.as_bytes()).await.unwrap();
    drop(input);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = peak_since(base);
    served.abort();
    reader.abort();
    assert!(peak < 16 << 20, "peak heap {} MiB", peak >> 20);
}

/// Messages held at the in-flight cap were slices of their read chunk, so
/// each kept the whole chunk: one `{}` per 64 KiB of blank lines (66 bytes
/// counted against the 64 KiB held bound) held about 65 MB. Held messages
/// are copies now, as MCP stdio's held lines are. Found by a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_messages_do_not_pin_their_read_chunks() {
    use rpcwire::dispatch::AsyncCall;
    let _serial = SERIAL.lock().await;
    let d = Dispatcher::builder(())
        .async_method("block", |_call: AsyncCall<()>| async move {
            std::future::pending::<()>().await;
            Ok::<_, rpcwire::RpcError>(0)
        })
        .build()
        .unwrap();
    let (client, server, stats) = served_by_lines(
        d,
        Limits {
            max_in_flight: 1,
            ..Limits::default()
        },
    )
    .await;
    let (client_r, mut client_w) = client.into_split();
    client_w
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"block\"}\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = start_peak();
    // One small message per 64 KiB, the rest blank lines.
    let mut chunk = b"{}\n".to_vec();
    chunk.resize(64 * 1024, b'\n');
    let flood = flood(client_w, chunk, 2000);
    let read = until_reading_stops(&stats, Duration::from_millis(200)).await;
    let peak = peak_since(base);
    flood.abort();
    server.abort();
    drop(client_r);
    assert!(
        peak < 2 << 20,
        "peak heap growth {peak} bytes ({read} bytes read)"
    );
}
