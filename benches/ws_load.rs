//! rpcwire's WebSocket server against jsonrpsee's, under the same load.
//!
//! `cargo bench --bench ws_load --features peers,ws,eth` starts both servers, each in
//! a child process of its own (this binary with `--serve <server>`, a
//! two-worker tokio runtime, the same handlers: `eth_blockNumber`,
//! `eth_chainId`, `eth_getBalance` decoding its two string params), then
//! drives them with the same client (tokio-tungstenite, in this process)
//! at the same concurrency, the servers alternated over `ROUNDS` rounds
//! (default 5):
//!
//! * `single`: 8 connections, each keeping 8 `eth_blockNumber` requests in
//!   flight (a new one sent as each reply arrives);
//! * `batch100`: 4 connections, each keeping 2 batches of 100 in flight
//!   (half `eth_getBalance`, half `eth_blockNumber` / `eth_chainId`, as
//!   ethers v6 batches them);
//! * `single@`, `batch@`: the same messages at a fixed rate, below what
//!   either server can take (`RATE_SINGLE` requests/s, default 40,000, over
//!   8 connections; `RATE_BATCH` batches/s, default 400, over 4), sent on
//!   schedule whatever the replies do (open loop, as independent clients
//!   send). The two cases above keep a window full, so their latency is
//!   mostly the window queued behind whichever server answers faster (the
//!   faster server drives the shared client harder): at a fixed rate both
//!   servers see the same offered load, and each latency counts from when
//!   its message was due, so a stalled sender is charged too (no
//!   coordinated omission).
//!
//! `SERVER_THREADS` and `CLIENT_THREADS` (default 2 each) size the
//! servers' and the client's runtimes: with 2 + 2 on a 2-core machine the
//! threads outnumber the cores and the tail latency is the kernel's time
//! slice (4 ms at HZ=250), whichever server runs; 1 + 1 shows the servers'
//! own tails.
//!
//! Each run warms up for 0.5 s, then measures for `SECS` seconds (default
//! 2): requests per second (batch entries counted), the latency of each
//! message (p50, p99), and the server's CPU time per request (the time its
//! threads spent on a CPU, from `/proc/<pid>/task/*/schedstat`, divided by
//! the requests answered). Every reply is checked (no error, the id
//! expected); the first of each run is compared in full. The whole run
//! stays under 60 s with the defaults.

use rpcwire::eth::EthReply;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const SERVERS: [&str; 2] = ["rpcwire", "jsonrpsee"];
const BALANCE: &str = "0xde0b6b3a7640000";
const ADDRESS: &str = "0x95222290dd7278aa3ddd389cc1e1d165cc4bafe5";

#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    connections: usize,
    window: usize,
    /// Requests per message (1: single requests).
    batch: usize,
    /// Messages per second over all connections (open loop), or `None` to
    /// keep `window` messages in flight (closed loop).
    rate: Option<&'static str>,
}

const CASES: [Case; 4] = [
    Case {
        name: "single",
        connections: 8,
        window: 8,
        batch: 1,
        rate: None,
    },
    Case {
        name: "batch100",
        connections: 4,
        window: 2,
        batch: 100,
        rate: None,
    },
    Case {
        name: "single@",
        connections: 8,
        window: 0,
        batch: 1,
        rate: Some("RATE_SINGLE"),
    },
    Case {
        name: "batch@",
        connections: 4,
        window: 0,
        batch: 100,
        rate: Some("RATE_BATCH"),
    },
];

impl Case {
    /// Messages per second for an open-loop case.
    fn messages_per_sec(&self) -> Option<f64> {
        let var = self.rate?;
        let default = if self.batch == 1 { 40_000.0 } else { 400.0 };
        Some(env_or(var, default))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        return serve(&args[i + 1]);
    }
    let rounds: usize = env_or("ROUNDS", 5);
    let secs: f64 = env_or("SECS", 2.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("CLIENT_THREADS", 2))
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<Server> = SERVERS.iter().map(|s| Server::start(s)).collect();
    println!(
        "{:<9} {:<10} {:>12} {:>10} {:>10} {:>14}",
        "case", "server", "requests/s", "p50", "p99", "server CPU/req"
    );
    let mut results: HashMap<(&str, &str), Vec<Run>> = HashMap::new();
    for round in 0..rounds {
        for case in CASES {
            for k in 0..servers.len() {
                let server = &servers[(k + round) % servers.len()];
                let run = rt.block_on(run(case, server, Duration::from_secs_f64(secs)));
                println!(
                    "{:<9} {:<10} {:>12.0} {:>8.0}µs {:>8.0}µs {:>12.2}µs",
                    case.name,
                    server.name,
                    run.per_sec,
                    run.p50.as_secs_f64() * 1e6,
                    run.p99.as_secs_f64() * 1e6,
                    run.cpu_per_request.as_secs_f64() * 1e6
                );
                results
                    .entry((case.name, server.name))
                    .or_default()
                    .push(run);
            }
        }
    }
    println!(
        "\nmedians over {rounds} rounds; ratio = rpcwire / jsonrpsee (CPU: jsonrpsee / rpcwire)"
    );
    for case in CASES {
        let median = |server: &str, f: fn(&Run) -> f64| {
            let mut v: Vec<f64> = results[&(case.name, server)].iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let rate = |s| median(s, |r| r.per_sec);
        let cpu = |s| median(s, |r| r.cpu_per_request.as_secs_f64() * 1e6);
        let p50 = |s| median(s, |r| r.p50.as_secs_f64() * 1e6);
        let p99 = |s| median(s, |r| r.p99.as_secs_f64() * 1e6);
        println!(
            "{:<9} requests/s {:.0} vs {:.0} ({:.2}x); server CPU/req {:.2} vs {:.2} µs ({:.2}x); p50 {:.0} vs {:.0} µs; p99 {:.0} vs {:.0} µs",
            case.name,
            rate("rpcwire"),
            rate("jsonrpsee"),
            rate("rpcwire") / rate("jsonrpsee"),
            cpu("rpcwire"),
            cpu("jsonrpsee"),
            cpu("jsonrpsee") / cpu("rpcwire"),
            p50("rpcwire"),
            p50("jsonrpsee"),
            p99("rpcwire"),
            p99("jsonrpsee"),
        );
    }
    for s in servers {
        s.stop();
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Run {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    cpu_per_request: Duration,
}

/// One measured run of `case` against `server`.
async fn run(case: Case, server: &Server, measure: Duration) -> Run {
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..case.connections {
        let (recording, stop, answered) = (recording.clone(), stop.clone(), answered.clone());
        tasks.push(match case.messages_per_sec() {
            None => tokio::spawn(connection(
                case,
                server.port,
                c == 0,
                recording,
                stop,
                answered,
            )),
            Some(rate) => tokio::spawn(paced_connection(
                case,
                server.port,
                rate / case.connections as f64,
                c == 0,
                recording,
                stop,
                answered,
            )),
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu0, n0, t0) = (
        server.cpu(),
        answered.load(Ordering::SeqCst),
        Instant::now(),
    );
    recording.store(true, Ordering::SeqCst);
    tokio::time::sleep(measure).await;
    recording.store(false, Ordering::SeqCst);
    let (cpu1, n1, elapsed) = (server.cpu(), answered.load(Ordering::SeqCst), t0.elapsed());
    stop.store(true, Ordering::SeqCst);
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    latencies.sort_unstable();
    let requests = (n1 - n0) * case.batch as u64;
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Run {
        per_sec: requests as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        cpu_per_request: (cpu1 - cpu0) / requests.max(1) as u32,
    }
}

/// One client connection: keeps `case.window` messages in flight until
/// told to stop; returns the latencies recorded.
async fn connection(
    case: Case,
    port: u16,
    check: bool,
    recording: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> Vec<Duration> {
    let mut ws = open(port).await;
    let batch_rest = batch_tail(case.batch);
    let message = |n: u64| message(n, &batch_rest);
    let mut sent_at: HashMap<u64, Instant> = HashMap::new();
    let mut next = 1_000_000u64;
    for _ in 0..case.window {
        sent_at.insert(next, Instant::now());
        ws.feed(Message::text(message(next))).await.unwrap();
        next += 1;
    }
    ws.flush().await.unwrap();
    let mut latencies = Vec::new();
    let mut first = check;
    while !sent_at.is_empty() {
        let reply = match ws.next().await {
            Some(Ok(Message::Text(t))) => t,
            other => panic!("unexpected {other:?}"),
        };
        let id = checked_id(reply.as_bytes(), case.batch, &mut first);
        let started = sent_at.remove(&id).expect("a reply to a request in flight");
        if recording.load(Ordering::Relaxed) {
            latencies.push(started.elapsed());
        }
        answered.fetch_add(1, Ordering::Relaxed);
        if !stop.load(Ordering::Relaxed) {
            sent_at.insert(next, Instant::now());
            ws.send(Message::text(message(next))).await.unwrap();
            next += 1;
        }
    }
    let _ = ws.close(None).await;
    latencies
}

/// A WebSocket connection to the server on `port`.
async fn open(port: u16) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://127.0.0.1:{port}/"), tcp)
        .await
        .unwrap();
    ws
}

/// The message with key `n`: a single request, or a batch whose first
/// entry has id `n` and whose rest is `batch_rest` (empty for singles).
fn message(n: u64, batch_rest: &str) -> String {
    if batch_rest.is_empty() {
        format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"eth_blockNumber"}}"#)
    } else {
        format!(r#"[{{"jsonrpc":"2.0","id":{n},"method":"eth_blockNumber"}}{batch_rest}]"#)
    }
}

/// A reply's key (its first id), after checking it holds no error (and,
/// the first time, that it is the whole expected reply).
fn checked_id(reply: &[u8], batch: usize, first: &mut bool) -> u64 {
    if std::mem::take(first) {
        check_reply(reply, batch);
    }
    assert!(
        memchr::memmem::find(reply, b"\"error\"").is_none(),
        "an error reply: {}",
        String::from_utf8_lossy(reply)
    );
    first_id(reply)
}

/// One client connection sending `rate` messages per second on schedule,
/// whatever the replies do, until told to stop; returns the latencies
/// recorded, each from the moment its message was due.
async fn paced_connection(
    case: Case,
    port: u16,
    rate: f64,
    check: bool,
    recording: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> Vec<Duration> {
    let (mut sink, mut stream) = open(port).await.split();
    let batch_rest = batch_tail(case.batch);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    // Message `k` (id `BASE + k`) is due at `start + k * interval`.
    const BASE: u64 = 1_000_000;
    let due = move |id: u64| start + interval * (id - BASE) as u32;
    let sent = Arc::new(AtomicU64::new(0));
    let sending = Arc::new(AtomicBool::new(true));
    let sender = {
        let (sent, sending) = (sent.clone(), sending.clone());
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Everything due by now goes out (tokio's timer ticks in
                // milliseconds: a few messages per tick at these rates).
                let now = Instant::now();
                while due(BASE + k) <= now {
                    sink.feed(Message::text(message(BASE + k, &batch_rest)))
                        .await
                        .unwrap();
                    k += 1;
                }
                sink.flush().await.unwrap();
                sent.store(k, Ordering::SeqCst);
                tokio::time::sleep_until(due(BASE + k).into()).await;
            }
            sending.store(false, Ordering::SeqCst);
            sink
        })
    };
    let mut latencies = Vec::new();
    let mut first = check;
    let mut received = 0u64;
    loop {
        if !sending.load(Ordering::SeqCst) && received == sent.load(Ordering::SeqCst) {
            break;
        }
        let next = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        let reply = match next {
            Err(_) => continue,
            Ok(Some(Ok(Message::Text(t)))) => t,
            Ok(other) => panic!("unexpected {other:?}"),
        };
        let id = checked_id(reply.as_bytes(), case.batch, &mut first);
        if recording.load(Ordering::Relaxed) {
            latencies.push(due(id).elapsed());
        }
        received += 1;
        answered.fetch_add(1, Ordering::Relaxed);
    }
    let mut sink = sender.await.unwrap();
    let _ = sink.close().await;
    latencies
}

/// Entries 2..=n of a batch (ids 2..=n; the first entry's id is the
/// message's key).
fn batch_tail(n: usize) -> String {
    let mut tail = String::new();
    for k in 2..=n {
        let entry = match k % 4 {
            0 | 2 => format!(
                r#",{{"jsonrpc":"2.0","id":{k},"method":"eth_getBalance","params":["{ADDRESS}","latest"]}}"#
            ),
            1 => format!(r#",{{"jsonrpc":"2.0","id":{k},"method":"eth_chainId","params":[]}}"#),
            _ => format!(r#",{{"jsonrpc":"2.0","id":{k},"method":"eth_blockNumber"}}"#),
        };
        tail.push_str(&entry);
    }
    tail
}

/// The number after the first `"id":`.
fn first_id(reply: &[u8]) -> u64 {
    let at = memchr::memmem::find(reply, b"\"id\":").expect("an id") + 5;
    reply[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0, |n, b| n * 10 + u64::from(b - b'0'))
}

/// The whole reply, parsed and compared with what both servers must send.
fn check_reply(reply: &[u8], batch: usize) {
    let value: serde_json::Value = serde_json::from_slice(reply).unwrap();
    let entries = if batch == 1 {
        vec![value]
    } else {
        value.as_array().unwrap().clone()
    };
    assert_eq!(entries.len(), batch);
    for (k, e) in entries.iter().enumerate() {
        let expected = match (k + 1) % 4 {
            _ if k == 0 => "0x1b4",
            0 | 2 => BALANCE,
            1 => "0x1",
            _ => "0x1b4",
        };
        assert_eq!(e["result"], expected, "{e}");
    }
}

struct Server {
    name: &'static str,
    child: Child,
    port: u16,
}

impl Server {
    fn start(name: &'static str) -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", name])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        Server {
            name,
            port: line.trim().parse().unwrap(),
            child,
        }
    }

    /// Time on a CPU so far, summed over the child's threads.
    fn cpu(&self) -> Duration {
        let mut nanos = 0u64;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap() {
            let path = task.unwrap().path().join("schedstat");
            if let Ok(stat) = std::fs::read_to_string(path) {
                nanos += stat.split(' ').next().unwrap().parse::<u64>().unwrap();
            }
        }
        Duration::from_nanos(nanos)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child: one server on 127.0.0.1 port 0 (printed), until killed.
fn serve(name: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("SERVER_THREADS", 2))
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match name {
            "rpcwire" => serve_rpcwire().await,
            "jsonrpsee" => serve_jsonrpsee().await,
            other => panic!("unknown server {other}"),
        }
    });
}

async fn serve_rpcwire() {
    use rpcwire::{Call, Dispatcher, RpcError};
    let d = Dispatcher::builder(())
        .method("eth_blockNumber", |c: Call<'_, ()>| c.reply.quantity(0x1b4))
        .method("eth_chainId", |c: Call<'_, ()>| c.reply.quantity(1))
        .method("eth_getBalance", |c: Call<'_, ()>| {
            let (_address, _block): (&str, &str) = c.decode()?;
            Ok::<_, RpcError>(BALANCE)
        })
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    rpcwire::server::ws::WsServer::new(d)
        .serve(listener)
        .await
        .unwrap();
}

async fn serve_jsonrpsee() {
    use jsonrpsee::RpcModule;
    use jsonrpsee::server::Server;
    use jsonrpsee::types::ErrorObjectOwned;
    let mut module = RpcModule::new(());
    module
        .register_method("eth_blockNumber", |_, _, _| "0x1b4")
        .unwrap();
    module
        .register_method("eth_chainId", |_, _, _| "0x1")
        .unwrap();
    module
        .register_method("eth_getBalance", |params, _, _| {
            let (_address, _block): (&str, &str) = params.parse()?;
            Ok::<_, ErrorObjectOwned>(BALANCE)
        })
        .unwrap();
    let server = Server::builder().build("127.0.0.1:0").await.unwrap();
    println!("{}", server.local_addr().unwrap().port());
    let handle = server.start(module);
    handle.stopped().await;
}
