//! Puts a dispatcher (the built-in chain's or the forwarding one) on one
//! port: HTTP `POST` and WebSocket upgrades on the same port, served by one
//! or more workers; and, with `--ipc`, on a Unix socket.

use std::net::SocketAddr;
use std::sync::Arc;

use rpcwire::Dispatcher;
use rpcwire::dispatch::{Observer, SyncOnly, WithAsync};
#[cfg(unix)]
use rpcwire::frame::Concatenated;
use rpcwire::server::http::HttpService;
#[cfg(unix)]
use rpcwire::server::stream::serve_unix_with;
use rpcwire::server::subscriptions::{SlowPolicy, SubscriptionConfig};
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Limits, Metrics, Shutdown, combined};
use tokio::net::{TcpListener, TcpSocket};

use crate::chain::Chain;
use crate::config::Config;
use crate::ops::{Ops, Serving};
use crate::proxy::Gateway;
use crate::{local, proxy};

/// The gateway's services, built once and shared by every worker: one
/// upstream id counter, one pool of upstream connections, one chain; and,
/// with `--metrics`, the counters they report to.
#[derive(Clone)]
pub struct App {
    servers: Servers,
    ops: Option<Arc<Ops>>,
    /// The forwarding state (when forwarding), whose handlers in flight a
    /// shutdown accounts for.
    gateway: Option<Arc<Gateway>>,
}

#[derive(Clone)]
enum Servers {
    /// Forwarding to upstreams.
    Proxy(
        HttpService<Gateway, WithAsync>,
        WsServer<Gateway, WithAsync>,
        Dispatcher<Gateway, WithAsync>,
    ),
    /// The built-in chain.
    Local(
        HttpService<Arc<Chain>, SyncOnly>,
        WsServer<Arc<Chain>, SyncOnly>,
        Dispatcher<Arc<Chain>, SyncOnly>,
    ),
}

impl App {
    /// Builds the services for `config`. Call it inside a runtime: the
    /// built-in chain's block timer (`--block-time`) is spawned on it.
    pub fn new(config: &Config, shutdown: &Shutdown) -> Result<App, Box<dyn std::error::Error>> {
        let limits = config.limits();
        // Counted only when someone reads them.
        let ops = config.metrics.map(|_| Arc::new(Ops::new(shutdown)));
        let observer = ops
            .as_ref()
            .map(|o| Arc::clone(&o.metrics) as Arc<dyn Observer>);
        let metrics = ops.as_ref().map(|o| Arc::clone(&o.metrics));
        if config.proxies() {
            let d = proxy::dispatcher(config, observer)?;
            if let Some(ops) = &ops {
                ops.set_serving(Serving::Proxy(Arc::clone(d.state())));
            }
            let gateway = Some(Arc::clone(d.state()));
            let http = with_http_options(
                HttpService::new(d.clone(), &limits, metrics.clone()),
                config,
            );
            let ws = ws_server(d.clone(), limits, metrics, config, shutdown);
            return Ok(App {
                gateway,
                servers: Servers::Proxy(http, ws, d),
                ops,
            });
        }
        let chain = Arc::new(Chain::new(config.chain_id, config.chain_tx_bytes));
        if let Some(every) = config.block_time {
            let (chain, stop) = (Arc::clone(&chain), shutdown.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.tick().await;
                loop {
                    tokio::select! {
                        _ = ticks.tick() => chain.mine_empty(),
                        _ = stop.triggered() => break,
                    }
                }
            });
        }
        let d = local::dispatcher(chain, config, observer)?;
        if let Some(ops) = &ops {
            ops.set_serving(Serving::Chain(config.chain_id));
        }
        let http = with_http_options(
            HttpService::new(d.clone(), &limits, metrics.clone()),
            config,
        );
        // Subscriptions: the chain's newHeads.
        let ws = ws_server(d.clone(), limits, metrics, config, shutdown);
        Ok(App {
            servers: Servers::Local(http, ws, d),
            ops,
            gateway: None,
        })
    }

    /// What `/metrics` and `/health` read (with `--metrics`).
    pub fn ops(&self) -> Option<&Arc<Ops>> {
        self.ops.as_ref()
    }

    /// The forwarding state, when forwarding: the built-in chain answers
    /// at once, so only forwards can be in flight when a drain ends.
    pub fn gateway(&self) -> Option<&Arc<Gateway>> {
        self.gateway.as_ref()
    }

    /// Serves `listener` until `shutdown`, within `limits`.
    pub async fn run(self, listener: TcpListener, limits: Limits, shutdown: Shutdown) {
        let metrics = self.ops.map(|o| Arc::clone(&o.metrics));
        match self.servers {
            Servers::Proxy(http, ws, d) => {
                // Each worker reaps its own pooled connections: a socket is
                // closed by the runtime that registered it.
                let reaper = tokio::spawn(Arc::clone(d.state()).reap_until(shutdown.clone()));
                combined::serve(listener, http, ws, limits, metrics, shutdown).await;
                reaper.abort();
            }
            Servers::Local(http, ws, _) => {
                combined::serve(listener, http, ws, limits, metrics, shutdown).await
            }
        }
    }

    /// Serves the same dispatcher on the Unix socket `listener` (`--ipc`)
    /// until `shutdown`, drained as the port is: no new connections, the
    /// calls in flight answered within the grace. Values back to back,
    /// each reply followed by a newline, as geth frames them; each
    /// connection holds subscriptions, as a WebSocket connection does.
    #[cfg(unix)]
    pub async fn serve_ipc(
        self,
        listener: tokio::net::UnixListener,
        limits: Limits,
        shutdown: Shutdown,
    ) {
        // The framer's bound is the largest request's (`--max-body`): a
        // larger value is refused (-32600) and skipped to its end.
        let max = limits.max_message_len;
        let framer = move || Concatenated::new().max_frame(max);
        // Connections counted with the port's when metrics are served.
        let metrics = self.ops.map(|o| Arc::clone(&o.metrics));
        // Slow subscribers are told, as over WebSocket (`ws_server`).
        let subs = slow_subscribers_told();
        match self.servers {
            Servers::Proxy(_, _, d) => {
                serve_unix_with(listener, d, framer, limits, metrics, shutdown, subs).await
            }
            Servers::Local(_, _, d) => {
                serve_unix_with(listener, d, framer, limits, metrics, shutdown, subs).await
            }
        }
    }
}

/// `http` with the `--vhosts` list, and the `--cors` policy and `--gzip`
/// threshold if given.
fn with_http_options<S: Send + Sync + 'static, K>(
    mut http: HttpService<S, K>,
    config: &Config,
) -> HttpService<S, K> {
    // Upgrades on the port go through the HTTP service's check too.
    http = http.allowed_hosts(config.vhosts.clone());
    if let Some(cors) = &config.cors {
        http = http.cors(cors.clone());
    }
    if let Some(min_len) = config.gzip_above {
        http = http.gzip(min_len);
    }
    http
}

/// The WebSocket server of dispatcher `d`, with subscriptions, taking
/// upgrades from the pages `--cors` lists: from none without it (as the
/// HTTP side refuses their preflights), where the server's default would
/// take every page's (browsers do not preflight upgrades).
fn ws_server<S: Send + Sync + 'static, K: 'static>(
    d: Dispatcher<S, K>,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    config: &Config,
    shutdown: &Shutdown,
) -> WsServer<S, K> {
    let origins = config.cors.clone().unwrap_or_else(|| {
        rpcwire::server::cors::Cors::origins(std::iter::empty::<&str>()).expect("no origin")
    });
    let ws = WsServer::new(d)
        .origins(origins)
        .limits(limits)
        .subscriptions(slow_subscribers_told())
        .shutdown(shutdown.clone());
    match metrics {
        Some(m) => ws.metrics(m),
        None => ws,
    }
}

/// The subscriptions of the gateway's WebSocket and IPC clients: a client
/// that falls behind has its subscription ended with a -32005 error
/// notification. A gap in `logs` or pending transactions, dropped in
/// silence, is worse than an end the client sees and resubscribes after
/// (geth ends such a connection).
fn slow_subscribers_told() -> SubscriptionConfig {
    SubscriptionConfig {
        policy: SlowPolicy::Close,
        ..SubscriptionConfig::default()
    }
}

/// Starts `n` more workers serving `app` on `addr` (which a socket from
/// [`shared_listener`] holds), each a thread running a one-thread runtime
/// with a listening socket of its own. They stop at `shutdown`, and each
/// keeps its runtime up until every one has drained ([`AllDrained`]).
pub fn spawn_workers(
    app: &App,
    addr: SocketAddr,
    n: usize,
    limits: &Limits,
    shutdown: &Shutdown,
    all_drained: &AllDrained,
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut workers = Vec::with_capacity(n);
    for i in 1..=n {
        // Bound here, before the caller says it listens.
        let listener = shared_listener(addr)?.into_std()?;
        let (app, limits, shutdown) = (app.clone(), limits.clone(), shutdown.clone());
        let all_drained = all_drained.clone();
        // Built here, so that a worker that cannot have one (out of file
        // descriptors) fails the start: one that panicked on its own
        // thread never drained, and a stop waited for it for ever.
        let runtime = one_thread_runtime()?;
        let worker = std::thread::Builder::new()
            .name(format!("gateway-worker-{i}"))
            .spawn(move || {
                crate::h1::set_worker(i);
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => app.run(listener, limits, shutdown).await,
                        Err(e) => {
                            // Not `eprintln!`: a closed stderr is no panic.
                            use std::io::Write as _;
                            let _ = writeln!(std::io::stderr(), "gateway worker {i}: {e}");
                        }
                    }
                    all_drained.drained().await;
                })
            })?;
        workers.push(worker);
    }
    Ok(workers)
}

/// The workers' drains, waited for together: a worker's runtime also runs
/// tasks the others use (the upstream's shared WebSocket connection, its
/// reader and writer, started on the runtime of the worker whose client
/// called first), so none ends before every worker, and the main runtime,
/// has drained. A worker with nothing to drain that ended at once cut that
/// connection under the calls of the others still draining.
#[derive(Clone, Debug)]
pub struct AllDrained {
    left: Arc<std::sync::atomic::AtomicUsize>,
    done: Shutdown,
}

impl AllDrained {
    /// For `runtimes` runtimes, each of which calls [`drained`](Self::drained)
    /// once.
    pub fn new(runtimes: usize) -> Self {
        AllDrained {
            left: Arc::new(std::sync::atomic::AtomicUsize::new(runtimes)),
            done: Shutdown::new(),
        }
    }

    /// This runtime drained: waits for the others to.
    pub async fn drained(&self) {
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.done.trigger();
        }
        self.done.triggered().await;
    }
}

/// A tokio runtime on the current thread, with I/O and timers.
pub fn one_thread_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Claims `addr` for this gateway: binds it once without `SO_REUSEPORT`,
/// so that a port another program listens on (even one that set
/// `SO_REUSEPORT` itself, such as another gateway) is refused with "address
/// in use" instead of being shared, and returns the address with its port
/// (a free one when `addr` asks for port 0). The workers' sockets
/// ([`shared_listener`]) then bind it.
pub fn claim_port(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let probe = reusable_socket(addr)?;
    probe.bind(addr)?;
    probe.local_addr()
}

/// A listening socket on `addr` that other workers may bind too
/// (`SO_REUSEPORT`): the kernel spreads new connections over the workers'
/// sockets, so each connection stays on the worker that accepted it.
pub fn shared_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = reusable_socket(addr)?;
    #[cfg(unix)]
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// A TCP socket of `addr`'s family with `SO_REUSEADDR` set (a restarted
/// gateway binds its port at once, whatever connections linger).
fn reusable_socket(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    Ok(socket)
}
