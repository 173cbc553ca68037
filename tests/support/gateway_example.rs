// The gateway example's modules, compiled into an integration test (an
// example has no library to link against), and a gateway started on a
// port of its own. Included at the root of the gateway test binaries with
// `include!`, as the modules must sit at the crate root (the example's
// code names them `crate::config`, `crate::upstream`, ...).

#[path = "../../examples/gateway/app.rs"]
mod app;
#[path = "../../examples/gateway/archive.rs"]
mod archive;
#[path = "../../examples/gateway/cache.rs"]
mod cache;
#[path = "../../examples/gateway/chain.rs"]
mod chain;
#[path = "../../examples/gateway/config.rs"]
mod config;
#[path = "../../examples/gateway/errors.rs"]
mod errors;
#[path = "../../examples/gateway/h1.rs"]
mod h1;
#[path = "../../examples/gateway/local.rs"]
mod local;
#[path = "../../examples/gateway/ops.rs"]
mod ops;
#[path = "../../examples/gateway/proxy.rs"]
mod proxy;
#[path = "../../examples/gateway/upstream.rs"]
mod upstream;

/// A gateway running on a port of its own; stopped when dropped.
struct Gateway {
    addr: std::net::SocketAddr,
    shutdown: rpcwire::server::Shutdown,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// Starts the gateway with `config` on a free loopback port.
async fn start(config: config::Config) -> Gateway {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = rpcwire::server::Shutdown::new();
    let app = app::App::new(&config, &shutdown).unwrap();
    tokio::spawn(app.run(listener, config.limits(), shutdown.clone()));
    Gateway { addr, shutdown }
}
