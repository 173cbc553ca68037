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
//! (the gateway's own errors), `app` (the server).

mod app;
mod chain;
mod config;
mod errors;
mod h1;
mod local;
mod proxy;
mod upstream;

use rpcwire::server::Shutdown;

fn main() {
    let config = match config::Config::from_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(if message.starts_with("rpcwire gateway") {
                0
            } else {
                2
            });
        }
    };
    // A worker per core by default; `--threads 1` runs on one thread (less
    // CPU per request, but one thread's share of a busy machine).
    let mut runtime = if config.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(config.threads);
        b
    };
    let runtime = runtime.enable_all().build().expect("a tokio runtime");
    let outcome = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let mode = if config.proxies() {
            format!("forwarding to {}", upstreams(&config))
        } else {
            format!(
                "built-in chain {}, anvil's dev accounts funded",
                config.chain_id
            )
        };
        // Scripts wait for this line.
        eprintln!("gateway listening on http://{addr} and ws://{addr} ({mode})");
        let shutdown = Shutdown::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.trigger();
        });
        app::serve(config, listener, shutdown).await
    });
    if let Err(e) = outcome {
        eprintln!("gateway: {e}");
        std::process::exit(1);
    }
}

fn upstreams(config: &config::Config) -> String {
    let mut names: Vec<String> = config
        .upstreams
        .iter()
        .map(|u| upstream::display_name(u))
        .collect();
    if let Some(ws) = &config.upstream_ws {
        names.push(format!("{} (WebSocket)", upstream::display_name(ws)));
    }
    names.join(", ")
}
