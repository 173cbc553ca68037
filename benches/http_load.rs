//! HTTP load: rpcwire's HTTP server against jsonrpsee's, same handlers, same
//! client, same concurrency, runs alternated.
//!
//! ```text
//! cargo bench --features peers,http,eth --bench http_load
//! ```
//!
//! Each run starts the server under test in a child process (this binary,
//! re-executed with `--serve rpcwire` or `--serve jsonrpsee`), warms it up,
//! then sends a fixed number of requests over N kept-alive HTTP/1.1
//! connections (one request in flight per connection), at most 60 s per
//! run. The client speaks just enough HTTP/1.1 itself (a prepared request,
//! the response read to its `Content-Length`), so that on a machine with
//! few cores it costs less CPU than the servers it measures. Reported per run: requests/s, p50 and p99 latency, and
//! the server's CPU time per request (user + system, from
//! `/proc/<pid>/stat`, the warm-up excluded). Cases: `eth_blockNumber`
//! answering a constant quantity, and batches of 100 of it.
//!
//! Settings (environment): `HTTP_LOAD_CONNECTIONS` (default 16),
//! `HTTP_LOAD_ROUNDS` (3), `HTTP_LOAD_SINGLE` (requests per single-call run,
//! 100,000), `HTTP_LOAD_BATCH` (batches per batch run, 40,000).

use rpcwire::eth::EthReply;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

const QUANTITY: u64 = 0x1b4;
const MAX_RUN: Duration = Duration::from_secs(60);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        return serve(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--load") {
        // `--load PORT single|batch TOTAL`: load a server started by hand
        // (for profiling it).
        let port: u16 = args[i + 1].parse().unwrap();
        let case = if args[i + 2] == "batch" {
            Case::Batch100
        } else {
            Case::Single
        };
        let total: usize = args[i + 3].parse().unwrap();
        let rt = runtime();
        let (n, _) = rt.block_on(drive(
            SocketAddr::from(([127, 0, 0, 1], port)),
            case,
            env("HTTP_LOAD_CONNECTIONS", 16),
            total,
            true,
        ));
        println!("{n} requests");
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument picks cases.
    let filter = args.iter().skip(1).find(|a| !a.starts_with("--")).cloned();
    bench(filter.as_deref());
}

// ---------------------------------------------------------------- servers

/// A multi-thread runtime, `HTTP_LOAD_WORKERS` threads (default: one per
/// core), for servers and client alike.
fn runtime() -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = std::env::var("HTTP_LOAD_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        b.worker_threads(n);
    }
    b.enable_all().build().unwrap()
}

/// Runs one server until stdin closes; prints its port first.
fn serve(which: &str) {
    let rt = runtime();
    rt.block_on(async {
        let addr = match which {
            "rpcwire" => serve_rpcwire().await,
            "jsonrpsee" => serve_jsonrpsee().await,
            other => panic!("unknown server {other}"),
        };
        println!("{}", addr.port());
        std::io::stdout().flush().unwrap();
        // Until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .unwrap();
    });
}

async fn serve_rpcwire() -> SocketAddr {
    use rpcwire::server::http::{HttpService, serve};
    use rpcwire::server::{Limits, Shutdown};
    use rpcwire::{Call, Dispatcher};
    let d = Dispatcher::builder(())
        .method("eth_blockNumber", |call: Call<'_, ()>| {
            call.reply.quantity(QUANTITY.into())
        })
        .build()
        .unwrap();
    let limits = Limits::default();
    let service = HttpService::new(d, &limits, None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, limits, None, Shutdown::new()));
    addr
}

async fn serve_jsonrpsee() -> SocketAddr {
    use jsonrpsee::server::{RpcModule, Server, ServerConfig};
    let config = ServerConfig::builder().max_connections(10_000).build();
    let server = Server::builder()
        .set_config(config)
        .build("127.0.0.1:0")
        .await
        .unwrap();
    let mut module = RpcModule::new(());
    module
        .register_method("eth_blockNumber", |_, _, _| "0x1b4")
        .unwrap();
    let addr = server.local_addr().unwrap();
    let handle = server.start(module);
    // Runs until the process exits.
    std::mem::forget(handle);
    addr
}

/// A server in a child process.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(which: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", which])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the server prints its port");
        Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// User + system CPU time so far.
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which may hold spaces): state is
        // field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

// ---------------------------------------------------------------- client

#[derive(Clone, Copy)]
enum Case {
    Single,
    Batch100,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Single => "eth_blockNumber",
            Case::Batch100 => "batch of 100",
        }
    }

    fn body(self, conn: usize) -> Bytes {
        match self {
            Case::Single => Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{conn},"method":"eth_blockNumber","params":[]}}"#
            )),
            Case::Batch100 => {
                let entries: Vec<String> = (0..100)
                    .map(|i| {
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{i},"method":"eth_blockNumber","params":[]}}"#
                        )
                    })
                    .collect();
                Bytes::from(format!("[{}]", entries.join(",")))
            }
        }
    }

    /// Checks a reply.
    fn check(self, body: &[u8]) {
        let text = std::str::from_utf8(body).unwrap();
        let want = match self {
            Case::Single => 1,
            Case::Batch100 => 100,
        };
        assert_eq!(text.matches(r#""result":"0x1b4""#).count(), want, "{text}");
    }
}

struct Run {
    requests: usize,
    elapsed: Duration,
    latencies: Vec<u32>,
    cpu: Duration,
}

impl Run {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        Duration::from_nanos(self.latencies[i] as u64 * 100)
    }
    fn cpu_per_request(&self) -> Duration {
        self.cpu / self.requests as u32
    }
}

/// Sends `total` requests of `case` over `connections` kept-alive
/// connections; the server's CPU time is read around it.
fn load(server: &Server, case: Case, connections: usize, total: usize) -> Run {
    let rt = runtime();
    rt.block_on(async {
        // Warm-up (and a check of the replies): a tenth of the run.
        drive(server.addr, case, connections, total / 10, true).await;
        let cpu_before = server.cpu();
        let started = Instant::now();
        let (requests, latencies) = drive(server.addr, case, connections, total, false).await;
        let elapsed = started.elapsed();
        let cpu = server.cpu() - cpu_before;
        if std::env::var_os("HTTP_LOAD_VERBOSE").is_some() {
            eprintln!("server CPU {cpu:?} over {elapsed:?}");
        }
        Run {
            requests,
            elapsed,
            latencies,
            cpu,
        }
    })
}

async fn drive(
    addr: SocketAddr,
    case: Case,
    connections: usize,
    total: usize,
    check: bool,
) -> (usize, Vec<u32>) {
    let left = Arc::new(AtomicUsize::new(total));
    let deadline = Instant::now() + MAX_RUN;
    let mut tasks = Vec::new();
    for c in 0..connections {
        let left = left.clone();
        let body = case.body(c);
        tasks.push(tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut request = format!(
                "POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body);
            let mut buf = Vec::with_capacity(64 * 1024);
            // Latencies in units of 100 ns.
            let mut latencies = Vec::with_capacity(total / connections + 1);
            let mut first = check;
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
                && Instant::now() < deadline
            {
                let sent = Instant::now();
                stream.write_all(&request).await.unwrap();
                buf.clear();
                let body_at = loop {
                    if buf.len() == buf.capacity() {
                        buf.reserve(buf.len());
                    }
                    let n = stream.read_buf(&mut buf).await.unwrap();
                    assert!(n > 0, "the server closed the connection");
                    if let Some((head, len)) = response_head(&buf)
                        && buf.len() >= head + len
                    {
                        assert_eq!(buf.len(), head + len, "one response per request");
                        break head;
                    }
                };
                latencies.push((sent.elapsed().as_nanos() / 100).min(u32::MAX as u128) as u32);
                if first {
                    assert!(buf.starts_with(b"HTTP/1.1 200"));
                    case.check(&buf[body_at..]);
                    first = false;
                }
            }
            latencies
        }));
    }
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    (all.len(), all)
}

/// A complete response head in `buf`: its length and the body's
/// (`Content-Length`).
fn response_head(buf: &[u8]) -> Option<(usize, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = &buf[..end];
    let len = head
        .split(|&b| b == b'\n')
        .find_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            if !line[..colon].eq_ignore_ascii_case(b"content-length") {
                return None;
            }
            std::str::from_utf8(&line[colon + 1..])
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("a Content-Length");
    Some((end, len))
}

// ---------------------------------------------------------------- report

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench(filter: Option<&str>) {
    let connections = env("HTTP_LOAD_CONNECTIONS", 16);
    let rounds = env("HTTP_LOAD_ROUNDS", 3);
    let cases = [
        (Case::Single, env("HTTP_LOAD_SINGLE", 100_000)),
        (Case::Batch100, env("HTTP_LOAD_BATCH", 40_000)),
    ];
    println!(
        "HTTP/1.1 keep-alive, {connections} connections, one request in flight each; \
         servers in child processes; {rounds} rounds, servers alternated"
    );
    println!(
        "{:<16} {:<10} {:>9} {:>12} {:>10} {:>10} {:>14}",
        "case", "server", "requests", "requests/s", "p50", "p99", "server CPU/req"
    );
    let mut ratios: Vec<(&str, Vec<[f64; 4]>)> = Vec::new();
    for (case, total) in cases {
        if filter.is_some_and(|f| !case.name().contains(f)) {
            continue;
        }
        let mut case_ratios = Vec::new();
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                ["rpcwire", "jsonrpsee"]
            } else {
                ["jsonrpsee", "rpcwire"]
            };
            let mut runs = Vec::new();
            for which in order {
                let server = Server::start(which);
                let run = load(&server, case, connections, total);
                server.stop();
                println!(
                    "{:<16} {:<10} {:>9} {:>12.0} {:>10.1?} {:>10.1?} {:>14.2?}",
                    case.name(),
                    which,
                    run.requests,
                    run.rate(),
                    run.percentile(0.5),
                    run.percentile(0.99),
                    run.cpu_per_request(),
                );
                runs.push((which, run));
            }
            let get = |name| &runs.iter().find(|(w, _)| *w == name).unwrap().1;
            let (ours, theirs) = (get("rpcwire"), get("jsonrpsee"));
            case_ratios.push([
                ours.rate() / theirs.rate(),
                theirs.percentile(0.5).as_secs_f64() / ours.percentile(0.5).as_secs_f64(),
                theirs.percentile(0.99).as_secs_f64() / ours.percentile(0.99).as_secs_f64(),
                theirs.cpu_per_request().as_secs_f64() / ours.cpu_per_request().as_secs_f64(),
            ]);
        }
        ratios.push((case.name(), case_ratios));
    }
    println!(
        "\nrpcwire's advantage (jsonrpsee / rpcwire; throughput rpcwire / jsonrpsee), min / median / max over rounds:"
    );
    println!(
        "{:<16} {:>20} {:>20} {:>20} {:>20}",
        "case", "requests/s", "p50 latency", "p99 latency", "server CPU/req"
    );
    for (name, rs) in ratios {
        let mut line = format!("{name:<16}");
        for k in 0..4 {
            let mut v: Vec<f64> = rs.iter().map(|r| r[k]).collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let cell = format!(
                "{:.2} / {:.2} / {:.2}",
                v[0],
                v[v.len() / 2],
                v[v.len() - 1]
            );
            line.push_str(&format!(" {cell:>20}"));
        }
        println!("{line}");
    }
}
