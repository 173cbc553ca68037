//! An Ethereum JSON-RPC gateway on rpcwire: HTTP and WebSocket on one port,
//! a built-in in-memory chain when it has no upstream, a forwarding proxy
//! (ids rewritten, params and results passed through byte for byte, batches
//! split and merged, a policy per method, subscriptions relayed) when it
//! has some.
//!
//! ```text
//! cargo run --release --features gateway --example gateway                 # built-in chain
//! cargo run --release --features gateway --example gateway -- \
//!     --upstream http://127.0.0.1:8546                                      # in front of a node
//! ```
//!
//! `--help` lists the options. The pieces: `config` (options), `chain` and
//! `local` (the built-in chain and its methods), `upstream` (HTTP and
//! WebSocket clients), `proxy` (policy and forwarding handlers), `errors`
//! (the gateway's own errors), `cache` (the response cache of results
//! that can no longer change), `archive` (calls on old state sent to the
//! `--archive` nodes), `app` (the server), `ops` (`/metrics` and
//! `/health`, with `--metrics`), `ipc` (the `--ipc` socket's path).

/// `eprintln!` that never panics: a log line that cannot be written (its
/// stderr closed, a full disk) is dropped, as the gateway has nowhere
/// else to say it, and the gateway goes on.
macro_rules! log {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod app;
mod archive;
mod cache;
mod chain;
mod config;
mod errors;
mod h1;
#[cfg(unix)]
mod ipc;
mod local;
mod ops;
mod proxy;
mod upstream;

use std::sync::Arc;

use rpcwire::server::Shutdown;

fn main() {
    let config = match config::Config::from_args(std::env::args().skip(1)) {
        Ok(c) => c,
        // The usage text asked for goes to standard output (`--help |
        // less`), errors to standard error.
        Err(message) if message.starts_with("rpcwire gateway") => {
            // Not `println!`, which panics when the output cannot be
            // written (`--help > /dev/full`, a closed pipe).
            use std::io::Write as _;
            let written = writeln!(std::io::stdout(), "{message}");
            std::process::exit(if written.is_ok() { 0 } else { 1 });
        }
        Err(message) => {
            log!("{message}");
            std::process::exit(2);
        }
    };
    // A worker per core by default, each a one-thread runtime with a
    // listening socket of its own on the same port: a connection lives on
    // the worker that accepted it, with no work stealing between threads
    // (in the load test: 24-31 µs of user CPU per forwarded request at one
    // connection against 33-38 µs on tokio's multi-thread runtime, level at
    // sixteen). The services are built once and shared.
    // `--threads 1` runs everything on the main thread.
    let workers = config.threads.max(1);
    let runtime = match app::one_thread_runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            log!("gateway: a tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let outcome = runtime.block_on(async move {
        // The error names the option: `--listen` and `--metrics` fail alike.
        let listen = |e: std::io::Error| format!("--listen {}: {e}", config.listen);
        let listener = app::shared_listener(app::claim_port(config.listen).map_err(listen)?)
            .map_err(listen)?;
        let addr = listener.local_addr()?;
        let mode = if config.proxies() {
            format!("forwarding to {}", upstreams(&config))
        } else {
            format!(
                "built-in chain {}, anvil's dev accounts funded",
                config.chain_id
            )
        };
        let shutdown = Shutdown::new();
        // Listened for before the port is announced: a signal right after
        // it is a stop, never the default action (death on the spot).
        let mut signals = Signals::new()?;
        let app = app::App::new(&config, &shutdown)?;
        // Bound before the port is announced; its file is removed on every
        // way out (dropped on an error, removed before an exit).
        #[cfg(unix)]
        let ipc = match &config.ipc {
            Some(path) => {
                let (listener, file) = ipc::listen(path)?;
                let served = app.clone().serve_ipc(listener, config.limits(), shutdown.clone());
                Some((Arc::new(file), tokio::spawn(served)))
            }
            None => None,
        };
        // Weak: an error return drops the one strong reference, which
        // removes the file.
        #[cfg(unix)]
        let ipc_file = ipc.as_ref().map(|(file, _)| Arc::downgrade(file));
        let gateway = app.gateway().cloned();
        let (stop, grace) = (shutdown.clone(), config.shutdown_grace);
        let calls = gateway.clone();
        tokio::spawn(async move {
            let first = signals.next().await;
            log!(
                "gateway: {}: stopping; requests in flight have {} ms (a second signal exits at once)",
                first.name,
                grace.as_millis()
            );
            if let Some(gateway) = &calls {
                gateway.calls.draining(grace);
            }
            stop.trigger();
            let second = signals.next().await;
            log!("gateway: {}: exiting at once", second.name);
            #[cfg(unix)]
            if let Some(file) = ipc_file.and_then(|f| f.upgrade()) {
                file.remove();
            }
            std::process::exit(second.status);
        });
        let mut limits = config.limits();
        // The connection limit is the gateway's, shared out.
        limits.max_connections = limits.max_connections.div_ceil(workers);
        let all_drained = app::AllDrained::new(workers);
        let others =
            app::spawn_workers(&app, addr, workers - 1, &limits, &shutdown, &all_drained)
                .map_err(|e| format!("starting {workers} workers (--threads): {e}"))?;
        if let (Some(at), Some(ops)) = (config.metrics, app.ops()) {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| format!("--metrics {at}: {e}"))?;
            let at = listener.local_addr()?;
            // Up through the drain (`/health` says it drains, the last
            // counters can be scraped): its stop is never triggered, the
            // process's exit closes it.
            tokio::spawn(ops::serve(listener, Arc::clone(ops), Shutdown::new()));
            // Before the line scripts wait for: up when that one is out.
            log!("gateway metrics on http://{at}/metrics and http://{at}/health");
        }
        #[cfg(unix)]
        if let Some((file, _)) = &ipc {
            // Before the line scripts wait for, as the metrics line.
            log!("gateway IPC on {}", file.path().display());
        }
        // Scripts wait for this line.
        log!(
            "gateway listening on http://{addr} and ws://{addr} ({mode}; {workers} worker{})",
            if workers == 1 { "" } else { "s" }
        );
        app.run(listener, limits, shutdown).await;
        // Its connections drained as the port's, in the same grace.
        #[cfg(unix)]
        let ipc = match ipc {
            Some((file, served)) => {
                let _ = served.await;
                Some(file)
            }
            None => None,
        };
        // Then the workers': off this runtime's thread (blocking it while
        // another worker still drained left the signal task unpolled, and
        // a second signal unheard).
        all_drained.drained().await;
        for worker in others {
            let _ = tokio::task::spawn_blocking(move || worker.join()).await;
        }
        #[cfg(unix)]
        if let Some(file) = ipc {
            file.remove();
        }
        let abandoned = gateway.map_or(0, |g| g.calls.abandoned());
        if abandoned > 0 {
            log!(
                "gateway: the shutdown grace ({} ms) ran out: {abandoned} call{} abandoned unanswered; exiting with status {ABANDONED}",
                config.shutdown_grace.as_millis(),
                if abandoned == 1 { "" } else { "s" }
            );
            std::process::exit(ABANDONED);
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    if let Err(e) = outcome {
        log!("gateway: {e}");
        #[cfg(unix)]
        if e.is::<ipc::Refused>() {
            std::process::exit(2);
        }
        std::process::exit(1);
    }
}

/// The exit status of a stop whose grace ran out with calls still in
/// flight: a failure for service managers, told apart from a failure to
/// start (1) and a bad command line (2).
const ABANDONED: i32 = 3;

/// A stop signal: its name, and the status a process killed by it exits
/// with (128 and its number, as shells report it).
struct Stop {
    name: &'static str,
    status: i32,
}

/// The signals that stop the gateway: SIGINT (Ctrl-C) and, on Unix,
/// SIGTERM, which service managers (Docker, Kubernetes, systemd) stop a
/// service with.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for them from now on (inside a runtime).
    fn new() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next one to arrive.
    async fn next(&mut self) -> Stop {
        const INT: Stop = Stop {
            name: "SIGINT",
            status: 130,
        };
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => INT,
                _ = self.term.recv() => Stop { name: "SIGTERM", status: 143 },
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            INT
        }
    }
}

fn upstreams(config: &config::Config) -> String {
    let mut names = upstream::distinct_names(&config.upstreams);
    if let Some(ws) = &config.upstream_ws {
        names.push(format!("{} (WebSocket)", upstream::display_name(ws)));
    }
    for archive in &config.archives {
        names.push(format!(
            "{} (archive, state older than {} blocks)",
            upstream::display_name(archive),
            config.state_blocks
        ));
    }
    names.join(", ")
}
