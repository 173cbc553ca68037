//! An `HttpService` served by rpcwire's `Server` on a loopback port, and
//! its stop: what the HTTP/2 tests (tests/hostile.rs, tests/transports/http2_budget.rs)
//! start before each test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Metrics, Shutdown};
use tokio::net::TcpListener;

/// A server running on `addr`, counting in `metrics`.
pub struct ServedHttp {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

/// Serves `service` on 127.0.0.1 (a free port) under `limits`.
pub async fn serve_http<S: Send + Sync + 'static, K: 'static>(
    service: HttpService<S, K>,
    limits: Limits,
    metrics: Arc<Metrics>,
) -> ServedHttp {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).metrics(metrics.clone());
    let task = tokio::spawn(server.serve(listener, service, shutdown.clone()));
    ServedHttp {
        addr,
        metrics,
        shutdown,
        task,
    }
}

impl ServedHttp {
    /// Shuts the server down; it must stop within `hang`.
    pub async fn stop_within(self, hang: Duration) {
        self.shutdown.trigger();
        tokio::time::timeout(hang, self.task)
            .await
            .expect("the server stops")
            .unwrap();
    }
}
